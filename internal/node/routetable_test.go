package node

import (
	"net/netip"
	"slices"
	"testing"

	"ilnp/internal/wire"
)

// The route table finds, lists and forgets a NID's routes whatever their number and order, and
// keeps addresses that are no I-LV aside.
func TestRouteTable(t *testing.T) {
	tb := newRouteTable()
	const x, y = wire.NID(0x0a00_0000_0000_0001), wire.NID(0x0a00_0000_0000_0002)
	a := func(loc uint64, nid wire.NID) netip.Addr { return wire.ILV{Locator: wire.L64(loc), NID: nid}.Addr() }
	r1, r2, r3 := &peerRoute{link: 1}, &peerRoute{link: 2}, &peerRoute{link: 3}
	v4 := netip.MustParseAddr("192.0.2.1")
	tb.set(a(1, x), r1)
	tb.set(a(2, x), r2)
	tb.set(a(3, x), r3)
	tb.set(a(1, y), r1)
	tb.set(v4, r2)
	tb.set(a(2, x), r3) // again: replaced, not added
	if tb.len() != 5 || tb.get(a(1, x)) != r1 || tb.get(a(2, x)) != r3 || tb.get(a(3, x)) != r3 || tb.get(a(1, y)) != r1 ||
		tb.get(v4) != r2 || tb.get(a(4, x)) != nil || tb.get(a(2, y)) != nil {
		t.Fatalf("after set: %d routes", tb.len())
	}
	if got := tb.of(x); !slices.Equal(got, []netip.Addr{a(1, x), a(2, x), a(3, x)}) {
		t.Fatalf("of x: %v", got)
	}
	var all []netip.Addr
	tb.each(func(p netip.Addr, r *peerRoute) {
		if tb.get(p) != r {
			t.Errorf("each: %v with another route", p)
		}
		all = append(all, p)
	})
	if len(all) != 5 {
		t.Fatalf("each: %v", all)
	}
	tb.del(a(1, x)) // the first: the next takes its place
	tb.del(a(9, x)) // none
	if tb.len() != 4 || tb.get(a(1, x)) != nil || tb.get(a(2, x)) != r3 || !slices.Equal(tb.of(x), []netip.Addr{a(2, x), a(3, x)}) {
		t.Fatalf("after deleting the first: %d, %v", tb.len(), tb.of(x))
	}
	tb.del(a(3, x))
	tb.del(a(2, x))
	tb.del(v4)
	if tb.len() != 1 || tb.of(x) != nil || len(tb.byNID) != 1 || len(tb.other) != 0 {
		t.Fatalf("after deleting x's: %d, %v", tb.len(), tb.of(x))
	}
}
