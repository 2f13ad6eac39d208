package node

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

// unroutePeer removes exactly the routes of one NID's session views, found by NID
// (no pass over every route: issue 28), and forgets them; the other NIDs' routes stay.
func TestUnroutePeerByNID(t *testing.T) {
	a, h := hostWithLinks(t, 1)
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
	h.flushRoutes() // the loop's turn ends
	if err := h.unroutePeer(x); err != nil {
		t.Fatal(err)
	}
	h.flushRoutes()
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
		defer first.closeRoutes()
		for _, p := range []netip.Addr{same, moved} {
			if err := first.routePeer(p, idx, netip.Addr{}); err != nil {
				return err
			}
		}
		first.flushRoutes()
		next, err := newHost(8)
		if err != nil {
			return err
		}
		defer next.nl.Close()
		defer next.closeRoutes()
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
		next.flushRoutes()
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

// A peer route the kernel refuses is reported, stays recorded as asked for, and is written
// again at the peer's next routePeer even though the record already says so; the routes
// queued beside it land.
func TestPeerRouteRefusedIsForcedLater(t *testing.T) {
	a, h := hostWithLinks(t, 1)
	var logged strings.Builder
	h.log = slog.New(slog.NewTextHandler(&logged, nil))
	idx := a.Ifindex("ha")
	good := wire.ILV{Locator: 0x2001_0db8_0061_0000, NID: 1}.Addr()
	bad := wire.ILV{Locator: 0x2001_0db8_0061_0000, NID: 2}.Addr()
	const missing = 4242 // no such interface yet
	if err := h.routePeer(good, idx, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	if err := h.routePeer(bad, missing, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	h.flushRoutes()
	if !strings.Contains(logged.String(), bad.String()) || strings.Contains(logged.String(), good.String()) {
		t.Fatalf("log does not name the refused route alone:\n%s", logged.String())
	}
	if out := a.Run("ip", "-6", "route", "show", "dev", "ha"); !strings.Contains(out, good.String()) {
		t.Fatalf("the good route did not land beside the refused one:\n%s", out)
	}
	if !h.stale[bad] || h.stale[good] {
		t.Fatalf("stale %v", h.stale)
	}
	a.Run("ip", "link", "add", "hx", "index", "4242", "type", "veth", "peer", "name", "hy")
	a.Run("ip", "link", "set", "hx", "up")
	a.Run("ip", "link", "set", "hy", "up")
	h.routePeer(good, idx, netip.Addr{}) // in place: not written again
	if err := h.routePeer(bad, missing, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	if n := h.rw.Pending(); n != 1 {
		t.Fatalf("%d routes queued, want the refused one alone", n)
	}
	h.flushRoutes()
	if out := a.Run("ip", "-6", "route", "show", "dev", "hx"); !strings.Contains(out, bad.String()) || h.stale[bad] {
		t.Fatalf("the refused route was not written again (stale %v):\n%s", h.stale[bad], out)
	}
}

// A move reroutes more peers than one turn's share in steps: the first share at once, the
// others a share a step, every route on the new interface at the end, and none missed that
// was removed or added in between.
func TestReroutePeersInSteps(t *testing.T) {
	a, h := hostWithLinks(t, 2)
	from, to := a.Ifindex("ha"), a.Ifindex("hc")
	n := 2*rerouteShare + 500
	peer := func(i int) netip.Addr {
		return wire.ILV{Locator: 0x2001_0db8_0061_0000, NID: wire.NID(0x0a00_0000_0000_0000 + i)}.Addr()
	}
	for i := 1; i <= n; i++ {
		if err := h.routePeer(peer(i), from, netip.Addr{}); err != nil {
			t.Fatal(err)
		}
	}
	h.flushRoutes()
	count := func(dev string) int {
		return strings.Count(a.Run("ip", "-6", "route", "show", "dev", dev), "proto static")
	}
	if c := count("ha"); c != n {
		t.Fatalf("%d routes on ha, want %d", c, n)
	}
	if err := h.reroutePeers(to, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	if c := count("hc"); c != rerouteShare || !h.rerouting() {
		t.Fatalf("after the first share: %d routes on hc (want %d), rerouting %v", c, rerouteShare, h.rerouting())
	}
	// Between two steps a session closes and one opens (routed by the loop as usual).
	gone := wire.ILV{Locator: 0x2001_0db8_0061_0000, NID: wire.NID(0x0a00_0000_0000_0000 + n)}
	if err := h.unroutePeer(gone.NID); err != nil {
		t.Fatal(err)
	}
	if err := h.routePeer(peer(n+1), to, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	h.flushRoutes()
	steps := 0
	for h.rerouting() {
		h.rerouteStep()
		steps++
	}
	if steps != 2 {
		t.Errorf("%d steps after the first, want 2", steps)
	}
	if c, o := count("hc"), count("ha"); c != n || o != 0 {
		t.Fatalf("after the pass: %d routes on hc (want %d), %d left on ha", c, n, o)
	}
	if h.peerRoutes.get(gone.Addr()) != nil || h.peerRoutes.len() != n {
		t.Fatalf("record: %d routes, closed peer present %v", h.peerRoutes.len(), h.peerRoutes.get(gone.Addr()) != nil)
	}
}

// The end of a loop turn holds queued peer routes back while more events wait, for at most
// routeHold, and writes them once none waits.
func TestEndTurnHoldsWhileEventsWait(t *testing.T) {
	a, h := hostWithLinks(t, 1)
	idx := a.Ifindex("ha")
	peer := func(i int) netip.Addr { return wire.ILV{Locator: 0x2001_0db8_0061_0000, NID: wire.NID(i)}.Addr() }
	h.routePeer(peer(1), idx, netip.Addr{})
	h.endTurn(true)
	h.routePeer(peer(2), idx, netip.Addr{})
	h.endTurn(true)
	if n := h.rw.Pending(); n != 2 {
		t.Fatalf("%d routes queued while events wait, want 2", n)
	}
	h.endTurn(false)
	if n := h.rw.Pending(); n != 0 {
		t.Fatalf("%d routes queued after a turn with no event waiting", n)
	}
	h.routePeer(peer(3), idx, netip.Addr{})
	h.queuedAt = h.queuedAt.Add(-routeHold) // held as long as it may be
	h.endTurn(true)
	if n := h.rw.Pending(); n != 0 {
		t.Fatalf("%d routes held past routeHold", n)
	}
	if c := strings.Count(a.Run("ip", "-6", "route", "show", "dev", "ha"), "proto static"); c != 3 {
		t.Fatalf("%d routes in the kernel, want 3", c)
	}
}

// BenchmarkRerouteStep: one loop turn of a move's reroute pass over 100,000 peer routes
// (rerouteShare of them written and flushed, and in the move's own turn the list of peers
// first); ns/op is the turn.
func BenchmarkRerouteStep(b *testing.B) {
	a, h := hostWithLinks(b, 2)
	links := []int{a.Ifindex("ha"), a.Ifindex("hc")}
	const n = 100000
	for i := 1; i <= n; i++ {
		h.routePeer(wire.ILV{Locator: 0x2001_0db8_0061_0000, NID: wire.NID(i)}.Addr(), links[0], netip.Addr{})
	}
	h.flushRoutes()
	b.ResetTimer()
	move := 0
	for i := 0; i < b.N; i++ {
		if !h.rerouting() {
			move++ // the move's own turn: the list of peers and the first share
			h.reroutePeers(links[move%2], netip.Addr{})
			continue
		}
		h.rerouteStep()
	}
	b.ReportMetric(float64(b.N)/float64(move), "turns/move")
}

// hostWithLinks is a host made in a namespace of its own, linked to another by "ha" (and
// "hc" when links is 2), closed when the test ends.
func hostWithLinks(tb testing.TB, links int) (*nstest.NS, *host) {
	tb.Helper()
	a, b := nstest.New(tb, "ilnp-host"), nstest.New(tb, "ilnp-host")
	nstest.Link(tb, a, "ha", b, "hb")
	if links > 1 {
		nstest.Link(tb, a, "hc", b, "hd")
	}
	var h *host
	if err := a.Do(func() (err error) { h, err = newHost(8); return err }); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		h.closeRoutes()
		h.nl.Close()
	})
	return a, h
}
