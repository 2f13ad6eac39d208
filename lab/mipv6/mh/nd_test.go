package mh

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"ilnp/internal/wire"
)

// The DAD probe as RFC 4862 s.5.4.2 wants it on the wire: from ::, to the target's
// solicited-node group, hop limit 255, type 135 code 0, the target, no options, a checksum
// over the pseudo-header.
func TestAppendDADSolicitation(t *testing.T) {
	target := netip.MustParseAddr("2001:db8:2::214:4fff:fe20:ee64")
	pkt, err := AppendDADSolicitation(nil, target)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkt) != 40+24 || pkt[0]>>4 != 6 || pkt[6] != 58 || pkt[7] != 255 || binary.BigEndian.Uint16(pkt[4:]) != 24 {
		t.Fatalf("header % x", pkt[:40])
	}
	src, dst := netip.AddrFrom16([16]byte(pkt[8:24])), netip.AddrFrom16([16]byte(pkt[24:40]))
	if src != netip.IPv6Unspecified() || dst != netip.MustParseAddr("ff02::1:ff20:ee64") {
		t.Fatalf("%v -> %v", src, dst)
	}
	icmp := pkt[40:]
	if icmp[0] != 135 || icmp[1] != 0 || netip.AddrFrom16([16]byte(icmp[8:24])) != target {
		t.Fatalf("NS % x", icmp)
	}
	if c := wire.PseudoHeaderChecksum(src, dst, 58, icmp); c != 0 {
		t.Fatalf("checksum residue %#x", c)
	}
	for _, bad := range []string{"::", "ff02::1", "::ffff:192.0.2.1"} {
		if _, err := AppendDADSolicitation(nil, netip.MustParseAddr(bad)); err == nil {
			t.Errorf("target %s accepted", bad)
		}
	}
}

func TestParseNeighborAdvert(t *testing.T) {
	target := netip.MustParseAddr("2001:db8:2::5")
	na := func(typ, code byte, tgt netip.Addr, extra int) []byte {
		b := make([]byte, 24+extra)
		b[0], b[1] = typ, code
		a := tgt.As16()
		copy(b[8:], a[:])
		return b
	}
	for _, c := range []struct {
		name string
		b    []byte
		hop  int
		ok   bool
	}{
		{"valid", na(136, 0, target, 0), 255, true},
		{"with option", na(136, 0, target, 8), 255, true},
		{"hop limit 64: not on link", na(136, 0, target, 0), 64, false},
		{"code 1", na(136, 1, target, 0), 255, false},
		{"solicitation", na(135, 0, target, 0), 255, false},
		{"short", na(136, 0, target, 0)[:20], 255, false},
		{"multicast target", na(136, 0, netip.MustParseAddr("ff02::1"), 0), 255, false},
	} {
		got, err := ParseNeighborAdvert(c.b, c.hop)
		if c.ok != (err == nil) || (c.ok && got != target) || (!c.ok && !errors.Is(err, ErrNotAdvert)) {
			t.Errorf("%s: %v, %v", c.name, got, err)
		}
	}
}

func FuzzParseNeighborAdvert(f *testing.F) {
	f.Add(append([]byte{136, 0, 0, 0, 0x40, 0, 0, 0}, make([]byte, 16)...), 255)
	f.Add([]byte{136}, 255)
	f.Fuzz(func(t *testing.T, b []byte, hop int) {
		target, err := ParseNeighborAdvert(b, hop)
		if err != nil {
			return
		}
		if len(b) < 24 || b[0] != 136 || hop != 255 || target != netip.AddrFrom16([16]byte(b[8:24])) {
			t.Fatalf("accepted % x hop %d as %v", b, hop, target)
		}
	})
}
