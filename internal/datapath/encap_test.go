package datapath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"ilnp/internal/encap"
	"ilnp/internal/wire"
)

// IPv4 endpoints of the encapsulation tests: A and B on their IPv4 networks, and the NAT in
// front of A as B sees it.
var (
	epA   = netip.MustParseAddrPort("192.0.2.1:49191")
	epB   = netip.MustParseAddrPort("198.51.100.2:49191")
	epNAT = netip.MustParseAddrPort("203.0.113.7:61000")
)

func l32(t testing.TB, ep netip.AddrPort) wire.L64 {
	t.Helper()
	l, err := encap.L32(ep)
	must(t, err)
	return l
}

// encapHost is h whose peer is reached over IPv4: the session's active remote locator is the
// peer's IPv4 endpoint, and the host has its own IPv4 locator (the default for encapsulation).
func encapHost(t testing.TB, d *Datapath, h host, self, peer netip.AddrPort, opts ...wire.L64) {
	t.Helper()
	h.setup(t, d, false)
	local, err := d.PutLocalIPv4Locator(self, LocatorActive, otherIfindex, netip.MustParseAddr("192.0.2.254"))
	must(t, err)
	must(t, d.SetEncap(EncapConfig{Port: encap.DefaultPort, LocalL32: local}))
	remote := []RemoteLocator{{Locator: h.peer1, State: LocatorValid}, {Locator: l32(t, peer), State: LocatorActive}}
	for _, l := range opts {
		remote = append(remote, RemoteLocator{Locator: l, State: LocatorValid})
	}
	must(t, d.PutSession(Session{
		LocalNID: h.nid, RemoteNID: h.peer, LocalView: h.l1, RemoteView: h.peer1, RemoteActive: l32(t, peer),
		RemoteLocators: remote, LocalNonce: h.nonce, RemoteNonce: h.peerNonce,
	}))
}

// ipv4Checksum is the Internet checksum of an IPv4 header (0 when a header with its checksum
// field filled in verifies).
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// encapFrame is inner inside UDP/IPv4 from src to dst in an Ethernet frame, as encap.h builds
// it: DF, TTL 64, UDP checksum zero.
func encapFrame(src, dst netip.AddrPort, inner []byte) []byte {
	f := append([]byte(nil), ethHeader[:12]...)
	f = append(f, 0x08, 0x00)
	ip := make([]byte, 20)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(28+len(inner)))
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	ip[8], ip[9] = 64, wire.ProtoUDP
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(inner)))
	return append(append(append(f, ip...), udp...), inner...)
}

// Egress to an IPv4 peer: the ILNPv6 packet (locators the two IPv4 endpoints, nonce header)
// inside UDP/IPv4, byte for byte, with the IPv4 header checksum and the inner transport
// checksum verified from scratch.
func TestEncapEgress(t *testing.T) {
	for _, pr := range protos {
		t.Run(pr.name, func(t *testing.T) {
			d := newDatapath(t, Options{})
			h := hostA(t, 4)
			encapHost(t, d, h, epA, epB)
			l4 := transport(t, pr.proto, h.viewSrc(), h.viewDst(), payload)
			ret, out := d.egress(t, frame(ipv6Packet(h.viewSrc(), h.viewDst(), pr.proto, l4)))
			if ret != verdictRedirect {
				t.Fatalf("verdict %d, want redirect (%d)", ret, verdictRedirect)
			}
			if len(out) < 14+28 {
				t.Fatalf("output of %d bytes", len(out))
			}
			if ipv4Checksum(out[14:34]) != 0 {
				t.Fatalf("IPv4 header checksum does not verify: % x", out[14:34])
			}
			inner := out[14+28:]
			want := encapFrame(epA, epB, inner)
			if !bytes.Equal(out, want) {
				t.Fatalf("outer headers\n got % x\nwant % x", out[:42], want[:42])
			}
			p, err := wire.ParsePacket(inner)
			must(t, err)
			if p.IPv6.Src != addr(l32(t, epA), nidA) || p.IPv6.Dst != addr(l32(t, epB), nidB) {
				t.Fatalf("inner addresses %v -> %v", p.IPv6.Src, p.IPv6.Dst)
			}
			if n, ok := p.Nonce(); !ok || n != h.nonce {
				t.Fatalf("nonce %v (present %v), want %v", n, ok, h.nonce)
			}
			if got := p.UpperLayer(inner); !equalExceptChecksum(got, l4, pr.proto) {
				t.Fatalf("upper layer changed beyond its checksum")
			}
			checkWireChecksum(t, p, inner)
			if c := encapCounter(t, d, "encap_egress_packets"); c != 1 {
				t.Fatalf("encap_egress_packets = %d", c)
			}
		})
	}
}

// Encapsulation needs the port and an IPv4 locator of our own; without them the packet is
// dropped and counted, never sent as native IPv6 to an IPv4 locator.
func TestEncapEgressUnconfigured(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	encapHost(t, d, h, epA, epB)
	in := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoTCP, tcpSegment(h.viewSrc(), h.viewDst(), payload)))
	must(t, d.SetEncap(EncapConfig{Port: encap.DefaultPort}))
	if ret, _ := d.egress(t, in); ret != verdictDrop {
		t.Fatalf("no local IPv4 locator: verdict %d, want drop", ret)
	}
	must(t, d.SetEncap(EncapConfig{}))
	if ret, _ := d.egress(t, in); ret != verdictDrop {
		t.Fatalf("encapsulation off: verdict %d, want drop", ret)
	}
	if a, b := encapCounter(t, d, "encap_egress_no_local_l32"), encapCounter(t, d, "encap_egress_disabled"); a != 1 || b != 1 {
		t.Fatalf("encap_egress_no_local_l32 = %d, encap_egress_disabled = %d", a, b)
	}
}

// A's encapsulated packet fed to B's ingress gives back exactly what A's socket sent; behind a
// NAT (outer source rewritten) B sees the NAT's endpoint as A's locator, learns nothing it is
// not told (unknown locator dropped by default) and, when it accepts unknown locators, still
// delivers the packet with a checksum right for the socket (ICMPv6 covers the locators).
func TestEncapRoundTripAndNAT(t *testing.T) {
	for _, pr := range protos {
		for _, nat := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/nat=%v", pr.name, nat), func(t *testing.T) {
				da := newDatapath(t, Options{})
				db := newDatapath(t, Options{AcceptUnknownLocator: nat})
				ha, hb := hostA(t, 4), hostB(t, 4)
				encapHost(t, da, ha, epA, epB)
				encapHost(t, db, hb, epB, epA)
				l4 := transport(t, pr.proto, ha.viewSrc(), ha.viewDst(), payload)
				orig := frame(ipv6Packet(ha.viewSrc(), ha.viewDst(), pr.proto, l4))
				ret, onWire := da.egress(t, orig)
				if ret != verdictRedirect {
					t.Fatalf("egress verdict %d", ret)
				}
				if nat {
					onWire = encapFrame(epNAT, epB, onWire[42:])
				}
				ret, back := db.ingress(t, onWire)
				if ret != verdictNext {
					t.Fatalf("ingress verdict %d", ret)
				}
				if !bytes.Equal(back, orig) {
					t.Fatalf("round trip changed the packet\n got % x\nwant % x", back, orig)
				}
				p, pkt := parseFrame(t, back)
				checkViewChecksum(t, p, pkt)
				if c := encapCounter(t, db, "encap_ingress_decapsulated"); c != 1 {
					t.Fatalf("encap_ingress_decapsulated = %d", c)
				}
				if c := counter(t, db, "ingress_ilnp"); c != 1 {
					t.Fatalf("ingress_ilnp = %d", c)
				}
			})
		}
	}
}

// Behind a NAT without AcceptUnknownLocator: the NAT's endpoint is not in the session's set
// until a Locator Update (or the daemon) puts it there; the packet is dropped, not delivered.
func TestEncapNATUnknownLocatorDropped(t *testing.T) {
	da, db := newDatapath(t, Options{}), newDatapath(t, Options{})
	ha, hb := hostA(t, 4), hostB(t, 4)
	encapHost(t, da, ha, epA, epB)
	encapHost(t, db, hb, epB, epA)
	ev := events(t, db)
	orig := frame(ipv6Packet(ha.viewSrc(), ha.viewDst(), wire.ProtoUDP, transport(t, wire.ProtoUDP, ha.viewSrc(), ha.viewDst(), payload)))
	_, onWire := da.egress(t, orig)
	if ret, _ := db.ingress(t, encapFrame(epNAT, epB, onWire[42:])); ret != verdictDrop {
		t.Fatalf("verdict %d, want drop", ret)
	}
	e := nextEvent(t, ev, EventUnknownLocator)
	if e.Src != addr(l32(t, epNAT), nidA) {
		t.Fatalf("unknown-locator event from %v, want the NAT's endpoint", e.Src)
	}
	// With roaming the nonce-verified packet passes at once, and the daemon is still told.
	must(t, db.SetEncap(EncapConfig{Port: encap.DefaultPort, LocalL32: l32(t, epB), Roam: true}))
	if ret, back := db.ingress(t, encapFrame(epNAT, epB, onWire[42:])); ret != verdictNext || !bytes.Equal(back, orig) {
		t.Fatalf("roaming: verdict %d", ret)
	}
	if e := nextEvent(t, ev, EventUnknownLocator); e.Src != addr(l32(t, epNAT), nidA) {
		t.Fatalf("roaming: unknown-locator event from %v", e.Src)
	}
	if c := encapCounter(t, db, "encap_ingress_roamed"); c != 1 {
		t.Fatalf("encap_ingress_roamed = %d", c)
	}
	// Roaming does not admit a native packet from an unknown locator.
	native := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lX, NID: nidA}, wire.ILV{Locator: lB1, NID: nidB}, hb.peerNonce, wire.ProtoUDP, onWire[42+48:]))
	if ret, _ := db.ingress(t, native); ret != verdictDrop {
		t.Fatalf("roaming: native packet from an unknown locator: verdict %d, want drop", ret)
	}
	must(t, db.SetEncap(EncapConfig{Port: encap.DefaultPort, LocalL32: l32(t, epB)}))
	// Once the NAT endpoint is in the set (as the daemon puts it), the same packet passes.
	encapHost(t, db, hb, epB, epA, l32(t, epNAT))
	if ret, back := db.ingress(t, encapFrame(epNAT, epB, onWire[42:])); ret != verdictNext || !bytes.Equal(back, orig) {
		t.Fatalf("after learning the NAT endpoint: verdict %d", ret)
	}
}

// A Locator Update that arrives encapsulated keeps its wire addresses for the daemon, the
// source being the endpoint as seen (behind a NAT: the NAT's), its ICMPv6 checksum right for
// them.
func TestEncapLocatorUpdateAsSeen(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	encapHost(t, d, h, epA, epB)
	inner := func(from wire.L64) []byte {
		src, dst := addr(from, nidB), addr(l32(t, epA), nidA)
		lu, err := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{{Locator: from, Preference: 1, Lifetime: 30}}}.Marshal(src, dst)
		must(t, err)
		return wire.AppendILNPPacket(nil, wire.ILV{Locator: from, NID: nidB}, wire.ILV{Locator: l32(t, epA), NID: nidA}, h.peerNonce, wire.ProtoICMPv6, lu)
	}
	// B behind a NAT: its packet names its private endpoint, A sees the NAT's.
	private := l32(t, netip.MustParseAddrPort("10.0.0.2:49191"))
	ret, out := d.ingress(t, encapFrame(epNAT, epA, inner(private)))
	if ret != verdictNext {
		t.Fatalf("verdict %d", ret)
	}
	p, pkt := parseFrame(t, out)
	if p.IPv6.Src != addr(l32(t, epNAT), nidB) || p.IPv6.Dst != addr(l32(t, epA), nidA) {
		t.Fatalf("LU addresses %v -> %v, want the outer endpoints", p.IPv6.Src, p.IPv6.Dst)
	}
	checkViewChecksum(t, p, pkt)
	if c := counter(t, d, "ingress_locator_updates"); c != 1 {
		t.Fatalf("ingress_locator_updates = %d", c)
	}
	if c := encapCounter(t, d, "encap_ingress_locators_as_seen"); c != 1 {
		t.Fatalf("encap_ingress_locators_as_seen = %d", c)
	}
}

// Malformed or truncated outer headers, wrong or missing inner nonces: counted by name and
// dropped; UDP/IPv4 to another port and unreadable IPv4 are not ours and pass untouched.
func TestEncapIngressHostile(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	encapHost(t, d, h, epA, epB)
	from, to := wire.ILV{Locator: l32(t, epB), NID: nidB}, wire.ILV{Locator: l32(t, epA), NID: nidA}
	l4 := tcpSegment(zeroLocator(from.Addr()), zeroLocator(to.Addr()), payload)
	good := wire.AppendILNPPacket(nil, from, to, h.peerNonce, wire.ProtoTCP, l4)
	reChecksum := func(f []byte) []byte {
		binary.BigEndian.PutUint16(f[24:], 0)
		binary.BigEndian.PutUint16(f[24:], ipv4Checksum(f[14:34]))
		return f
	}
	for _, tc := range []struct {
		name    string
		frame   func() []byte
		verdict uint32
		counter string // encap counter, or datapath counter when prefixed "ilnp:"
	}{
		{"bad ipv4 checksum", func() []byte { f := encapFrame(epB, epA, good); f[24] ^= 0xff; return f }, verdictDrop, "encap_ingress_bad_checksum"},
		{"ipv4 total length past the end", func() []byte {
			f := encapFrame(epB, epA, good)
			binary.BigEndian.PutUint16(f[16:], uint16(len(f)))
			return reChecksum(f)
		}, verdictDrop, "encap_ingress_truncated"},
		{"udp length disagrees", func() []byte {
			f := encapFrame(epB, epA, good)
			binary.BigEndian.PutUint16(f[38:], 9)
			return f
		}, verdictDrop, "encap_ingress_truncated"},
		{"inner payload length disagrees", func() []byte {
			b := append([]byte(nil), good...)
			binary.BigEndian.PutUint16(b[4:], 1)
			return encapFrame(epB, epA, b)
		}, verdictDrop, "encap_ingress_truncated"},
		{"too short for an ipv6 header", func() []byte { return encapFrame(epB, epA, good[:20]) }, verdictDrop, "encap_ingress_truncated"},
		{"outer fragment", func() []byte {
			f := encapFrame(epB, epA, good)
			binary.BigEndian.PutUint16(f[20:], 0x2000) // MF
			return reChecksum(f)
		}, verdictDrop, "encap_ingress_fragments"},
		{"ipv4 options", func() []byte {
			f := encapFrame(epB, epA, good)
			f = append(f[:34], append([]byte{1, 1, 1, 0}, f[34:]...)...)
			f[14] = 0x46
			binary.BigEndian.PutUint16(f[16:], uint16(len(f)-14))
			return reChecksum(f)
		}, verdictDrop, "encap_ingress_bad_outer"},
		{"inner not ipv6", func() []byte {
			b := append([]byte(nil), good...)
			b[0] = 0x45
			return encapFrame(epB, epA, b)
		}, verdictDrop, "encap_ingress_not_ipv6"},
		{"inner without nonce", func() []byte {
			return encapFrame(epB, epA, ipv6Packet(from.Addr(), to.Addr(), wire.ProtoTCP, l4))
		}, verdictDrop, "encap_ingress_no_nonce"},
		{"inner wrong nonce", func() []byte {
			return encapFrame(epB, epA, wire.AppendILNPPacket(nil, from, to, mustNonce(t, 0xde, 0xad, 0xbe, 0xef), wire.ProtoTCP, l4))
		}, verdictDrop, "ilnp:ingress_bad_nonce"},
		{"inner for a NID not ours", func() []byte {
			return encapFrame(epB, epA, wire.AppendILNPPacket(nil, from, wire.ILV{Locator: to.Locator, NID: nidC}, h.peerNonce, wire.ProtoTCP, l4))
		}, verdictDrop, "encap_ingress_not_accepted"},
		{"another udp port", func() []byte {
			return encapFrame(epB, netip.AddrPortFrom(epA.Addr(), 53), good)
		}, verdictNext, "encap_ingress_packets"},
		{"truncated udp header", func() []byte { return encapFrame(epB, epA, good)[:14+20+4] }, verdictNext, "encap_ingress_packets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.frame()
			name, read := tc.counter, func() uint64 { return encapCounter(t, d, tc.counter) }
			if after, ok := bytes.CutPrefix([]byte(name), []byte("ilnp:")); ok {
				read = func() uint64 { return counter(t, d, string(after)) }
			}
			before := read()
			ret, out := d.ingress(t, in)
			if ret != tc.verdict {
				t.Fatalf("verdict %#x, want %#x", ret, tc.verdict)
			}
			delta := read() - before
			if tc.verdict == verdictDrop && delta != 1 {
				t.Fatalf("%s went up by %d, want 1", name, delta)
			}
			if tc.verdict == verdictNext {
				if delta != 0 {
					t.Fatalf("%s went up by %d for a packet not ours", name, delta)
				}
				if !bytes.Equal(out[:len(in)], in) {
					t.Fatalf("a packet not ours was changed")
				}
			}
		})
	}
	s, err := d.GetSession(nidA, nidB)
	must(t, err)
	if s.RxPackets != 0 {
		t.Fatalf("session RxPackets = %d after hostile packets only", s.RxPackets)
	}
}

func encapCounter(t testing.TB, d *Datapath, name string) uint64 {
	t.Helper()
	c, err := d.EncapCounters()
	must(t, err)
	v, ok := c[name]
	if !ok {
		t.Fatalf("no encap counter %q", name)
	}
	return v
}

// FuzzEncapIngress feeds arbitrary frames (seeded with UDP/IPv4 around ILNPv6) to the ingress
// program of a host with encapsulation on: it answers only with known verdicts, and a frame it
// changes is one it unwrapped and accepted: IPv6 now, at least the outer headers shorter, no
// nonce option left (removed, PadN, or for a Locator Update marked verified), from the session's
// view address to ours (only a packet with the session's nonce gets there).
func FuzzEncapIngress(f *testing.F) {
	h := hostA(f, 4)
	from, to := wire.ILV{Locator: l32(f, epB), NID: nidB}, wire.ILV{Locator: l32(f, epA), NID: nidA}
	l4 := wire.AppendUDP(nil, zeroLocator(from.Addr()), zeroLocator(to.Addr()), 1, 2, payload)
	good := wire.AppendILNPPacket(nil, from, to, h.peerNonce, wire.ProtoUDP, l4)
	f.Add(encapFrame(epB, epA, good))
	f.Add(encapFrame(epNAT, epA, good))
	f.Add(encapFrame(epB, epA, wire.AppendILNPPacket(nil, from, to, mustNonce(f, 1, 2, 3, 4), wire.ProtoUDP, l4)))
	f.Add(encapFrame(epB, epA, ipv6Packet(from.Addr(), to.Addr(), wire.ProtoUDP, l4)))
	f.Add(encapFrame(epB, epA, withHopByHop(good)))
	d := newDatapath(f, Options{})
	encapHost(f, d, h, epA, epB)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 14+20 || len(in) > 1514 {
			return // BPF_PROG_TEST_RUN refuses short and page-sized frames (EINVAL)
		}
		ret, out := d.ingress(t, in)
		switch ret {
		case verdictDrop:
			return
		case verdictNext:
		default:
			t.Fatalf("verdict %d", ret)
		}
		if bytes.Equal(out, in) {
			return
		}
		if !bytes.Equal(out[:12], in[:12]) {
			t.Fatal("Ethernet addresses changed")
		}
		if binary.BigEndian.Uint16(in[12:]) != 0x0800 {
			return // native IPv6: FuzzPrograms' business
		}
		// The outer IPv4 and UDP headers go; the nonce header goes too when it is the first
		// extension header, otherwise its nonce option becomes PadN of the same size.
		if binary.BigEndian.Uint16(out[12:]) != 0x86dd || len(out) > len(in)-28 {
			t.Fatalf("changed an IPv4 frame into % x (%d -> %d bytes)", out[:14], len(in), len(out))
		}
		p, err := wire.ParsePacket(out[14:])
		if err != nil {
			t.Fatalf("unwrapped packet does not parse: %v", err)
		}
		if _, ok := p.Nonce(); ok {
			t.Fatalf("accepted packet still carries a nonce option: % x", out[14:])
		}
		// Accepted: the packet belongs to a session (ours with B, or one a new correspondent
		// opened over IPv4, as over IPv6), in its view; a Locator Update keeps the wire
		// addresses, its source the outer endpoint as seen.
		src, dst := p.IPv6.Src.As16(), p.IPv6.Dst.As16()
		srcNID, dstNID := wire.NID(binary.BigEndian.Uint64(src[8:])), wire.NID(binary.BigEndian.Uint64(dst[8:]))
		s, err := d.GetSession(dstNID, srcNID)
		if dstNID != nidA || err != nil {
			t.Fatalf("accepted %v -> %v without a session: %v", p.IPv6.Src, p.IPv6.Dst, err)
		}
		if up := p.UpperLayer(out[14:]); p.Proto == wire.ProtoICMPv6 && len(up) > 0 && up[0] == wire.ICMPv6TypeLocatorUpdate {
			ep := netip.AddrPortFrom(netip.AddrFrom4([4]byte(in[26:30])), binary.BigEndian.Uint16(in[34:]))
			if got, _ := encap.Endpoint(wire.L64(binary.BigEndian.Uint64(src[:8]))); got != ep {
				t.Fatalf("LU from %v, want the outer endpoint %v", p.IPv6.Src, ep)
			}
			return
		}
		if p.IPv6.Src != addr(s.RemoteView, srcNID) || p.IPv6.Dst != addr(s.LocalView, nidA) {
			t.Fatalf("accepted %v -> %v, not the session view %v -> %v", p.IPv6.Src, p.IPv6.Dst, s.RemoteView, s.LocalView)
		}
	})
}

// withHopByHop puts an empty Hop-by-Hop Options header (PadN only) in front of the Destination
// Options header of the IPv6 packet pkt: the nonce header is then not the first extension
// header, so the ingress turns the nonce option into PadN instead of removing the header.
func withHopByHop(pkt []byte) []byte {
	out := append([]byte(nil), pkt[:40]...)
	binary.BigEndian.PutUint16(out[4:], binary.BigEndian.Uint16(pkt[4:])+8)
	out[6] = 0 // Hop-by-Hop Options
	out = append(out, pkt[6], 0, 1, 4, 0, 0, 0, 0)
	return append(out, pkt[40:]...)
}
