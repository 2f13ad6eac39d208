package wire

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestNIDL64String(t *testing.T) {
	for _, tc := range []struct {
		v    uint64
		want string
	}{
		{0, "0000:0000:0000:0000"},
		{0x00144fffff20ee64, "0014:4fff:ff20:ee64"},
		{0x021b21fffe6797a8, "021b:21ff:fe67:97a8"},
		{0xffffffffffffffff, "ffff:ffff:ffff:ffff"},
		{0x20011111_00000000, "2001:1111:0000:0000"},
	} {
		if got := NID(tc.v).String(); got != tc.want {
			t.Errorf("NID(%#x) = %q, want %q", tc.v, got, tc.want)
		}
		if got := L64(tc.v).String(); got != tc.want {
			t.Errorf("L64(%#x) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestParseNID(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    NID
		wantErr string
	}{
		{in: "0014:4fff:ff20:ee64", want: 0x00144fffff20ee64},
		{in: "0014:4FFF:FF20:EE64", want: 0x00144fffff20ee64},
		{in: "14:4fff:ff20:ee64", want: 0x00144fffff20ee64},
		{in: "0:0:0:0", want: 0},
		{in: "ffff:ffff:ffff:ffff", want: 0xffffffffffffffff},
		{in: "", wantErr: "want 4 colon-separated groups, have 1"},
		{in: "0014:4fff:ff20", wantErr: "want 4 colon-separated groups, have 3"},
		{in: "0014:4fff:ff20:ee64:0001", wantErr: "have 5"},
		{in: "0014::ee64", wantErr: `"::" is not allowed`},
		{in: "::", wantErr: `"::" is not allowed`},
		{in: "0014:4fff:ff20:", wantErr: "group 4"},
		{in: ":4fff:ff20:ee64", wantErr: "group 1"},
		{in: "00014:4fff:ff20:ee64", wantErr: "1 to 4 hex digits"},
		{in: "0014:4fgf:ff20:ee64", wantErr: "not a hex digit"},
		{in: "0014:4fff:ff20:ee6 ", wantErr: "not a hex digit"},
		{in: "+014:4fff:ff20:ee64", wantErr: "not a hex digit"},
		{in: "2001:db8::1", wantErr: `"::"`},
	} {
		got, err := ParseNID(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "parse NID") {
				t.Errorf("ParseNID(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseNID(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseL64(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    L64
		wantErr string
	}{
		{in: "2001:0db8:0001:0000", want: 0x20010db800010000},
		{in: "2001:db8:1:0", want: 0x20010db800010000},
		{in: "2001:db8:1::", want: 0x20010db800010000},
		{in: "2001:db8:1::/64", want: 0x20010db800010000},
		{in: "2001:db8:1:2:0:0:0:0", want: 0x20010db800010002},
		{in: "2001:1111:0000:0000", want: 0x2001111100000000},
		{in: "::/64", want: 0},
		{in: "2001:db8:1::1", wantErr: "low 64 bits are not zero"},
		{in: "2001:db8:1::1/64", wantErr: "low 64 bits are not zero"},
		{in: "2001:db8::/48", wantErr: "prefix length 48, want 64"},
		{in: "2001:db8::/96", wantErr: "prefix length 96, want 64"},
		{in: "10.0.0.0/8", wantErr: "not an IPv6 prefix"},
		{in: "::ffff:10.0.0.0/64", wantErr: "not an IPv6 prefix"},
		{in: "::ffff:0:0", wantErr: "not an IPv6 prefix"},
		{in: "fe80::%eth0", wantErr: "not an IPv6 prefix"},
		{in: "2001:db8::/x", wantErr: "parse L64"},
		{in: "2001:db8:::", wantErr: "parse L64"},
		{in: "2001:db8:1", wantErr: "want 4 colon-separated groups"},
		{in: "2001:db8:1:g", wantErr: "not a hex digit"},
		{in: "", wantErr: "parse L64"},
	} {
		got, err := ParseL64(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "parse L64") {
				t.Errorf("ParseL64(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseL64(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestL64Prefix(t *testing.T) {
	if got, want := L64(0x20010db800010000).Prefix(), netip.MustParsePrefix("2001:db8:1::/64"); got != want {
		t.Errorf("Prefix = %v, want %v", got, want)
	}
}

func TestILVAddr(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		want    ILV
		wantErr bool
	}{
		{addr: "2001:1111::21b:21ff:fe67:97a8", want: ILV{0x2001111100000000, 0x021b21fffe6797a8}},
		{addr: "::", want: ILV{}},
		{addr: "fe80::1%eth0", want: ILV{0xfe80000000000000, 1}},
		{addr: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", want: ILV{0xffffffffffffffff, 0xffffffffffffffff}},
		{addr: "10.1.2.3", wantErr: true},
		{addr: "::ffff:10.1.2.3", wantErr: true},
	} {
		a := netip.MustParseAddr(tc.addr)
		got, err := ILVFromAddr(a)
		if tc.wantErr {
			if err == nil {
				t.Errorf("ILVFromAddr(%v) = %v, want error", a, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ILVFromAddr(%v) = %v, %v; want %v", a, got, err, tc.want)
		}
		if back := got.Addr(); back != a.WithZone("") {
			t.Errorf("ILV %v .Addr() = %v, want %v", got, back, a.WithZone(""))
		}
	}
	if _, err := ILVFromAddr(netip.Addr{}); err == nil {
		t.Error("ILVFromAddr(invalid) succeeded")
	}
}

func TestILVString(t *testing.T) {
	v := ILV{Locator: 0x2001111100000000, NID: 0x021b21fffe6797a8}
	if got, want := v.String(), "2001:1111:0000:0000,021b:21ff:fe67:97a8"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		in      string
		wantErr string
	}{
		{in: "2001:1111:0000:0000,021b:21ff:fe67:97a8"},
		{in: "2001:1111::, 021b:21ff:fe67:97a8"},
		{in: "2001:1111::/64,21b:21ff:fe67:97a8"},
		{in: "2001:1111::21b:21ff:fe67:97a8"},
		{in: "2001:1111:0:21b:21ff:fe67:97a8:1:2", wantErr: "want L64,NID or an IPv6 address"},
		{in: "10.0.0.1", wantErr: "not an IPv6 address"},
		{in: "2001:1111::1,021b:21ff:fe67:97a8", wantErr: "low 64 bits"},
		{in: "2001:1111::,021b::97a8", wantErr: `"::"`},
		{in: "", wantErr: "parse I-LV"},
	} {
		got, err := ParseILV(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseILV(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != v {
			t.Errorf("ParseILV(%q) = %v, %v; want %v", tc.in, got, err, v)
		}
	}
}

func TestNIDFromMAC(t *testing.T) {
	for _, tc := range []struct {
		mac     string
		want    NID
		wantErr bool
	}{
		// RFC 4291 Appendix A: 00:1b:21:67:97:a8 -> 021b:21ff:fe67:97a8 (the
		// thesis example host).
		{mac: "00:1b:21:67:97:a8", want: 0x021b21fffe6797a8},
		{mac: "02:00:00:00:00:01", want: 0x000000fffe000001},
		{mac: "ff:ff:ff:ff:ff:ff", want: 0xfdfffffffeffffff},
		{mac: "00:1b:21:ff:fe:67:97:a8", want: 0x021b21fffe6797a8},
		{mac: "02:11:22:33:44:55:66:77", want: 0x0011223344556677},
		{mac: "00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00", wantErr: true},
	} {
		mac, err := net.ParseMAC(tc.mac)
		if err != nil {
			t.Fatal(err)
		}
		got, err := NIDFromMAC(mac)
		if tc.wantErr {
			if err == nil {
				t.Errorf("NIDFromMAC(%v) = %v, want error", mac, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("NIDFromMAC(%v) = %v, %v; want %v", mac, got, err, tc.want)
		}
	}
	for _, bad := range []net.HardwareAddr{nil, {1, 2, 3}, {1, 2, 3, 4, 5, 6, 7}} {
		if got, err := NIDFromMAC(bad); err == nil {
			t.Errorf("NIDFromMAC(% x) = %v, want error", []byte(bad), got)
		}
	}
}

func TestRandomNID(t *testing.T) {
	seen := map[NID]bool{}
	var ones, zeros NID = 0, ^NID(0)
	for range 256 {
		n, err := RandomNID()
		if err != nil {
			t.Fatal(err)
		}
		if n&ulBit != 0 {
			t.Fatalf("RandomNID %v has the u/l bit set", n)
		}
		if seen[n] {
			t.Fatalf("RandomNID repeated %v", n)
		}
		seen[n] = true
		ones |= n
		zeros &= n
	}
	// Every bit but u/l must take both values across 256 draws.
	if ones != ^NID(ulBit) || zeros != 0 {
		t.Errorf("bits never set %v, bits always set %v", ^ones, zeros)
	}
}

func FuzzParseNID(f *testing.F) {
	for _, s := range []string{"0014:4fff:ff20:ee64", "0:0:0:0", "FFFF:ffff:FfFf:0", "::", "1:2:3", "1:2:3:4:5", "12345:0:0:0", ":::", "0014:4fff:ff20:ee6g"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseNID(s)
		if err != nil {
			return
		}
		str := n.String()
		if len(str) != 19 || strings.Count(str, ":") != 3 {
			t.Fatalf("%q -> %v: bad presentation form", s, str)
		}
		back, err := ParseNID(str)
		if err != nil || back != n {
			t.Fatalf("%q -> %v -> %v, %v", s, str, back, err)
		}
		if !strings.EqualFold(s, str) && len(s) == 19 {
			t.Fatalf("full-width %q printed as %q", s, str)
		}
	})
}

func FuzzParseL64(f *testing.F) {
	for _, s := range []string{"2001:0db8:0001:0000", "2001:db8:1::", "2001:db8:1::/64", "2001:db8::/48", "2001:db8::1", "::ffff:1.2.3.4", "fe80::%x", "1:2:3:4:5:6:7:8", "/", "1:2:3:4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseL64(s)
		if err != nil {
			return
		}
		for _, form := range []string{l.String(), l.Prefix().String(), l.Prefix().Addr().String()} {
			back, err := ParseL64(form)
			if err != nil || back != l {
				t.Fatalf("%q -> %v -> %q -> %v, %v", s, l, form, back, err)
			}
		}
	})
}

func FuzzParseILV(f *testing.F) {
	for _, s := range []string{"2001:1111:0000:0000,021b:21ff:fe67:97a8", "2001:1111::21b:21ff:fe67:97a8", "::,0:0:0:0", "1.2.3.4", ",", "2001::/64,1:2:3:4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseILV(s)
		if err != nil {
			return
		}
		back, err := ParseILV(v.String())
		if err != nil || back != v {
			t.Fatalf("%q -> %v -> %v, %v", s, v, back, err)
		}
		back, err = ILVFromAddr(v.Addr())
		if err != nil || back != v {
			t.Fatalf("%q -> %v -> %v -> %v, %v", s, v, v.Addr(), back, err)
		}
	})
}

func FuzzNIDFromMAC(f *testing.F) {
	f.Add([]byte{0, 0x1b, 0x21, 0x67, 0x97, 0xa8})
	f.Add([]byte{2, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, mac []byte) {
		n, err := NIDFromMAC(mac)
		if (err == nil) != (len(mac) == 6 || len(mac) == 8) {
			t.Fatalf("% x: err %v", mac, err)
		}
		if err != nil {
			return
		}
		// Inverting the u/l bit again gives back the EUI-64 (RFC 4291 App. A).
		var eui [8]byte
		for i := range 8 {
			eui[i] = byte(uint64(n^ulBit) >> (56 - 8*i))
		}
		if len(mac) == 8 && !bytes.Equal(eui[:], mac) || len(mac) == 6 && (!bytes.Equal(eui[:3], mac[:3]) || !bytes.Equal(eui[5:], mac[3:]) || eui[3] != 0xff || eui[4] != 0xfe) {
			t.Fatalf("% x -> %v", mac, n)
		}
	})
}
