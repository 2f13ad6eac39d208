package lu

import (
	"slices"
	"sort"
	"testing"
	"time"

	"ilnp/internal/wire"
)

// dueByWalk is what Tick acted on when it passed over every peer: the outstanding exchanges
// whose deadline has come, by deadline, then peer.
func dueByWalk(e *Engine, now time.Time) []wire.NID {
	var due []wire.NID
	for nid, p := range e.peers {
		if p.out != nil && !now.Before(p.out.deadline) {
			due = append(due, nid)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		a, b := e.peers[due[i]].out.deadline, e.peers[due[j]].out.deadline
		if !a.Equal(b) {
			return a.Before(b)
		}
		return due[i] < due[j]
	})
	return due
}

// Tick takes the due exchanges off the deadline queue and looks at no other peer (issue 28: a
// pass over all 100,000 peers per timer), and acts on those a pass over every peer finds, in
// its order, through retransmissions, redirects, resends, ACKs and give-ups.
func TestTickTouchesOnlyDue(t *testing.T) {
	const n, out = 5000, 40
	e := engineOf(t, n, out)
	// The acknowledged exchanges' entries are stale; the loop's NextDeadline drops them.
	if d, _ := e.NextDeadline(); !d.After(t0) {
		t.Fatalf("next deadline %v, want after t0", d)
	}
	e.popped = 0
	if acts := e.Tick(t0); len(acts) != 0 || e.popped != 0 {
		t.Fatalf("Tick before any deadline: %d actions, %d entries looked at, want 0 and 0", len(acts), e.popped)
	}
	// Some exchanges end or move their deadline: their queued entries go stale.
	for i := range 10 {
		if res, _ := e.Ack(wire.NID(i+1), msgTo(wire.NID(i+1), 0x20010db8_00030000).Update.Ack(), t0.Add(time.Millisecond)); res.Outcome != Acked {
			t.Fatalf("ack %d: %v", i+1, res.Outcome)
		}
	}
	for i := 10; i < 15; i++ {
		e.Redirect(wire.NID(i+1), wire.ILV{Locator: 0x20010db8_00090000, NID: wire.NID(i + 1)}, t0.Add(2*time.Millisecond))
	}
	for i := 15; i < 20; i++ {
		e.Resend(wire.NID(i+1), t0.Add(3*time.Millisecond))
	}
	for now, rounds := t0, 0; ; rounds++ {
		d, ok := e.NextDeadline()
		if !ok {
			break
		}
		if rounds > 50 {
			t.Fatal("exchanges never end")
		}
		now = d
		want := dueByWalk(e, now)
		queued := len(e.deadlines)
		e.popped = 0
		acts := e.Tick(now)
		var got []wire.NID
		for _, a := range acts {
			got = append(got, a.Message.Peer)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Tick at %v acted on %v, a pass over every peer finds %v", now.Sub(t0), got, want)
		}
		if e.popped > queued || e.popped > out+15 {
			t.Fatalf("Tick looked at %d queued entries (queue %d, %d exchanges), want at most those armed", e.popped, queued, out)
		}
	}
	if e.stats.GaveUp != out-10 {
		t.Fatalf("gave up %d, want the %d unanswered", e.stats.GaveUp, out-10)
	}
}
