package binding

import (
	"fmt"
	"net/netip"
	"sort"
	"time"

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
	// 0 is the baseline's own processing, which is immediate.
	ProcessingDelay time.Duration
	// RefreshAdvice, when positive, is sent in accepting BAcks as a Binding Refresh Advice.
	RefreshAdvice time.Duration
	// Node names the node in timeline records.
	Node string
}

// HomeAgent is a home agent's binding cache (RFC 6275 s.10.3).
type HomeAgent struct {
	cfg   HAConfig
	emit  emitter
	cache map[netip.Addr]*Entry
	stats HAStats
}

// HAStats counts what the home agent did.
type HAStats struct {
	Accepted, Rejected, Deregistered, Expired, Ignored int
}

// NewHomeAgent validates cfg.
func NewHomeAgent(cfg HAConfig) (*HomeAgent, error) {
	if !routable(cfg.Addr) || !cfg.HomePrefix.IsValid() || !cfg.HomePrefix.Addr().Is6() || !cfg.HomePrefix.Contains(cfg.Addr) {
		return nil, fmt.Errorf("binding: home agent %v must be a routable IPv6 address in the home prefix %v", cfg.Addr, cfg.HomePrefix)
	}
	if cfg.MaxLifetime == 0 {
		cfg.MaxLifetime = 420 * time.Second
	}
	if cfg.MaxLifetime < 0 || cfg.ProcessingDelay < 0 || cfg.RefreshAdvice < 0 {
		return nil, fmt.Errorf("binding: home agent: negative duration in %+v", cfg)
	}
	return &HomeAgent{cfg: cfg, emit: emitter{node: cfg.Node}, cache: map[netip.Addr]*Entry{}}, nil
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
	case Tick:
		h.tick(now)
	}
	return h.emit.flush(h.next())
}

func (h *HomeAgent) bindingUpdate(p mh.Packet, bu *mh.BindingUpdate, now time.Time) {
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
	default:
		granted = min(mh.LifetimeDuration(bu.Lifetime), h.cfg.MaxLifetime)
		e := &Entry{HomeAddress: hoa, CareOf: coa, Seq: bu.Seq, Lifetime: granted, Expires: now.Add(h.cfg.ProcessingDelay + granted), New: !had}
		h.cache[hoa] = e
		actions = append(actions, Action{Kind: Bind, Binding: *e})
		h.stats.Accepted++
	}
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

func (h *HomeAgent) tick(now time.Time) {
	h.emit.release(now)
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
	for _, e := range h.cache {
		ts = append(ts, e.Expires)
	}
	return earliest(ts...)
}
