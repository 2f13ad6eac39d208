package pathprobe

import (
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
			if p := s.pairs[k1]; p != nil {
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
	if len(s.pairs) != 1 || s.pairs[samples[7].Key] == nil || !slices.Equal(acts, probes(samples[7].Key)) {
		t.Fatalf("%d pairs kept, actions %v: want only the one being checked", len(s.pairs), acts)
	}
}
