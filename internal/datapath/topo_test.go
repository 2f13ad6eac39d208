package datapath

import (
	"fmt"
	"net/netip"
	"testing"

	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

// topo is host A - router - host B, where B has two interfaces on two prefixes (lB1, lB2)
// and A one (lA1). Routers stay plain IPv6.
//
// What a host needs for ILNP (the daemon's job, done by hand here, platform.md):
//   - the identity address as a /128 on lo, so sockets bound to it survive its interface going
//     down (the kernel deletes the interface's addresses);
//   - routes towards ILNP peers with 8 bytes of headroom (mtu 1492, advmss 1432), or a full-size
//     packet grows to 1508 bytes and veth drops it silently;
//   - explicit next hops (the router's link-local) for bpf_redirect_neigh;
//   - for the router GSO bug (ip6_forward reads the TCP data offset out of the nonce header of
//     a TSO super-packet and drops it as too big): TSO off on the hosts' egress veths (GSO
//     stays on, segmentation in software after the tc hook), or the router's links at MTU 1600.
type topo struct {
	a, r, b         *nstest.NS
	da, db          *Datapath
	aIf, b1If, b2If int
	viewA, viewB    netip.Addr // session view: [lA1:nidA], [lB1:nidB]
	plainB          netip.Addr // a plain IPv6 address of B (no ILNP peer)
	routerLL        netip.Addr
}

type topoOptions struct {
	// hostTSOOff turns TSO and TX checksum offload off on the hosts' veths (the GSO bug
	// workaround, and finished checksums in captures); otherwise the router's links get MTU
	// 1600.
	hostTSOOff bool
	datapath   Options
}

func newTopo(t testing.TB, o topoOptions) *topo {
	t.Helper()
	nstest.RequireRoot(t)
	tp := &topo{
		a: nstest.New(t, "dpA"), r: nstest.New(t, "dpR"), b: nstest.New(t, "dpB"),
		viewA: addr(lA1, nidA), viewB: addr(lB1, nidB),
		plainB:   netip.MustParseAddr("2001:db8:b:1::99"),
		routerLL: netip.MustParseAddr("fe80::1"),
	}
	nstest.Link(t, tp.a, "a0", tp.r, "r0")
	nstest.Link(t, tp.b, "b1", tp.r, "r1")
	nstest.Link(t, tp.b, "b2", tp.r, "r2")
	tp.r.Run("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	for i, l := range []wire.L64{lA1, lB1, lB2} {
		dev := fmt.Sprintf("r%d", i)
		tp.r.Run("ip", "addr", "add", "fe80::1/64", "dev", dev, "nodad")
		tp.r.Run("ip", "addr", "add", addr(l, 1).String()+"/64", "dev", dev, "nodad")
		if !o.hostTSOOff {
			tp.r.Run("ip", "link", "set", dev, "mtu", "1600")
		}
	}
	tp.a.Run("ip", "addr", "add", tp.viewA.String()+"/64", "dev", "a0", "nodad")
	tp.b.Run("ip", "addr", "add", tp.viewB.String()+"/64", "dev", "b1", "nodad")
	tp.b.Run("ip", "addr", "add", tp.plainB.String()+"/64", "dev", "b1", "nodad")
	tp.b.Run("ip", "addr", "add", addr(lB2, nidB).String()+"/64", "dev", "b2", "nodad")
	tp.a.Run("ip", "-6", "route", "add", "default", "via", "fe80::1", "dev", "a0", "mtu", "1492", "advmss", "1432")
	tp.b.Run("ip", "-6", "route", "add", "default", "via", "fe80::1", "dev", "b1", "mtu", "1492", "advmss", "1432")
	tp.b.Run("ip", "-6", "route", "add", "default", "via", "fe80::1", "dev", "b2", "metric", "2048", "mtu", "1492", "advmss", "1432")
	// The identity (session-view) address also as a /128 on lo: it outlives b1 going down.
	tp.b.Run("ip", "addr", "add", tp.viewB.String()+"/128", "dev", "lo")
	if o.hostTSOOff {
		tp.a.Run("ethtool", "-K", "a0", "tx", "off", "tso", "off")
		tp.b.Run("ethtool", "-K", "b1", "tx", "off", "tso", "off")
		tp.b.Run("ethtool", "-K", "b2", "tx", "off", "tso", "off")
	}
	tp.aIf = tp.a.Ifindex("a0")
	tp.b1If = tp.b.Ifindex("b1")
	tp.b2If = tp.b.Ifindex("b2")

	tp.da = newDatapath(t, o.datapath)
	tp.db = newDatapath(t, o.datapath)
	must(t, tp.da.SetLocalNID(nidA, lA1))
	must(t, tp.da.PutLocalLocator(LocalLocator{Locator: lA1, State: LocatorActive, Ifindex: tp.aIf, NextHop: tp.routerLL}))
	must(t, tp.da.SetActiveLocator(lA1))
	must(t, tp.da.PutPeer(Peer{Addr: tp.viewB, Active: lB1,
		Locators: []RemoteLocator{{Locator: lB1, State: LocatorActive}, {Locator: lB2, State: LocatorValid}}}))
	must(t, tp.db.SetLocalNID(nidB, lB1))
	must(t, tp.db.PutLocalLocator(LocalLocator{Locator: lB1, State: LocatorActive, Ifindex: tp.b1If, NextHop: tp.routerLL}))
	must(t, tp.db.PutLocalLocator(LocalLocator{Locator: lB2, State: LocatorValid, Ifindex: tp.b2If, NextHop: tp.routerLL}))
	must(t, tp.db.SetActiveLocator(lB1))
	must(t, tp.a.Do(func() error { return tp.da.Attach(tp.aIf) }))
	must(t, tp.b.Do(func() error {
		if err := tp.db.Attach(tp.b1If); err != nil {
			return err
		}
		return tp.db.Attach(tp.b2If)
	}))
	return tp
}

// flip makes B's locator l (lB1 or lB2) the active one on both ends, the other one staying
// valid (soft handoff), by map updates only.
func (tp *topo) flip(t testing.TB, l wire.L64) {
	t.Helper()
	other := lB1
	if l == lB1 {
		other = lB2
	}
	set := []RemoteLocator{{Locator: l, State: LocatorActive}, {Locator: other, State: LocatorValid}}
	if _, err := tp.da.SetRemoteLocators(nidB, set, l); err != nil {
		t.Fatal(err)
	}
	ifs := map[wire.L64]int{lB1: tp.b1If, lB2: tp.b2If}
	must(t, tp.db.PutLocalLocator(LocalLocator{Locator: l, State: LocatorActive, Ifindex: ifs[l], NextHop: tp.routerLL}))
	must(t, tp.db.PutLocalLocator(LocalLocator{Locator: other, State: LocatorValid, Ifindex: ifs[other], NextHop: tp.routerLL}))
	must(t, tp.db.SetActiveLocator(l))
}
