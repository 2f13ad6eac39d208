package binding

import (
	"fmt"
	"io"
	"net/netip"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/mh"
	"ilnp/lab/mipv6/rr"
)

// ROConfig configures a mobile node's route optimisation with one correspondent.
type ROConfig struct {
	HomeAddress   netip.Addr
	Correspondent netip.Addr
	// Lifetime requested; 0 or more than MAX_RR_BINDING_LIFETIME means 420 s.
	Lifetime time.Duration
	// InitialTimeout and MaxTimeout for HoTI, CoTI and BU: 0 means 1 s and 32 s.
	InitialTimeout time.Duration
	MaxTimeout     time.Duration
	// GiveUp ends the procedure (Done with ErrGaveUp) when a message sent with MaxTimeout
	// goes unanswered.
	GiveUp bool
	// RefreshFraction of the granted lifetime after which the binding is renewed; 0 means 0.8.
	RefreshFraction float64
	// Rand supplies the init cookies.
	Rand       io.Reader
	InitialSeq uint16
	Node       string
	// FreshHomeTest runs the home test again at every move away instead of reusing a home
	// keygen token younger than MAX_TOKEN_LIFETIME (RFC 6275 s.5.2.7 allows both): every
	// handoff then carries the eight messages of the thesis's Fig. 6.3 and eq. 18.
	FreshHomeTest bool
}

// ROState is where route optimisation stands.
type ROState uint8

const (
	// ROIdle: no binding at the correspondent and nothing in progress.
	ROIdle ROState = iota
	// ROTesting: return routability or the BU is in progress.
	ROTesting
	// ROBound: the correspondent holds the binding; it sends straight to the care-of address.
	ROBound
)

func (s ROState) String() string {
	names := [...]string{"idle", "testing", "bound"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// test is one HoTI/HoT or CoTI/CoT exchange and its result.
type test struct {
	retx
	cookie   mh.Cookie
	have     bool
	token    mh.Token
	index    uint16
	received time.Time
}

func (t *test) fresh(now time.Time) bool {
	return t.have && now.Sub(t.received) < rr.MaxTokenLifetime
}

// RouteOptimizer runs return routability and the correspondent registration for one
// correspondent (RFC 6275 s.5.2, s.11.6, s.11.7.2).
type RouteOptimizer struct {
	cfg      ROConfig
	emit     emitter
	state    ROState
	atHome   bool
	careOf   netip.Addr // care-of address to register; the home address to deregister
	home     test
	coTest   test
	bu       retx
	seq      uint16
	firstSeq uint16
	kbm      rr.Key
	dereg    bool
	trigger  time.Time
	refresh  time.Time
	granted  time.Duration
}

// NewRouteOptimizer validates cfg.
func NewRouteOptimizer(cfg ROConfig) (*RouteOptimizer, error) {
	if !routable(cfg.HomeAddress) || !routable(cfg.Correspondent) || cfg.Rand == nil {
		return nil, fmt.Errorf("binding: route optimisation: home address %v and correspondent %v must be routable IPv6, and a random source is needed",
			cfg.HomeAddress, cfg.Correspondent)
	}
	if cfg.Lifetime <= 0 || cfg.Lifetime > rr.MaxRRBindingLifetime {
		cfg.Lifetime = rr.MaxRRBindingLifetime
	}
	if cfg.InitialTimeout == 0 {
		cfg.InitialTimeout = InitialBindackTimeout
	}
	if cfg.MaxTimeout == 0 {
		cfg.MaxTimeout = MaxBindackTimeout
	}
	if cfg.InitialTimeout < 0 || cfg.MaxTimeout < cfg.InitialTimeout {
		return nil, fmt.Errorf("binding: route optimisation: timeouts %v/%v", cfg.InitialTimeout, cfg.MaxTimeout)
	}
	if cfg.RefreshFraction == 0 {
		cfg.RefreshFraction = 0.8
	}
	if cfg.RefreshFraction <= 0 || cfg.RefreshFraction >= 1 {
		return nil, fmt.Errorf("binding: route optimisation: refresh fraction %v outside (0, 1)", cfg.RefreshFraction)
	}
	return &RouteOptimizer{cfg: cfg, emit: emitter{node: cfg.Node}, seq: cfg.InitialSeq, atHome: true}, nil
}

// State returns the state and the care-of address registered or being registered.
func (o *RouteOptimizer) State() (ROState, netip.Addr) { return o.state, o.careOf }

// Event feeds one input. Moved starts (or restarts) route optimisation from the new care-of
// address; the lab sends it once the home registration is done, as UMIP does.
func (o *RouteOptimizer) Event(ev Event, now time.Time) []Action {
	switch e := ev.(type) {
	case Moved:
		o.move(e.CareOf, now)
	case ReturnedHome:
		o.returnHome(now)
	case Received:
		o.receive(e, now)
	case Tick:
		o.tick(now)
	}
	return o.emit.flush(earliest(o.home.next(), o.coTest.next(), o.bu.next(), o.refresh))
}

func (o *RouteOptimizer) move(coa netip.Addr, now time.Time) {
	if !routable(coa) || coa == o.cfg.HomeAddress || (coa == o.careOf && !o.atHome && o.state != ROIdle) {
		return
	}
	o.atHome, o.dereg = false, false
	o.careOf = coa
	o.trigger = now
	o.state = ROTesting
	o.bu.active = false
	o.refresh = time.Time{}
	o.coTest = test{}
	if !o.startTest(&o.coTest, now) {
		return
	}
	if o.cfg.FreshHomeTest && !o.home.active {
		o.home = test{}
	}
	if !o.home.fresh(now) && !o.home.active {
		o.startTest(&o.home, now)
	}
	o.maybeBU(now)
}

func (o *RouteOptimizer) returnHome(now time.Time) {
	if o.atHome {
		return
	}
	o.atHome = true
	o.coTest = test{}
	o.refresh = time.Time{}
	o.bu.active = false
	if o.state == ROIdle {
		return
	}
	// s.11.6.1: deleting the binding needs only the home keygen token.
	o.dereg = true
	o.careOf = o.cfg.HomeAddress
	o.trigger = now
	o.state = ROTesting
	if !o.home.fresh(now) {
		o.home = test{}
		o.startTest(&o.home, now)
	}
	o.maybeBU(now)
}

func (o *RouteOptimizer) startTest(t *test, now time.Time) bool {
	if _, err := io.ReadFull(o.cfg.Rand, t.cookie[:]); err != nil {
		o.fail(now, fmt.Errorf("binding: drawing an init cookie: %w", err))
		return false
	}
	t.have = false
	t.start(now, o.cfg.InitialTimeout)
	o.sendTest(t, now)
	return true
}

func (o *RouteOptimizer) sendTest(t *test, now time.Time) {
	var m mh.Message
	var env mh.Envelope
	var tunnel bool
	var what string
	if t == &o.home {
		// s.11.6.1: HoTI from the home address, reverse-tunnelled through the home agent while
		// away.
		m, env, tunnel, what = &mh.HomeTestInit{Cookie: t.cookie}, mh.Envelope{Src: o.cfg.HomeAddress, Dst: o.cfg.Correspondent}, !o.atHome, "HoTI sent"
	} else {
		m, env, what = &mh.CareOfTestInit{Cookie: t.cookie}, mh.Envelope{Src: o.careOf, Dst: o.cfg.Correspondent}, "CoTI sent"
	}
	pkt, err := mh.AppendMessage(nil, env, m)
	if err != nil {
		o.fail(now, err)
		return
	}
	o.emit.send(env, m, pkt, tunnel)
	o.emit.record(timeline.Event{Kind: timeline.RRMessage, Peer: o.cfg.Correspondent.String(), Locator: env.Src.String(),
		Attempt: t.attempts, Detail: what, Duration: int64(now.Sub(t.first))})
}

func (o *RouteOptimizer) receive(r Received, now time.Time) {
	p := r.Packet
	if p.Src != o.cfg.Correspondent {
		return
	}
	switch m := r.Msg.(type) {
	case *mh.HomeTest:
		if o.home.active && m.Cookie == o.home.cookie && p.Dst == o.cfg.HomeAddress {
			o.gotToken(&o.home, m.Token, m.NonceIndex, "HoT received", now)
		}
	case *mh.CareOfTest:
		if o.coTest.active && m.Cookie == o.coTest.cookie && p.Dst == o.careOf {
			o.gotToken(&o.coTest, m.Token, m.NonceIndex, "CoT received", now)
		}
	case *mh.BindingAck:
		o.ack(p, m, now)
	}
}

func (o *RouteOptimizer) gotToken(t *test, tok mh.Token, idx uint16, what string, now time.Time) {
	o.emit.record(timeline.Event{Kind: timeline.RRMessage, Peer: o.cfg.Correspondent.String(), Attempt: t.attempts,
		Detail: what, Duration: int64(now.Sub(t.first))})
	t.active = false
	t.have, t.token, t.index, t.received = true, tok, idx, now
	o.maybeBU(now)
}

func (o *RouteOptimizer) maybeBU(now time.Time) {
	if o.state != ROTesting || o.bu.active || !o.home.have || (!o.dereg && !o.coTest.have) {
		return
	}
	if o.dereg {
		o.kbm = rr.DeregistrationKey(o.home.token)
	} else {
		o.kbm = rr.BindingKey(o.home.token, o.coTest.token)
	}
	o.bu.start(now, o.cfg.InitialTimeout)
	o.sendBU(now)
}

func (o *RouteOptimizer) sendBU(now time.Time) {
	o.seq++
	if o.bu.attempts == 1 {
		o.firstSeq = o.seq
	}
	bu := &mh.BindingUpdate{Seq: o.seq, Ack: true, Lifetime: mh.LifetimeUnits(o.cfg.Lifetime),
		Options: []mh.Option{mh.NonceIndices{Home: o.home.index, CareOf: o.coTest.index}, mh.AuthData{}}}
	env := mh.Envelope{Src: o.careOf, Dst: o.cfg.Correspondent, HomeAddress: o.cfg.HomeAddress}
	if o.dereg {
		bu.Lifetime = 0
		env = mh.Envelope{Src: o.cfg.HomeAddress, Dst: o.cfg.Correspondent}
	}
	body, err := rr.Sign(bu, o.kbm, o.careOf, o.cfg.Correspondent, env.PseudoSrc(), env.PseudoDst())
	if err != nil {
		o.fail(now, err)
		return
	}
	pkt, err := mh.AppendPacket(nil, env, mh.Proto, body)
	if err != nil {
		o.fail(now, err)
		return
	}
	sent, _ := mh.ParseUnchecked(body)
	o.emit.send(env, sent, pkt, false)
	o.emit.record(timeline.Event{Kind: timeline.BUSent, Peer: o.cfg.Correspondent.String(), Locator: o.careOf.String(),
		Seq: uint32(o.seq), Attempt: o.bu.attempts, Detail: "correspondent registration", Duration: int64(now.Sub(o.bu.first))})
}

func (o *RouteOptimizer) ack(p mh.Packet, back *mh.BindingAck, now time.Time) {
	if !o.bu.active {
		return
	}
	if !inExchange(back.Seq, o.firstSeq, o.seq) && back.Status != mh.StatusSeqOutOfWindow {
		return
	}
	// An authenticated BAck must verify; error BAcks about nonces carry no authorization data
	// (the correspondent had no key), everything else must.
	nonceError := back.Status >= mh.StatusExpiredHomeNonceIndex && back.Status <= mh.StatusExpiredNonces
	if !nonceError && back.Status != mh.StatusHomeRegNotSupported {
		if err := rr.Verify(o.kbm, o.careOf, o.cfg.Correspondent, p.Payload); err != nil {
			o.emit.record(timeline.Event{Kind: timeline.RRMessage, Peer: o.cfg.Correspondent.String(), Seq: uint32(back.Seq),
				Detail: "BAck discarded: " + err.Error()})
			return
		}
	}
	res := Result{Peer: o.cfg.Correspondent, CareOf: o.careOf, Status: back.Status, Seq: back.Seq, Attempts: o.bu.attempts,
		Elapsed: now.Sub(o.bu.first), Total: now.Sub(o.trigger), Lifetime: mh.LifetimeDuration(back.Lifetime), Deregistered: o.dereg}
	o.emit.record(timeline.Event{Kind: timeline.BAckReceived, Peer: o.cfg.Correspondent.String(), Locator: o.careOf.String(),
		Seq: uint32(back.Seq), Attempt: res.Attempts, Detail: "correspondent registration: " + back.Status.String(), Duration: int64(res.Elapsed)})
	switch {
	case back.Status == mh.StatusSeqOutOfWindow:
		o.seq = back.Seq
		o.bu.attempts++
		o.bu.deadline = now.Add(o.bu.timeout)
		o.sendBU(now)
		o.firstSeq = o.seq
		return
	case nonceError:
		// s.11.7.2: get fresh tokens for what expired, then send a new BU.
		o.bu.active = false
		if back.Status != mh.StatusExpiredCareOfNonceIndex {
			o.home = test{}
			o.startTest(&o.home, now)
		}
		if back.Status != mh.StatusExpiredHomeNonceIndex && !o.dereg {
			o.coTest = test{}
			o.startTest(&o.coTest, now)
		}
		return
	}
	o.bu.active = false
	switch {
	case !back.Status.Accepted():
		res.Err = fmt.Errorf("%w by the correspondent: %v", ErrRejected, back.Status)
		o.state = ROIdle
	case o.dereg:
		o.state = ROIdle
	default:
		o.state = ROBound
		o.granted = res.Lifetime
		if o.granted > 0 {
			o.refresh = now.Add(time.Duration(float64(o.granted) * o.cfg.RefreshFraction))
		}
	}
	o.emit.done(res)
}

func (o *RouteOptimizer) tick(now time.Time) {
	if !o.refresh.IsZero() && !now.Before(o.refresh) && o.state == ROBound {
		o.refresh = time.Time{}
		o.trigger = now
		o.state = ROTesting
		if !o.home.fresh(now) {
			o.home = test{}
			o.startTest(&o.home, now)
		}
		if !o.coTest.fresh(now) {
			o.coTest = test{}
			o.startTest(&o.coTest, now)
		}
		o.maybeBU(now)
		return
	}
	for _, t := range []*test{&o.home, &o.coTest} {
		if !t.due(now) {
			continue
		}
		if o.cfg.GiveUp && t.timeout >= o.cfg.MaxTimeout {
			o.fail(now, ErrGaveUp)
			return
		}
		t.again(now, o.cfg.MaxTimeout)
		o.sendTest(t, now)
	}
	if o.bu.due(now) {
		if o.cfg.GiveUp && o.bu.timeout >= o.cfg.MaxTimeout {
			o.fail(now, ErrGaveUp)
			return
		}
		o.bu.again(now, o.cfg.MaxTimeout)
		o.sendBU(now)
	}
}

// fail ends the procedure with err.
func (o *RouteOptimizer) fail(now time.Time, err error) {
	res := Result{Peer: o.cfg.Correspondent, CareOf: o.careOf, Seq: o.seq, Attempts: o.bu.attempts,
		Total: now.Sub(o.trigger), Deregistered: o.dereg, Err: err}
	if o.bu.active {
		res.Elapsed = now.Sub(o.bu.first)
	}
	o.home.active, o.coTest.active, o.bu.active = false, false, false
	o.state = ROIdle
	o.emit.done(res)
}
