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
	asked, kept := 0, 0
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
		// Pairs with no state of their own are not kept; the two keep the same ones and
		// forget the closed ones.
		if len(split.pairs) != len(whole.pairs) || len(split.pairs) > pairs {
			t.Fatalf("step %d: %d and %d pairs kept, want the same, at most %d", step, len(split.pairs), len(whole.pairs), pairs)
		}
		kept = max(kept, len(split.pairs))
		for k := range split.pairs {
			if _, ok := whole.pairs[k]; !ok || k.Peer >= wire.NID(0x0a00_0000_0000_0000+uint64(pairs)) {
				t.Fatalf("step %d: pair %v kept in shares only or after it closed", step, k)
			}
		}
		asked += len(want)
	}
	if asked == 0 || kept == 0 {
		t.Fatalf("%d actions asked for, at most %d pairs kept: the test decides nothing", asked, kept)
	}
}
