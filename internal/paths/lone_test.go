package paths

import (
	"runtime"
	"testing"
	"time"

	"ilnp/internal/heapstat"
	"ilnp/internal/wire"
)

// A lone peer (PeerInput.Lone) leaves nothing in the tracker: a tracked peer that becomes lone
// has its pairs uncounted at once and is forgotten by EndPass, and a lone peer is neither
// judged nor probed however long its pair is quiet.
func TestLonePeerHoldsNothing(t *testing.T) {
	tr := newTracker(t)
	var l link
	l.send(at(0))
	l.recv(at(1))
	tr.Step([]Key{kA, kB}, []Sample{withKey(l.s, kA)}, at(10))
	if tr.Pairs() != 2 || tr.State(kA) != Alive {
		t.Fatalf("tracked: %d pairs, kA %v", tr.Pairs(), tr.State(kA))
	}
	tr.BeginPass()
	res := tr.StepPeers([]PeerInput{{Peer: peer, Candidates: []Key{kA}, Samples: []Sample{withKey(l.s, kA)}, Lone: true}}, at(20))
	if tr.Pairs() != 0 || len(tr.locals) != 0 || len(res.Changes) != 0 || len(res.Probes) != 0 {
		t.Fatalf("lone step: %d pairs, locals %v, %+v", tr.Pairs(), tr.locals, res)
	}
	forgotten, done := tr.EndPass(10)
	if !done || len(forgotten) != 1 || forgotten[0] != peer || len(tr.peers) != 0 || len(tr.order) != 0 {
		t.Fatalf("EndPass forgot %v (done %v), holds %d peers", forgotten, done, len(tr.peers))
	}
	// Data unanswered for seconds: no record, no probe, no verdict.
	for ms := 100; ms < 5000; ms += 20 {
		l.send(at(ms))
		tr.BeginPass()
		res := tr.StepPeers([]PeerInput{{Peer: peer, Candidates: []Key{kA}, Samples: []Sample{withKey(l.s, kA)}, Lone: true}}, at(ms))
		if len(res.Changes) != 0 || len(res.Probes) != 0 {
			t.Fatalf("lone peer at %d ms: %+v", ms, res)
		}
		if f, _ := tr.EndPass(10); len(f) != 0 || len(tr.peers) != 0 {
			t.Fatalf("lone peer at %d ms: forgot %v, holds %d peers", ms, f, len(tr.peers))
		}
	}
	if tr.State(kA) != Unknown {
		t.Errorf("lone pair's state %v, want unknown (not tracked)", tr.State(kA))
	}
}

func TestLoneView(t *testing.T) {
	tr := newTracker(t)
	var l link
	l.send(at(0))
	l.recv(at(5))
	s := withKey(l.s, kA)
	v := tr.LoneView(s, 2, at(105))
	if v.State != Alive || v.Peer != peer.String() || v.Local != kA.Local.String() || v.Remote != kA.Remote.String() ||
		v.TxPackets != 1 || v.RxPackets != 1 || v.TxBytes != 100 || v.RxBytes != 100 || v.Flows != 2 ||
		v.RTTMs != nil || v.Loss != nil || v.LastProofMsAgo == nil || *v.LastProofMsAgo != 100 {
		t.Errorf("fresh lone pair: %+v", v)
	}
	if v := tr.LoneView(s, 0, at(5+1171)); v.State != Unknown || v.LastProofMsAgo == nil {
		t.Errorf("lone pair quiet past ProbeInterval + InitialRTT + Margin: %+v", v)
	}
	if v := tr.LoneView(Sample{Key: kA, TxPackets: 3}, 0, at(5)); v.State != Unknown || v.LastProofMsAgo != nil {
		t.Errorf("lone pair that never delivered: %+v", v)
	}
}

// BenchmarkPeerMemory reports the heap the tracker holds per peer (issue 28) after 3 s of 60-ms
// passes with a packet each way per pair and pass: a single-pair peer tracked
// (B/single-pair-peer), the same peer marked lone as the daemon hands it over
// (B/lone-peer), and a two-pair peer (B/two-pair-peer). The figure is the live heap after a
// collection, the tracker's own with its maps' overhead.
func BenchmarkPeerMemory(b *testing.B) {
	const n = 5000
	const l1, r1, r2 = wire.L64(0x20010db800020000), wire.L64(0x20010db800010000), wire.L64(0x20010db800040000)
	run := func(pairs int, lone bool) float64 {
		before := heapstat.Live()
		tr, err := New(Config{})
		if err != nil {
			b.Fatal(err)
		}
		in := make([]PeerInput, n)
		for i := range in {
			p := wire.NID(0x0a00_0000_0000_0000 + uint64(i))
			in[i] = PeerInput{Peer: p, Lone: lone}
			for _, r := range []wire.L64{r1, r2}[:pairs] {
				in[i].Candidates = append(in[i].Candidates, Key{p, l1, r})
				in[i].Samples = append(in[i].Samples, Sample{Key: Key{p, l1, r}})
			}
		}
		for step := range 50 {
			now := t0.Add(time.Duration(step) * 60 * time.Millisecond)
			for i := range in {
				for j := range in[i].Samples {
					s := &in[i].Samples[j]
					s.TxPackets++
					s.RxPackets++
					s.TxBytes += 100
					s.RxBytes += 100
					s.LastTx, s.LastRx = now, now
				}
			}
			tr.BeginPass()
			tr.StepPeers(in, now)
			tr.EndPass(n)
		}
		// The inputs are the daemon's per poll, not the tracker's.
		in = nil
		held := float64(heapstat.Live()-before) / n
		runtime.KeepAlive(tr)
		return held
	}
	var single, lone, two float64
	for b.Loop() {
		single, lone, two = run(1, false), run(1, true), run(2, false)
	}
	b.ReportMetric(single, "B/single-pair-peer")
	b.ReportMetric(lone, "B/lone-peer")
	b.ReportMetric(two, "B/two-pair-peer")
}
