package rendezvous

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"

	"ilnp/internal/wire"
)

// ErrNoILNP means the name has no usable NID+L64 records (no such name, no NID, or no L64):
// the caller falls back to plain IPv6 (AAAA).
var ErrNoILNP = errors.New("no ILNP (NID and L64) records")

// FinderConfig configures a Finder. Server is required.
type FinderConfig struct {
	Server     string // upstream (recursive or authoritative), "host:port" or address
	Timeout    time.Duration
	Dial       DialFunc
	Now        func() time.Time // clock for the cache; time.Now by default
	MaxEntries int              // cache size; default 1024
}

// Finder looks up NID and L64 records for correspondents, with a small cache.
type Finder struct {
	x          *exchanger
	now        func() time.Time
	maxEntries int

	mu    sync.Mutex
	cache map[string]cacheEntry
}

type cacheEntry struct {
	ilvs    []wire.RankedILV // nil: negative (ErrNoILNP)
	expires time.Time
}

// NewFinder checks the configuration.
func NewFinder(cfg FinderConfig) (*Finder, error) {
	server, err := serverAddr(cfg.Server)
	if err != nil {
		return nil, fmt.Errorf("rendezvous finder: %w", err)
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Finder{
		x:          &exchanger{server: server, dial: cfg.Dial, timeout: cmp.Or(cfg.Timeout, DefaultTimeout)},
		now:        cfg.Now,
		maxEntries: cmp.Or(cfg.MaxEntries, 1024),
		cache:      map[string]cacheEntry{},
	}, nil
}

// Lookup returns name's I-LVs, most preferred first (wire.ILVsFromRRs order), and how long the
// answer may still be used. A name without NID or L64 records gives ErrNoILNP (wrapped; test
// with errors.Is), with the time that negative answer may be cached (RFC 2308). Any other
// error (timeout, SERVFAIL, ...) is an *ExchangeError: the caller should not conclude the
// name is not ILNP. Answers are cached for at most their TTL, counted from when the query was
// sent, so the cache never serves a record after the upstream would have dropped it; TTL 0
// answers are not cached.
func (f *Finder) Lookup(ctx context.Context, name string) ([]wire.RankedILV, time.Duration, error) {
	if _, ok := dns.IsDomainName(name); !ok || name == "" {
		return nil, 0, fmt.Errorf("rendezvous lookup: bad name %q", name)
	}
	name = dns.CanonicalName(name)
	now := f.now()
	f.mu.Lock()
	e, hit := f.cache[name]
	if hit && !now.Before(e.expires) {
		delete(f.cache, name)
		hit = false
	}
	f.mu.Unlock()
	if hit {
		left := e.expires.Sub(now)
		if e.ilvs == nil {
			return nil, left, fmt.Errorf("%s: %w", name, ErrNoILNP)
		}
		return cloneILVs(e.ilvs, left), left, nil
	}

	sent := now
	type result struct {
		rrs    []dns.RR
		negTTL uint32
		err    error
	}
	var nidRes, l64Res, lpRes, l32Res result
	var wg sync.WaitGroup
	for _, q := range []struct {
		t   uint16
		out *result
	}{{dns.TypeNID, &nidRes}, {dns.TypeL64, &l64Res}, {dns.TypeLP, &lpRes}, {dns.TypeL32, &l32Res}} {
		wg.Go(func() {
			q.out.rrs, q.out.negTTL, q.out.err = f.query(ctx, name, q.t)
		})
	}
	wg.Wait()
	if err := cmp.Or(nidRes.err, l64Res.err); err != nil {
		return nil, 0, err
	}
	all := append(nidRes.rrs, l64Res.rrs...)
	// L32 records are IPv4 locators (issue 14); a failed L32 query only leaves them out.
	if l32Res.err == nil {
		all = append(all, l32Res.rrs...)
	}
	pointedNegTTL := uint32(math.MaxUint32)
	if len(nidRes.rrs) > 0 {
		// The LP query only matters when it is the node's sole source of locators.
		if lpRes.err != nil && len(l64Res.rrs) == 0 {
			return nil, 0, lpRes.err
		}
		pointed, neg, err := f.followPointers(ctx, name, lpRes.rrs)
		if err != nil && len(l64Res.rrs) == 0 {
			return nil, 0, err
		}
		all, pointedNegTTL = append(all, pointed...), neg
	}
	ilvs, err := wire.ILVsFromRRs(name, all)
	if err != nil {
		// Negative: cacheable for the shortest of the negative TTLs and of the records that
		// did exist (a NID alone may get its L64 at any moment, e.g. a node coming up).
		ttl := pointedNegTTL
		if len(nidRes.rrs) == 0 {
			ttl = min(ttl, nidRes.negTTL)
		}
		if len(l64Res.rrs) == 0 {
			ttl = min(ttl, l64Res.negTTL)
		}
		for _, rr := range all {
			ttl = min(ttl, rr.Header().Ttl)
		}
		left := f.store(name, nil, sent, ttl)
		return nil, left, fmt.Errorf("%s: %w (%v)", name, ErrNoILNP, err)
	}
	ttl := uint32(math.MaxUint32)
	for _, v := range ilvs {
		ttl = min(ttl, v.TTL)
	}
	left := f.store(name, ilvs, sent, ttl)
	return cloneILVs(ilvs, left), left, nil
}

// maxPointers bounds how many LP targets one lookup follows: each costs a query.
const maxPointers = 4

// followPointers resolves a node's LP records (RFC 6742 s.2.4: the name of the subnetwork
// whose L64 records are the node's locators, e.g. a mobile network's border router) into L64
// records owned by name. A pointed-to locator takes its LP record's preference, so the LP
// preference orders the targets as the RFC says; its TTL is the shorter of the LP's and the
// L64's. Targets are not followed further (an LP at a target is ignored), so a chain or loop
// of pointers costs at most maxPointers queries. neg bounds a negative answer: the shortest
// negative TTL, or LP TTL, of the targets without L64 records; err is the first failed query, if every target failed.
func (f *Finder) followPointers(ctx context.Context, name string, lps []dns.RR) (out []dns.RR, neg uint32, err error) {
	neg = math.MaxUint32
	lpTTL := map[string]uint32{}
	for _, rr := range lps {
		if lp, ok := rr.(*dns.LP); ok {
			target := dns.CanonicalName(lp.Fqdn)
			if old, had := lpTTL[target]; !had || lp.Hdr.Ttl < old {
				lpTTL[target] = lp.Hdr.Ttl
			}
		}
	}
	pointers := wire.LocatorPointers(name, lps)
	if len(pointers) == 0 {
		return nil, neg, nil
	}
	pointers = slices.CompactFunc(pointers, func(a, b wire.LocatorPointer) bool { return a.Target == b.Target })
	pointers = pointers[:min(len(pointers), maxPointers)]
	type answer struct {
		rrs []dns.RR
		neg uint32
		err error
	}
	answers := make([]answer, len(pointers))
	var wg sync.WaitGroup
	for i, p := range pointers {
		wg.Go(func() {
			answers[i].rrs, answers[i].neg, answers[i].err = f.query(ctx, p.Target, dns.TypeL64)
		})
	}
	wg.Wait()
	failed := 0
	for i, p := range pointers {
		a := answers[i]
		switch {
		case a.err != nil:
			failed++
			err = cmp.Or(err, a.err)
			continue
		case len(a.rrs) == 0:
			neg = min(neg, a.neg, lpTTL[p.Target]) // the pointer may change before the target
		}
		for _, rr := range a.rrs {
			l64, ok := rr.(*dns.L64)
			if !ok {
				continue
			}
			out = append(out, &dns.L64{
				Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeL64, Class: dns.ClassINET,
					Ttl: min(l64.Hdr.Ttl, lpTTL[p.Target])},
				Preference: p.Preference,
				Locator64:  l64.Locator64,
			})
		}
	}
	if failed < len(pointers) {
		err = nil
	}
	return out, neg, err
}

// LookupILNP adapts Lookup to the resolver's Source contract (internal/resolver.Source, whose
// PreferredILV is wire.RankedILV): nil, nil for a name that is not ILNP, so the stub passes the
// ordinary AAAA through. An upstream that refuses or does not implement the NID/L64 types also
// means "not ILNP here" rather than a failure; timeouts and SERVFAIL stay errors. Each I-LV's
// TTL is what is left of the answer's TTL: the stub should not answer with a longer one.
func (f *Finder) LookupILNP(ctx context.Context, name string) ([]wire.RankedILV, error) {
	ilvs, _, err := f.Lookup(ctx, name)
	var xe *ExchangeError
	switch {
	case err == nil:
		return ilvs, nil
	case errors.Is(err, ErrNoILNP):
		return nil, nil
	case errors.As(err, &xe) && (xe.Cause == CauseRefused || xe.Cause == CauseFormErr || xe.Cause == CauseNotAuth || xe.Cause == CauseOtherRcode):
		return nil, nil
	}
	return nil, err
}

// cloneILVs copies cached I-LVs, with TTL set to what is left of it.
func cloneILVs(in []wire.RankedILV, left time.Duration) []wire.RankedILV {
	out := make([]wire.RankedILV, len(in))
	copy(out, in)
	for i := range out {
		out[i].TTL = uint32(left / time.Second)
	}
	return out
}

func (f *Finder) store(name string, ilvs []wire.RankedILV, sent time.Time, ttl uint32) time.Duration {
	left := time.Duration(ttl) * time.Second
	if ttl == 0 {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.cache) >= f.maxEntries {
		now := f.now()
		for k, e := range f.cache {
			if !now.Before(e.expires) {
				delete(f.cache, k)
			}
		}
		for k := range f.cache {
			if len(f.cache) < f.maxEntries {
				break
			}
			delete(f.cache, k)
		}
	}
	f.cache[name] = cacheEntry{ilvs: ilvs, expires: sent.Add(left)}
	return left
}

// Flush empties the cache (e.g. when the upstream changes).
func (f *Finder) Flush() {
	f.mu.Lock()
	f.cache = map[string]cacheEntry{}
	f.mu.Unlock()
}

// query asks for one type; see answerRRs for what is taken from the reply.
func (f *Finder) query(ctx context.Context, name string, t uint16) ([]dns.RR, uint32, error) {
	q := new(dns.Msg)
	q.SetQuestion(name, t)
	op := "query " + dns.TypeToString[t]
	r, err := f.x.exchange(ctx, q)
	if r == nil {
		cause := classifyTransport(err)
		return nil, 0, &ExchangeError{Op: op, Name: name, Server: f.x.server, Cause: cause, Rcode: -1, Err: err}
	}
	if err != nil {
		cause := classifyTransport(err)
		return nil, 0, &ExchangeError{Op: op, Name: name, Server: f.x.server, Cause: cause, Rcode: r.Rcode, Err: err}
	}
	switch r.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError:
	default:
		cause, rc := classifyReply(r)
		return nil, 0, &ExchangeError{Op: op, Name: name, Server: f.x.server, Cause: cause, Rcode: rc}
	}
	out, neg := answerRRs(r, name, t)
	return out, neg, nil
}

// answerRRs picks the records of type t for name out of a reply: it follows a CNAME chain
// inside the answer (so records of the chain's target are returned under name, with TTLs
// no longer than the chain's), and reads the negative TTL min(SOA TTL, SOA MINIMUM) from the
// authority section (RFC 2308 s.5), 0 when there is no SOA.
func answerRRs(r *dns.Msg, name string, t uint16) ([]dns.RR, uint32) {
	owner := name
	chainTTL := uint32(math.MaxUint32)
	for range 16 { // bounded against CNAME loops
		next := ""
		for _, rr := range r.Answer {
			if c, ok := rr.(*dns.CNAME); ok && dns.CanonicalName(c.Hdr.Name) == owner {
				next = dns.CanonicalName(c.Target)
				chainTTL = min(chainTTL, c.Hdr.Ttl)
			}
		}
		if next == "" {
			break
		}
		owner = next
	}
	var out []dns.RR
	for _, rr := range r.Answer {
		h := rr.Header()
		if h.Rrtype != t || h.Class != dns.ClassINET || dns.CanonicalName(h.Name) != owner {
			continue
		}
		c := dns.Copy(rr)
		c.Header().Name = name
		c.Header().Ttl = min(c.Header().Ttl, chainTTL)
		out = append(out, c)
	}
	var neg uint32
	for _, rr := range r.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			neg = min(soa.Hdr.Ttl, soa.Minttl)
		}
	}
	return out, neg
}

// Fresh is Lookup without the cache: name's cached answer is dropped first, so the upstream
// is asked now (a correspondent's LUs went unanswered and its records may have just changed).
// The new answer is cached as usual.
func (f *Finder) Fresh(ctx context.Context, name string) ([]wire.RankedILV, time.Duration, error) {
	if _, ok := dns.IsDomainName(name); ok && name != "" {
		f.mu.Lock()
		delete(f.cache, dns.CanonicalName(name))
		f.mu.Unlock()
	}
	return f.Lookup(ctx, name)
}
