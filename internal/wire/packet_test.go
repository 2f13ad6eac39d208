package wire

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"testing"
)

var (
	pktMN = ILV{Locator: 0x20010db800020000, NID: 0x021b21fffe6797a8}
	pktCN = ILV{Locator: 0x20010db800010000, NID: 0x00144fffff20ee64}
)

// rawPacket builds IPv6 | ext... | l4 with the payload length filled in.
func rawPacket(next uint8, rest ...[]byte) []byte {
	body := slices.Concat(rest...)
	return append(IPv6Header{PayloadLen: uint16(len(body)), NextHeader: next, HopLimit: 9, Src: pktMN.Addr(), Dst: pktCN.Addr()}.Append(nil), body...)
}

func TestParsePacket(t *testing.T) {
	n4 := mustNonce(t, 0xde, 0xad, 0xbe, 0xef)
	n12 := mustNonce(t, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
	udp := AppendUDP(nil, pktMN.Addr(), pktCN.Addr(), 1, 2, []byte("hi"))
	hbh := []byte{ProtoDestOpts, 0, 1, 4, 0, 0, 0, 0}
	frag := func(next uint8, off uint16) []byte {
		return []byte{next, 0, byte(off << 3 >> 8), byte(off << 3), 0, 0, 0, 1}
	}
	for _, tc := range []struct {
		name       string
		pkt        []byte
		wantProto  uint8
		wantOffset int
		wantNonce  Nonce
		wantErr    string
	}{
		{name: "ILNP UDP, 4-byte nonce", pkt: AppendILNPPacket(nil, pktMN, pktCN, n4, ProtoUDP, udp), wantProto: ProtoUDP, wantOffset: 48, wantNonce: n4},
		{name: "ILNP UDP, 12-byte nonce", pkt: AppendILNPPacket(nil, pktMN, pktCN, n12, ProtoUDP, udp), wantProto: ProtoUDP, wantOffset: 56, wantNonce: n12},
		{name: "trailing link padding", pkt: append(AppendILNPPacket(nil, pktMN, pktCN, n4, ProtoUDP, udp), 0, 0, 0), wantProto: ProtoUDP, wantOffset: 48, wantNonce: n4},
		{name: "plain IPv6", pkt: rawPacket(ProtoUDP, udp), wantProto: ProtoUDP, wantOffset: 40},
		{name: "hop-by-hop then nonce", pkt: rawPacket(ProtoHopByHop, hbh, AppendNonceHeader(nil, ProtoUDP, n4), udp), wantProto: ProtoUDP, wantOffset: 56, wantNonce: n4},
		{name: "padding-only DO then nonce DO", pkt: rawPacket(ProtoDestOpts, AppendNonceHeader(nil, ProtoRouting, Nonce{}), []byte{ProtoDestOpts, 0, 0, 0, 0, 0, 0, 0}, AppendNonceHeader(nil, ProtoUDP, n4), udp),
			wantProto: ProtoUDP, wantOffset: 64, wantNonce: n4},
		{name: "first fragment", pkt: rawPacket(ProtoFragment, frag(ProtoDestOpts, 0), AppendNonceHeader(nil, ProtoUDP, n4), udp), wantProto: ProtoUDP, wantOffset: 56, wantNonce: n4},
		{name: "later fragment", pkt: rawPacket(ProtoFragment, frag(ProtoUDP, 3), []byte{1, 2, 3}), wantProto: ProtoUDP, wantOffset: 48},
		{name: "no next header", pkt: rawPacket(ProtoNoNext), wantProto: ProtoNoNext, wantOffset: 40},

		{name: "short", pkt: make([]byte, 20), wantErr: "20 bytes, want 40"},
		{name: "payload length too long", pkt: AppendILNPPacket(nil, pktMN, pktCN, n4, ProtoUDP, udp)[:50], wantErr: "payload length 18, only 10 bytes"},
		{name: "DO header cut by payload length", pkt: rawPacket(ProtoDestOpts, []byte{ProtoUDP, 1, 0x8b, 4, 1, 2, 3, 4}), wantErr: "says 16 bytes, have 8"},
		{name: "two nonces in two headers", pkt: rawPacket(ProtoDestOpts, AppendNonceHeader(nil, ProtoDestOpts, n4), AppendNonceHeader(nil, ProtoUDP, n4), udp), wantErr: "second nonce option in the header at offset 48"},
		{name: "truncated hop-by-hop", pkt: rawPacket(ProtoHopByHop, []byte{ProtoUDP, 1, 0, 0, 0, 0, 0, 0}), wantErr: "extension header 0 at offset 40 truncated"},
		{name: "truncated routing", pkt: rawPacket(ProtoRouting, []byte{ProtoUDP}), wantErr: "extension header 43 at offset 40 truncated"},
		{name: "truncated fragment", pkt: rawPacket(ProtoFragment, []byte{ProtoUDP, 0, 0, 0}), wantErr: "fragment header at offset 40 truncated"},
		{name: "header loop", pkt: rawPacket(ProtoHopByHop, bytes.Repeat([]byte{ProtoHopByHop, 0, 1, 4, 0, 0, 0, 0}, 10)), wantErr: "more than 8 extension headers"},
	} {
		p, err := ParsePacket(tc.pkt)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "packet: ") {
				t.Errorf("%s: ParsePacket = %+v, %v; want error containing %q", tc.name, p, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: ParsePacket(% x): %v", tc.name, tc.pkt, err)
			continue
		}
		n, ok := p.Nonce()
		if p.Proto != tc.wantProto || p.Offset != tc.wantOffset || n != tc.wantNonce || ok == tc.wantNonce.IsZero() {
			t.Errorf("%s: proto %d offset %d nonce %v %v; want %d %d %v", tc.name, p.Proto, p.Offset, n, ok, tc.wantProto, tc.wantOffset, tc.wantNonce)
		}
		if p.Proto == ProtoUDP && p.Offset == len(tc.pkt)-len(udp)-boolInt(tc.name == "trailing link padding")*3 {
			if !bytes.Equal(p.UpperLayer(tc.pkt), udp) {
				t.Errorf("%s: upper layer % x, want % x", tc.name, p.UpperLayer(tc.pkt), udp)
			}
			if ok, err := p.ChecksumOK(tc.pkt); !ok || err != nil {
				t.Errorf("%s: UDP checksum %v %v", tc.name, ok, err)
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestPacketChecksumOK(t *testing.T) {
	n := mustNonce(t, 1, 2, 3, 4)
	lu, err := luTwo.Marshal(pktMN.Addr(), pktCN.Addr())
	if err != nil {
		t.Fatal(err)
	}
	udp := AppendUDP(nil, pktMN.Addr(), pktCN.Addr(), 7, 7, nil)
	zeroUDP := slices.Clone(udp)
	zeroUDP[6], zeroUDP[7] = 0, 0
	badUDP := slices.Clone(udp)
	badUDP[0]++
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[16:], PseudoHeaderChecksum(pktMN.Addr(), pktCN.Addr(), ProtoTCP, tcp))
	for _, tc := range []struct {
		name    string
		proto   uint8
		l4      []byte
		want    bool
		wantErr string
	}{
		{"LU", ProtoICMPv6, lu, true, ""},
		{"UDP", ProtoUDP, udp, true, ""},
		{"TCP", ProtoTCP, tcp, true, ""},
		{"UDP bad", ProtoUDP, badUDP, false, ""},
		{"UDP zero checksum", ProtoUDP, zeroUDP, false, ""},
		{"TCP truncated", ProtoTCP, tcp[:17], false, "truncated (17 bytes)"},
		{"no checksum", ProtoNoNext, nil, false, "no known checksum"},
	} {
		pkt := AppendILNPPacket(nil, pktMN, pktCN, n, tc.proto, tc.l4)
		p, err := ParsePacket(pkt)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ok, err := p.ChecksumOK(pkt)
		if ok != tc.want || (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: ChecksumOK = %v, %v; want %v %q", tc.name, ok, err, tc.want, tc.wantErr)
		}
	}
	// A packet whose locators were rewritten without fixing the checksum fails.
	pkt := AppendILNPPacket(nil, ILV{Locator: 0x20010db800090000, NID: pktMN.NID}, pktCN, n, ProtoUDP, udp)
	p, _ := ParsePacket(pkt)
	if ok, _ := p.ChecksumOK(pkt); ok {
		t.Error("checksum verified after a locator rewrite")
	}
}

func FuzzParsePacket(f *testing.F) {
	n4, _ := NonceFromBytes([]byte{1, 2, 3, 4})
	f.Add(AppendILNPPacket(nil, pktMN, pktCN, n4, ProtoUDP, AppendUDP(nil, pktMN.Addr(), pktCN.Addr(), 1, 2, []byte("x"))))
	f.Add(rawPacket(ProtoHopByHop, []byte{ProtoDestOpts, 0, 1, 4, 0, 0, 0, 0}, AppendNonceHeader(nil, ProtoFragment, n4), []byte{ProtoUDP, 0, 0, 8, 0, 0, 0, 1}))
	f.Add(rawPacket(ProtoRouting, []byte{ProtoDestOpts, 0, 0, 0, 0, 0, 0, 0}, AppendNonceHeader(nil, ProtoICMPv6, Nonce{})))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePacket(b)
		if err != nil {
			return
		}
		if p.Offset < IPv6HeaderLen || p.Offset > p.End || p.End > len(b) {
			t.Fatalf("offsets %d/%d of %d bytes", p.Offset, p.End, len(b))
		}
		_, _ = p.ChecksumOK(b)
		n, ok := p.Nonce()
		switch p.Proto {
		case ProtoHopByHop, ProtoRouting, ProtoFragment, ProtoDestOpts:
			ok = false // after a later fragment: the walk stopped early on purpose
		}
		if !ok {
			return
		}
		// parse -> build -> parse keeps the I-LVs, nonce, protocol and payload.
		src, _ := ILVFromAddr(p.IPv6.Src)
		dst, _ := ILVFromAddr(p.IPv6.Dst)
		l4 := p.UpperLayer(b)
		if len(l4) > 60000 {
			return
		}
		out := AppendILNPPacket(nil, src, dst, n, p.Proto, l4)
		q, err := ParsePacket(out)
		if err != nil {
			t.Fatalf("rebuilt % x: %v", out, err)
		}
		n2, ok2 := q.Nonce()
		if !ok2 || n2 != n || q.Proto != p.Proto || !bytes.Equal(q.UpperLayer(out), l4) || q.IPv6.Src != p.IPv6.Src || q.IPv6.Dst != p.IPv6.Dst {
			t.Fatalf("% x -> %+v -> % x -> %+v", b, p, out, q)
		}
	})
}
