// Package binding holds the Mobile IPv6 signalling state machines of the lab's baseline (RFC
// 6275): the mobile node's home registration, the home agent's binding cache, the mobile
// node's route optimisation (return routability + correspondent registration) and the
// correspondent node.
//
// Every machine is driven from outside by Event(ev, now) and answers with Actions (send this
// packet, wake me at this time, a procedure finished, a binding appeared or went, a timeline
// record). Machines start no goroutines, read no clock and do no I/O: the lab's daemon owns
// sockets, timers and the eBPF maps, and tests drive the machines with a fake clock.
package binding

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/mh"
)

// RFC 6275 s.12 timing constants.
const (
	// InitialBindackTimeoutFirstReg is the first retransmission timeout of a home
	// registration when the home agent holds no binding for the mobile node yet (s.11.8,
	// s.13: default 1.5 s).
	InitialBindackTimeoutFirstReg = 1500 * time.Millisecond
	// InitialBindackTimeout is the first retransmission timeout of every other BU, and of
	// HoTI/CoTI.
	InitialBindackTimeout = 1 * time.Second
	// MaxBindackTimeout caps the exponential backoff.
	MaxBindackTimeout = 32 * time.Second
)

// Event is an input to a machine: Received, Tick, Moved, ReturnedHome.
type Event interface{ isEvent() }

// Received is a Mobility Header message that arrived (after any tunnel was removed).
type Received struct {
	// Packet is the IPv6 envelope; Packet.Payload holds the raw Mobility Header, needed to
	// verify Binding Authorization Data.
	Packet mh.Packet
	Msg    mh.Message
}

// Tick says the machine's timer fired (or the caller simply polls).
type Tick struct{}

// Moved says the mobile node has a new care-of address (movement detection decided it is away
// from home, s.11.5).
type Moved struct{ CareOf netip.Addr }

// ReturnedHome says the mobile node is back on its home link (s.11.5.5).
type ReturnedHome struct{}

// Defended says a Neighbor Advertisement for Addr arrived on the home link (home agent: the
// answer to its DAD probe, s.10.3.1).
type Defended struct{ Addr netip.Addr }

func (Received) isEvent()     {}
func (Tick) isEvent()         {}
func (Moved) isEvent()        {}
func (ReturnedHome) isEvent() {}
func (Defended) isEvent()     {}

// Parse turns a received IPv6 packet carrying a Mobility Header into a Received event,
// verifying the header's checksum.
func Parse(packet []byte) (Received, error) {
	p, m, err := mh.ParseMessage(packet)
	if err != nil {
		return Received{}, fmt.Errorf("binding: %w", err)
	}
	return Received{Packet: p, Msg: m}, nil
}

// ActionKind says what the caller must do.
type ActionKind uint8

const (
	// Send: transmit Action.Packet (a whole IPv6 packet). ViaTunnel asks the mobile node to
	// send it through the reverse tunnel to its home agent (RFC 2473), as a HoTI must go.
	Send ActionKind = iota + 1
	// Timer: call Event(Tick{}, t) once t >= At. It replaces the previous timer; a zero At
	// cancels it.
	Timer
	// Done: a registration finished (accepted, rejected or given up); see Result.
	Done
	// Bind: a home agent or correspondent created or updated a binding (set up the tunnel /
	// proxy ND, or the type 2 routing header path); see Binding.
	Bind
	// Unbind: a binding was deleted or expired.
	Unbind
	// Record: write Event to the timeline (the caller stamps MonoNS).
	Record
	// Probe: start Duplicate Address Detection for Binding.HomeAddress on the home link (a
	// Neighbor Solicitation from :: to its solicited-node group, RFC 4862 s.5.4.2) and feed
	// any Neighbor Advertisement for it back as Defended.
	Probe
)

func (k ActionKind) String() string {
	switch k {
	case Send:
		return "send"
	case Timer:
		return "timer"
	case Done:
		return "done"
	case Bind:
		return "bind"
	case Unbind:
		return "unbind"
	case Record:
		return "record"
	case Probe:
		return "probe"
	}
	return fmt.Sprintf("action(%d)", uint8(k))
}

// Action is one instruction to the caller.
type Action struct {
	Kind ActionKind
	// Send.
	Packet    []byte
	Env       mh.Envelope
	Msg       mh.Message
	ViaTunnel bool
	// Timer.
	At time.Time
	// Done.
	Result Result
	// Bind, Unbind.
	Binding Entry
	// Record.
	Event timeline.Event
}

// Result is the outcome of one registration (home or correspondent).
type Result struct {
	Peer   netip.Addr
	CareOf netip.Addr
	Status mh.Status
	Seq    uint16
	// Attempts is the number of BUs sent in this exchange.
	Attempts int
	// Elapsed runs from the exchange's first BU to this outcome: the registration part of the
	// handoff delay.
	Elapsed time.Duration
	// Total runs from the trigger (movement, or the route optimisation start) to this
	// outcome; it includes return routability for a correspondent registration.
	Total time.Duration
	// Lifetime granted.
	Lifetime     time.Duration
	Deregistered bool
	// Err is nil when the binding was accepted (or deleted, for a deregistration).
	Err error
}

// Errors in Result.Err.
var (
	ErrRejected = errors.New("binding rejected")
	ErrGaveUp   = errors.New("no binding acknowledgement before the maximum timeout")
)

// Entry is a binding cache entry.
type Entry struct {
	HomeAddress netip.Addr
	CareOf      netip.Addr
	Seq         uint16
	Lifetime    time.Duration
	Expires     time.Time
	// New is true when the entry did not exist before (Bind only).
	New bool
}

// SeqNewer reports whether a is newer than b in the modulo-2^16 sequence space (RFC 6275
// s.9.5.1: compare within a window of half the space).
func SeqNewer(a, b uint16) bool { return a != b && a-b < 0x8000 }

// inExchange reports whether seq lies in first..last, modulo 2^16.
func inExchange(seq, first, last uint16) bool { return seq-first <= last-first }

// emitter collects actions, holds back those postponed by a processing delay, and announces
// timer changes.
type emitter struct {
	node      string
	out       []Action
	announced time.Time
	pending   []deferred
}

// deferred holds actions postponed by a processing delay.
type deferred struct {
	at      time.Time
	actions []Action
}

// after emits actions now, or once delay has passed (the caller's timer must include
// nextRelease).
func (e *emitter) after(now time.Time, delay time.Duration, actions []Action) {
	if delay <= 0 {
		e.out = append(e.out, actions...)
		return
	}
	e.pending = append(e.pending, deferred{at: now.Add(delay), actions: actions})
}

// release emits the postponed actions that are due, in the order they were postponed.
func (e *emitter) release(now time.Time) {
	keep := e.pending[:0]
	for _, d := range e.pending {
		if now.Before(d.at) {
			keep = append(keep, d)
			continue
		}
		e.out = append(e.out, d.actions...)
	}
	e.pending = keep
}

func (e *emitter) nextRelease() time.Time {
	var next time.Time
	for _, d := range e.pending {
		next = earliest(next, d.at)
	}
	return next
}

func (e *emitter) send(env mh.Envelope, m mh.Message, packet []byte, viaTunnel bool) {
	e.out = append(e.out, Action{Kind: Send, Packet: packet, Env: env, Msg: m, ViaTunnel: viaTunnel})
}

func (e *emitter) record(ev timeline.Event) {
	ev.Node = e.node
	e.out = append(e.out, Action{Kind: Record, Event: ev})
}

func (e *emitter) done(r Result) { e.out = append(e.out, Action{Kind: Done, Result: r}) }

// flush returns the collected actions, with a Timer action when the next deadline changed.
func (e *emitter) flush(next time.Time) []Action {
	if !next.Equal(e.announced) {
		e.out = append(e.out, Action{Kind: Timer, At: next})
		e.announced = next
	}
	out := e.out
	e.out = nil
	return out
}

// retx is one message awaiting an answer, retransmitted with exponential backoff (s.11.8).
type retx struct {
	active   bool
	first    time.Time
	deadline time.Time
	timeout  time.Duration
	attempts int
}

func (r *retx) start(now time.Time, initial time.Duration) {
	*r = retx{active: true, first: now, deadline: now.Add(initial), timeout: initial, attempts: 1}
}

func (r *retx) due(now time.Time) bool { return r.active && !now.Before(r.deadline) }

// again records a retransmission at now: the timeout doubles up to max.
func (r *retx) again(now time.Time, max time.Duration) {
	r.timeout *= 2
	if r.timeout > max {
		r.timeout = max
	}
	r.attempts++
	r.deadline = now.Add(r.timeout)
}

// earliest returns the earliest non-zero time.
func earliest(ts ...time.Time) time.Time {
	var min time.Time
	for _, t := range ts {
		if !t.IsZero() && (min.IsZero() || t.Before(min)) {
			min = t
		}
	}
	return min
}

func (r *retx) next() time.Time {
	if !r.active {
		return time.Time{}
	}
	return r.deadline
}

func routable(a netip.Addr) bool {
	return a.Is6() && !a.Is4In6() && !a.IsUnspecified() && !a.IsLoopback() && !a.IsMulticast() &&
		!a.IsLinkLocalUnicast()
}

// BindingErrorFor answers a received packet whose Mobility Header has an unknown MH Type with
// a Binding Error, status 2, to its source (RFC 6275 s.9.2); the Home Address field carries
// the Home Address option's address, or :: without one. ok is false for any other packet.
// Rate limiting is the caller's business.
func BindingErrorFor(packet []byte, self netip.Addr) (Action, bool) {
	p, err := mh.ParsePacket(packet)
	if err != nil || p.Proto != mh.Proto {
		return Action{}, false
	}
	if _, err := mh.Parse(p.Payload, p.PseudoSrc(), p.PseudoDst()); !errors.Is(err, mh.ErrUnknownType) {
		return Action{}, false
	}
	home := netip.IPv6Unspecified()
	if p.HomeAddress.IsValid() {
		home = p.HomeAddress
	}
	be := &mh.BindingError{Status: mh.ErrorStatusUnknownMHType, HomeAddress: home}
	env := mh.Envelope{Src: self, Dst: p.Src}
	pkt, err := mh.AppendMessage(nil, env, be)
	if err != nil {
		return Action{}, false
	}
	return Action{Kind: Send, Packet: pkt, Env: env, Msg: be}, true
}
