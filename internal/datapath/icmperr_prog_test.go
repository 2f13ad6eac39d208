package datapath

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"ilnp/internal/wire"
)

// icmpAbout is an ICMPv6 error of type/code with field from a router (src) to A's wire address,
// quoting A's wire-form packet to B's active locator with nonce.
func icmpAbout(h host, typ, code uint8, field uint32, nonce wire.Nonce) (in []byte, src, dst netip.Addr) {
	src = netip.MustParseAddr("2001:db8:99::1")
	dst = h.wireSrc()
	invoking := wire.AppendILNPPacket(nil, wire.ILV{Locator: h.l2, NID: h.nid}, wire.ILV{Locator: h.peer2, NID: h.peer}, nonce,
		wire.ProtoUDP, wire.AppendUDP(nil, zeroLocator(h.wireSrc()), zeroLocator(h.wireDst()), 1, 2, payload))
	msg := append([]byte{typ, code, 0, 0, 0, 0, 0, 0}, invoking...)
	binary.BigEndian.PutUint32(msg[4:], field)
	binary.BigEndian.PutUint16(msg[2:], wire.PseudoHeaderChecksum(src, dst, wire.ProtoICMPv6, msg))
	return frame(ipv6Packet(src, dst, wire.ProtoICMPv6, msg)), src, dst
}

// A router's Packet Too Big about A's packet reaches A's socket as one about the session view:
// outer destination and quoted addresses are the view, the MTU leaves room for the nonce
// header, the checksum verifies; one quoting another nonce is dropped and changes nothing.
func TestPacketTooBigTranslated(t *testing.T) {
	for _, size := range []int{4, 12} {
		d := newDatapath(t, Options{NonceSize: size})
		h := hostA(t, size)
		h.setup(t, d, true)
		in, src, _ := icmpAbout(h, 2, 0, 1400, h.nonce)
		ret, out := d.ingress(t, in)
		if ret != verdictNext {
			t.Fatalf("%d-byte nonce: verdict %d", size, ret)
		}
		p, pkt := parseFrame(t, out)
		l4 := p.UpperLayer(pkt)
		if p.IPv6.Src != src || p.IPv6.Dst != h.viewSrc() {
			t.Fatalf("%d-byte nonce: outer %v -> %v, want %v -> %v", size, p.IPv6.Src, p.IPv6.Dst, src, h.viewSrc())
		}
		if got := wire.PseudoHeaderChecksum(p.IPv6.Src, p.IPv6.Dst, wire.ProtoICMPv6, l4); got != 0 {
			t.Fatalf("%d-byte nonce: ICMPv6 checksum does not verify (%#04x)", size, got)
		}
		hdr := 8
		if size == 12 {
			hdr = 16
		}
		if mtu := binary.BigEndian.Uint32(l4[4:]); mtu != uint32(1400-hdr) {
			t.Fatalf("%d-byte nonce: MTU %d, want %d", size, mtu, 1400-hdr)
		}
		q := l4[8:]
		qs, _ := netip.AddrFromSlice(q[8:24])
		qd, _ := netip.AddrFromSlice(q[24:40])
		if qs != h.viewSrc() || qd != h.viewDst() {
			t.Fatalf("%d-byte nonce: quoted %v -> %v, want the view %v -> %v", size, qs, qd, h.viewSrc(), h.viewDst())
		}
		if c := counter(t, d, "ingress_ptb_translated"); c != 1 {
			t.Fatalf("ingress_ptb_translated = %d", c)
		}

		// Below the IPv6 minimum plus the header: the kernel's floor (RFC 8200 s.5).
		in, _, _ = icmpAbout(h, 2, 0, 1284, h.nonce)
		if _, out := d.ingress(t, in); binary.BigEndian.Uint32(out[14+40+4:]) != 1280 {
			t.Fatalf("%d-byte nonce: MTU %d from 1284, want 1280", size, binary.BigEndian.Uint32(out[14+40+4:]))
		}

		wrong := mustNonce(t, 9, 9, 9, 9)
		if size == 12 {
			wrong = mustNonce(t, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9)
		}
		for _, typ := range []uint8{2, 4} {
			field := uint32(1280)
			if typ == 4 {
				field = 42
			}
			forged, _, _ := icmpAbout(h, typ, map[uint8]uint8{2: 0, 4: 2}[typ], field, wrong)
			if ret, _ := d.ingress(t, forged); ret != verdictDrop {
				t.Fatalf("%d-byte nonce: forged type %d: verdict %d, want drop", size, typ, ret)
			}
		}
		if c := counter(t, d, "ingress_icmp_error_bad_nonce"); c != 2 {
			t.Fatalf("ingress_icmp_error_bad_nonce = %d, want 2", c)
		}
		s, err := d.GetSession(nidA, nidB)
		must(t, err)
		if s.Flags&SessionIPv6Fallback != 0 {
			t.Fatalf("%d-byte nonce: a forged parameter problem set ipv6-fallback", size)
		}
		// A Parameter Problem with our nonce that points elsewhere is not about the option.
		other, _, _ := icmpAbout(h, 4, 2, 41, h.nonce)
		if ret, _ := d.ingress(t, other); ret != verdictDrop {
			t.Fatalf("%d-byte nonce: parameter problem at 41: verdict %d", size, ret)
		}
		if s, _ := d.GetSession(nidA, nidB); s.Flags&SessionIPv6Fallback != 0 {
			t.Fatalf("%d-byte nonce: parameter problem at 41 set ipv6-fallback", size)
		}
		// Plain IPv6 errors (no nonce quoted) are none of ours.
		plain := append([]byte{2, 0, 0, 0, 0, 0, 5, 0x78}, ipv6Packet(h.viewSrc(), netip.MustParseAddr("2001:db8:77::1"), wire.ProtoUDP,
			wire.AppendUDP(nil, h.viewSrc(), netip.MustParseAddr("2001:db8:77::1"), 1, 2, payload))...)
		binary.BigEndian.PutUint16(plain[2:], wire.PseudoHeaderChecksum(src, h.viewSrc(), wire.ProtoICMPv6, plain))
		pin := frame(ipv6Packet(src, h.viewSrc(), wire.ProtoICMPv6, plain))
		if ret, out := d.ingress(t, pin); ret != verdictNext || !bytes.Equal(out, pin) {
			t.Fatalf("%d-byte nonce: plain Packet Too Big: verdict %d, changed %v", size, ret, !bytes.Equal(out, pin))
		}
	}
}
