package tcpaware

import (
	"maps"
	"slices"
	"time"

	"ilnp/internal/wire"
)

// RemotePins is Pins on the correspondent's side: when the MN switches softly, its LU names a
// new active locator while the old one still works, and the MN keeps its own packets on the
// old path until the LU-ACK (Pins). The CN, which has no measurement of the new path, keeps
// its packets to the MN on the old remote locator too (the datapath's per-session remote pin)
// while a probe of the new pair measures that path's RTT; then the sockets drain only if the
// new path is the faster, and the packets move. Without the pin the CN drained at once for up
// to an RTT whenever it could not tell, which between paths of equal RTT paused every socket
// for nothing.
//
// A pin is taken only while the old path is seen working (the MN's packets arrived on it in
// the last RemotePinFreshRx): a switch away from a failed path (issue 16's failover, whose LU
// still lists the failed locator, demoted) finds it silent for at least the liveness
// verdict's margin, and is not pinned. A pin ends when the probe is answered, when the MN's
// packets come over the new path (RemotePinRxOnNew: it pins nothing itself, so its switch was
// hard, or its own pin is over), at MaxRemotePin, when the pinned locator stops being usable,
// or with the session. Pure bookkeeping: the node carries out what it returns.
type RemotePins struct {
	m map[wire.NID]*remotePin
}

type remotePin struct {
	old, new, local wire.L64
	since           time.Time
	rxBase          uint64 // packets received on the new pairs when first observed
	based           bool
}

// RemotePinFreshRx is how recently the MN's packets must have arrived on the old path for a pin:
// well under the liveness verdict's silence (paths.DefaultMargin, 70 ms), above a flowing
// stream's gaps and the datapath clock's tick.
const RemotePinFreshRx = 30 * time.Millisecond

// RemotePinRxOnNew is how many packets over the new pairs, beyond those seen at the first
// observation, show the MN sending there: more than the stray control packets (an LU
// retransmission, the probe's and a locator challenge's echoes) a pinned switch receives.
const RemotePinRxOnNew = 4

// MaxRemotePin bounds a pin whose probe is not answered.
const MaxRemotePin = time.Second

// Pin keeps peer's packets on old while local->new is probed. It returns false when peer is
// pinned already, or old or new is zero.
func (h *RemotePins) Pin(peer wire.NID, old, new, local wire.L64, now time.Time) bool {
	if old == 0 || new == 0 || old == new {
		return false
	}
	if h.m == nil {
		h.m = map[wire.NID]*remotePin{}
	}
	if _, ok := h.m[peer]; ok {
		return false
	}
	h.m[peer] = &remotePin{old: old, new: new, local: local, since: now}
	return true
}

// Pinned is the locator peer's packets are kept on and the one they are to move to.
func (h *RemotePins) Pinned(peer wire.NID) (old, new wire.L64, ok bool) {
	x, ok := h.m[peer]
	if !ok {
		return 0, 0, false
	}
	return x.old, x.new, true
}

// Probed is the pair whose answer ends peer's pin.
func (h *RemotePins) Probed(peer wire.NID) (local, remote wire.L64, ok bool) {
	x, ok := h.m[peer]
	if !ok {
		return 0, 0, false
	}
	return x.local, x.new, true
}

// Answered ends peer's pin when the probe of local->remote is its own; it returns whether it
// did.
func (h *RemotePins) Answered(peer wire.NID, local, remote wire.L64) bool {
	x, ok := h.m[peer]
	if !ok || x.local != local || x.new != remote {
		return false
	}
	delete(h.m, peer)
	return true
}

// Observe takes the packets received so far on peer's pairs to the new locator; it ends the
// pin and returns true once they grew by more than RemotePinRxOnNew since the first observation.
func (h *RemotePins) Observe(peer wire.NID, rxOnNew uint64) bool {
	x, ok := h.m[peer]
	if !ok {
		return false
	}
	if !x.based {
		x.rxBase, x.based = rxOnNew, true
		return false
	}
	if rxOnNew < x.rxBase || rxOnNew-x.rxBase <= RemotePinRxOnNew {
		return false
	}
	delete(h.m, peer)
	return true
}

// Due ends and returns the pins older than MaxRemotePin, each with its age: a lower bound
// of the new path's RTT, as its probe is still unanswered.
func (h *RemotePins) Due(now time.Time) map[wire.NID]time.Duration {
	var out map[wire.NID]time.Duration
	for peer, x := range h.m {
		if age := now.Sub(x.since); age >= MaxRemotePin {
			if out == nil {
				out = map[wire.NID]time.Duration{}
			}
			out[peer] = age
			delete(h.m, peer)
		}
	}
	return out
}

// Stale ends and returns (sorted) the pins whose locator is no longer usable (usable(peer,
// old) false) or whose peer's active locator is no longer the one they wait for.
func (h *RemotePins) Stale(active func(wire.NID) wire.L64, usable func(wire.NID, wire.L64) bool) []wire.NID {
	var out []wire.NID
	for peer, x := range h.m {
		if active(peer) != x.new || !usable(peer, x.old) {
			out = append(out, peer)
		}
	}
	slices.Sort(out)
	for _, peer := range out {
		delete(h.m, peer)
	}
	return out
}

// Release ends peer's pin and reports whether there was one.
func (h *RemotePins) Release(peer wire.NID) bool {
	_, ok := h.m[peer]
	delete(h.m, peer)
	return ok
}

// ReleaseAll ends and returns (sorted) every pin.
func (h *RemotePins) ReleaseAll() []wire.NID {
	out := h.Peers()
	clear(h.m)
	return out
}

// Peers lists (sorted) the pinned correspondents.
func (h *RemotePins) Peers() []wire.NID { return slices.Sorted(maps.Keys(h.m)) }
