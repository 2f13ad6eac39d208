package attack

import (
	"net/netip"
	"testing"

	"ilnp/internal/wire"
)

var (
	tSrc = wire.ILV{Locator: mustL64("2001:db8:2::"), NID: 0x02144ffffe20ee64}
	tDst = wire.ILV{Locator: mustL64("2001:db8:1::"), NID: 0x02144ffffe20cc01}
)

func testNonce(t *testing.T, size int) wire.Nonce {
	t.Helper()
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(0xa0 + i)
	}
	n, err := wire.NonceFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The forged packets are what a real peer would send: the nonce option where asked for,
// transport checksums over the session view (locators zero; without a nonce, plain IPv6's over
// the real addresses), LUs the product's parser reads.
func TestForgedPackets(t *testing.T) {
	for _, c := range []struct {
		name  string
		nonce wire.Nonce
		ext   int // bytes of Destination Options
	}{
		{"no nonce", wire.Nonce{}, 0},
		{"4-byte nonce", testNonce(t, 4), 8},
		{"12-byte nonce", testNonce(t, 12), 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			rst := RST(tSrc, tDst, c.nonce, 5001, 40000, 0xdeadbeef)
			h, err := wire.ParseIPv6Header(rst)
			if err != nil {
				t.Fatal(err)
			}
			wantNH := uint8(wire.ProtoTCP)
			if c.ext > 0 {
				wantNH = wire.ProtoDestOpts
			}
			if h.NextHeader != wantNH || int(h.PayloadLen) != c.ext+20 || h.Src != tSrc.Addr() || h.Dst != tDst.Addr() {
				t.Errorf("RST header %+v", h)
			}
			seg, err := ParseSegment(rst)
			if err != nil {
				t.Fatal(err)
			}
			want := Segment{Src: tSrc.Addr(), Dst: tDst.Addr(), SPort: 5001, DPort: 40000, Seq: 0xdeadbeef, Flags: flagRST}
			if seg != want {
				t.Errorf("RST parsed %+v, want %+v", seg, want)
			}
			l4 := rst[wire.IPv6HeaderLen+c.ext:]
			cs, cd := sessionView(tSrc), sessionView(tDst)
			if c.nonce.IsZero() {
				cs, cd = tSrc.Addr(), tDst.Addr()
			}
			if sum := wire.PseudoHeaderChecksum(cs, cd, wire.ProtoTCP, l4); sum != 0 {
				t.Errorf("RST checksum over %v -> %v: %#04x, want 0", cs, cd, sum)
			}
			udp := UDP(tSrc, tDst, c.nonce, 40000, 7009, []byte("forged"))
			l4 = udp[wire.IPv6HeaderLen+c.ext:]
			if len(l4) != 14 || l4[5] != 14 {
				t.Errorf("UDP datagram %x", l4)
			}
			if sum := wire.PseudoHeaderChecksum(cs, cd, wire.ProtoUDP, l4); sum != 0 {
				t.Errorf("UDP checksum over %v -> %v: %#04x, want 0", cs, cd, sum)
			}
			lu, err := LocatorUpdate(tSrc, tDst, wire.OpAdvertisement, []wire.L64{badLocator}, c.nonce)
			if err != nil {
				t.Fatal(err)
			}
			got, err := wire.ParseLocatorUpdate(lu[wire.IPv6HeaderLen+c.ext:], tSrc.Addr(), tDst.Addr(), wire.LUParseOptions{})
			if err != nil || got.Op != wire.OpAdvertisement || len(got.Locators) != 1 || got.Locators[0].Locator != badLocator {
				t.Errorf("LU parsed %+v, %v", got, err)
			}
			if c.ext > 0 && (lu[wire.IPv6HeaderLen] != wire.ProtoICMPv6 || lu[wire.IPv6HeaderLen+2] != wire.NonceOptionType) {
				t.Errorf("LU's Destination Options %x", lu[wire.IPv6HeaderLen:wire.IPv6HeaderLen+c.ext])
			}
			echo := EchoReply(tSrc, tDst, c.nonce, 1, 2)
			if sum := wire.PseudoHeaderChecksum(tSrc.Addr(), tDst.Addr(), wire.ProtoICMPv6, echo[wire.IPv6HeaderLen+c.ext:]); sum != 0 {
				t.Errorf("Echo Reply checksum %#04x, want 0", sum)
			}
		})
	}
}

func TestParseSegmentRejects(t *testing.T) {
	rst := RST(tSrc, tDst, testNonce(t, 4), 1, 2, 3)
	for _, c := range []struct {
		name string
		pkt  []byte
	}{
		{"empty", nil},
		{"header only", rst[:wire.IPv6HeaderLen]},
		{"truncated TCP", rst[:len(rst)-1]},
		{"UDP", UDP(tSrc, tDst, wire.Nonce{}, 1, 2, nil)},
	} {
		if _, err := ParseSegment(c.pkt); err == nil {
			t.Errorf("%s: parsed", c.name)
		}
	}
}

func FuzzParseSegment(f *testing.F) {
	n, _ := wire.NonceFromBytes([]byte{1, 2, 3, 4})
	f.Add(RST(tSrc, tDst, n, 1, 2, 3))
	f.Add(RST(tSrc, tDst, wire.Nonce{}, 1, 2, 3))
	f.Add([]byte{0x60, 0, 0, 0, 0, 8, 0, 64})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		seg, err := ParseSegment(pkt)
		if err == nil && (!seg.Src.Is6() || seg.Dst == (netip.Addr{})) {
			t.Fatalf("parsed %+v from %x", seg, pkt)
		}
	})
}
