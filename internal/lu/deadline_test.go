package lu

import (
	"math/rand/v2"
	"testing"
	"time"

	"ilnp/internal/wire"
)

// NextDeadline (a heap with stale entries dropped at the top) is, after any sequence of sends,
// supersessions, ACKs, retransmissions, redirects, cancels and forgets, the earliest deadline
// of the outstanding exchanges, as a pass over every peer finds it.
func TestNextDeadlineMatchesAPassOverPeers(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 1))
	e := newEngine(t, Config{})
	now := time.Unix(1000, 0)
	sent := map[wire.NID]Message{}
	for step := range 5000 {
		peer := wire.NID(1 + rng.IntN(40))
		switch op := rng.IntN(8); op {
		case 0, 1:
			m := msgTo(peer, wire.L64(0x20010db8_00020000+rng.IntN(3)))
			mustSend(t, e, m, now)
			sent[peer] = m
		case 2:
			if m, ok := sent[peer]; ok {
				e.Ack(peer, ackOf(m), now)
			}
		case 3:
			now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			e.Tick(now)
		case 4:
			e.Redirect(peer, wire.ILV{Locator: wire.L64(0x20010db8_00090000 + rng.IntN(2)), NID: peer}, now)
		case 5:
			e.Cancel(peer)
		case 6:
			e.Forget(peer)
			delete(sent, peer)
		case 7:
			now = now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
		}
		var want time.Time
		wantOK := false
		for _, p := range e.peers {
			if p.out != nil && (!wantOK || p.out.deadline.Before(want)) {
				want, wantOK = p.out.deadline, true
			}
		}
		got, ok := e.NextDeadline()
		if ok != wantOK || !got.Equal(want) {
			t.Fatalf("step %d: NextDeadline %v %v, a pass over the peers %v %v", step, got, ok, want, wantOK)
		}
	}
	if len(e.deadlines) > 4*len(e.peers)+64 {
		t.Errorf("%d deadlines kept for %d peers", len(e.deadlines), len(e.peers))
	}
}
