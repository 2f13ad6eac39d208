package resolver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

const hostsText = `# ILNP hosts
2001:0db8:0001:0000|10,0014:4fff:ff20:ee64 cn cn.lab
2001:0db8:0009:0000|5,0014:4fff:ff20:ee64 cn cn.lab
2001:0db8:0002:0000|0,0214:4fff:fe20:ee64 mn
::1 localhost
`

var (
	cnNID  = wire.NID(0x00144fff_ff20ee64)
	cnBest = netip.MustParseAddr("2001:db8:9:0:14:4fff:ff20:ee64")
)

type peerCall struct {
	name string
	ilvs []PreferredILV
}

type harness struct {
	srv   *Server
	mu    sync.Mutex
	calls []peerCall
}

func (h *harness) peers() []peerCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]peerCall(nil), h.calls...)
}

func hostsSource(t *testing.T) *HostsSource {
	t.Helper()
	h, err := wire.ParseHosts(strings.NewReader(hostsText), "hosts")
	if err != nil {
		t.Fatal(err)
	}
	return NewHostsSource(h)
}

func serve(t *testing.T, opts Options) *harness {
	t.Helper()
	h := &harness{}
	if !opts.Addr.IsValid() {
		opts.Addr = netip.MustParseAddrPort("127.0.0.1:0")
	}
	opts.OnILNPPeer = func(name string, ilvs []PreferredILV) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.calls = append(h.calls, peerCall{name, ilvs})
	}
	srv, err := Listen(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return")
		}
	})
	return h
}

func query(t *testing.T, addr netip.AddrPort, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: network, Timeout: 3 * time.Second}
	var (
		r   *dns.Msg
		err error
	)
	// The UDP server may take a moment to start reading after Serve is called.
	for i := 0; i < 20; i++ {
		r, _, err = c.Exchange(m, addr.String())
		if err == nil {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s %s %s: %v", network, name, dns.TypeToString[qtype], err)
	return nil
}

func TestAAAAForILNPName(t *testing.T) {
	h := serve(t, Options{Source: hostsSource(t)})
	for _, network := range []string{"udp", "tcp"} {
		r := query(t, h.srv.Addr(), network, "cn", dns.TypeAAAA)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || !r.Authoritative {
			t.Fatalf("%s: %v", network, r)
		}
		aaaa, ok := r.Answer[0].(*dns.AAAA)
		if !ok {
			t.Fatalf("%s: answer %v", network, r.Answer[0])
		}
		// Preference 5 beats 10: lower is more preferred (RFC 6742).
		if got, _ := netip.AddrFromSlice(aaaa.AAAA); got != cnBest {
			t.Fatalf("%s: AAAA %v, want %v", network, got, cnBest)
		}
		if aaaa.Hdr.Ttl != 30 {
			t.Fatalf("TTL %d", aaaa.Hdr.Ttl)
		}
	}
	calls := h.peers()
	if len(calls) != 2 || calls[0].name != "cn" || len(calls[0].ilvs) != 2 ||
		calls[0].ilvs[0].ILV.Addr() != cnBest || calls[0].ilvs[0].Preference != 5 || calls[0].ilvs[1].Preference != 10 {
		t.Fatalf("OnILNPPeer calls %+v", calls)
	}
	// Case-insensitive, alias, keeps the querier's spelling.
	r := query(t, h.srv.Addr(), "udp", "CN.Lab", dns.TypeAAAA)
	if len(r.Answer) != 1 || r.Answer[0].Header().Name != "CN.Lab." {
		t.Fatalf("alias: %v", r)
	}
}

func TestNIDAndL64(t *testing.T) {
	h := serve(t, Options{Source: hostsSource(t)})
	r := query(t, h.srv.Addr(), "udp", "cn", dns.TypeNID)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("NID: %v", r)
	}
	if nid := r.Answer[0].(*dns.NID); wire.NID(nid.NodeID) != cnNID {
		t.Fatalf("NID %x", nid.NodeID)
	}
	r = query(t, h.srv.Addr(), "tcp", "cn", dns.TypeL64)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
		t.Fatalf("L64: %v", r)
	}
	first := r.Answer[0].(*dns.L64)
	if first.Preference != 5 || first.Locator64 != 0x20010db8_00090000 {
		t.Fatalf("L64 order: %v", r.Answer)
	}
	// The records give the same I-LVs back.
	ilvs, err := wire.ILVsFromRRs("cn.", append(query(t, h.srv.Addr(), "udp", "cn", dns.TypeNID).Answer, r.Answer...))
	if err != nil || len(ilvs) != 2 || ilvs[0].ILV.Addr() != cnBest {
		t.Fatalf("I-LVs from answers: %+v %v", ilvs, err)
	}
	if len(h.peers()) != 0 {
		t.Fatalf("NID/L64 queries registered a peer: %+v", h.peers())
	}
	r = query(t, h.srv.Addr(), "udp", "cn", dns.TypeANY)
	if len(r.Answer) != 4 { // AAAA, NID, 2 x L64
		t.Fatalf("ANY: %v", r)
	}
}

func TestAForILNPNameIsEmpty(t *testing.T) {
	h := serve(t, Options{Source: hostsSource(t)})
	for _, qt := range []uint16{dns.TypeA, dns.TypeMX, dns.TypeTXT} {
		r := query(t, h.srv.Addr(), "udp", "mn", qt)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
			t.Fatalf("%s: %v", dns.TypeToString[qt], r)
		}
	}
	if len(h.peers()) != 0 {
		t.Fatal("A query registered a peer")
	}
}

func TestNoUpstreamRefuses(t *testing.T) {
	h := serve(t, Options{Source: hostsSource(t)})
	r := query(t, h.srv.Addr(), "udp", "example.org", dns.TypeAAAA)
	if r.Rcode != dns.RcodeRefused {
		t.Fatalf("rcode %s", dns.RcodeToString[r.Rcode])
	}
	// "localhost" is an ordinary hosts line: not ILNP.
	r = query(t, h.srv.Addr(), "udp", "localhost", dns.TypeAAAA)
	if r.Rcode != dns.RcodeRefused {
		t.Fatalf("localhost rcode %s", dns.RcodeToString[r.Rcode])
	}
	if st := h.srv.Stats(); st.Queries != 2 || st.Failed != 2 || st.ILNP != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// upstream is a fake recursive resolver on loopback answering A 192.0.2.7 for every name.
func upstream(t *testing.T) (netip.AddrPort, *int64) {
	t.Helper()
	var n int64
	var mu sync.Mutex
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		mu.Lock()
		n++
		mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(r)
		m.RecursionAvailable = true
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 99},
			A:   net.IPv4(192, 0, 2, 7),
		})
		_ = w.WriteMsg(m)
	})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: ln, Handler: handler}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return addr, &n
}

func TestForwardToUpstream(t *testing.T) {
	up, n := upstream(t)
	h := serve(t, Options{Source: hostsSource(t), Upstream: up})
	for _, network := range []string{"udp", "tcp"} {
		r := query(t, h.srv.Addr(), network, "example.org", dns.TypeA)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.7" {
			t.Fatalf("%s: %v", network, r)
		}
	}
	// ILNP names never reach the upstream.
	query(t, h.srv.Addr(), "udp", "cn", dns.TypeA)
	if *n != 2 {
		t.Fatalf("upstream saw %d queries, want 2", *n)
	}
	if st := h.srv.Stats(); st.Forwarded != 2 || st.ILNP != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestUpstreamDownIsServfail(t *testing.T) {
	// A port with nothing behind it: bind, note, close.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	pc.Close()
	h := serve(t, Options{Upstream: dead, UpstreamTimeout: 300 * time.Millisecond})
	r := query(t, h.srv.Addr(), "udp", "example.org", dns.TypeAAAA)
	if r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %s", dns.RcodeToString[r.Rcode])
	}
}

type failingSource struct{}

func (failingSource) LookupILNP(context.Context, string) ([]PreferredILV, error) {
	return nil, errors.New("DNS NID lookup timed out")
}

func TestSourceErrorIsServfail(t *testing.T) {
	h := serve(t, Options{Source: failingSource{}})
	r := query(t, h.srv.Addr(), "udp", "cn", dns.TypeAAAA)
	if r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %s", dns.RcodeToString[r.Rcode])
	}
}

func TestMalformedQueries(t *testing.T) {
	h := serve(t, Options{Source: hostsSource(t)})
	c := &dns.Client{Net: "udp", Timeout: 3 * time.Second}
	two := new(dns.Msg)
	two.SetQuestion("cn.", dns.TypeAAAA)
	two.Question = append(two.Question, dns.Question{Name: "mn.", Qtype: dns.TypeAAAA, Qclass: dns.ClassINET})
	r, _, err := c.Exchange(two, h.srv.Addr().String())
	if err != nil || r.Rcode != dns.RcodeFormatError {
		t.Fatalf("two questions: %v %v", r, err)
	}
	upd := new(dns.Msg)
	upd.SetUpdate("lab.")
	r, _, err = c.Exchange(upd, h.srv.Addr().String())
	if err != nil || r.Rcode != dns.RcodeNotImplemented {
		t.Fatalf("update: %v %v", r, err)
	}
	if len(h.peers()) != 0 {
		t.Fatal("malformed query registered a peer")
	}
}

func TestIPv6LoopbackAndEDNS(t *testing.T) {
	c, err := net.ListenPacket("udp", "[::1]:0")
	nstest.Require(t, "an IPv6 loopback address", err)
	c.Close()
	h := serve(t, Options{Addr: netip.MustParseAddrPort("[::1]:0"), Source: hostsSource(t)})
	m := new(dns.Msg)
	m.SetQuestion("cn.", dns.TypeAAAA)
	m.SetEdns0(4096, false)
	r, _, err := (&dns.Client{Net: "udp", Timeout: 3 * time.Second}).Exchange(m, h.srv.Addr().String())
	if err != nil || len(r.Answer) != 1 || r.IsEdns0() == nil {
		t.Fatalf("%v %v", r, err)
	}
}

func TestListenErrors(t *testing.T) {
	if _, err := Listen(Options{}); err == nil {
		t.Fatal("no address accepted")
	}
	h := serve(t, Options{})
	if _, err := Listen(Options{Addr: h.srv.Addr()}); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("address in use: %v", err)
	}
}

func TestHostsReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte(hostsText), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := LoadHostsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ilvs, _ := src.LookupILNP(context.Background(), "mn")
	if len(ilvs) != 1 {
		t.Fatalf("%+v", ilvs)
	}
	if err := os.WriteFile(path, []byte("bogus line here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := src.Reload(path); err == nil || !strings.Contains(err.Error(), path+":1:") {
		t.Fatalf("bad reload: %v", err)
	}
	if ilvs, _ := src.LookupILNP(context.Background(), "mn"); len(ilvs) != 1 {
		t.Fatal("failed reload lost the old entries")
	}
	if _, err := LoadHostsFile(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("missing file accepted")
	}
}

// fakeWriter captures a reply without a socket.
type fakeWriter struct {
	dns.ResponseWriter
	remote net.Addr
	msg    *dns.Msg
}

func (f *fakeWriter) RemoteAddr() net.Addr      { return f.remote }
func (f *fakeWriter) WriteMsg(m *dns.Msg) error { f.msg = m; return nil }

// Any message that unpacks gets an answer that packs, and never a panic.
func FuzzServeDNS(f *testing.F) {
	for _, name := range []string{"cn.", "mn.", "example.org.", ".", "mn.ilnp.test.", "fail."} {
		for _, qt := range []uint16{dns.TypeAAAA, dns.TypeA, dns.TypeNID, dns.TypeL64, dns.TypeANY} {
			m := new(dns.Msg)
			m.SetQuestion(name, qt)
			b, _ := m.Pack()
			f.Add(b)
		}
	}
	h, err := wire.ParseHosts(strings.NewReader(hostsText), "hosts")
	if err != nil {
		f.Fatal(err)
	}
	// Hosts first, then a DNS source (which knows mn.ilnp.test and fails for "fail." names).
	s := &Server{opts: Options{Source: Chain(NewHostsSource(h), DNSSource(fuzzDNS{})), TTL: time.Minute}, log: discard()}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := new(dns.Msg)
		if req.Unpack(b) != nil {
			return
		}
		w := &fakeWriter{remote: &net.UDPAddr{IP: net.IPv6loopback, Port: 5353}}
		s.ServeDNS(context.Background(), w, req)
		if req.Response {
			return
		}
		if w.msg == nil {
			t.Fatal("no reply")
		}
		if _, err := w.msg.Pack(); err != nil {
			t.Fatalf("reply does not pack: %v\n%v", err, w.msg)
		}
	})
}

type fuzzDNS struct{}

func (fuzzDNS) LookupILNP(ctx context.Context, name string) ([]PreferredILV, error) {
	if strings.HasPrefix(name, "fail") {
		return nil, errors.New("lookup server timed out")
	}
	return (&fakeDNS{ttl: 7}).LookupILNP(ctx, name)
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
