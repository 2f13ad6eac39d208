package rendezvous

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"ilnp/internal/encap"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// LocatorEntry is one valid local locator to publish: an IPv6 locator (an L64 record) or an
// IPv4 one in the encap mapping (an L32 record, RFC 6742 s.2.2), which must be on
// encap.DefaultPort: an L32 record has no port, and a correspondent reads it as that port
// (wire.ILVsFromRRs).
type LocatorEntry struct {
	Locator    wire.L64
	Preference uint16 // lower is more preferred (RFC 6742 s.2.3)
}

// Defaults. TTL: the thesis (s.2.6.3, s.7.2.1) wants L64 TTLs very low, even zero, because a
// cached stale locator makes a moved node unreachable, and cites measurements showing zero TTLs
// add no significant DNS load.
const (
	DefaultTTL           = 0 * time.Second
	DefaultNIDPreference = 10
	DefaultTimeout       = 2 * time.Second
	DefaultMinBackoff    = 200 * time.Millisecond
	DefaultMaxBackoff    = 30 * time.Second
)

// PublisherConfig configures a Publisher. Name, Zone and Server are required.
type PublisherConfig struct {
	Name   string   // the node's name, e.g. "mn.ilnp.test."
	Zone   string   // the zone to update, e.g. "ilnp.test." (Name must be inside it)
	Server string   // primary server, "host:port" or an address (port 53)
	Key    *TSIGKey // nil: unsigned updates (only for servers that allow them by address)
	TTL    time.Duration
	// NIDPreference is the NID record's preference (default 10).
	NIDPreference uint16
	Timeout       time.Duration // per exchange; default 2 s
	MinBackoff    time.Duration // first retry delay; default 200 ms
	MaxBackoff    time.Duration // retry delay cap; default 30 s
	Dial          DialFunc
	Logger        *slog.Logger
	// Emit receives DNSUpdateSent/DNSUpdateResult timeline events (nil: none).
	Emit func(timeline.Event)
	Node string // timeline Node field
}

// Stats are the Publisher's counters.
type Stats struct {
	Publishes      uint64           // Publish calls accepted
	UpdatesSent    uint64           // UPDATE messages sent (attempts)
	UpdatesOK      uint64           // UPDATEs the server applied
	StateReads     uint64           // queries to learn the server's current RRsets
	Superseded     uint64           // states never sent because a newer one came first
	Errors         map[Cause]uint64 // failed exchanges by cause
	LastError      string
	LastErrorCause Cause
}

// Status is a snapshot of where publishing stands.
type Status struct {
	Wanted    uint64 // generation of the latest Publish (0: none yet)
	Published uint64 // generation the server is known to hold
	Parked    bool   // the latest state failed for a cause retrying cannot fix
	Stats     Stats
}

// Publisher keeps a node's NID, L64 and L32 records on its DNS server equal to its current
// valid locators. Publish never blocks; a single background goroutine (Run) sends the updates.
type Publisher struct {
	cfg  PublisherConfig
	name string
	zone string
	x    *exchanger // signed: updates
	read *exchanger // unsigned: reading the current RRsets is an ordinary query
	log  *slog.Logger

	wake chan struct{} // capacity 1: "a newer state is waiting"

	mu        sync.Mutex
	want      *desired // latest state asked for: latest wins, older ones are dropped
	published uint64
	parked    uint64 // generation parked by a non-retryable error
	stats     Stats
	changed   chan struct{} // closed and replaced on every status change
}

type desired struct {
	gen  uint64
	nid  wire.NID
	locs []LocatorEntry
}

// NewPublisher checks the configuration; call Run in a goroutine to start publishing.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if _, ok := dns.IsDomainName(cfg.Name); !ok || cfg.Name == "" {
		return nil, fmt.Errorf("rendezvous publisher: bad name %q", cfg.Name)
	}
	if _, ok := dns.IsDomainName(cfg.Zone); !ok || cfg.Zone == "" {
		return nil, fmt.Errorf("rendezvous publisher: bad zone %q", cfg.Zone)
	}
	name, zone := dns.CanonicalName(cfg.Name), dns.CanonicalName(cfg.Zone)
	if !dns.IsSubDomain(zone, name) {
		return nil, fmt.Errorf("rendezvous publisher: name %s is not inside zone %s", name, zone)
	}
	server, err := serverAddr(cfg.Server)
	if err != nil {
		return nil, fmt.Errorf("rendezvous publisher: %w", err)
	}
	if cfg.TTL < 0 || cfg.TTL > 24*time.Hour {
		return nil, fmt.Errorf("rendezvous publisher: TTL %v out of range 0..24h", cfg.TTL)
	}
	if cfg.NIDPreference == 0 {
		cfg.NIDPreference = DefaultNIDPreference
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.MinBackoff = cmp.Or(cfg.MinBackoff, DefaultMinBackoff)
	cfg.MaxBackoff = max(cmp.Or(cfg.MaxBackoff, DefaultMaxBackoff), cfg.MinBackoff)
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Publisher{
		cfg:     cfg,
		name:    name,
		zone:    zone,
		x:       &exchanger{server: server, dial: cfg.Dial, timeout: cfg.Timeout, key: cfg.Key},
		read:    &exchanger{server: server, dial: cfg.Dial, timeout: cfg.Timeout},
		log:     cfg.Logger.With("component", "rendezvous", "name", name, "server", server),
		wake:    make(chan struct{}, 1),
		changed: make(chan struct{}),
	}
	p.stats.Errors = map[Cause]uint64{}
	return p, nil
}

// serverAddr accepts "host:port", "[v6]:port" or a bare address/host (port 53).
func serverAddr(s string) (string, error) {
	if s == "" {
		return "", errors.New("no server")
	}
	if _, _, err := net.SplitHostPort(s); err == nil {
		return s, nil
	}
	return net.JoinHostPort(strings.Trim(s, "[]"), "53"), nil
}

// Publish asks for the name's records to become: the NID record for nid and one L64 record
// per IPv6 entry, one L32 record per IPv4 entry. It validates and returns at once; Run sends the update. A later Publish
// supersedes an earlier one that is not yet on the server. An empty set is not published (a
// node without locators cannot reach the server anyway, and the last published set is the
// best hint correspondents can have); Publish returns nil and keeps the previous state.
// ctx is only used for logging.
func (p *Publisher) Publish(ctx context.Context, nid wire.NID, locs []LocatorEntry) error {
	if len(locs) == 0 {
		p.log.DebugContext(ctx, "empty locator set not published; keeping the previous records")
		return nil
	}
	for _, l := range locs {
		if ep, ok := encap.Endpoint(l.Locator); ok && ep.Port() != encap.DefaultPort {
			return fmt.Errorf("rendezvous: IPv4 locator %v: an L32 record has no port, only %d can be published", ep, encap.DefaultPort)
		}
	}
	clean := slices.Clone(locs)
	slices.SortFunc(clean, func(a, b LocatorEntry) int {
		return cmp.Or(cmp.Compare(a.Locator, b.Locator), cmp.Compare(a.Preference, b.Preference))
	})
	// One record per locator: the lowest (most preferred) preference wins.
	clean = slices.CompactFunc(clean, func(a, b LocatorEntry) bool { return a.Locator == b.Locator })
	p.mu.Lock()
	gen := uint64(1)
	if p.want != nil {
		gen = p.want.gen + 1
		if p.want.gen != p.published {
			p.stats.Superseded++
		}
	}
	p.want = &desired{gen: gen, nid: nid, locs: clean}
	p.stats.Publishes++
	p.notifyLocked()
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	p.log.DebugContext(ctx, "publish requested", "generation", gen, "nid", nid.String(), "locators", len(clean))
	return nil
}

// Status returns counters and generations.
func (p *Publisher) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statusLocked()
}

func (p *Publisher) statusLocked() Status {
	st := Status{Published: p.published, Stats: p.stats}
	st.Stats.Errors = make(map[Cause]uint64, len(p.stats.Errors))
	for k, v := range p.stats.Errors {
		st.Stats.Errors[k] = v
	}
	if p.want != nil {
		st.Wanted = p.want.gen
		st.Parked = p.parked == p.want.gen
	}
	return st
}

func (p *Publisher) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Wait blocks until the latest published state is on the server, it is parked by a
// non-retryable error (returned), or ctx ends.
func (p *Publisher) Wait(ctx context.Context) error {
	for {
		p.mu.Lock()
		st := p.statusLocked()
		ch := p.changed
		p.mu.Unlock()
		switch {
		case st.Wanted == st.Published:
			return nil
		case st.Parked:
			return fmt.Errorf("rendezvous: publishing parked: %s", st.Stats.LastError)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Run sends updates until ctx ends. Start it once, in its own goroutine.
func (p *Publisher) Run(ctx context.Context) {
	var server *rrsets // what the server holds, as far as we know; nil: unknown, read it
	attempt := 0       // consecutive failures of retryable causes
	var gen uint64     // generation being worked on
	tries := 0         // sync attempts for gen (timeline Attempt)
	for {
		p.mu.Lock()
		w := p.want
		todo := w != nil && w.gen != p.published && w.gen != p.parked
		p.mu.Unlock()
		if !todo {
			attempt = 0
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
				continue
			}
		}
		if w.gen != gen {
			gen, tries = w.gen, 0
		}
		tries++
		cause, err := p.sync(ctx, w, &server, tries)
		if ctx.Err() != nil {
			return
		}
		var delay time.Duration
		if err != nil {
			server = nil // after any failure the server's state is unknown: read it again
			if cause.retryable() {
				attempt++
				delay = p.backoff(attempt)
				if cause == CausePrereq && attempt == 1 {
					delay = 0 // someone else changed the RRset: re-read and retry at once
				}
				p.log.WarnContext(ctx, "DNS update failed, will retry", "cause", string(cause),
					"attempt", attempt, "retry_in", delay, "err", err)
			} else {
				// Only a configuration change (key, policy, zone) helps; say so once, loudly,
				// and try again with the next locator change rather than hammer the server.
				p.log.ErrorContext(ctx, "DNS update refused; not retrying until the locator set changes",
					"cause", string(cause), "err", err)
			}
		}
		p.mu.Lock()
		if err == nil {
			p.published = w.gen
			attempt = 0
		} else {
			p.stats.Errors[cause]++
			p.stats.LastError, p.stats.LastErrorCause = err.Error(), cause
			if !cause.retryable() {
				p.parked = w.gen
			}
		}
		p.notifyLocked()
		p.mu.Unlock()
		if err == nil || !cause.retryable() {
			continue
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-p.wake:
			// A newer state: it often comes with a new locator, i.e. a new path to the
			// server, so try it now instead of sleeping out the old backoff.
			t.Stop()
			attempt = 0
		}
	}
}

// backoff is exponential from MinBackoff, capped at MaxBackoff, with +-20% jitter so many
// nodes that lost the same server do not come back in step.
func (p *Publisher) backoff(attempt int) time.Duration {
	d := p.cfg.MinBackoff
	for i := 1; i < attempt && d < p.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, p.cfg.MaxBackoff)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// rrsets is the NID, L64 and L32 content of the name on the server, TTLs ignored.
type rrsets struct {
	nids []dns.RR
	l64s []dns.RR
	l32s []dns.RR
}

// sets is s's RRsets with their types, in the order updates list them.
func (s *rrsets) sets() []struct {
	rrs []dns.RR
	typ uint16
} {
	return []struct {
		rrs []dns.RR
		typ uint16
	}{{s.nids, dns.TypeNID}, {s.l64s, dns.TypeL64}, {s.l32s, dns.TypeL32}}
}

// all is every record of s.
func (s *rrsets) all() []dns.RR {
	return slices.Concat(s.nids, s.l64s, s.l32s)
}

// sync makes the server hold w. Why one UPDATE per change, and why prerequisites:
//
//   - One message, adds before deletes. RFC 2136 s.3.4 processes the Update section in order
//     and s.3.7 makes the whole message atomic; named commits it as one new zone version, so a
//     query sees the old set or the new one, never the empty set between a delete and an add.
//     Two separate messages (add, then delete) would also never expose an empty set, but
//     would double the latency and leave both sets published if the second were lost.
//   - Compare-and-swap. The message carries value-dependent prerequisites (RFC 2136 s.2.4.2,
//     s.2.4.3) stating the exact RRsets we believe the server holds. A retransmitted or
//     delayed older UPDATE (UDP may deliver it after a newer one) then fails its
//     prerequisite with NXRRSET instead of overwriting newer records: a stale state can
//     never win. When our belief is unknown (start, after any failure), we read the RRsets
//     first.
//
// Every attempt is one DNSUpdateSent and one DNSUpdateResult event (the result names the cause,
// also of a failed read), so the timeline shows each try even while the server is away.
func (p *Publisher) sync(ctx context.Context, w *desired, server **rrsets, try int) (Cause, error) {
	detail := describe(w)
	if *server == nil {
		detail += " read-first"
	}
	best := slices.MinFunc(w.locs, func(a, b LocatorEntry) int { return cmp.Compare(a.Preference, b.Preference) })
	p.emit(timeline.Event{Kind: timeline.DNSUpdateSent, Locator: best.Locator.String(), Detail: detail,
		Seq: uint32(w.gen), Attempt: try})
	start := time.Now()
	cause, err := p.syncOnce(ctx, w, server)
	elapsed := time.Since(start)
	p.emit(timeline.Event{Kind: timeline.DNSUpdateResult, Locator: best.Locator.String(),
		Detail: string(cause) + " " + detail, Seq: uint32(w.gen), Attempt: try, Duration: elapsed.Nanoseconds()})
	if err == nil {
		p.log.InfoContext(ctx, "DNS records up to date", "generation", w.gen, "records", detail, "took", elapsed)
	}
	return cause, err
}

func (p *Publisher) syncOnce(ctx context.Context, w *desired, server **rrsets) (Cause, error) {
	if *server == nil {
		cur, cause, err := p.readState(ctx)
		if err != nil {
			return cause, err
		}
		*server = cur
	}
	have := *server
	ttl := uint32(p.cfg.TTL / time.Second)
	want := p.wantRRs(w)
	if sameRdata(have.nids, want.nids) && sameRdata(have.l64s, want.l64s) && sameRdata(have.l32s, want.l32s) && sameTTL(have, ttl) {
		return CauseOK, nil
	}
	m := updateMsg(p.zone, p.name, have, want)

	p.mu.Lock()
	p.stats.UpdatesSent++
	p.mu.Unlock()
	r, err := p.x.exchange(ctx, m)
	cause, rc := CauseOK, -1
	switch {
	case r != nil:
		cause, rc = classifyReply(r)
		if cause == CauseOK && err != nil {
			cause = classifyTransport(err) // reply's TSIG did not verify: do not trust it
		}
	case err != nil:
		cause = classifyTransport(err)
	}
	if cause != CauseOK {
		return cause, &ExchangeError{Op: "update", Name: p.name, Server: p.x.server, Cause: cause, Rcode: rc, Err: err}
	}
	*server = want
	p.mu.Lock()
	p.stats.UpdatesOK++
	p.mu.Unlock()
	return CauseOK, nil
}

// updateMsg is the one UPDATE that turns have into want (see sync): per type, a prerequisite
// that the RRset is exactly have's (RFC 2136 s.2.4.2) or, when have has none, that it does
// not exist (s.2.4.3); then every wanted record added (s.2.5.1), then each of have's records
// that is no longer wanted deleted (s.2.5.4). Types in the order NID, L64, L32. No I/O: the
// exchanger signs and sends it.
func updateMsg(zone, name string, have, want *rrsets) *dns.Msg {
	m := new(dns.Msg)
	m.SetUpdate(zone)
	for _, set := range have.sets() {
		if len(set.rrs) == 0 {
			m.RRsetNotUsed([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: name, Rrtype: set.typ}}})
			continue
		}
		m.Used(copyRRs(set.rrs))
	}
	m.Insert(copyRRs(want.all()))
	var gone []dns.RR
	wanted := want.sets()
	for i, set := range have.sets() {
		for _, rr := range set.rrs {
			if !containsRdata(wanted[i].rrs, rr) {
				gone = append(gone, rr)
			}
		}
	}
	m.Remove(copyRRs(gone))
	return m
}

// wantRRs is the NID, L64 and L32 records that publish w.
func (p *Publisher) wantRRs(w *desired) *rrsets {
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: p.name, Rrtype: t, Class: dns.ClassINET, Ttl: uint32(p.cfg.TTL / time.Second)}
	}
	s := &rrsets{nids: []dns.RR{&dns.NID{Hdr: hdr(dns.TypeNID), Preference: p.cfg.NIDPreference, NodeID: uint64(w.nid)}}}
	for _, l := range w.locs {
		if ep, ok := encap.Endpoint(l.Locator); ok {
			s.l32s = append(s.l32s, &dns.L32{Hdr: hdr(dns.TypeL32), Preference: l.Preference, Locator32: ep.Addr().AsSlice()})
			continue
		}
		s.l64s = append(s.l64s, &dns.L64{Hdr: hdr(dns.TypeL64), Preference: l.Preference, Locator64: uint64(l.Locator)})
	}
	return s
}

// readState queries the server for the name's current NID, L64 and L32 RRsets (L32 always,
// also for a node without IPv4 locators: an earlier run may have left some).
func (p *Publisher) readState(ctx context.Context) (*rrsets, Cause, error) {
	p.mu.Lock()
	p.stats.StateReads++
	p.mu.Unlock()
	cur := &rrsets{}
	for _, t := range []uint16{dns.TypeNID, dns.TypeL64, dns.TypeL32} {
		q := new(dns.Msg)
		q.SetQuestion(p.name, t)
		q.RecursionDesired = false
		r, err := p.read.exchange(ctx, q)
		op := "read state (" + dns.TypeToString[t] + " query)"
		if r == nil {
			cause := classifyTransport(err)
			return nil, cause, &ExchangeError{Op: op, Name: p.name, Server: p.x.server, Cause: cause, Rcode: -1, Err: err}
		}
		cause, rc := classifyReply(r)
		if r.Rcode == dns.RcodeNameError {
			cause = CauseOK // no such name yet: both sets empty
		}
		if cause == CauseOK && err != nil {
			cause = classifyTransport(err)
		}
		if cause != CauseOK {
			return nil, cause, &ExchangeError{Op: op, Name: p.name, Server: p.x.server, Cause: cause, Rcode: rc, Err: err}
		}
		for _, rr := range r.Answer {
			h := rr.Header()
			if h.Rrtype != t || h.Class != dns.ClassINET || dns.CanonicalName(h.Name) != p.name {
				continue
			}
			switch t {
			case dns.TypeNID:
				cur.nids = append(cur.nids, rr)
			case dns.TypeL64:
				cur.l64s = append(cur.l64s, rr)
			default:
				cur.l32s = append(cur.l32s, rr)
			}
		}
	}
	return cur, CauseOK, nil
}

func (p *Publisher) emit(e timeline.Event) {
	if p.cfg.Emit == nil {
		return
	}
	e.Node = p.cfg.Node
	p.cfg.Emit(e)
}

// describe is "nid=N l64=LOC/PREF,..." and, when there are IPv4 locators, " l32=ADDR/PREF,..."
// (the lab reads the l64 list: lab/dns.go).
func describe(w *desired) string {
	var b strings.Builder
	fmt.Fprintf(&b, "nid=%s l64=", w.nid)
	var l32 []string
	n := 0
	for _, l := range w.locs {
		if ep, ok := encap.Endpoint(l.Locator); ok {
			l32 = append(l32, fmt.Sprintf("%s/%d", ep.Addr(), l.Preference))
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		fmt.Fprintf(&b, "%s/%d", l.Locator, l.Preference)
	}
	if len(l32) > 0 {
		b.WriteString(" l32=" + strings.Join(l32, ","))
	}
	return b.String()
}

// copyRRs deep-copies, since the miekg update helpers rewrite class and TTL in place.
func copyRRs(rrs []dns.RR) []dns.RR {
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		out[i] = dns.Copy(rr)
	}
	return out
}

func containsRdata(set []dns.RR, rr dns.RR) bool {
	return slices.ContainsFunc(set, func(x dns.RR) bool { return dns.IsDuplicate(x, rr) })
}

func sameRdata(a, b []dns.RR) bool {
	if len(a) != len(b) {
		return false
	}
	for _, rr := range a {
		if !containsRdata(b, rr) {
			return false
		}
	}
	return true
}

func sameTTL(s *rrsets, ttl uint32) bool {
	for _, rr := range s.all() {
		if rr.Header().Ttl != ttl {
			return false
		}
	}
	return true
}
