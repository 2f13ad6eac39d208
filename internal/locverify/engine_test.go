package locverify

import (
	"slices"
	"testing"
	"time"

	"ilnp/internal/wire"
)

const (
	peerA = wire.NID(0x0214_4fff_fe20_ee64)
	peerB = wire.NID(0x0214_4fff_fe20_aa04)
	l1    = wire.L64(0x2001_0db8_0002_0000)
	l2    = wire.L64(0x2001_0db8_0003_0000)
	lV    = wire.L64(0x2001_0db8_0bad_0000) // a victim's prefix
	luLen = 100
)

var t0 = time.Unix(1000, 0)

// counter is a random source that numbers its tokens 1, 2, 3, ...
func counter() func([]byte) error {
	n := byte(0)
	return func(b []byte) error {
		n++
		clear(b)
		b[0] = n
		return nil
	}
}

func tok(n byte) Token { return Token{n} }

func kinds(as []Action) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Kind.String()+"@"+a.Locator.String())
	}
	return out
}

func TestEngine(t *testing.T) {
	type step struct {
		op      string // open, announce, echo, tick
		fresh   bool   // announce: the LU's body was never applied before
		peer    wire.NID
		locs    []wire.L64
		from    wire.L64
		token   byte
		at      time.Duration
		want    []string // kinds@locator of the actions
		wantOK  bool     // echo: accepted
		checkFn func(t *testing.T, e *Engine, as []Action)
	}
	ch := func(l wire.L64) string { return "send-challenge@" + l.String() }
	un := func(l wire.L64) string { return "mark-unverified@" + l.String() }
	ver := func(l wire.L64) string { return "mark-verified@" + l.String() }
	bel := func(l wire.L64) string { return "believed@" + l.String() }
	ret := func(l wire.L64) string { return "returned@" + l.String() }
	tests := []struct {
		name  string
		mode  Mode
		steps []step
	}{
		{name: "off: nothing is challenged or limited", mode: Off, steps: []step{
			{op: "open", peer: peerA, locs: []wire.L64{l1}, from: l1},
			{op: "announce", peer: peerA, locs: []wire.L64{lV}, from: l1},
		}},
		{name: "strict: a soft handoff challenges the new locator in the same breath as the LU-ACK", mode: Strict, steps: []step{
			{op: "open", peer: peerA, locs: []wire.L64{l1}, from: l1, want: []string{ch(l1)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l2, l1}, from: l2, want: []string{un(l2), ch(l2)},
				checkFn: func(t *testing.T, e *Engine, as []Action) {
					if as[0].RxBytes != luLen || as[0].TxBytes != ChallengeBytes {
						t.Errorf("credit seeded rx %d tx %d, want the LU (%d) and the challenge (%d)", as[0].RxBytes, as[0].TxBytes, luLen, ChallengeBytes)
					}
				}},
			{op: "echo", peer: peerA, token: 2, wantOK: true, want: []string{ver(l2)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l2}, from: l2}, // verified: nothing more
		}},
		{name: "strict: a locator announced from elsewhere has no credit, so no challenge (redirection)", mode: Strict, steps: []step{
			{op: "open", peer: peerA, locs: []wire.L64{l1}, from: l1, want: []string{ch(l1)}},
			{op: "announce", peer: peerA, locs: []wire.L64{lV}, from: l1, want: []string{un(lV)},
				checkFn: func(t *testing.T, e *Engine, as []Action) {
					if as[0].RxBytes != 0 || as[0].TxBytes != 0 {
						t.Errorf("victim's locator seeded rx %d tx %d, want 0 and 0", as[0].RxBytes, as[0].TxBytes)
					}
					if got := e.Unverified(peerA); !slices.Equal(got, []wire.L64{lV}) {
						t.Errorf("Unverified = %v", got)
					}
				}},
			{op: "announce", peer: peerA, locs: []wire.L64{lV}, from: l1}, // again from l1: still nothing
		}},
		{name: "tokens: wrong peer, unknown, replayed and expired echoes change nothing", mode: Strict, steps: []step{
			{op: "open", peer: peerA, locs: []wire.L64{l1}, from: l1, want: []string{ch(l1)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l2}, from: l2, want: []string{un(l2), ch(l2)}},
			{op: "echo", peer: peerB, token: 2, wantOK: false},
			{op: "echo", peer: peerA, token: 9, wantOK: false},
			{op: "echo", peer: peerA, token: 2, at: 11 * time.Second, wantOK: false},
			// Announced again from l2 with nothing outstanding: a new challenge.
			{op: "announce", peer: peerA, locs: []wire.L64{l2}, from: l2, at: 11 * time.Second, want: []string{ch(l2)}},
			{op: "echo", peer: peerA, token: 3, at: 11 * time.Second, wantOK: true, want: []string{ver(l2)}},
			{op: "echo", peer: peerA, token: 3, at: 11 * time.Second, wantOK: false},
		}},
		{name: "opportunistic: believed until the peer has answered once, limited after", mode: Opportunistic, steps: []step{
			{op: "open", peer: peerA, locs: []wire.L64{l1}, from: l1, want: []string{ch(l1)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l2}, from: l2, want: []string{bel(l2)}},
			{op: "echo", peer: peerA, token: 1, wantOK: true,
				checkFn: func(t *testing.T, e *Engine, _ []Action) {
					if !e.Answered(peerA) {
						t.Error("peer answered but Answered is false")
					}
				}},
			{op: "announce", peer: peerA, locs: []wire.L64{lV}, from: l2, want: []string{un(lV)}},
		}},
		{name: "opportunistic: a peer that never answers is believed every time", mode: Opportunistic, steps: []step{
			{op: "open", peer: peerB, locs: []wire.L64{l1}, from: l1, want: []string{ch(l1)}},
			{op: "announce", peer: peerB, locs: []wire.L64{lV}, from: l1, at: 20 * time.Second, want: []string{bel(lV)}},
		}},
		{name: "a session adopted after a restart: all announced locators are new", mode: Strict, steps: []step{
			{op: "announce", peer: peerA, locs: []wire.L64{l2, l1}, from: l2, want: []string{un(l2), ch(l2), un(l1)}},
		}},
		{name: "strict: a locator that left the set is challenged again when it returns (replay, move back)", mode: Strict, steps: []step{
			{op: "open", peer: peerA, locs: []wire.L64{l1}, from: l1, want: []string{ch(l1)}},
			{op: "echo", peer: peerA, token: 1, wantOK: true},
			{op: "announce", peer: peerA, locs: []wire.L64{l2}, from: l2, want: []string{un(l2), ch(l2)}},
			{op: "echo", peer: peerA, token: 2, wantOK: true, want: []string{ver(l2)}},
			// l1 left; an LU listing it again (a replay from l1, or the peer back there) does
			// not find it verified: the credit applies until it answers once more.
			{op: "announce", peer: peerA, locs: []wire.L64{l1}, from: l1, want: []string{un(l1), ch(l1)}},
			{op: "echo", peer: peerA, token: 3, wantOK: true, want: []string{ver(l1)}},
			// A locator still listed keeps its verification (soft handoff: both listed).
			{op: "announce", peer: peerA, locs: []wire.L64{l2, l1}, from: l2, want: []string{un(l2), ch(l2)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l1, l2}, from: l1},
		}},
		{name: "strict: back within RecentlyVerified in a fresh LU from itself: full rate, challenged, answered (RFC 9000 s.9.3)", mode: Strict, steps: []step{
			{op: "open", peer: peerA, locs: []wire.L64{l1}, from: l1, want: []string{ch(l1)}},
			{op: "echo", peer: peerA, token: 1, wantOK: true},
			{op: "announce", peer: peerA, locs: []wire.L64{l2}, from: l2, fresh: true, at: time.Second, want: []string{un(l2), ch(l2)}},
			{op: "echo", peer: peerA, token: 2, wantOK: true, at: time.Second, want: []string{ver(l2)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l1, l2}, from: l1, fresh: true, at: 5 * time.Second, want: []string{ret(l1), ch(l1)},
				checkFn: func(t *testing.T, e *Engine, _ []Action) {
					if d, ok := e.NextDeadline(); !ok || !d.Equal(t0.Add(5*time.Second+ProbationLifetime)) {
						t.Errorf("NextDeadline = %v %v, want the probation's end", d, ok)
					}
				}},
			{op: "echo", peer: peerA, token: 3, wantOK: true, at: 5 * time.Second},
			{op: "tick", peer: peerA, at: 9 * time.Second},
			{op: "announce", peer: peerA, locs: []wire.L64{l1, l2}, from: l1, fresh: true, at: 10 * time.Second}, // verified: nothing
		}},
		{name: "strict: a returned locator that does not answer goes under the credit after ProbationLifetime", mode: Strict, steps: []step{
			{op: "open", peer: peerA, locs: []wire.L64{l1}, from: l1, want: []string{ch(l1)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l2}, from: l2, fresh: true, at: time.Second, want: []string{un(l2), ch(l2)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l1, l2}, from: l1, fresh: true, at: 5 * time.Second, want: []string{ret(l1), ch(l1)}},
			{op: "tick", peer: peerA, at: 5*time.Second + ProbationLifetime - time.Millisecond},
			{op: "tick", peer: peerA, at: 5*time.Second + ProbationLifetime, want: []string{un(l1)},
				checkFn: func(t *testing.T, e *Engine, as []Action) {
					if as[0].RxBytes != 0 || as[0].TxBytes != ChallengeBytes {
						t.Errorf("demoted with rx %d tx %d, want 0 and the challenge's %d", as[0].RxBytes, as[0].TxBytes, ChallengeBytes)
					}
					// No probation remains: next the first challenge (sent at 0) leaves the
					// expiry queue, before the record of l1's leaving at 1 s is forgotten.
					if d, ok := e.NextDeadline(); !ok || !d.Equal(t0.Add(DefaultChallengeLifetime+expireSlack)) {
						t.Errorf("NextDeadline = %v after the last probation ended, want the first challenge's expiry", d)
					}
				}},
			{op: "echo", peer: peerA, token: 3, wantOK: true, at: 9 * time.Second, want: []string{ver(l1)}}, // late, still proves it
		}},
		{name: "strict: a returning locator in an LU that is not fresh (a replay, or a dialect repeating bodies) is limited", mode: Strict, steps: []step{
			{op: "open", peer: peerA, locs: []wire.L64{l1}, from: l1, want: []string{ch(l1)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l2}, from: l2, fresh: true, want: []string{un(l2), ch(l2)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l1}, from: l1, at: time.Second, want: []string{un(l1), ch(l1)}},
		}},
		{name: "strict: a locator that left RecentlyVerified ago or more is limited on its return", mode: Strict, steps: []step{
			{op: "open", peer: peerA, locs: []wire.L64{l1}, from: l1, want: []string{ch(l1)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l2}, from: l2, fresh: true, want: []string{un(l2), ch(l2)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l1}, from: l1, fresh: true, at: RecentlyVerified, want: []string{un(l1), ch(l1)}},
		}},
		{name: "strict: a recently verified locator announced fresh from another locator is limited", mode: Strict, steps: []step{
			{op: "open", peer: peerA, locs: []wire.L64{l1}, from: l1, want: []string{ch(l1)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l2}, from: l2, fresh: true, want: []string{un(l2), ch(l2)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l2, l1}, from: l2, fresh: true, at: time.Second, want: []string{un(l1)}},
		}},
		{name: "strict: a returned locator that leaves again before its deadline is not demoted later", mode: Strict, steps: []step{
			{op: "open", peer: peerA, locs: []wire.L64{l1}, from: l1, want: []string{ch(l1)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l2}, from: l2, fresh: true, want: []string{un(l2), ch(l2)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l1}, from: l1, fresh: true, at: time.Second, want: []string{ret(l1), ch(l1)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l2}, from: l2, fresh: true, at: 2 * time.Second}, // l2's challenge still out
			{op: "tick", peer: peerA, at: 10 * time.Second},
		}},
		{name: "strict: a returning locator announced from elsewhere has no credit", mode: Strict, steps: []step{
			{op: "open", peer: peerA, locs: []wire.L64{l1}, from: l1, want: []string{ch(l1)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l2}, from: l2, want: []string{un(l2), ch(l2)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l1}, from: l2, want: []string{un(l1)}},
		}},
		{name: "a reopened session starts over", mode: Strict, steps: []step{
			{op: "open", peer: peerA, locs: []wire.L64{l1}, from: l1, want: []string{ch(l1)}},
			{op: "announce", peer: peerA, locs: []wire.L64{l2}, from: l2, want: []string{un(l2), ch(l2)}},
			{op: "open", peer: peerA, locs: []wire.L64{l2}, from: l2, want: []string{ch(l2)}},
			{op: "echo", peer: peerA, token: 2, wantOK: false}, // the old session's token
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(Config{Mode: tc.mode, Random: counter()})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				var as []Action
				switch s.op {
				case "open":
					as, err = e.Opened(s.peer, s.locs, s.from, true, now)
				case "announce":
					as, err = e.Announced(s.peer, s.locs, s.from, luLen, s.fresh, now)
				case "tick":
					as = e.Tick(now)
				case "echo":
					var ok bool
					as, ok = e.Echoed(s.peer, tok(s.token), now)
					if ok != s.wantOK {
						t.Fatalf("step %d: echo of token %d from %v accepted %v, want %v", i, s.token, s.peer, ok, s.wantOK)
					}
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := kinds(as); !slices.Equal(got, s.want) {
					t.Fatalf("step %d (%s): actions %q, want %q", i, s.op, got, s.want)
				}
				for _, a := range as {
					if a.Peer != s.peer {
						t.Fatalf("step %d: action for %v, want %v", i, a.Peer, s.peer)
					}
				}
				if s.checkFn != nil {
					s.checkFn(t, e, as)
				}
			}
		})
	}
}

func TestParseModeAndConfig(t *testing.T) {
	for _, s := range []string{"off", "opportunistic", "strict"} {
		if m, err := ParseMode(s); err != nil || string(m) != s {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseMode("on"); err == nil {
		t.Error("ParseMode(on) succeeded")
	}
	if _, err := New(Config{Mode: "sometimes"}); err == nil {
		t.Error("New with a bad mode succeeded")
	}
}

// challengesOut counts the outstanding challenges of every peer.
func (e *Engine) challengesOut() int {
	n := len(e.probing)
	for _, st := range e.peers {
		var buf [maxPending]pending
		n += len(st.tokens(buf[:]))
	}
	return n
}

func TestPendingBounded(t *testing.T) {
	e, err := New(Config{Mode: Strict, Random: counter()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Opened(peerA, []wire.L64{l1}, l1, true, t0); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		loc := wire.L64(0x2001_0db8_00f0_0000 + uint64(i)<<16)
		if _, err := e.Announced(peerA, []wire.L64{loc}, loc, luLen, true, t0); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.challengesOut(); n != maxPending {
		t.Fatalf("%d challenges outstanding after 11, want %d", n, maxPending)
	}
	if _, ok := e.Echoed(peerA, tok(1), t0); ok {
		t.Error("the oldest challenge is still accepted")
	}
	if _, ok := e.Echoed(peerA, tok(11), t0); !ok {
		t.Error("the newest challenge is refused")
	}
}

// A session a correspondent opened is challenged only when Probe is called (the daemon does
// once the session received more than its first packet), and only once.
func TestProbeLater(t *testing.T) {
	e, err := New(Config{Mode: Opportunistic, Random: counter()})
	if err != nil {
		t.Fatal(err)
	}
	as, err := e.Opened(peerA, []wire.L64{l1}, l1, false, t0)
	if err != nil || len(as) != 0 {
		t.Fatalf("Opened without probe = %v, %v; want nothing", kinds(as), err)
	}
	if as, _ := e.Probe(peerB, l1, t0); len(as) != 0 {
		t.Errorf("Probe of an unknown peer = %v", kinds(as))
	}
	as, _ = e.Probe(peerA, l1, t0)
	if got := kinds(as); !slices.Equal(got, []string{"send-challenge@" + l1.String()}) {
		t.Fatalf("Probe = %q", got)
	}
	if as, _ := e.Probe(peerA, l1, t0); len(as) != 0 {
		t.Errorf("second Probe = %v, want nothing", kinds(as))
	}
	if _, ok := e.Echoed(peerA, tok(1), t0); !ok || !e.Answered(peerA) {
		t.Error("the probe's echo was not taken")
	}
}

// A session adopted after a restart keeps the limits the datapath still holds: each such
// locator gets a fresh challenge charged to it, even with its credit spent, and its echo
// verifies it; in Opportunistic mode the peer counts as having answered, so a new locator it
// announces is limited, not believed.
func TestResumed(t *testing.T) {
	for _, mode := range []Mode{Strict, Opportunistic} {
		t.Run(string(mode), func(t *testing.T) {
			e, err := New(Config{Mode: mode, Random: counter()})
			if err != nil {
				t.Fatal(err)
			}
			as, err := e.Resumed(peerA, []wire.L64{l1, l2, lV}, l2, []Credit{
				{Locator: l2, RxBytes: luLen, TxBytes: 10},
				{Locator: lV, RxBytes: 20, TxBytes: 60}, // credit spent
				{Locator: 0, RxBytes: 1 << 20},          // ignored
			}, t0)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"charge@" + l2.String(), "send-challenge@" + l2.String(),
				"charge@" + lV.String(), "send-challenge@" + lV.String()}
			if got := kinds(as); !slices.Equal(got, want) {
				t.Fatalf("Resumed = %q, want %q", got, want)
			}
			if as[0].TxBytes != ChallengeBytes || as[1].Token != tok(1) || as[2].TxBytes != ChallengeBytes || as[3].Token != tok(2) {
				t.Fatalf("charges %d/%d bytes, tokens %v/%v: want %d and tokens 1, 2", as[0].TxBytes, as[2].TxBytes,
					as[1].Token, as[3].Token, ChallengeBytes)
			}
			if got := e.Unverified(peerA); !slices.Equal(got, []wire.L64{l2, lV}) {
				t.Fatalf("unverified after resume = %v, want [%v %v]", got, l2, lV)
			}
			lNew := wire.L64(0x2001_0db8_0004_0000)
			as, err = e.Announced(peerA, []wire.L64{lNew}, l1, luLen, true, t0.Add(time.Second))
			if got := kinds(as); err != nil || !slices.Equal(got, []string{"mark-unverified@" + lNew.String()}) {
				t.Fatalf("a new locator announced before any echo since the resume = %q, %v; want it limited", got, err)
			}
			as, ok := e.Echoed(peerA, tok(1), t0.Add(2*time.Second))
			if got := kinds(as); !ok || !slices.Equal(got, []string{"mark-verified@" + l2.String()}) {
				t.Fatalf("echo of the resumed challenge = %q, %v", got, ok)
			}
		})
	}
	e, err := New(Config{Mode: Off})
	if err != nil {
		t.Fatal(err)
	}
	if as, err := e.Resumed(peerA, []wire.L64{l1}, l1, []Credit{{Locator: l2, RxBytes: luLen}}, t0); err != nil || len(as) != 0 {
		t.Fatalf("Off: Resumed = %q, %v; want nothing", kinds(as), err)
	}
}

// A challenge to an IPv4 endpoint travels encapsulated with a nonce, and is charged so.
func TestChallengeCostByFamily(t *testing.T) {
	l32 := wire.L64(0x0000_c027_c633_6401) // 198.51.100.1:49191
	for _, c := range []struct {
		loc  wire.L64
		want uint64
	}{{l2, ChallengeBytes}, {l32, ChallengeBytesL32}} {
		e, err := New(Config{Mode: Strict, Random: counter()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Opened(peerA, []wire.L64{l1}, l1, false, t0); err != nil {
			t.Fatal(err)
		}
		as, err := e.Announced(peerA, []wire.L64{c.loc}, c.loc, luLen, true, t0)
		if got := kinds(as); err != nil || len(as) != 2 || as[0].Kind != MarkUnverified || as[1].Kind != SendChallenge {
			t.Fatalf("%v: Announced = %q, %v", c.loc, got, err)
		}
		if as[0].RxBytes != luLen || as[0].TxBytes != c.want {
			t.Errorf("%v: credit starts at %d received, %d sent; want %d, %d", c.loc, as[0].RxBytes, as[0].TxBytes, luLen, c.want)
		}
	}
}

// A NAT endpoint that roams adds a locator; the set's others keep their verification (a
// roaming packet is no announcement of the whole set).
func TestRoamedKeepsTheSet(t *testing.T) {
	e, err := New(Config{Mode: Strict, Random: counter()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Opened(peerA, []wire.L64{l1, l2}, l1, false, t0); err != nil {
		t.Fatal(err)
	}
	as, err := e.Roamed(peerA, lV, luLen, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(as); !slices.Equal(got, []string{"mark-unverified@" + lV.String(), "send-challenge@" + lV.String()}) {
		t.Fatalf("roamed: %q", got)
	}
	// l1 and l2 are still verified: announcing them again does nothing.
	if as, err := e.Announced(peerA, []wire.L64{l1, l2, lV}, l1, luLen, true, t0); err != nil || len(as) != 0 {
		t.Fatalf("after roaming, the set announced again: %q %v, want nothing", kinds(as), err)
	}
}
