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
// backoff that doubles up to MaxBackoff. A pair past its backoff that is answered again, or
// no longer sent on, is forgotten; sent on again in the same quiet episode, its backoff is
// recomputed from the episode's age.
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
	"math"
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

// pair is what the stage keeps of one pair: a value (no pointer: issue 28, a mass move has
// every pair of a correspondent checked once) in 24 bytes. Times are stamps (Stage.stamp).
type pair struct {
	// t is, by the pair's state: in a check, when its probes went; on, the last native probe;
	// otherwise the end of the backoff (0: none).
	t int64
	// plain and exthdr are the answers of the current check, in microseconds after t plus 1
	// (0: none yet).
	plain, exthdr uint32
	// checks and encaps count for the view (saturating).
	checks, encaps uint16
	verdict        Verdict
	flags          uint8
	// doublings is the backoff: 0 none, else Backoff doubled doublings-1 times, up to
	// MaxBackoff.
	doublings uint8
}

const (
	checking uint8 = 1 << iota
	on
	byPeer
)

func (p *pair) is(f uint8) bool { return p.flags&f != 0 }

func (p *pair) set(f uint8, v bool) {
	if v {
		p.flags |= f
	} else {
		p.flags &^= f
	}
}

// spent reports whether p, sampled as sm at now, holds nothing worth a record (issue 28: a
// mass move at a correspondent has every pair checked once, and each kept its record for
// good): no check, not on, never encapsulated, past its backoff, and either answered since
// (no backoff left) or no longer sent on. The backoff of a pair forgotten while its packets
// are still unanswered is recomputed from its quiet episode's age if it is sent on again
// (priorChecks); the verdict of a check that found nothing goes with it.
func (s *Stage) spent(p *pair, sm *Sample, now time.Time, t int64) bool {
	if p.flags != 0 || p.encaps != 0 || (p.t != 0 && t < p.t) {
		return false
	}
	return p.doublings == 0 || now.Sub(sm.LastTx) > s.cfg.InUse
}

// priorChecks is how many checks a pair sent on through a whole quiet episode of age a could
// have had before one at a (each check waits Quiet, then Backoff, 2 Backoff, ...: Quiet +
// Backoff (2^k - 1) <= a): the backoff of a pair forgotten in its episode, recomputed at its
// next check; at least what the pair kept would have had, never less.
func (s *Stage) priorChecks(a time.Duration) uint8 {
	var k uint8
	for sum := s.cfg.Quiet; k < math.MaxUint8; k++ {
		b := s.backoff(&pair{doublings: k + 1}) // the pause after check k+1
		if sum += b; sum > a || sum < 0 {
			return k
		}
		if b >= s.cfg.MaxBackoff {
			return k + 1 // every later pause is the longest too
		}
	}
	return k
}

// Stage is the detection's state over every pair. Not safe for concurrent use.
//
// A pass forgets the pairs it did not sample without a walk over every pair (issue 28: the
// walk at the end of a pass held the daemon's loop): BeginPass sets the pairs kept so far
// aside (unsampled), StepSome moves each pair it samples back into pairs, and EndPass drops
// what is still set aside, whole.
type Stage struct {
	cfg   Config
	pairs map[Key]pair // outside a pass every pair; in a pass those it sampled
	// unsampled are, in a pass, the pairs kept before it that it has not sampled yet (nil:
	// no pass is open).
	unsampled map[Key]pair
	// base is the instant of stamp 0: the first time the stage was given.
	base    time.Time
	hasBase bool
	// touched counts the pairs the stage looked at (tests: the work a call does).
	touched int
}

// New makes a stage.
func New(cfg Config) (*Stage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Stage{cfg: cfg.withDefaults(), pairs: map[Key]pair{}}, nil
}

// stamp is t in nanoseconds after the stage's base (monotonic when both carry the clock).
func (s *Stage) stamp(t time.Time) int64 {
	if !s.hasBase {
		s.base, s.hasBase = t, true
	}
	return int64(t.Sub(s.base))
}

// answerAt encodes an answer d after its probe went (pair.plain, pair.exthdr).
func answerAt(d int64) uint32 {
	return uint32(min(max(d/int64(time.Microsecond), 0), 1<<32-2)) + 1
}

// answerAfter decodes answerAt.
func answerAfter(a uint32) time.Duration { return time.Duration(a-1) * time.Microsecond }

func inc(n *uint16) {
	if *n < 1<<16-1 {
		*n++
	}
}

// backoff is the pause p's backoff stands for.
func (s *Stage) backoff(p *pair) time.Duration {
	if p.doublings == 0 {
		return 0
	}
	b := s.cfg.Backoff
	for i := uint8(1); i < p.doublings && b < s.cfg.MaxBackoff && b <= math.MaxInt64/2; i++ {
		b *= 2
	}
	return min(b, s.cfg.MaxBackoff)
}

// Answered records the answer to a probe of kind p sent on k at sent.
func (s *Stage) Answered(k Key, p Probe, sent, at time.Time) {
	st, in := s.lookup(k)
	if in == nil || !st.is(checking) || s.stamp(sent) != st.t {
		return
	}
	switch p {
	case Plain:
		st.plain = answerAt(s.stamp(at) - st.t)
	case Exthdr:
		st.exthdr = answerAt(s.stamp(at) - st.t)
	default:
		return
	}
	in[k] = st
}

// lookup is the pair k, sampled in the open pass or not, and the map it is in (nil: none).
func (s *Stage) lookup(k Key) (pair, map[Key]pair) {
	if st, ok := s.pairs[k]; ok {
		return st, s.pairs
	}
	if st, ok := s.unsampled[k]; ok {
		return st, s.unsampled
	}
	return pair{}, nil
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
	s.unsampled, s.pairs = s.pairs, map[Key]pair{}
}

// StepSome takes some pairs as they are now and returns what to do with them. Its work is
// the samples', whatever the number of pairs kept.
func (s *Stage) StepSome(samples []Sample, now time.Time) []Action {
	var acts []Action
	t := s.stamp(now)
	for i := range samples {
		sm := &samples[i]
		s.touched++
		st, kept := s.pairs[sm.Key]
		if !kept {
			var ok bool
			if st, ok = s.unsampled[sm.Key]; ok {
				delete(s.unsampled, sm.Key)
			}
		}
		acts = s.step(acts, sm, &st, now, t)
		// Only a pair with state of its own is kept (issue 28: a pair per session at 100,000s
		// of sessions, almost all of them with nothing to remember).
		if s.spent(&st, sm, now, t) {
			if kept {
				delete(s.pairs, sm.Key)
			}
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

func (s *Stage) step(acts []Action, sm *Sample, st *pair, now time.Time, t int64) []Action {
	if sm.On {
		if !st.is(on) {
			st.set(on, true)
			st.t = t
		}
		st.set(checking, false)
		st.set(byPeer, sm.ByPeer)
		if sm.ByPeer || time.Duration(t-st.t) < s.cfg.NativeEvery {
			return acts
		}
		st.t = t
		return append(acts, Action{Key: sm.Key, Probe: Native})
	}
	if st.is(on) {
		// Back to native (the datapath saw a native answer): a fresh start.
		st.flags, st.doublings, st.t = 0, 0, 0
	}
	if st.is(checking) {
		return s.judge(acts, sm, st, t)
	}
	if sm.Unanswered == 0 {
		st.doublings = 0
		return acts
	}
	// Only a pair still in use: one this node stopped sending on (the peer moved away from
	// it) is not the path's fault.
	if sm.FirstUnanswered.IsZero() || now.Sub(sm.FirstUnanswered) < s.cfg.Quiet ||
		now.Sub(sm.LastTx) > s.cfg.InUse || (st.t != 0 && t < st.t) {
		return acts
	}
	if st.doublings == 0 {
		st.doublings = s.priorChecks(now.Sub(sm.FirstUnanswered))
	}
	st.set(checking, true)
	st.t, st.plain, st.exthdr = t, 0, 0
	inc(&st.checks)
	return append(acts, Action{Key: sm.Key, Probe: Plain}, Action{Key: sm.Key, Probe: Exthdr})
}

// judge ends a check once its answers say enough.
func (s *Stage) judge(acts []Action, sm *Sample, st *pair, t int64) []Action {
	since := time.Duration(t - st.t)
	switch {
	case st.exthdr != 0 || sm.Unanswered == 0:
		s.rest(st, Fine, t)
	case st.plain != 0:
		if since < 2*answerAfter(st.plain)+s.cfg.Slack {
			return acts
		}
		st.set(checking, false)
		st.set(on, true)
		st.verdict, st.doublings, st.t = DropsExthdr, 0, t
		inc(&st.encaps)
		return append(acts, Action{Key: sm.Key, Encapsulate: true})
	case since >= s.cfg.Wait:
		s.rest(st, Dead, t)
	}
	return acts
}

func (s *Stage) rest(st *pair, v Verdict, t int64) {
	st.set(checking, false)
	st.verdict = v
	if s.backoff(st) < s.cfg.MaxBackoff && st.doublings < math.MaxUint8 {
		st.doublings++
	}
	st.t = t + int64(s.backoff(st))
	st.plain, st.exthdr = 0, 0
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

// Views lists the pairs kept that were ever checked or encapsulated, in key order (a pair
// whose check found nothing is forgotten once it is answered and its backoff is over).
func (s *Stage) Views() []View {
	var out []View
	add := func(k Key, st pair) {
		if st.checks == 0 && !st.is(on) {
			return
		}
		out = append(out, View{Key: k, Peer: k.Peer.String(), Local: k.Local.String(), Remote: k.Remote.String(),
			Encapsulated: st.is(on), ByPeer: st.is(byPeer), Checking: st.is(checking), LastVerdict: st.verdict,
			Checks: int(st.checks), TimesEncapsulated: int(st.encaps)})
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
