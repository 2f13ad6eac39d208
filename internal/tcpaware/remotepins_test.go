package tcpaware

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"ilnp/internal/wire"
)

func TestRemotePins(t *testing.T) {
	const (
		peer, other    wire.NID = 0xb, 0xc
		old, nu, local wire.L64 = 0x1, 0x2, 0xa
		third          wire.L64 = 0x3
	)
	t0 := time.Unix(1000, 0)
	var h RemotePins
	if h.Pin(peer, old, old, local, t0) || h.Pin(peer, 0, nu, local, t0) || h.Pin(peer, old, 0, local, t0) {
		t.Fatal("pinned a switch to the same or no locator")
	}
	if !h.Pin(peer, old, nu, local, t0) {
		t.Fatal("first pin refused")
	}
	if h.Pin(peer, nu, third, local, t0) {
		t.Fatal("second pin of a pinned peer accepted: the older path still carries its packets")
	}
	if o, n, ok := h.Pinned(peer); !ok || o != old || n != nu {
		t.Fatalf("Pinned = %v %v %v", o, n, ok)
	}
	// Only the probe of the hold's own pair ends it.
	if h.Answered(peer, local, old) || h.Answered(peer, 0xf, nu) || h.Answered(other, local, nu) {
		t.Fatal("another pair's answer ended the hold")
	}
	if !h.Answered(peer, local, nu) {
		t.Fatal("the probed pair's answer did not end the hold")
	}
	if _, _, ok := h.Pinned(peer); ok || h.Answered(peer, local, nu) {
		t.Fatal("answered pin still there")
	}

	// Packets over the new pairs: the first observation is the base; a few stray ones do not
	// end the hold, the peer's flow does.
	h.Pin(peer, old, nu, local, t0)
	for i, c := range []struct {
		rx   uint64
		ends bool
	}{{10, false}, {10 + RemotePinRxOnNew, false}, {9, false}, {11 + RemotePinRxOnNew, true}} {
		if got := h.Observe(peer, c.rx); got != c.ends {
			t.Fatalf("observation %d (rx %d): ended %v, want %v", i, c.rx, got, c.ends)
		}
	}
	if h.Observe(peer, 1000) {
		t.Fatal("observation of an ended pin ended it again")
	}

	// Unanswered: ends at MaxRemotePin with its age.
	h.Pin(peer, old, nu, local, t0)
	h.Pin(other, old, nu, local, t0.Add(500*time.Millisecond))
	if d := h.Due(t0.Add(MaxRemotePin - time.Millisecond)); len(d) != 0 {
		t.Fatalf("due before MaxRemotePin: %v", d)
	}
	if d := h.Due(t0.Add(MaxRemotePin + 100*time.Millisecond)); len(d) != 1 || d[peer] != MaxRemotePin+100*time.Millisecond {
		t.Fatalf("due at MaxRemotePin+100ms: %v, want only %v with its age", d, peer)
	}
	if got := h.Peers(); !slices.Equal(got, []wire.NID{other}) {
		t.Fatalf("left %v, want %v", got, other)
	}

	// Stale: the old locator gone, or the peer moved on to a third one.
	h.Pin(peer, old, nu, local, t0)
	active := map[wire.NID]wire.L64{peer: nu, other: third}
	usable := func(p wire.NID, l wire.L64) bool { return true }
	if got := h.Stale(func(p wire.NID) wire.L64 { return active[p] }, usable); !slices.Equal(got, []wire.NID{other}) {
		t.Fatalf("stale %v, want %v (moved on)", got, other)
	}
	if got := h.Stale(func(p wire.NID) wire.L64 { return active[p] }, func(p wire.NID, l wire.L64) bool { return l != old }); !slices.Equal(got, []wire.NID{peer}) {
		t.Fatalf("stale %v, want %v (old locator unusable)", got, peer)
	}
	h.Pin(peer, old, nu, local, t0)
	h.Pin(other, old, nu, local, t0)
	if got := h.ReleaseAll(); !slices.Equal(got, []wire.NID{peer, other}) || len(h.Peers()) != 0 {
		t.Fatalf("ReleaseAll %v, left %v", got, h.Peers())
	}
}

// RemotePinAnswered drains (drain number set, not waiting) with the measured RTT, which the
// iterator compares with each socket's srtt; an RTT out of range is no estimate.
func TestRemotePinAnswered(t *testing.T) {
	peer := netip.MustParseAddr("2001:db8::b")
	p := NewPolicy(true)
	u, ok := p.RemotePinAnswered(peer, 40*time.Millisecond)
	if !ok || u.Entry.Drain == 0 || u.Entry.DrainWait != 0 || u.Entry.RttUs != 40000 || u.Revert || u.Entry.LossWindowMs != 0 {
		t.Fatalf("RemotePinAnswered(40ms) = %+v, %v", u, ok)
	}
	v, _ := p.RemotePinAnswered(peer, 0)
	if v.Entry.RttUs != 0 || v.Entry.Drain == u.Entry.Drain {
		t.Fatalf("RemotePinAnswered(0) = %+v: want a new drain number without an RTT", v)
	}
	if _, ok := NewPolicy(false).RemotePinAnswered(peer, time.Millisecond); ok {
		t.Fatal("reactions off: RemotePinAnswered gave an update")
	}
}
