package rendezvous

import (
	"testing"

	"github.com/miekg/dns"

	"ilnp/internal/wire"
)

func replyBytes(t testing.TB, rrs ...string) []byte {
	m := new(dns.Msg)
	m.SetQuestion("a.ilnp.test.", dns.TypeL64)
	m.Response = true
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := rr.(*dns.SOA); ok {
			m.Ns = append(m.Ns, rr)
		} else {
			m.Answer = append(m.Answer, rr)
		}
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAnswerRRsFollowsCNAMEAndNegativeTTL(t *testing.T) {
	m := new(dns.Msg)
	if err := m.Unpack(replyBytes(t,
		"a.ilnp.test. 50 IN CNAME b.ilnp.test.",
		"b.ilnp.test. 40 IN CNAME c.ilnp.test.",
		"c.ilnp.test. 60 IN L64 10 2001:0db8:0001:0000",
		"x.ilnp.test. 60 IN L64 10 2001:0db8:0009:0000", // not on the chain
		"ilnp.test. 30 IN SOA ns. host. 1 2 3 4 7")); err != nil {
		t.Fatal(err)
	}
	rrs, neg := answerRRs(m, "a.ilnp.test.", dns.TypeL64)
	if len(rrs) != 1 || rrs[0].Header().Name != "a.ilnp.test." || rrs[0].Header().Ttl != 40 || neg != 7 {
		t.Fatalf("answerRRs = %v neg %d", rrs, neg)
	}
	loop := new(dns.Msg)
	if err := loop.Unpack(replyBytes(t, "a.ilnp.test. 5 IN CNAME b.ilnp.test.", "b.ilnp.test. 5 IN CNAME a.ilnp.test.")); err != nil {
		t.Fatal(err)
	}
	if rrs, _ := answerRRs(loop, "a.ilnp.test.", dns.TypeL64); len(rrs) != 0 {
		t.Fatalf("CNAME loop gave %v", rrs)
	}
}

// FuzzAnswerRRs feeds arbitrary replies through what Lookup does with them: nothing panics,
// every record returned is of the asked type under the asked name, and TTLs never grow.
func FuzzAnswerRRs(f *testing.F) {
	f.Add(replyBytes(f, "a.ilnp.test. 60 IN L64 10 2001:0db8:0001:0000", "a.ilnp.test. 60 IN NID 10 0001:0002:0003:0004"))
	f.Add(replyBytes(f, "a.ilnp.test. 50 IN CNAME b.ilnp.test.", "b.ilnp.test. 60 IN L64 10 2001:0db8:0001:0000"))
	f.Add(replyBytes(f, "a.ilnp.test. 5 IN CNAME a.ilnp.test."))
	f.Add(replyBytes(f, "ilnp.test. 30 IN SOA ns. host. 1 2 3 4 7"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := new(dns.Msg)
		if err := m.Unpack(data); err != nil {
			return
		}
		maxTTL := map[uint16]uint32{}
		for _, rr := range m.Answer {
			maxTTL[rr.Header().Rrtype] = max(maxTTL[rr.Header().Rrtype], rr.Header().Ttl)
		}
		var all []dns.RR
		for _, typ := range []uint16{dns.TypeNID, dns.TypeL64} {
			rrs, _ := answerRRs(m, "a.ilnp.test.", typ)
			for _, rr := range rrs {
				h := rr.Header()
				if h.Rrtype != typ || h.Name != "a.ilnp.test." || h.Ttl > maxTTL[typ] {
					t.Fatalf("answerRRs returned %v for type %d", rr, typ)
				}
			}
			all = append(all, rrs...)
		}
		ilvs, err := wire.ILVsFromRRs("a.ilnp.test.", all)
		if err == nil && len(ilvs) == 0 {
			t.Fatal("ILVsFromRRs: no error and no I-LVs")
		}
	})
}
