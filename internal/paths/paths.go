// Package paths decides, per locator pair of each ILNP session, whether the pair delivers:
// path liveness without link-down (issue 16). The datapath counts, per pair, the packets sent
// and received with the session's nonce and how many were sent since the last one arrived; a
// received packet is the pair's proof of life.
//
// A pair goes quiet in one of two ways: data leaves on it and nothing comes back (a quiet
// episode starting at its first unanswered packet), or a steady stream arriving on it stops
// (starting at its last receipt; the receiver of a one-way flow has nothing of its own to go
// unanswered). RTT + SuspectAfter into an episode the pair is suspect and gets one probe at once
// (an ICMPv6 echo carrying the nonce, forced onto the pair; at most one per Margin - 10 ms, so
// one sent for a gap just before a failure delays the next by less than the verdict's budget).
// The probe decides: answered, the pair is alive (the quiet was the application's); unanswered,
// it is dead. While traffic flows (a steady stream arriving on the pair stopped, or the peer was
// sending steadily and has gone silent on every pair) the verdict comes RTT + Margin after the
// episode's start (the last delivery), or the probe's RTT and 10 ms after the probe if that is
// later (a slow path); otherwise (a bursty or pausing peer) the probe gets its own RTT plus
// max(Margin - SuspectAfter, 4 RTT variations). A bursty peer is never taken for a failure
// without an unanswered probe.
//
// Every pair gets at most one periodic probe per ProbeInterval, which keeps idle pairs proven
// (both ends probe, and each end's probes are the other's proof of life on that pair) and brings
// a dead pair back when it delivers again. All probes together stay within MaxProbesPerSecond.
//
// The Tracker is a pure state machine: Step takes the datapath's counters and the time and
// returns the state changes and the probes to send, Next when the verdicts may change next
// without new counters (the daemon wakes then instead of waiting for its next poll). It does
// no I/O.
package paths

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// EventKind is the timeline kind of a pair's state change.
const EventKind timeline.Kind = "path_state"

// Key names one locator pair of the session with Peer.
type Key struct {
	Peer   wire.NID
	Local  wire.L64
	Remote wire.L64
}

func (k Key) String() string { return fmt.Sprintf("%v %v->%v", k.Peer, k.Local, k.Remote) }

func (k Key) compare(o Key) int {
	return cmp.Or(cmp.Compare(k.Peer, o.Peer), cmp.Compare(k.Local, o.Local), cmp.Compare(k.Remote, o.Remote))
}

// State is a pair's liveness.
type State uint8

const (
	// Unknown: nothing received on the pair yet (usable: a new pair is innocent).
	Unknown State = iota
	// Alive: a packet arrived on it since it last went quiet.
	Alive
	// Suspect: it carries data and nothing has come back for a while; a probe is out.
	Suspect
	// Dead: it sent and heard nothing back for an RTT plus the margin.
	Dead
)

var stateNames = [...]string{Unknown: "unknown", Alive: "alive", Suspect: "suspect", Dead: "dead"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MarshalText makes State a JSON string.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads the names MarshalText writes.
func (s *State) UnmarshalText(b []byte) error {
	for i, name := range stateNames {
		if name == string(b) {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("path state %q: want unknown, alive, suspect or dead", b)
}

// Usable reports whether traffic may be put on a pair in this state.
func (s State) Usable() bool { return s != Dead }

// Config parameterises a Tracker. Zero fields take the defaults.
type Config struct {
	// Margin is the verdict's budget beyond the RTT: a pair under a flowing stream is dead RTT +
	// Margin after its last delivery (on a path fast enough for the probe to come back in
	// time). The bound is 1 RTT + 100 ms from the last delivery to the first delivery
	// on the other pair, and the switch (an LU's one-way trip, the peer's daemon) and the next
	// packet after it need their share of the 100 ms.
	Margin time.Duration
	// SuspectAfter is how long, beyond the RTT, a pair may be quiet before it is probed; the
	// probe then has Margin - SuspectAfter to come back (or longer on a slow path).
	SuspectAfter time.Duration
	// ProbeInterval is the least time between two periodic probes of one pair.
	ProbeInterval time.Duration
	// MinUnanswered is how many packets must have gone unanswered (a final ACK alone is not a
	// failure).
	MinUnanswered uint64
	// InitialRTT stands in for a pair's RTT until a probe has measured it.
	InitialRTT time.Duration
	// MaxProbesPerSecond caps the probes of all pairs together (a token bucket holding one
	// second's worth): whatever a peer's traffic makes us suspect, we never send more.
	// Suspect probes go first, then the periodic ones longest unprobed first.
	MaxProbesPerSecond int
}

// Defaults for Config.
const (
	// DefaultMargin: 70 ms for the verdict leaves 30 ms of the 100 for the switch,
	// the next packet on the new pair and a loaded machine's scheduling.
	DefaultMargin = 70 * time.Millisecond
	// DefaultSuspectAfter: a quiet pair is probed RTT + 15 ms into its silence (a stream of
	// a few hundred packets a second has gaps of a few ms), leaving the probe 55 ms.
	DefaultSuspectAfter  = 15 * time.Millisecond
	DefaultProbeInterval = time.Second
	DefaultMinUnanswered = 2
	DefaultInitialRTT    = 100 * time.Millisecond
	// DefaultMaxProbesPerSecond: 50 probes of 64 bytes (with the nonce) are 3.2 kB/s, what
	// a node may ever send for liveness whatever it holds: 50 idle pairs probed once a second,
	// or a few suspect data pairs probed every RTT + margin.
	DefaultMaxProbesPerSecond = 50
)

// Sample is the datapath's counters of one pair at one moment. Zero times mean never.
type Sample struct {
	Key                Key
	TxPackets, TxBytes uint64
	RxPackets, RxBytes uint64
	LastTx, LastRx     time.Time
	FirstUnanswered    time.Time
	Unanswered         uint64
}

// Change is one pair's state change.
type Change struct {
	Key      Key
	From, To State
	// SinceProof is how long before the change the pair last delivered (0: never did).
	SinceProof time.Duration
}

// Result is what a Step decided.
type Result struct {
	Changes []Change
	// Probes are the pairs to probe now, one probe each.
	Probes []Key
}

type pair struct {
	// s is the latest counters; s.Key is the pair's key from its creation on.
	s     Sample
	state State
	// suspect: the probe wanted now is a suspect probe.
	suspect bool
	hasRTT  bool
	// suspectAnswered: the current quiet episode's suspect probe was answered; suspectOK:
	// the last suspect probe of any episode was.
	suspectAnswered, suspectOK bool
	flows                      int32
	echoes                     uint32 // see rx
	// rx is the pair's receipts over the last seconds but our probes' echoes (streamRx of
	// them so far; echoes answered since the last Step): the peer echoes on the pair the probe
	// came on (bpf/lib/paths.h), and counted as a stream, each end's suspect probes and their
	// echoes made the other end's quiet look like a stream that stopped again, so both ends
	// probed a pair a stream had left some 17 times a second for good (TestStreamLeavesPair).
	// Without the echoes, the peer's suspect probes alone come at least Margin - probeGuard
	// apart, longer than a steady stream's steadyGap.
	rx       activity
	streamRx uint64
	srtt     time.Duration
	rttvar   time.Duration
	// The current quiet episode: when it started (zero: none) and its suspect probe (zero:
	// not sent yet).
	episode     time.Time
	suspectAt   time.Time
	lastSuspect time.Time // the last suspect probe of any episode
	deadRx      time.Time // LastRx when it was declared dead
	provenAt    time.Time // when the latest probe that was answered left
	lastProbe   time.Time
	probes      []probe   // recent probes, for loss (at most probeWindow)
	next        time.Time // when judge may decide differently without new counters
	abandonedAt time.Time // when the peer last moved away from the pair's remote locator
}

// activity is a cumulative packet count at successive Steps, oldest first.
type activity []heardAt

// heardAt is how many packets had come at a time (since the tracker's base: 16 bytes, not 32
// with a time.Time; a pair keeps some 150 of them at 20-ms polls, issue 28).
type heardAt struct {
	at time.Duration
	n  uint64
}

// heardHistory is how long the counts are kept (beyond any RTT + margin, and the second
// steadiness is judged over).
const heardHistory = 3 * time.Second

func (a activity) add(now time.Duration, n uint64) activity {
	if len(a) > 0 && n < a[len(a)-1].n {
		a = a[:0] // the counter restarted (the datapath's entry was evicted)
	}
	// What is older than the history goes first (the new count stays whatever its age), moved
	// down in place: slicing off the front left the array to grow by the history dropped
	// until append copied it, and append doubles (issue 28: 4 MB at 20,000 sessions).
	drop := 0
	for drop < len(a) && now-a[drop].at > heardHistory {
		drop++
	}
	if drop > 0 {
		a = append(a[:0], a[drop:]...)
	}
	if len(a) == cap(a) {
		b := make(activity, len(a), len(a)+len(a)/4+4)
		copy(b, a)
		a = b
	}
	return append(a, heardAt{at: now, n: n})
}

// since is how many packets were counted at Steps after t. A Step's count covers the packets
// since the Step before, which may have come before t: they are not counted (undercounting
// keeps "the peer was heard elsewhere" from blocking a verdict on packets from before the
// silence).
func (a activity) since(t time.Duration) uint64 {
	for i, x := range a {
		if x.at > t {
			if i == 0 {
				return 0
			}
			return a[len(a)-1].n - x.n
		}
	}
	return 0
}

// steadyBefore reports whether the packets counted in the second before t came steadily: at
// least busyRx of them, up to t (the Step that saw them may come just after), and no
// Step-to-Step stretch without one longer than steadyGap but one hiccup of at most hiccupGap
// (a stream's gap long enough to draw a suspect probe on a slower path is longer than
// steadyGap once seen through the polls, and a stream that had one must still count as
// flowing when it fails soon after). The history must reach back the whole second.
func (a activity) steadyBefore(t time.Duration) bool {
	from := t - time.Second
	if len(a) == 0 || a[0].at > from {
		return false
	}
	var prev *heardAt
	var lastRise time.Duration
	risen := false
	count := uint64(0)
	hiccup := false
	// Counts before the second count only as the one just before it (a judge asks twice per
	// pair per step: over the whole history this was most of a step's time).
	i0 := max(sort.Search(len(a), func(i int) bool { return a[i].at >= from })-1, 0)
	for i := i0; i < len(a); i++ {
		// The first Step after t counts too (the packets it saw came after the Step before
		// it, up to t for a stream that stopped at t), if it came soon after.
		x := &a[i]
		if (prev != nil && prev.at > t) || x.at-t > steadyGap {
			break
		}
		if prev != nil && x.at >= from && x.n > prev.n {
			count += x.n - prev.n
			if !risen {
				lastRise, risen = prev.at, true
			}
			if gap := x.at - lastRise; gap > steadyGap {
				if hiccup || gap > hiccupGap {
					return false
				}
				hiccup = true
			}
			lastRise = x.at
		}
		prev = x
	}
	return count >= busyRx && risen && t-lastRise <= steadyGap
}

type probe struct {
	at       time.Time
	answered bool
}

// busyRx is how many packets a second make a stream steady (with steadyGap).
const busyRx = 10

// steadyGap is the longest stretch without a packet a steady stream has (the daemon's 20 ms
// polls see every poll's packets of a few hundred a second; two missed polls are allowed).
const steadyGap = 50 * time.Millisecond

// hiccupGap is the longest single stretch without a packet a steady stream may have had in
// the second (a bursty peer's pauses are longer, or come more than once a second).
const hiccupGap = 4 * steadyGap

// answeredElsewhereMin is how many packets from the peer on other pairs since a quiet
// episode began mean that it still hears us (more than the probes, one a second per pair,
// and their echoes could make): then only the probe decides.
const answeredElsewhereMin = 4

// probeGuard is the least time beyond its RTT a suspect probe gets to come back.
const probeGuard = 10 * time.Millisecond

// reprobeAfter is how long a quiet episode whose suspect probe was answered (the peer answers
// on another pair) waits before the next one.
const reprobeAfter = 250 * time.Millisecond

// probeWindow is how many recent probes the loss figure is taken over.
const probeWindow = 10

// Tracker holds the pairs' states. It is not safe for concurrent use (the daemon's loop owns it).
//
// The pairs are kept per peer: a poll at a correspondent with 100,000 sessions judges them a
// few thousand at a time (StepPeers, one loop turn each), not all at once (issue 28: one poll
// over 21,772 pairs held the daemon's loop for 2 s in a mass move).
type Tracker struct {
	cfg    Config
	peers  map[wire.NID]*peerPairs
	order  []*peerPairs             // every peer, for EndPass's bounded walk
	locals map[wire.L64]*localCount // per local locator: a handful, whatever the sessions
	tokens float64                  // probe budget (MaxProbesPerSecond)
	filled time.Time                // when tokens was last topped up
	pass   uint64                   // the current pass (BeginPass)
	base   time.Time                // what activity's times count from: the first step
	swept  int                      // EndPass's position in order
	// next is the earliest pair decision of the last finished pass, passNext that of the
	// current one so far.
	next, passNext time.Time
}

// peerPairs is one peer's pairs and what is known of the peer as a whole.
type peerPairs struct {
	peer  wire.NID
	pairs []*pair   // ordered by key
	heard activity  // packets from the peer, all its pairs together
	held  time.Time // Hold: the peer's last unsettled moment (zero: none)
	pass  uint64    // the last pass that stepped it
	idx   int       // its place in Tracker.order
}

// localCount is how many pairs through a local locator there are, and how many are dead and
// alive (applyPathHealth's question, answered without a pass over every pair).
type localCount struct{ pairs, dead, alive int }

func (ps *peerPairs) find(k Key) *pair {
	for _, p := range ps.pairs {
		if p.s.Key == k {
			return p
		}
	}
	return nil
}

func (t *Tracker) find(k Key) *pair {
	if ps := t.peers[k.Peer]; ps != nil {
		return ps.find(k)
	}
	return nil
}

func (t *Tracker) peer(peer wire.NID) *peerPairs {
	ps := t.peers[peer]
	if ps == nil {
		ps = &peerPairs{peer: peer, pass: t.pass, idx: len(t.order)}
		t.peers[peer] = ps
		t.order = append(t.order, ps)
	}
	return ps
}

// count adds d to the pair's share of its local locator's counts.
func (t *Tracker) count(k Key, s State, d int) {
	c := t.locals[k.Local]
	if c == nil {
		c = &localCount{}
		t.locals[k.Local] = c
	}
	c.pairs += d
	switch s {
	case Dead:
		c.dead += d
	case Alive:
		c.alive += d
	}
	if c.pairs <= 0 {
		delete(t.locals, k.Local)
	}
}

// Hold tells the tracker that the peer cannot yet be expected to answer on our pairs (a
// Locator Update to it is outstanding: it may not know the locator we now send from, and it
// keeps sending to the one it knows). Call it on every Step while that lasts: the peer's
// pairs are neither probed nor declared dead then, and afterwards their silence counts only
// from the last hold, so that the peer has an RTT and the margin to move to us as told.
func (t *Tracker) Hold(peer wire.NID, now time.Time) {
	t.peer(peer).held = now
}

// Abandoned tells the tracker that peer has moved away from its locator remote (its Locator
// Update no longer ranks it first): a pair to it that is suspect here, its suspect probe out
// and unanswered, is dead at once. Two signals then agree: the peer left the locator, and our
// traffic on the pair stopped being answered. A pair that is not suspect is left to its probe
// (the peer may have moved for its policy's sake).
// It looks at the peer's pairs only: a pass over every pair cost O(sessions) per LU at a
// correspondent in a mass move (issue 28).
func (t *Tracker) Abandoned(peer wire.NID, remote wire.L64, now time.Time) {
	if ps := t.peers[peer]; ps != nil {
		for _, p := range ps.pairs {
			if p.s.Key.Remote == remote {
				p.abandonedAt = now
			}
		}
	}
}

// New returns a Tracker.
func New(cfg Config) (*Tracker, error) {
	if cfg.Margin == 0 {
		cfg.Margin = DefaultMargin
	}
	if cfg.SuspectAfter == 0 {
		cfg.SuspectAfter = DefaultSuspectAfter
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	if cfg.MinUnanswered == 0 {
		cfg.MinUnanswered = DefaultMinUnanswered
	}
	if cfg.InitialRTT == 0 {
		cfg.InitialRTT = DefaultInitialRTT
	}
	if cfg.MaxProbesPerSecond == 0 {
		cfg.MaxProbesPerSecond = DefaultMaxProbesPerSecond
	}
	switch {
	case cfg.Margin < 0 || cfg.SuspectAfter < 0 || cfg.InitialRTT < 0:
		return nil, fmt.Errorf("paths config: negative duration")
	case cfg.SuspectAfter >= cfg.Margin:
		return nil, fmt.Errorf("paths config: suspect after %v must be below the margin %v", cfg.SuspectAfter, cfg.Margin)
	case cfg.ProbeInterval < 100*time.Millisecond:
		return nil, fmt.Errorf("paths config: probe interval %v: want at least 100ms", cfg.ProbeInterval)
	case cfg.MaxProbesPerSecond < 0:
		return nil, fmt.Errorf("paths config: max probes per second %d: want at least 1", cfg.MaxProbesPerSecond)
	}
	return &Tracker{cfg: cfg, peers: map[wire.NID]*peerPairs{}, locals: map[wire.L64]*localCount{},
		tokens: float64(cfg.MaxProbesPerSecond)}, nil
}

func (p *pair) rtt(cfg Config) time.Duration {
	if p.hasRTT {
		return p.srtt
	}
	return cfg.InitialRTT
}

// Step brings the tracker up to now: candidates are the pairs the sessions may use (every
// usable local locator with every usable remote one of each session; pairs no longer listed
// are forgotten), samples the datapath's counters (pairs not among the candidates are ignored).
// It is one whole pass (BeginPass, StepPeers over every peer, EndPass).
func (t *Tracker) Step(candidates []Key, samples []Sample, now time.Time) Result {
	byPeer := map[wire.NID]*PeerInput{}
	var in []*PeerInput
	get := func(peer wire.NID) *PeerInput {
		pi := byPeer[peer]
		if pi == nil {
			pi = &PeerInput{Peer: peer}
			byPeer[peer] = pi
			in = append(in, pi)
		}
		return pi
	}
	for _, k := range candidates {
		pi := get(k.Peer)
		pi.Candidates = append(pi.Candidates, k)
	}
	for _, s := range samples {
		pi := get(s.Key.Peer)
		pi.Samples = append(pi.Samples, s)
	}
	slices.SortFunc(in, func(a, b *PeerInput) int { return cmp.Compare(a.Peer, b.Peer) })
	inputs := make([]PeerInput, len(in))
	for i, pi := range in {
		inputs[i] = *pi
	}
	t.BeginPass()
	res := t.StepPeers(inputs, now)
	t.EndPass(len(t.order))
	return res
}

// PeerInput is one peer's share of a step: the pairs its sessions may use (all with Peer) and
// the datapath's counters of its pairs (all with Key.Peer == Peer).
type PeerInput struct {
	Peer       wire.NID
	Candidates []Key
	Samples    []Sample
	// Lone: whatever the peer's pairs do, no verdict could change anything (one candidate
	// pair, and no other locator of ours to move to): the tracker keeps nothing of the peer
	// (what it held goes, and EndPass forgets the peer), judges and probes none of its pairs
	// and reports no change of theirs. Most sessions of a correspondent with many are so;
	// their records were most of its path liveness heap (issue 28). LoneView shows such a pair.
	Lone bool
}

// BeginPass starts a pass: the StepPeers calls up to the EndPass that returns done together
// step every peer once (a peer not stepped is forgotten).
func (t *Tracker) BeginPass() {
	t.pass++
	t.swept = 0
	t.passNext = time.Time{}
}

// StepPeers brings the given peers' pairs up to now (each peer as Step would: its pairs not
// among its candidates are forgotten) and budgets their probes. Its work is proportional to
// the pairs given, not to the table: a daemon hands it a bounded share of a pass per turn.
func (t *Tracker) StepPeers(in []PeerInput, now time.Time) Result {
	if t.base.IsZero() {
		t.base = now
	}
	var (
		res    Result
		wanted []*pair
	)
	for i := range in {
		wanted = t.stepPeer(&in[i], now, &res, wanted)
	}
	for _, p := range t.budget(wanted, now) {
		res.Probes = append(res.Probes, p.s.Key)
		p.lastProbe = now
		if p.suspect {
			p.lastSuspect = now
		}
		if len(p.probes) == probeWindow {
			// In place: the window's array never grows past it.
			p.probes = append(p.probes[:0], p.probes[1:]...)
		}
		p.probes = append(p.probes, probe{at: now})
	}
	return res
}

func (t *Tracker) stepPeer(in *PeerInput, now time.Time, res *Result, wanted []*pair) []*pair {
	ps := t.peers[in.Peer]
	if in.Lone {
		if ps != nil {
			// Not stepped in this pass: EndPass forgets it.
			for _, p := range ps.pairs {
				t.count(p.s.Key, p.state, -1)
			}
			ps.pairs, ps.heard, ps.held = nil, nil, time.Time{}
		}
		return wanted
	}
	if ps == nil {
		if len(in.Candidates) == 0 && len(in.Samples) == 0 {
			return wanted
		}
		ps = t.peer(in.Peer)
	}
	ps.pass = t.pass
	keys := slices.Clone(in.Candidates)
	slices.SortFunc(keys, Key.compare)
	keys = slices.Compact(keys)
	pairs := make([]*pair, 0, len(keys))
	for _, k := range keys {
		if k.Peer != in.Peer {
			continue
		}
		p := ps.find(k)
		if p == nil {
			p = &pair{s: Sample{Key: k}}
			t.count(k, p.state, 1)
		}
		pairs = append(pairs, p)
	}
	for _, p := range ps.pairs {
		if !slices.Contains(pairs, p) {
			t.count(p.s.Key, p.state, -1)
		}
	}
	ps.pairs = pairs
	var heard uint64
	for _, s := range in.Samples {
		if s.Key.Peer != in.Peer {
			continue
		}
		if p := ps.find(s.Key); p != nil {
			p.observe(s, now, t.base)
		}
		// Packets from the peer on any pair (also pairs not among the candidates): a pair
		// carrying data whose packets are answered on another pair (the peer has not switched
		// yet, or chose otherwise) may well be delivering, and only its probe can tell.
		heard += s.RxPackets
	}
	if len(in.Samples) > 0 {
		ps.heard = ps.heard.add(now.Sub(t.base), heard)
	} else {
		ps.heard = nil
	}
	if !ps.held.IsZero() && (len(in.Samples) == 0 || now.Sub(ps.held) > heardHistory) {
		ps.held = time.Time{}
	}
	for _, p := range ps.pairs {
		from := p.state
		to, probeNow := p.judge(t.cfg, now, ps.heard, ps.held, t.base)
		if !ps.held.IsZero() && ps.held.Equal(now) {
			probeNow = false
			if p.suspect {
				p.suspectAt, p.suspect = time.Time{}, false
			}
		}
		if to != from {
			t.count(p.s.Key, from, -1)
			t.count(p.s.Key, to, 1)
			p.state = to
			c := Change{Key: p.s.Key, From: from, To: to}
			if !p.s.LastRx.IsZero() {
				c.SinceProof = now.Sub(p.s.LastRx)
			}
			res.Changes = append(res.Changes, c)
		}
		if probeNow {
			wanted = append(wanted, p)
		}
		if p.next.After(now) && (t.passNext.IsZero() || p.next.Before(t.passNext)) {
			t.passNext = p.next
		}
	}
	return wanted
}

// EndPass forgets, at most limit peers looked at per call, the peers this pass did not step;
// done once it has looked at every peer (call it again until then), and it returns the
// peers it forgot.
func (t *Tracker) EndPass(limit int) (forgotten []wire.NID, done bool) {
	for n := 0; t.swept < len(t.order) && n < max(limit, 1); n++ {
		ps := t.order[t.swept]
		if ps.pass == t.pass {
			t.swept++
			continue
		}
		for _, p := range ps.pairs {
			t.count(p.s.Key, p.state, -1)
		}
		last := t.order[len(t.order)-1]
		t.order[ps.idx], last.idx = last, ps.idx
		t.order[len(t.order)-1] = nil
		t.order = t.order[:len(t.order)-1]
		delete(t.peers, ps.peer)
		forgotten = append(forgotten, ps.peer)
	}
	if t.swept < len(t.order) {
		return forgotten, false
	}
	t.next = t.passNext
	return forgotten, true
}

// Pairs is how many pairs the tracker holds.
func (t *Tracker) Pairs() int {
	n := 0
	for _, c := range t.locals {
		n += c.pairs
	}
	return n
}

// EachLocal calls f for every local locator some pair goes through: whether one of them is
// dead and whether one is alive.
func (t *Tracker) EachLocal(f func(local wire.L64, dead, alive bool)) {
	for l, c := range t.locals {
		f(l, c.dead > 0, c.alive > 0)
	}
}

// Next is the earliest time after now at which a Step could decide differently although
// nothing new arrived (a suspect probe due, a probe's answer overdue); zero: none is pending
// beyond the periodic probes. A daemon that polls the counters wakes then too. It is known
// per pass: the earliest of the last finished pass and of the current one so far.
func (t *Tracker) Next(now time.Time) time.Time {
	var next time.Time
	for _, n := range []time.Time{t.next, t.passNext} {
		if n.After(now) && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return next
}

// budget keeps the probes the rate cap allows now: suspect probes first, then the pairs
// longest unprobed. A pair left out keeps its turn (its last probe time is unchanged) and is
// asked for again on the next Step; a suspect probe left out is taken back, so the pair
// cannot be declared dead for a probe that was never sent.
func (t *Tracker) budget(wanted []*pair, now time.Time) []*pair {
	limit := float64(t.cfg.MaxProbesPerSecond)
	if !t.filled.IsZero() && now.After(t.filled) {
		t.tokens = min(limit, t.tokens+now.Sub(t.filled).Seconds()*limit)
	}
	if t.filled.IsZero() || now.After(t.filled) {
		t.filled = now
	}
	slices.SortStableFunc(wanted, func(a, b *pair) int {
		if a.suspect != b.suspect {
			if a.suspect {
				return -1
			}
			return 1
		}
		return a.lastProbe.Compare(b.lastProbe)
	})
	n := min(len(wanted), int(t.tokens))
	for _, p := range wanted[n:] {
		if p.suspect {
			p.suspectAt, p.suspect = time.Time{}, false
		}
	}
	t.tokens -= float64(n)
	return wanted[:n]
}

// observe takes the new counters; a packet received since the last sample proves the pair.
func (p *pair) observe(s Sample, now, base time.Time) {
	before := p.s.RxPackets
	if s.RxPackets < p.s.RxPackets || s.TxPackets < p.s.TxPackets {
		// The datapath's entry was evicted and recreated: start from the new counters.
		before = 0
	}
	p.s = s
	got := s.RxPackets - before
	p.streamRx += got - min(uint64(p.echoes), got) // an echo that came on another pair took nothing here
	p.echoes = 0
	p.rx = p.rx.add(now.Sub(base), p.streamRx)
}

// judge returns the pair's new state and whether to probe it now; it sets p.next.
//
// heard is the peer's packets on all pairs; held its last Hold (zero: none): silence counts
// from it at the earliest; base the tracker's base (activity's times count from it).
func (p *pair) judge(cfg Config, now time.Time, heard activity, held, base time.Time) (State, bool) {
	s := p.s
	state := p.state
	p.suspect, p.next = false, time.Time{}
	rtt := p.rtt(cfg)

	// The quiet episode: data unanswered since its first packet, or a steady stream of
	// receipts stopped (from the last one).
	// (A steady stream's episode starts at every receipt; it matters once the next one is
	// overdue.)
	var start time.Time
	dataQuiet := s.Unanswered >= cfg.MinUnanswered && !s.FirstUnanswered.IsZero()
	rxStall := !s.LastRx.IsZero() && p.rx.steadyBefore(s.LastRx.Sub(base))
	switch {
	case rxStall:
		start = s.LastRx
	case dataQuiet:
		start = s.FirstUnanswered
	}
	if state == Dead && s.LastRx.After(p.deadRx) {
		state = Alive // it delivered again
	}
	if start.IsZero() {
		p.episode, p.suspectAt, p.suspectAnswered = time.Time{}, time.Time{}, false
		if state != Dead && !s.LastRx.IsZero() && (s.Unanswered == 0 || state == Suspect) {
			state = Alive
		}
		return state, p.periodic(cfg, now)
	}
	if !p.episode.Equal(start) {
		if state == Suspect && !p.episode.IsZero() && s.LastRx.After(p.episode) {
			state = Alive // it delivered since the last quiet episode began
		}
		p.episode, p.suspectAt, p.suspectAnswered = start, time.Time{}, false
	}
	if held.After(start) {
		start = held
	}
	quiet := now.Sub(start)

	// When the suspect probe is overdue. While traffic flows (a steady stream arriving on the
	// pair stopped, or the peer was sending steadily and has gone silent on every pair: a
	// two-way flow's answers stopped) the verdict is anchored on the silence's start: RTT +
	// Margin after it, or the probe's RTT and guard after the probe if that is later (a slow
	// path). Anchoring it on the probe alone made a probe that had to wait for the spacing
	// (one sent for a gap just before the failure) push the verdict up to a spacing late.
	// Otherwise (a bursty or pausing peer, our data answered elsewhere) the probe gets its
	// RTT and at least Margin - SuspectAfter, four RTT variations (RFC 6298) if longer.
	steady := heard.steadyBefore(p.episode.Sub(base))
	flowing := rxStall || (dataQuiet && steady && heard.since(p.episode.Add(rtt).Sub(base)) < answeredElsewhereMin)
	overdue := func() time.Time {
		if flowing {
			return later(start.Add(rtt+cfg.Margin), p.suspectAt.Add(rtt+probeGuard))
		}
		return p.suspectAt.Add(rtt + max(cfg.Margin-cfg.SuspectAfter, 4*p.rttvar))
	}
	probeNow := p.periodic(cfg, now)
	switch {
	case state == Dead:
		// Dead until it delivers again.
	case !p.suspectAt.IsZero() && !p.suspectAnswered && !now.Before(overdue()):
		state, p.deadRx = Dead, s.LastRx
	case !p.suspectAt.IsZero() && !p.suspectAnswered && p.abandonedAt.After(p.episode):
		state, p.deadRx = Dead, s.LastRx // the peer left it too (Abandoned)
	case dataQuiet && now.Sub(later(start, p.provenAt)) >= cfg.ProbeInterval+rtt+cfg.Margin:
		// Idle: not even the peer's periodic probe came, nor an answer to ours.
		state, p.deadRx = Dead, s.LastRx
	case p.suspectAnswered && !dataQuiet:
		state = Alive // a stream stopped, and the pair still carries our probe
	case p.suspectAnswered:
		// Our data is answered on another pair only (or the peer's sending paused): probe
		// again now and then.
		state = Alive
		if now.Sub(p.suspectAt) >= reprobeAfter && now.Sub(p.lastSuspect) >= cfg.Margin {
			p.suspectAt, p.suspectAnswered = now, false
			p.suspect, probeNow = true, true
		} else {
			p.next = later(p.suspectAt.Add(reprobeAfter), p.lastSuspect.Add(cfg.Margin))
		}
	case p.suspectAt.IsZero() && quiet >= rtt+cfg.SuspectAfter:
		state = Suspect
		// At most one suspect probe per Margin - probeGuard (so that one sent for a gap just
		// before this silence delays the next by no more than the verdict's anchor allows);
		// once one was answered, one per reprobeAfter unless the peer was steady (a bursty
		// flow goes quiet often).
		spacing := max(cfg.Margin-probeGuard, cfg.SuspectAfter)
		if p.suspectOK && !steady {
			spacing = reprobeAfter
		}
		if p.lastSuspect.IsZero() || now.Sub(p.lastSuspect) >= spacing {
			p.suspectAt, p.suspectOK = now, false
			p.suspect, probeNow = true, true
		} else {
			p.next = p.lastSuspect.Add(spacing)
		}
	case p.suspectAt.IsZero():
		p.next = start.Add(rtt + cfg.SuspectAfter)
	}
	if state != Dead && !p.suspectAt.IsZero() && !p.suspectAnswered {
		state = Suspect
		if p.next.IsZero() {
			p.next = overdue()
		}
	}
	if dataQuiet && state != Dead {
		if idle := later(start, p.provenAt).Add(cfg.ProbeInterval + rtt + cfg.Margin); p.next.IsZero() || idle.Before(p.next) {
			p.next = idle
		}
	}
	return state, probeNow
}

// periodic reports whether the pair is due its periodic probe.
func (p *pair) periodic(cfg Config, now time.Time) bool {
	return p.lastProbe.IsZero() || now.Sub(p.lastProbe) >= cfg.ProbeInterval
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Answered records the echo reply to a probe of k sent at sent: an RTT sample (out on the
// pair, back on whichever pair the peer uses), for the loss figure an answered probe, and,
// when it was the suspect probe of the pair's quiet episode, the pair's proof that it still
// carries our packets.
func (t *Tracker) Answered(k Key, sent, now time.Time) {
	p := t.find(k)
	if p == nil || now.Before(sent) {
		return
	}
	for i := range p.probes {
		if p.probes[i].at.Equal(sent) {
			p.probes[i].answered = true
		}
	}
	if p.echoes < math.MaxUint32 {
		p.echoes++
	}
	if sent.After(p.provenAt) {
		p.provenAt = sent
	}
	if !p.suspectAt.IsZero() && p.suspectAt.Equal(sent) {
		p.suspectAnswered, p.suspectOK = true, true
	}
	r := now.Sub(sent)
	if !p.hasRTT {
		p.srtt, p.rttvar, p.hasRTT = r, r/2, true
		return
	}
	// RFC 6298 s.2.3: beta 1/4, alpha 1/8.
	d := p.srtt - r
	if d < 0 {
		d = -d
	}
	p.rttvar += (d - p.rttvar) / 4
	p.srtt += (r - p.srtt) / 8
}

// SetFlows records how many flows (sockets) use the pair, for the view.
func (t *Tracker) SetFlows(k Key, n int) {
	if p := t.find(k); p != nil {
		p.flows = int32(min(n, math.MaxInt32))
	}
}

// State returns a pair's state (Unknown for pairs not tracked).
func (t *Tracker) State(k Key) State {
	if p := t.find(k); p != nil {
		return p.state
	}
	return Unknown
}

// RTT returns a pair's smoothed probe RTT; ok is false before the first answer.
func (t *Tracker) RTT(k Key) (time.Duration, bool) {
	if p := t.find(k); p != nil && p.hasRTT {
		return p.srtt, true
	}
	return 0, false
}

// Loss is the share of the recent probes of k (answered or given up: older than give-up)
// that got no answer; ok is false with none.
func (t *Tracker) Loss(k Key, now time.Time, giveUp time.Duration) (float64, bool) {
	p := t.find(k)
	if p == nil {
		return 0, false
	}
	n, lost := 0, 0
	for _, pr := range p.probes {
		switch {
		case pr.answered:
			n++
		case now.Sub(pr.at) >= giveUp:
			n++
			lost++
		}
	}
	if n == 0 {
		return 0, false
	}
	return float64(lost) / float64(n), true
}

// sorted is every pair, ordered by key.
func (t *Tracker) sorted() []*pair {
	peers := slices.Clone(t.order)
	slices.SortFunc(peers, func(a, b *peerPairs) int { return cmp.Compare(a.peer, b.peer) })
	var out []*pair
	for _, ps := range peers {
		out = append(out, ps.pairs...)
	}
	return out
}

// View is one pair as `ilnpctl show paths` prints it.
type View struct {
	Peer           string   `json:"peer"`
	Local          string   `json:"local"`
	Remote         string   `json:"remote"`
	State          State    `json:"state"`
	RTTMs          *float64 `json:"rtt_ms"`
	Loss           *float64 `json:"loss"`
	TxBytes        uint64   `json:"tx_bytes"`
	RxBytes        uint64   `json:"rx_bytes"`
	TxPackets      uint64   `json:"tx_packets"`
	RxPackets      uint64   `json:"rx_packets"`
	Flows          int      `json:"flows"`
	LastProofMsAgo *float64 `json:"last_proof_ms_ago"`
	// Encap is how the pair's packets travel when not natively: "ipv6-udp" (ILNPv6 in
	// UDP/IPv6, this node found the path dropping the nonce header) or "ipv6-udp(peer)" (the
	// peer's packets turned it on); filled in by the daemon.
	Encap string `json:"encap,omitempty"`
}

// Views lists every pair, ordered by peer, local and remote locator.
func (t *Tracker) Views(now time.Time) []View {
	out := []View{}
	for _, p := range t.sorted() {
		v := View{
			Peer: p.s.Key.Peer.String(), Local: p.s.Key.Local.String(), Remote: p.s.Key.Remote.String(),
			State: p.state, TxBytes: p.s.TxBytes, RxBytes: p.s.RxBytes, TxPackets: p.s.TxPackets,
			RxPackets: p.s.RxPackets, Flows: int(p.flows),
		}
		if r, ok := t.RTT(p.s.Key); ok {
			v.RTTMs = ms(r)
		}
		if l, ok := t.Loss(p.s.Key, now, t.cfg.ProbeInterval); ok {
			v.Loss = &l
		}
		if !p.s.LastRx.IsZero() {
			v.LastProofMsAgo = ms(now.Sub(p.s.LastRx))
		}
		out = append(out, v)
	}
	return out
}

// LoneView is the row of a pair the tracker keeps nothing of (PeerInput.Lone), from its
// counters s: alive while it delivered within the time an idle pair is given to prove itself
// (ProbeInterval + InitialRTT + Margin), unknown otherwise; no RTT or loss (it is not probed).
func (t *Tracker) LoneView(s Sample, flows int, now time.Time) View {
	v := View{
		Peer: s.Key.Peer.String(), Local: s.Key.Local.String(), Remote: s.Key.Remote.String(),
		TxBytes: s.TxBytes, RxBytes: s.RxBytes, TxPackets: s.TxPackets, RxPackets: s.RxPackets, Flows: flows,
	}
	if !s.LastRx.IsZero() {
		v.LastProofMsAgo = ms(now.Sub(s.LastRx))
		if now.Sub(s.LastRx) <= t.cfg.ProbeInterval+t.cfg.InitialRTT+t.cfg.Margin {
			v.State = Alive
		}
	}
	return v
}

func ms(d time.Duration) *float64 {
	v := float64(d.Microseconds()) / 1000
	return &v
}
