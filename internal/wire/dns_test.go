package wire

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func mustRRs(t testing.TB, lines ...string) []dns.RR {
	t.Helper()
	var rrs []dns.RR
	for _, l := range lines {
		rr, err := dns.NewRR(l)
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		rrs = append(rrs, rr)
	}
	return rrs
}

// The zone text follows RFC 6742 s.2 presentation formats.
var mnZone = []string{
	"mn.example.org. 300 IN NID 10 021b:21ff:fe67:97a8",
	"mn.example.org. 60 IN L64 20 2001:0db8:0002:0000",
	"MN.example.org. 600 IN L64 10 2001:0db8:0003:0000",
	"mn.example.org. 300 IN NID 20 0014:4fff:ff20:ee64",
	"mn.example.org. 300 IN L32 10 192.0.2.1",
	"mn.example.org. 300 IN LP 5 border.example.org.",
	"mn.example.org. 300 IN AAAA 2001:db8:3::21b:21ff:fe67:97a8",
	"other.example.org. 300 IN L64 1 2001:0db8:0009:0000",
	"other.example.org. 300 IN NID 1 0000:0000:0000:0001",
}

func TestILVsFromRRs(t *testing.T) {
	rrs := mustRRs(t, mnZone...)
	// A chaos-class record for the owner must be ignored.
	rrs = append(rrs, &dns.L64{Hdr: dns.RR_Header{Name: "mn.example.org.", Rrtype: dns.TypeL64, Class: dns.ClassCHAOS, Ttl: 1}, Preference: 0, Locator64: 0xdead})
	got, err := ILVsFromRRs("mn.example.org", rrs)
	if err != nil {
		t.Fatal(err)
	}
	// Lower L64 preference first (RFC 6742), then lower NID preference, then IPv6 before
	// IPv4: the L32 record is an IPv4 locator on the default encapsulation port (issue 14).
	want := []RankedILV{
		{ILV{0x20010db800030000, 0x021b21fffe6797a8}, 10, 10, 300},
		{ILV{0x0000c027c0000201, 0x021b21fffe6797a8}, 10, 10, 300},
		{ILV{0x20010db800030000, 0x00144fffff20ee64}, 10, 20, 300},
		{ILV{0x0000c027c0000201, 0x00144fffff20ee64}, 10, 20, 300},
		{ILV{0x20010db800020000, 0x021b21fffe6797a8}, 20, 10, 60},
		{ILV{0x20010db800020000, 0x00144fffff20ee64}, 20, 20, 60},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ILVsFromRRs =\n%v\nwant\n%v", got, want)
	}
	// The order does not depend on the order of the RRset.
	slices.Reverse(rrs)
	if again, err := ILVsFromRRs("MN.EXAMPLE.ORG.", rrs); err != nil || !slices.Equal(again, want) {
		t.Fatalf("reversed RRset: %v, %v", again, err)
	}

	// A value listed twice keeps its lowest preference and TTL.
	dup := mustRRs(t,
		"h. 100 IN NID 5 0000:0000:0000:0001", "h. 50 IN NID 9 0000:0000:0000:0001",
		"h. 100 IN L64 7 2001:0db8:0000:0001", "h. 200 IN L64 3 2001:0db8:0000:0001")
	if got, err := ILVsFromRRs("h", dup); err != nil || !slices.Equal(got, []RankedILV{{ILV{0x20010db800000001, 1}, 3, 5, 50}}) {
		t.Errorf("duplicates: %v, %v", got, err)
	}

	for _, tc := range []struct {
		name    string
		owner   string
		rrs     []dns.RR
		wantErr string
	}{
		{"no NID", "mn.example.org", mustRRs(t, mnZone[1]), "no NID record for mn.example.org."},
		{"no L64", "mn.example.org", mustRRs(t, mnZone[0]), "no L64 or L32 record for mn.example.org."},
		{"nothing", "mn.example.org", mustRRs(t, mnZone[6:]...), "no NID and no L64"},
		{"no records", "mn.example.org", nil, "no NID and no L64"},
		{"nil record", "x", []dns.RR{nil}, "no NID and no L64"},
		{"empty owner", "", mustRRs(t, mnZone...), "bad owner name"},
		{"bad owner", "a..b", mustRRs(t, mnZone...), "bad owner name"},
	} {
		if got, err := ILVsFromRRs(tc.owner, tc.rrs); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: ILVsFromRRs = %v, %v; want error containing %q", tc.name, got, err, tc.wantErr)
		}
	}
}

func TestRRsFromILVs(t *testing.T) {
	ilvs := []RankedILV{
		{ILV: ILV{0x20010db800020000, 0x021b21fffe6797a8}, Preference: 20, NIDPreference: 10},
		{ILV: ILV{0x20010db800030000, 0x021b21fffe6797a8}, Preference: 10, NIDPreference: 10},
		{ILV: ILV{0x20010db800030000, 0x021b21fffe6797a8}, Preference: 30, NIDPreference: 40}, // worse duplicate
	}
	rrs, err := RRsFromILVs("mn.example.org", 120, ilvs)
	if err != nil {
		t.Fatal(err)
	}
	var text []string
	for _, rr := range rrs {
		text = append(text, rr.String())
	}
	want := []string{
		"mn.example.org.\t120\tIN\tNID\t10 021b:21ff:fe67:97a8",
		"mn.example.org.\t120\tIN\tL64\t10 2001:0DB8:0003:0000",
		"mn.example.org.\t120\tIN\tL64\t20 2001:0DB8:0002:0000",
	}
	if !slices.Equal(text, want) {
		t.Fatalf("RRsFromILVs =\n%s\nwant\n%s", strings.Join(text, "\n"), strings.Join(want, "\n"))
	}
	// The records survive DNS wire format, and come back as the I-LVs.
	m := new(dns.Msg)
	m.SetQuestion("mn.example.org.", dns.TypeL64)
	m.Answer = rrs
	packed, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	var m2 dns.Msg
	if err := m2.Unpack(packed); err != nil {
		t.Fatal(err)
	}
	back, err := ILVsFromRRs("mn.example.org.", m2.Answer)
	if err != nil {
		t.Fatal(err)
	}
	wantBack := []RankedILV{
		{ILV{0x20010db800030000, 0x021b21fffe6797a8}, 10, 10, 120},
		{ILV{0x20010db800020000, 0x021b21fffe6797a8}, 20, 10, 120},
	}
	if !slices.Equal(back, wantBack) {
		t.Fatalf("back = %v, want %v", back, wantBack)
	}

	if _, err := RRsFromILVs("x", 1, nil); err == nil || !strings.Contains(err.Error(), "no I-LVs") {
		t.Errorf("empty: %v", err)
	}
	if _, err := RRsFromILVs("a..b", 1, ilvs); err == nil || !strings.Contains(err.Error(), "bad owner name") {
		t.Errorf("bad name: %v", err)
	}
}

func TestLocatorPointersAndL32(t *testing.T) {
	rrs := mustRRs(t, append(mnZone,
		"mn.example.org. 300 IN LP 1 Border2.example.org.",
		"mn.example.org. 300 IN LP 5 border.example.org.",
		"mn.example.org. 300 IN L32 5 198.51.100.7",
		"other.example.org. 300 IN LP 0 x.example.org.",
	)...)
	lps := LocatorPointers("mn.example.org", rrs)
	if want := []LocatorPointer{{"border2.example.org.", 1}, {"border.example.org.", 5}}; !slices.Equal(lps, want) {
		t.Errorf("LocatorPointers = %v, want %v", lps, want)
	}
	l32 := L32Locators("mn.example.org.", rrs)
	want := []L32Locator{{netip.MustParseAddr("198.51.100.7"), 5}, {netip.MustParseAddr("192.0.2.1"), 10}}
	if !slices.Equal(l32, want) {
		t.Errorf("L32Locators = %v, want %v", l32, want)
	}
	bad := []dns.RR{&dns.L32{Hdr: dns.RR_Header{Name: "a.", Rrtype: dns.TypeL32, Class: dns.ClassINET}, Locator32: nil}}
	if got := L32Locators("a.", bad); len(got) != 0 {
		t.Errorf("L32 with no address: %v", got)
	}
	if LocatorPointers("nobody.", rrs) != nil {
		t.Error("LocatorPointers for an unknown owner")
	}
}

// FuzzILVsFromRRs feeds DNS messages in wire format: any answer section must
// convert without panicking, and RRs -> I-LVs -> RRs -> I-LVs is stable.
func FuzzILVsFromRRs(f *testing.F) {
	seed := func(lines ...string) {
		m := new(dns.Msg)
		m.SetQuestion("mn.example.org.", dns.TypeNID)
		m.Answer = mustRRs(f, lines...)
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(mnZone...)
	seed(mnZone[0], mnZone[1])
	seed(mnZone[2])
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m dns.Msg
		if err := m.Unpack(b); err != nil || len(m.Question) == 0 {
			return
		}
		owner := m.Question[0].Name
		ilvs, err := ILVsFromRRs(owner, m.Answer)
		_ = LocatorPointers(owner, m.Answer)
		_ = L32Locators(owner, m.Answer)
		if err != nil {
			return
		}
		if !slices.IsSortedFunc(ilvs, compareRanked) {
			t.Fatalf("not ordered: %v", ilvs)
		}
		rrs, err := RRsFromILVs(owner, 30, ilvs)
		if err != nil {
			t.Fatalf("%v -> %v", ilvs, err)
		}
		again, err := ILVsFromRRs(owner, rrs)
		if err != nil || len(again) != len(ilvs) {
			t.Fatalf("%v -> %v -> %v, %v", ilvs, rrs, again, err)
		}
		for i := range again {
			a, b := again[i], ilvs[i]
			if a.ILV != b.ILV || a.Preference != b.Preference || a.NIDPreference != b.NIDPreference || a.TTL != 30 {
				t.Fatalf("round trip %d: %v != %v", i, a, b)
			}
		}
	})
}

// TestPresentationMatchesMiekg checks our RFC 6742 text against an
// independent parser: miekg/dns's zone-file reader.
func TestPresentationMatchesMiekg(t *testing.T) {
	for _, v := range []uint64{0, 1, 0x00144fffff20ee64, 0xffffffffffffffff, 0x0a0b0c0d0e0f1011} {
		rrs := mustRRs(t, "h. 1 IN NID 0 "+NID(v).String(), "h. 1 IN L64 0 "+L64(v).String())
		if got := rrs[0].(*dns.NID).NodeID; got != v {
			t.Errorf("miekg reads NID %v as %#x", NID(v), got)
		}
		if got := rrs[1].(*dns.L64).Locator64; got != v {
			t.Errorf("miekg reads L64 %v as %#x", L64(v), got)
		}
		// And we read miekg's text back (it prints L64 in upper case).
		l, err := ParseL64(strings.Fields(rrs[1].String())[5])
		if err != nil || uint64(l) != v {
			t.Errorf("ParseL64(miekg %q) = %v, %v", rrs[1].String(), l, err)
		}
	}
}

// FuzzRRsFromILVs goes the other way: arbitrary I-LVs become records that
// pack into a DNS message, unpack, and give back every I-LV (as part of the
// NID x L64 cross product).
func FuzzRRsFromILVs(f *testing.F) {
	f.Add(uint64(0x20010db800030000), uint64(0x021b21fffe6797a8), uint16(10), uint16(1), uint64(0x20010db800020000), uint64(1), uint16(20), uint16(0), "mn.example.org")
	f.Add(uint64(0), uint64(0), uint16(0), uint16(0), uint64(0), uint64(0), uint16(0), uint16(0), ".")
	f.Fuzz(func(t *testing.T, l1, n1 uint64, p1, np1 uint16, l2, n2 uint64, p2, np2 uint16, name string) {
		in := []RankedILV{
			{ILV: ILV{L64(l1), NID(n1)}, Preference: p1, NIDPreference: np1},
			{ILV: ILV{L64(l2), NID(n2)}, Preference: p2, NIDPreference: np2},
		}
		rrs, err := RRsFromILVs(name, 60, in)
		if err != nil {
			return
		}
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeNID)
		m.Answer = rrs
		packed, err := m.Pack()
		if err != nil {
			return // e.g. a label longer than 63 bytes: not representable
		}
		var m2 dns.Msg
		if err := m2.Unpack(packed); err != nil {
			t.Fatalf("own message does not unpack: %v", err)
		}
		out, err := ILVsFromRRs(m2.Question[0].Name, m2.Answer)
		if err != nil {
			t.Fatalf("%v -> %v: %v", in, m2.Answer, err)
		}
		for _, v := range in {
			if !slices.ContainsFunc(out, func(o RankedILV) bool { return o.ILV == v.ILV }) {
				t.Fatalf("%v lost in %v", v, out)
			}
		}
	})
}
