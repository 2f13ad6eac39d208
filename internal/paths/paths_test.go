package paths

import (
	"testing"
	"time"

	"ilnp/internal/wire"
)

var (
	t0   = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	peer = wire.NID(0x0250b6fffe0a0b0c)
	kA   = Key{Peer: peer, Local: 0x20010db800020000, Remote: 0x20010db800010000}
	kB   = Key{Peer: peer, Local: 0x20010db800030000, Remote: 0x20010db800010000}
)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// link simulates the datapath's counters of one pair: sends and receipts at given times.
type link struct {
	s Sample
}

func (l *link) send(now time.Time) {
	l.s.TxPackets++
	l.s.TxBytes += 100
	l.s.LastTx = now
	if l.s.Unanswered == 0 {
		l.s.FirstUnanswered = now
	}
	l.s.Unanswered++
}

// probe: a probe leaves on the pair (the datapath counts it sent, not unanswered).
func (l *link) probe(now time.Time) {
	l.s.TxPackets++
	l.s.LastTx = now
}

func (l *link) recv(now time.Time) {
	l.s.RxPackets++
	l.s.RxBytes += 100
	l.s.LastRx = now
	l.s.Unanswered = 0
	l.s.FirstUnanswered = time.Time{}
}

func newTracker(t *testing.T) *Tracker {
	t.Helper()
	tr, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// sim drives a Tracker over one pair (kA) with a fake clock, 1 ms at a time: our packets and
// the peer's at given times, a path that fails silently (both ways) at failAt, probes answered
// one RTT after they leave while the path is up (the echo reply is a packet on the pair), and a
// daemon that steps every 20 ms and when the tracker's Next says.
type sim struct {
	tr      *Tracker
	l       link
	rtt     time.Duration
	failAt  int // ms; <0: never
	pending []time.Time
	next    time.Time
	lastRx  int // ms of the last delivery
	changes []timedChange
	probes  []int // ms of every probe
	steps   int
}

type timedChange struct {
	ms int
	c  Change
}

func newSim(t *testing.T, rtt time.Duration) *sim {
	s := &sim{tr: newTracker(t), rtt: rtt, failAt: -1, lastRx: -1}
	// A first probe measures the RTT.
	s.tr.Step([]Key{kA}, nil, at(0))
	s.l.probe(at(0))
	s.tr.Answered(kA, at(0), at(0).Add(rtt))
	s.l.recv(at(0).Add(rtt))
	return s
}

func (s *sim) up(ms int) bool { return s.failAt < 0 || ms < s.failAt }

// run advances to the end ms: we send when ours(ms), the peer's packets arrive when peers(ms).
func (s *sim) run(from, end int, ours, peers func(ms int) bool) {
	for ms := from; ms <= end; ms++ {
		now := at(ms)
		if ours != nil && ours(ms) {
			s.l.send(now)
		}
		if peers != nil && peers(ms) && s.up(ms) {
			s.l.recv(now)
			s.lastRx = ms
		}
		var still []time.Time
		for _, sent := range s.pending {
			switch {
			case now.Before(sent.Add(s.rtt)):
				still = append(still, sent)
			case s.up(int(sent.Sub(t0)/time.Millisecond)) && s.up(ms):
				s.tr.Answered(kA, sent, now)
				s.l.recv(now)
				s.lastRx = ms
			}
		}
		s.pending = still
		if ms%20 != 0 && (s.next.IsZero() || now.Before(s.next)) {
			continue
		}
		s.steps++
		for range step(s.tr, &s.l, ms, &s.changes) {
			s.pending = append(s.pending, now)
			s.probes = append(s.probes, ms)
		}
		s.next = s.tr.Next(now)
	}
}

// step is a daemon's Step of tr over one pair's counters (kA's, in l) at ms: its changes are
// appended to changes, and its probes leave (l counts them) and are returned.
func step(tr *Tracker, l *link, ms int, changes *[]timedChange) []Key {
	res := tr.Step([]Key{kA}, []Sample{withKey(l.s, kA)}, at(ms))
	for _, c := range res.Changes {
		*changes = append(*changes, timedChange{ms, c})
	}
	for range res.Probes {
		l.probe(at(ms))
	}
	return res.Probes
}

// deadAt is the first dead verdict at or after from (ms; -1: none).
func (s *sim) deadAt(from int) int {
	for _, c := range s.changes {
		if c.ms >= from && c.c.To == Dead {
			return c.ms
		}
	}
	return -1
}

func every(n int) func(int) bool { return func(ms int) bool { return ms%n == 0 } }

// A silent failure under traffic is declared within the bound after the last delivery: RTT +
// Margin from the first unanswered packet (or the overdue receipt) plus the probe's RTT when
// the peer's silence alone does not decide; a healthy pair is never declared dead, however its
// peer's traffic comes (bursts, pauses, a stream that ends, answers on another pair).
func TestLiveness(t *testing.T) {
	const failAt = 2000
	cases := []struct {
		name        string
		rtt         time.Duration
		ours, peers func(int) bool
		fail        bool
		// within: the dead verdict's bound after the last delivery; 0: never dead.
		within time.Duration
	}{
		{
			// udp-hd both ways (a packet every 4-5 ms each way): the peer was steady and
			// falls silent: RTT + Margin after our first unanswered packet (one of ours later).
			name: "two-way stream fails", rtt: time.Millisecond, ours: every(4), peers: every(5), fail: true,
			within: time.Millisecond + DefaultMargin + 4*time.Millisecond + time.Millisecond,
		},
		{
			// The same over a slow, queued path (probe RTT 90 ms): the suspect probe gets its
			// RTT and 10 ms.
			name: "two-way stream fails, probe RTT 90 ms", rtt: 90 * time.Millisecond, ours: every(1), peers: every(1), fail: true,
			within: 90*time.Millisecond + DefaultSuspectAfter + 100*time.Millisecond + 2*time.Millisecond,
		},
		{
			// A bulk receiver (sends nothing of its own): its steady stream stops; the probe
			// it sends then goes unanswered.
			name: "receiver's stream stops (failure)", rtt: time.Millisecond, peers: every(2), fail: true,
			within: 2*time.Millisecond + DefaultMargin + 2*time.Millisecond,
		},
		{
			// The same stream just ends: the probe is answered, alive.
			name: "receiver's stream ends", rtt: time.Millisecond, peers: func(ms int) bool { return ms < failAt && ms%2 == 0 },
		},
		{
			// A one-way sender (the peer sends nothing but its periodic probes): only its
			// suspect probes, at most one per reprobeAfter once they were answered, can tell;
			// the failure is found by the first one that goes unanswered. (The receiver finds
			// it sooner: its stream stopped.)
			name: "one-way sender fails", rtt: time.Millisecond, ours: every(4), fail: true,
			within: reprobeAfter + time.Millisecond + DefaultMargin - DefaultSuspectAfter + 20*time.Millisecond,
		},
		{
			name: "one-way sender, healthy", rtt: time.Millisecond, ours: every(4),
		},
		{
			// A bursty peer (10 packets in 10 ms every 300 ms) while we stream: its silences
			// are not failures (the probes are answered).
			name: "bursty peer", rtt: 2 * time.Millisecond, ours: every(3), peers: func(ms int) bool { return ms%300 < 10 },
		},
		{
			// A steady peer that pauses for 400 ms (silence suppression) while we stream.
			name: "steady peer pauses", rtt: 5 * time.Millisecond, ours: every(5),
			peers: func(ms int) bool { return ms%20 == 0 && (ms < failAt || ms > failAt+400) },
		},
		{
			// A queued path: probes take 90 ms, the peer pauses 300 ms.
			name: "steady peer pauses, probe RTT 90 ms", rtt: 90 * time.Millisecond, ours: every(2),
			peers: func(ms int) bool { return ms%10 == 0 && (ms < failAt || ms > failAt+300) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, tc.rtt)
			if tc.fail {
				s.failAt = failAt
			}
			s.run(1, failAt-1, tc.ours, tc.peers)
			if d := s.deadAt(0); d >= 0 {
				t.Fatalf("dead at %d ms before any failure: %+v", d, s.changes)
			}
			probesBefore := len(s.probes)
			s.run(failAt, failAt+3000, tc.ours, tc.peers)
			dead := s.deadAt(failAt)
			if tc.within == 0 {
				if dead >= 0 {
					t.Fatalf("healthy pair declared dead at %d ms: %+v", dead, s.changes)
				}
			} else {
				if dead < 0 {
					t.Fatalf("never declared dead (last delivery %d ms): %+v", s.lastRx, s.changes)
				}
				if after := time.Duration(dead-s.lastRx) * time.Millisecond; after > tc.within {
					t.Fatalf("dead %v after the last delivery (%d ms), want within %v", after, s.lastRx, tc.within)
				}
			}
			// Probing while data flows stays bounded: at most one suspect probe per Margin -
			// probeGuard and one periodic probe a second.
			if n, limit := len(s.probes)-probesBefore, 3000/int((DefaultMargin-probeGuard)/time.Millisecond)+4; n > limit {
				t.Fatalf("%d probes in 3 s, want at most %d", n, limit)
			}
			t.Logf("dead at %d ms (last delivery %d ms), %d probes in 3 s after %d ms, %d steps", dead, s.lastRx, len(s.probes)-probesBefore, failAt, s.steps)
		})
	}
}

func withKey(s Sample, k Key) Sample { s.Key = k; return s }

// An idle pair is probed once a second and never declared dead by its probes' silence alone
// (there is nothing to move); a dead pair comes back when it delivers again.
func TestIdleAndRecovery(t *testing.T) {
	s := newSim(t, time.Millisecond)
	peerProbes := func(ms int) bool { return ms%1000 == 500 } // the peer's periodic probes
	s.run(1, 5000, nil, peerProbes)
	if len(s.changes) > 0 && s.changes[len(s.changes)-1].c.To != Alive {
		t.Fatalf("idle pair: %+v", s.changes)
	}
	if n := len(s.probes); n < 4 || n > 6 {
		t.Fatalf("idle pair: %d probes in 5 s, want one a second", n)
	}
	// A stream both ways, the path fails, then comes back.
	s.failAt = 6000
	s.run(5001, 7000, every(4), every(4))
	if s.deadAt(6000) < 0 {
		t.Fatalf("not dead after the failure: %+v", s.changes)
	}
	s.failAt = -1
	s.run(7001, 9000, nil, peerProbes)
	if st := s.tr.State(kA); st != Alive {
		t.Fatalf("after the path came back: %v, want alive", st)
	}
}

// Next names the time of the pending decision: a quiet pair's suspect probe, then its
// answer's deadline.
func TestNext(t *testing.T) {
	s := newSim(t, time.Millisecond)
	s.run(1, 2000, every(4), every(4))
	// The peer falls silent after 2000 ms; we keep sending.
	s.l.send(at(2001))
	s.l.send(at(2002))
	s.tr.Step([]Key{kA}, []Sample{withKey(s.l.s, kA)}, at(2003))
	if got, want := s.tr.Next(at(2003)), s.l.s.LastRx.Add(time.Millisecond+DefaultSuspectAfter); !got.Equal(want) {
		t.Fatalf("next %v, want the suspect probe at %v (RTT + SuspectAfter after the last receipt)", got.Sub(t0), want.Sub(t0))
	}
	due := s.tr.Next(at(2003))
	res := s.tr.Step([]Key{kA}, []Sample{withKey(s.l.s, kA)}, due)
	if len(res.Probes) != 1 || s.tr.State(kA) != Suspect {
		t.Fatalf("at the suspect time: probes %v state %v", res.Probes, s.tr.State(kA))
	}
	if got := s.tr.Next(due); got.IsZero() || got.After(due.Add(DefaultMargin)) {
		t.Fatalf("next after the suspect probe %v, want its deadline within the margin", got.Sub(t0))
	}
}

// Pairs no longer among the candidates are forgotten; samples of unknown pairs are ignored.
func TestCandidates(t *testing.T) {
	tr := newTracker(t)
	tr.Step([]Key{kA, kB}, nil, at(0))
	if n := len(tr.Views(at(0))); n != 2 {
		t.Fatalf("%d views, want 2", n)
	}
	res := tr.Step([]Key{kB}, []Sample{{Key: kA, RxPackets: 3, LastRx: at(1)}}, at(1))
	if len(res.Changes) != 0 || len(tr.Views(at(1))) != 1 || tr.State(kA) != Unknown {
		t.Fatalf("after dropping kA: changes %v views %v", res.Changes, tr.Views(at(1)))
	}
}

func TestLossAndRTT(t *testing.T) {
	tr := newTracker(t)
	for i := range 4 {
		now := at(i * 1000)
		res := tr.Step([]Key{kA}, nil, now)
		if len(res.Probes) != 1 {
			t.Fatalf("second %d: %d probes", i, len(res.Probes))
		}
		if i%2 == 0 {
			tr.Answered(kA, now, now.Add(20*time.Millisecond))
		}
	}
	loss, ok := tr.Loss(kA, at(3500), time.Second)
	if !ok || loss != 1.0/3 { // the last probe is not given up yet
		t.Fatalf("loss %v %v, want 1/3", loss, ok)
	}
	if r, ok := tr.RTT(kA); !ok || r != 20*time.Millisecond {
		t.Fatalf("rtt %v %v", r, ok)
	}
	v := tr.Views(at(3500))
	if len(v) != 1 || v[0].RTTMs == nil || *v[0].RTTMs != 20 || v[0].Loss == nil {
		t.Fatalf("view %+v", v)
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{
		{Margin: -1},
		{SuspectAfter: 200 * time.Millisecond},
		{ProbeInterval: time.Millisecond},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

// Data on one pair answered on another (the peer still sends to our other locator, or chose
// to) is delivering when its probes are answered: the pair is not declared dead, and is
// probed at most once per reprobeAfter; it is dead once its probe goes unanswered.
func TestAnsweredOnAnotherPair(t *testing.T) {
	tr := newTracker(t)
	var a, b link
	tr.Step([]Key{kA, kB}, nil, at(0))
	a.send(at(0))
	b.send(at(0))
	probes := 0
	for ms := 10; ms <= 3000; ms += 10 {
		now := at(ms)
		a.send(now) // data out on kA
		b.recv(now) // the peer's packets come in on kB
		res := tr.Step([]Key{kA, kB}, []Sample{withKey(a.s, kA), withKey(b.s, kB)}, now)
		for _, k := range res.Probes {
			// Every probe is answered on kB, the peer's choice.
			if k == kA {
				a.probe(now)
				probes++
			}
			tr.Answered(k, now, now.Add(time.Millisecond))
		}
		if st := tr.State(kA); st == Dead {
			t.Fatalf("at %d ms: data pair answered on the other pair declared dead", ms)
		}
	}
	if probes > 3*1000/int(reprobeAfter/time.Millisecond)+3 {
		t.Fatalf("%d probes of the pair answered elsewhere in 3 s", probes)
	}
	// Now the pair fails (its probes go unanswered): kA dies within its probes' spacing and
	// the initial RTT (100 ms) + margin.
	deadAt := 0
	for ms := 3010; ms <= 3600 && deadAt == 0; ms += 10 {
		a.send(at(ms))
		b.recv(at(ms))
		tr.Step([]Key{kA, kB}, []Sample{withKey(a.s, kA), withKey(b.s, kB)}, at(ms))
		if tr.State(kA) == Dead {
			deadAt = ms
		}
	}
	if deadAt == 0 {
		t.Fatalf("pair failed for 600 ms: kA %v, want dead", tr.State(kA))
	}
}

func TestStateText(t *testing.T) {
	for _, s := range []State{Unknown, Alive, Suspect, Dead} {
		b, _ := s.MarshalText()
		var got State
		if err := got.UnmarshalText(b); err != nil || got != s {
			t.Errorf("%v: round trip %v %v", s, got, err)
		}
	}
	var s State
	if err := s.UnmarshalText([]byte("gone")); err == nil {
		t.Error("unknown name accepted")
	}
}

// A new local locator the peer has not acknowledged yet (its LU outstanding, lost on the way):
// data sent from it goes unanswered for as long as the LU is out, and that proves nothing
// about the pair: it is neither probed nor declared dead while held, and its silence counts
// only from the last hold (the issue-16 regression: a dead verdict 200 ms into the move sent
// the MN back to its old locator with an extra LU).
func TestHoldWhileUnacknowledged(t *testing.T) {
	for _, answered := range []bool{true, false} {
		tr := newTracker(t)
		var b link
		lastHold := 0
		for ms := 0; ms <= 1000; ms += 20 {
			now := at(ms)
			b.send(now) // a one-way flow from the new locator, nothing back
			tr.Hold(peer, now)
			lastHold = ms
			res := tr.Step([]Key{kB}, []Sample{withKey(b.s, kB)}, now)
			if len(res.Probes) != 0 || tr.State(kB) == Dead || tr.State(kB) == Suspect {
				t.Fatalf("held at %d ms: probes %v, state %v", ms, res.Probes, tr.State(kB))
			}
		}
		// The LU is acknowledged: the peer moves to us within an RTT, or never does.
		var deadAt int
		for ms := 1020; ms <= 3000 && deadAt == 0; ms += 20 {
			now := at(ms)
			b.send(now)
			if answered && ms >= 1040 {
				b.recv(now)
			}
			res := tr.Step([]Key{kB}, []Sample{withKey(b.s, kB)}, now)
			for _, p := range res.Probes {
				b.send(now)
				_ = p
			}
			if tr.State(kB) == Dead {
				deadAt = ms
			}
		}
		switch {
		case answered && deadAt != 0:
			t.Fatalf("answered after the hold, yet dead at %d ms", deadAt)
		case answered && tr.State(kB) != Alive:
			t.Fatalf("answered after the hold: %v, want alive", tr.State(kB))
		case !answered && deadAt == 0:
			t.Fatal("never answered after the hold, never declared dead")
		case !answered && deadAt < lastHold+int((DefaultInitialRTT+DefaultMargin)/time.Millisecond):
			t.Fatalf("dead at %d ms, before RTT + margin after the hold ended at %d ms", deadAt, lastHold)
		}
	}
}

// Many idle pairs: the probes of all of them together stay within MaxProbesPerSecond (one
// second's burst, then the rate), every pair gets its turn, and a pair that turns suspect is
// probed before the waiting idle ones.
func TestProbeCap(t *testing.T) {
	const pairs, limit = 200, 20
	tr, err := New(Config{MaxProbesPerSecond: limit})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]Key, pairs)
	for i := range keys {
		keys[i] = Key{Peer: wire.NID(i + 1), Local: 0x20010db800020000, Remote: 0x20010db800010000}
	}
	links := make([]link, pairs)
	samples := func() []Sample {
		out := make([]Sample, pairs)
		for i := range links {
			out[i] = withKey(links[i].s, keys[i])
		}
		return out
	}
	probedAt := map[Key][]int{}
	perSecond := map[int]int{}
	hot := keys[pairs-1] // sorts last: only its suspicion puts it first
	suspectProbe := -1
	for ms := 0; ms <= 12000; ms += 20 {
		now := at(ms)
		if ms >= 10000 {
			// A two-way flow on the hot pair until 10.1 s, then its answers stop.
			links[pairs-1].send(now)
			if ms <= 10100 {
				links[pairs-1].recv(now)
			}
		}
		res := tr.Step(keys, samples(), now)
		perSecond[ms/1000] += len(res.Probes)
		for _, k := range res.Probes {
			probedAt[k] = append(probedAt[k], ms)
			if k == hot && ms > 10100 && suspectProbe < 0 {
				suspectProbe = ms
			}
			i := int(k.Peer) - 1
			links[i].send(now)
			if k != hot {
				tr.Answered(k, now, now.Add(time.Millisecond))
				links[i].recv(now.Add(time.Millisecond))
			}
		}
	}
	for sec, n := range perSecond {
		if want := limit + 1; (sec == 0 && n > 2*limit) || (sec > 0 && n > want) {
			t.Errorf("second %d: %d probes, cap %d/s", sec, n, limit)
		}
	}
	for _, k := range keys {
		if len(probedAt[k]) == 0 {
			t.Fatalf("pair %v never probed in 12 s", k)
		}
	}
	if suspectProbe < 0 || suspectProbe > 10100+int((DefaultInitialRTT+DefaultSuspectAfter)/time.Millisecond)+60 {
		t.Fatalf("hot pair's suspect probe at %d ms, want soon after it went quiet at 10100 ms (before the idle backlog)", suspectProbe)
	}
}
