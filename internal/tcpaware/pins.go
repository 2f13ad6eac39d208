package tcpaware

import (
	"maps"
	"slices"
	"time"

	"ilnp/internal/wire"
)

// Pins is make-before-break for the MN's own sending in a soft switch: a correspondent's
// packets stay on the old local locator (the datapath's per-session local locator) while the
// LU goes out from the new one, until the new path has answered it. The LU-ACK then gives the
// new path's RTT, and the sockets drain only when that path is the faster (Policy.
// SwitchAnswered): a slower path cannot overtake what is in flight, and the MN, which could not
// tell at the switch, no longer pauses for it. A pin ends with the LU-ACK (onto a path that is
// not the faster, one old-path srtt later: ReleaseAfter), when its locator stops being usable
// or becomes the active one again, or with the session. Pure bookkeeping: the node carries out
// the pins it returns.
type Pins struct {
	m   map[wire.NID]wire.L64
	due map[wire.NID]time.Time // pins that end at a time (ReleaseAfter)
}

// MaxLinger bounds how long a pin outlives its LU-ACK.
const MaxLinger = time.Second

// Linger is how long peer's packets stay on the old path after its LU-ACK. Onto a path that is
// not faster than the sockets' srtt (the largest, srtt) by 1/8: one srtt, and at least half
// the exchange's RTT (the LU-ACK's way over the new path), at most MaxLinger. The correspondent
// switched when it sent the LU-ACK; what it sent on the old path before then is still arriving
// (a receiving socket's srtt says nothing of that path's queue), and its ACKs, kept on the old
// path, end the correspondent's drain at the old path's pace instead of the new one's. Onto a
// faster path, or without an RTT or a socket, none: a faster path speeds the drain up.
func Linger(rtt, srtt time.Duration) time.Duration {
	if rtt <= 0 || srtt <= 0 || rtt < srtt-srtt/8 {
		return 0
	}
	return min(max(srtt, rtt/2), MaxLinger)
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
	delete(p.due, peer)
	return ok
}

// ReleaseAfter makes peer's pin end at t (Due); false when peer is not pinned.
func (p *Pins) ReleaseAfter(peer wire.NID, t time.Time) bool {
	if _, ok := p.m[peer]; !ok {
		return false
	}
	if p.due == nil {
		p.due = map[wire.NID]time.Time{}
	}
	p.due[peer] = t
	return true
}

// Lingering: peer's pin only waits for its time (its LU-ACK has come).
func (p *Pins) Lingering(peer wire.NID) bool {
	_, ok := p.due[peer]
	return ok
}

// Due ends and returns (sorted) the pins whose time has come.
func (p *Pins) Due(now time.Time) []wire.NID {
	var out []wire.NID
	for peer, t := range p.due {
		if !now.Before(t) {
			out = append(out, peer)
		}
	}
	slices.Sort(out)
	for _, peer := range out {
		p.Release(peer)
	}
	return out
}

// NextDeadline is the earliest time a pin ends (ok false: none is timed).
func (p *Pins) NextDeadline() (next time.Time, ok bool) {
	for _, t := range p.due {
		if !ok || t.Before(next) {
			next, ok = t, true
		}
	}
	return next, ok
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
		p.Release(peer)
	}
	return out
}

// ReleaseAll ends and returns (sorted) every pin.
func (p *Pins) ReleaseAll() []wire.NID {
	out := slices.Sorted(maps.Keys(p.m))
	clear(p.m)
	clear(p.due)
	return out
}
