package node

import (
	"math/rand/v2"
	"testing"
	"time"

	"ilnp/internal/datapath"
	"ilnp/internal/wire"
)

// A poll over many pairs is walked in steps of at most pathStepPairs pairs, each peer whole and
// exactly once, every pair reached (issue 28: one poll over 21,772 pairs held the loop 2 s).
func TestPathPollSteps(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 1))
	var stats []datapath.PathStats
	want := map[datapath.PathKey]bool{}
	for i := 0; i < 30_000; i++ {
		peer := wire.NID(0x0a00_0000_0000_0000 + uint64(rng.IntN(12_000)))
		k := datapath.PathKey{LocalNID: 1, RemoteNID: peer, Local: wire.L64(1 + rng.IntN(3)), Remote: wire.L64(0x10 + i)}
		stats = append(stats, datapath.PathStats{Key: k})
		want[k] = true
	}
	poll := newPathPoll(stats)
	seenPeer := map[wire.NID]bool{}
	reached := map[datapath.PathKey]bool{}
	steps := 0
	for {
		step := poll.take(pathStepPairs)
		if len(step) == 0 {
			break
		}
		steps++
		pairs := 0
		for _, ps := range step {
			if seenPeer[ps.peer] {
				t.Fatalf("peer %v handed out twice", ps.peer)
			}
			seenPeer[ps.peer] = true
			for _, st := range poll.stats[ps.from:ps.to] {
				if st.Key.RemoteNID != ps.peer {
					t.Fatalf("peer %v's share holds %v", ps.peer, st.Key)
				}
				reached[st.Key] = true
				pairs++
			}
		}
		if pairs > pathStepPairs && len(step) > 1 {
			t.Fatalf("step %d judges %d pairs of %d peers, want at most %d", steps, pairs, len(step), pathStepPairs)
		}
	}
	if len(reached) != len(want) {
		t.Fatalf("the walk reached %d of %d pairs", len(reached), len(want))
	}
	if min := len(stats) / pathStepPairs; steps < min {
		t.Fatalf("%d steps over %d pairs, want at least %d", steps, len(stats), min)
	}
	// A peer with more pairs than a step is handed out alone, whole.
	var big []datapath.PathStats
	for i := 0; i < pathStepPairs+5; i++ {
		big = append(big, datapath.PathStats{Key: datapath.PathKey{RemoteNID: 7, Remote: wire.L64(i + 1)}})
	}
	big = append(big, datapath.PathStats{Key: datapath.PathKey{RemoteNID: 8, Remote: 1}})
	poll = newPathPoll(big)
	if s := poll.take(pathStepPairs); len(s) != 1 || s[0].to-s[0].from != pathStepPairs+5 {
		t.Fatalf("first step %+v, want peer 7 alone with all its pairs", s)
	}
	if s := poll.take(pathStepPairs); len(s) != 1 || s[0].peer != 8 {
		t.Fatalf("second step %+v, want peer 8", s)
	}
	if s := poll.take(pathStepPairs); len(s) != 0 {
		t.Fatalf("third step %+v, want none", s)
	}
}

// A poll hands out one peer's pair counters by a binary search over its peers, the same pairs
// a pass over every pair finds (the poll's first step looked for each remote pin's peer in
// every pair: pins x pairs, issue 28).
func TestPathPollOfPeer(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 2))
	var stats []datapath.PathStats
	for i := 0; i < 20_000; i++ {
		peer := wire.NID(0x0a00_0000_0000_0000 + uint64(rng.IntN(8_000)))
		stats = append(stats, datapath.PathStats{Key: datapath.PathKey{LocalNID: 1, RemoteNID: peer, Local: 1, Remote: wire.L64(0x10 + i)}, RxPackets: uint64(i)})
	}
	whole := make(map[wire.NID][]datapath.PathStats)
	for _, st := range stats {
		whole[st.Key.RemoteNID] = append(whole[st.Key.RemoteNID], st)
	}
	poll := newPathPoll(stats) // sorts stats in place, stably: each peer's pairs keep their order
	for peer, want := range whole {
		got := poll.of(peer)
		if len(got) != len(want) {
			t.Fatalf("peer %v: %d pairs, a pass over every pair finds %d", peer, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("peer %v: pair %d is %+v, want %+v", peer, i, got[i], want[i])
			}
		}
	}
	for _, absent := range []wire.NID{1, 0x0a00_0000_0000_0000 + 8_000, 0xffff_ffff_ffff_ffff} {
		if got := poll.of(absent); got != nil {
			t.Fatalf("peer %v without pairs: got %d", absent, len(got))
		}
	}
}

// BenchmarkRemotePinsObserve100k: the poll's first step with 100 remote pins over 100,000
// pairs: each pin's counters found by a binary search (of), and, for comparison, by a pass
// over every pair per pin as the step did before (issue 28).
func BenchmarkRemotePinsObserve100k(b *testing.B) {
	var stats []datapath.PathStats
	for i := range 100_000 {
		stats = append(stats, datapath.PathStats{Key: datapath.PathKey{LocalNID: 1, RemoteNID: wire.NID(0x0a00_0000_0000_0000 + uint64(i)), Local: 1, Remote: 2}, RxPackets: 1})
	}
	poll := newPathPoll(stats)
	n := &Node{tcpa: &tcpAware{}}
	now := time.Now()
	for i := range 100 {
		n.tcpa.rpins.Pin(wire.NID(0x0a00_0000_0000_0000+uint64(i*997)), 2, 3, 1, now)
	}
	b.Run("binary-search", func(b *testing.B) {
		for b.Loop() {
			n.tcpRemotePinsObserve(poll.of, now)
		}
	})
	b.Run("pass-per-pin", func(b *testing.B) {
		for b.Loop() {
			n.tcpRemotePinsObserve(func(peer wire.NID) []datapath.PathStats {
				var out []datapath.PathStats
				for _, st := range poll.stats {
					if st.Key.RemoteNID == peer {
						out = append(out, st)
					}
				}
				return out
			}, now)
		}
	})
}
