package resolver

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"ilnp/internal/wire"
)

// fakeDNS stands for rendezvous.Finder: I-LVs with the seconds their records have left.
type fakeDNS struct {
	ttl   uint32
	err   error
	calls atomic.Int64
}

var mnDNS = wire.ILV{Locator: 0x20010db8_00030000, NID: 0x02144fff_fe20ee64}

func (f *fakeDNS) LookupILNP(_ context.Context, name string) ([]PreferredILV, error) {
	f.calls.Add(1)
	if f.err != nil {
		return nil, f.err
	}
	if name != "mn.ilnp.test" {
		return nil, nil
	}
	return []PreferredILV{
		{ILV: mnDNS, Preference: 1, TTL: f.ttl},
		{ILV: wire.ILV{Locator: 0x20010db8_00020000, NID: mnDNS.NID}, Preference: 2, TTL: f.ttl},
	}, nil
}

func ttlOf(t *testing.T, r *dns.Msg) uint32 {
	t.Helper()
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		t.Fatalf("no answer: %v", r)
	}
	ttl := r.Answer[0].Header().Ttl
	for _, rr := range r.Answer {
		if rr.Header().Ttl != ttl {
			t.Fatalf("mixed TTLs: %v", r)
		}
	}
	return ttl
}

// The hosts file answers first (and the DNS source is not asked); a name only in DNS is
// answered from its records, with a TTL no longer than they have left.
func TestChainHostsThenDNS(t *testing.T) {
	for _, tc := range []struct {
		recordTTL uint32
		want      uint32
	}{{0, 0}, {3, 3}, {30, 30}, {3600, 30}} {
		d := &fakeDNS{ttl: tc.recordTTL}
		h := serve(t, Options{Source: Chain(hostsSource(t), DNSSource(d)), TTL: 30 * time.Second})
		r := query(t, h.srv.Addr(), "udp", "cn", dns.TypeAAAA)
		if got := ttlOf(t, r); got != 30 {
			t.Errorf("hosts name: TTL %d, want opts.TTL 30", got)
		}
		if n := d.calls.Load(); n != 0 {
			t.Errorf("DNS asked %d times for a hosts name", n)
		}
		r = query(t, h.srv.Addr(), "udp", "mn.ilnp.test", dns.TypeAAAA)
		if got, _ := netip.AddrFromSlice(r.Answer[0].(*dns.AAAA).AAAA); got != mnDNS.Addr() {
			t.Errorf("AAAA %v, want the most preferred I-LV %v", got, mnDNS.Addr())
		}
		if got := ttlOf(t, r); got != tc.want {
			t.Errorf("records with %d s left: answer TTL %d, want %d", tc.recordTTL, got, tc.want)
		}
		r = query(t, h.srv.Addr(), "udp", "mn.ilnp.test", dns.TypeANY)
		if got := ttlOf(t, r); got != tc.want || len(r.Answer) != 4 { // AAAA, NID, 2 L64
			t.Errorf("ANY: TTL %d (want %d), %d records: %v", got, tc.want, len(r.Answer), r)
		}
		if calls := h.peers(); len(calls) != 3 || calls[1].name != "mn.ilnp.test" || len(calls[1].ilvs) != 2 {
			t.Errorf("OnILNPPeer calls %+v", calls)
		}
	}
}

// A name DNS does not know as ILNP, and a DNS lookup that fails, are both passed through to
// the upstream as plain IPv6; the failure is counted.
func TestChainFallsBackToPlainIPv6(t *testing.T) {
	up, n := upstream(t)
	d := &fakeDNS{ttl: 5}
	h := serve(t, Options{Source: Chain(nil, hostsSource(t), DNSSource(d)), Upstream: up})
	r := query(t, h.srv.Addr(), "udp", "plain.ilnp.test", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || *n != 1 {
		t.Fatalf("not-ILNP name not forwarded: %v (upstream saw %d)", r, *n)
	}
	d.err = errors.New("query NID: i/o timeout")
	r = query(t, h.srv.Addr(), "udp", "mn.ilnp.test", dns.TypeAAAA)
	if r.Rcode != dns.RcodeSuccess || *n != 2 {
		t.Fatalf("failed lookup not passed through: %v (upstream saw %d)", r, *n)
	}
	if st := h.srv.Stats(); st.LookupFailed != 1 || st.Forwarded != 2 || st.ILNP != 0 || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
	if calls := h.peers(); len(calls) != 0 {
		t.Fatalf("peer registered from a failed lookup: %+v", calls)
	}
}

func TestChainFlattens(t *testing.T) {
	a, b := hostsSource(t), &fakeDNS{}
	c := Chain(Chain(a, nil), DNSSource(b), nil)
	if got := c.(chain); len(got) != 2 || got[0] != Source(a) {
		t.Fatalf("chain %#v", got)
	}
	if DNSSource(nil) != nil {
		t.Fatal("DNSSource(nil) is not nil")
	}
	ilvs, err := c.LookupILNP(context.Background(), "mn.ilnp.test")
	if err != nil || len(ilvs) != 2 {
		t.Fatalf("chain lookup: %v %v", ilvs, err)
	}
}

// With a session to the name's NID already open, the AAAA is the session's view (so a new
// connection joins it); NID and L64 still show the records; other NIDs are unaffected.
func TestSessionViewAnswersAAAA(t *testing.T) {
	view := wire.ILV{Locator: 0x20010db8_00020000, NID: mnDNS.NID}.Addr()
	var asked atomic.Int64
	h := serve(t, Options{Source: Chain(hostsSource(t), DNSSource(&fakeDNS{ttl: 5})),
		SessionView: func(nid wire.NID) (netip.Addr, bool) {
			asked.Add(1)
			return view, nid == mnDNS.NID
		}})
	r := query(t, h.srv.Addr(), "udp", "mn.ilnp.test", dns.TypeAAAA)
	if got, _ := netip.AddrFromSlice(r.Answer[0].(*dns.AAAA).AAAA); got != view {
		t.Errorf("AAAA %v, want the session's view %v", got, view)
	}
	r = query(t, h.srv.Addr(), "udp", "mn.ilnp.test", dns.TypeL64)
	if len(r.Answer) != 2 || r.Answer[0].(*dns.L64).Locator64 != uint64(mnDNS.Locator) {
		t.Errorf("L64 answer changed by the session view: %v", r.Answer)
	}
	r = query(t, h.srv.Addr(), "udp", "cn", dns.TypeAAAA)
	if got, _ := netip.AddrFromSlice(r.Answer[0].(*dns.AAAA).AAAA); got != cnBest {
		t.Errorf("cn (no session): AAAA %v, want %v", got, cnBest)
	}
	if calls := h.peers(); len(calls) != 2 || calls[0].ilvs[0].ILV != mnDNS {
		t.Errorf("OnILNPPeer must get the I-LVs as found: %+v", calls)
	}
	if asked.Load() != 2 {
		t.Errorf("SessionView asked %d times, want once per AAAA", asked.Load())
	}
}
