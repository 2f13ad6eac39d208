package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"ilnp/internal/routewrite"
	"ilnp/internal/wire"
)

// host owns the kernel state the daemon changes outside the BPF maps: identity addresses on lo
// and per-peer routes with MTU headroom (removed again in close), and the addresses it finds on
// the ILNP interfaces at start.
type host struct {
	nl         *netlink.Handle
	lo         netlink.Link
	identities map[netip.Addr]bool
	// peerRoutes is kept by NID: unroutePeer runs for every session that closes, and a pass
	// over every route there made a flood's expiry O(sessions^2) (issue 28). It is the
	// routes as written: a write is queued on rw and recorded at once, and one the kernel
	// then refuses is marked stale (routeFailed).
	peerRoutes routeTable
	// rw writes the peer routes in batches, flushed at the end of each loop turn
	// (flushRoutes; issue 28). stale are the peers whose last write the kernel refused:
	// their next routePeer writes the route whatever the record says.
	rw    *routewrite.Writer
	stale map[netip.Addr]bool
	// queuedAt is when the oldest write rw holds was queued (endTurn).
	queuedAt time.Time
	// reroute is a move's pass over every peer route, a share a loop turn (rerouteStep).
	reroute reroutePass
	log     *slog.Logger
	// lastRoute is the peerRoute recorded last, which peers with an equal route share (most
	// routes are alike: a pointer each instead of 72 bytes each; issue 28). Records are never
	// changed in place.
	lastRoute *peerRoute
	mtu       int // route MTU for ILNP peers: link MTU minus the nonce option
	// encap6 are the correspondents with a locator pair on ILNPv6 in UDP/IPv6: their routes'
	// MTU leaves room for its outer headers too (encap6.go).
	encap6 map[wire.NID]bool
	// clamps are the session-view destinations whose path leaves them less than IPv6's
	// 1280-byte minimum (internal/pmtu): their peer route carries that MTU, locked (clampPeer).
	clamps map[netip.Addr]int
	// encapNeighs are the interfaces with encapNextHop as a permanent neighbour (xfamily.go).
	encapNeighs map[int]bool

	// nid-mode ephemeral (ephemeral.go): the source NID of the route to a peer address (the
	// kernel then picks [active:NID] as the source of new sockets towards it), the active
	// locator those sources use, and the ephemeral addresses on the ILNP interfaces (by
	// interface index) that make the router's neighbour discovery find them.
	peerSrc map[netip.Addr]wire.NID
	active  wire.L64
	onLink  map[netip.Addr]int
	// viewOf is, for a correspondent's session view, this node's own view of the session:
	// the route's source hint, so that a new socket towards the correspondent joins the
	// session (the datapath translates only the session's address pair) however the node
	// moved since, or when its view is its IPv4 locator's (a correspondent behind a NAT
	// reached it there). The ILCC holds it (Node.sessionViewOf): a map of its own here was
	// some 100 bytes a session (issue 28). nil: none.
	viewOf func(peer netip.Addr) (netip.Addr, bool)
	// existing: the kernel's peer routes when a restarted daemon adopts them (loadRoutes);
	// routePeer takes one that is already as it would write it instead of writing it again.
	existing map[netip.Addr]*netlink.Route
}

func newHost(headroom int) (*host, error) {
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	lo, err := nl.LinkByName("lo")
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("loopback: %w", err)
	}
	rw, err := routewrite.Open(0)
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("peer routes: %w", err)
	}
	return &host{
		nl:          nl,
		rw:          rw,
		stale:       map[netip.Addr]bool{},
		log:         slog.New(slog.DiscardHandler),
		lo:          lo,
		identities:  map[netip.Addr]bool{},
		peerRoutes:  newRouteTable(),
		encapNeighs: map[int]bool{},
		mtu:         1500 - headroom,
		encap6:      map[wire.NID]bool{},
		clamps:      map[netip.Addr]int{},
		peerSrc:     map[netip.Addr]wire.NID{},
		onLink:      map[netip.Addr]int{},
	}, nil
}

// addIdentity keeps addr as a /128 on lo, so sockets bound to it survive the interface that
// carried its locator going down (the kernel deletes an interface's addresses then, and
// packets of sockets bound to a deleted address are dropped).
func (h *host) addIdentity(addr netip.Addr) error {
	if h.identities[addr] {
		return nil
	}
	a := &netlink.Addr{
		IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(128, 128)},
		Flags: unix.IFA_F_NODAD,
	}
	if h.isEphemeral(addr) {
		deprecate(a)
	}
	if err := h.nl.AddrReplace(h.lo, a); err != nil {
		return fmt.Errorf("identity %s on lo: %w", addr, err)
	}
	h.identities[addr] = true
	return nil
}

// waitReceivable waits up to limit for the kernel's local route to addr and says whether it
// came. An address added with optimistic DAD (or none) is listed at once, but the kernel only
// inserts its local route from its DAD work a few milliseconds later; until then packets to
// it (the LU-ACK, the correspondent's first packets) are answered with Destination
// Unreachable. Seen in the integration test: the LU-ACK refused, acknowledged only by the
// retransmission 1 s later.
func (h *host) waitReceivable(addr netip.Addr, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		routes, err := h.nl.RouteGet(addr.AsSlice())
		if err == nil && len(routes) > 0 && routes[0].Type == unix.RTN_LOCAL {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func (h *host) removeIdentity(addr netip.Addr) error {
	if !h.identities[addr] {
		return nil
	}
	h.flushRoutes() // routes queued with it as their source first, as they were asked for
	delete(h.identities, addr)
	a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(128, 128)}}
	if err := h.nl.AddrDel(h.lo, a); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
		return fmt.Errorf("remove identity %s: %w", addr, err)
	}
	return nil
}

// routePeer gives a peer's session-view address a host route through the active locator's
// interface and router, with the MTU lowered by the nonce option and the advertised MSS to
// match: without the headroom a full-size packet grows past the link MTU when the datapath
// inserts the option and the veth drops it silently. The datapath redirects packets to the
// active interface anyway; this route is what sizes them.
func (h *host) routePeer(peer netip.Addr, ifindex int, router netip.Addr) error {
	return h.writePeerRoute(peer, ifindex, router, false)
}

// writePeerRoute is routePeer; force writes the route even when the daemon's record says it
// is in place (the kernel may have taken it away).
func (h *host) writePeerRoute(peer netip.Addr, ifindex int, router netip.Addr, force bool) error {
	if ifindex == 0 {
		return nil
	}
	pr := peerRoute{link: ifindex, mtu: h.mtu}
	if ilv, err := wire.ILVFromAddr(peer); err == nil && h.encap6[ilv.NID] {
		pr.mtu -= encap6Overhead
	}
	if c := h.clamps[peer]; c != 0 && c < pr.mtu {
		pr.mtu, pr.lock = c, true
	}
	if router.IsValid() {
		pr.gw = router
	}
	if view, ok := h.sessionView(peer); ok && h.identities[view] {
		pr.src = view
	} else if nid := h.peerSrc[peer]; nid != 0 && h.active != 0 {
		pr.src = wire.ILV{Locator: h.active, NID: nid}.Addr()
	}
	old := h.peerRoutes.get(peer)
	if !force && old != nil && *old == pr && !h.stale[peer] {
		return nil
	}
	r := h.rwRoute(peer, pr)
	if k := h.existing[peer]; old == nil && k != nil && sameRoute(k, r) {
		h.recordRoute(peer, pr)
		return nil
	}
	if err := h.rw.Replace(r, func(err error) { h.routeFailed(peer, pr, err) }); err != nil {
		return fmt.Errorf("route to peer %s: %w", peer, err)
	}
	h.queued()
	h.recordRoute(peer, pr)
	delete(h.stale, peer)
	return nil
}

// routeFailed is told what became of a queued write of pr to peer. The record already says
// pr (the loop goes on without waiting for the kernel): a refused write marks it stale, so
// that the peer's next routePeer (a session, a move, a clamp) writes it again, as the record
// of a refused synchronous write used to stay different from what was asked for.
func (h *host) routeFailed(peer netip.Addr, pr peerRoute, err error) {
	if err == nil {
		return
	}
	h.log.Warn("peer route", "peer", peer, "err", err)
	if r := h.peerRoutes.get(peer); r != nil && *r == pr {
		h.stale[peer] = true
	}
}

// routeHold is how long endTurn holds queued route writes back while more events wait.
const routeHold = 5 * time.Millisecond

func (h *host) queued() {
	if h.rw.Pending() == 1 {
		h.queuedAt = time.Now()
	}
}

// endTurn ends a loop turn: it flushes the queued peer routes unless more events are already
// waiting (more) and the oldest write was queued less than routeHold ago. A correspondent
// opening sessions as fast as the loop records them handles one datapath event a turn, and
// a flush a turn would write their routes one at a time again (issue 28); held, they go out
// a full batch (rw flushes itself then) or routeHold's worth at once.
func (h *host) endTurn(more bool) {
	if h.rw == nil || h.rw.Pending() == 0 || (more && time.Since(h.queuedAt) < routeHold) {
		return
	}
	h.flushRoutes()
}

// flushRoutes writes the queued peer route changes (errors go to routeFailed and
// unrouteFailed, route by route).
func (h *host) flushRoutes() {
	if h.rw == nil {
		return
	}
	if err := h.rw.Flush(); err != nil {
		h.log.Debug("peer routes", "err", err)
	}
}

// rwRoute is the kernel route to peer that pr describes, as the batched writer takes it.
func (h *host) rwRoute(peer netip.Addr, pr peerRoute) routewrite.Route {
	return routewrite.Route{Dst: peer, LinkIndex: pr.link, Gw: pr.gw, Src: pr.src, MTU: pr.mtu, AdvMSS: pr.mtu - 60,
		MTULock: pr.lock}
}

// peerRoute is what the daemon keeps of a peer route: the rest is the same for every one
// (route). A whole netlink.Route per correspondent, with its slices, was some 850 bytes of
// the daemon's memory per session (issue 28).
type peerRoute struct {
	link    int
	mtu     int        // the daemon's route MTU, less encap6's outer headers where a pair uses it
	lock    bool       // mtu is a clamp below IPv6's minimum (clamps): locked, RTAX_LOCK
	gw, src netip.Addr // zero: none
}

// sameRoute says whether the kernel's route k (a previous daemon's, loadRoutes) is r as
// routePeer would write it: interface, gateway, source, MTU and advertised MSS.
func sameRoute(k *netlink.Route, r routewrite.Route) bool {
	ip := func(b net.IP) netip.Addr { a, _ := netip.AddrFromSlice(b); return a }
	return k.LinkIndex == r.LinkIndex && ip(k.Gw) == r.Gw && ip(k.Src) == r.Src && k.MTU == r.MTU && k.AdvMSS == r.AdvMSS
}

// sessionView is this node's view of the session whose correspondent's view is peer.
func (h *host) sessionView(peer netip.Addr) (netip.Addr, bool) {
	if h.viewOf == nil {
		return netip.Addr{}, false
	}
	return h.viewOf(peer)
}

// recordRoute notes pr as the route to peer.
func (h *host) recordRoute(peer netip.Addr, pr peerRoute) {
	if h.lastRoute == nil || *h.lastRoute != pr {
		h.lastRoute = &pr
	}
	h.peerRoutes.set(peer, h.lastRoute)
}

// loadRoutes reads the kernel's IPv6 host routes of the main table that a previous daemon
// could have written (static /128s) with one dump, for routePeer to adopt as they are: a
// restart with 100,000 sessions spent seconds rewriting each of them with a netlink request
// of its own (issue 28). forgetRoutes ends it.
func (h *host) loadRoutes() error {
	routes, err := h.nl.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: netlink.RouteProtocol(unix.RTPROT_STATIC)},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	h.existing = make(map[netip.Addr]*netlink.Route, len(routes))
	for i := range routes {
		r := &routes[i]
		if r.Dst == nil {
			continue
		}
		if ones, bits := r.Dst.Mask.Size(); ones != 128 || bits != 128 {
			continue
		}
		if a, ok := netip.AddrFromSlice(r.Dst.IP); ok {
			h.existing[a] = r
		}
	}
	return nil
}

func (h *host) forgetRoutes() { h.existing = nil }

// routesUp reports whether every interface a peer route points at is up and running (a link
// that went down took its routes with it, or will).
func (h *host) routesUp() bool {
	checked := map[int]bool{}
	up := true
	h.peerRoutes.each(func(_ netip.Addr, r *peerRoute) {
		if !up || checked[r.link] {
			return
		}
		ifc, err := net.InterfaceByIndex(r.link)
		if err != nil || ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagRunning == 0 {
			up = false
		}
		checked[r.link] = true
	})
	return up
}

// clampPeer gives peer's route the locked MTU mtu (0: the clamp ends, the usual MTU again).
// owned is false when the daemon keeps no route to peer: the caller installs its own then
// (internal/pmtu). force rewrites the route even if the record says it is in place. The
// route is written at once, not at the end of the turn: every packet sent to the peer
// before it is another Packet Too Big.
func (h *host) clampPeer(peer netip.Addr, mtu int, force bool) (owned bool, err error) {
	r := h.peerRoutes.get(peer)
	if r == nil {
		return false, nil
	}
	if mtu == 0 {
		delete(h.clamps, peer)
	} else {
		h.clamps[peer] = mtu
	}
	err = h.writePeerRoute(peer, r.link, r.gw, force)
	h.flushRoutes()
	return true, err
}

// setEncap6 gives the routes of a correspondent's session-view addresses the MTU for
// ILNPv6 in UDP/IPv6 (on) or the native one again. TCP picks the new route MTU up on its next
// send (the replaced route invalidates the socket's cached one).
func (h *host) setEncap6(nid wire.NID, on bool) error {
	if h.encap6[nid] == on {
		return nil
	}
	if on {
		h.encap6[nid] = true
	} else {
		delete(h.encap6, nid)
	}
	var errs []error
	for _, peer := range h.peerRoutes.of(nid) {
		if r := h.peerRoutes.get(peer); r != nil {
			errs = append(errs, h.routePeer(peer, r.link, r.gw))
		}
	}
	h.flushRoutes() // at once, as clampPeer
	return errors.Join(errs...)
}

// rerouteShare is how many peer routes a move rewrites in one turn of the loop: one batch
// pass over 100,000 took the loop ~0.4 s (BenchmarkRouteWrite, ./internal/routewrite, at
// ~250,000 routes a second), a share of 2,000 some 8 ms.
const rerouteShare = 2000

// reroutePass is a move's pass over the peer routes: the peers routed when it began, the
// next one to rewrite, and where to.
type reroutePass struct {
	peers  []netip.Addr
	next   int
	link   int
	router netip.Addr
}

// reroutePeers moves every peer route to a new active interface: the first share now (all of
// them for up to rerouteShare peers, then flushed), the rest a share a loop turn
// (rerouteStep). A move during a pass starts it again towards the new interface. A peer
// routed since the pass began is routed through the new interface already.
func (h *host) reroutePeers(ifindex int, router netip.Addr) error {
	p := &h.reroute
	p.peers, p.next, p.link, p.router = p.peers[:0], 0, ifindex, router
	h.peerRoutes.each(func(peer netip.Addr, _ *peerRoute) { p.peers = append(p.peers, peer) })
	h.rerouteStep()
	return nil
}

// rerouting says whether a move's pass over the peer routes has a share left.
func (h *host) rerouting() bool { return h.reroute.next < len(h.reroute.peers) }

// rerouteStep rewrites the pass's next share of peer routes and flushes them.
func (h *host) rerouteStep() {
	p := &h.reroute
	end := min(p.next+rerouteShare, len(p.peers))
	for _, peer := range p.peers[p.next:end] {
		if r := h.peerRoutes.get(peer); r != nil {
			if err := h.routePeer(peer, p.link, p.router); err != nil {
				h.log.Warn("peer route", "peer", peer, "err", err)
			}
		}
	}
	p.next = end
	if !h.rerouting() {
		p.peers, p.next = p.peers[:0], 0
		if cap(p.peers) > 4*rerouteShare {
			p.peers = nil // 16 bytes a peer held until the next move otherwise
		}
	}
	h.flushRoutes()
}

// unroutePeer removes the host routes of every session-view address with this NID. The
// deletes are queued (flushRoutes); one the kernel refuses puts the record back, so that
// close or the next unroutePeer tries again.
func (h *host) unroutePeer(nid wire.NID) error {
	var errs []error
	for _, peer := range h.peerRoutes.of(nid) {
		r := h.peerRoutes.get(peer)
		pr := *r
		if err := h.rw.Delete(h.rwRoute(peer, pr), func(err error) { h.unrouteFailed(peer, pr, err) }); err != nil {
			errs = append(errs, fmt.Errorf("remove route to %s: %w", peer, err))
			continue
		}
		h.queued()
		h.peerRoutes.del(peer)
		delete(h.stale, peer)
	}
	return errors.Join(errs...)
}

// unrouteFailed is told what became of a queued delete of pr (ESRCH, no such route, is no
// error): a refused one is recorded again unless a write to the peer was queued since.
func (h *host) unrouteFailed(peer netip.Addr, pr peerRoute, err error) {
	if err == nil {
		return
	}
	h.log.Warn("peer route", "peer", peer, "err", err)
	if h.peerRoutes.get(peer) == nil {
		h.recordRoute(peer, pr)
	}
}

// closeRoutes writes what is queued and closes the route writer (the routes stay).
func (h *host) closeRoutes() {
	if h.rw == nil {
		return
	}
	if err := h.rw.Close(); err != nil {
		h.log.Debug("peer routes", "err", err)
	}
}

func (h *host) close() error {
	var errs []error
	h.flushRoutes()
	h.peerRoutes.each(func(peer netip.Addr, r *peerRoute) {
		err := h.rw.Delete(h.rwRoute(peer, *r), func(err error) {
			if err != nil {
				errs = append(errs, err)
			}
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("remove route to %s: %w", peer, err))
		}
	})
	h.closeRoutes()
	for addr := range h.identities {
		errs = append(errs, h.removeIdentity(addr))
	}
	errs = append(errs, h.removeEncapNeighbours())
	for addr := range h.onLink {
		errs = append(errs, h.removeOnLink(addr))
	}
	h.nl.Close()
	return errors.Join(errs...)
}

// staticLocator is a global address with the node's NID that was configured on an ILNP
// interface by someone else (a CN on a wired link without Router Advertisements).
type staticLocator struct {
	addr    netip.Addr
	ifindex int
	router  netip.Addr
	// autoconfigured: the kernel formed it (SLAAC) rather than someone configuring it.
	autoconfigured bool
}

// staticLocators lists the global addresses on ifindex and the interface's default router.
func (h *host) staticLocators(ifindex int) ([]staticLocator, error) {
	link, err := h.nl.LinkByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("interface %d: %w", ifindex, err)
	}
	addrs, err := h.nl.AddrList(link, netlink.FAMILY_V6)
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", link.Attrs().Name, err)
	}
	var router netip.Addr
	if routes, err := h.nl.RouteList(link, netlink.FAMILY_V6); err == nil {
		for _, r := range routes {
			if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw != nil {
				router, _ = netip.AddrFromSlice(r.Gw)
				break
			}
		}
	}
	var out []staticLocator
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.Scope != unix.RT_SCOPE_UNIVERSE || !ip.IsGlobalUnicast() {
			continue
		}
		out = append(out, staticLocator{addr: ip, ifindex: ifindex, router: router,
			autoconfigured: a.Flags&unix.IFA_F_PERMANENT == 0})
	}
	return out, nil
}

// removeAddress deletes a /64 address from an interface.
func (h *host) removeAddress(ifindex int, addr netip.Addr) error {
	h.flushRoutes() // routes queued with it as their source first, as they were asked for
	link, err := h.nl.LinkByIndex(ifindex)
	if err != nil {
		return fmt.Errorf("interface %d: %w", ifindex, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(64, 128)}}
	if err := h.nl.AddrDel(link, a); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
		return fmt.Errorf("remove %s from %s: %w", addr, link.Attrs().Name, err)
	}
	return nil
}
