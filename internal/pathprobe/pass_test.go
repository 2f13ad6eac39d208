package pathprobe

import (
	"fmt"
	"testing"
	"time"

	"ilnp/internal/wire"
)

// A pass in shares (BeginPass, StepSome per share, EndPass: the daemon's poll steps, issue 28)
// asks for what one Step asks for and forgets the pairs no share sampled.
func TestPassInShares(t *testing.T) {
	whole, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	split, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(5000, 0)
	sample := func(i int, now time.Time) Sample {
		k := Key{Peer: wire.NID(0x0a00_0000_0000_0000 + uint64(i)), Local: 1, Remote: 2}
		if i%3 == 0 {
			return Sample{Key: k, LastTx: now} // answered
		}
		return Sample{Key: k, Unanswered: 3, FirstUnanswered: t0, LastTx: now}
	}
	asked := 0
	for step := 0; step < 20; step++ {
		now := t0.Add(time.Duration(step) * 100 * time.Millisecond)
		pairs := 1000
		if step >= 10 {
			pairs = 400 // the rest closed
		}
		var all []Sample
		for i := 0; i < pairs; i++ {
			all = append(all, sample(i, now))
		}
		want := whole.Step(all, now)
		split.BeginPass()
		var got []Action
		for i := 0; i < len(all); i += 150 {
			got = append(got, split.StepSome(all[i:min(i+150, len(all))], now)...)
		}
		split.EndPass()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("step %d: in shares %d actions, at once %d", step, len(got), len(want))
		}
		if len(split.pairs) != pairs || len(whole.pairs) != pairs {
			t.Fatalf("step %d: %d and %d pairs kept, want %d", step, len(split.pairs), len(whole.pairs), pairs)
		}
		asked += len(want)
	}
	if asked == 0 {
		t.Fatal("no action asked for: the test decides nothing")
	}
}
