package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"ilnp/internal/datapath"
	"ilnp/internal/encap"
	"ilnp/internal/ilcc"
	"ilnp/internal/locverify"
	"ilnp/internal/natkeep"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// Cross-family operation (issue 14, config ipv4-locators): the IPv4 addresses of the ILNP
// interfaces are locators (encap.L32) in the ILCC beside the L64s, and sessions whose active
// pair is IPv4 run as ILNPv6 in UDP/IPv4 (bpf/lib/encap.h). What the daemon adds:
//   - the IPv4 addresses from netlink (encap.WatchIPv4) as local locators with their lease
//     lifetimes, written to the datapath with their interface (the outer next hop is the
//     kernel's FIB lookup on that interface), and the best one as the datapath's local IPv4
//     locator for IPv6-active sessions towards IPv4-only peers;
//   - an IPv6 route to each peer through the active interface even when that interface has
//     IPv4 only: the kernel resolves an IPv6 next hop before the datapath sees the packet, so
//     peer routes on an IPv4 locator's interface go via encapNextHop, a permanent neighbour
//     the daemon installs there (the datapath encapsulates and redirects every such packet to
//     the real IPv4 next hop);
//   - route MTU and MSS for the encapsulation on every peer route (newHost): a session may
//     change family at any time and TCP fixes its peer's MSS when it opens;
//   - the NAT endpoint of a correspondent from its LUs (encap.AsSeen), and its NAT's
//     rebindings from its nonce-verified packets (ilcc.Cache.Roam);
//   - keepalives on idle IPv4 sessions (natkeep).

// encapNextHop is the IPv6 next hop of peer routes on an interface whose locator is IPv4
// (fe80::c027: 0xc027 is 49191, the default encapsulation port).
var encapNextHop = netip.MustParseAddr("fe80::c027")

// encapHeadroom is what the encapsulation adds to the route MTU reduction when IPv4 locators
// are on: 1500 - 8 (nonce option) - 28 (IPv4 + UDP) = 1464, MSS 1404 (encap.InnerMTU).
func encapHeadroom(on bool) int {
	if on {
		return encap.Overhead
	}
	return 0
}

// setupEncap writes the datapath's encapsulation configuration: on with the configured port,
// roaming accepted, or off (port 0) so that a datapath adopted from an ilnpd with IPv4
// locators stops encapsulating.
func (n *Node) setupEncap() error {
	// ILNPv6 in UDP/IPv6 (encap6.go) is on whenever a port is: any IPv6 path may drop the
	// nonce header.
	c := datapath.EncapConfig{Port6: n.cfg.EncapPort}
	if n.cfg.IPv4Locators {
		c = datapath.EncapConfig{Port: n.cfg.EncapPort, Roam: true, Port6: n.cfg.EncapPort}
	}
	if err := n.dp.SetEncap(c); err != nil {
		return fmt.Errorf("encapsulation: %w", err)
	}
	n.encapLocal = 0
	return nil
}

// watchIPv4 starts the IPv4 address watch when IPv4 locators are on; the returned channel is
// nil otherwise (a nil channel never delivers, so the loop's case stays quiet).
func (n *Node) watchIPv4(ctx context.Context, wg *sync.WaitGroup, errc chan<- error) <-chan encap.IPv4Event {
	if !n.cfg.IPv4Locators {
		return nil
	}
	out := make(chan encap.IPv4Event, 64)
	n.v4 = &ipv4Watch{ctx: ctx, wg: wg, events: out, waiting: map[wire.L64]bool{}}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := encap.WatchIPv4(ctx, encap.WatchOptions{Interfaces: n.cfg.Interfaces, Port: n.cfg.EncapPort}, out); err != nil {
			errc <- fmt.Errorf("IPv4 locators: %w", err)
		}
	}()
	return out
}

// ipv4Watch is the loop's state of the IPv4 address watch.
type ipv4Watch struct {
	ctx    context.Context
	wg     *sync.WaitGroup
	events chan encap.IPv4Event
	// waiting: new IPv4 locators whose interface has no IPv4 default route yet; a goroutine
	// hands the event back when it has one (or after routeWait).
	waiting map[wire.L64]bool
}

// routeWait bounds the wait for a new IPv4 locator's route: a DHCP client adds the router
// milliseconds after the address, a loaded machine takes longer; an interface that never
// gets a default route (peers on its link only) has its locators used after this long.
const routeWait = 3 * time.Second

// deferUntilRouted holds back a new IPv4 locator until its interface has an IPv4 default
// route, without blocking the loop, and reports whether it did: the datapath's next hop for
// encapsulated packets is the FIB's, so a locator used before then loses its packets (the LU
// first, retransmitted a second later).
func (n *Node) deferUntilRouted(ev encap.IPv4Event) bool {
	w := n.v4
	if w == nil {
		return false
	}
	if w.waiting[ev.Locator] {
		delete(w.waiting, ev.Locator) // handed back: use it now, routed or not
		return false
	}
	if hasIPv4DefaultRoute(ev.Ifindex) {
		return false
	}
	w.waiting[ev.Locator] = true
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		deadline := time.Now().Add(routeWait)
		for !hasIPv4DefaultRoute(ev.Ifindex) && time.Now().Before(deadline) && w.ctx.Err() == nil {
			time.Sleep(2 * time.Millisecond)
		}
		select {
		case w.events <- ev:
		case <-w.ctx.Done():
		}
	}()
	n.log.Info("new IPv4 locator waits for its interface's default route", "iface", ev.Iface, "addr", ev.Addr, "limit", routeWait)
	return true
}

// hasIPv4DefaultRoute reports whether the main table has an IPv4 default route through
// ifindex (any goroutine: its own netlink socket).
func hasIPv4DefaultRoute(ifindex int) bool {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: ifindex}, netlink.RT_FILTER_OIF)
	if err != nil {
		return false
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() {
			return true
		}
	}
	return false
}

// onIPv4Event feeds an IPv4 address into the ILCC as a locator: the lease's lifetimes as an
// RA's prefix lifetimes, a static address never expiring.
func (n *Node) onIPv4Event(ev encap.IPv4Event) {
	now := time.Now()
	if _, ok := n.ifaces[ev.Ifindex]; !ok {
		return
	}
	if ev.Gone {
		n.log.Info("IPv4 locator gone", "iface", ev.Iface, "addr", ev.Addr)
		n.apply(n.cache.RemoveLocal(ev.Locator, "IPv4 address gone from "+ev.Iface, now), now)
		return
	}
	if ifc, err := net.InterfaceByIndex(ev.Ifindex); err != nil || ifc.Flags&net.FlagRunning == 0 {
		n.log.Debug("IPv4 address on a link that is down: ignored", "iface", ev.Iface, "addr", ev.Addr)
		return
	}
	_, known := n.locals[ev.Locator]
	if !known && n.deferUntilRouted(ev) {
		return
	}
	if !known && !n.host.hasIPv4Address(ev.Ifindex, ev.Addr.Addr()) {
		return // gone while it waited for its route
	}
	n.prepareIPv4Locator(ev.Locator, ev.Ifindex)
	valid, preferred := ev.Valid, ev.Preferred
	if valid == 0 {
		valid, preferred = ilcc.Infinite, ilcc.Infinite
	}
	if _, known := n.locals[ev.Locator]; !known {
		n.log.Info("IPv4 locator", "iface", ev.Iface, "addr", ev.Addr, "locator", ev.Locator, "valid", valid)
	}
	n.updateLocal(ev.Locator, ev.Ifindex, encapNextHop, valid, preferred, now)
}

// adoptStaticIPv4 adds the IPv4 addresses already on the ILNP interfaces with the same
// learning time as the static IPv6 locators, so the policy's tie-break (IPv6 first) decides
// between them, not which netlink answer came first.
func (n *Node) adoptStaticIPv4(now time.Time) {
	if !n.cfg.IPv4Locators {
		return
	}
	for ifindex, name := range n.ifaces {
		addrs, err := n.host.ipv4Addresses(ifindex)
		if err != nil {
			n.log.Warn("IPv4 locators", "iface", name, "err", err)
			continue
		}
		for _, a := range addrs {
			loc, err := encap.L32(netip.AddrPortFrom(a.addr, n.cfg.EncapPort))
			if err != nil {
				continue
			}
			n.prepareIPv4Locator(loc, ifindex)
			n.log.Info("IPv4 locator", "iface", name, "addr", a.addr, "locator", loc)
			n.updateLocal(loc, ifindex, encapNextHop, a.valid, a.preferred, now)
		}
	}
}

// prepareIPv4Locator readies the host for an IPv4 locator on ifindex: the neighbour peer
// routes go via, and [L32:NID] on lo. Decapsulated Locator Updates and their ACKs keep their
// wire addresses (the daemon needs the locator they came from), so they arrive addressed to
// [L32:NID], which the kernel delivers only to an address of its own.
func (n *Node) prepareIPv4Locator(loc wire.L64, ifindex int) {
	if err := n.host.encapNeighbour(ifindex); err != nil {
		n.log.Warn("IPv4 locator: next hop for peer routes", "ifindex", ifindex, "err", err)
	}
	// Without the wait the lab's IPv4 -> IPv4 move lost its first LU-ACK to Ip6InNoRoutes.
	n.addLocatorAddress(wire.ILV{Locator: loc, NID: n.nid}.Addr())
}

// publishesL32 reports whether the DNS rendezvous publishes this node's IPv4 locators as L32
// records (RFC 6742 s.2.2): with ipv4-locators on and the default encapsulation port, since an
// L32 record has no port and a correspondent reads it as encap.DefaultPort.
func (n *Node) publishesL32() bool {
	return n.cfg.IPv4Locators && n.cfg.EncapPort == encap.DefaultPort
}

// publishableL32 reports whether the IPv4 locator l goes into DNS (publishesL32, l32InDNS).
func (n *Node) publishableL32(l wire.L64) bool {
	return n.publishesL32() && l32InDNS(l)
}

// l32InDNS reports whether an IPv4 locator may be published: on encap.DefaultPort, and an
// address others can reach. A private (RFC 1918), shared (RFC 6598, carrier-grade NAT),
// link-local or loopback address is this side of a NAT or of no use beyond its link: in a
// zone anyone may query it would send correspondents elsewhere to some other host, or
// nowhere (a node behind a NAT is reached through the sessions it has, not by name).
func l32InDNS(l wire.L64) bool {
	ep, ok := encap.Endpoint(l)
	if !ok || ep.Port() != encap.DefaultPort {
		return false
	}
	a := ep.Addr()
	return a.IsGlobalUnicast() && !a.IsPrivate() && !sharedAddressSpace.Contains(a)
}

// sharedAddressSpace is RFC 6598's 100.64.0.0/10, the addresses between a carrier-grade NAT
// and its customers.
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

// adoptedLocal checks a local locator a previous ilnpd left in the datapath (adoptLocals):
// whether it is still there, its lifetimes and its next hop. An IPv6 one by its [L64:NID]
// address on the interface. An IPv4 one is adopted, keeping its place in the policy's order,
// when IPv4 locators are still on with the same port and its address is still on the running
// interface; its lifetimes are the address's, its next hop encapNextHop as when it was
// learned. Relearning it instead made it the newest locator, which the policy may switch to: a
// move, and an LU to every correspondent, caused by nothing but the restart.
func (n *Node) adoptedLocal(l datapath.LocalLocator, addr netip.Addr) (router netip.Addr, valid, preferred time.Duration, ok bool) {
	ep, isIPv4 := encap.Endpoint(l.Locator)
	if !isIPv4 {
		valid, preferred, ok = n.host.addressLifetimes(l.Ifindex, addr)
		return l.NextHop, valid, preferred, ok
	}
	if !n.cfg.IPv4Locators || ep.Port() != n.cfg.EncapPort {
		return netip.Addr{}, 0, 0, false
	}
	if ifc, err := net.InterfaceByIndex(l.Ifindex); err != nil || ifc.Flags&net.FlagRunning == 0 {
		return netip.Addr{}, 0, 0, false
	}
	addrs, err := n.host.ipv4Addresses(l.Ifindex)
	if err != nil {
		return netip.Addr{}, 0, 0, false
	}
	for _, a := range addrs {
		if a.addr == ep.Addr() {
			return encapNextHop, a.valid, a.preferred, a.valid > 0
		}
	}
	return netip.Addr{}, 0, 0, false
}

// putEncapLocal writes an IPv4 local locator into the datapath (syncLocals).
func (n *Node) putEncapLocal(l ilcc.Local) error {
	ep, ok := encap.Endpoint(l.Locator)
	if !ok {
		return fmt.Errorf("locator %v is not IPv4", l.Locator)
	}
	_, err := n.dp.PutLocalIPv4Locator(ep, datapathState(l.State), l.IfIndex, netip.Addr{})
	return err
}

// syncEncapLocal makes the best usable IPv4 locator the datapath's source for encapsulated
// packets of sessions whose own active locator is IPv6.
func (n *Node) syncEncapLocal(locals []ilcc.Local) {
	if !n.cfg.IPv4Locators {
		return
	}
	var best wire.L64
	for _, l := range locals {
		if encap.IsL32(l.Locator) && l.State.Usable() {
			best = l.Locator
			break
		}
	}
	if best == n.encapLocal {
		return
	}
	if err := n.dp.SetEncap(datapath.EncapConfig{Port: n.cfg.EncapPort, Roam: true, LocalL32: best, Port6: n.cfg.EncapPort}); err != nil {
		n.log.Warn("encapsulation source", "err", err)
		return
	}
	n.encapLocal = best
}

// activeIsIPv4 reports whether the ILCC's active local locator is IPv4.
func (n *Node) activeIsIPv4() bool {
	a, ok := n.cache.Active()
	return ok && encap.IsL32(a.Locator)
}

// reachableLocator is the locator a new session with a named peer starts on: the most
// preferred of its I-LVs (ilvs is ordered; the application's address is the first's) whose
// family this node can send from now (an IPv4 one when the active locator is IPv4, an IPv6
// one otherwise), else the first.
func (n *Node) reachableLocator(ilvs []wire.RankedILV) wire.L64 {
	first := ilvs[0].ILV
	v4 := n.activeIsIPv4()
	if encap.IsL32(first.Locator) == v4 {
		return first.Locator
	}
	for _, v := range ilvs {
		if v.ILV.NID == first.NID && encap.IsL32(v.ILV.Locator) == v4 {
			return v.ILV.Locator
		}
	}
	return first.Locator
}

// translateLU gives a Locator Update that came from an IPv4 endpoint the locators as this
// node can use them (encap.AsSeen); nothing changes for one from an IPv6 locator.
func translateLU(upd wire.LocatorUpdate, src wire.L64) wire.LocatorUpdate {
	upd.Locators = encap.AsSeen(upd.Locators, src)
	return upd
}

// roam follows a correspondent's NAT rebinding: a nonce-verified packet that came from an
// IPv4 endpoint its set does not list while the session runs over IPv4 (the datapath reports
// it as an unknown locator, and passes it: AcceptUnknownLocator; ilcc.Cache.Roam decides).
func (n *Node) roam(ev datapath.Event) {
	if !n.cfg.IPv4Locators {
		return
	}
	src, err := wire.ILVFromAddr(ev.Src)
	if err != nil || !encap.IsL32(src.Locator) || src.NID != ev.RemoteNID {
		return
	}
	now := time.Now()
	eff, err := n.cache.Roam(ev.RemoteNID, src.Locator, now)
	if err != nil {
		n.log.Debug("NAT endpoint not learned", "peer", ev.RemoteNID, "err", err)
		return
	}
	if len(eff.Bindings) > 0 {
		n.count("encap_roamed")
		n.emit(timeline.Event{MonoNS: int64(ev.Ns), Kind: timeline.ActiveLocator, Peer: ev.RemoteNID.String(),
			Locator: src.Locator.String(), Detail: "remote NAT endpoint from a nonce-verified packet"})
	}
	eff.Events = nil // the timeline has it (above)
	var later []locverify.Action
	if len(eff.Bindings) > 0 {
		later = n.lvRoamed(ev.RemoteNID, src.Locator) // limited before anything leaves towards it
	}
	n.apply(eff, now)
	n.performLV(later)
}

// startKeepalive sends natkeep keepalives on idle IPv4 sessions until ctx ends.
func (n *Node) startKeepalive(ctx context.Context, wg *sync.WaitGroup) {
	if !n.cfg.IPv4Locators || n.cfg.NATKeepalive <= 0 {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			err := n.keepalive(ctx)
			if err == nil {
				return
			}
			n.log.Warn("NAT keepalives", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(n.cfg.NATKeepalive):
			}
		}
	}()
}

func (n *Node) keepalive(ctx context.Context) error {
	conn, err := icmp.ListenPacket("ip6:ipv6-icmp", "::")
	if err != nil {
		return fmt.Errorf("keepalive socket: %w", err)
	}
	// Send only: without a filter a raw ICMPv6 socket gets a copy of every ICMPv6 message.
	var none ipv6.ICMPFilter
	none.SetAll(true)
	if err := conn.IPv6PacketConn().SetICMPFilter(&none); err != nil {
		conn.Close()
		return fmt.Errorf("keepalive socket filter: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()
	k := natkeep.Keeper{Interval: n.cfg.NATKeepalive, Sessions: n.dp.Sessions, Failed: func(err error) {
		n.count("natkeep_errors")
		n.log.Warn("NAT keepalive", "err", err)
	}}
	err = k.Run(ctx, conn)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// addEncapStats adds the datapath's encapsulation counters (bpf/lib/encap.h) to ShowStats,
// prefixed "dp_" like the others.
func (n *Node) addEncapStats(stats map[string]uint64) error {
	ec, err := n.dp.EncapCounters()
	if err != nil {
		return fmt.Errorf("encapsulation counters: %w", err)
	}
	for name, v := range ec {
		stats["dp_"+name] = v
	}
	return nil
}

// encapNeighbour installs encapNextHop as a permanent neighbour on ifindex with the
// interface's own MAC address: peer routes through an IPv4-only interface go via it, and no
// frame is ever sent to it (the datapath encapsulates and redirects each such packet).
func (h *host) encapNeighbour(ifindex int) error {
	link, err := h.nl.LinkByIndex(ifindex)
	if err != nil {
		return fmt.Errorf("interface %d: %w", ifindex, err)
	}
	neigh := &netlink.Neigh{
		LinkIndex:    ifindex,
		Family:       unix.AF_INET6,
		State:        netlink.NUD_PERMANENT,
		IP:           encapNextHop.AsSlice(),
		HardwareAddr: link.Attrs().HardwareAddr,
	}
	if err := h.nl.NeighSet(neigh); err != nil {
		return fmt.Errorf("neighbour %s on %s: %w", encapNextHop, link.Attrs().Name, err)
	}
	h.encapNeighs[ifindex] = true
	return nil
}

// removeEncapNeighbours deletes what encapNeighbour installed (close).
func (h *host) removeEncapNeighbours() error {
	var errs []error
	for ifindex := range h.encapNeighs {
		neigh := &netlink.Neigh{LinkIndex: ifindex, Family: unix.AF_INET6, IP: encapNextHop.AsSlice()}
		if err := h.nl.NeighDel(neigh); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("remove neighbour %s on %d: %w", encapNextHop, ifindex, err))
		}
		delete(h.encapNeighs, ifindex)
	}
	return errors.Join(errs...)
}

// hasIPv4Address reports whether a is still an address of ifindex.
func (h *host) hasIPv4Address(ifindex int, a netip.Addr) bool {
	addrs, err := h.ipv4Addresses(ifindex)
	if err != nil {
		return false
	}
	for _, x := range addrs {
		if x.addr == a {
			return true
		}
	}
	return false
}

type ipv4Address struct {
	addr             netip.Addr
	valid, preferred time.Duration
}

// ipv4Addresses lists the global IPv4 addresses on ifindex with their remaining lifetimes
// (ilcc.Infinite for a permanent one).
func (h *host) ipv4Addresses(ifindex int) ([]ipv4Address, error) {
	link, err := h.nl.LinkByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("interface %d: %w", ifindex, err)
	}
	addrs, err := h.nl.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("IPv4 addresses of %s: %w", link.Attrs().Name, err)
	}
	life := func(s int) time.Duration {
		if s < 0 || uint32(s) == 0xffffffff {
			return ilcc.Infinite
		}
		return time.Duration(s) * time.Second
	}
	var out []ipv4Address
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if !ip.Is4() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || a.Scope != unix.RT_SCOPE_UNIVERSE {
			continue
		}
		out = append(out, ipv4Address{addr: ip, valid: life(a.ValidLft), preferred: life(a.PreferedLft)})
	}
	return out, nil
}
