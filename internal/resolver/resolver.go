// Package resolver is ilnpd's local DNS stub for unmodified applications (resolv.conf points at
// it). Names that an ILNP Source knows (the hosts file, then DNS NID/L64 records: Chain and
// DNSSource) are answered here:
//
//   - AAAA: the IPv6 look-alike address L64|NID of the most preferred I-LV (RFC 6742: the lower
//     preference value is the more preferred), or the address of the node's existing session
//     with that NID (Options.SessionView). Before the answer is sent, OnILNPPeer is called
//     so the daemon can register the peer in the datapath before the application's first
//     packet.
//   - NID, L64 (RFC 6742): the records built from the I-LVs.
//   - A and every other type: NOERROR with no answer (the name exists, it has no such data), so
//     applications use the AAAA and never fall back to a stale IPv4 path.
//
// Other names go to the upstream resolver when one is configured (SERVFAIL if it does not
// answer), else they are REFUSED: a stub must not pretend a name does not exist.
//
// TTLs: ILNP answers carry Options.TTL, or less when the I-LVs come from a DNSSource: never
// more than the NID/L64 records have left, so no application caches a locator longer than the
// node's own records allow (RFC 6741 s.6; with the default TTL 0 nothing is cached).
//
// A DNSSource that fails (timeout, SERVFAIL from the lookup server) does not fail the query:
// it is logged and counted, and the query goes on as for a name that is not ILNP, i.e. the
// ordinary AAAA is forwarded upstream (plain IPv6).
package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"ilnp/internal/wire"
)

// PreferredILV is an I-LV with its preference (lower is more preferred).
type PreferredILV = wire.RankedILV

// Source answers "is this an ILNP name, and with which I-LVs?".
type Source interface {
	// LookupILNP returns the I-LVs of name (no trailing dot, any case), most preferred first,
	// or nil with a nil error when name is not an ILNP name.
	LookupILNP(ctx context.Context, name string) ([]PreferredILV, error)
}

// HostsSource is a Source backed by an ILNP hosts file (wire.ParseHosts); it can be reloaded
// while serving.
type HostsSource struct {
	hosts atomic.Pointer[wire.Hosts]
}

// NewHostsSource serves h.
func NewHostsSource(h wire.Hosts) *HostsSource {
	s := &HostsSource{}
	s.Set(h)
	return s
}

// LoadHostsFile parses the hosts file at path.
func LoadHostsFile(path string) (*HostsSource, error) {
	s := &HostsSource{}
	if err := s.Reload(path); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload replaces the entries with the file at path; on error the old entries stay.
func (s *HostsSource) Reload(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("hosts: %w", err)
	}
	defer f.Close()
	h, err := wire.ParseHosts(f, path)
	if err != nil {
		return err
	}
	s.Set(h)
	return nil
}

// Set replaces the entries.
func (s *HostsSource) Set(h wire.Hosts) { s.hosts.Store(&h) }

// LookupILNP implements Source.
func (s *HostsSource) LookupILNP(_ context.Context, name string) ([]PreferredILV, error) {
	h := s.hosts.Load()
	if h == nil {
		return nil, nil
	}
	entries := h.Entries(name)
	if len(entries) == 0 {
		return nil, nil
	}
	out := make([]PreferredILV, len(entries))
	for i, e := range entries {
		out[i] = PreferredILV{ILV: e.ILV, Preference: e.Preference}
	}
	return out, nil
}

// Chain asks each source in turn: the first that knows the name answers (e.g. the hosts file,
// then DNS). Nil sources are skipped, nested chains flattened.
func Chain(sources ...Source) Source {
	var c chain
	for _, src := range sources {
		switch src := src.(type) {
		case nil:
		case chain:
			c = append(c, src...)
		default:
			c = append(c, src)
		}
	}
	return c
}

type chain []Source

// LookupILNP implements Source (the server itself walks the chain, to know which source
// answered).
func (c chain) LookupILNP(ctx context.Context, name string) ([]PreferredILV, error) {
	for _, src := range c {
		ilvs, err := src.LookupILNP(ctx, name)
		if err != nil || len(ilvs) > 0 {
			return ilvs, err
		}
	}
	return nil, nil
}

// DNSSource marks a Source whose I-LVs come from DNS (rendezvous.Finder): each I-LV's TTL
// field is the seconds it may still be used, which caps the answer's TTL, and a lookup error
// falls back to plain IPv6 forwarding instead of failing the query.
func DNSSource(s Source) Source {
	if s == nil {
		return nil
	}
	return dnsSource{s}
}

type dnsSource struct{ Source }

// Options configure a Server.
type Options struct {
	Addr     netip.AddrPort // where to listen (UDP and TCP); port 0 picks a free port
	Upstream netip.AddrPort // zero: no forwarding, non-ILNP names are REFUSED
	Source   Source         // nil: no ILNP names
	// OnILNPPeer is called (synchronously, before the reply) for every AAAA or ANY answer
	// built from I-LVs. It must be quick and safe for concurrent use.
	OnILNPPeer func(name string, ilvs []PreferredILV)
	// SessionView, when set, returns the address the node's existing ILNP session with nid
	// uses (the session's view: one ILNP Communication Cache entry per NID pair). An AAAA for a
	// name whose most preferred I-LV has that NID is then answered with the view, so that a
	// new connection joins the session and is carried to the peer's current locators with
	// the session's nonces, like the connections already open. (After a move the view's
	// locator may be gone; the current locator would open a second view of the same NID
	// pair, which the datapath does not hold: it would leave as plain IPv6.) NID and L64
	// answers always show the records as found. Quick and safe for concurrent use.
	SessionView func(nid wire.NID) (netip.Addr, bool)
	// TTL of ILNP answers; default 30 s, short because locators move. Answers from a
	// DNSSource get the smaller of this and what the records have left.
	TTL time.Duration
	// UpstreamTimeout bounds one forwarded query; default 2 s.
	UpstreamTimeout time.Duration
	Logger          *slog.Logger
}

// Server is a running-or-ready DNS stub.
type Server struct {
	opts    Options
	log     *slog.Logger
	udp     net.PacketConn
	tcp     net.Listener
	udpSrv  *dns.Server
	tcpSrv  *dns.Server
	served  atomic.Uint64
	ilnp    atomic.Uint64
	forward atomic.Uint64
	failed  atomic.Uint64
	dnsFail atomic.Uint64
}

// Listen binds the UDP and TCP sockets (same port), so a configuration error (address in use,
// no such address) is reported before the daemon goes on.
func Listen(opts Options) (*Server, error) {
	if !opts.Addr.IsValid() {
		return nil, errors.New("resolver: no listen address")
	}
	if opts.TTL <= 0 {
		opts.TTL = 30 * time.Second
	}
	if opts.UpstreamTimeout <= 0 {
		opts.UpstreamTimeout = 2 * time.Second
	}
	s := &Server{opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	// With port 0 the kernel picks the UDP port; TCP must get the same one, which may be taken:
	// try a few times.
	var lastErr error
	for attempt := 0; attempt < 10; attempt++ {
		udp, err := net.ListenPacket("udp", opts.Addr.String())
		if err != nil {
			return nil, fmt.Errorf("resolver: listen udp %v: %w", opts.Addr, err)
		}
		port := udp.LocalAddr().(*net.UDPAddr).Port
		tcp, err := net.Listen("tcp", netip.AddrPortFrom(opts.Addr.Addr(), uint16(port)).String())
		if err != nil {
			udp.Close()
			lastErr = err
			if opts.Addr.Port() != 0 {
				break
			}
			continue
		}
		s.udp, s.tcp = udp, tcp
		return s, nil
	}
	return nil, fmt.Errorf("resolver: listen tcp %v: %w", opts.Addr, lastErr)
}

// Addr is the bound address (useful with port 0).
func (s *Server) Addr() netip.AddrPort {
	return s.udp.LocalAddr().(*net.UDPAddr).AddrPort()
}

// Stats are the stub's counters.
type Stats struct {
	Queries   uint64 `json:"dns_queries"`
	ILNP      uint64 `json:"dns_ilnp_answers"`
	Forwarded uint64 `json:"dns_forwarded"`
	Failed    uint64 `json:"dns_failed"`
	// LookupFailed counts DNSSource lookups that failed and fell back to plain IPv6.
	LookupFailed uint64 `json:"dns_ilnp_lookup_failures"`
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	return Stats{Queries: s.served.Load(), ILNP: s.ilnp.Load(), Forwarded: s.forward.Load(), Failed: s.failed.Load(),
		LookupFailed: s.dnsFail.Load()}
}

// Serve answers queries until ctx is done, then shuts the sockets and returns nil.
func (s *Server) Serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) { s.ServeDNS(ctx, w, r) })
	s.udpSrv = &dns.Server{PacketConn: s.udp, Handler: h, UDPSize: dns.DefaultMsgSize}
	s.tcpSrv = &dns.Server{Listener: s.tcp, Handler: h}
	errc := make(chan error, 2)
	var wg sync.WaitGroup
	for _, srv := range []*dns.Server{s.udpSrv, s.tcpSrv} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		wg.Add(1)
		go func(srv *dns.Server) {
			defer wg.Done()
			if err := srv.ActivateAndServe(); err != nil && ctx.Err() == nil {
				errc <- err
				cancel()
			}
		}(srv)
		select {
		case <-started:
		case err := <-errc:
			cancel()
			s.shutdown()
			wg.Wait()
			return fmt.Errorf("resolver: %w", err)
		}
	}
	<-ctx.Done()
	s.shutdown()
	wg.Wait()
	select {
	case err := <-errc:
		return fmt.Errorf("resolver: %w", err)
	default:
		return nil
	}
}

func (s *Server) shutdown() {
	for _, srv := range []*dns.Server{s.udpSrv, s.tcpSrv} {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = srv.ShutdownContext(sctx)
		cancel()
	}
	s.udp.Close()
	s.tcp.Close()
}

// ServeDNS answers one query (exported for tests and for embedding in another server).
func (s *Server) ServeDNS(ctx context.Context, w dns.ResponseWriter, req *dns.Msg) {
	s.served.Add(1)
	reply := s.answer(ctx, w, req)
	if reply == nil {
		return
	}
	if err := w.WriteMsg(reply); err != nil {
		s.log.Debug("dns reply not sent", "err", err)
	}
}

func (s *Server) fail(req *dns.Msg, rcode int) *dns.Msg {
	s.failed.Add(1)
	m := new(dns.Msg)
	m.SetRcode(req, rcode)
	m.RecursionAvailable = s.opts.Upstream.IsValid()
	return m
}

func (s *Server) answer(ctx context.Context, w dns.ResponseWriter, req *dns.Msg) *dns.Msg {
	if req.Response {
		return nil // never answer answers
	}
	if req.Opcode != dns.OpcodeQuery {
		return s.fail(req, dns.RcodeNotImplemented)
	}
	if len(req.Question) != 1 {
		return s.fail(req, dns.RcodeFormatError)
	}
	q := req.Question[0]
	name := strings.TrimSuffix(q.Name, ".")
	var ilvs []PreferredILV
	ttl := s.opts.TTL
	if s.opts.Source != nil && q.Qclass == dns.ClassINET && name != "" {
		var fromDNS bool
		var err error
		ilvs, fromDNS, err = s.lookup(ctx, name)
		if err != nil {
			s.log.Warn("ILNP name lookup failed", "name", name, "err", err)
			return s.fail(req, dns.RcodeServerFailure)
		}
		if fromDNS {
			for _, v := range ilvs {
				ttl = min(ttl, time.Duration(v.TTL)*time.Second)
			}
		}
	}
	if len(ilvs) > 0 {
		s.ilnp.Add(1)
		return s.answerILNP(req, q, name, ilvs, ttl)
	}
	return s.forwardQuery(ctx, w, req)
}

// lookup walks the sources; fromDNS says the I-LVs came from a DNSSource (their TTLs count).
func (s *Server) lookup(ctx context.Context, name string) (ilvs []PreferredILV, fromDNS bool, err error) {
	sources := []Source{s.opts.Source}
	if c, ok := s.opts.Source.(chain); ok {
		sources = c
	}
	for _, src := range sources {
		d, isDNS := src.(dnsSource)
		if !isDNS {
			ilvs, err := src.LookupILNP(ctx, name)
			if err != nil || len(ilvs) > 0 {
				return ilvs, false, err
			}
			continue
		}
		ilvs, err := d.LookupILNP(ctx, name)
		if err != nil {
			s.dnsFail.Add(1)
			s.log.Warn("ILNP DNS lookup failed; answering the name as plain IPv6", "name", name, "err", err)
			continue
		}
		if len(ilvs) > 0 {
			return ilvs, true, nil
		}
	}
	return nil, false, nil
}

func (s *Server) answerILNP(req *dns.Msg, q dns.Question, name string, ilvs []PreferredILV, ttlDur time.Duration) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = s.opts.Upstream.IsValid()
	if o := req.IsEdns0(); o != nil {
		m.SetEdns0(dns.DefaultMsgSize, o.Do())
	}
	ttl := uint32(max(ttlDur, 0) / time.Second)
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: q.Name, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
	}
	wantAAAA := q.Qtype == dns.TypeAAAA || q.Qtype == dns.TypeANY
	if wantAAAA {
		best := ilvs[0].ILV.Addr()
		if s.opts.SessionView != nil {
			if view, ok := s.opts.SessionView(ilvs[0].ILV.NID); ok {
				best = view
			}
		}
		m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: best.AsSlice()})
	}
	if q.Qtype == dns.TypeNID || q.Qtype == dns.TypeL64 || q.Qtype == dns.TypeANY {
		rrs, err := wire.RRsFromILVs(q.Name, ttl, ilvs)
		if err != nil {
			s.log.Warn("building NID/L64 records", "name", name, "err", err)
			return s.fail(req, dns.RcodeServerFailure)
		}
		for _, rr := range rrs {
			if q.Qtype == dns.TypeANY || rr.Header().Rrtype == q.Qtype {
				rr.Header().Name = q.Name // keep the querier's spelling (0x20 case)
				m.Answer = append(m.Answer, rr)
			}
		}
	}
	if wantAAAA && s.opts.OnILNPPeer != nil {
		s.opts.OnILNPPeer(name, ilvs)
	}
	return m
}

func (s *Server) forwardQuery(ctx context.Context, w dns.ResponseWriter, req *dns.Msg) *dns.Msg {
	if !s.opts.Upstream.IsValid() {
		return s.fail(req, dns.RcodeRefused)
	}
	network := "udp"
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		network = "tcp"
	}
	c := &dns.Client{Net: network, Timeout: s.opts.UpstreamTimeout, UDPSize: dns.DefaultMsgSize}
	ctx, cancel := context.WithTimeout(ctx, s.opts.UpstreamTimeout)
	defer cancel()
	reply, _, err := c.ExchangeContext(ctx, req, s.opts.Upstream.String())
	if err != nil {
		s.log.Info("upstream resolver did not answer", "upstream", s.opts.Upstream, "err", err)
		return s.fail(req, dns.RcodeServerFailure)
	}
	s.forward.Add(1)
	reply.Id = req.Id
	return reply
}
