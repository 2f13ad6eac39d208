package pathprobe

import (
	"math"
	"slices"
	"testing"
	"time"

	"ilnp/internal/wire"
)

var (
	t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	k1 = Key{Peer: wire.NID(0x0250b6fffe0a0b0c), Local: wire.L64(0x20010db8000a0003), Remote: wire.L64(0x20010db8000b0001)}
	k2 = Key{Peer: wire.NID(0x0250b6fffe0a0b0c), Local: wire.L64(0x20010db8000a0002), Remote: wire.L64(0x20010db8000b0001)}
)

// testConfig: the timings the scripts below are written for.
var testConfig = Config{Quiet: ms(300), InUse: ms(300), Slack: ms(100)}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// quiet is k's sample with packets unanswered since t0.
func quiet(k Key) Sample {
	return Sample{Key: k, Unanswered: 3, FirstUnanswered: t0, LastTx: t0.Add(time.Hour)}
}

func probes(k Key) []Action { return []Action{{Key: k, Probe: Plain}, {Key: k, Probe: Exthdr}} }

func encapsulate(k Key) []Action { return []Action{{Key: k, Encapsulate: true}} }

// One pair through a scripted sequence of steps: at each, the samples, the answers that came
// in before it (plain / native, at an offset from t0), and the actions expected.
func TestStage(t *testing.T) {
	type answer struct {
		p      Probe
		sentAt time.Duration
		at     time.Duration
	}
	type step struct {
		at      time.Duration
		answers []answer
		sample  Sample
		want    []Action
	}
	on := func(byPeer bool) Sample { return Sample{Key: k1, On: true, ByPeer: byPeer} }
	for _, c := range []struct {
		name  string
		steps []step
		final Verdict
	}{
		{"answered pair: nothing", []step{
			{ms(0), nil, Sample{Key: k1}, nil},
			{ms(5000), nil, Sample{Key: k1}, nil},
		}, None},
		{"quiet shorter than Quiet: nothing yet", []step{
			{ms(299), nil, quiet(k1), nil},
			{ms(300), nil, quiet(k1), probes(k1)},
		}, None},
		{"a pair no longer sent on is not checked", []step{
			{ms(900), nil, Sample{Key: k1, Unanswered: 3, FirstUnanswered: t0, LastTx: t0.Add(ms(500))}, nil},
			{ms(901), nil, Sample{Key: k1, Unanswered: 4, FirstUnanswered: t0, LastTx: t0.Add(ms(900))}, probes(k1)},
		}, None},
		{"plain answered, the header's lost: encapsulated after 2 RTT + slack", []step{
			{ms(300), nil, quiet(k1), probes(k1)},
			{ms(310), []answer{{Plain, ms(300), ms(302)}}, quiet(k1), nil},
			{ms(403), nil, quiet(k1), nil},
			{ms(404), nil, quiet(k1), encapsulate(k1)},
			{ms(420), nil, on(false), nil},
		}, DropsExthdr},
		{"both answered: the path is fine, backoff 1 s", []step{
			{ms(300), nil, quiet(k1), probes(k1)},
			{ms(320), []answer{{Plain, ms(300), ms(302)}, {Exthdr, ms(300), ms(303)}}, quiet(k1), nil},
			{ms(1319), nil, quiet(k1), nil},
			{ms(1320), nil, quiet(k1), probes(k1)},
		}, Fine},
		{"the pair answered by itself during the check", []step{
			{ms(300), nil, quiet(k1), probes(k1)},
			{ms(320), []answer{{Plain, ms(300), ms(302)}}, Sample{Key: k1}, nil},
			{ms(1319), nil, quiet(k1), nil}, // backoff after the check
		}, Fine},
		{"nothing answered: dead, backoff doubles", []step{
			{ms(300), nil, quiet(k1), probes(k1)},
			{ms(1299), nil, quiet(k1), nil},
			{ms(1300), nil, quiet(k1), nil}, // Dead, 1 s backoff
			{ms(2300), nil, quiet(k1), probes(k1)},
			{ms(3300), nil, quiet(k1), nil}, // Dead, 2 s backoff
			{ms(5299), nil, quiet(k1), nil},
			{ms(5300), nil, quiet(k1), probes(k1)},
		}, Dead},
		{"a stale answer (another check's) is ignored", []step{
			{ms(300), nil, quiet(k1), probes(k1)},
			{ms(1300), []answer{{Plain, ms(100), ms(301)}}, quiet(k1), nil},
		}, Dead},
		{"turned on here: a native probe every 5 s until the datapath goes native", []step{
			{ms(300), nil, quiet(k1), probes(k1)},
			{ms(310), []answer{{Plain, ms(300), ms(301)}}, quiet(k1), nil},
			{ms(402), nil, quiet(k1), encapsulate(k1)},
			{ms(5401), nil, on(false), nil},
			{ms(5402), nil, on(false), []Action{{Key: k1, Probe: Native}}},
			{ms(10402), nil, on(false), []Action{{Key: k1, Probe: Native}}},
			{ms(10500), nil, Sample{Key: k1}, nil},
			{ms(10800), nil, Sample{Key: k1, Unanswered: 1, FirstUnanswered: t0.Add(ms(10500)), LastTx: t0.Add(ms(10790))}, probes(k1)},
		}, DropsExthdr},
		{"turned on by the peer: the peer probes", []step{
			{ms(0), nil, on(true), nil},
			{ms(60000), nil, on(true), nil},
		}, None},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(testConfig)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range c.steps {
				for _, a := range st.answers {
					s.Answered(k1, a.p, t0.Add(a.sentAt), t0.Add(a.at))
				}
				if got := s.Step([]Sample{st.sample}, t0.Add(st.at)); !slices.Equal(got, st.want) {
					t.Fatalf("step %d (%v): %v, want %v", i, st.at, got, st.want)
				}
			}
			got := None // a pair with nothing to remember is not kept
			if p, ok := s.pairs[k1]; ok {
				got = p.verdict
			}
			if got != c.final {
				t.Fatalf("verdict %v, want %v", got, c.final)
			}
		})
	}
}

// Pairs are independent, listed in key order, and forgotten when no longer sampled.
func TestStagePairsAndViews(t *testing.T) {
	s, err := New(testConfig)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Step([]Sample{quiet(k1), quiet(k2)}, t0.Add(ms(300)))
	if want := append(probes(k2), probes(k1)...); !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
	s.Answered(k1, Plain, t0.Add(ms(300)), t0.Add(ms(301)))
	s.Answered(k2, Plain, t0.Add(ms(300)), t0.Add(ms(301)))
	s.Answered(k2, Exthdr, t0.Add(ms(300)), t0.Add(ms(301)))
	if got := s.Step([]Sample{quiet(k1), quiet(k2)}, t0.Add(ms(500))); !slices.Equal(got, encapsulate(k1)) {
		t.Fatalf("%v, want only k1 encapsulated", got)
	}
	v := s.Views()
	if len(v) != 2 || v[0].Key != k2 || v[0].Encapsulated || v[0].LastVerdict != Fine ||
		v[1].Key != k1 || !v[1].Encapsulated || v[1].TimesEncapsulated != 1 || v[1].LastVerdict != DropsExthdr {
		t.Fatalf("views %+v", v)
	}
	s.Step([]Sample{quiet(k2)}, t0.Add(ms(600)))
	if _, ok := s.pairs[k1]; ok {
		t.Fatal("k1 not forgotten")
	}
	if _, err := New(Config{Quiet: -1}); err == nil {
		t.Fatal("negative Quiet accepted")
	}
}

// A pair with nothing to remember (answered, never checked) takes no memory; one being
// checked does (issue 28: every session's pair is sampled).
func TestStageKeepsOnlyPairsWithState(t *testing.T) {
	s, err := New(testConfig)
	if err != nil {
		t.Fatal(err)
	}
	var samples []Sample
	for i := range 1000 {
		k := k1
		k.Peer += wire.NID(i)
		samples = append(samples, Sample{Key: k, LastTx: t0})
	}
	samples[7] = quiet(samples[7].Key)
	acts := s.Step(samples, t0.Add(ms(300)))
	if len(s.pairs) != 1 || !hasPair(s, samples[7].Key) || !slices.Equal(acts, probes(samples[7].Key)) {
		t.Fatalf("%d pairs kept, actions %v: want only the one being checked", len(s.pairs), acts)
	}
}

func hasPair(s *Stage, k Key) bool { _, ok := s.pairs[k]; return ok }

// A pair whose check found nothing is forgotten once its backoff is over and it is no longer
// sent on (issue 28: a mass move left every pair's record for good); sent on again in the
// same quiet episode, it is checked once and backs off as long as a pair kept through the
// whole episode would (its backoff recomputed from the episode's age), not from 1 s again.
func TestStageForgetsIdlePairsAndRecomputesBackoff(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) Sample {
		return Sample{Key: k1, Unanswered: 3, FirstUnanswered: t0, LastTx: t0.Add(d)}
	}
	if got := s.Step([]Sample{at(ms(200))}, t0.Add(ms(200))); !slices.Equal(got, probes(k1)) {
		t.Fatalf("first check: %v", got)
	}
	s.Step([]Sample{at(ms(200))}, t0.Add(ms(1200))) // no answer: dead, 1 s backoff
	if !hasPair(s, k1) {
		t.Fatal("a pair in its backoff forgotten")
	}
	s.Step([]Sample{at(ms(200))}, t0.Add(ms(2300))) // past the backoff, not sent on for 2.1 s
	if hasPair(s, k1) {
		t.Fatal("an idle pair past its backoff kept")
	}
	// Sent on again 100 s into the episode: a pair kept through it would be at the longest
	// backoff (30 s).
	now := t0.Add(100 * time.Second)
	if got := s.Step([]Sample{at(100 * time.Second)}, now); !slices.Equal(got, probes(k1)) {
		t.Fatalf("resumed pair: %v, want a check", got)
	}
	s.Step([]Sample{at(101 * time.Second)}, now.Add(time.Second)) // dead again
	for _, d := range []time.Duration{2 * time.Second, 20 * time.Second, 30*time.Second + ms(999)} {
		if got := s.Step([]Sample{at(100*time.Second + d)}, now.Add(d)); got != nil {
			t.Fatalf("%v after the resumed check: %v, want the longest backoff", d, got)
		}
	}
	if got := s.Step([]Sample{at(132 * time.Second)}, now.Add(32*time.Second)); !slices.Equal(got, probes(k1)) {
		t.Fatalf("after the longest backoff: %v, want a check", got)
	}
}

// priorChecks: Quiet + Backoff (2^k - 1) <= the episode's age, the longest backoff reached.
func TestPriorChecks(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		age  time.Duration
		want uint8
	}{
		{0, 0}, {ms(1149), 0}, {ms(1150), 1}, {ms(3149), 1}, {ms(3150), 2}, {ms(7150), 3},
		{ms(15150), 4}, {ms(31150), 5}, // the fifth pause is 16 s, the sixth the longest (30 s)
		{ms(61149), 5}, {ms(61150), 6}, {time.Hour, 6}, {math.MaxInt64, 6},
	} {
		if got := s.priorChecks(c.age); got != c.want {
			t.Errorf("priorChecks(%v) = %d, want %d", c.age, got, c.want)
		}
	}
	if b := s.backoff(&pair{doublings: 7}); b != 30*time.Second {
		t.Errorf("backoff after 7 doublings: %v", b)
	}
}
