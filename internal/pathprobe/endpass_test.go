package pathprobe

import (
	"testing"
	"time"

	"ilnp/internal/wire"
)

// checkingSamples are n pairs whose packets went unanswered long enough to be checked: each
// keeps state of its own once stepped.
func checkingSamples(n int, now time.Time) []Sample {
	out := make([]Sample, n)
	for i := range out {
		out[i] = Sample{Key: Key{Peer: wire.NID(0x0b00_0000_0000_0000 + uint64(i)), Local: 1, Remote: 2},
			Unanswered: 3, FirstUnanswered: now.Add(-time.Second), LastTx: now}
	}
	return out
}

// The end of a pass does not walk the pairs (issue 28: at 100,000 it held the daemon's loop):
// BeginPass and EndPass touch none, a StepSome touches its samples alone, and what the pass
// did not sample is forgotten all the same, while what it sampled, and the answers to probes
// of pairs not sampled yet, are kept.
func TestEndPassTouchesNoPair(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(9000, 0)
	all := checkingSamples(10_000, t0)
	if acts := s.Step(all, t0); len(acts) != 2*len(all) || len(s.pairs) != len(all) {
		t.Fatalf("%d actions, %d pairs kept: want a check of each of %d", len(acts), len(s.pairs), len(all))
	}
	now := t0.Add(10 * time.Millisecond)
	s.touched = 0
	s.BeginPass()
	if s.touched != 0 {
		t.Fatalf("BeginPass touched %d pairs", s.touched)
	}
	// The plain probe of pair 9,999 is answered before the pass reaches it.
	last := all[len(all)-1].Key
	s.Answered(last, Plain, t0, now)
	if st, in := s.lookup(last); in == nil || answerAfter(st.plain) != now.Sub(t0) {
		t.Fatalf("answer to an unsampled pair's probe lost mid-pass: %+v", st)
	}
	if v := s.Views(); len(v) != len(all) {
		t.Fatalf("mid-pass view lists %d pairs, want %d", len(v), len(all))
	}
	kept := append(all[:100:100], all[len(all)-1])
	for i := range kept {
		kept[i].LastTx = now
	}
	s.StepSome(kept[:50], now)
	s.StepSome(kept[50:], now)
	if s.touched != len(kept) {
		t.Fatalf("two shares of %d samples touched %d pairs", len(kept), s.touched)
	}
	s.touched = 0
	s.EndPass()
	if s.touched != 0 {
		t.Fatalf("EndPass touched %d pairs", s.touched)
	}
	if len(s.pairs) != len(kept) {
		t.Fatalf("%d pairs kept after the pass, want the %d it sampled", len(s.pairs), len(kept))
	}
	if st, ok := s.pairs[last]; !ok || answerAfter(st.plain) != now.Sub(t0) || !st.is(checking) {
		t.Fatalf("sampled pair's check lost: %+v", st)
	}
	if _, ok := s.pairs[all[500].Key]; ok {
		t.Fatal("a pair the pass did not sample is still kept")
	}
	// EndPass without a pass, and a pass opened twice, change nothing.
	s.EndPass()
	s.BeginPass()
	s.BeginPass()
	s.EndPass()
	if len(s.pairs) != 0 {
		t.Fatalf("an empty pass kept %d pairs", len(s.pairs))
	}
}

// BenchmarkEndPass100k: the end of a pass over 100,000 checked pairs of which one share was
// sampled (ns per EndPass).
func BenchmarkEndPass100k(b *testing.B) {
	t0 := time.Unix(9000, 0)
	all := checkingSamples(100_000, t0)
	s, _ := New(Config{})
	s.Step(all, t0)
	for b.Loop() {
		b.StopTimer()
		s.BeginPass()
		s.StepSome(all, t0) // every pair kept: the walk is as long as it gets
		b.StartTimer()
		s.EndPass()
	}
}
