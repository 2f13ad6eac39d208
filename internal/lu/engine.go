// Package lu is the Locator Update engine (RFC 6743): for each correspondent it keeps the one
// outstanding LU advertisement, says when to (re)transmit it and when to give up, and matches
// LU-ACKs against it. It is a deterministic state machine driven by the caller's clock: it does
// no I/O and starts no goroutines. The daemon sends what Transmit actions say, arms one timer
// at NextDeadline and calls Tick when it fires.
//
// Timeouts adapt to the round-trip time measured per correspondent as in RFC 6298 (SRTT,
// RTTVAR, RTO = SRTT + max(G, 4*RTTVAR)), back off exponentially, and are sampled only from
// exchanges answered after a single transmission (Karn's rule).
package lu

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"ilnp/internal/wire"
)

// Message is one LU advertisement for one correspondent.
type Message struct {
	// Peer is the correspondent's NID: the engine keeps one outstanding LU per Peer.
	Peer wire.NID
	// Source is the local I-LV the LU leaves from (the new active locator).
	Source wire.ILV
	// IfIndex is the interface of Source's locator (0: let the routing table decide).
	IfIndex int
	// Dest is the correspondent's active I-LV.
	Dest wire.ILV
	// Nonce is the session's local nonce, carried in the LU's Nonce option (RFC 6744).
	Nonce wire.Nonce
	// Update is the body; Op must be OpAdvertisement and it lists at least one locator.
	Update wire.LocatorUpdate
}

// ActionKind says what the caller must do.
type ActionKind uint8

const (
	// Transmit: send Message now.
	Transmit ActionKind = iota + 1
	// GiveUp: the last transmission timed out; the correspondent did not acknowledge.
	GiveUp
)

func (k ActionKind) String() string {
	switch k {
	case Transmit:
		return "transmit"
	case GiveUp:
		return "give_up"
	}
	return fmt.Sprintf("action(%d)", uint8(k))
}

// Action is one instruction to the caller, with what the event timeline needs.
type Action struct {
	Kind    ActionKind
	Message Message
	// Exchange identifies one Send (all its transmissions share it).
	Exchange uint64
	// Attempt is the transmission number (1 = first) for Transmit, and the number of
	// transmissions made for GiveUp.
	Attempt int
	// Timeout is how long the engine waits for the ACK after this transmission.
	Timeout time.Duration
	// Elapsed is the time since the exchange's first transmission.
	Elapsed time.Duration
	// Redirected marks a transmission Redirect made: it was sent because the correspondent's
	// new locator became known, not because a timeout passed.
	Redirected bool
}

// Outcome classifies an LU-ACK.
type Outcome uint8

const (
	// Unknown: no LU with this body was sent to this correspondent recently (or the message
	// is not an acknowledgement). Ignore it.
	Unknown Outcome = iota
	// Acked: it matches the outstanding LU; the exchange is complete.
	Acked
	// Duplicate: it matches an exchange that was already acknowledged.
	Duplicate
	// Superseded: it matches an LU that a newer one replaced before it was acknowledged.
	Superseded
	// Late: it matches an exchange the engine had given up on.
	Late
)

func (o Outcome) String() string {
	switch o {
	case Unknown:
		return "unknown"
	case Acked:
		return "acked"
	case Duplicate:
		return "duplicate"
	case Superseded:
		return "superseded"
	case Late:
		return "late"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Result describes what an LU-ACK meant.
type Result struct {
	Outcome  Outcome
	Peer     wire.NID
	Exchange uint64
	// Attempts is the number of transmissions the matched exchange had made.
	Attempts int
	// Elapsed is first transmission -> this ACK: the signalling part of the handoff delay.
	Elapsed time.Duration
	// RTT is the sample taken from this ACK; RTTSampled is false when the exchange was
	// ambiguous (retransmitted, or the same body sent in an earlier exchange: Karn's rule).
	RTT        time.Duration
	RTTSampled bool
	// SRTT and RTO are the correspondent's estimator after this ACK.
	SRTT time.Duration
	RTO  time.Duration
}

// Errors returned by Send.
var (
	ErrNotAdvertisement = errors.New("LU operation is not an advertisement")
	ErrNoLocators       = errors.New("LU lists no locator")
	ErrTooManyLocators  = errors.New("LU lists more than 255 locators")
)

// historyLen bounds the finished exchanges remembered per correspondent to classify late ACKs.
const historyLen = 8

type exchange struct {
	id        uint64
	msg       Message
	attempts  int
	first     time.Time
	deadline  time.Time
	timeout   time.Duration
	ambiguous bool
}

type record struct {
	id       uint64
	msg      Message
	outcome  Outcome // Acked, Superseded or Late (given up)
	attempts int
	first    time.Time
	repaired bool
}

type peerState struct {
	srtt, rttvar time.Duration
	sampled      bool
	out          *exchange
	history      []record // oldest first
}

// Stats counts what the engine did since it was created.
type Stats struct {
	Sent            uint64 `json:"sent"`
	Retransmitted   uint64 `json:"retransmitted"`
	Acked           uint64 `json:"acked"`
	GaveUp          uint64 `json:"gave_up"`
	Superseded      uint64 `json:"superseded"`
	DuplicateAcks   uint64 `json:"duplicate_acks"`
	SupersededAcks  uint64 `json:"superseded_acks"`
	LateAcks        uint64 `json:"late_acks"`
	UnknownAcks     uint64 `json:"unknown_acks"`
	Repairs         uint64 `json:"repairs"`
	Redirected      uint64 `json:"redirected"`
	RTTSamples      uint64 `json:"rtt_samples"`
	KarnSkipped     uint64 `json:"karn_skipped"`
	OutstandingPeak int    `json:"outstanding_peak"`
}

// Engine holds the LU state of every correspondent. It is not safe for concurrent use: the
// daemon drives it from one goroutine.
type Engine struct {
	cfg   Config
	peers map[wire.NID]*peerState
	next  uint64
	nOut  int // outstanding exchanges
	stats Stats
	// deadlines holds every deadline an exchange was given, earliest first; an entry whose
	// exchange has since ended or moved its deadline is dropped when it comes to the top.
	// NextDeadline, which the daemon asks after every event, was a pass over every peer:
	// O(sessions) per event at a correspondent of 100,000 (issue 28).
	deadlines deadlineHeap
	// popped counts the deadline entries Tick took off the queue (tests: the work a call does).
	popped int
}

// New returns an engine; zero fields of cfg take their defaults and the result is validated.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg, peers: make(map[wire.NID]*peerState)}, nil
}

// Config returns the engine's effective configuration.
func (e *Engine) Config() Config { return e.cfg }

// SetConfig replaces the configuration (zero fields take their defaults) if it is valid.
// Exchanges in flight keep their current timer; their next timeout and the attempt limit
// follow the new values.
func (e *Engine) SetConfig(cfg Config) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	e.cfg = cfg
	return nil
}

// Stats returns the counters.
func (e *Engine) Stats() Stats { return e.stats }

func (e *Engine) peer(nid wire.NID) *peerState {
	p := e.peers[nid]
	if p == nil {
		p = &peerState{}
		e.peers[nid] = p
	}
	return p
}

// Send starts an exchange for msg, superseding the correspondent's outstanding LU if any: the
// latest locator set wins. Sending exactly the outstanding message again is a no-op, so the
// caller may repeat itself. The returned action is the first transmission.
func (e *Engine) Send(msg Message, now time.Time) ([]Action, error) {
	if msg.Update.Op != wire.OpAdvertisement {
		return nil, fmt.Errorf("LU to %v: %w (op %d)", msg.Peer, ErrNotAdvertisement, msg.Update.Op)
	}
	if len(msg.Update.Locators) == 0 {
		return nil, fmt.Errorf("LU to %v: %w", msg.Peer, ErrNoLocators)
	}
	if len(msg.Update.Locators) > math.MaxUint8 {
		return nil, fmt.Errorf("LU to %v: %w (%d)", msg.Peer, ErrTooManyLocators, len(msg.Update.Locators))
	}
	msg.Update.Locators = slices.Clone(msg.Update.Locators)
	p := e.peer(msg.Peer)
	if p.out != nil {
		if sameMessage(p.out.msg, msg) {
			return nil, nil
		}
		e.finish(p, Superseded)
		e.stats.Superseded++
	}
	return []Action{e.start(p, msg, now)}, nil
}

func (e *Engine) start(p *peerState, msg Message, now time.Time) Action {
	e.next++
	ambiguous := false
	for _, r := range p.history {
		if sameBody(r.msg.Update.Locators, msg.Update.Locators) {
			ambiguous = true
		}
	}
	timeout := e.timeout(p, 1)
	p.out = &exchange{
		id: e.next, msg: msg, attempts: 1, first: now,
		deadline: now.Add(timeout), timeout: timeout, ambiguous: ambiguous,
	}
	e.armed(msg.Peer, p.out)
	e.stats.Sent++
	e.nOut++
	e.stats.OutstandingPeak = max(e.stats.OutstandingPeak, e.nOut)
	return Action{Kind: Transmit, Message: msg, Exchange: p.out.id, Attempt: 1, Timeout: timeout}
}

// finish moves the outstanding exchange to the history with the given outcome.
func (e *Engine) finish(p *peerState, outcome Outcome) {
	x := p.out
	p.out = nil
	e.nOut--
	p.history = append(p.history, record{
		id: x.id, msg: x.msg, outcome: outcome, attempts: x.attempts, first: x.first,
	})
	if len(p.history) > historyLen {
		p.history = slices.Delete(p.history, 0, len(p.history)-historyLen)
	}
}

// Ack matches an LU-ACK received from peer. An ACK for the outstanding LU completes it (and
// gives an RTT sample when unambiguous); others are classified and otherwise ignored, except
// one case: an ACK for a superseded LU arriving after the newer LU was acknowledged means the
// correspondent may have applied the older set last (reordering), so the latest set is sent
// again and the returned actions carry that transmission.
func (e *Engine) Ack(peer wire.NID, ack wire.LocatorUpdate, now time.Time) (Result, []Action) {
	res := Result{Peer: peer}
	p := e.peers[peer]
	if ack.Op != wire.OpAcknowledgement || p == nil {
		e.stats.UnknownAcks++
		return res, nil
	}
	res.SRTT, res.RTO = p.srtt, e.timeout(p, 1)
	if x := p.out; x != nil && sameBody(x.msg.Update.Locators, ack.Locators) {
		res.Outcome, res.Exchange, res.Attempts, res.Elapsed = Acked, x.id, x.attempts, now.Sub(x.first)
		if x.attempts == 1 && !x.ambiguous && res.Elapsed >= 0 {
			e.sample(p, res.Elapsed)
			res.RTT, res.RTTSampled = res.Elapsed, true
			e.stats.RTTSamples++
		} else {
			e.stats.KarnSkipped++
		}
		res.SRTT, res.RTO = p.srtt, e.timeout(p, 1)
		e.finish(p, Acked)
		e.stats.Acked++
		return res, nil
	}
	for i := len(p.history) - 1; i >= 0; i-- {
		r := &p.history[i]
		if !sameBody(r.msg.Update.Locators, ack.Locators) {
			continue
		}
		res.Exchange, res.Attempts, res.Elapsed = r.id, r.attempts, now.Sub(r.first)
		switch r.outcome {
		case Acked:
			res.Outcome = Duplicate
			e.stats.DuplicateAcks++
		case Late:
			res.Outcome = Late
			e.stats.LateAcks++
			// The correspondent holds this set after all; later copies are duplicates.
			r.outcome = Acked
		case Superseded:
			res.Outcome = Superseded
			e.stats.SupersededAcks++
			last := p.history[len(p.history)-1]
			if p.out == nil && !r.repaired && last.outcome == Acked &&
				!sameBody(last.msg.Update.Locators, r.msg.Update.Locators) {
				r.repaired = true
				e.stats.Repairs++
				return res, []Action{e.start(p, last.msg, now)}
			}
		}
		return res, nil
	}
	e.stats.UnknownAcks++
	return res, nil
}

// Tick retransmits every LU whose timeout has passed and gives up those that have used all
// their attempts. Actions are ordered by deadline, then peer, so runs are reproducible.
func (e *Engine) Tick(now time.Time) []Action {
	// The due exchanges come off the deadline queue: a pass over every peer was O(sessions)
	// per timer at a correspondent that has exchanged LUs with 100,000 (issue 28).
	var due []wire.NID
	for len(e.deadlines) > 0 && !now.Before(e.deadlines[0].at) {
		top := heap.Pop(&e.deadlines).(deadlineEntry)
		e.popped++
		if p := e.peers[top.peer]; p != nil && p.out != nil && p.out.id == top.id && p.out.deadline.Equal(top.at) {
			due = append(due, top.peer)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		a, b := e.peers[due[i]].out.deadline, e.peers[due[j]].out.deadline
		if !a.Equal(b) {
			return a.Before(b)
		}
		return due[i] < due[j]
	})
	// An exchange armed twice with the same deadline has two entries.
	due = slices.Compact(due)
	var actions []Action
	for _, nid := range due {
		p := e.peers[nid]
		x := p.out
		if x.attempts >= e.cfg.MaxAttempts {
			actions = append(actions, Action{
				Kind: GiveUp, Message: x.msg, Exchange: x.id, Attempt: x.attempts, Elapsed: now.Sub(x.first),
			})
			e.finish(p, Late)
			e.stats.GaveUp++
			continue
		}
		x.attempts++
		x.timeout = e.timeout(p, x.attempts)
		x.deadline = now.Add(x.timeout)
		e.armed(nid, x)
		e.stats.Retransmitted++
		actions = append(actions, Action{
			Kind: Transmit, Message: x.msg, Exchange: x.id, Attempt: x.attempts,
			Timeout: x.timeout, Elapsed: now.Sub(x.first),
		})
	}
	return actions
}

// NextDeadline is the earliest time Tick has something to do; ok is false when no LU is
// outstanding.
func (e *Engine) NextDeadline() (deadline time.Time, ok bool) {
	for len(e.deadlines) > 0 {
		top := e.deadlines[0]
		if p := e.peers[top.peer]; p != nil && p.out != nil && p.out.id == top.id && p.out.deadline.Equal(top.at) {
			return top.at, true
		}
		heap.Pop(&e.deadlines)
	}
	return time.Time{}, false
}

// armed records exchange x's (new) deadline.
func (e *Engine) armed(peer wire.NID, x *exchange) {
	heap.Push(&e.deadlines, deadlineEntry{at: x.deadline, peer: peer, id: x.id})
}

type deadlineEntry struct {
	at   time.Time
	peer wire.NID
	id   uint64
}

// deadlineHeap is a container/heap of deadlines, earliest first.
type deadlineHeap []deadlineEntry

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(deadlineEntry)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Redirect points the correspondent's outstanding LU at a new destination: the
// correspondent moved (its own LU, or the rendezvous, changed its active locator) while our
// LU was unanswered. Every earlier copy went to the old locator, which may be gone (the
// double jump in hard handoff), so waiting for the next timeout would add up to a whole
// back-off period to the handoff: the LU is retransmitted now, to dest, as the exchange's
// next attempt, and waits the correspondent's base timeout (the back-off measured the old
// path, not this one). The exchange no longer gives an RTT sample, as its copies took
// different paths. When the exchange has used all its attempts it is only re-pointed (it
// gives up at its deadline), so redirects never exceed MaxAttempts transmissions. Nothing
// happens without an outstanding LU or when dest is already its destination.
func (e *Engine) Redirect(peer wire.NID, dest wire.ILV, now time.Time) []Action {
	p := e.peers[peer]
	if p == nil || p.out == nil || p.out.msg.Dest == dest {
		return nil
	}
	x := p.out
	x.msg.Dest = dest
	x.ambiguous = true
	if x.attempts >= e.cfg.MaxAttempts {
		return nil
	}
	x.attempts++
	x.timeout = e.timeout(p, 1)
	x.deadline = now.Add(x.timeout)
	e.armed(peer, x)
	e.stats.Retransmitted++
	e.stats.Redirected++
	return []Action{{
		Kind: Transmit, Message: x.msg, Exchange: x.id, Attempt: x.attempts,
		Timeout: x.timeout, Elapsed: now.Sub(x.first), Redirected: true,
	}}
}

// Resend transmits the outstanding LU again now because the path under it changed (its
// locator pair went over to ILNPv6 in UDP/IPv6, internal/pathprobe): the copies sent so far
// were lost to the path, so waiting out their back-off would only add to the interruption. It
// counts as an attempt, restarts from the base timeout, and gives no RTT sample (as
// Redirect). Nothing happens without an outstanding LU or once all attempts are used.
func (e *Engine) Resend(peer wire.NID, now time.Time) []Action {
	p := e.peers[peer]
	if p == nil || p.out == nil || p.out.attempts >= e.cfg.MaxAttempts {
		return nil
	}
	x := p.out
	x.ambiguous = true
	x.attempts++
	x.timeout = e.timeout(p, 1)
	x.deadline = now.Add(x.timeout)
	e.armed(peer, x)
	e.stats.Retransmitted++
	return []Action{{
		Kind: Transmit, Message: x.msg, Exchange: x.id, Attempt: x.attempts,
		Timeout: x.timeout, Elapsed: now.Sub(x.first),
	}}
}

// Cancel drops the correspondent's outstanding LU (e.g. its session ended) but keeps its RTT
// estimate. It reports whether there was one.
func (e *Engine) Cancel(peer wire.NID) bool {
	p := e.peers[peer]
	if p == nil || p.out == nil {
		return false
	}
	e.finish(p, Superseded)
	return true
}

// Forget drops everything known about the correspondent, RTT estimate included.
func (e *Engine) Forget(peer wire.NID) {
	if p := e.peers[peer]; p != nil && p.out != nil {
		e.nOut--
	}
	delete(e.peers, peer)
}

// Unanswered reports whether the correspondent may not hold the last locator set it was
// sent: an LU is outstanding, or the last exchange ended unacknowledged (given up, or
// cancelled). A correspondent this engine never sent an LU is not unanswered.
func (e *Engine) Unanswered(peer wire.NID) bool {
	p := e.peers[peer]
	if p == nil {
		return false
	}
	if p.out != nil {
		return true
	}
	return len(p.history) > 0 && p.history[len(p.history)-1].outcome != Acked
}

// Outstanding reports the correspondent's outstanding LU, if any.
func (e *Engine) Outstanding(peer wire.NID) (Pending, bool) {
	p := e.peers[peer]
	if p == nil || p.out == nil {
		return Pending{}, false
	}
	return e.pending(peer, p), true
}

// Pending is a view of one outstanding LU.
type Pending struct {
	Peer     wire.NID
	Exchange uint64
	Message  Message
	Attempts int
	First    time.Time
	Deadline time.Time
}

func (e *Engine) pending(nid wire.NID, p *peerState) Pending {
	x := p.out
	return Pending{Peer: nid, Exchange: x.id, Message: x.msg, Attempts: x.attempts, First: x.first, Deadline: x.deadline}
}

// PeerView is the JSON-friendly state of one correspondent for `ilnpctl show`.
type PeerView struct {
	Peer        string  `json:"peer_nid"`
	SRTTMillis  float64 `json:"srtt_ms"`
	RTTVarMs    float64 `json:"rttvar_ms"`
	RTTSampled  bool    `json:"rtt_sampled"`
	RTOMillis   float64 `json:"rto_ms"`
	Outstanding bool    `json:"outstanding"`
	Attempts    int     `json:"attempts,omitempty"`
	Locators    int     `json:"locators,omitempty"`
}

// Snapshot lists every correspondent the engine knows, ordered by NID.
func (e *Engine) Snapshot() []PeerView {
	nids := make([]wire.NID, 0, len(e.peers))
	for nid := range e.peers {
		nids = append(nids, nid)
	}
	slices.Sort(nids)
	views := make([]PeerView, 0, len(nids))
	for _, nid := range nids {
		p := e.peers[nid]
		v := PeerView{
			Peer: nid.String(), SRTTMillis: millis(p.srtt), RTTVarMs: millis(p.rttvar),
			RTTSampled: p.sampled, RTOMillis: millis(e.timeout(p, 1)),
		}
		if p.out != nil {
			v.Outstanding, v.Attempts, v.Locators = true, p.out.attempts, len(p.out.msg.Update.Locators)
		}
		views = append(views, v)
	}
	return views
}

// EachSRTT calls fn with every correspondent's smoothed RTT (PeerView's SRTTMillis), in no
// order: what `ilnpctl show sessions` needs of Snapshot without a view per peer.
func (e *Engine) EachSRTT(fn func(nid wire.NID, srttMillis float64)) {
	for nid, p := range e.peers {
		fn(nid, millis(p.srtt))
	}
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sample folds one RTT measurement into the estimator (RFC 6298 s.2.2, 2.3; alpha 1/8, beta 1/4).
func (e *Engine) sample(p *peerState, r time.Duration) {
	if !p.sampled {
		p.srtt, p.rttvar, p.sampled = r, r/2, true
		return
	}
	diff := p.srtt - r
	if diff < 0 {
		diff = -diff
	}
	p.rttvar = (3*p.rttvar + diff) / 4
	p.srtt = (7*p.srtt + r) / 8
}

// timeout is the wait after the attempt-th transmission: the RTO backed off attempt-1 times,
// clamped to [MinTimeout, MaxTimeout].
func (e *Engine) timeout(p *peerState, attempt int) time.Duration {
	rto := e.cfg.InitialTimeout
	if p.sampled {
		rto = p.srtt + max(e.cfg.ClockGranularity, 4*p.rttvar)
	}
	t := float64(rto) * math.Pow(e.cfg.Backoff, float64(attempt-1))
	if t > float64(e.cfg.MaxTimeout) {
		return e.cfg.MaxTimeout
	}
	return max(time.Duration(t), e.cfg.MinTimeout)
}

func sameBody(a, b []wire.LocatorEntry) bool { return slices.Equal(a, b) }

func sameMessage(a, b Message) bool {
	return a.Peer == b.Peer && a.Source == b.Source && a.IfIndex == b.IfIndex && a.Dest == b.Dest &&
		a.Nonce == b.Nonce && a.Update.Op == b.Update.Op && sameBody(a.Update.Locators, b.Update.Locators)
}
