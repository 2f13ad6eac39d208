// Package locators discovers the node's locators: it reads Router Advertisements on the ILNP
// interfaces (RFC 4861 s.6.1.2, via github.com/mdlayher/ndp), forms [prefix:NID] for every
// on-link autonomous /64 at once with optimistic DAD (RFC 4429) so the locator is usable within
// milliseconds instead of after the ~1-2 s of ordinary DAD the thesis measured, and follows
// netlink link and address events (interface down/up, address removed).
//
// It reports what it sees as typed events on a channel; deciding what a locator means for the
// ILCC (active, valid, aged) is the daemon's job, not this package's.
package locators

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/mdlayher/ndp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// DADMode says how a newly formed address treats Duplicate Address Detection.
type DADMode int

const (
	// DADOptimistic adds the address with IFA_F_OPTIMISTIC (RFC 4429): usable at once, and the
	// kernel still runs DAD and removes the address if it turns out to be a duplicate.
	DADOptimistic DADMode = iota
	// DADNone adds the address with IFA_F_NODAD: usable at once, duplicates never detected.
	DADNone
)

// Options configure Run.
type Options struct {
	Interfaces []string // ILNP interfaces by name; others are ignored
	NID        wire.NID // identifier appended to every learned /64
	DAD        DADMode
	// NetNS, when set, is the network namespace to work in (default: the caller's). Sockets
	// and netlink handles are opened there, so Run's goroutines need not stay on a
	// namespace-switched thread. Run does not close it.
	NetNS *netns.NsHandle
	// NoSolicit turns off the Router Solicitations sent when an interface comes up. By default
	// they are sent at once (no RFC 4861 s.6.3.7 random delay: a mobile node wants its new
	// locator now, as DNA, RFC 6059, does) and repeated after 1 s and 4 s until an RA arrives,
	// so a new locator does not wait for the router's next periodic RA.
	NoSolicit bool
	// DisableKernelAutoconf sets net.ipv6.conf.IF.autoconf=0, so the kernel's own SLAAC does
	// not add a second address per prefix (with a different interface identifier when the NID
	// is not the MAC's EUI-64) that applications might pick as source.
	DisableKernelAutoconf bool
	// RemoveOnExit deletes the addresses Run added when it returns.
	RemoveOnExit bool
	Logger       *slog.Logger
}

// Event is one of RASeen, AddressFormed, AddressError, LinkChange, AddressGone.
type Event interface{ event() }

// Prefix is one Prefix Information option (RFC 4861 s.4.6.2).
type Prefix struct {
	Prefix     netip.Prefix
	OnLink     bool
	Autonomous bool
	Valid      time.Duration // ndp.Infinity for infinite
	Preferred  time.Duration
}

// RASeen is a valid Router Advertisement received on an ILNP interface.
type RASeen struct {
	MonoNS         int64 // timeline.Now() when read
	Iface          string
	IfIndex        int
	Router         netip.Addr // source link-local address: the next hop via this router
	RouterLifetime time.Duration
	MTU            uint32 // 0: no MTU option
	Prefixes       []Prefix
	// Unicast is set when the RA was sent to one of our unicast addresses rather than to
	// all-nodes: the router's answer to a Router Solicitation (RFC 7772 behaviour, radvd's
	// default AdvRASolicitedUnicast).
	Unicast bool
}

// AddressFormed reports that [prefix:NID] was added to an interface (first time, or again after
// it had gone). Elapsed is from reading the RA to the kernel accepting the address.
type AddressFormed struct {
	MonoNS  int64
	Iface   string
	IfIndex int
	Addr    netip.Addr
	Router  netip.Addr
	Valid   time.Duration
	Elapsed time.Duration
}

// AddressError reports that an address could not be added.
type AddressError struct {
	MonoNS int64
	Iface  string
	Addr   netip.Addr
	Err    error
}

// LinkChange reports an ILNP interface changing between up and down (administrative state and
// carrier: a veth whose peer went down is down), or appearing.
type LinkChange struct {
	MonoNS  int64
	Iface   string
	IfIndex int
	Up      bool
}

// AddressGone reports that a global address on an ILNP interface was deleted (interface down,
// lifetime expired, DAD failure, or someone ran `ip addr del`).
type AddressGone struct {
	MonoNS  int64
	Iface   string
	IfIndex int
	Addr    netip.Addr
}

func (RASeen) event()        {}
func (AddressFormed) event() {}
func (AddressError) event()  {}
func (LinkChange) event()    {}
func (AddressGone) event()   {}

// ErrNoInterfaces is returned by Run when Options.Interfaces is empty.
var ErrNoInterfaces = errors.New("locators: no interfaces configured")

// Run discovers locators until ctx is done, sending events to out (it blocks while out is
// full, so the consumer sees every event in order). It returns nil after ctx ends, or the error
// that stopped it (sockets could not be opened). out is not closed.
func Run(ctx context.Context, opts Options, out chan<- Event) error {
	if len(opts.Interfaces) == 0 {
		return ErrNoInterfaces
	}
	d, err := newDiscovery(opts, out)
	if err != nil {
		return err
	}
	defer d.nl.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, err := d.listenRA()
	if err != nil {
		return err
	}
	d.conn = conn
	// On any return: stop the goroutines (cancel closes the socket), then wait for them.
	defer func() {
		cancel()
		d.wg.Wait()
	}()
	if opts.RemoveOnExit {
		defer d.removeFormed()
	}
	// Close the raw socket when ctx ends, which unblocks the reader.
	go func() {
		<-ctx.Done()
		_ = conn.Close()
	}()

	done := make(chan struct{})
	defer close(done)
	links := make(chan netlink.LinkUpdate, 64)
	addrs := make(chan netlink.AddrUpdate, 64)
	subErr := func(err error) {
		if ctx.Err() == nil { // closing the subscription at shutdown reports EAGAIN: not news
			d.log.Warn("netlink subscription", "err", err)
		}
	}
	if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{
		Namespace: d.opts.NetNS, ErrorCallback: subErr, ListExisting: true}); err != nil {
		return fmt.Errorf("locators: subscribe to links: %w", err)
	}
	if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{
		Namespace: d.opts.NetNS, ErrorCallback: subErr}); err != nil {
		return fmt.Errorf("locators: subscribe to addresses: %w", err)
	}

	ras := make(chan RASeen, 16)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.readRAs(ctx, conn, ras)
	}()

	for {
		select {
		case <-ctx.Done():
			return nil
		case ra := <-ras:
			d.handleRA(ctx, ra)
		case u, ok := <-links:
			if !ok {
				return fmt.Errorf("locators: link subscription ended")
			}
			d.handleLink(ctx, u)
		case u, ok := <-addrs:
			if !ok {
				return fmt.Errorf("locators: address subscription ended")
			}
			d.handleAddr(ctx, u)
		}
	}
}

func newDiscovery(opts Options, out chan<- Event) (*discovery, error) {
	d := &discovery{
		opts:    opts,
		out:     out,
		log:     opts.Logger,
		ifaces:  map[string]bool{},
		formed:  map[netip.Addr]int{},
		noDAD:   map[int]bool{},
		lastRA:  map[int]int64{},
		linkUp:  map[int]bool{},
		downAt:  map[int]int64{},
		heldRA:  map[int]RASeen{},
		indexes: map[int]string{},
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	for _, name := range opts.Interfaces {
		d.ifaces[name] = true
	}
	var err error
	if d.nl, err = d.handle(); err != nil {
		return nil, err
	}
	return d, nil
}

type discovery struct {
	opts    Options
	out     chan<- Event
	log     *slog.Logger
	nl      *netlink.Handle
	ifaces  map[string]bool    // configured names
	indexes map[int]string     // ifindex -> configured name, learned from link events
	linkUp  map[int]bool       // last reported state
	downAt  map[int]int64      // ifindex -> timeline.Now() when its link was last seen going down
	heldRA  map[int]RASeen     // the last RA read on a link not (yet) known to be up
	formed  map[netip.Addr]int // addresses we added and believe present -> ifindex
	noDAD   map[int]bool       // interfaces where optimistic DAD could not be enabled
	lastRA  map[int]int64      // ifindex -> timeline.Now() of the last RA; guarded by mu
	conn    *ndp.Conn
	wg      sync.WaitGroup // solicitation goroutines
	mu      sync.Mutex     // guards indexes for the RA reader
}

func (d *discovery) emit(ctx context.Context, e Event) {
	select {
	case d.out <- e:
	case <-ctx.Done():
	}
}

// inNS runs fn on a thread inside opts.NetNS (or the current namespace).
func (d *discovery) inNS(fn func() error) error {
	if d.opts.NetNS == nil {
		return fn()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	origin, err := netns.Get()
	if err != nil {
		return fmt.Errorf("current netns: %w", err)
	}
	defer origin.Close()
	if err := netns.Set(*d.opts.NetNS); err != nil {
		return fmt.Errorf("enter netns: %w", err)
	}
	defer func() { _ = netns.Set(origin) }()
	return fn()
}

func (d *discovery) handle() (*netlink.Handle, error) {
	if d.opts.NetNS != nil {
		h, err := netlink.NewHandleAt(*d.opts.NetNS)
		if err != nil {
			return nil, fmt.Errorf("locators: netlink handle: %w", err)
		}
		return h, nil
	}
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("locators: netlink handle: %w", err)
	}
	return h, nil
}

// listenRA opens one raw ICMPv6 socket for the whole namespace, unbound to any device so that
// interfaces may come, go and come back without reopening it; RAs are attributed to interfaces
// by the IPV6_PKTINFO ancillary data. Only type 134 passes the ICMPv6 filter.
func (d *discovery) listenRA() (*ndp.Conn, error) {
	var conn *ndp.Conn
	err := d.inNS(func() error {
		lo := &net.Interface{Index: 1, Name: "lo", MTU: 65536}
		c, _, err := ndp.Listen(lo, ndp.Unspecified)
		if err != nil {
			return fmt.Errorf("locators: listen for router advertisements: %w", err)
		}
		var f ipv6.ICMPFilter
		f.SetAll(true)
		f.Accept(ipv6.ICMPTypeRouterAdvertisement)
		if err := c.SetICMPFilter(&f); err != nil {
			c.Close()
			return fmt.Errorf("locators: ICMPv6 filter: %w", err)
		}
		if err := c.SetControlMessage(ipv6.FlagInterface|ipv6.FlagHopLimit|ipv6.FlagDst, true); err != nil {
			c.Close()
			return fmt.Errorf("locators: control messages: %w", err)
		}
		conn = c
		return nil
	})
	return conn, err
}

// readRAs validates RAs (RFC 4861 s.6.1.2: hop limit 255, link-local source) and passes those
// from ILNP interfaces on. Malformed packets are dropped by ndp; invalid ones are logged.
func (d *discovery) readRAs(ctx context.Context, conn *ndp.Conn, ras chan<- RASeen) {
	buf := make([]byte, 65536)
	for {
		n, cm, src, err := conn.ReadRaw(buf)
		now := timeline.Now()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.log.Warn("reading router advertisements", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		msg, err := ndp.ParseMessage(buf[:n])
		if err != nil {
			d.log.Debug("malformed ICMPv6 message dropped", "src", src, "err", err)
			continue
		}
		ra, ok := msg.(*ndp.RouterAdvertisement)
		if !ok || cm == nil {
			continue
		}
		if cm.HopLimit != ndp.HopLimit || !src.IsLinkLocalUnicast() {
			d.log.Warn("invalid router advertisement dropped (RFC 4861 s.6.1.2)",
				"src", src, "hop_limit", cm.HopLimit)
			continue
		}
		d.mu.Lock()
		name, ours := d.indexes[cm.IfIndex]
		d.mu.Unlock()
		if !ours {
			continue
		}
		seen := RASeen{
			MonoNS:         now,
			Iface:          name,
			IfIndex:        cm.IfIndex,
			Router:         src.WithZone(name),
			RouterLifetime: ra.RouterLifetime,
			Unicast:        cm.Dst != nil && !cm.Dst.IsMulticast(),
		}
		for _, o := range ra.Options {
			switch o := o.(type) {
			case *ndp.PrefixInformation:
				p, err := o.Prefix.Prefix(int(o.PrefixLength))
				if err != nil {
					continue
				}
				seen.Prefixes = append(seen.Prefixes, Prefix{
					Prefix: p, OnLink: o.OnLink, Autonomous: o.AutonomousAddressConfiguration,
					Valid: o.ValidLifetime, Preferred: o.PreferredLifetime,
				})
			case *ndp.MTU:
				seen.MTU = o.MTU
			}
		}
		select {
		case ras <- seen:
		case <-ctx.Done():
			return
		}
	}
}

// handleRA reports the RA, then forms an address for each usable prefix. The RA goes out first
// so that the timeline shows ra_seen before locator_added.
func (d *discovery) handleRA(ctx context.Context, ra RASeen) {
	// RAs and link changes come on separate channels, so an RA read just before its link went
	// down can be handled after the link-down event: forming its address then would put a
	// locator on a dead link, and remembering it as formed would hide the address when the
	// link comes back. An RA on a link not known to be up is held until the link-up event and
	// used then only if it was read after the link last went down.
	if !d.linkUp[ra.IfIndex] {
		d.heldRA[ra.IfIndex] = ra
		return
	}
	d.mu.Lock()
	d.lastRA[ra.IfIndex] = ra.MonoNS
	d.mu.Unlock()
	d.emit(ctx, ra)
	for _, p := range ra.Prefixes {
		// RFC 4862 s.5.5.3: autonomous, not link-local, preferred <= valid; ILNPv6 locators
		// are exactly 64 bits (RFC 6741 s.3). A zero valid lifetime withdraws the prefix: it
		// is reported in the RA event, the kernel ages the address out.
		if !p.Autonomous || p.Prefix.Bits() != 64 || !p.Prefix.Addr().Is6() ||
			p.Prefix.Addr().IsLinkLocalUnicast() || p.Preferred > p.Valid || p.Valid == 0 {
			continue
		}
		d.form(ctx, ra, p)
	}
}

func lifetimeSeconds(d time.Duration) int {
	if d >= ndp.Infinity {
		return int(^uint32(0)) // INFINITY_LIFE_TIME
	}
	return int(d / time.Second)
}

func (d *discovery) form(ctx context.Context, ra RASeen, p Prefix) {
	l64, err := wire.ILVFromAddr(p.Prefix.Addr())
	if err != nil {
		return
	}
	addr := wire.ILV{Locator: l64.Locator, NID: d.opts.NID}.Addr()
	flags := unix.IFA_F_OPTIMISTIC
	if d.opts.DAD == DADNone || d.noDAD[ra.IfIndex] {
		flags = unix.IFA_F_NODAD
	}
	nlAddr := &netlink.Addr{
		IPNet:       &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(64, 128)},
		Flags:       flags,
		ValidLft:    lifetimeSeconds(p.Valid),
		PreferedLft: lifetimeSeconds(p.Preferred),
	}
	link := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: ra.IfIndex, Name: ra.Iface}}
	// Replace both adds and refreshes the lifetimes on later RAs (RFC 4862 s.5.5.3 e).
	if err := d.nl.AddrReplace(link, nlAddr); err != nil {
		d.log.Warn("adding locator address", "iface", ra.Iface, "addr", addr, "err", err)
		d.emit(ctx, AddressError{MonoNS: timeline.Now(), Iface: ra.Iface, Addr: addr, Err: err})
		return
	}
	now := timeline.Now()
	if idx, ok := d.formed[addr]; ok && idx == ra.IfIndex {
		return
	}
	d.formed[addr] = ra.IfIndex
	// Before the event: the node's Locator Update follows it, and the router must know the
	// address's link-layer address by the time the answers come (announce.go).
	if err := d.announce(ra.IfIndex, ra.Iface, addr, flags == unix.IFA_F_OPTIMISTIC); err != nil {
		d.log.Debug("unsolicited neighbour advertisement not sent", "err", err)
	} else {
		d.log.Debug("unsolicited neighbour advertisement sent", "iface", ra.Iface, "addr", addr)
	}
	d.emit(ctx, AddressFormed{
		MonoNS: now, Iface: ra.Iface, IfIndex: ra.IfIndex, Addr: addr, Router: ra.Router,
		Valid: p.Valid, Elapsed: time.Duration(now - ra.MonoNS),
	})
}

func (d *discovery) handleLink(ctx context.Context, u netlink.LinkUpdate) {
	attrs := u.Link.Attrs()
	if attrs == nil {
		return
	}
	idx := int(u.Index)
	d.mu.Lock()
	name, known := d.indexes[idx]
	if !known && d.ifaces[attrs.Name] {
		name, known = attrs.Name, true
		d.indexes[idx] = name
	}
	deleted := u.Header.Type == unix.RTM_DELLINK
	if deleted {
		delete(d.indexes, idx)
	}
	d.mu.Unlock()
	if !known {
		return
	}
	up := !deleted && u.IfInfomsg.Flags&unix.IFF_UP != 0 && u.IfInfomsg.Flags&unix.IFF_RUNNING != 0
	prev, reported := d.linkUp[idx]
	if reported && prev == up {
		return
	}
	if !reported && !deleted {
		d.configure(idx, name)
	}
	d.linkUp[idx] = up
	// The kernel deletes the addresses of a downed interface, and an address that outlived a
	// down-up is news to the node all the same: either way the next RA reports it again.
	for a, i := range d.formed {
		if i == idx {
			delete(d.formed, a)
		}
	}
	now := timeline.Now()
	held, isHeld := d.heldRA[idx]
	delete(d.heldRA, idx)
	switch {
	case deleted:
		delete(d.downAt, idx)
	case !up:
		d.downAt[idx] = now
	}
	d.emit(ctx, LinkChange{MonoNS: now, Iface: name, IfIndex: idx, Up: up})
	if up && isHeld && held.MonoNS > d.downAt[idx] {
		d.handleRA(ctx, held)
	}
	if up && !d.opts.NoSolicit {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.solicit(ctx, idx, name, now)
		}()
	}
}

// allRouters is the RS destination (RFC 4861 s.6.3.7).
var allRouters = netip.MustParseAddr("ff02::2")

// solicit sends Router Solicitations on an interface that came up at upAt until an RA arrives
// there: at once, then after 1 s and 4 s (RFC 4861 s.10: MAX_RTR_SOLICITATIONS 3). The RS has
// no source link-layer option, so it may come from an optimistic link-local address (RFC 4429
// s.3.2). If no source address is usable yet the send fails; it is retried every 50 ms within
// each slot.
func (d *discovery) solicit(ctx context.Context, idx int, name string, upAt int64) {
	gotRA := func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.lastRA[idx] > upAt
	}
	for _, at := range []time.Duration{0, time.Second, 4 * time.Second} {
		wait := time.Duration(upAt + int64(at) - timeline.Now())
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		for try := 0; ; try++ {
			if gotRA() {
				return
			}
			err := d.sendRS(idx, name)
			if err == nil {
				d.log.Debug("router solicitation sent", "iface", name)
				break
			}
			if ctx.Err() != nil {
				return
			}
			if try == 19 {
				d.log.Debug("router solicitation not sent", "iface", name, "err", err)
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// sendRS sends one Router Solicitation out of interface idx. It uses a short-lived socket of
// its own: ndp.Conn scopes every destination to the interface it was opened on, and the
// listening socket is opened on none in particular.
func (d *discovery) sendRS(idx int, name string) error {
	return d.inNS(func() error {
		c, _, err := ndp.Listen(&net.Interface{Index: idx, Name: name, MTU: 1280}, ndp.Unspecified)
		if err != nil {
			return err
		}
		defer c.Close()
		// The default control message: hop limit 255, the kernel picks the source.
		return c.WriteTo(&ndp.RouterSolicitation{}, nil, allRouters)
	})
}

// removeFormed deletes the addresses Run added (RemoveOnExit).
func (d *discovery) removeFormed() {
	for a, idx := range d.formed {
		link := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: idx}}
		nlAddr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(64, 128)}}
		if err := d.nl.AddrDel(link, nlAddr); err != nil {
			d.log.Warn("removing locator address", "addr", a, "err", err)
		}
	}
}

// configure sets the interface's IPv6 sysctls when it is first seen.
//
// optimistic_dad=1: without it the kernel silently drops IFA_F_OPTIMISTIC from a netlink
// address request and the address stays tentative (not bindable) for the whole DAD time
// (measured: bind fails with EADDRNOTAVAIL). use_optimistic=1: source address selection may
// pick optimistic addresses, so unbound sockets can use a new locator at once too. If they
// cannot be written, addresses on that interface are added with IFA_F_NODAD instead, so they
// are usable at once either way.
func (d *discovery) configure(idx int, name string) {
	set := func(key, value string) error {
		return d.inNS(func() error {
			return os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", name, key), []byte(value+"\n"), 0o644)
		})
	}
	if d.opts.DAD == DADOptimistic {
		err := set("optimistic_dad", "1")
		if err == nil {
			err = set("use_optimistic", "1")
		}
		if err != nil {
			d.log.Warn("cannot enable optimistic DAD, adding addresses without DAD", "iface", name, "err", err)
			d.noDAD[idx] = true
		}
	}
	if d.opts.DisableKernelAutoconf {
		if err := set("autoconf", "0"); err != nil {
			d.log.Warn("cannot turn kernel SLAAC off", "iface", name, "err", err)
		}
	}
}

func (d *discovery) handleAddr(ctx context.Context, u netlink.AddrUpdate) {
	if u.NewAddr {
		return
	}
	a, ok := netip.AddrFromSlice(u.LinkAddress.IP)
	if !ok || !a.Is6() || a.IsLinkLocalUnicast() || u.Scope != unix.RT_SCOPE_UNIVERSE {
		return
	}
	a = a.Unmap()
	d.mu.Lock()
	name, ours := d.indexes[u.LinkIndex]
	d.mu.Unlock()
	if !ours {
		return
	}
	delete(d.formed, a)
	d.emit(ctx, AddressGone{MonoNS: timeline.Now(), Iface: name, IfIndex: u.LinkIndex, Addr: a})
}

// DefaultNID is the node's NID when none is configured: the modified EUI-64 of the MAC of
// iface (RFC 6741 s.3 allows it; RFC 4291 Appendix A), looked up in the caller's namespace.
func DefaultNID(iface string) (wire.NID, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return 0, fmt.Errorf("default NID: %w", err)
	}
	n, err := wire.NIDFromMAC(ifi.HardwareAddr)
	if err != nil {
		return 0, fmt.Errorf("default NID from %s: %w", iface, err)
	}
	return n, nil
}
