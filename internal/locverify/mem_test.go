package locverify

import (
	"runtime"
	"slices"
	"testing"
	"time"

	"ilnp/internal/heapstat"
	"ilnp/internal/wire"
)

// BenchmarkPeerMemory reports the live heap per correspondent (issue 28) as a server's engine
// holds it: opened with its locator and probed once, its challenge out (B/peer-challenged:
// every responder session for a challenge lifetime), the challenge answered (B/peer), and once
// every peer moved to a new locator that answered and RecentlyVerified has passed
// (B/peer-moved).
func BenchmarkPeerMemory(b *testing.B) {
	const n = 20000
	heap := heapstat.Live
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var perPeer, moved, challenged float64
	for b.Loop() {
		before := heap()
		e, err := New(Config{Mode: Opportunistic})
		if err != nil {
			b.Fatal(err)
		}
		tokens := make([]Token, n)
		for i := range n {
			p, l := wire.NID(0x0a00_0000_0000_0000+i), wire.L64(0x2001_0db8_0000_0000+i<<16)
			if _, err := e.Opened(p, []wire.L64{l}, l, false, now); err != nil {
				b.Fatal(err)
			}
			acts, err := e.Probe(p, l, now)
			if err != nil || len(acts) != 1 {
				b.Fatalf("probe: %+v %v", acts, err)
			}
			tokens[i] = acts[0].Token
		}
		challenged = float64(heap()-before-uint64(n*TokenSize)) / n
		for i, t := range tokens {
			if _, ok := e.Echoed(wire.NID(0x0a00_0000_0000_0000+i), t, now); !ok {
				b.Fatal("echo not taken")
			}
		}
		tokens = nil
		e.expire(now.Add(time.Hour))
		perPeer = float64(heap()-before) / n
		// Every peer moves to a new locator, which answers its challenge; RecentlyVerified
		// later the left records are gone.
		later := now.Add(time.Minute)
		for i := range n {
			p, l := wire.NID(0x0a00_0000_0000_0000+i), wire.L64(0x2001_0db9_0000_0000+i<<16)
			acts, err := e.Announced(p, []wire.L64{l}, l, 1000, true, later)
			if err != nil || len(acts) != 2 {
				b.Fatalf("move: %+v %v", acts, err)
			}
			if _, ok := e.Echoed(p, acts[1].Token, later); !ok {
				b.Fatal("echo not taken")
			}
		}
		e.Tick(later.Add(RecentlyVerified))
		moved = float64(heap()-before) / n
		runtime.KeepAlive(e)
	}
	b.ReportMetric(challenged, "B/peer-challenged")
	b.ReportMetric(perPeer, "B/peer")
	b.ReportMetric(moved, "B/peer-moved")
}

// BenchmarkPeerMemoryUnanswered reports the live heap per correspondent that never answers
// its probe (a client that filters ICMPv6 Echo, or the lab's generated peers), once its
// challenge has expired (B/peer-unanswered).
func BenchmarkPeerMemoryUnanswered(b *testing.B) {
	const n = 20000
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var unanswered float64
	for b.Loop() {
		before := heapstat.Live()
		e, err := New(Config{Mode: Opportunistic})
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			p, l := wire.NID(0x0a00_0000_0000_0000+i), wire.L64(0x2001_0db8_0000_0000+i<<16)
			if _, err := e.Opened(p, []wire.L64{l}, l, false, now); err != nil {
				b.Fatal(err)
			}
			if acts, err := e.Probe(p, l, now); err != nil || len(acts) != 1 {
				b.Fatalf("probe: %+v %v", acts, err)
			}
		}
		e.expire(now.Add(time.Hour))
		unanswered = float64(heapstat.Live()-before) / n
		runtime.KeepAlive(e)
	}
	b.ReportMetric(unanswered, "B/peer-unanswered")
}

// A burst of probes passes through the probing map, which is made afresh once the answers
// and expiries drained it, and the expiry queue lets its array go.
func TestProbingMapMadeAfresh(t *testing.T) {
	e, err := New(Config{Mode: Strict})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 2 * mapsFresh
	tokens := make([]Token, n)
	for i := range n {
		p, l := wire.NID(0x0a00_0000_0000_0000+i), wire.L64(0x2001_0db8_0000_0000+i<<16)
		acts, err := e.Opened(p, []wire.L64{l}, l, true, now)
		if err != nil || len(acts) != 1 {
			t.Fatalf("open: %+v %v", acts, err)
		}
		tokens[i] = acts[0].Token
	}
	if len(e.probing) != n || e.probingPeak != n || len(e.peers) != 0 || len(e.order) != n {
		t.Fatalf("%d probing (peak %d), %d full, %d queued", len(e.probing), e.probingPeak, len(e.peers), len(e.order))
	}
	before := e.probing
	for i := range n / 2 {
		if _, ok := e.Echoed(wire.NID(0x0a00_0000_0000_0000+i), tokens[i], now); !ok {
			t.Fatal("echo not taken")
		}
	}
	e.expire(now.Add(DefaultChallengeLifetime + time.Second))
	if len(e.probing) != 0 || e.probingPeak > mapsFresh || e.order != nil {
		t.Fatalf("after expiry: %d probing, peak %d, queue %v", len(e.probing), e.probingPeak, e.order)
	}
	if got := [...]int{len(e.lone[loneAnswered]), len(e.lone[loneProbed])}; got != [...]int{n / 2, n / 2} {
		t.Fatalf("lone answered, probed: %v", got)
	}
	before[1] = probingPeer{} // the old map is no longer the engine's
	if len(e.probing) != 0 {
		t.Fatal("the burst's map is still in use")
	}
}

// A correspondent that moved keeps the record of the locator it left for RecentlyVerified
// only: then Tick (NextDeadline says when) forgets it, and with nothing else under way the
// peer is back to its small record; within that time the locator still returns at full rate.
func TestLeftForgotten(t *testing.T) {
	e, err := New(Config{Mode: Strict})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const p, l1, l2 = wire.NID(0x0a00_0000_0000_0001), wire.L64(0x2001_0db8_0001_0000), wire.L64(0x2001_0db8_0002_0000)
	if _, err := e.Opened(p, []wire.L64{l1}, l1, false, now); err != nil {
		t.Fatal(err)
	}
	acts, err := e.Announced(p, []wire.L64{l2}, l2, 1000, true, now)
	if err != nil || len(acts) != 2 || acts[1].Kind != SendChallenge {
		t.Fatalf("move: %+v %v", acts, err)
	}
	if _, ok := e.Echoed(p, acts[1].Token, now); !ok {
		t.Fatal("echo not taken")
	}
	st, _ := e.get(p)
	if st.rare == nil || len(st.rare.left) != 1 {
		t.Fatalf("after the move: rare %+v", st.rare)
	}
	// First the answered challenge's entry in the expiry queue goes, then the left record.
	if d, ok := e.NextDeadline(); !ok || !d.Equal(now.Add(DefaultChallengeLifetime+expireSlack)) {
		t.Fatalf("NextDeadline = %v %v, want the challenge's expiry", d, ok)
	}
	e.Tick(now.Add(DefaultChallengeLifetime + expireSlack))
	if d, ok := e.NextDeadline(); !ok || !d.Equal(now.Add(RecentlyVerified)) || e.order != nil {
		t.Fatalf("NextDeadline = %v %v (queue %v), want the left record's end", d, ok, e.order)
	}
	e.Tick(now.Add(RecentlyVerified - time.Millisecond))
	if !st.recentlyLeft(l1, now.Add(RecentlyVerified-time.Millisecond)) {
		t.Fatal("forgotten before RecentlyVerified")
	}
	e.Tick(now.Add(RecentlyVerified))
	if st, _ := e.get(p); st.rare != nil || e.left != nil {
		t.Fatalf("after RecentlyVerified: rare %+v, queue %v", st.rare, e.left)
	}
	if _, ok := e.NextDeadline(); ok {
		t.Error("a deadline left with nothing to do")
	}
}

// A burst of new sessions passes from the lone opened peers through the full records (a
// challenge out) to the lone answered ones, or the lone probed ones when no answer comes; the
// full map it filled is made afresh once it has drained; a lone correspondent keeps its
// state, and leaves the lone maps as soon as something is under way again.
func TestLonePeers(t *testing.T) {
	e, err := New(Config{Mode: Opportunistic})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 4 * mapsFresh
	peerOf := func(i int) (wire.NID, wire.L64) {
		return wire.NID(0x0a00_0000_0000_0000 + i), wire.L64(0x2001_0db8_0000_0000 + i<<16)
	}
	for i := range n {
		p, l := peerOf(i)
		if _, err := e.Opened(p, []wire.L64{l}, l, false, now); err != nil {
			t.Fatal(err)
		}
	}
	lens := func() [loneKinds + 1]int {
		return [...]int{len(e.lone[loneOpened]), len(e.lone[loneProbed]), len(e.lone[loneAnswered]), len(e.peers) + len(e.probing)}
	}
	if got := lens(); got != [...]int{n, 0, 0, 0} {
		t.Fatalf("opened: lone opened, probed, answered, full %v", got)
	}
	tokens := make([]Token, n)
	for i := range n {
		p, l := peerOf(i)
		acts, err := e.Probe(p, l, now)
		if err != nil || len(acts) != 1 {
			t.Fatalf("probe: %+v %v", acts, err)
		}
		tokens[i] = acts[0].Token
	}
	if got := lens(); got != [...]int{0, 0, 0, n} || e.lonePeak[loneOpened] > mapsFresh {
		t.Fatalf("probed: lone opened, probed, answered, full %v (opened peak %d)", got, e.lonePeak[loneOpened])
	}
	for i, tk := range tokens[:n-1] {
		if _, ok := e.Echoed(wire.NID(0x0a00_0000_0000_0000+i), tk, now); !ok {
			t.Fatal("echo not taken")
		}
	}
	if got := lens(); got != [...]int{0, 0, n - 1, 1} || e.probingPeak > mapsFresh || len(e.probing) != 1 {
		t.Fatalf("answered: lone opened, probed, answered, full %v (probing peak %d)", got, e.probingPeak)
	}
	// The last one never answers: once its challenge expires it is a lone probed peer, not
	// probed again.
	e.expire(now.Add(DefaultChallengeLifetime + time.Second))
	silent, sl := peerOf(n - 1)
	if got := lens(); got != [...]int{0, 1, n - 1, 0} || !e.Known(silent) || e.Answered(silent) {
		t.Fatalf("unanswered: lone opened, probed, answered, full %v", got)
	}
	if acts, _ := e.Probe(silent, sl, now); acts != nil {
		t.Fatalf("a lone probed peer probed again: %+v", acts)
	}
	p, l := peerOf(7)
	if !e.Known(p) || !e.Answered(p) || e.Unverified(p) != nil {
		t.Fatalf("lone peer: known %v, answered %v, unverified %v", e.Known(p), e.Answered(p), e.Unverified(p))
	}
	if acts, _ := e.Probe(p, l, now); acts != nil {
		t.Fatalf("a lone peer probed again: %+v", acts)
	}
	// Announcing its locator again changes nothing; a new one puts it under verification
	// (it answered: Opportunistic limits it), and its answer brings it back.
	if acts, err := e.Announced(p, []wire.L64{l}, l, 1000, true, now); err != nil || acts != nil {
		t.Fatalf("same locator: %+v %v", acts, err)
	}
	l2 := l + 1
	acts, err := e.Announced(p, []wire.L64{l, l2}, l2, 1000, true, now)
	if err != nil || len(acts) != 2 || acts[0].Kind != MarkUnverified || acts[1].Kind != SendChallenge {
		t.Fatalf("new locator: %+v %v", acts, err)
	}
	if _, lone := e.lone[loneAnswered][p]; lone || !slices.Equal(e.Unverified(p), []wire.L64{l2}) {
		t.Fatalf("under verification: lone %v, unverified %v", lone, e.Unverified(p))
	}
	if _, ok := e.Echoed(p, acts[1].Token, now); !ok {
		t.Fatal("echo not taken")
	}
	if st, _ := e.get(p); !st.isVerified(l) || !st.isVerified(l2) || st.rare == nil {
		t.Fatalf("two verified: %+v", st)
	}
	// Back to one locator (the other's departure remembered for RecentlyVerified).
	later := now.Add(time.Second)
	if _, err := e.Announced(p, []wire.L64{l2}, l2, 1000, true, later); err != nil {
		t.Fatal(err)
	}
	e.Tick(later.Add(RecentlyVerified))
	if got, lone := e.lone[loneAnswered][p]; !lone || got != l2 {
		t.Fatalf("after its move: lone %v %v, want %v", lone, got, l2)
	}
	for i := range n {
		e.Closed(wire.NID(0x0a00_0000_0000_0000 + i))
	}
	if got := lens(); got != [loneKinds + 1]int{} || e.lonePeak[loneAnswered] > mapsFresh || e.Known(p) {
		t.Fatalf("closed: lone opened, probed, answered, full %v (answered peak %d)", got, e.lonePeak[loneAnswered])
	}
}
