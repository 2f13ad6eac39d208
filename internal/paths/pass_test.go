package paths

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"ilnp/internal/wire"
)

// A pass over many pairs in bounded StepPeers steps (the daemon's poll, a loop turn each)
// decides what one Step over all of them decides: every pair judged, the same changes and
// probes, the same views; peers left out of a pass are forgotten by EndPass in bounded steps
// too (issue 28).
func TestPassInSteps(t *testing.T) {
	const peers, step = 1200, 200
	rng := rand.New(rand.NewPCG(28, 2))
	cfg := Config{MaxProbesPerSecond: 1_000_000} // no probe left out for the budget's sake
	whole, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	split, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	type peerLinks struct {
		peer  wire.NID
		links []*link
		keys  []Key
	}
	var all []*peerLinks
	for i := 0; i < peers; i++ {
		pl := &peerLinks{peer: wire.NID(0x0a00_0000_0000_0000 + uint64(i))}
		for j := 0; j < 1+rng.IntN(3); j++ {
			pl.keys = append(pl.keys, Key{Peer: pl.peer, Local: wire.L64(1 + j), Remote: 0x10})
			pl.links = append(pl.links, &link{})
		}
		all = append(all, pl)
	}
	// 4 s of traffic: each pair sends and hears back, some stop hearing at 2 s (silent
	// failures), some peers leave at 3 s (their sessions close).
	sorted := func(r Result) ([]string, []Key) {
		var c []string
		for _, x := range r.Changes {
			c = append(c, fmt.Sprintf("%v %v->%v", x.Key, x.From, x.To))
		}
		slices.Sort(c)
		p := slices.Clone(r.Probes)
		slices.SortFunc(p, Key.compare)
		return c, p
	}
	changes := 0
	for ms := 0; ms <= 4000; ms += 20 {
		now := at(ms)
		var cands []Key
		var samples []Sample
		var inputs []PeerInput
		for i, pl := range all {
			if ms >= 3000 && i%7 == 0 {
				continue // gone
			}
			in := PeerInput{Peer: pl.peer}
			for j, l := range pl.links {
				l.s.Key = pl.keys[j]
				l.send(now)
				if ms < 2000 || (i+j)%5 != 0 {
					l.recv(now)
				}
				in.Candidates = append(in.Candidates, pl.keys[j])
				in.Samples = append(in.Samples, l.s)
			}
			cands = append(cands, in.Candidates...)
			samples = append(samples, in.Samples...)
			inputs = append(inputs, in)
		}
		want := whole.Step(cands, samples, now)
		var got Result
		split.BeginPass()
		maxStep := 0
		for len(inputs) > 0 {
			n, pairs := 0, 0
			for n < len(inputs) && pairs+len(inputs[n].Candidates) <= step {
				pairs += len(inputs[n].Candidates)
				n++
			}
			maxStep = max(maxStep, pairs)
			r := split.StepPeers(inputs[:n], now)
			got.Changes = append(got.Changes, r.Changes...)
			got.Probes = append(got.Probes, r.Probes...)
			inputs = inputs[n:]
		}
		ends := 0
		for {
			ends++
			_, done := split.EndPass(step)
			if done {
				break
			}
		}
		if maxStep > step {
			t.Fatalf("%d ms: a step of %d pairs", ms, maxStep)
		}
		if ms == 3000 && ends < peers/step {
			t.Fatalf("3000 ms: the forgetting took %d steps of at most %d peers over %d peers", ends, step, peers)
		}
		wc, wp := sorted(want)
		gc, gp := sorted(got)
		if !slices.Equal(wc, gc) || !slices.Equal(wp, gp) {
			t.Fatalf("%d ms: in steps %d changes, %d probes; at once %d, %d", ms, len(gc), len(gp), len(wc), len(wp))
		}
		changes += len(wc)
		if !whole.Next(now).Equal(split.Next(now)) {
			t.Fatalf("%d ms: next %v in steps, %v at once", ms, split.Next(now), whole.Next(now))
		}
	}
	wv, sv := whole.Views(at(4000)), split.Views(at(4000))
	if len(wv) != len(sv) || split.Pairs() != len(sv) {
		t.Fatalf("views: %d in steps (%d pairs), %d at once", len(sv), split.Pairs(), len(wv))
	}
	wj, _ := json.Marshal(wv)
	sj, _ := json.Marshal(sv)
	if string(wj) != string(sj) {
		t.Fatalf("views differ: in steps %.300s, at once %.300s", sj, wj)
	}
	dead := 0
	for _, v := range sv {
		if v.State == Dead {
			dead++
		}
	}
	if changes == 0 || dead == 0 || len(sv) == 0 {
		t.Fatalf("a test that decides nothing: %d changes, %d dead of %d pairs", changes, dead, len(sv))
	}
}
