package node

import (
	"testing"
	"time"

	"ilnp/internal/datapath"
	"ilnp/internal/pathprobe"
	"ilnp/internal/wire"
)

// BenchmarkStepEncap6_100k: the encap6 stage's share of a path poll at 100,000 sessions, one
// pair each, answered (the common case): stepEncap6 over every pair in steps of pathStepPairs
// as the poll's steps hand them out (issue 28: three quarters of a step's CPU). Per pair: ns,
// bytes and allocations. The peers' sessions come as pollPeers hands them over (its binding
// per peer, which the poll takes for path liveness, is not counted).
func BenchmarkStepEncap6_100k(b *testing.B) {
	const sessions = 100_000
	nd := snapNode(b, sessions)
	stats := make([]datapath.PathStats, sessions)
	peers := make([]peerStats, sessions)
	sess := make([]encap6Session, sessions)
	mono := datapath.MonotonicNs()
	for i := range stats {
		peer := wire.NID(0x0a00_0000_0000_0000 + uint64(i))
		stats[i] = datapath.PathStats{Key: datapath.PathKey{LocalNID: nd.nid, RemoteNID: peer, Local: 0x2001_0db8_0000_0001, Remote: 0x2001_0db8_0000_0100},
			TxPackets: 10, RxPackets: 10, LastTxNs: mono, LastRxNs: mono}
		peers[i] = peerStats{peer: peer, from: i, to: i + 1}
		l, r, ok := nd.cache.SessionView(peer)
		if !ok {
			b.Fatalf("no session with %v", peer)
		}
		sess[i] = encap6Session{local: l, remote: r, ok: true}
	}
	stage, err := pathprobe.New(pathprobe.Config{})
	if err != nil {
		b.Fatal(err)
	}
	m := &encap6Monitor{stage: stage, answers: make(chan echoAnswer), sent: map[uint16]sentEncap6{}}
	r := &encap6Read{state: map[datapath.PathKey]datapath.Encap6Pair{}, on: map[wire.NID]bool{}}
	pm := &pathMonitor{}
	now := time.Now()
	pm.wallBase, pm.monoBase = now, mono
	at := func(ns uint64) time.Time { return pm.at(ns, now) }
	b.ReportAllocs()
	for b.Loop() {
		stage.BeginPass()
		for i := 0; i < sessions; i += pathStepPairs {
			j := min(i+pathStepPairs, sessions)
			nd.stepEncap6(pm, m, r, stats, peers[i:j], sess[i:j], at, now)
		}
		stage.EndPass()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/sessions, "ns/pair")
}
