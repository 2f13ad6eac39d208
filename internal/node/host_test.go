package node

import (
	"net/netip"
	"strings"
	"testing"

	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

// unroutePeer removes exactly the routes of one NID's session views, found by NID
// (no pass over every route: issue 28), and forgets them; the other NIDs' routes stay.
func TestUnroutePeerByNID(t *testing.T) {
	a, b := nstest.New(t, "ilnp-host"), nstest.New(t, "ilnp-host")
	nstest.Link(t, a, "ha", b, "hb")
	var h *host
	if err := a.Do(func() (err error) { h, err = newHost(8); return err }); err != nil {
		t.Fatal(err)
	}
	defer h.nl.Close()
	idx := a.Ifindex("ha")
	addr := func(loc, nid uint64) netip.Addr { return wire.ILV{Locator: wire.L64(loc), NID: wire.NID(nid)}.Addr() }
	const x, y = 0x0a00_0000_0000_0001, 0x0a00_0000_0000_0002
	views := []netip.Addr{addr(0x2001_0db8_0061_0000, x), addr(0x2001_0db8_0062_0000, x), addr(0x2001_0db8_0061_0000, y)}
	for _, v := range views {
		if err := h.routePeer(v, idx, netip.Addr{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.routePeer(views[0], idx, netip.Addr{}); err != nil { // again: indexed once
		t.Fatal(err)
	}
	if len(h.peerRoutes.of(x)) != 2 || len(h.peerRoutes.of(y)) != 1 || h.peerRoutes.len() != 3 {
		t.Fatalf("routes of x %v, of y %v, %d in all", h.peerRoutes.of(x), h.peerRoutes.of(y), h.peerRoutes.len())
	}
	if err := h.unroutePeer(x); err != nil {
		t.Fatal(err)
	}
	out := a.Run("ip", "-6", "route", "show", "dev", "ha")
	if strings.Contains(out, views[0].String()) || strings.Contains(out, views[1].String()) || !strings.Contains(out, views[2].String()) {
		t.Fatalf("routes after removing %v:\n%s", wire.NID(x), out)
	}
	if h.peerRoutes.of(x) != nil || h.peerRoutes.len() != 1 || h.peerRoutes.get(views[2]) == nil {
		t.Fatalf("after: routes of x %v, %d in all", h.peerRoutes.of(x), h.peerRoutes.len())
	}
	// routesUp: the LUs of a move may leave before the routes move only while the interface
	// the routes point at is up (node.apply).
	var up, down bool
	if err := a.Do(func() error {
		up = h.routesUp()
		a.Run("ip", "link", "set", "ha", "down")
		down = h.routesUp()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !up || down {
		t.Fatalf("routesUp %v with the link up, %v with it down", up, down)
	}
}

// A restarted daemon takes the peer routes its predecessor left as they are (one dump, no
// request per route: issue 28), and writes those that differ.
func TestAdoptedRoutesNotRewritten(t *testing.T) {
	a, b := nstest.New(t, "ilnp-host"), nstest.New(t, "ilnp-host")
	nstest.Link(t, a, "ha", b, "hb")
	idx := a.Ifindex("ha")
	same := wire.ILV{Locator: 0x2001_0db8_0061_0000, NID: 0x0a00_0000_0000_0001}.Addr()
	moved := wire.ILV{Locator: 0x2001_0db8_0061_0000, NID: 0x0a00_0000_0000_0002}.Addr()
	if err := a.Do(func() error {
		first, err := newHost(8)
		if err != nil {
			return err
		}
		defer first.nl.Close()
		for _, p := range []netip.Addr{same, moved} {
			if err := first.routePeer(p, idx, netip.Addr{}); err != nil {
				return err
			}
		}
		next, err := newHost(8)
		if err != nil {
			return err
		}
		defer next.nl.Close()
		if err := next.loadRoutes(); err != nil {
			return err
		}
		// Behind the new host's back: if it wrote the route again, it would be back.
		a.Run("ip", "-6", "route", "del", same.String()+"/128", "dev", "ha")
		a.Run("ip", "-6", "route", "del", moved.String()+"/128", "dev", "ha")
		if err := next.routePeer(same, idx, netip.Addr{}); err != nil {
			return err
		}
		next.mtu-- // the route it would write now differs from the one that was there
		if err := next.routePeer(moved, idx, netip.Addr{}); err != nil {
			return err
		}
		next.forgetRoutes()
		if next.peerRoutes.get(same) == nil || next.peerRoutes.get(moved) == nil || next.peerRoutes.len() != 2 {
			t.Errorf("routes not recorded: %d", next.peerRoutes.len())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	out := a.Run("ip", "-6", "route", "show", "dev", "ha")
	if strings.Contains(out, same.String()) || !strings.Contains(out, moved.String()) {
		t.Fatalf("the unchanged route was written again or the changed one not:\n%s", out)
	}
}
