package encap

import (
	"net/netip"
	"testing"

	"ilnp/internal/wire"
)

func TestL32Mapping(t *testing.T) {
	for _, tc := range []struct {
		ep   string
		want wire.L64
	}{
		{"192.0.2.1:49191", 0x0000_c027_c000_0201},
		{"10.0.0.2:1", 0x0000_0001_0a00_0002},
		{"255.255.255.255:65535", 0x0000_ffff_ffff_ffff},
	} {
		ep := netip.MustParseAddrPort(tc.ep)
		l, err := L32(ep)
		if err != nil || l != tc.want {
			t.Fatalf("L32(%v) = %v, %v; want %v", ep, l, err, tc.want)
		}
		if !IsL32(l) {
			t.Fatalf("IsL32(%v) = false", l)
		}
		back, ok := Endpoint(l)
		if !ok || back != ep {
			t.Fatalf("Endpoint(%v) = %v, %v; want %v", l, back, ok, ep)
		}
	}
}

func TestL32Rejects(t *testing.T) {
	for _, s := range []string{"0.0.0.0:49191", "192.0.2.1:0", "[2001:db8::1]:49191", "[::ffff:192.0.2.1]:49191"} {
		if l, err := L32(netip.MustParseAddrPort(s)); err == nil {
			t.Fatalf("L32(%s) = %v, want an error", s, l)
		}
	}
}

func TestIPv6LocatorsAreNotL32(t *testing.T) {
	for _, l := range []wire.L64{0, 0x20010db8000a0001, 0xfe80000000000000, 0x0001_0000_0a00_0001, 0x0000_c027_0000_0000} {
		if IsL32(l) {
			t.Fatalf("IsL32(%v) = true", l)
		}
		if _, ok := Endpoint(l); ok {
			t.Fatalf("Endpoint(%v) ok", l)
		}
	}
}

func TestMTU(t *testing.T) {
	for _, tc := range []struct {
		link, nonce, mtu, mss int
	}{
		{1500, 4, 1464, 1404},
		{1500, 12, 1456, 1396},
		{9000, 4, 8964, 8904},
	} {
		mtu, err := InnerMTU(tc.link, tc.nonce)
		if err != nil || mtu != tc.mtu {
			t.Fatalf("InnerMTU(%d, %d) = %d, %v; want %d", tc.link, tc.nonce, mtu, err, tc.mtu)
		}
		mss, err := TCPMSS(tc.link, tc.nonce)
		if err != nil || mss != tc.mss {
			t.Fatalf("TCPMSS(%d, %d) = %d, %v; want %d", tc.link, tc.nonce, mss, err, tc.mss)
		}
	}
	if _, err := InnerMTU(1300, 4); err == nil {
		t.Fatal("InnerMTU(1300) below 1280 accepted")
	}
	if _, err := InnerMTU(1500, 8); err == nil {
		t.Fatal("nonce size 8 accepted")
	}
}

func TestFamily(t *testing.T) {
	l, err := L32(netip.MustParseAddrPort("192.0.2.1:49191"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		l    wire.L64
		want string
	}{{l, "ipv4"}, {0x20010db8_00010000, "ipv6"}, {0, "ipv6"}} {
		if got := Family(c.l); got != c.want {
			t.Errorf("Family(%v) = %q, want %q", c.l, got, c.want)
		}
	}
}
