package rendezvous

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"ilnp/internal/namedtest"
	"ilnp/internal/nstest"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// env is a real named in namespace "dns" and a client namespace "mn" on one veth link:
// 2001:db8:53::1 (server) and 2001:db8:53::2 (client).
type env struct {
	srv   *namedtest.Server
	mn    *nstest.NS
	dial  DialFunc
	dials atomic.Int64
	key   TSIGKey
}

var serverAddrInNS = netip.MustParseAddr("2001:db8:53::1")

func newEnv(t testing.TB, records ...string) *env {
	t.Helper()
	nstest.RequireTool(t, "named", "dig")
	dnsNS := nstest.New(t, "rdv-dns")
	mn := nstest.New(t, "rdv-mn")
	nstest.Link(t, dnsNS, "srv0", mn, "mn0")
	// Tests cut the link; keep the server's address (and named's socket) across down/up.
	dnsNS.Run("sysctl", "-qw", "net.ipv6.conf.srv0.keep_addr_on_down=1")
	dnsNS.Run("ip", "-6", "addr", "add", "2001:db8:53::1/64", "dev", "srv0", "nodad")
	mn.Run("ip", "-6", "addr", "add", "2001:db8:53::2/64", "dev", "mn0", "nodad")
	srv := namedtest.Start(t, dnsNS, namedtest.Options{
		Listen:      serverAddrInNS,
		UpdateNames: []string{"mn.ilnp.test."},
		Records:     records,
	})
	key, err := LoadTSIGKey(srv.KeyFile, "")
	if err != nil {
		t.Fatalf("key written by namedtest: %v", err)
	}
	e := &env{srv: srv, mn: mn, key: key}
	e.dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		e.dials.Add(1)
		var c net.Conn
		err := mn.Do(func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, address)
			return err
		})
		return c, err
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("named log:\n%s", srv.Log())
		}
	})
	return e
}

func (e *env) server() string { return netip.AddrPortFrom(serverAddrInNS, 53).String() }

// recorder collects slog output and timeline events.
type recorder struct {
	mu     sync.Mutex
	logs   bytes.Buffer
	events []timeline.Event
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logs.Write(p)
}

func (r *recorder) log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logs.String()
}

func (r *recorder) emit(ev timeline.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *recorder) kinds() map[timeline.Kind]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[timeline.Kind]int{}
	for _, ev := range r.events {
		m[ev.Kind]++
	}
	return m
}

// startPublisher runs a publisher for mn.ilnp.test. until the test ends.
func (e *env) startPublisher(t testing.TB, key *TSIGKey, name string, tweak func(*PublisherConfig)) (*Publisher, *recorder) {
	t.Helper()
	rec := &recorder{}
	cfg := PublisherConfig{
		Name: name, Zone: "ilnp.test.", Server: e.server(), Key: key,
		TTL: 1 * time.Second, Timeout: 500 * time.Millisecond,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 400 * time.Millisecond,
		Dial:   e.dial,
		Logger: slog.New(slog.NewTextHandler(rec, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Emit:   rec.emit, Node: "mn",
	}
	if tweak != nil {
		tweak(&cfg)
	}
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("publisher log:\n%s", rec.log())
		}
	})
	return p, rec
}

// queryL64 asks the server directly (from the mn namespace) for name's L64 set.
func (e *env) queryL64(ctx context.Context, name string) (map[wire.L64]uint16, int, error) {
	x := &exchanger{server: e.server(), dial: e.dial, timeout: time.Second}
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeL64)
	q.RecursionDesired = false
	r, err := x.exchange(ctx, q)
	if err != nil {
		return nil, -1, err
	}
	set := map[wire.L64]uint16{}
	for _, rr := range r.Answer {
		if l, ok := rr.(*dns.L64); ok {
			set[wire.L64(l.Locator64)] = l.Preference
		}
	}
	return set, r.Rcode, nil
}

func mustL64(t testing.TB, s string) wire.L64 {
	t.Helper()
	l, err := wire.ParseL64(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func waitPublished(t testing.TB, p *Publisher, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := p.Wait(ctx); err != nil {
		t.Fatalf("publisher did not reach the server: %v (status %+v)", err, p.Status())
	}
}
