package wire

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// naiveChecksum is a direct, unoptimised RFC 1071 reference.
func naiveChecksum(b []byte) uint16 {
	if len(b)%2 == 1 {
		b = append(b[:len(b):len(b)], 0)
	}
	var sum uint32
	for i := 0; i < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func TestInternetChecksum(t *testing.T) {
	// RFC 1071 s.3 example: the sum of 0001 f203 f4f5 f6f7 is ddf2.
	data := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if got := InternetChecksum(0, data); got != ^uint16(0xddf2) {
		t.Errorf("RFC 1071 example: %#04x, want %#04x", got, ^uint16(0xddf2))
	}
	for _, tc := range []struct {
		name    string
		initial uint32
		data    [][]byte
		want    uint16
	}{
		{"empty", 0, nil, 0xffff},
		{"one odd byte", 0, [][]byte{{0x12}}, ^uint16(0x1200)},
		{"split odd pieces", 0, [][]byte{{0x00}, {0x01, 0xf2}, {0x03}, {}, {0xf4, 0xf5, 0xf6, 0xf7}}, ^uint16(0xddf2)},
		{"initial", 0x0001_0000, [][]byte{{0xff, 0xff}}, ^uint16(0x0001)},
		{"carries fold", 0, [][]byte{{0xff, 0xff, 0xff, 0xff, 0x00, 0x02}}, ^uint16(0x0002)},
	} {
		if got := InternetChecksum(tc.initial, tc.data...); got != tc.want {
			t.Errorf("%s: %#04x, want %#04x", tc.name, got, tc.want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		b := make([]byte, r.IntN(200))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		cut1 := r.IntN(len(b) + 1)
		cut2 := cut1 + r.IntN(len(b)-cut1+1)
		if got, want := InternetChecksum(0, b[:cut1], b[cut1:cut2], b[cut2:]), naiveChecksum(b); got != want {
			t.Fatalf("% x split %d/%d: %#04x, want %#04x", b, cut1, cut2, got, want)
		}
		// Storing the checksum in an even-aligned zero field makes the sum verify.
		if len(b) >= 2 {
			c := make([]byte, len(b)+2)
			copy(c[2:], b)
			binary.BigEndian.PutUint16(c, InternetChecksum(0, c))
			if InternetChecksum(0, c) != 0 {
				t.Fatalf("% x: stored checksum does not verify", c)
			}
		}
	}
}

func TestPseudoHeaderChecksum(t *testing.T) {
	src := netip.MustParseAddr("2001:db8:2::21b:21ff:fe67:97a8")
	dst := netip.MustParseAddr("2001:db8:1::14:4fff:ff20:ee64")
	payload := []byte{0x9c, 0x40, 0x82, 0x35, 0x00, 0x0b, 0x00, 0x00, 'a', 'b', 'c'}
	s, d := src.As16(), dst.As16()
	ph := append(append(append([]byte{}, s[:]...), d[:]...), 0, 0, 0, byte(len(payload)), 0, 0, 0, ProtoUDP)
	want := naiveChecksum(append(ph, payload...))
	got := PseudoHeaderChecksum(src, dst, ProtoUDP, payload)
	if got != want {
		t.Fatalf("PseudoHeaderChecksum = %#04x, want %#04x", got, want)
	}
	binary.BigEndian.PutUint16(payload[6:], got)
	if PseudoHeaderChecksum(src, dst, ProtoUDP, payload) != 0 {
		t.Error("filled-in checksum does not verify")
	}
	if PseudoHeaderChecksum(dst, src, ProtoTCP, payload) == 0 {
		t.Error("checksum verifies under the wrong protocol")
	}
}
