package encap

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"

	"ilnp/internal/wire"
)

var (
	luSrc = netip.MustParseAddr("2001:db8:b:1:250:b6ff:fe0a:b0c")
	luDst = netip.MustParseAddr("2001:db8:a:1:21b:21ff:fe67:97a8")
)

// The bytes of an LU listing an L64 and an L32, against hand-written RFC 6743 entries.
func TestLocatorUpdateBytes(t *testing.T) {
	entries, err := Entries([]wire.LocatorEntry{{Locator: 0x20010db8000b0001, Preference: 1, Lifetime: 30}},
		[]L32Entry{{Endpoint: netip.MustParseAddrPort("192.0.2.1:49191"), Preference: 2, Lifetime: 60}})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: entries}.Marshal(luSrc, luDst)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0b, 0x00, 0x01, 0, 1, 0, 30, // L64
		0x00, 0x00, 0xc0, 0x27, 192, 0, 2, 1, 0, 2, 0, 60, // L32: 0000 | 49191 | 192.0.2.1
	}
	if msg[4] != 2 || msg[5] != byte(wire.OpAdvertisement) || !bytes.Equal(msg[8:], want) {
		t.Fatalf("LU\n got % x\nwant header n=2 op=1, entries % x", msg, want)
	}
	_, s, err := ParseLocatorUpdate(msg, luSrc, luDst, wire.LUParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.IPv6Only() || len(s.L64) != 1 || len(s.L32) != 1 || s.L32[0].Endpoint != netip.MustParseAddrPort("192.0.2.1:49191") || s.L32[0].Lifetime != 60 {
		t.Fatalf("split %+v", s)
	}
}

func TestSplitLocators(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []wire.LocatorEntry
		l64     int
		l32     int
		wantErr bool
	}{
		{"ipv6 only", []wire.LocatorEntry{{Locator: 0x20010db8000b0001}, {Locator: 0x20010db8000b0002}}, 2, 0, false},
		{"mixed", []wire.LocatorEntry{{Locator: 0x0000c027c0000201}, {Locator: 0x20010db8000b0001}}, 1, 1, false},
		{"ipv4 only", []wire.LocatorEntry{{Locator: 0x0000c027c0000201}}, 0, 1, false},
		{"zero locator", []wire.LocatorEntry{{Locator: 0}}, 0, 0, true},
		{"reserved, zero port", []wire.LocatorEntry{{Locator: 0x00000000c0000201}}, 0, 0, true},
		{"reserved, zero address", []wire.LocatorEntry{{Locator: 0x0000c02700000000}}, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := SplitLocators(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if err == nil && (len(s.L64) != tc.l64 || len(s.L32) != tc.l32) {
				t.Fatalf("split %+v", s)
			}
			if err == nil && s.IPv6Only() != (tc.l32 == 0) {
				t.Fatalf("IPv6Only = %v", s.IPv6Only())
			}
		})
	}
}

func TestEntriesRejectsWrongFamily(t *testing.T) {
	if _, err := Entries([]wire.LocatorEntry{{Locator: 0x0000c027c0000201}}, nil); err == nil {
		t.Fatal("an L32 accepted as L64")
	}
	if _, err := Entries(nil, []L32Entry{{Endpoint: netip.MustParseAddrPort("[2001:db8::1]:1")}}); err == nil {
		t.Fatal("an IPv6 endpoint accepted as L32")
	}
}

func TestWithSource(t *testing.T) {
	private := L32Entry{Endpoint: netip.MustParseAddrPort("10.0.0.2:49191"), Preference: 5, Lifetime: 30}
	nat := netip.MustParseAddrPort("203.0.113.7:61000")
	natL, _ := L32(nat)
	s := WithSource(Split{L32: []L32Entry{private}}, natL)
	want := []L32Entry{private, {Endpoint: nat, Preference: 5, Lifetime: 30}}
	if !slices.Equal(s.L32, want) {
		t.Fatalf("WithSource: %+v, want %+v", s.L32, want)
	}
	if again := WithSource(s, natL); len(again.L32) != 2 {
		t.Fatalf("a listed source added twice: %+v", again.L32)
	}
	if v6 := WithSource(s, 0x20010db8000b0001); len(v6.L32) != 2 {
		t.Fatalf("an IPv6 source added as L32: %+v", v6.L32)
	}
	only6 := WithSource(Split{L64: []wire.LocatorEntry{{Locator: 0x20010db8000b0001, Preference: 3, Lifetime: 20}}}, natL)
	if len(only6.L32) != 1 || only6.L32[0] != (L32Entry{Endpoint: nat, Preference: 3, Lifetime: 20}) {
		t.Fatalf("source of an IPv6-only LU: %+v", only6.L32)
	}
}

// FuzzParseLocatorUpdate: any input is parsed or refused without panicking, and a parsed
// update marshals back to the same locators in the same families.
func FuzzParseLocatorUpdate(f *testing.F) {
	entries, _ := Entries([]wire.LocatorEntry{{Locator: 0x20010db8000b0001, Preference: 1, Lifetime: 30}},
		[]L32Entry{{Endpoint: netip.MustParseAddrPort("192.0.2.1:49191"), Preference: 2, Lifetime: 60}})
	seed, _ := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: entries}.Marshal(luSrc, luDst)
	f.Add(seed)
	f.Add(seed[:20])
	f.Fuzz(func(t *testing.T, msg []byte) {
		lu, s, err := ParseLocatorUpdate(msg, luSrc, luDst, wire.LUParseOptions{ZeroLocatorChecksum: true})
		if err != nil {
			return
		}
		back, err := Entries(s.L64, s.L32)
		if err != nil {
			t.Fatalf("split of %+v does not rebuild: %v", lu.Locators, err)
		}
		if len(back) != len(lu.Locators) {
			t.Fatalf("%d entries rebuilt from %d", len(back), len(lu.Locators))
		}
		s2, err := SplitLocators(back)
		if err != nil || len(s2.L32) != len(s.L32) || len(s2.L64) != len(s.L64) {
			t.Fatalf("round trip changed the families: %+v -> %+v (%v)", s, s2, err)
		}
	})
}

func TestAsSeen(t *testing.T) {
	ep := func(s string) wire.L64 {
		l, err := L32(netip.MustParseAddrPort(s))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	priv, nat, other := ep("10.0.0.2:49191"), ep("198.51.100.1:61000"), ep("10.1.0.2:49191")
	v6 := wire.L64(0x20010db8_00010000)
	e := func(l wire.L64, pref uint16) wire.LocatorEntry {
		return wire.LocatorEntry{Locator: l, Preference: pref, Lifetime: 300}
	}
	for _, c := range []struct {
		name string
		in   []wire.LocatorEntry
		src  wire.L64
		want []wire.LocatorEntry
	}{
		{"behind a NAT", []wire.LocatorEntry{e(priv, 0), e(v6, 1)}, nat, []wire.LocatorEntry{e(nat, 0), e(v6, 1)}},
		{"most preferred listed later", []wire.LocatorEntry{e(v6, 1), e(other, 2), e(priv, 0)}, nat, []wire.LocatorEntry{e(v6, 1), e(other, 2), e(nat, 0)}},
		{"no NAT", []wire.LocatorEntry{e(priv, 0), e(v6, 1)}, priv, []wire.LocatorEntry{e(priv, 0), e(v6, 1)}},
		{"sent over IPv6", []wire.LocatorEntry{e(v6, 0), e(priv, 1)}, v6, []wire.LocatorEntry{e(v6, 0), e(priv, 1)}},
		{"best is IPv6 but src IPv4", []wire.LocatorEntry{e(v6, 0), e(priv, 1)}, nat, []wire.LocatorEntry{e(v6, 0), e(priv, 1)}},
		{"empty", nil, nat, nil},
	} {
		got := AsSeen(c.in, c.src)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: got %+v want %+v", c.name, got, c.want)
		}
	}
	in := []wire.LocatorEntry{e(priv, 0)}
	AsSeen(in, nat)
	if in[0].Locator != priv {
		t.Error("AsSeen changed its input (the ACK must echo the original)")
	}
}
