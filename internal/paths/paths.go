// Package paths decides, per locator pair of each ILNP session, whether the pair delivers:
// path liveness without link-down (issue 16). The datapath counts, per pair, the packets sent
// and received with the session's nonce and how many were sent since the last one arrived; a
// received packet is the pair's proof of life. A pair that keeps sending without hearing
// anything for one RTT plus a margin is dead; a pair that carries data and has gone quiet for
// a little less is suspect and gets a probe at once (an ICMPv6 echo carrying the nonce, forced
// onto the pair), so that a merely one-way flow is not taken for a failure. Every pair gets at
// most one periodic probe per ProbeInterval, which keeps idle pairs proven (both ends probe,
// and each end's probes are the other's proof of life on that pair) and brings a dead pair
// back when it delivers again. Probes never wait for an answer in the datapath's count (their
// answers come back on the peer's choice of pair), so only unanswered data makes a pair
// suspect or dead: an idle pair is never declared dead, there being nothing to move.
// All probes together stay within MaxProbesPerSecond.
//
// The Tracker is a pure state machine: Step takes the datapath's counters and the time and
// returns the state changes and the probes to send. It does no I/O.
package paths

import (
	"cmp"
	"fmt"
	"slices"
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
	// Margin is added to the RTT before a pair that sends without hearing back is dead; the
	// issue's bound is 1 RTT + 100 ms.
	Margin time.Duration
	// SuspectAfter is how long after its first unanswered packet, beyond the RTT, a pair that
	// carries data gets a probe; it must leave the probe time to come back within Margin.
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
	DefaultMargin        = 100 * time.Millisecond
	DefaultSuspectAfter  = 30 * time.Millisecond
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
	key        Key
	state      State
	suspect    bool // the probe wanted now is a suspect probe (judge)
	s          Sample
	srtt       time.Duration
	hasRTT     bool
	lastProbe  time.Time
	probeEpoch time.Time // FirstUnanswered the last suspect probe was sent for
	txAtProbe  uint64    // packets sent on the pair when the last probe went out
	suspectAt  time.Time // when the suspect probe for probeEpoch went out
	probes     []probe   // recent probes, for loss
	flows      int
}

// heardAt is how many packets had come from a peer (all pairs) at a time.
type heardAt struct {
	at time.Time
	n  uint64
}

// heardHistory is how long the per-peer counts are kept (beyond any RTT + margin).
const heardHistory = 3 * time.Second

// heardSince is how many packets came from peer on any pair after since (as far as the
// history and the polling granularity tell).
func (t *Tracker) heardSince(peer wire.NID, since time.Time) uint64 {
	h := t.heard[peer]
	if len(h) == 0 {
		return 0
	}
	base := h[0].n
	for _, x := range h {
		if x.at.After(since) {
			break
		}
		base = x.n
	}
	if last := h[len(h)-1].n; last > base {
		return last - base
	}
	return 0
}

type probe struct {
	at       time.Time
	answered bool
}

// busyRx is how many packets a second from a peer make it a steady sender: when they stop, a
// failure is declared without waiting for a probe's answer.
const busyRx = 10

// answeredElsewhereMin is how many packets from the peer on other pairs answer a data pair:
// more than the probes (one a second per pair) and their echoes in an RTT + 100 ms.
const answeredElsewhereMin = 4

// probeWindow is how many recent probes the loss figure is taken over.
const probeWindow = 10

// Tracker holds the pairs' states. It is not safe for concurrent use (the daemon's loop owns it).
type Tracker struct {
	cfg    Config
	pairs  map[Key]*pair
	heard  map[wire.NID][]heardAt
	held   map[wire.NID]time.Time // Hold: the peer's last unsettled moment
	tokens float64                // probe budget (MaxProbesPerSecond)
	filled time.Time              // when tokens was last topped up
}

// Hold tells the tracker that the peer cannot yet be expected to answer on our pairs (a
// Locator Update to it is outstanding: it may not know the locator we now send from, and it
// keeps sending to the one it knows). Call it on every Step while that lasts: the peer's
// pairs are neither probed nor declared dead then, and afterwards their silence counts only
// from the last hold, so that the peer has an RTT and the margin to move to us as told.
func (t *Tracker) Hold(peer wire.NID, now time.Time) {
	t.held[peer] = now
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
	return &Tracker{cfg: cfg, pairs: map[Key]*pair{}, heard: map[wire.NID][]heardAt{}, held: map[wire.NID]time.Time{},
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
func (t *Tracker) Step(candidates []Key, samples []Sample, now time.Time) Result {
	want := make(map[Key]bool, len(candidates))
	for _, k := range candidates {
		want[k] = true
		if t.pairs[k] == nil {
			t.pairs[k] = &pair{key: k}
		}
	}
	for k := range t.pairs {
		if !want[k] {
			delete(t.pairs, k)
		}
	}
	for _, s := range samples {
		if p := t.pairs[s.Key]; p != nil {
			p.observe(s)
		}
	}
	// Packets from each peer on any pair (also pairs not among the candidates): a pair
	// carrying data whose packets are answered on another pair (the peer has not switched yet,
	// or chose otherwise) is delivering.
	heard := map[wire.NID]uint64{}
	for _, s := range samples {
		heard[s.Key.Peer] += s.RxPackets
	}
	for peer, n := range heard {
		h := append(t.heard[peer], heardAt{at: now, n: n})
		for len(h) > 1 && now.Sub(h[0].at) > heardHistory {
			h = h[1:]
		}
		t.heard[peer] = h
	}
	for peer := range t.heard {
		if _, ok := heard[peer]; !ok {
			delete(t.heard, peer)
		}
	}
	for peer, h := range t.held {
		if _, ok := heard[peer]; !ok || now.Sub(h) > heardHistory {
			delete(t.held, peer)
		}
	}
	var (
		res    Result
		wanted []*pair
	)
	for _, p := range t.sorted() {
		from := p.state
		since := now.Add(-(p.rtt(t.cfg) + t.cfg.Margin))
		if p.s.FirstUnanswered.After(since) {
			since = p.s.FirstUnanswered
		}
		busy := t.heardSince(p.key.Peer, now.Add(-time.Second)) >= busyRx
		held, isHeld := t.held[p.key.Peer]
		to, probeNow := p.judge(t.cfg, now, t.heardSince(p.key.Peer, since), busy, held)
		if isHeld && held.Equal(now) {
			probeNow = false
		}
		if to != from {
			p.state = to
			c := Change{Key: p.key, From: from, To: to}
			if !p.s.LastRx.IsZero() {
				c.SinceProof = now.Sub(p.s.LastRx)
			}
			res.Changes = append(res.Changes, c)
		}
		if probeNow {
			wanted = append(wanted, p)
		}
	}
	for _, p := range t.budget(wanted, now) {
		res.Probes = append(res.Probes, p.key)
		p.lastProbe, p.txAtProbe = now, p.s.TxPackets
		p.probes = append(p.probes, probe{at: now})
		if len(p.probes) > probeWindow {
			p.probes = p.probes[len(p.probes)-probeWindow:]
		}
	}
	return res
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
			p.probeEpoch, p.suspectAt = time.Time{}, time.Time{}
		}
	}
	t.tokens -= float64(n)
	return wanted[:n]
}

// observe takes the new counters; a packet received since the last sample proves the pair.
func (p *pair) observe(s Sample) {
	if s.RxPackets < p.s.RxPackets || s.TxPackets < p.s.TxPackets {
		// The datapath's entry was evicted and recreated: start from the new counters.
		p.s = Sample{}
	}
	p.s = s
}

// judge returns the pair's new state and whether to probe it now.
//
// A pair that carries data is answered by a steady stream from the peer since its first
// unanswered packet (heardSince packets on whichever pairs the peer sends; more than probes and
// their answers could make); an idle pair only by a packet on itself (the peer's probes), since
// the peer's answers to our probes come back on the peer's choice of pair.
//
// Going quiet means a failure at once (RTT + margin) only when the peer was sending steadily
// (busy: a two-way flow's answers stop); a one-way sender's pair is dead only when its suspect
// probe, too, went unanswered for RTT + margin, since its silence proves nothing.
//
// held is the peer's last Hold (zero: none): silence counts from it at the earliest.
func (p *pair) judge(cfg Config, now time.Time, heardSince uint64, busy bool, held time.Time) (State, bool) {
	s := p.s
	state := p.state
	p.suspect = false
	quietFor := time.Duration(0)
	if !s.FirstUnanswered.IsZero() && s.Unanswered > 0 {
		start := s.FirstUnanswered
		if held.After(start) {
			start = held
		}
		quietFor = max(now.Sub(start), 0)
	}
	data := s.TxPackets > p.txAtProbe+1 // more went out than the last probe
	answeredElsewhere := data && quietFor > 0 && heardSince >= answeredElsewhereMin
	rtt := p.rtt(cfg)
	switch {
	case s.Unanswered == 0 && !s.LastRx.IsZero():
		state = Alive
	case answeredElsewhere:
		if state == Suspect {
			state = Alive
		}
	case s.Unanswered >= cfg.MinUnanswered && quietFor >= rtt+cfg.Margin && data &&
		(busy || (!p.suspectAt.IsZero() && p.probeEpoch.Equal(s.FirstUnanswered) && now.Sub(p.suspectAt) >= rtt+cfg.Margin)):
		state = Dead
	case s.Unanswered >= cfg.MinUnanswered && quietFor >= cfg.ProbeInterval+rtt+cfg.Margin:
		// Idle: the peer's probe (one per interval) did not come either.
		state = Dead
	case state != Dead && quietFor >= rtt+cfg.SuspectAfter && data:
		// Data (not only the last probe) went out and nothing came back: ask now.
		state = Suspect
	}
	if state == Suspect && s.Unanswered == 0 {
		state = Alive
	}
	probeNow := p.lastProbe.IsZero() || now.Sub(p.lastProbe) >= cfg.ProbeInterval
	// At most one suspect probe per quiet episode, and none within Margin of the last probe
	// (a bursty flow goes quiet often).
	if state == Suspect && !p.probeEpoch.Equal(s.FirstUnanswered) && (p.lastProbe.IsZero() || now.Sub(p.lastProbe) >= cfg.Margin) {
		p.probeEpoch, p.suspectAt = s.FirstUnanswered, now
		p.suspect, probeNow = true, true
	}
	return state, probeNow
}

// Answered records the echo reply to a probe of k sent at sent: an RTT sample (out on the
// pair, back on whichever pair the peer uses) and, for the loss figure, an answered probe.
func (t *Tracker) Answered(k Key, sent, now time.Time) {
	p := t.pairs[k]
	if p == nil || now.Before(sent) {
		return
	}
	for i := range p.probes {
		if p.probes[i].at.Equal(sent) {
			p.probes[i].answered = true
		}
	}
	r := now.Sub(sent)
	if !p.hasRTT {
		p.srtt, p.hasRTT = r, true
		return
	}
	p.srtt += (r - p.srtt) / 8 // RFC 6298 s.2.3's alpha
}

// SetFlows records how many flows (sockets) use the pair, for the view.
func (t *Tracker) SetFlows(k Key, n int) {
	if p := t.pairs[k]; p != nil {
		p.flows = n
	}
}

// State returns a pair's state (Unknown for pairs not tracked).
func (t *Tracker) State(k Key) State {
	if p := t.pairs[k]; p != nil {
		return p.state
	}
	return Unknown
}

// RTT returns a pair's smoothed probe RTT; ok is false before the first answer.
func (t *Tracker) RTT(k Key) (time.Duration, bool) {
	if p := t.pairs[k]; p != nil && p.hasRTT {
		return p.srtt, true
	}
	return 0, false
}

// Loss is the share of the recent probes of k (answered or given up: older than give-up)
// that got no answer; ok is false with none.
func (t *Tracker) Loss(k Key, now time.Time, giveUp time.Duration) (float64, bool) {
	p := t.pairs[k]
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

func (t *Tracker) sorted() []*pair {
	out := make([]*pair, 0, len(t.pairs))
	for _, p := range t.pairs {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *pair) int { return a.key.compare(b.key) })
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
}

// Views lists every pair, ordered by peer, local and remote locator.
func (t *Tracker) Views(now time.Time) []View {
	out := []View{}
	for _, p := range t.sorted() {
		v := View{
			Peer: p.key.Peer.String(), Local: p.key.Local.String(), Remote: p.key.Remote.String(),
			State: p.state, TxBytes: p.s.TxBytes, RxBytes: p.s.RxBytes, TxPackets: p.s.TxPackets,
			RxPackets: p.s.RxPackets, Flows: p.flows,
		}
		if r, ok := t.RTT(p.key); ok {
			v.RTTMs = ms(r)
		}
		if l, ok := t.Loss(p.key, now, t.cfg.ProbeInterval); ok {
			v.Loss = &l
		}
		if !p.s.LastRx.IsZero() {
			v.LastProofMsAgo = ms(now.Sub(p.s.LastRx))
		}
		out = append(out, v)
	}
	return out
}

func ms(d time.Duration) *float64 {
	v := float64(d.Microseconds()) / 1000
	return &v
}
