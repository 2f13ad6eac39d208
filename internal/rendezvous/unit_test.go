package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"ilnp/internal/wire"
)

func TestNewPublisherRejectsBadConfig(t *testing.T) {
	cases := []struct {
		cfg  PublisherConfig
		want string
	}{
		{PublisherConfig{Name: "", Zone: "ilnp.test.", Server: "::1"}, "bad name"},
		{PublisherConfig{Name: "mn.ilnp.test.", Zone: "a..b", Server: "::1"}, "bad zone"},
		{PublisherConfig{Name: "mn.other.", Zone: "ilnp.test.", Server: "::1"}, "not inside zone"},
		{PublisherConfig{Name: "mn.ilnp.test.", Zone: "ilnp.test."}, "no server"},
		{PublisherConfig{Name: "mn.ilnp.test.", Zone: "ilnp.test.", Server: "::1", TTL: -time.Second}, "TTL"},
	}
	for _, c := range cases {
		if _, err := NewPublisher(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewPublisher(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
	for in, want := range map[string]string{"2001:db8::53": "[2001:db8::53]:53", "[2001:db8::53]:5353": "[2001:db8::53]:5353", "ns.example": "ns.example:53"} {
		if got, err := serverAddr(in); err != nil || got != want {
			t.Errorf("serverAddr(%q) = %q %v, want %q", in, got, err, want)
		}
	}
}

// TestPublishCoalescesLatestWins: with no Run loop, states pile up; only the newest remains,
// the others are counted as superseded, duplicates collapse to the lowest preference, and an
// empty set changes nothing.
func TestPublishCoalescesLatestWins(t *testing.T) {
	p, err := NewPublisher(PublisherConfig{Name: "mn.ilnp.test.", Zone: "ilnp.test.", Server: "::1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 {
		l := wire.L64(i+1) << 48 // outside 0000::/16, which holds IPv4 locators
		if err := p.Publish(ctx, testNID, []LocatorEntry{{l, 10}, {l, 5}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = p.Publish(ctx, testNID, nil)
	st := p.Status()
	if st.Wanted != 3 || st.Published != 0 || st.Stats.Superseded != 2 || st.Stats.Publishes != 3 {
		t.Fatalf("status %+v", st)
	}
	if w := p.want; len(w.locs) != 1 || w.locs[0] != (LocatorEntry{3 << 48, 5}) {
		t.Fatalf("latest state %+v, want only locator 3 at preference 5", w.locs)
	}
}

func TestBackoffGrowsCappedJittered(t *testing.T) {
	p, err := NewPublisher(PublisherConfig{Name: "mn.ilnp.test.", Zone: "ilnp.test.", Server: "::1",
		MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for attempt, base := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 40: time.Second} {
		for range 50 {
			d := p.backoff(attempt)
			if d < base*8/10 || d > base*12/10 {
				t.Fatalf("backoff(%d) = %v, want %v +-20%%", attempt, d, base)
			}
		}
	}
}

func TestClassify(t *testing.T) {
	reply := func(rcode int, tsigErr uint16) *dns.Msg {
		m := new(dns.Msg)
		m.Rcode = rcode
		if tsigErr != 0 {
			m.Extra = append(m.Extra, &dns.TSIG{Hdr: dns.RR_Header{Name: "k.", Rrtype: dns.TypeTSIG, Class: dns.ClassANY}, Error: tsigErr})
		}
		return m
	}
	for _, c := range []struct {
		r     *dns.Msg
		cause Cause
		retry bool
	}{
		{reply(dns.RcodeSuccess, 0), CauseOK, false},
		{reply(dns.RcodeNotAuth, dns.RcodeBadSig), CauseBadSig, false},
		{reply(dns.RcodeNotAuth, dns.RcodeBadKey), CauseBadKey, false},
		{reply(dns.RcodeNotAuth, dns.RcodeBadTime), CauseBadTime, true},
		{reply(dns.RcodeRefused, 0), CauseRefused, false},
		{reply(dns.RcodeNotAuth, 0), CauseNotAuth, false},
		{reply(dns.RcodeNotZone, 0), CauseNotZone, false},
		{reply(dns.RcodeServerFailure, 0), CauseServFail, true},
		{reply(dns.RcodeFormatError, 0), CauseFormErr, false},
		{reply(dns.RcodeNXRrset, 0), CausePrereq, true},
		{reply(dns.RcodeYXRrset, 0), CausePrereq, true},
		{reply(dns.RcodeNotImplemented, 0), CauseOtherRcode, false},
	} {
		got, _ := classifyReply(c.r)
		if got != c.cause || (got != CauseOK && got.retryable() != c.retry) {
			t.Errorf("rcode %d tsig %v: %s (retry %v), want %s (retry %v)", c.r.Rcode, c.r.IsTsig(), got, got.retryable(), c.cause, c.retry)
		}
	}
	timeout := &net.OpError{Op: "read", Net: "udp", Err: &timeoutErr{}}
	for _, c := range []struct {
		err   error
		cause Cause
	}{
		{context.DeadlineExceeded, CauseTimeout},
		{timeout, CauseTimeout},
		{context.Canceled, CauseContextClosed},
		{&net.OpError{Op: "dial", Net: "udp", Err: syscall.ENETUNREACH}, CauseUnreachable},
		{fmt.Errorf("read: %w", syscall.ECONNREFUSED), CauseUnreachable},
		{dns.ErrSig, CauseResponseTSIG},
		{dns.ErrId, CauseMalformed},
		{errors.New("dns: overflow unpacking uint16"), CauseMalformed},
	} {
		if got := classifyTransport(c.err); got != c.cause {
			t.Errorf("classifyTransport(%v) = %s, want %s", c.err, got, c.cause)
		}
	}
	e := &ExchangeError{Op: "update", Name: "mn.ilnp.test.", Server: "[::1]:53", Cause: CauseBadSig, Rcode: dns.RcodeBadSig}
	if s := e.Error(); !strings.Contains(s, "BADSIG") || !strings.Contains(s, "secret differs") {
		t.Errorf("error text %q", s)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
