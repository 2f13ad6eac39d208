package binding

import (
	"fmt"
	"io"
	"net/netip"
	"sort"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/mh"
	"ilnp/lab/mipv6/rr"
)

// CNConfig configures a route-optimisation-capable correspondent node.
type CNConfig struct {
	Addr netip.Addr
	// Rand supplies Kcn and the nonces (crypto/rand.Reader in the lab).
	Rand io.Reader
	// NonceRegen and NonceLifetime: 0 means 30 s and MAX_NONCE_LIFETIME (240 s).
	NonceRegen    time.Duration
	NonceLifetime time.Duration
	// MaxLifetime caps granted lifetimes; 0 means MAX_RR_BINDING_LIFETIME (420 s).
	MaxLifetime time.Duration
	// ProcessingDelay postpones every answer (HoT, CoT, BAck) and binding change, to model the
	// thesis's T_HoT, T_CoT and T_CN (ch. 6); 0 answers at once.
	ProcessingDelay time.Duration
	Node            string
}

// CNStats counts what the correspondent did.
type CNStats struct {
	HomeTests, CareOfTests, Accepted, Rejected, Deregistered, Expired, BadAuth, Unauthorised, Ignored int
}

// Correspondent answers return routability tests and keeps the binding cache of a
// correspondent node (RFC 6275 s.9.4, s.9.5).
type Correspondent struct {
	cfg    CNConfig
	emit   emitter
	kcn    rr.Key
	nonces *rr.Nonces
	cache  map[netip.Addr]*Entry
	stats  CNStats
}

// NewCorrespondent draws Kcn from cfg.Rand.
func NewCorrespondent(cfg CNConfig) (*Correspondent, error) {
	if !routable(cfg.Addr) || cfg.Rand == nil {
		return nil, fmt.Errorf("binding: correspondent %v needs a routable IPv6 address and a random source", cfg.Addr)
	}
	if cfg.MaxLifetime == 0 {
		cfg.MaxLifetime = rr.MaxRRBindingLifetime
	}
	if cfg.MaxLifetime < 0 || cfg.NonceRegen < 0 || cfg.NonceLifetime < 0 || cfg.ProcessingDelay < 0 {
		return nil, fmt.Errorf("binding: correspondent: negative duration in %+v", cfg)
	}
	kcn, err := rr.NewKey(cfg.Rand)
	if err != nil {
		return nil, fmt.Errorf("binding: correspondent: %w", err)
	}
	return &Correspondent{cfg: cfg, emit: emitter{node: cfg.Node}, kcn: kcn,
		nonces: rr.NewNonces(cfg.Rand, cfg.NonceRegen, cfg.NonceLifetime), cache: map[netip.Addr]*Entry{}}, nil
}

// Binding returns the cache entry for hoa.
func (c *Correspondent) Binding(hoa netip.Addr) (Entry, bool) {
	e, ok := c.cache[hoa]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Stats returns the counters.
func (c *Correspondent) Stats() CNStats { return c.stats }

// Event feeds one input and returns what to do.
func (c *Correspondent) Event(ev Event, now time.Time) []Action {
	switch e := ev.(type) {
	case Received:
		mark := len(c.emit.out)
		c.receive(e, now)
		answer := append([]Action(nil), c.emit.out[mark:]...)
		c.emit.out = c.emit.out[:mark]
		c.emit.after(now, c.cfg.ProcessingDelay, answer)
	case Tick:
		c.emit.release(now)
		c.expire(now)
	}
	next := c.emit.nextRelease()
	for _, e := range c.cache {
		next = earliest(next, e.Expires)
	}
	return c.emit.flush(next)
}

func (c *Correspondent) receive(r Received, now time.Time) {
	p := r.Packet
	switch m := r.Msg.(type) {
	case *mh.HomeTestInit:
		// s.9.4.1: the token binds the source, which is the home address (the HoTI came
		// through the home agent).
		idx, n, err := c.nonces.Current(now)
		if err != nil {
			return
		}
		hot := &mh.HomeTest{NonceIndex: idx, Cookie: m.Cookie, Token: rr.HomeKeygenToken(c.kcn, p.Src, n)}
		c.reply(mh.Envelope{Src: c.cfg.Addr, Dst: p.Src}, hot, "HoT sent")
		c.stats.HomeTests++
	case *mh.CareOfTestInit:
		idx, n, err := c.nonces.Current(now)
		if err != nil {
			return
		}
		cot := &mh.CareOfTest{NonceIndex: idx, Cookie: m.Cookie, Token: rr.CareOfKeygenToken(c.kcn, p.Src, n)}
		c.reply(mh.Envelope{Src: c.cfg.Addr, Dst: p.Src}, cot, "CoT sent")
		c.stats.CareOfTests++
	case *mh.BindingUpdate:
		c.bindingUpdate(p, m, now)
	default:
		c.stats.Ignored++
	}
}

func (c *Correspondent) reply(env mh.Envelope, m mh.Message, detail string) {
	pkt, err := mh.AppendMessage(nil, env, m)
	if err != nil {
		return
	}
	c.emit.send(env, m, pkt, false)
	c.emit.record(timeline.Event{Kind: timeline.RRMessage, Peer: env.Dst.String(), Detail: detail})
}

func (c *Correspondent) bindingUpdate(p mh.Packet, bu *mh.BindingUpdate, now time.Time) {
	hoa := p.PseudoSrc()
	coa := p.Src
	if alt, ok := mh.Find[mh.AltCareOf](bu.Options); ok {
		coa = alt.Addr
	}
	env := mh.Envelope{Src: c.cfg.Addr, Dst: p.Src}
	if p.HomeAddress.IsValid() {
		env.RoutingHome = p.HomeAddress
	}
	if bu.Home {
		c.stats.Rejected++
		c.sendAck(env, &mh.BindingAck{Status: mh.StatusHomeRegNotSupported, Seq: bu.Seq}, nil, coa)
		return
	}
	ni, okNI := mh.Find[mh.NonceIndices](bu.Options)
	if _, okBAD := mh.Find[mh.AuthData](bu.Options); !okNI || !okBAD {
		c.stats.Unauthorised++ // s.9.5.1: silently discarded
		return
	}
	dereg := bu.Lifetime == 0 || coa == hoa
	hn, okH := c.nonces.Lookup(ni.Home, now)
	cn, okC := c.nonces.Lookup(ni.CareOf, now)
	status := mh.StatusAccepted
	switch {
	case !okH && (dereg || okC):
		status = mh.StatusExpiredHomeNonceIndex
	case !okH:
		status = mh.StatusExpiredNonces
	case !okC && !dereg:
		status = mh.StatusExpiredCareOfNonceIndex
	}
	if status != mh.StatusAccepted {
		// s.9.5.1: sent whatever the A flag says; no key, so no authorization data.
		c.stats.Rejected++
		c.sendAck(env, &mh.BindingAck{Status: status, Seq: bu.Seq}, nil, coa)
		return
	}
	ht := rr.HomeKeygenToken(c.kcn, hoa, hn)
	kbm := rr.DeregistrationKey(ht)
	if !dereg {
		kbm = rr.BindingKey(ht, rr.CareOfKeygenToken(c.kcn, coa, cn))
	}
	if err := rr.Verify(kbm, coa, c.cfg.Addr, p.Payload); err != nil {
		c.stats.BadAuth++ // silently discarded
		c.emit.record(timeline.Event{Kind: timeline.RRMessage, Peer: hoa.String(), Seq: uint32(bu.Seq), Detail: "BU discarded: " + err.Error()})
		return
	}
	old, had := c.cache[hoa]
	if had && !SeqNewer(bu.Seq, old.Seq) {
		c.stats.Rejected++
		c.sendAck(env, &mh.BindingAck{Status: mh.StatusSeqOutOfWindow, Seq: old.Seq, Options: []mh.Option{mh.AuthData{}}}, &kbm, coa)
		return
	}
	var granted time.Duration
	if dereg {
		if had {
			delete(c.cache, hoa)
			c.emit.out = append(c.emit.out, Action{Kind: Unbind, Binding: *old})
		}
		c.stats.Deregistered++
	} else {
		granted = min(mh.LifetimeDuration(bu.Lifetime), c.cfg.MaxLifetime)
		e := &Entry{HomeAddress: hoa, CareOf: coa, Seq: bu.Seq, Lifetime: granted, Expires: now.Add(c.cfg.ProcessingDelay + granted), New: !had}
		c.cache[hoa] = e
		c.emit.out = append(c.emit.out, Action{Kind: Bind, Binding: *e})
		c.stats.Accepted++
	}
	if bu.Ack {
		c.sendAck(env, &mh.BindingAck{Status: mh.StatusAccepted, Seq: bu.Seq, Lifetime: mh.LifetimeUnits(granted),
			Options: []mh.Option{mh.AuthData{}}}, &kbm, coa)
	}
}

// sendAck sends back, signed with kbm over (care-of address | correspondent | MH data) when
// kbm is given (s.9.5.4).
func (c *Correspondent) sendAck(env mh.Envelope, back *mh.BindingAck, kbm *rr.Key, coa netip.Addr) {
	var body []byte
	var err error
	if kbm != nil {
		body, err = rr.Sign(back, *kbm, coa, c.cfg.Addr, env.PseudoSrc(), env.PseudoDst())
	} else {
		body, err = mh.Marshal(back, env.PseudoSrc(), env.PseudoDst())
	}
	if err != nil {
		return
	}
	pkt, err := mh.AppendPacket(nil, env, mh.Proto, body)
	if err != nil {
		return
	}
	m, err := mh.ParseUnchecked(body) // the message as sent, authenticator included
	if err != nil {
		return
	}
	c.emit.send(env, m, pkt, false)
}

func (c *Correspondent) expire(now time.Time) {
	var expired []netip.Addr
	for hoa, e := range c.cache {
		if !now.Before(e.Expires) {
			expired = append(expired, hoa)
		}
	}
	sort.Slice(expired, func(i, j int) bool { return expired[i].Less(expired[j]) })
	for _, hoa := range expired {
		c.emit.out = append(c.emit.out, Action{Kind: Unbind, Binding: *c.cache[hoa]})
		delete(c.cache, hoa)
		c.stats.Expired++
	}
}
