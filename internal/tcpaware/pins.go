package tcpaware

import (
	"slices"

	"ilnp/internal/wire"
)

// Pins is make-before-break for the MN's own sending in a soft switch: a correspondent's
// packets stay on the old local locator (the datapath's per-session local locator) while the
// LU goes out from the new one, until the new path has answered it. The LU-ACK then gives the
// new path's RTT, and the sockets drain only when that path is the faster (Policy.
// SwitchAnswered): a slower path cannot overtake what is in flight, and the MN, which could not
// tell at the switch, no longer pauses for it. A pin ends with the LU-ACK, when its locator
// stops being usable or becomes the active one again, or with the session. Pure bookkeeping:
// the node carries out the pins it returns.
type Pins struct {
	m map[wire.NID]wire.L64
}

// Pin keeps peer's packets on loc. It returns false when peer is pinned already (to the
// older path, which still carries its packets) or loc is zero.
func (p *Pins) Pin(peer wire.NID, loc wire.L64) bool {
	if loc == 0 {
		return false
	}
	if p.m == nil {
		p.m = map[wire.NID]wire.L64{}
	}
	if _, ok := p.m[peer]; ok {
		return false
	}
	p.m[peer] = loc
	return true
}

// Pinned is the locator peer's packets are kept on (false: none).
func (p *Pins) Pinned(peer wire.NID) (wire.L64, bool) {
	loc, ok := p.m[peer]
	return loc, ok
}

// Release ends peer's pin and reports whether there was one.
func (p *Pins) Release(peer wire.NID) bool {
	_, ok := p.m[peer]
	delete(p.m, peer)
	return ok
}

// Stale ends and returns (sorted) the pins whose locator is no longer usable or is the active
// one again (nothing to wait for).
func (p *Pins) Stale(active wire.L64, usable func(wire.L64) bool) []wire.NID {
	var out []wire.NID
	for peer, loc := range p.m {
		if loc == active || !usable(loc) {
			out = append(out, peer)
		}
	}
	slices.Sort(out)
	for _, peer := range out {
		delete(p.m, peer)
	}
	return out
}

// ReleaseAll ends and returns (sorted) every pin.
func (p *Pins) ReleaseAll() []wire.NID {
	out := make([]wire.NID, 0, len(p.m))
	for peer := range p.m {
		out = append(out, peer)
	}
	slices.Sort(out)
	clear(p.m)
	return out
}
