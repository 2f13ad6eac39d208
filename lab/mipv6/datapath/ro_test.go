package datapath

import (
	"bytes"
	"net/netip"
	"testing"

	"ilnp/internal/nstest"
	"ilnp/internal/wire"
	"ilnp/lab/mipv6/mh"
)

// RFC 6275 s.11.3.1: with route optimisation the MN sends from the CoA with a Home Address
// option; the bytes are exactly what the lab/mipv6/mh encoder builds, and the socket's
// checksum (over the HoA) verifies from the HAO.
func TestMNRouteOptimisedSendsHAO(t *testing.T) {
	d := mobileNode(t)
	must(t, d.SetRO(cn, true))
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			l4 := transport(t, p.proto, hoa, cn)
			ret, out := run(t, d.objs.Mip6MnEgress, frame(ipv6Packet(hoa, cn, p.proto, 64, l4)))
			want := frame(envelope(t, mh.Envelope{Src: coa, Dst: cn, HomeAddress: hoa}, p.proto, l4))
			expect(t, ret, out, verdictPass, want)
			checkHomeChecksum(t, out[14:], hoa, cn)
		})
	}
	if counter(t, d, "mn_hao_inserted") != 3 {
		t.Fatal("mn_hao_inserted")
	}
	// Another correspondent still goes through the tunnel.
	inner := ipv6Packet(hoa, other, wire.ProtoUDP, 64, transport(t, wire.ProtoUDP, hoa, other))
	ret, out := run(t, d.objs.Mip6MnEgress, frame(inner))
	expect(t, ret, out, verdictPass, frame(tunnelled(coa, ha, inner)))
}

// A Home Test Init from the HoA always takes the reverse tunnel (s.5.2.5), and so does a packet
// with a Hop-by-Hop header the HAO cannot be put behind.
func TestMNRouteOptimisationExceptions(t *testing.T) {
	d := mobileNode(t)
	must(t, d.SetRO(cn, true))
	hoti, err := mh.AppendMessage(nil, mh.Envelope{Src: hoa, Dst: cn}, &mh.HomeTestInit{Cookie: mh.Cookie{1, 2, 3, 4, 5, 6, 7, 8}})
	must(t, err)
	ret, out := run(t, d.objs.Mip6MnEgress, frame(hoti))
	expect(t, ret, out, verdictPass, frame(tunnelled(coa, ha, hoti)))

	hbh := []byte{wire.ProtoUDP, 0, 1, 4, 0, 0, 0, 0} // PadN
	inner := ipv6Packet(hoa, cn, wire.ProtoHopByHop, 64, hbh, transport(t, wire.ProtoUDP, hoa, cn))
	ret, out = run(t, d.objs.Mip6MnEgress, frame(inner))
	expect(t, ret, out, verdictPass, frame(tunnelled(coa, ha, inner)))
	if counter(t, d, "unsupported") != 1 || counter(t, d, "mn_tunnelled") != 2 {
		t.Fatal("counters")
	}
}

// RFC 6275 s.11.3.3: a type 2 RH with our HoA, sent to our CoA, becomes a packet to the HoA
// with the header gone.
func TestMNStripsType2RH(t *testing.T) {
	d := mobileNode(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			l4 := transport(t, p.proto, cn, hoa)
			in := frame(envelope(t, mh.Envelope{Src: cn, Dst: coa, RoutingHome: hoa}, p.proto, l4))
			checkHomeChecksum(t, in[14:], cn, hoa)
			ret, out := run(t, d.objs.Mip6MnIngress, in)
			expect(t, ret, out, verdictPass, frame(ipv6Packet(cn, hoa, p.proto, 64, l4)))
			checkHomeChecksum(t, out[14:], cn, hoa)
		})
	}
	// A BAck with a type 2 RH is turned into a packet to the HoA the same way.
	back, err := mh.AppendMessage(nil, mh.Envelope{Src: ha, Dst: coa, RoutingHome: hoa}, &mh.BindingAck{Status: 0, Seq: 7, Lifetime: 10})
	must(t, err)
	ret, out := run(t, d.objs.Mip6MnIngress, frame(back))
	if ret != verdictPass {
		t.Fatalf("BAck: verdict %d", ret)
	}
	if _, m, err := mh.ParseMessage(out[14:]); err != nil || m.Type() != mh.TypeBindingAck {
		t.Fatalf("BAck after the strip: %v %v", m, err)
	}

	l4 := transport(t, wire.ProtoUDP, cn, other)
	for name, pkt := range map[string][]byte{
		"not our home address": envelope(t, mh.Envelope{Src: cn, Dst: coa, RoutingHome: other}, wire.ProtoUDP, l4),
		"not our care-of":      envelope(t, mh.Envelope{Src: cn, Dst: other, RoutingHome: hoa}, wire.ProtoUDP, l4),
	} {
		if ret, _ := run(t, d.objs.Mip6MnIngress, frame(pkt)); ret != verdictDrop {
			t.Fatalf("%s: verdict %d, want drop", name, ret)
		}
	}
	if counter(t, d, "mn_rh2_unknown") != 2 || counter(t, d, "mn_rh2_stripped") != 4 {
		t.Fatal("counters")
	}
	// Segments left 0, other routing types: the stack's business.
	bad := envelope(t, mh.Envelope{Src: cn, Dst: coa, RoutingHome: hoa}, wire.ProtoUDP, transport(t, wire.ProtoUDP, cn, hoa))
	bad[40+3] = 0
	in := frame(bad)
	ret, out = run(t, d.objs.Mip6MnIngress, in)
	expect(t, ret, out, verdictNext, in)
	bad[40+2], bad[40+3] = 0, 1
	in = frame(bad)
	ret, out = run(t, d.objs.Mip6MnIngress, in)
	expect(t, ret, out, verdictNext, in)
}

func correspondent(t testing.TB) *Datapath {
	d := newDatapath(t)
	must(t, d.SetBinding(hoa, coa))
	return d
}

// RFC 6275 s.9.3.2: to a home address with a binding, the CN sends to the CoA with a type 2 RH;
// the socket's checksum (over the HoA) still verifies at the final destination.
func TestCNInsertsType2RH(t *testing.T) {
	d := correspondent(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			l4 := transport(t, p.proto, cn, hoa)
			ret, out := run(t, d.objs.Mip6CnEgress, frame(ipv6Packet(cn, hoa, p.proto, 64, l4)))
			want := frame(envelope(t, mh.Envelope{Src: cn, Dst: coa, RoutingHome: hoa}, p.proto, l4))
			expect(t, ret, out, verdictPass, want)
			checkHomeChecksum(t, out[14:], cn, hoa)
		})
	}
	if counter(t, d, "cn_rh2_inserted") != 3 {
		t.Fatal("cn_rh2_inserted")
	}
	// A Home Test goes to the home address as it is (return routability tests the home
	// path); so does traffic to an address without a binding, and after DeleteBinding.
	hot, err := mh.AppendMessage(nil, mh.Envelope{Src: cn, Dst: hoa}, &mh.HomeTest{Cookie: mh.Cookie{1}, Token: mh.Token{2}})
	must(t, err)
	for name, pkt := range map[string][]byte{
		"home test":  hot,
		"no binding": ipv6Packet(cn, other, wire.ProtoUDP, 64, transport(t, wire.ProtoUDP, cn, other)),
	} {
		in := frame(pkt)
		ret, out := run(t, d.objs.Mip6CnEgress, in)
		if ret != verdictNext || !bytes.Equal(out, in) {
			t.Fatalf("%s: verdict %d, changed %v", name, ret, !bytes.Equal(out, in))
		}
	}
	must(t, d.DeleteBinding(hoa))
	in := frame(ipv6Packet(cn, hoa, wire.ProtoUDP, 64, transport(t, wire.ProtoUDP, cn, hoa)))
	ret, out := run(t, d.objs.Mip6CnEgress, in)
	expect(t, ret, out, verdictNext, in)
}

// RFC 6275 s.9.3.1: a HAO from the bound CoA puts the HoA in the source and goes; the
// checksum then verifies over the plain header.
func TestCNSwapsHAO(t *testing.T) {
	d := correspondent(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			l4 := transport(t, p.proto, hoa, cn)
			ret, out := run(t, d.objs.Mip6CnIngress, frame(envelope(t, mh.Envelope{Src: coa, Dst: cn, HomeAddress: hoa}, p.proto, l4)))
			expect(t, ret, out, verdictPass, frame(ipv6Packet(hoa, cn, p.proto, 64, l4)))
			checkHomeChecksum(t, out[14:], hoa, cn)
		})
	}
	// With another option in the same header the HAO becomes PadN in place.
	l4 := transport(t, wire.ProtoUDP, hoa, cn)
	do := []byte{wire.ProtoUDP, 3, 0x1e, 2, 0xaa, 0xbb, mh.HomeAddressOptionType, 16}
	h := hoa.As16()
	do = append(append(do, h[:]...), 1, 6, 0, 0, 0, 0, 0, 0)
	ret, out := run(t, d.objs.Mip6CnIngress, frame(ipv6Packet(coa, cn, wire.ProtoDestOpts, 64, do, l4)))
	wantDO := append([]byte{wire.ProtoUDP, 3, 0x1e, 2, 0xaa, 0xbb, 1, 16}, make([]byte, 16)...)
	wantDO = append(wantDO, 1, 6, 0, 0, 0, 0, 0, 0)
	expect(t, ret, out, verdictPass, frame(ipv6Packet(hoa, cn, wire.ProtoDestOpts, 64, wantDO, l4)))
	if counter(t, d, "cn_hao_swapped") != 4 {
		t.Fatal("cn_hao_swapped")
	}

	// No binding, or a binding for another CoA: dropped.
	for name, pkt := range map[string][]byte{
		"unbound home address": envelope(t, mh.Envelope{Src: coa, Dst: cn, HomeAddress: other}, wire.ProtoUDP, transport(t, wire.ProtoUDP, other, cn)),
		"other care-of":        envelope(t, mh.Envelope{Src: other, Dst: cn, HomeAddress: hoa}, wire.ProtoUDP, l4),
	} {
		if ret, _ := run(t, d.objs.Mip6CnIngress, frame(pkt)); ret != verdictDrop {
			t.Fatalf("%s: verdict %d, want drop", name, ret)
		}
	}
	if counter(t, d, "cn_hao_no_binding") != 2 {
		t.Fatal("cn_hao_no_binding")
	}
	// A Binding Update carries the HAO before any binding exists: the signalling's.
	bu, err := mh.AppendMessage(nil, mh.Envelope{Src: other, Dst: cn, HomeAddress: hoa},
		&mh.BindingUpdate{Seq: 1, Ack: true, Lifetime: 10})
	must(t, err)
	in := frame(bu)
	ret, out = run(t, d.objs.Mip6CnIngress, in)
	expect(t, ret, out, verdictNext, in)
	if counter(t, d, "cn_hao_signalling") != 1 {
		t.Fatal("cn_hao_signalling")
	}
	// Malformed HAO (wrong length): left to the stack, which discards option 201.
	badDO := []byte{wire.ProtoUDP, 2, 1, 2, 0, 0, mh.HomeAddressOptionType, 14}
	badDO = append(badDO, make([]byte, 14)...)
	badDO = append(badDO, 0, 0)
	in = frame(ipv6Packet(coa, cn, wire.ProtoDestOpts, 64, badDO, l4))
	ret, out = run(t, d.objs.Mip6CnIngress, in)
	expect(t, ret, out, verdictNext, in)
}

// End to end through the programs: what one end builds, the other turns back into the
// socket's packet, byte for byte.
func TestRoundTrips(t *testing.T) {
	hagent, mn, corr := homeAgent(t), mobileNode(t), correspondent(t)
	must(t, mn.SetRO(cn, true))
	ns := haNamespace(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			up := ipv6Packet(hoa, cn, p.proto, 64, transport(t, p.proto, hoa, cn))
			down := ipv6Packet(cn, hoa, p.proto, 64, transport(t, p.proto, cn, hoa))

			_, wireUp := run(t, mn.objs.Mip6MnEgress, frame(up))
			ret, got := run(t, corr.objs.Mip6CnIngress, wireUp)
			expect(t, ret, got, verdictPass, frame(up))

			_, wireDown := run(t, corr.objs.Mip6CnEgress, frame(down))
			ret, got = run(t, mn.objs.Mip6MnIngress, wireDown)
			expect(t, ret, got, verdictPass, frame(down))

			// Through the HA: down the tunnel, and back up the reverse tunnel.
			_, tun := runIn(t, ns, hagent.objs.Mip6HaIngress, frame(down))
			ret, got = run(t, mn.objs.Mip6MnIngress, tun)
			down[7]--
			expect(t, ret, got, verdictPass, frame(down))
			must(t, mn.SetRO(cn, false))
			_, rev := run(t, mn.objs.Mip6MnEgress, frame(up))
			must(t, mn.SetRO(cn, true))
			ret, got = runIn(t, ns, hagent.objs.Mip6HaIngress, rev)
			up[7]--
			expect(t, ret, got, verdictRedirect, frame(up))
		})
	}
}

// A socket's packet that the tunnel, the HAO or the type 2 RH would push past the device MTU
// comes back to the stack as a Packet Too Big announcing the room left, as a tunnel device's
// MTU would make it (never handed to veth to vanish).
func TestTooBigAnsweredLocally(t *testing.T) {
	ns := nstest.New(t, "mipMTU")
	ns.Run("ip", "link", "set", "lo", "mtu", "1500")
	udp := func(src, dst netip.Addr, size int) []byte {
		return ipv6Packet(src, dst, wire.ProtoUDP, 64, wire.AppendUDP(nil, src, dst, 1, 2, make([]byte, size-48)))
	}
	mn, corr := mobileNode(t), correspondent(t)
	cases := []struct {
		name string
		d    *Datapath
		ro   bool
		pkt  []byte
		ptb  []byte // nil: fits
	}{
		{"tunnel fits", mn, false, udp(hoa, cn, 1460), nil},
		{"tunnel too big", mn, false, udp(hoa, cn, 1461), packetTooBig(coa, 1460, udp(hoa, cn, 1461))},
		{"HAO fits", mn, true, udp(hoa, cn, 1476), nil},
		{"HAO too big", mn, true, udp(hoa, cn, 1477), packetTooBig(coa, 1476, udp(hoa, cn, 1477))},
		{"RH2 fits", corr, false, udp(cn, hoa, 1476), nil},
		{"RH2 too big", corr, false, udp(cn, hoa, 1500), packetTooBig(cn, 1476, udp(cn, hoa, 1500))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			must(t, mn.SetRO(cn, c.ro))
			prog := mn.objs.Mip6MnEgress
			if c.d == corr {
				prog = corr.objs.Mip6CnEgress
			}
			ret, out := runIn(t, ns, prog, frame(c.pkt))
			if c.ptb == nil {
				if ret != verdictPass {
					t.Fatalf("verdict %d, want pass", ret)
				}
				return
			}
			expect(t, ret, out, verdictRedirect, swappedFrame(c.ptb))
		})
	}
	if counter(t, mn, "mn_too_big") != 2 || counter(t, corr, "cn_too_big") != 1 {
		t.Fatal("too-big counters")
	}
	// The MTU is the egress interface's when the MN redirects.
	must(t, mn.SetRO(cn, false))
	must(t, mn.SetEgress(1, netip.Addr{}))
	if ret, _ := runIn(t, ns, mn.objs.Mip6MnEgress, frame(udp(hoa, cn, 1461))); ret != verdictRedirect || counter(t, mn, "mn_too_big") != 3 {
		t.Fatalf("redirected too-big packet: verdict %d", ret)
	}
}
