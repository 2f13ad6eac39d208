package binding

import (
	"fmt"
	"net/netip"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/mh"
)

// MNConfig configures a mobile node's home registration.
type MNConfig struct {
	HomeAddress netip.Addr
	HomeAgent   netip.Addr
	// Lifetime requested in each BU; 0 means 420 s. Sent in 4-second units.
	Lifetime time.Duration
	// InitialTimeoutFirstReg, InitialTimeout, MaxTimeout: 0 means the RFC 6275 defaults.
	InitialTimeoutFirstReg time.Duration
	InitialTimeout         time.Duration
	MaxTimeout             time.Duration
	// GiveUp ends an exchange (Done with ErrGaveUp) when a BU sent with MaxTimeout goes
	// unanswered; otherwise the node keeps retransmitting every MaxTimeout (s.11.8 allows it).
	GiveUp bool
	// RefreshFraction of the granted lifetime after which the binding is refreshed, unless
	// the home agent sent a Binding Refresh Advice; 0 means 0.8.
	RefreshFraction float64
	// InitialSeq is the sequence number before the first BU (the first BU carries +1).
	InitialSeq uint16
	// Node names the node in timeline records.
	Node string
}

func (c MNConfig) withDefaults() (MNConfig, error) {
	if !routable(c.HomeAddress) || !routable(c.HomeAgent) {
		return c, fmt.Errorf("binding: mobile node: home address %v and home agent %v must be routable unicast IPv6", c.HomeAddress, c.HomeAgent)
	}
	if c.Lifetime == 0 {
		c.Lifetime = 420 * time.Second
	}
	if c.Lifetime < mh.LifetimeUnit || c.Lifetime > mh.LifetimeDuration(0xffff) {
		return c, fmt.Errorf("binding: mobile node: lifetime %v outside 4 s .. %v", c.Lifetime, mh.LifetimeDuration(0xffff))
	}
	if c.InitialTimeoutFirstReg == 0 {
		c.InitialTimeoutFirstReg = InitialBindackTimeoutFirstReg
	}
	if c.InitialTimeout == 0 {
		c.InitialTimeout = InitialBindackTimeout
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = MaxBindackTimeout
	}
	if c.InitialTimeoutFirstReg < 0 || c.InitialTimeout < 0 || c.MaxTimeout < c.InitialTimeout || c.MaxTimeout < c.InitialTimeoutFirstReg {
		return c, fmt.Errorf("binding: mobile node: timeouts %v/%v/%v must be positive and the maximum the largest",
			c.InitialTimeoutFirstReg, c.InitialTimeout, c.MaxTimeout)
	}
	if c.RefreshFraction == 0 {
		c.RefreshFraction = 0.8
	}
	if c.RefreshFraction <= 0 || c.RefreshFraction >= 1 {
		return c, fmt.Errorf("binding: mobile node: refresh fraction %v outside (0, 1)", c.RefreshFraction)
	}
	return c, nil
}

// MNState is where the home registration stands.
type MNState uint8

const (
	// AtHome: no binding at the home agent.
	AtHome MNState = iota
	// Registering: a BU to the home agent awaits its acknowledgement.
	Registering
	// Registered: the home agent holds the binding.
	Registered
	// Deregistering: back home, the deleting BU awaits its acknowledgement.
	Deregistering
)

func (s MNState) String() string {
	names := [...]string{"at-home", "registering", "registered", "deregistering"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MobileNode is the mobile node's home registration (RFC 6275 s.11.7.1, s.11.5.5, s.11.8).
type MobileNode struct {
	cfg    MNConfig
	emit   emitter
	state  MNState
	bound  bool // the home agent holds a binding (a first registration uses the 1.5 s timeout)
	careOf netip.Addr
	seq    uint16
	// firstSeq is the sequence number of the exchange's first BU: an acknowledgement of any
	// BU of the exchange completes it (a retransmission may overtake a slow BAck).
	firstSeq uint16
	bu       retx
	trigger  time.Time
	granted  time.Duration
	expires  time.Time
	refresh  time.Time
}

// NewMobileNode validates cfg.
func NewMobileNode(cfg MNConfig) (*MobileNode, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &MobileNode{cfg: cfg, emit: emitter{node: cfg.Node}, seq: cfg.InitialSeq}, nil
}

// State returns the registration state and the care-of address registered or being
// registered.
func (n *MobileNode) State() (MNState, netip.Addr) { return n.state, n.careOf }

// Event feeds one input and returns what to do.
func (n *MobileNode) Event(ev Event, now time.Time) []Action {
	switch e := ev.(type) {
	case Moved:
		n.move(e.CareOf, now)
	case ReturnedHome:
		n.home(now)
	case Received:
		if back, ok := e.Msg.(*mh.BindingAck); ok {
			n.ack(e.Packet, back, now)
		}
	case Tick:
		n.tick(now)
	}
	return n.emit.flush(earliest(n.bu.next(), n.refresh))
}

func (n *MobileNode) move(coa netip.Addr, now time.Time) {
	if !routable(coa) || coa == n.cfg.HomeAddress {
		return
	}
	if coa == n.careOf && (n.state == Registered || n.state == Registering) {
		return
	}
	n.careOf = coa
	n.trigger = now
	initial := n.cfg.InitialTimeout
	if !n.bound {
		initial = n.cfg.InitialTimeoutFirstReg
	}
	n.state = Registering
	n.refresh = time.Time{}
	n.bu.start(now, initial)
	n.sendBU(now)
}

func (n *MobileNode) home(now time.Time) {
	if n.state == AtHome || n.state == Deregistering {
		return
	}
	// Deregister even when nothing was acknowledged yet: a late acceptance would leave a
	// binding behind, and the home agent answers the deletion of nothing with success.
	n.state = Deregistering
	n.careOf = n.cfg.HomeAddress
	n.trigger = now
	n.refresh = time.Time{}
	n.bu.start(now, n.cfg.InitialTimeout)
	n.sendBU(now)
}

func (n *MobileNode) sendBU(now time.Time) {
	n.seq++
	if n.bu.attempts == 1 {
		n.firstSeq = n.seq
	}
	bu := &mh.BindingUpdate{Seq: n.seq, Ack: true, Home: true, Lifetime: mh.LifetimeUnits(n.cfg.Lifetime)}
	// Away: CoA -> HA with the Home Address option (s.11.7.1). Returning home: HoA -> HA,
	// lifetime 0, no Home Address option needed since the source is the home address
	// (s.11.5.5).
	env := mh.Envelope{Src: n.careOf, Dst: n.cfg.HomeAgent, HomeAddress: n.cfg.HomeAddress}
	if n.state == Deregistering {
		bu.Lifetime = 0
		env = mh.Envelope{Src: n.cfg.HomeAddress, Dst: n.cfg.HomeAgent}
	}
	pkt, err := mh.AppendMessage(nil, env, bu)
	if err != nil { // addresses were validated; only a programming error gets here
		n.emit.done(Result{Peer: n.cfg.HomeAgent, CareOf: n.careOf, Seq: n.seq, Err: err})
		return
	}
	n.emit.send(env, bu, pkt, false)
	n.emit.record(timeline.Event{Kind: timeline.BUSent, Peer: n.cfg.HomeAgent.String(), Locator: n.careOf.String(),
		Seq: uint32(n.seq), Attempt: n.bu.attempts, Detail: fmt.Sprintf("home registration, lifetime %ds", int(mh.LifetimeDuration(bu.Lifetime).Seconds())),
		Duration: int64(now.Sub(n.bu.first))})
}

func (n *MobileNode) ack(p mh.Packet, back *mh.BindingAck, now time.Time) {
	if !n.bu.active || p.Src != n.cfg.HomeAgent {
		return
	}
	if back.Status == mh.StatusSeqOutOfWindow {
		// s.11.7.3: take the home agent's last accepted number and send a newer BU at once.
		n.seq = back.Seq
		n.bu.attempts++
		n.bu.deadline = now.Add(n.bu.timeout)
		n.sendBU(now)
		n.firstSeq = n.seq
		return
	}
	if !inExchange(back.Seq, n.firstSeq, n.seq) {
		return // s.11.7.3: not for an outstanding BU
	}
	res := Result{Peer: n.cfg.HomeAgent, CareOf: n.careOf, Status: back.Status, Seq: back.Seq, Attempts: n.bu.attempts,
		Elapsed: now.Sub(n.bu.first), Total: now.Sub(n.trigger), Lifetime: mh.LifetimeDuration(back.Lifetime),
		Deregistered: n.state == Deregistering}
	n.bu.active = false
	n.emit.record(timeline.Event{Kind: timeline.BAckReceived, Peer: n.cfg.HomeAgent.String(), Locator: n.careOf.String(),
		Seq: uint32(back.Seq), Attempt: res.Attempts, Detail: "home registration: " + back.Status.String(), Duration: int64(res.Elapsed)})
	switch {
	case !back.Status.Accepted():
		res.Err = fmt.Errorf("%w by the home agent: %v", ErrRejected, back.Status)
		if n.state == Deregistering {
			n.state, n.bound = AtHome, false
		} else if n.bound {
			n.state = Registered // the old binding stands until it expires
			n.scheduleRefresh(now, n.expires.Sub(now), back)
		} else {
			n.state = AtHome
		}
	case n.state == Deregistering:
		n.state, n.bound = AtHome, false
	default:
		n.state, n.bound = Registered, true
		n.granted = res.Lifetime
		n.expires = now.Add(n.granted)
		n.scheduleRefresh(now, n.granted, back)
	}
	n.emit.done(res)
}

func (n *MobileNode) scheduleRefresh(now time.Time, lifetime time.Duration, back *mh.BindingAck) {
	if lifetime <= 0 {
		n.refresh = time.Time{}
		return
	}
	after := time.Duration(float64(lifetime) * n.cfg.RefreshFraction)
	if ra, ok := mh.Find[mh.RefreshAdvice](back.Options); ok && ra.Interval > 0 {
		if d := mh.LifetimeDuration(ra.Interval); d < after {
			after = d
		}
	}
	n.refresh = now.Add(after)
}

func (n *MobileNode) tick(now time.Time) {
	if !n.refresh.IsZero() && !now.Before(n.refresh) && n.state == Registered {
		n.refresh = time.Time{}
		n.trigger = now
		n.state = Registering
		n.bu.start(now, n.cfg.InitialTimeout)
		n.sendBU(now)
		return
	}
	if !n.bu.due(now) {
		return
	}
	if n.cfg.GiveUp && n.bu.timeout >= n.cfg.MaxTimeout {
		res := Result{Peer: n.cfg.HomeAgent, CareOf: n.careOf, Seq: n.seq, Attempts: n.bu.attempts,
			Elapsed: now.Sub(n.bu.first), Total: now.Sub(n.trigger), Deregistered: n.state == Deregistering, Err: ErrGaveUp}
		n.bu.active = false
		if n.state == Deregistering || !n.bound {
			n.state = AtHome
		} else {
			n.state = Registered
		}
		n.emit.done(res)
		return
	}
	n.bu.again(now, n.cfg.MaxTimeout)
	n.sendBU(now)
}
