package datapath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"ilnp/internal/wire"
)

var protos = []struct {
	name  string
	proto uint8
}{{"tcp", wire.ProtoTCP}, {"udp", wire.ProtoUDP}, {"icmpv6", wire.ProtoICMPv6}}

var payload = []byte("ILNPv6 keeps the session when the locator changes.")

// Egress: session view -> wire. Locators rewritten to the active ones, the nonce header
// inserted right after the fixed header, the transport checksum right for the wire.
func TestEgressInsertsNonceAndRewritesLocators(t *testing.T) {
	for _, size := range []int{4, 12} {
		for _, pr := range protos {
			t.Run(fmt.Sprintf("%s/nonce%d", pr.name, size), func(t *testing.T) {
				d := newDatapath(t, Options{NonceSize: size})
				h := hostA(t, size)
				h.setup(t, d, true)
				l4 := transport(t, pr.proto, h.viewSrc(), h.viewDst(), payload)
				in := frame(ipv6Packet(h.viewSrc(), h.viewDst(), pr.proto, l4))

				ret, out := d.egress(t, in)
				if ret != verdictRedirect {
					t.Fatalf("verdict %d, want redirect (%d)", ret, verdictRedirect)
				}
				p, pkt := parseFrame(t, out)
				if p.IPv6.Src != h.wireSrc() || p.IPv6.Dst != h.wireDst() {
					t.Fatalf("wire addresses %v -> %v, want %v -> %v", p.IPv6.Src, p.IPv6.Dst, h.wireSrc(), h.wireDst())
				}
				if p.IPv6.NextHeader != wire.ProtoDestOpts {
					t.Fatalf("next header %d after the fixed header, want Destination Options", p.IPv6.NextHeader)
				}
				if n, ok := p.Nonce(); !ok || n != h.nonce {
					t.Fatalf("nonce %v (present %v), want %v", n, ok, h.nonce)
				}
				hdrLen := 8
				if size == 12 {
					hdrLen = 16
				}
				// Byte for byte: the fixed header's other fields, the nonce header, then the
				// original upper layer with only its checksum changed.
				want := wire.IPv6Header{PayloadLen: uint16(hdrLen + len(l4)), NextHeader: wire.ProtoDestOpts, HopLimit: 64,
					Src: h.wireSrc(), Dst: h.wireDst()}.Append(nil)
				want = wire.AppendNonceHeader(want, pr.proto, h.nonce)
				if !bytes.Equal(pkt[:40+hdrLen], want) {
					t.Fatalf("headers\n got % x\nwant % x", pkt[:40+hdrLen], want)
				}
				gotL4 := p.UpperLayer(pkt)
				if len(gotL4) != len(l4) || !equalExceptChecksum(gotL4, l4, pr.proto) {
					t.Fatalf("upper layer changed beyond its checksum:\n got % x\nwant % x", gotL4, l4)
				}
				checkWireChecksum(t, p, pkt)
				if got := counter(t, d, "egress_nonce_inserted"); got != 1 {
					t.Fatalf("egress_nonce_inserted = %d", got)
				}
				s, err := d.GetSession(nidA, nidB)
				must(t, err)
				if s.TxPackets != 1 {
					t.Fatalf("session TxPackets = %d", s.TxPackets)
				}
			})
		}
	}
}

func checksumAt(proto uint8) int {
	switch proto {
	case wire.ProtoTCP:
		return 16
	case wire.ProtoUDP:
		return 6
	}
	return 2
}

func equalExceptChecksum(a, b []byte, proto uint8) bool {
	at := checksumAt(proto)
	return bytes.Equal(a[:at], b[:at]) && bytes.Equal(a[at+2:], b[at+2:])
}

// Ingress: wire -> session view. Nonce verified and removed, locators back to the view,
// checksum right for the socket's addresses.
func TestIngressVerifiesStripsAndRewrites(t *testing.T) {
	for _, size := range []int{4, 12} {
		for _, pr := range protos {
			t.Run(fmt.Sprintf("%s/nonce%d", pr.name, size), func(t *testing.T) {
				d := newDatapath(t, Options{NonceSize: size})
				h := hostA(t, size)
				h.setup(t, d, true)
				from, to := addr(lB2, nidB), addr(lA2, nidA) // B's active locator to A's
				csrc, cdst := zeroLocator(from), zeroLocator(to)
				if pr.proto == wire.ProtoICMPv6 {
					csrc, cdst = from, to
				}
				l4 := transport(t, pr.proto, csrc, cdst, payload)
				in := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, h.peerNonce, pr.proto, l4))

				ret, out := d.ingress(t, in)
				if ret != verdictNext {
					t.Fatalf("verdict %d, want next (pass)", ret)
				}
				p, pkt := parseFrame(t, out)
				viewFrom, viewTo := addr(lB1, nidB), addr(lA1, nidA)
				want := wire.IPv6Header{PayloadLen: uint16(len(l4)), NextHeader: pr.proto, HopLimit: 64, Src: viewFrom, Dst: viewTo}.Append(nil)
				if !bytes.Equal(pkt[:40], want) {
					t.Fatalf("fixed header\n got % x\nwant % x", pkt[:40], want)
				}
				if len(pkt) != 40+len(l4) || !equalExceptChecksum(pkt[40:], l4, pr.proto) {
					t.Fatalf("upper layer changed beyond its checksum")
				}
				checkViewChecksum(t, p, pkt)
				if got := counter(t, d, "ingress_ilnp"); got != 1 {
					t.Fatalf("ingress_ilnp = %d", got)
				}
			})
		}
	}
}

// A's egress output fed to B's ingress gives back exactly what A's socket sent, in both
// directions: the two translations are inverse. Also with IPv6Checksums, where the wire
// checksum is the one plain IPv6 computes over the wire addresses.
func TestRoundTripBetweenTwoHosts(t *testing.T) {
	for _, pr := range protos {
		for _, v6 := range []bool{false, true} {
			testRoundTrip(t, pr.name, pr.proto, v6)
		}
	}
}

func testRoundTrip(t *testing.T, name string, proto uint8, ipv6Checksums bool) {
	if ipv6Checksums {
		name += "/ipv6-checksums"
	}
	t.Run(name, func(t *testing.T) {
		opts := Options{IPv6Checksums: ipv6Checksums}
		da, db := newDatapath(t, opts), newDatapath(t, opts)
		ha, hb := hostA(t, 4), hostB(t, 4)
		ha.setup(t, da, true)
		hb.setup(t, db, true)
		for _, dir := range []struct {
			name     string
			from, to *Datapath
			h        host
		}{{"a-to-b", da, db, ha}, {"b-to-a", db, da, hb}} {
			l4 := transport(t, proto, dir.h.viewSrc(), dir.h.viewDst(), payload)
			orig := frame(ipv6Packet(dir.h.viewSrc(), dir.h.viewDst(), proto, l4))
			ret, onWire := dir.from.egress(t, orig)
			if ret != verdictRedirect {
				t.Fatalf("%s: egress verdict %d", dir.name, ret)
			}
			p, pkt := parseFrame(t, onWire)
			if ipv6Checksums {
				checkViewChecksum(t, p, pkt) // the ordinary pseudo-header of the wire addresses
			} else {
				checkWireChecksum(t, p, pkt)
			}
			ret, back := dir.to.ingress(t, onWire)
			if ret != verdictNext {
				t.Fatalf("%s: ingress verdict %d", dir.name, ret)
			}
			if !bytes.Equal(back, orig) {
				t.Fatalf("%s: round trip changed the packet\n got % x\nwant % x", dir.name, back, orig)
			}
		}
	})
}

func TestIngressWrongNonceDropped(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	ev := events(t, d)
	l4 := tcpSegment(zeroLocator(addr(lB2, nidB)), zeroLocator(addr(lA2, nidA)), payload)
	bad := mustNonce(t, 0xde, 0xad, 0xbe, 0xef)
	in := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, bad, wire.ProtoTCP, l4))
	if ret, _ := d.ingress(t, in); ret != verdictDrop {
		t.Fatalf("verdict %d, want drop", ret)
	}
	if got := counter(t, d, "ingress_bad_nonce"); got != 1 {
		t.Fatalf("ingress_bad_nonce = %d", got)
	}
	e := nextEvent(t, ev, EventBadNonce)
	if e.LocalNID != nidA || e.RemoteNID != nidB || e.Src != addr(lB2, nidB) || e.Dst != addr(lA2, nidA) {
		t.Fatalf("event %+v", e)
	}
	// A 12-byte nonce that starts with the right 4 bytes is still wrong.
	long := mustNonce(t, 0xb1, 0xb2, 0xb3, 0xb4, 0, 0, 0, 0, 0, 0, 0, 0)
	in = frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, long, wire.ProtoTCP, l4))
	if ret, _ := d.ingress(t, in); ret != verdictDrop {
		t.Fatalf("12-byte look-alike: verdict %d, want drop", ret)
	}
}

func TestIngressTwoNoncesDropped(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	ev := events(t, d)
	from, to := addr(lB2, nidB), addr(lA2, nidA)
	l4 := tcpSegment(zeroLocator(from), zeroLocator(to), payload)
	// Two nonce options in one header, and one in each of two headers.
	oneHeader := []byte{wire.ProtoTCP, 1, 0x8b, 4, 0xb1, 0xb2, 0xb3, 0xb4, 0x8b, 4, 0xb1, 0xb2, 0xb3, 0xb4, 1, 0}
	twoHeaders := append(wire.AppendNonceHeader(nil, wire.ProtoDestOpts, h.peerNonce), wire.AppendNonceHeader(nil, wire.ProtoTCP, h.peerNonce)...)
	for i, ext := range [][]byte{oneHeader, twoHeaders} {
		in := frame(ipv6Packet(from, to, wire.ProtoDestOpts, ext, l4))
		if ret, _ := d.ingress(t, in); ret != verdictDrop {
			t.Fatalf("case %d: verdict %d, want drop", i, ret)
		}
	}
	if got := counter(t, d, "ingress_multiple_nonces"); got != 2 {
		t.Fatalf("ingress_multiple_nonces = %d", got)
	}
	nextEvent(t, ev, EventMultipleNonces)
}

// Plain IPv6 (no peer, no session, other addresses) and non-IPv6 frames pass byte for byte.
func TestNonILNPUntouched(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	other := netip.MustParseAddr("2001:db8:99::1")
	plainOut := frame(ipv6Packet(h.viewSrc(), other, wire.ProtoTCP, tcpSegment(h.viewSrc(), other, payload)))
	// Same NIDs but another local address: dual-stack IPv6 between the same hosts.
	otherView := addr(lA2, nidA)
	dualOut := frame(ipv6Packet(otherView, h.viewDst(), wire.ProtoUDP, wire.AppendUDP(nil, otherView, h.viewDst(), 1, 2, payload)))
	plainIn := frame(ipv6Packet(other, h.viewSrc(), wire.ProtoUDP, wire.AppendUDP(nil, other, h.viewSrc(), 1, 2, payload)))
	ipv4 := append([]byte{0x02, 0, 0, 0, 0, 0xb, 0x02, 0, 0, 0, 0, 0xa, 0x08, 0x00}, make([]byte, 40)...)
	ipv4[14] = 0x45
	arp := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0xa, 0x08, 0x06}, make([]byte, 28)...)
	for name, c := range map[string]struct {
		in     []byte
		egress bool
	}{
		"egress-plain": {plainOut, true}, "egress-dual-stack": {dualOut, true}, "egress-ipv4": {ipv4, true},
		"ingress-plain": {plainIn, false}, "ingress-ipv4": {ipv4, false}, "ingress-arp": {arp, false},
	} {
		var ret uint32
		var out []byte
		if c.egress {
			ret, out = d.egress(t, c.in)
		} else {
			ret, out = d.ingress(t, c.in)
		}
		if ret != verdictNext || !bytes.Equal(out, c.in) {
			t.Errorf("%s: verdict %d, changed %v", name, ret, !bytes.Equal(out, c.in))
		}
	}
	if got := counter(t, d, "ingress_pass_ipv6"); got != 1 {
		t.Errorf("ingress_pass_ipv6 = %d, want 1", got)
	}
	if got := counter(t, d, "egress_pass_ipv6"); got != 2 {
		t.Errorf("egress_pass_ipv6 = %d, want 2", got)
	}
	if got := counter(t, d, "ingress_non_ipv6") + counter(t, d, "egress_non_ipv6"); got != 3 {
		t.Errorf("non-IPv6 counted %d times, want 3", got)
	}
}

// Where the peer sends the nonce on every packet (the default), a packet without one between
// the session's NIDs and locators is forged: UDP data and a TCP RST (issue 23, item 1) are
// dropped and counted, on the view locators and the active ones alike. ICMPv6 errors and
// Neighbour Discovery come from the network, and Echo Requests are locator verification's
// challenges (sent past the session): they pass untouched; so does everything once the
// session fell back to plain IPv6.
func TestIngressNoNonceDropped(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	ev := events(t, d)
	from, to := addr(lB2, nidB), addr(lA2, nidA)
	viewFrom, viewTo := addr(lB1, nidB), addr(lA1, nidA)
	rst := tcpSegment(viewFrom, viewTo, nil)
	rst[13] = 0x04
	forged := map[string][]byte{
		"udp":          frame(ipv6Packet(from, to, wire.ProtoUDP, wire.AppendUDP(nil, from, to, 40000, 7009, payload))),
		"udp-view":     frame(ipv6Packet(viewFrom, viewTo, wire.ProtoUDP, wire.AppendUDP(nil, viewFrom, viewTo, 40000, 7009, payload))),
		"tcp-rst-view": frame(ipv6Packet(viewFrom, viewTo, wire.ProtoTCP, rst)),
	}
	for name, in := range forged {
		if ret, _ := d.ingress(t, in); ret != verdictDrop {
			t.Errorf("%s without a nonce: verdict %d, want drop", name, ret)
		}
	}
	if got := counter(t, d, "ingress_missing_nonce"); got != uint64(len(forged)) {
		t.Errorf("ingress_missing_nonce = %d, want %d", got, len(forged))
	}
	if e := nextEvent(t, ev, EventMissingNonce); e.RemoteNID != nidB || e.LocalNID != nidA {
		t.Errorf("event %+v", e)
	}
	unreach := append([]byte{1, 3, 0, 0, 0, 0, 0, 0}, make([]byte, 48)...)
	binary.BigEndian.PutUint16(unreach[2:], wire.PseudoHeaderChecksum(from, to, wire.ProtoICMPv6, unreach))
	ns := append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, to.AsSlice()...)
	binary.BigEndian.PutUint16(ns[2:], wire.PseudoHeaderChecksum(from, to, wire.ProtoICMPv6, ns))
	for name, in := range map[string][]byte{
		"destination-unreachable": frame(ipv6Packet(from, to, wire.ProtoICMPv6, unreach)),
		"neighbour-solicitation":  frame(ipv6Packet(from, to, wire.ProtoICMPv6, ns)),
		"echo-request":            frame(ipv6Packet(from, to, wire.ProtoICMPv6, icmpEcho(from, to, payload))), // a locator challenge
	} {
		if ret, out := d.ingress(t, in); ret != verdictNext || !bytes.Equal(out, in) {
			t.Errorf("%s: verdict %d, changed %v; want it passed untouched", name, ret, !bytes.Equal(out, in))
		}
	}
	s, err := d.GetSession(nidA, nidB)
	must(t, err)
	s.Flags |= SessionIPv6Fallback
	must(t, d.PutSession(s))
	if ret, out := d.ingress(t, forged["udp"]); ret != verdictNext || !bytes.Equal(out, forged["udp"]) {
		t.Errorf("plain IPv6 of a session that fell back: verdict %d", ret)
	}
}

// Extension headers: on egress the nonce goes first, before what the socket added; on ingress
// the nonce header is removed wherever the rest of the chain goes, and a nonce sharing its
// header with another option becomes padding.
func TestExtensionHeaderChains(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)

	// Egress: the socket's own Destination Options (PadN) and a Routing header before UDP.
	udp := wire.AppendUDP(nil, h.viewSrc(), h.viewDst(), 1, 2, payload)
	sockDO := []byte{wire.ProtoRouting, 0, 1, 4, 0, 0, 0, 0}
	rh := []byte{wire.ProtoUDP, 0, 253, 0, 0, 0, 0, 0} // experimental routing type, 0 segments left
	in := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoDestOpts, sockDO, rh, udp))
	if ret, _ := d.egress(t, in); ret != verdictRedirect {
		t.Fatalf("egress verdict %d", ret)
	}
	_, out := d.egress(t, in)
	p, pkt := parseFrame(t, out)
	if n, ok := p.Nonce(); !ok || n != h.nonce || pkt[40] != wire.ProtoDestOpts || !bytes.Equal(pkt[48:64], append(sockDO, rh...)) {
		t.Fatalf("egress chain wrong: % x", pkt[:72])
	}
	checkWireChecksum(t, p, pkt)

	from, to := addr(lB2, nidB), addr(lA2, nidA)
	wudp := wire.AppendUDP(nil, zeroLocator(from), zeroLocator(to), 1, 2, payload)
	viewFrom, viewTo := addr(lB1, nidB), addr(lA1, nidA)
	cases := []struct {
		name    string
		ext     []byte
		first   uint8
		wantExt []byte // extension headers left after ingress
		wantNH  uint8
	}{
		{"nonce-then-routing", append(wire.AppendNonceHeader(nil, wire.ProtoRouting, h.peerNonce), rh...), wire.ProtoDestOpts, rh, wire.ProtoRouting},
		{"nonce-after-padding", []byte{wire.ProtoUDP, 1, 1, 2, 0, 0, 0x8b, 4, 0xb1, 0xb2, 0xb3, 0xb4, 1, 2, 0, 0}, wire.ProtoDestOpts, nil, wire.ProtoUDP},
		{"nonce-with-other-option", []byte{wire.ProtoUDP, 1, 0x8b, 4, 0xb1, 0xb2, 0xb3, 0xb4, 0x1e, 2, 0, 0, 1, 2, 0, 0},
			wire.ProtoDestOpts, []byte{wire.ProtoUDP, 1, 1, 4, 0, 0, 0, 0, 0x1e, 2, 0, 0, 1, 2, 0, 0}, wire.ProtoDestOpts},
		{"routing-then-nonce", append(append([]byte{wire.ProtoDestOpts}, rh[1:]...), wire.AppendNonceHeader(nil, wire.ProtoUDP, h.peerNonce)...),
			wire.ProtoRouting, append(append([]byte{wire.ProtoDestOpts}, rh[1:]...), wire.ProtoUDP, 0, 1, 4, 0, 0, 0, 0), wire.ProtoRouting},
	}
	for _, c := range cases {
		in := frame(ipv6Packet(from, to, c.first, c.ext, wudp))
		ret, out := d.ingress(t, in)
		if ret != verdictNext {
			t.Fatalf("%s: verdict %d", c.name, ret)
		}
		p, pkt := parseFrame(t, out)
		if _, ok := p.Nonce(); ok {
			t.Fatalf("%s: nonce still there", c.name)
		}
		want := wire.IPv6Header{PayloadLen: uint16(len(c.wantExt) + len(wudp)), NextHeader: c.wantNH, HopLimit: 64, Src: viewFrom, Dst: viewTo}.Append(nil)
		want = append(want, c.wantExt...)
		if !bytes.Equal(pkt[:len(want)], want) {
			t.Fatalf("%s:\n got % x\nwant % x", c.name, pkt[:len(want)], want)
		}
		checkViewChecksum(t, p, pkt)
	}
}

// Every truncation of a valid ILNP packet is dropped or passed untouched, never half rewritten.
func TestTruncatedPackets(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	from, to := addr(lB2, nidB), addr(lA2, nidA)
	full := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, h.peerNonce, wire.ProtoTCP,
		tcpSegment(zeroLocator(from), zeroLocator(to), payload)))
	outFull := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoTCP, tcpSegment(h.viewSrc(), h.viewDst(), payload)))
	for _, c := range []struct {
		name string
		in   []byte
		run  func(testing.TB, []byte) (uint32, []byte)
	}{{"ingress", full, d.ingress}, {"egress", outFull, d.egress}} {
		// BPF_PROG_TEST_RUN refuses IPv6 frames without a whole fixed header (EINVAL), so
		// the cuts start after it; shorter ones fail the program's first load anyway.
		for n := 14 + 40; n < len(c.in); n++ {
			in := append([]byte(nil), c.in[:n]...)
			ret, out := c.run(t, in)
			switch {
			case ret == verdictDrop:
			case ret == verdictNext && bytes.Equal(out, in):
			default:
				t.Fatalf("%s truncated to %d bytes: verdict %d, output changed %v", c.name, n, ret, !bytes.Equal(out, in))
			}
		}
		// The payload length is checked too: a packet claiming more than it has.
		in := append([]byte(nil), c.in...)
		binary.BigEndian.PutUint16(in[18:], uint16(len(in)))
		if ret, out := c.run(t, in); ret != verdictDrop && !(ret == verdictNext && bytes.Equal(out, in)) {
			t.Fatalf("%s with a payload length past the end: verdict %d", c.name, ret)
		}
		// ... and one that ends inside the headers (the bytes after it are link padding, not
		// the packet's): stripping the 8-byte nonce header from a 4-byte payload would wrap the
		// length around. Found by FuzzEncapIngress.
		for _, plen := range []uint16{4, 8, 12} {
			in := append([]byte(nil), c.in...)
			binary.BigEndian.PutUint16(in[18:], plen)
			if ret, out := c.run(t, in); ret != verdictDrop && !(ret == verdictNext && bytes.Equal(out, in)) {
				t.Fatalf("%s with payload length %d, inside its headers: verdict %d, output changed %v", c.name, plen, ret, !bytes.Equal(out, in))
			}
		}
	}
	if counter(t, d, "ingress_malformed") == 0 || counter(t, d, "egress_malformed") == 0 {
		t.Fatalf("malformed packets not counted: %v/%v", counter(t, d, "ingress_malformed"), counter(t, d, "egress_malformed"))
	}
}

// Fragments: each is translated; only the first carries the UDP checksum, which is fixed.
func TestIngressFragments(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	from, to := addr(lB2, nidB), addr(lA2, nidA)
	big := bytes.Repeat([]byte("0123456789abcdef"), 8)
	udp := wire.AppendUDP(nil, zeroLocator(from), zeroLocator(to), 1, 2, big)
	first, rest := udp[:64], udp[64:]
	fragHdr := func(off int, more bool) []byte {
		v := uint16(off)
		if more {
			v |= 1
		}
		return []byte{wire.ProtoUDP, 0, byte(v >> 8), byte(v), 0, 0, 0x12, 0x34}
	}
	nh := wire.AppendNonceHeader(nil, wire.ProtoFragment, h.peerNonce)
	f1 := frame(ipv6Packet(from, to, wire.ProtoDestOpts, nh, fragHdr(0, true), first))
	f2 := frame(ipv6Packet(from, to, wire.ProtoDestOpts, nh, fragHdr(64, false), rest))
	var got [][]byte
	for _, f := range [][]byte{f1, f2} {
		ret, out := d.ingress(t, f)
		if ret != verdictNext {
			t.Fatalf("fragment verdict %d", ret)
		}
		p, pkt := parseFrame(t, out)
		if _, ok := p.Nonce(); ok || p.IPv6.Src != addr(lB1, nidB) || p.IPv6.Dst != addr(lA1, nidA) || p.IPv6.NextHeader != wire.ProtoFragment {
			t.Fatalf("fragment not translated: % x", pkt[:48])
		}
		got = append(got, pkt[48:])
	}
	// Reassemble and check the datagram's checksum over the session view.
	dgram := append(append([]byte(nil), got[0]...), got[1]...)
	if c := wire.PseudoHeaderChecksum(addr(lB1, nidB), addr(lA1, nidA), wire.ProtoUDP, dgram); c != 0 {
		t.Fatalf("reassembled datagram checksum residue %#x", c)
	}
	if got := counter(t, d, "ingress_fragments"); got != 2 {
		t.Fatalf("ingress_fragments = %d", got)
	}
}

// Fragments sent by the local stack: each gets the nonce header in front of its fragment header
// (the unfragmentable part, so every fragment carries it) and the wire locators; the datagram's
// checksum in the first fragment is fixed.
func TestEgressFragments(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	big := bytes.Repeat([]byte("fedcba9876543210"), 8)
	udp := wire.AppendUDP(nil, h.viewSrc(), h.viewDst(), 1, 2, big)
	fragHdr := func(off int, more bool) []byte {
		v := uint16(off)
		if more {
			v |= 1
		}
		return []byte{wire.ProtoUDP, 0, byte(v >> 8), byte(v), 0, 0, 0x43, 0x21}
	}
	var parts [][]byte
	for i, f := range [][]byte{
		frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoFragment, fragHdr(0, true), udp[:64])),
		frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoFragment, fragHdr(64, false), udp[64:])),
	} {
		ret, out := d.egress(t, f)
		if ret != verdictRedirect {
			t.Fatalf("fragment %d: verdict %d", i, ret)
		}
		p, pkt := parseFrame(t, out)
		if n, ok := p.Nonce(); !ok || n != h.nonce || pkt[40] != wire.ProtoFragment || p.IPv6.Src != h.wireSrc() || p.IPv6.Dst != h.wireDst() {
			t.Fatalf("fragment %d not translated: % x", i, pkt[:56])
		}
		parts = append(parts, pkt[56:])
	}
	dgram := append(append([]byte(nil), parts[0]...), parts[1]...)
	if c := wire.PseudoHeaderChecksum(zeroLocator(h.wireSrc()), zeroLocator(h.wireDst()), wire.ProtoUDP, dgram); c != 0 {
		t.Fatalf("reassembled datagram: wire checksum residue %#x", c)
	}
}

// The first nonce-carrying packet from an unknown NID opens a session with a nonce of our own
// from the crypto/rand pool; the reply carries that nonce.
func TestResponderSessionCreated(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, false)
	ev := events(t, d)
	from, to := addr(lB2, nidB), addr(lA2, nidA)
	theirs := mustNonce(t, 9, 8, 7, 6)
	in := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, theirs, wire.ProtoTCP,
		tcpSegment(zeroLocator(from), zeroLocator(to), payload)))
	ret, out := d.ingress(t, in)
	if ret != verdictNext {
		t.Fatalf("verdict %d", ret)
	}
	p, pkt := parseFrame(t, out)
	// Local view is the identity locator (lA1), remote view the locator it came from.
	if p.IPv6.Src != from || p.IPv6.Dst != addr(lA1, nidA) {
		t.Fatalf("view %v -> %v", p.IPv6.Src, p.IPv6.Dst)
	}
	checkViewChecksum(t, p, pkt)
	// An embryo until this host answers: no event, not in the session table.
	s, err := d.GetSession(nidA, nidB)
	must(t, err)
	if s.RemoteNonce != theirs || s.LocalNonce.Len() != 4 || s.LocalNonce == theirs || s.Flags&SessionResponder == 0 ||
		s.Flags&SessionWeakNonce != 0 || s.Flags&SessionEmbryonic == 0 {
		t.Fatalf("session %+v", s)
	}
	if all, err := d.Sessions(); err != nil || len(all) != 0 {
		t.Fatalf("embryo in the session table: %+v %v", all, err)
	}
	// Reply from the socket (session view) carries our own nonce to where B is, and makes
	// the session a real one.
	reply := frame(ipv6Packet(addr(lA1, nidA), from, wire.ProtoTCP, tcpSegment(addr(lA1, nidA), from, payload)))
	_, out = d.egress(t, reply)
	p, pkt = parseFrame(t, out)
	if n, _ := p.Nonce(); n != s.LocalNonce || p.IPv6.Src != addr(lA2, nidA) || p.IPv6.Dst != from {
		t.Fatalf("reply nonce %v from %v to %v", n, p.IPv6.Src, p.IPv6.Dst)
	}
	checkWireChecksum(t, p, pkt)
	e := nextEvent(t, ev, EventSessionResponder)
	if e.RemoteNID != nidB || e.LocalNID != nidA {
		t.Fatalf("event %+v", e)
	}
	if s, err := d.GetSession(nidA, nidB); err != nil || s.Flags&SessionEmbryonic != 0 {
		t.Fatalf("after the reply: %+v %v", s, err)
	}
	if all, err := d.Sessions(); err != nil || len(all) != 1 {
		t.Fatalf("session table after the reply: %+v %v", all, err)
	}
	// The next packet with B's nonce is accepted through the <NID, nonce> index.
	if ret, _ := d.ingress(t, in); ret != verdictNext {
		t.Fatalf("second packet verdict %d", ret)
	}
	if c := counter(t, d, "sessions_created"); c != 1 {
		t.Fatalf("sessions_created = %d", c)
	}
}

// Sessions created by incoming packets are bounded: a burst of one second's worth, then the
// configured rate; packets over it are dropped and counted, and existing sessions still work.
func TestResponderSessionRateLimit(t *testing.T) {
	const rate = 3
	d := newDatapath(t, Options{NewSessionsPerSecond: rate})
	h := hostA(t, 4)
	h.setup(t, d, false)
	to := addr(lA2, nidA)
	first := func(peer wire.NID) []byte {
		from := addr(lB2, peer)
		return frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: peer}, wire.ILV{Locator: lA2, NID: nidA},
			mustNonce(t, 9, 8, 7, byte(peer)), wire.ProtoTCP, tcpSegment(zeroLocator(from), zeroLocator(to), payload)))
	}
	var verdicts []uint32
	for i := range 2 * rate {
		ret, _ := d.ingress(t, first(wire.NID(0x100+i)))
		verdicts = append(verdicts, ret)
	}
	want := []uint32{verdictNext, verdictNext, verdictNext, verdictDrop, verdictDrop, verdictDrop}
	if !slices.Equal(verdicts, want) {
		t.Fatalf("verdicts of %d new peers back to back = %v, want %v", 2*rate, verdicts, want)
	}
	if c, l := counter(t, d, "sessions_created"), counter(t, d, "ingress_sessions_limited"); c != rate || l != rate {
		t.Fatalf("sessions_created = %d, ingress_sessions_limited = %d, want %d and %d", c, l, rate, rate)
	}
	// A session that exists is not rate limited: the first peer's next packet passes.
	if ret, _ := d.ingress(t, first(0x100)); ret != verdictNext {
		t.Fatalf("packet of an existing session: verdict %d", ret)
	}
	// A refused peer retransmits after a third of a second (one token) and gets in; the one
	// right after it does not.
	time.Sleep(time.Second/rate + 50*time.Millisecond)
	if ret, _ := d.ingress(t, first(0x100+rate)); ret != verdictNext {
		t.Fatalf("retransmission after the refill: verdict %d", ret)
	}
	if ret, _ := d.ingress(t, first(0x100+rate+1)); ret != verdictDrop {
		t.Fatalf("second new peer after one token: verdict %d", ret)
	}
	// Lifting the bound at run time (ilnpd's reload) lets the next new peer in at once.
	must(t, d.SetNewSessionsPerSecond(0))
	if ret, _ := d.ingress(t, first(0x100+rate+2)); ret != verdictNext {
		t.Fatalf("new peer with no bound: verdict %d", ret)
	}
}

// With the echo switch the responder sends the initiator's nonce back (thesis behaviour).
func TestEchoNonce(t *testing.T) {
	d := newDatapath(t, Options{EchoNonce: true})
	h := hostA(t, 4)
	h.setup(t, d, false)
	from, to := addr(lB2, nidB), addr(lA2, nidA)
	theirs := mustNonce(t, 9, 8, 7, 6)
	in := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, theirs, wire.ProtoUDP,
		wire.AppendUDP(nil, zeroLocator(from), zeroLocator(to), 1, 2, payload)))
	if ret, _ := d.ingress(t, in); ret != verdictNext {
		t.Fatalf("verdict %d", ret)
	}
	s, err := d.GetSession(nidA, nidB)
	must(t, err)
	if s.LocalNonce != theirs || s.RemoteNonce != theirs {
		t.Fatalf("echo session nonces %v/%v", s.LocalNonce, s.RemoteNonce)
	}
}

// A registered peer: the first packet opens the session with the peer's locators; the first
// reply teaches the responder's nonce; afterwards another nonce is refused.
func TestInitiatorSessionFromPeer(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, false)
	ev := events(t, d)
	must(t, d.PutPeer(Peer{Addr: addr(lB1, nidB), Active: lB2,
		Locators: []RemoteLocator{{Locator: lB1, State: LocatorValid}, {Locator: lB2, State: LocatorActive}}}))
	out := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoTCP, tcpSegment(h.viewSrc(), h.viewDst(), payload)))
	ret, wireOut := d.egress(t, out)
	if ret != verdictRedirect {
		t.Fatalf("verdict %d", ret)
	}
	nextEvent(t, ev, EventSessionInitiator)
	s, err := d.GetSession(nidA, nidB)
	must(t, err)
	p, _ := parseFrame(t, wireOut)
	if n, _ := p.Nonce(); n != s.LocalNonce || !s.RemoteNonce.IsZero() || p.IPv6.Dst != addr(lB2, nidB) {
		t.Fatalf("first packet nonce %v to %v, session %+v", n, p.IPv6.Dst, s)
	}
	from, to := addr(lB1, nidB), addr(lA2, nidA)
	reply := func(n wire.Nonce) []byte {
		return frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB1, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, n, wire.ProtoTCP,
			tcpSegment(zeroLocator(from), zeroLocator(to), payload)))
	}
	theirs := mustNonce(t, 1, 2, 3, 4)
	if ret, _ := d.ingress(t, reply(theirs)); ret != verdictNext {
		t.Fatalf("first reply verdict %d", ret)
	}
	nextEvent(t, ev, EventNonceLearned)
	if s, _ := d.GetSession(nidA, nidB); s.RemoteNonce != theirs {
		t.Fatalf("remote nonce not learned: %v", s.RemoteNonce)
	}
	if ret, _ := d.ingress(t, reply(theirs)); ret != verdictNext {
		t.Fatalf("second reply verdict %d", ret)
	}
	if ret, _ := d.ingress(t, reply(mustNonce(t, 4, 3, 2, 1))); ret != verdictDrop {
		t.Fatalf("other nonce verdict %d, want drop", ret)
	}
}

// Locators: a packet to an aged local locator or from an unknown remote one is refused (unless
// configured otherwise); any valid local locator is accepted.
func TestLocatorChecks(t *testing.T) {
	for _, accept := range []bool{false, true} {
		d := newDatapath(t, Options{AcceptUnknownLocator: accept})
		h := hostA(t, 4)
		h.setup(t, d, true)
		ev := events(t, d)
		pkt := func(src, dst netip.Addr) []byte {
			s, _ := wire.ILVFromAddr(src)
			dd, _ := wire.ILVFromAddr(dst)
			return frame(wire.AppendILNPPacket(nil, s, dd, h.peerNonce, wire.ProtoUDP,
				wire.AppendUDP(nil, zeroLocator(src), zeroLocator(dst), 1, 2, payload)))
		}
		// Old local locator still valid (soft handoff): accepted.
		if ret, _ := d.ingress(t, pkt(addr(lB1, nidB), addr(lA1, nidA))); ret != verdictNext {
			t.Fatalf("valid local locator refused: %d", ret)
		}
		must(t, d.PutLocalLocator(LocalLocator{Locator: lA1, State: LocatorAged}))
		if ret, _ := d.ingress(t, pkt(addr(lB1, nidB), addr(lA1, nidA))); ret != verdictDrop {
			t.Fatalf("aged local locator accepted: %d", ret)
		}
		nextEvent(t, ev, EventInvalidLocalLocator)
		ret, _ := d.ingress(t, pkt(addr(lX, nidB), addr(lA2, nidA)))
		if want := map[bool]uint32{false: verdictDrop, true: verdictNext}[accept]; ret != want {
			t.Fatalf("accept=%v: unknown remote locator verdict %d, want %d", accept, ret, want)
		}
		nextEvent(t, ev, EventUnknownLocator)
	}
}

// Locator Updates: nonce verified and kept, its option type turned into the verified-nonce
// marker (wire.VerifiedNonceOptionType) so the daemon reads the nonce the LU carried; addresses
// and ICMPv6 checksum left as on the wire for the daemon's raw socket, even from a locator the
// session does not know yet. Without a nonce, with a wrong one, or arriving already "marked"
// they are dropped.
func TestLocatorUpdateIngress(t *testing.T) {
	for _, size := range []int{4, 12} {
		d := newDatapath(t, Options{NonceSize: size})
		h := hostA(t, size)
		h.setup(t, d, true)
		from, to := addr(lX, nidB), addr(lA2, nidA)
		lu, err := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{{Locator: lX, Preference: 1, Lifetime: 30}}}.Marshal(from, to)
		must(t, err)
		in := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lX, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, h.peerNonce, wire.ProtoICMPv6, lu))
		ret, out := d.ingress(t, in)
		if ret != verdictNext {
			t.Fatalf("%d-byte nonce: verdict %d", size, ret)
		}
		want := append([]byte(nil), in...)
		want[14+wire.IPv6HeaderLen+2] = wire.VerifiedNonceOptionType
		if !bytes.Equal(out, want) {
			t.Fatalf("%d-byte nonce: LU after ingress\n got % x\nwant % x", size, out, want)
		}
		n, err := wire.LocallyVerifiedNonce(out[14+wire.IPv6HeaderLen:])
		if err != nil || n != h.peerNonce {
			t.Fatalf("%d-byte nonce: daemon would read %v, %v; want %v", size, n, err, h.peerNonce)
		}
		if c := counter(t, d, "ingress_locator_updates"); c != 1 {
			t.Fatalf("ingress_locator_updates = %d", c)
		}
		if ret, _ := d.ingress(t, want); ret != verdictDrop {
			t.Fatalf("LU arriving with a verified-nonce marker: verdict %d, want drop", ret)
		}
		if ret, _ := d.ingress(t, frame(ipv6Packet(from, to, wire.ProtoICMPv6, lu))); ret != verdictDrop {
			t.Fatalf("LU without nonce: verdict %d, want drop", ret)
		}
		wrong := mustNonce(t, 0, 0, 0, 1)
		if size == 12 {
			wrong = mustNonce(t, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1)
		}
		bad := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lX, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, wrong, wire.ProtoICMPv6, lu))
		if ret, _ := d.ingress(t, bad); ret != verdictDrop {
			t.Fatalf("LU with a wrong nonce: verdict %d, want drop", ret)
		}
	}
}

func TestParameterProblemEvent(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	ev := events(t, d)
	from, to := addr(lB2, nidB), addr(lA2, nidA)
	invoking := wire.AppendILNPPacket(nil, wire.ILV{Locator: lA2, NID: nidA}, wire.ILV{Locator: lB2, NID: nidB}, h.nonce, wire.ProtoUDP,
		wire.AppendUDP(nil, zeroLocator(to), zeroLocator(from), 1, 2, payload))
	msg := append([]byte{4, 2, 0, 0, 0, 0, 0, 42}, invoking...)
	binary.BigEndian.PutUint16(msg[2:], wire.PseudoHeaderChecksum(from, to, wire.ProtoICMPv6, msg))
	in := frame(ipv6Packet(from, to, wire.ProtoICMPv6, msg))
	// It concerns only the option: passed on, it would fail the socket (EPROTO).
	if ret, _ := d.ingress(t, in); ret != verdictDrop {
		t.Fatalf("parameter problem: verdict %d, want drop", ret)
	}
	e := nextEvent(t, ev, EventParamProblem)
	if e.RemoteNID != nidB || e.Src != from {
		t.Fatalf("event %+v", e)
	}
	s, err := d.GetSession(nidA, nidB)
	must(t, err)
	if s.Flags&SessionIPv6Fallback == 0 {
		t.Fatalf("session flags %v after the parameter problem: no ipv6-fallback", s.Flags)
	}
}

// Fallback to IPv6 for a session whose peer answered Parameter Problem; Hop-by-Hop packets
// cannot take the nonce first and are dropped.
func TestEgressFallbackAndHopByHop(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	hbh := []byte{wire.ProtoUDP, 0, 1, 4, 0, 0, 0, 0}
	udp := wire.AppendUDP(nil, h.viewSrc(), h.viewDst(), 1, 2, payload)
	if ret, _ := d.egress(t, frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoHopByHop, hbh, udp))); ret != verdictDrop {
		t.Fatalf("hop-by-hop verdict %d, want drop", ret)
	}
	s, err := d.GetSession(nidA, nidB)
	must(t, err)
	s.Flags |= SessionIPv6Fallback
	must(t, d.PutSession(s))
	in := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoUDP, udp))
	if ret, out := d.egress(t, in); ret != verdictNext || !bytes.Equal(out, in) {
		t.Fatalf("fallback session translated: verdict %d", ret)
	}
}

// The active locator on the interface the packet already leaves from: translated, no redirect.
func TestEgressSameInterfaceNoRedirect(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	must(t, d.SetActiveLocator(h.l1))
	in := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoUDP, wire.AppendUDP(nil, h.viewSrc(), h.viewDst(), 1, 2, payload)))
	ret, out := d.egress(t, in)
	if ret != verdictPass {
		t.Fatalf("verdict %d, want pass", ret)
	}
	p, pkt := parseFrame(t, out)
	if _, ok := p.Nonce(); !ok || p.IPv6.Src != addr(h.l1, h.nid) || p.IPv6.Dst != h.wireDst() {
		t.Fatalf("not translated: %v -> %v", p.IPv6.Src, p.IPv6.Dst)
	}
	checkWireChecksum(t, p, pkt)
	if c := counter(t, d, "egress_redirected"); c != 0 {
		t.Fatalf("egress_redirected = %d", c)
	}
}

// "First N packets" mode (RFC 6744 s.6): the nonce stops after N packets but ICMPv6 always
// carries it; the receiver accepts the session's nonce-less packets.
func TestNonceFirstN(t *testing.T) {
	d := newDatapath(t, Options{NonceFirstN: 2})
	h := hostA(t, 4)
	h.setup(t, d, true)
	udp := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoUDP, wire.AppendUDP(nil, h.viewSrc(), h.viewDst(), 1, 2, payload)))
	icmp := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoICMPv6, icmpEcho(h.viewSrc(), h.viewDst(), payload)))
	for i, c := range []struct {
		in    []byte
		nonce bool
	}{{udp, true}, {udp, true}, {udp, false}, {icmp, true}, {udp, false}} {
		_, out := d.egress(t, c.in)
		p, pkt := parseFrame(t, out)
		if _, ok := p.Nonce(); ok != c.nonce {
			t.Fatalf("packet %d: nonce %v, want %v", i, ok, c.nonce)
		}
		if p.IPv6.Src != h.wireSrc() || p.IPv6.Dst != h.wireDst() {
			t.Fatalf("packet %d not translated", i)
		}
		checkWireChecksum(t, p, pkt)
	}
	from, to := addr(lB2, nidB), addr(lA2, nidA)
	in := frame(ipv6Packet(from, to, wire.ProtoUDP, wire.AppendUDP(nil, zeroLocator(from), zeroLocator(to), 1, 2, payload)))
	ret, out := d.ingress(t, in)
	p, pkt := parseFrame(t, out)
	if ret != verdictNext || p.IPv6.Src != addr(lB1, nidB) || p.IPv6.Dst != addr(lA1, nidA) {
		t.Fatalf("nonce-less session packet: verdict %d, %v -> %v", ret, p.IPv6.Src, p.IPv6.Dst)
	}
	checkViewChecksum(t, p, pkt)
}

// While an initiator session waits for the responder's first nonce, only a packet from a
// locator the session already knows may teach it; a Locator Update never may (it announces
// locators, so it would teach an off-path attacker's nonce from anywhere), from an unknown
// locator or a known one, whatever AcceptUnknownLocator says.
func TestNonceLearningOnlyFromKnownLocators(t *testing.T) {
	for _, accept := range []bool{false, true} {
		d := newDatapath(t, Options{AcceptUnknownLocator: accept})
		h := hostA(t, 4)
		h.setup(t, d, false)
		must(t, d.PutPeer(Peer{Addr: addr(lB1, nidB), Active: lB2,
			Locators: []RemoteLocator{{Locator: lB1, State: LocatorValid}, {Locator: lB2, State: LocatorActive}}}))
		out := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoTCP, tcpSegment(h.viewSrc(), h.viewDst(), payload)))
		if ret, _ := d.egress(t, out); ret != verdictRedirect {
			t.Fatalf("accept=%v: first packet verdict %d", accept, ret)
		}
		to := addr(lA2, nidA)
		attacker := mustNonce(t, 6, 6, 6, 6)
		lu := func(from wire.L64) []byte {
			src := addr(from, nidB)
			msg, err := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{{Locator: lX, Lifetime: 30}}}.Marshal(src, to)
			must(t, err)
			return frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: from, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, attacker, wire.ProtoICMPv6, msg))
		}
		data := func(from wire.L64, n wire.Nonce) []byte {
			src := addr(from, nidB)
			return frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: from, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, n, wire.ProtoTCP,
				tcpSegment(zeroLocator(src), zeroLocator(to), payload)))
		}
		for _, c := range []struct {
			name string
			pkt  []byte
		}{
			{"LU from an unknown locator", lu(lX)},
			{"LU from a known locator", lu(lB2)},
			{"data from an unknown locator", data(lX, attacker)},
		} {
			if ret, _ := d.ingress(t, c.pkt); ret != verdictDrop {
				t.Errorf("accept=%v: %s while learning: verdict %d, want drop", accept, c.name, ret)
			}
			if s, _ := d.GetSession(nidA, nidB); !s.RemoteNonce.IsZero() {
				t.Fatalf("accept=%v: %s taught the session nonce %v", accept, c.name, s.RemoteNonce)
			}
		}
		if c := counter(t, d, "ingress_learn_refused"); c != 2 {
			t.Errorf("accept=%v: ingress_learn_refused = %d, want the 2 LUs", accept, c)
		}
		theirs := mustNonce(t, 1, 2, 3, 4)
		if ret, _ := d.ingress(t, data(lB1, theirs)); ret != verdictNext {
			t.Fatalf("accept=%v: reply from a known locator: verdict %d", accept, ret)
		}
		if s, _ := d.GetSession(nidA, nidB); s.RemoteNonce != theirs {
			t.Fatalf("accept=%v: reply from a known locator did not teach the nonce: %v", accept, s.RemoteNonce)
		}
	}
}

// Embryonic responder sessions: a flood of first packets from made-up NIDs, far more than the
// session table holds, only churns the embryos LRU map; the stack's mechanical answers
// (SYN-ACK, RST, ICMPv6 errors) go out through the embryo without promoting it; a
// legitimate peer's session is promoted by the first real reply and works; a wrong nonce for
// an embryo is dropped.
func TestEmbryonicSessions(t *testing.T) {
	const size = 256
	d := newDatapath(t, Options{SessionTableSize: size})
	h := hostA(t, 4)
	h.setup(t, d, false)
	to := addr(lA2, nidA)
	first := func(peer wire.NID, n wire.Nonce) []byte {
		from := addr(lB2, peer)
		return frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: peer}, wire.ILV{Locator: lA2, NID: nidA},
			n, wire.ProtoTCP, tcpSegment(zeroLocator(from), zeroLocator(to), payload)))
	}
	nonceOf := func(i int) wire.Nonce { return mustNonce(t, 0xee, byte(i>>16), byte(i>>8), byte(i)) }
	answer := func(peer wire.NID, seg []byte, proto uint8) []byte {
		return frame(ipv6Packet(addr(lA1, nidA), addr(lB2, peer), proto, seg))
	}
	// Mechanical answers to a spoofed first packet.
	victimSrc, victimDst := addr(lA1, nidA), addr(lB2, 0x200)
	synack := tcpSegment(victimSrc, victimDst, nil)
	synack[13] = 0x12
	rst := tcpSegment(victimSrc, victimDst, nil)
	rst[13] = 0x04
	unreach := []byte{1, 4, 0, 0, 0, 0, 0, 0}
	for i, a := range []struct {
		seg   []byte
		proto uint8
	}{{synack, wire.ProtoTCP}, {rst, wire.ProtoTCP}, {unreach, wire.ProtoICMPv6}} {
		peer := wire.NID(0x200 + i)
		if ret, _ := d.ingress(t, first(peer, nonceOf(i))); ret != verdictNext {
			t.Fatalf("spoofed first packet %d: verdict %d", i, ret)
		}
		ret, out := d.egress(t, answer(peer, a.seg, a.proto))
		if ret == verdictDrop {
			t.Fatalf("mechanical answer %d dropped", i)
		}
		if p, _ := parseFrame(t, out); p.IPv6.Dst != addr(lB2, peer) {
			t.Fatalf("mechanical answer %d not translated: to %v", i, p.IPv6.Dst)
		}
		if s, err := d.GetSession(nidA, peer); err != nil || s.Flags&SessionEmbryonic == 0 {
			t.Fatalf("mechanical answer %d promoted the session: %+v %v", i, s, err)
		}
	}
	// A flood of 4x the table.
	for i := 0; i < 4*size; i++ {
		if ret, _ := d.ingress(t, first(wire.NID(0x10000+i), nonceOf(i))); ret != verdictNext {
			t.Fatalf("flood packet %d: verdict %d", i, ret)
		}
	}
	if all, err := d.Sessions(); err != nil || len(all) != 0 {
		t.Fatalf("the flood reached the session table: %d sessions, %v", len(all), err)
	}
	// The legitimate peer: a squatter's first packet with its NID, the peer's own first packet
	// (which replaces the squatter's embryo), a real reply.
	theirs := mustNonce(t, 1, 2, 3, 4)
	if ret, _ := d.ingress(t, first(nidB, mustNonce(t, 4, 3, 2, 1))); ret != verdictNext {
		t.Fatalf("squatter's first packet: verdict %d", ret)
	}
	if ret, _ := d.ingress(t, first(nidB, theirs)); ret != verdictNext {
		t.Fatalf("legitimate first packet after a squatter's: verdict %d", ret)
	}
	reply := answer(nidB, tcpSegment(addr(lA1, nidA), addr(lB2, nidB), payload), wire.ProtoTCP)
	if ret, _ := d.egress(t, reply); ret == verdictDrop {
		t.Fatalf("reply dropped")
	}
	s, err := d.GetSession(nidA, nidB)
	if err != nil || s.Flags&SessionEmbryonic != 0 || s.RemoteNonce != theirs {
		t.Fatalf("legitimate session after its reply: %+v %v", s, err)
	}
	if ret, _ := d.ingress(t, first(nidB, theirs)); ret != verdictNext {
		t.Fatalf("legitimate session's next packet: verdict %d", ret)
	}
	if c, p := counter(t, d, "embryos_created"), counter(t, d, "embryos_promoted"); c != 4*size+5 || p != 1 {
		t.Fatalf("embryos_created = %d, embryos_promoted = %d, want %d and 1", c, p, 4*size+5)
	}
}

// Embryo squatting (issue 23, item 2): one packet from [any locator : B's NID] with a made-up
// nonce makes an embryo for (A, B). It must never lock the real B out: B's own first packet
// replaces it (counted, charged to the new-session budget) and B's session works with B's
// nonce. And when A itself then talks to B, a peer it knows from name resolution, the squatted
// embryo is not promoted: A opens an initiator session that learns B's nonce from B's own
// locators, so the squatter's nonce never becomes the session's.
func TestEmbryoSquatting(t *testing.T) {
	to := addr(lA2, nidA)
	pkt := func(from wire.L64, n wire.Nonce) []byte {
		src := addr(from, nidB)
		return frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: from, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA},
			n, wire.ProtoUDP, wire.AppendUDP(nil, zeroLocator(src), zeroLocator(to), 1, 2, payload)))
	}
	squat, theirs := mustNonce(t, 6, 6, 6, 6), mustNonce(t, 1, 2, 3, 4)

	t.Run("peer-first-packet", func(t *testing.T) {
		d := newDatapath(t, Options{})
		h := hostA(t, 4)
		h.setup(t, d, false)
		for _, from := range []wire.L64{lX, lB2} { // from elsewhere, and from B's own locator
			if ret, _ := d.ingress(t, pkt(from, squat)); ret != verdictNext {
				t.Fatalf("squatter from %v: verdict %d", from, ret)
			}
			for i := range 3 { // the real peer's first packet and its retransmissions
				if ret, _ := d.ingress(t, pkt(lB2, theirs)); ret != verdictNext {
					t.Fatalf("squatted from %v: the real peer's packet %d: verdict %d, want it accepted", from, i, ret)
				}
			}
			if s, err := d.GetSession(nidA, nidB); err != nil || s.RemoteNonce != theirs || s.RemoteView != lB2 {
				t.Fatalf("squatted from %v: embryo %+v %v, want the real peer's", from, s, err)
			}
		}
		reply := frame(ipv6Packet(addr(lA1, nidA), addr(lB2, nidB), wire.ProtoUDP, wire.AppendUDP(nil, addr(lA1, nidA), addr(lB2, nidB), 2, 1, payload)))
		if ret, _ := d.egress(t, reply); ret == verdictDrop {
			t.Fatalf("reply dropped")
		}
		if s, err := d.GetSession(nidA, nidB); err != nil || s.Flags&SessionEmbryonic != 0 || s.RemoteNonce != theirs {
			t.Fatalf("after the reply: %+v %v", s, err)
		}
		if c := counter(t, d, "embryos_replaced"); c != 3 { // squat, peer, squat again, peer
			t.Errorf("embryos_replaced = %d, want 3", c)
		}
	})

	t.Run("own-connect", func(t *testing.T) {
		d := newDatapath(t, Options{})
		h := hostA(t, 4)
		h.setup(t, d, false)
		must(t, d.PutPeer(Peer{Addr: addr(lB1, nidB), Active: lB2,
			Locators: []RemoteLocator{{Locator: lB1, State: LocatorValid}, {Locator: lB2, State: LocatorActive}}}))
		if ret, _ := d.ingress(t, pkt(lB1, squat)); ret != verdictNext {
			t.Fatalf("squatter: verdict %d", ret)
		}
		for _, seg := range [][]byte{
			wire.AppendUDP(nil, h.viewSrc(), h.viewDst(), 2, 1, payload),
			tcpSegment(h.viewSrc(), h.viewDst(), payload),
		} {
			proto := uint8(wire.ProtoUDP)
			if len(seg) != 8+len(payload) {
				proto = wire.ProtoTCP
			}
			if ret, _ := d.egress(t, frame(ipv6Packet(h.viewSrc(), h.viewDst(), proto, seg))); ret == verdictDrop {
				t.Fatalf("A's packet to B dropped")
			}
			s, err := d.GetSession(nidA, nidB)
			if err != nil || s.Flags&SessionEmbryonic != 0 || s.Flags&SessionInitiator == 0 || !s.RemoteNonce.IsZero() {
				t.Fatalf("A's session with B after its own packet: %+v %v; want an initiator waiting for B's nonce", s, err)
			}
			must(t, d.DeleteSession(nidA, nidB))
			if ret, _ := d.ingress(t, pkt(lB1, squat)); ret != verdictNext {
				t.Fatalf("squatter again: verdict %d", ret)
			}
		}
		if ret, _ := d.egress(t, frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoUDP, wire.AppendUDP(nil, h.viewSrc(), h.viewDst(), 2, 1, payload)))); ret == verdictDrop {
			t.Fatalf("A's packet to B dropped")
		}
		if ret, _ := d.ingress(t, pkt(lB2, theirs)); ret != verdictNext {
			t.Fatalf("B's reply: verdict %d", ret)
		}
		if s, err := d.GetSession(nidA, nidB); err != nil || s.RemoteNonce != theirs {
			t.Fatalf("A's session learned %+v %v, want B's nonce", s, err)
		}
		if c := counter(t, d, "embryos_to_initiator"); c != 3 {
			t.Errorf("embryos_to_initiator = %d, want 3", c)
		}
	})
}

// Filling the session table with answered pings (issue 23, item 5): a spoofed Echo Request
// from a made-up NID makes an embryo and the kernel's Echo Reply used to promote it, so a ping
// flood filled the table. Now an Echo Reply promotes only into the unproven pool (a quarter of
// the table); beyond it the embryo answers pings as it is. A newcomer whose first packet the
// host answers otherwise (a UDP reply) still gets a session, and a session in the pool leaves
// it once this host sends anything but an Echo Reply.
func TestPingFloodFillsOnlyTheUnprovenPool(t *testing.T) {
	const size = 64
	d := newDatapath(t, Options{SessionTableSize: size})
	h := hostA(t, 4)
	h.setup(t, d, false)
	to := addr(lA2, nidA)
	ping := func(peer wire.NID, typ byte) (uint32, uint32) {
		from := addr(lB2, peer)
		req := append([]byte{128, 0, 0, 0, 0, 1, 0, 1}, payload...)
		binary.BigEndian.PutUint16(req[2:], wire.PseudoHeaderChecksum(from, to, wire.ProtoICMPv6, req))
		in := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: peer}, wire.ILV{Locator: lA2, NID: nidA},
			mustNonce(t, 0xee, byte(peer>>16), byte(peer>>8), byte(peer)), wire.ProtoICMPv6, req))
		rin, _ := d.ingress(t, in)
		rep := append([]byte{typ, 0, 0, 0, 0, 1, 0, 1}, payload...)
		rout, out := d.egress(t, frame(ipv6Packet(addr(lA1, nidA), from, wire.ProtoICMPv6, rep)))
		if p, _ := parseFrame(t, out); rout != verdictDrop && p.IPv6.Dst != from {
			t.Fatalf("answer to %v not translated: to %v", peer, p.IPv6.Dst)
		}
		return rin, rout
	}
	for i := range 2 * size {
		for range 2 { // two pings per made-up NID: the second used to make it look proven
			if rin, rout := ping(wire.NID(0x10000+i), 129); rin != verdictNext || rout == verdictDrop {
				t.Fatalf("ping %d: verdicts %d, %d", i, rin, rout)
			}
		}
	}
	all, err := d.Sessions()
	must(t, err)
	if len(all) != size/UnprovenPoolShare {
		t.Fatalf("the ping flood put %d sessions in a table of %d, want the unproven pool's %d", len(all), size, size/UnprovenPoolShare)
	}
	for _, s := range all {
		if s.Flags&SessionUnproven == 0 {
			t.Fatalf("session promoted by an Echo Reply not flagged unproven: %+v", s)
		}
	}
	if c := counter(t, d, "unproven_pool_full"); c != 2*(2*size-size/UnprovenPoolShare) {
		t.Errorf("unproven_pool_full = %d, want %d", c, 2*(2*size-size/UnprovenPoolShare))
	}
	// The newcomer: UDP answered by an application.
	from := addr(lB2, nidB)
	in := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA},
		h.peerNonce, wire.ProtoUDP, wire.AppendUDP(nil, zeroLocator(from), zeroLocator(to), 1, 2, payload)))
	if ret, _ := d.ingress(t, in); ret != verdictNext {
		t.Fatalf("newcomer's first packet: verdict %d", ret)
	}
	if ret, _ := d.egress(t, frame(ipv6Packet(addr(lA1, nidA), from, wire.ProtoUDP, wire.AppendUDP(nil, addr(lA1, nidA), from, 2, 1, payload)))); ret == verdictDrop {
		t.Fatalf("reply to the newcomer dropped")
	}
	if s, err := d.GetSession(nidA, nidB); err != nil || s.Flags&(SessionEmbryonic|SessionUnproven) != 0 {
		t.Fatalf("newcomer's session: %+v %v", s, err)
	}
	// This host talks on a pooled session: it leaves the pool.
	peer := all[0].RemoteNID
	pfrom := addr(all[0].RemoteView, peer)
	if ret, _ := d.egress(t, frame(ipv6Packet(addr(lA1, nidA), pfrom, wire.ProtoUDP, wire.AppendUDP(nil, addr(lA1, nidA), pfrom, 2, 1, payload)))); ret == verdictDrop {
		t.Fatalf("UDP on a pooled session dropped")
	}
	if s, err := d.GetSession(nidA, peer); err != nil || s.Flags&SessionUnproven != 0 {
		t.Fatalf("pooled session after this host's UDP: %+v %v", s, err)
	}
	// The daemon's count frees the pool: the next ping's session enters it.
	must(t, d.SetUnprovenCount(uint64(size/UnprovenPoolShare-1)))
	ping(wire.NID(0x20000), 129)
	if s, err := d.GetSession(nidA, wire.NID(0x20000)); err != nil || s.Flags&SessionUnproven == 0 || s.Flags&SessionEmbryonic != 0 {
		t.Fatalf("ping after the pool freed: %+v %v", s, err)
	}
}

// A Locator Update (or LU-ACK) with a made-up NID and nonce matches no session: it is dropped
// and counted, and it leaves no embryo behind, whether or not an embryo of that pair exists
// (issue 23 item 3: an LU never opens a session, so nothing believes or ACKs its locators).
func TestLocatorUpdateNeverOpensSession(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, false)
	from, to := wire.ILV{Locator: lX, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}
	nonce := mustNonce(t, 9, 8, 7, 6)
	for _, op := range []wire.Operation{wire.OpAdvertisement, wire.OpAcknowledgement} {
		lu, err := wire.LocatorUpdate{Op: op, Locators: []wire.LocatorEntry{{Locator: lX, Lifetime: 30}}}.Marshal(from.Addr(), to.Addr())
		must(t, err)
		if ret, _ := d.ingress(t, frame(wire.AppendILNPPacket(nil, from, to, nonce, wire.ProtoICMPv6, lu))); ret != verdictDrop {
			t.Fatalf("%v from an unknown session: verdict %d, want drop", op, ret)
		}
	}
	if c := counter(t, d, "ingress_lu_no_session"); c != 2 {
		t.Errorf("ingress_lu_no_session = %d, want 2", c)
	}
	if _, err := d.GetSession(nidA, nidB); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an LU left a session or an embryo: %v", err)
	}
	if c := counter(t, d, "embryos_created") + counter(t, d, "sessions_created"); c != 0 {
		t.Fatalf("%d sessions created by LUs", c)
	}
	// An LU carrying the nonce of an embryo (made by a data packet) reaches the daemon, which
	// holds it until this host answers; the embryo stays one: the LU opens nothing.
	data := frame(wire.AppendILNPPacket(nil, from, to, nonce, wire.ProtoTCP,
		tcpSegment(zeroLocator(from.Addr()), zeroLocator(to.Addr()), payload)))
	if ret, _ := d.ingress(t, data); ret != verdictNext {
		t.Fatalf("data packet verdict %d", ret)
	}
	lu, err := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{{Locator: lX, Lifetime: 30}}}.Marshal(from.Addr(), to.Addr())
	must(t, err)
	if ret, _ := d.ingress(t, frame(wire.AppendILNPPacket(nil, from, to, nonce, wire.ProtoICMPv6, lu))); ret != verdictNext {
		t.Fatalf("LU on an embryo: verdict %d, want it passed to the daemon", ret)
	}
	if c := counter(t, d, "ingress_lu_no_session"); c != 2 {
		t.Errorf("ingress_lu_no_session = %d, want 2", c)
	}
	if all, err := d.Sessions(); err != nil || len(all) != 0 {
		t.Fatalf("an LU on an embryo made a session: %+v %v", all, err)
	}
	if s, err := d.GetSession(nidA, nidB); err != nil || s.Flags&SessionEmbryonic == 0 {
		t.Fatalf("embryo after its LU: %+v %v", s, err)
	}
}

// A flood of bad-nonce packets while nobody reads the ring (issue 23 item 9): the datapath
// puts at most a second's budget of its security events in the ring and counts the rest, so a
// session event after the flood is still there for the daemon, and nothing is lost.
func TestEventRingSurvivesBadNonceFlood(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	const flood = 20000 // the ring holds 256 KiB / 80 bytes = 3276 events
	bad := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA},
		mustNonce(t, 0xde, 0xad, 0xbe, 0xef), wire.ProtoUDP, transport(t, wire.ProtoUDP, addr(0, nidB), addr(0, nidA), payload)))
	opts := ebpf.RunOptions{Data: bad, DataOut: make([]byte, len(bad)+256), Repeat: flood}
	ret, err := d.objs.IlnpIngress.Run(&opts)
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
	if ret != verdictDrop {
		t.Fatalf("bad nonce verdict %d, want drop", ret)
	}
	if c := counter(t, d, "ingress_bad_nonce"); c != flood {
		t.Fatalf("ingress_bad_nonce = %d, want %d", c, flood)
	}
	// A session event after the flood, with the ring still unread.
	must(t, d.PutPeer(Peer{Addr: addr(lX, nidC), Active: lX, Locators: []RemoteLocator{{Locator: lX, State: LocatorActive}}}))
	first := frame(ipv6Packet(addr(lA1, nidA), addr(lX, nidC), wire.ProtoUDP, transport(t, wire.ProtoUDP, addr(lA1, nidA), addr(lX, nidC), payload)))
	if ret, _ := d.egress(t, first); ret == verdictDrop {
		t.Fatalf("first packet to a peer dropped")
	}
	if c := counter(t, d, "events_lost"); c != 0 {
		t.Errorf("events_lost = %d after a flood of %d bad-nonce packets, want 0", c, flood)
	}
	limited := counter(t, d, "events_limited")
	if limited < flood-2*256 || limited > flood-256 {
		t.Errorf("events_limited = %d of %d, want all but about a second's budget (256)", limited, flood)
	}
	ev := events(t, d)
	badEvents := 0
	for timeout := time.After(5 * time.Second); ; {
		select {
		case e := <-ev:
			switch e.Type {
			case EventBadNonce:
				badEvents++
				continue
			case EventSessionInitiator:
				if e.RemoteNID != nidC {
					t.Fatalf("session event %+v", e)
				}
			default:
				continue
			}
		case <-timeout:
			t.Fatalf("no session event after the flood (%d bad-nonce events read)", badEvents)
		}
		break
	}
	t.Logf("%d bad-nonce packets: %d events in the ring, %d limited, %d lost", flood, badEvents, limited, counter(t, d, "events_lost"))
	if badEvents+int(limited) != flood {
		t.Errorf("%d bad-nonce events read + %d limited, want %d", badEvents, limited, flood)
	}
}
