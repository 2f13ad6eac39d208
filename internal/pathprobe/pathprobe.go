// Package pathprobe finds locator pairs whose path drops the nonce's Destination Options
// header (RFC 7872 measured many such paths; RFC 9098 s.5 explains why) and keeps them on
// ILNPv6 in UDP/IPv6 (bpf/lib/encap6.h) until native packets pass again. Pure logic: the
// daemon feeds it the datapath's per pair counters and the answers to the probes it asked
// for, and carries out its actions.
//
// Detection. A pair that still sends but whose packets have gone unanswered for Quiet gets
// two echo requests at once between its wire addresses, past the session (the datapaths pass
// echoes without a nonce): a plain one, and one with a Destination Options header holding
// only an experimental option the peer's kernel skips (RFC 4727's 0x1E). Neither depends on
// the peer's ILNP state (a locator it has aged drops our session's packets but its kernel
// still answers these). The plain one answered while the other is not, within twice the
// plain one's round trip plus Slack, is a path that works but drops the header: the pair is
// turned on. Both answered: the path is fine (the silence was the peer's); neither: the path
// is dead (path liveness deals with it). Either way the pair is not checked again before a
// backoff that doubles up to MaxBackoff.
//
// Return. While a pair this node turned on stays on, a native probe asking for a native
// answer goes out every NativeEvery; the datapath turns the pair back off when that answer,
// or any verified native packet but an echo request, arrives on it, and the peer follows on
// this node's next native packet. A pair the peer turned on (its encapsulated packets) is
// left to the datapath: the peer probes it.
package pathprobe

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"ilnp/internal/paths"
)

// Key is one locator pair of a correspondent: paths.Key.
type Key = paths.Key

// Config holds the detection's timings; zero fields take the defaults.
type Config struct {
	// Quiet is how long a pair's packets may go unanswered before it is checked (150 ms: past
	// a delayed acknowledgement; a check costs two echo requests and proves before it acts).
	Quiet time.Duration
	// InUse: only a pair that sent within this is checked (1.5 s: a TCP SYN's first
	// retransmission is 1 s after it).
	InUse time.Duration
	// Slack is added to twice the plain probe's round trip before the exthdr probe counts as
	// lost (50 ms).
	Slack time.Duration
	// Wait is how long a check waits for the plain probe's answer (1 s).
	Wait time.Duration
	// Backoff is the first pause after a check that found nothing to encapsulate (1 s); it
	// doubles up to MaxBackoff (30 s) while checks keep finding nothing.
	Backoff, MaxBackoff time.Duration
	// NativeEvery is the period of the native probe on a pair this node turned on (5 s).
	NativeEvery time.Duration
}

func (c Config) withDefaults() Config {
	c.Quiet = cmp.Or(c.Quiet, 150*time.Millisecond)
	c.InUse = cmp.Or(c.InUse, 1500*time.Millisecond)
	c.Slack = cmp.Or(c.Slack, 50*time.Millisecond)
	c.Wait = cmp.Or(c.Wait, time.Second)
	c.Backoff = cmp.Or(c.Backoff, time.Second)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, 30*time.Second)
	c.NativeEvery = cmp.Or(c.NativeEvery, 5*time.Second)
	return c
}

// Validate refuses negative timings.
func (c Config) Validate() error {
	for _, d := range []time.Duration{c.Quiet, c.InUse, c.Slack, c.Wait, c.Backoff, c.MaxBackoff, c.NativeEvery} {
		if d < 0 {
			return fmt.Errorf("pathprobe: negative timing %v", d)
		}
	}
	return nil
}

// Sample is one pair as the datapath shows it at a step.
type Sample struct {
	Key Key
	// Unanswered packets sent since the last one received on the pair, the first of them at
	// FirstUnanswered, the last packet sent at LastTx (paths.Sample's fields).
	Unanswered      uint64
	FirstUnanswered time.Time
	LastTx          time.Time
	// On: the pair is encapsulated now; ByPeer: the peer's packets turned it on.
	On, ByPeer bool
}

// Probe is the kind of echo request an action sends.
type Probe uint8

const (
	// Plain: between the pair's wire addresses, no extension header.
	Plain Probe = iota + 1
	// Exthdr: the same with a Destination Options header the peer's kernel skips.
	Exthdr
	// Native: through the session with its nonce header, asking for a native answer.
	Native
)

func (p Probe) String() string {
	switch p {
	case Plain:
		return "plain"
	case Exthdr:
		return "exthdr"
	case Native:
		return "native"
	}
	return fmt.Sprintf("probe(%d)", uint8(p))
}

// Action is what the daemon does for a pair: send a probe, or (Encapsulate) turn it on.
type Action struct {
	Key         Key
	Probe       Probe // 0 with Encapsulate
	Encapsulate bool
}

// Verdict is a check's outcome, for the view and the daemon's event.
type Verdict uint8

const (
	None Verdict = iota
	// DropsExthdr: plain answered, the one with the header not: the pair was turned on.
	DropsExthdr
	// Fine: the probe with the header was answered (or the pair answered by itself).
	Fine
	// Dead: not even the plain probe was answered.
	Dead
)

var verdictNames = [...]string{None: "", DropsExthdr: "drops-exthdr", Fine: "native-ok", Dead: "no-answer"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// MarshalText makes Verdict a JSON string.
func (v Verdict) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

type pair struct {
	checking          bool
	sent              time.Time
	plainAt, exthdrAt time.Time // answers of the current check; zero: none yet
	notBefore         time.Time
	backoff           time.Duration
	on, byPeer        bool
	lastNative        time.Time
	verdict           Verdict
	checks, encaps    int
}

// Stage is the detection's state over every pair. Not safe for concurrent use.
//
// A pass forgets the pairs it did not sample without a walk over every pair (issue 28: the
// walk at the end of a pass held the daemon's loop): BeginPass sets the pairs kept so far
// aside (unsampled), StepSome moves each pair it samples back into pairs, and EndPass drops
// what is still set aside, whole.
type Stage struct {
	cfg   Config
	pairs map[Key]*pair // outside a pass every pair; in a pass those it sampled
	// unsampled are, in a pass, the pairs kept before it that it has not sampled yet (nil:
	// no pass is open).
	unsampled map[Key]*pair
	// touched counts the pairs the stage looked at (tests: the work a call does).
	touched int
}

// New makes a stage.
func New(cfg Config) (*Stage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Stage{cfg: cfg.withDefaults(), pairs: map[Key]*pair{}}, nil
}

// Answered records the answer to a probe of kind p sent on k at sent.
func (s *Stage) Answered(k Key, p Probe, sent, at time.Time) {
	st := s.lookup(k)
	if st == nil || !st.checking || !sent.Equal(st.sent) {
		return
	}
	switch p {
	case Plain:
		st.plainAt = at
	case Exthdr:
		st.exthdrAt = at
	}
}

// Step takes the pairs as they are now and returns what to do. Pairs not sampled are forgotten.
// It is one whole pass: BeginPass, StepSome over every pair, EndPass.
func (s *Stage) Step(samples []Sample, now time.Time) []Action {
	s.BeginPass()
	acts := s.StepSome(samples, now)
	s.EndPass()
	return acts
}

// BeginPass starts a pass: the pairs that no StepSome samples until EndPass are forgotten then.
// A daemon with many pairs samples them a share at a time, one share per turn of its loop
// (issue 28). BeginPass while a pass is open continues that pass (what it sampled is kept).
// It takes constant time.
func (s *Stage) BeginPass() {
	if s.unsampled != nil {
		return
	}
	s.unsampled, s.pairs = s.pairs, map[Key]*pair{}
}

// StepSome takes some pairs as they are now and returns what to do with them. Its work is
// the samples', whatever the number of pairs kept.
func (s *Stage) StepSome(samples []Sample, now time.Time) []Action {
	var acts []Action
	for _, sm := range samples {
		s.touched++
		st := s.pairs[sm.Key]
		if st == nil {
			if st = s.unsampled[sm.Key]; st != nil {
				delete(s.unsampled, sm.Key)
			} else {
				st = &pair{}
			}
		}
		acts = append(acts, s.step(sm, st, now)...)
		// Only a pair with state of its own is kept: one that was never checked, is not on and
		// waits for nothing is what a new pair is (issue 28: a pair per session at 100,000s of
		// sessions, almost all of them that).
		if *st == (pair{}) {
			delete(s.pairs, sm.Key)
			continue
		}
		s.pairs[sm.Key] = st
	}
	slices.SortFunc(acts, func(a, b Action) int { return compareKeys(a.Key, b.Key) })
	return acts
}

// EndPass forgets the pairs the pass did not sample: in constant time, the set they are in
// dropped whole (the garbage collector frees it off the loop).
func (s *Stage) EndPass() { s.unsampled = nil }

// lookup is the pair k, sampled in the open pass or not.
func (s *Stage) lookup(k Key) *pair {
	if st := s.pairs[k]; st != nil {
		return st
	}
	return s.unsampled[k]
}

func (s *Stage) step(sm Sample, st *pair, now time.Time) []Action {
	if sm.On {
		st.checking = false
		if !st.on {
			st.on, st.lastNative = true, now
		}
		st.byPeer = sm.ByPeer
		if sm.ByPeer || now.Sub(st.lastNative) < s.cfg.NativeEvery {
			return nil
		}
		st.lastNative = now
		return []Action{{Key: sm.Key, Probe: Native}}
	}
	if st.on {
		// Back to native (the datapath saw a native answer): a fresh start.
		st.on, st.byPeer, st.backoff, st.notBefore = false, false, 0, time.Time{}
	}
	if st.checking {
		return s.judge(sm, st, now)
	}
	if sm.Unanswered == 0 {
		st.backoff = 0
		return nil
	}
	// Only a pair still in use: one this node stopped sending on (the peer moved away from
	// it) is not the path's fault.
	if sm.FirstUnanswered.IsZero() || now.Sub(sm.FirstUnanswered) < s.cfg.Quiet ||
		now.Sub(sm.LastTx) > s.cfg.InUse || now.Before(st.notBefore) {
		return nil
	}
	st.checking, st.sent, st.plainAt, st.exthdrAt = true, now, time.Time{}, time.Time{}
	st.checks++
	return []Action{{Key: sm.Key, Probe: Plain}, {Key: sm.Key, Probe: Exthdr}}
}

// judge ends a check once its answers say enough.
func (s *Stage) judge(sm Sample, st *pair, now time.Time) []Action {
	switch {
	case !st.exthdrAt.IsZero() || sm.Unanswered == 0:
		s.rest(st, Fine, now)
	case !st.plainAt.IsZero():
		if now.Sub(st.sent) < 2*st.plainAt.Sub(st.sent)+s.cfg.Slack {
			return nil
		}
		st.checking, st.verdict, st.backoff = false, DropsExthdr, 0
		st.on, st.lastNative = true, now
		st.encaps++
		return []Action{{Key: sm.Key, Encapsulate: true}}
	case now.Sub(st.sent) >= s.cfg.Wait:
		s.rest(st, Dead, now)
	}
	return nil
}

func (s *Stage) rest(st *pair, v Verdict, now time.Time) {
	st.checking, st.verdict = false, v
	st.backoff = min(max(2*st.backoff, s.cfg.Backoff), s.cfg.MaxBackoff)
	st.notBefore = now.Add(st.backoff)
}

// View is one pair for `ilnpctl show paths`.
type View struct {
	Key               Key     `json:"-"`
	Peer              string  `json:"peer"`
	Local             string  `json:"local"`
	Remote            string  `json:"remote"`
	Encapsulated      bool    `json:"encapsulated"`
	ByPeer            bool    `json:"learned_from_peer,omitempty"`
	Checking          bool    `json:"checking,omitempty"`
	LastVerdict       Verdict `json:"last_check,omitempty"`
	Checks            int     `json:"checks"`
	TimesEncapsulated int     `json:"times_encapsulated"`
}

// Views lists the pairs that were ever checked or encapsulated, in key order.
func (s *Stage) Views() []View {
	var out []View
	add := func(k Key, st *pair) {
		if st.checks == 0 && !st.on {
			return
		}
		out = append(out, View{Key: k, Peer: k.Peer.String(), Local: k.Local.String(), Remote: k.Remote.String(),
			Encapsulated: st.on, ByPeer: st.byPeer, Checking: st.checking, LastVerdict: st.verdict,
			Checks: st.checks, TimesEncapsulated: st.encaps})
	}
	for k, st := range s.pairs {
		add(k, st)
	}
	for k, st := range s.unsampled {
		add(k, st)
	}
	slices.SortFunc(out, func(a, b View) int { return compareKeys(a.Key, b.Key) })
	return out
}

func compareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Peer, b.Peer), cmp.Compare(a.Local, b.Local), cmp.Compare(a.Remote, b.Remote))
}
