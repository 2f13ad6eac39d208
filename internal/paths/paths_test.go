package paths

import (
	"slices"
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

// step is one tick of the scenario: what happened on the pair since the last tick (at tick's
// time), and what the tracker must decide.
type step struct {
	ms         int
	send, recv int // packets sent / received on the pair in this tick
	answer     bool
	want       State
	probe      bool
}

func TestLiveness(t *testing.T) {
	cases := []struct {
		name  string
		rtt   time.Duration // measured by a first probe answered at once; 0: none
		steps []step
	}{
		{
			// A flow both ways: alive; the path fails silently after 500 ms (the last
			// receipt); data keeps going out unanswered from 520 ms; suspect (and probed)
			// RTT + 30 ms later, dead RTT + 100 ms later.
			name: "flowing then silent failure", rtt: 10 * time.Millisecond,
			steps: []step{
				{ms: 480, send: 5, recv: 5, want: Alive},
				{ms: 500, send: 5, recv: 20, want: Alive}, // a two-way flow
				{ms: 520, send: 5, want: Alive},
				{ms: 540, send: 5, want: Alive},
				{ms: 560, send: 5, want: Suspect, probe: true},
				{ms: 580, send: 5, want: Suspect},
				{ms: 620, send: 5, want: Suspect},
				{ms: 630, send: 5, want: Dead},
				{ms: 900, want: Dead},
				{ms: 1500, want: Dead},
				{ms: 1560, want: Dead, probe: true}, // a second after the suspect probe
				// The path is back: the peer's probe arrives.
				{ms: 1700, recv: 1, want: Alive},
			},
		},
		{
			// Without a measured RTT the initial one (100 ms) stands in.
			name: "no RTT sample",
			steps: []step{
				{ms: 0, send: 5, recv: 5, want: Alive, probe: true},
				{ms: 20, send: 5, recv: 20, want: Alive},
				{ms: 40, send: 5, want: Alive},
				{ms: 170, send: 5, want: Suspect, probe: true},
				{ms: 230, send: 5, want: Suspect},
				{ms: 240, send: 5, want: Dead},
			},
		},
		{
			// One-way data with the probe answered on the pair (the peer's reply takes it):
			// suspect, never dead.
			name: "one-way flow answered by the probe", rtt: 10 * time.Millisecond,
			steps: []step{
				{ms: 500, send: 5, recv: 5, want: Alive},
				{ms: 520, send: 5, want: Alive},
				{ms: 560, send: 5, want: Suspect, probe: true},
				{ms: 580, send: 5, recv: 1, want: Alive},
				{ms: 600, send: 5, want: Alive},
				{ms: 640, send: 5, want: Suspect}, // within 100 ms of the last probe
				{ms: 660, want: Suspect, probe: true},
				{ms: 670, recv: 1, want: Alive},
			},
		},
		{
			// A one-way sender over a long path (RTT 200 ms): the peer is silent, so going
			// quiet proves nothing; the suspect probe's answer (an RTT later, after the
			// RTT + 100 ms a two-way flow would get) keeps the pair alive.
			name: "one-way sender, long RTT", rtt: 200 * time.Millisecond,
			steps: []step{
				{ms: 500, send: 5, recv: 1, want: Alive},
				{ms: 520, send: 5, want: Alive},
				{ms: 760, send: 5, want: Suspect, probe: true},
				{ms: 880, send: 5, want: Suspect},
				{ms: 960, send: 5, recv: 1, want: Alive},
			},
		},
		{
			// The same sender whose path fails: dead once the suspect probe went unanswered
			// for RTT + 100 ms.
			name: "one-way sender, long RTT, failure", rtt: 200 * time.Millisecond,
			steps: []step{
				{ms: 500, send: 5, recv: 1, want: Alive},
				{ms: 520, send: 5, want: Alive},
				{ms: 760, send: 5, want: Suspect, probe: true},
				{ms: 880, send: 5, want: Suspect},
				{ms: 1050, send: 5, want: Suspect},
				{ms: 1060, send: 5, want: Dead},
			},
		},
		{
			// A final ACK alone is not a failure: suspect, probe answered.
			name: "last packet is ours", rtt: 10 * time.Millisecond,
			steps: []step{
				{ms: 500, send: 1, recv: 1, want: Alive},
				{ms: 510, send: 1, want: Alive},
				{ms: 560, want: Suspect, probe: true},
				{ms: 570, recv: 1, want: Alive},
				{ms: 900, want: Alive},
			},
		},
		{
			// An idle pair: one probe per second, kept alive by the peer's probes; it dies
			// when they stop and two of ours went unanswered, and is probed no more than
			// once a second all along.
			name: "idle pair", rtt: 10 * time.Millisecond,
			steps: []step{
				{ms: 1000, recv: 1, want: Alive, probe: true},
				{ms: 1500, recv: 1, want: Alive},
				{ms: 1999, want: Alive},
				{ms: 2000, want: Alive, probe: true},
				{ms: 2500, recv: 1, want: Alive},
				{ms: 3000, want: Alive, probe: true},
				{ms: 3500, want: Alive},
				{ms: 4000, want: Alive, probe: true},
				{ms: 4200, want: Dead},
				{ms: 5000, want: Dead, probe: true},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(t)
			var l link
			probes := 0
			if tc.rtt > 0 {
				res := tr.Step([]Key{kA}, nil, at(0))
				if !slices.Equal(res.Probes, []Key{kA}) {
					t.Fatalf("first step probes %v, want the new pair", res.Probes)
				}
				l.send(at(0))
				tr.Answered(kA, at(0), at(0).Add(tc.rtt))
				l.recv(at(0).Add(tc.rtt))
			}
			for _, st := range tc.steps {
				now := at(st.ms)
				for range st.send {
					l.send(now)
				}
				for range st.recv {
					l.recv(now)
				}
				res := tr.Step([]Key{kA}, []Sample{withKey(l.s, kA)}, now)
				if got := tr.State(kA); got != st.want {
					t.Fatalf("at %d ms: state %v, want %v (counters %+v)", st.ms, got, st.want, l.s)
				}
				probed := len(res.Probes) == 1
				if probed != st.probe {
					t.Fatalf("at %d ms: probed %v, want %v", st.ms, probed, st.probe)
				}
				if probed {
					probes++
					l.send(now) // the probe goes out on the pair
				}
			}
		})
	}
}

func withKey(s Sample, k Key) Sample { s.Key = k; return s }

// The dead change reports how long before it the pair last delivered: within RTT + 100 ms
// (plus one tick) of it.
func TestDeadWithinBound(t *testing.T) {
	tr := newTracker(t)
	var l link
	tr.Step([]Key{kA}, nil, at(0))
	l.send(at(0))
	tr.Answered(kA, at(0), at(2))
	l.recv(at(2))
	var dead *Change
	for ms := 10; ms < 2000 && dead == nil; ms += 10 {
		now := at(ms)
		l.send(now)
		if ms <= 500 {
			l.recv(now)
		}
		res := tr.Step([]Key{kA}, []Sample{withKey(l.s, kA)}, now)
		for _, c := range res.Changes {
			if c.To == Dead {
				dead = &c
			}
		}
	}
	if dead == nil {
		t.Fatal("never declared dead")
	}
	// From the last delivery: the first unanswered packet (one 10 ms gap later), RTT + margin,
	// and one 10 ms tick.
	if bound := 10*time.Millisecond + 2*time.Millisecond + DefaultMargin + 10*time.Millisecond; dead.SinceProof > bound || dead.SinceProof < DefaultMargin {
		t.Fatalf("dead %v after the last delivery, want within [%v, %v]", dead.SinceProof, DefaultMargin, bound)
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
// to) is delivering: the pair is not declared dead. An idle pair is proven only on itself.
func TestAnsweredOnAnotherPair(t *testing.T) {
	tr := newTracker(t)
	var a, b link
	tr.Step([]Key{kA, kB}, nil, at(0))
	a.send(at(0))
	b.send(at(0))
	for ms := 10; ms <= 1000; ms += 10 {
		now := at(ms)
		a.send(now) // data out on kA
		b.recv(now) // the peer's packets come in on kB
		tr.Step([]Key{kA, kB}, []Sample{withKey(a.s, kA), withKey(b.s, kB)}, now)
		if st := tr.State(kA); st == Dead {
			t.Fatalf("at %d ms: data pair answered on the other pair declared dead", ms)
		}
	}
	// Now the peer goes silent everywhere: kA dies within RTT (initial 100 ms) + margin.
	for ms := 1010; ms <= 1300; ms += 10 {
		a.send(at(ms))
		tr.Step([]Key{kA, kB}, []Sample{withKey(a.s, kA), withKey(b.s, kB)}, at(ms))
	}
	if st := tr.State(kA); st != Dead {
		t.Fatalf("peer silent for 300 ms: kA %v, want dead", st)
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
