package binding

import (
	"fmt"
	"net/netip"
	"sort"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/mh"
)

// HAConfig configures a home agent.
type HAConfig struct {
	// Addr is the home agent's address on the home link.
	Addr netip.Addr
	// HomePrefix is the home link's prefix; only home addresses in it are served (status 132).
	HomePrefix netip.Prefix
	// MaxLifetime caps granted lifetimes; 0 means 420 s.
	MaxLifetime time.Duration
	// ProcessingDelay (T_HA) is added between accepting a BU and acting on it (Bind action and
	// BAck), to emulate the ~1 s the thesis measured for UMIP's BU processing and tunnel set-up.
	// 0 is the baseline's own processing, which is immediate. It comes on top of DAD.
	ProcessingDelay time.Duration
	// DADTimeout is how long Duplicate Address Detection of the home address waits for a
	// defending Neighbor Advertisement before a new binding is accepted (s.10.3.1); 0 means
	// DefaultDADTimeout, UMIP's.
	DADTimeout time.Duration
	// SkipDAD accepts new bindings without DAD (UMIP's HA_BU_F_SKIP_DAD); tests of other parts.
	SkipDAD bool
	// RefreshAdvice, when positive, is sent in accepting BAcks as a Binding Refresh Advice.
	RefreshAdvice time.Duration
	// Node names the node in timeline records.
	Node string
}

// DefaultDADTimeout is UMIP's home agent DAD wait (DAD_TIMEOUT, one second: one Neighbor
// Solicitation, then RetransTimer 1000 ms x DupAddrDetectTransmits 1 of RFC 4861/4862).
const DefaultDADTimeout = time.Second

// KindDAD is the home agent's timeline record of DAD for a home address (Detail "start",
// "passed" or "failed"; Peer: the home address).
const KindDAD timeline.Kind = "ha_dad"

// HomeAgent is a home agent's binding cache (RFC 6275 s.10.3).
type HomeAgent struct {
	cfg   HAConfig
	emit  emitter
	cache map[netip.Addr]*Entry
	dad   map[netip.Addr]*dadRun
	stats HAStats
}

// dadRun is DAD in progress for one home address: the BU that asked for the new binding and
// those that arrived meanwhile (UMIP handles them once DAD is over, in order).
type dadRun struct {
	deadline time.Time
	queue    []queuedBU
}

type queuedBU struct {
	p  mh.Packet
	bu *mh.BindingUpdate
}

// HAStats counts what the home agent did.
type HAStats struct {
	Accepted, Rejected, Deregistered, Expired, Ignored int
	// DADStarted counts DAD runs; DADFailed those a Neighbor Advertisement defended.
	DADStarted, DADFailed int
}

// NewHomeAgent validates cfg.
func NewHomeAgent(cfg HAConfig) (*HomeAgent, error) {
	if !routable(cfg.Addr) || !cfg.HomePrefix.IsValid() || !cfg.HomePrefix.Addr().Is6() || !cfg.HomePrefix.Contains(cfg.Addr) {
		return nil, fmt.Errorf("binding: home agent %v must be a routable IPv6 address in the home prefix %v", cfg.Addr, cfg.HomePrefix)
	}
	if cfg.MaxLifetime == 0 {
		cfg.MaxLifetime = 420 * time.Second
	}
	if cfg.DADTimeout == 0 {
		cfg.DADTimeout = DefaultDADTimeout
	}
	if cfg.MaxLifetime < 0 || cfg.ProcessingDelay < 0 || cfg.RefreshAdvice < 0 || cfg.DADTimeout < 0 {
		return nil, fmt.Errorf("binding: home agent: negative duration in %+v", cfg)
	}
	return &HomeAgent{cfg: cfg, emit: emitter{node: cfg.Node}, cache: map[netip.Addr]*Entry{},
		dad: map[netip.Addr]*dadRun{}}, nil
}

// Binding returns the cache entry for hoa.
func (h *HomeAgent) Binding(hoa netip.Addr) (Entry, bool) {
	e, ok := h.cache[hoa]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Stats returns the counters.
func (h *HomeAgent) Stats() HAStats { return h.stats }

// Event feeds one input and returns what to do.
func (h *HomeAgent) Event(ev Event, now time.Time) []Action {
	switch e := ev.(type) {
	case Received:
		if bu, ok := e.Msg.(*mh.BindingUpdate); ok {
			h.bindingUpdate(e.Packet, bu, now)
		} else {
			h.stats.Ignored++
		}
	case Defended:
		h.defended(e.Addr, now)
	case Tick:
		h.tick(now)
	}
	return h.emit.flush(h.next())
}

func (h *HomeAgent) bindingUpdate(p mh.Packet, bu *mh.BindingUpdate, now time.Time) {
	if run, ok := h.dad[p.PseudoSrc()]; ok {
		run.queue = append(run.queue, queuedBU{p: p, bu: bu})
		return
	}
	h.process(p, bu, now, false)
}

// process handles one BU; afterDAD says DAD for its home address has just passed.
func (h *HomeAgent) process(p mh.Packet, bu *mh.BindingUpdate, now time.Time, afterDAD bool) {
	hoa := p.PseudoSrc() // the Home Address option, or the source when sent from home
	coa := p.Src
	if alt, ok := mh.Find[mh.AltCareOf](bu.Options); ok {
		coa = alt.Addr
	}
	var actions []Action
	status, seq, granted := mh.StatusAccepted, bu.Seq, time.Duration(0)
	old, had := h.cache[hoa]
	switch {
	case !bu.Home:
		status = mh.StatusProhibited // this baseline's home agent is no correspondent
	case !h.cfg.HomePrefix.Contains(hoa):
		status = mh.StatusNotHomeSubnet
	case had && !SeqNewer(bu.Seq, old.Seq):
		status, seq = mh.StatusSeqOutOfWindow, old.Seq
	case bu.Lifetime == 0 || coa == hoa:
		// s.10.3.2: deletion of the binding.
		if had {
			delete(h.cache, hoa)
			actions = append(actions, Action{Kind: Unbind, Binding: *old})
		}
		h.stats.Deregistered++
	case !had && !afterDAD && !h.cfg.SkipDAD:
		// s.10.3.1: DAD for the home address on the home link before the BAck of a new
		// binding; refreshes and deregistrations go without.
		h.dad[hoa] = &dadRun{deadline: now.Add(h.cfg.DADTimeout), queue: []queuedBU{{p: p, bu: bu}}}
		h.stats.DADStarted++
		h.emit.out = append(h.emit.out, Action{Kind: Probe, Binding: Entry{HomeAddress: hoa, CareOf: coa, Seq: bu.Seq}})
		h.emit.record(timeline.Event{Kind: KindDAD, Peer: hoa.String(), Locator: coa.String(), Seq: uint32(bu.Seq), Detail: "start"})
		return
	default:
		granted = min(mh.LifetimeDuration(bu.Lifetime), h.cfg.MaxLifetime)
		e := &Entry{HomeAddress: hoa, CareOf: coa, Seq: bu.Seq, Lifetime: granted, Expires: now.Add(h.cfg.ProcessingDelay + granted), New: !had}
		h.cache[hoa] = e
		actions = append(actions, Action{Kind: Bind, Binding: *e})
		h.stats.Accepted++
	}
	h.answer(p, bu, status, seq, granted, actions, now)
}

// answer sends the BAck (when asked for, or a refusal) after actions, T_HA from now.
func (h *HomeAgent) answer(p mh.Packet, bu *mh.BindingUpdate, status mh.Status, seq uint16, granted time.Duration, actions []Action, now time.Time) {
	if !status.Accepted() {
		h.stats.Rejected++
	}
	if bu.Ack || !status.Accepted() {
		back := &mh.BindingAck{Status: status, Seq: seq, Lifetime: mh.LifetimeUnits(granted)}
		if status.Accepted() && granted > 0 && h.cfg.RefreshAdvice > 0 {
			back.Options = []mh.Option{mh.RefreshAdvice{Interval: mh.LifetimeUnits(h.cfg.RefreshAdvice)}}
		}
		// s.9.5.4: to the BU's source; through a type 2 routing header to the home address when
		// the BU came from a care-of address.
		env := mh.Envelope{Src: h.cfg.Addr, Dst: p.Src}
		if p.HomeAddress.IsValid() && routable(p.HomeAddress) {
			env.RoutingHome = p.HomeAddress
		}
		pkt, err := mh.AppendMessage(nil, env, back)
		if err == nil {
			actions = append(actions, Action{Kind: Send, Packet: pkt, Env: env, Msg: back})
		}
	}
	h.emit.after(now, h.cfg.ProcessingDelay, actions)
}

// defended: a Neighbor Advertisement for addr arrived on the home link. During DAD for a home
// address, that is another node using it: every waiting BU is refused with status 134.
func (h *HomeAgent) defended(addr netip.Addr, now time.Time) {
	run, ok := h.dad[addr]
	if !ok {
		h.stats.Ignored++
		return
	}
	delete(h.dad, addr)
	h.stats.DADFailed++
	h.emit.record(timeline.Event{Kind: KindDAD, Peer: addr.String(), Detail: "failed"})
	for _, q := range run.queue {
		h.answer(q.p, q.bu, mh.StatusDADFailed, q.bu.Seq, 0, nil, now)
	}
}

// dadPassed: no defence before the timeout. The first BU creates the binding, the others
// follow as refreshes, as UMIP (which waits in its BU handler) would handle them.
func (h *HomeAgent) dadPassed(addr netip.Addr, run *dadRun, now time.Time) {
	delete(h.dad, addr)
	h.emit.record(timeline.Event{Kind: KindDAD, Peer: addr.String(), Detail: "passed"})
	for i, q := range run.queue {
		h.process(q.p, q.bu, now, i == 0)
	}
}

func (h *HomeAgent) tick(now time.Time) {
	h.emit.release(now)
	var passed []netip.Addr
	for hoa, run := range h.dad {
		if !now.Before(run.deadline) {
			passed = append(passed, hoa)
		}
	}
	sort.Slice(passed, func(i, j int) bool { return passed[i].Less(passed[j]) })
	for _, hoa := range passed {
		h.dadPassed(hoa, h.dad[hoa], now)
	}
	var expired []netip.Addr
	for hoa, e := range h.cache {
		if !now.Before(e.Expires) {
			expired = append(expired, hoa)
		}
	}
	sort.Slice(expired, func(i, j int) bool { return expired[i].Less(expired[j]) })
	for _, hoa := range expired {
		h.emit.out = append(h.emit.out, Action{Kind: Unbind, Binding: *h.cache[hoa]})
		delete(h.cache, hoa)
		h.stats.Expired++
	}
}

func (h *HomeAgent) next() time.Time {
	ts := []time.Time{h.emit.nextRelease()}
	for _, run := range h.dad {
		ts = append(ts, run.deadline)
	}
	for _, e := range h.cache {
		ts = append(ts, e.Expires)
	}
	return earliest(ts...)
}
