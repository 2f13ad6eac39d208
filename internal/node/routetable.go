package node

import (
	"iter"
	"net/netip"

	"ilnp/internal/wire"
)

// routeTable is the daemon's record of its peer routes by destination, kept per NID: a
// correspondent's session-view addresses are [locator:NID], nearly always one per NID, so
// a record holds the locator of the first and the rest aside. One map entry of 32 bytes a
// correspondent, where a map by address and an index by NID beside it took some 160 bytes of
// the daemon's heap a session (issue 28). Addresses that are no I-LV (not IPv6) go in other.
type routeTable struct {
	byNID map[wire.NID]nidRoutes
	other map[netip.Addr]*peerRoute
	n     int
}

// nidRoutes is one NID's routes: the first address's locator and route, then the others.
type nidRoutes struct {
	loc  wire.L64
	r    *peerRoute
	more *[]locRoute
}

type locRoute struct {
	loc wire.L64
	r   *peerRoute
}

func newRouteTable() routeTable {
	return routeTable{byNID: map[wire.NID]nidRoutes{}, other: map[netip.Addr]*peerRoute{}}
}

// get is the route to peer (nil: none).
func (t *routeTable) get(peer netip.Addr) *peerRoute {
	ilv, err := wire.ILVFromAddr(peer)
	if err != nil {
		return t.other[peer]
	}
	e, ok := t.byNID[ilv.NID]
	if !ok {
		return nil
	}
	if e.loc == ilv.Locator {
		return e.r
	}
	if e.more != nil {
		for _, x := range *e.more {
			if x.loc == ilv.Locator {
				return x.r
			}
		}
	}
	return nil
}

// set records r (not nil) as the route to peer.
func (t *routeTable) set(peer netip.Addr, r *peerRoute) {
	ilv, err := wire.ILVFromAddr(peer)
	if err != nil {
		if t.other[peer] == nil {
			t.n++
		}
		t.other[peer] = r
		return
	}
	e, ok := t.byNID[ilv.NID]
	switch {
	case !ok:
		t.byNID[ilv.NID] = nidRoutes{loc: ilv.Locator, r: r}
		t.n++
		return
	case e.loc == ilv.Locator:
		e.r = r
		t.byNID[ilv.NID] = e
		return
	}
	if e.more != nil {
		for i := range *e.more {
			if (*e.more)[i].loc == ilv.Locator {
				(*e.more)[i].r = r
				return
			}
		}
	} else {
		e.more = &[]locRoute{}
		t.byNID[ilv.NID] = e
	}
	*e.more = append(*e.more, locRoute{loc: ilv.Locator, r: r})
	t.n++
}

// del forgets the route to peer.
func (t *routeTable) del(peer netip.Addr) {
	ilv, err := wire.ILVFromAddr(peer)
	if err != nil {
		if t.other[peer] != nil {
			t.n--
			delete(t.other, peer)
		}
		return
	}
	e, ok := t.byNID[ilv.NID]
	if !ok {
		return
	}
	if e.loc == ilv.Locator {
		t.n--
		if e.more == nil || len(*e.more) == 0 {
			delete(t.byNID, ilv.NID)
			return
		}
		first := (*e.more)[0]
		*e.more = (*e.more)[1:]
		e.loc, e.r = first.loc, first.r
		if len(*e.more) == 0 {
			e.more = nil
		}
		t.byNID[ilv.NID] = e
		return
	}
	if e.more == nil {
		return
	}
	for i, x := range *e.more {
		if x.loc == ilv.Locator {
			t.n--
			*e.more = append((*e.more)[:i], (*e.more)[i+1:]...)
			if len(*e.more) == 0 {
				e.more = nil
				t.byNID[ilv.NID] = e
			}
			return
		}
	}
}

// of lists nid's routed addresses.
func (t *routeTable) of(nid wire.NID) []netip.Addr {
	e, ok := t.byNID[nid]
	if !ok {
		return nil
	}
	out := []netip.Addr{wire.ILV{Locator: e.loc, NID: nid}.Addr()}
	if e.more != nil {
		for _, x := range *e.more {
			out = append(out, wire.ILV{Locator: x.loc, NID: nid}.Addr())
		}
	}
	return out
}

// each calls f with every route; f may set routes already recorded, but not add or remove any.
func (t *routeTable) each(f func(peer netip.Addr, r *peerRoute)) {
	for a, r := range t.all() {
		f(a, r)
	}
}

// all is every route, as a sequence: ranged over in steps (the state file's snapshot,
// state.Walk), routes added or removed between steps are as in a range over a map, seen or
// not, and every other route is seen once.
func (t *routeTable) all() iter.Seq2[netip.Addr, *peerRoute] {
	return func(yield func(netip.Addr, *peerRoute) bool) {
		for nid, e := range t.byNID {
			if !yield(wire.ILV{Locator: e.loc, NID: nid}.Addr(), e.r) {
				return
			}
			if e.more == nil {
				continue
			}
			for _, x := range *e.more {
				if !yield(wire.ILV{Locator: x.loc, NID: nid}.Addr(), x.r) {
					return
				}
			}
		}
		for a, r := range t.other {
			if !yield(a, r) {
				return
			}
		}
	}
}

// len is how many routes there are.
func (t *routeTable) len() int { return t.n }
