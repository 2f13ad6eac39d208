package datapath

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

func TestLoadAndCounterNames(t *testing.T) {
	nstest.RequireRoot(t)
	spec, err := loadMip6BPF()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(counterNames), int(spec.Maps["counters"].MaxEntries); got != want {
		t.Fatalf("Go knows %d counter names, the datapath has %d counters", got, want)
	}
	d := newDatapath(t)
	c, err := d.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if len(c) != len(counterNames) {
		t.Fatalf("Counters returned %d, want %d", len(c), len(counterNames))
	}
}

func TestAPIRejectsBadAddresses(t *testing.T) {
	d := newDatapath(t)
	bad := []netip.Addr{{}, netip.MustParseAddr("::"), netip.MustParseAddr("::1"), netip.MustParseAddr("fe80::1"),
		netip.MustParseAddr("ff02::1"), netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("192.0.2.1")}
	for _, a := range bad {
		if err := d.SetBinding(a, coa); err == nil {
			t.Errorf("SetBinding(%v, coa) accepted", a)
		}
		if err := d.SetBinding(hoa, a); err == nil {
			t.Errorf("SetBinding(hoa, %v) accepted", a)
		}
		if err := d.SetHomeAgent(a); err == nil {
			t.Errorf("SetHomeAgent(%v) accepted", a)
		}
		if err := d.SetRO(a, true); err == nil {
			t.Errorf("SetRO(%v) accepted", a)
		}
	}
	if err := d.SetBinding(hoa, hoa); err == nil {
		t.Error("SetBinding(hoa, hoa) accepted")
	}
	if err := d.DeleteBinding(hoa); err == nil {
		t.Error("DeleteBinding of a missing binding succeeded")
	}
	must(t, d.SetBinding(hoa, coa))
	must(t, d.SetBinding(hoa, other)) // re-registration from a new CoA replaces
	must(t, d.SetRO(cn, true))
	must(t, d.SetHomeAgent(ha))
	bs, err := d.Bindings()
	must(t, err)
	if len(bs) != 1 || bs[0].HomeAddress != hoa || bs[0].CareOf != other {
		t.Fatalf("bindings %+v", bs)
	}
	peers, err := d.ROPeers()
	must(t, err)
	if len(peers) != 1 || peers[0] != cn {
		t.Fatalf("RO peers %v", peers)
	}
	if got, err := d.HomeAgent(); err != nil || got != ha {
		t.Fatalf("home agent %v, %v", got, err)
	}
	must(t, d.SetRO(cn, false))
	must(t, d.SetRO(cn, false)) // idempotent
	must(t, d.DeleteBinding(hoa))
}

// haNamespace is a namespace where the HA's FIB lookups succeed: forwarding on, the CoA's and
// the CN's prefixes routed via a neighbour router on h0 (MTU 1500).
func haNamespace(t testing.TB) *nstest.NS {
	t.Helper()
	nstest.RequireRoot(t)
	ns, peer := nstest.New(t, "mipHA"), nstest.New(t, "mipHR")
	nstest.Link(t, ns, "h0", peer, "r0")
	ns.Run("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	ns.Run("ip", "addr", "add", "2001:db8:9::1/64", "dev", "h0", "nodad")
	ns.Run("ip", "-6", "route", "add", "2001:db8:3::/64", "via", "2001:db8:9::2", "dev", "h0")
	ns.Run("ip", "-6", "route", "add", "2001:db8:1::/64", "via", "2001:db8:9::2", "dev", "h0")
	return ns
}

func homeAgent(t testing.TB) *Datapath {
	d := newDatapath(t)
	must(t, d.SetHomeAgent(ha))
	must(t, d.SetBinding(hoa, coa))
	return d
}

// RFC 6275 s.10.4.1 / RFC 2473: a packet for a registered home address leaves the HA inside
// ha -> coa, the inner hop limit decremented, the inner bytes otherwise untouched.
func TestHATunnelsToCareOf(t *testing.T) {
	ns := haNamespace(t)
	d := homeAgent(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			l4 := transport(t, p.proto, cn, hoa)
			in := frame(ipv6Packet(cn, hoa, p.proto, 60, l4))
			ret, out := runIn(t, ns, d.objs.Mip6HaIngress, in)
			want := frame(tunnelled(ha, coa, ipv6Packet(cn, hoa, p.proto, 59, l4)))
			expect(t, ret, out, verdictRedirect, want)
			checkHomeChecksum(t, out[14+40:], cn, hoa)
		})
	}
	if n := counter(t, d, "ha_encapsulated"); n != 3 {
		t.Fatalf("ha_encapsulated %d, want 3", n)
	}
	bs, err := d.Bindings()
	must(t, err)
	if bs[0].Packets != 3 {
		t.Fatalf("binding used by %d packets, want 3", bs[0].Packets)
	}
}

// The traffic class goes to the outer header; the flow label does not.
func TestHATunnelCopiesTrafficClass(t *testing.T) {
	ns := haNamespace(t)
	d := homeAgent(t)
	inner := wire.IPv6Header{TrafficClass: 0xb8, FlowLabel: 0x12345, PayloadLen: uint16(len(payload) + 8), NextHeader: wire.ProtoUDP,
		HopLimit: 64, Src: cn, Dst: hoa}.Append(nil)
	inner = wire.AppendUDP(inner, cn, hoa, 1, 2, payload)
	ret, out := runIn(t, ns, d.objs.Mip6HaIngress, frame(inner))
	if ret != verdictRedirect {
		t.Fatalf("verdict %d", ret)
	}
	h, err := wire.ParseIPv6Header(out[14:])
	must(t, err)
	if h.TrafficClass != 0xb8 || h.FlowLabel != 0 || h.NextHeader != 41 || h.HopLimit != 64 {
		t.Fatalf("outer header %+v", h)
	}
}

// Without a route the encapsulated packet is left to the stack. A packet the tunnel cannot
// carry is answered with a Packet Too Big to its source announcing the tunnel's MTU (RFC 2473
// s.7.1), never sent on to be dropped silently by veth; an ICMPv6 error is not answered.
func TestHATunnelNoRouteAndTooBig(t *testing.T) {
	d := homeAgent(t)
	bare := nstest.New(t, "mipHB") // forwarding off: the helper refuses
	l4 := transport(t, wire.ProtoUDP, cn, hoa)
	ret, out := runIn(t, bare, d.objs.Mip6HaIngress, frame(ipv6Packet(cn, hoa, wire.ProtoUDP, 64, l4)))
	expect(t, ret, out, verdictPass, frame(tunnelled(ha, coa, ipv6Packet(cn, hoa, wire.ProtoUDP, 63, l4))))
	if counter(t, d, "ha_no_route") != 1 {
		t.Fatal("ha_no_route not counted")
	}

	ns := haNamespace(t)
	fits := wire.AppendUDP(nil, cn, hoa, 1, 2, make([]byte, 1460-40-8))
	ret, _ = runIn(t, ns, d.objs.Mip6HaIngress, frame(ipv6Packet(cn, hoa, wire.ProtoUDP, 64, fits)))
	if ret != verdictRedirect {
		t.Fatalf("1460-byte packet: verdict %d, want redirect", ret)
	}
	for _, size := range []int{1461, 1500} {
		big := ipv6Packet(cn, hoa, wire.ProtoUDP, 64, wire.AppendUDP(nil, cn, hoa, 1, 2, make([]byte, size-40-8)))
		ret, out = runIn(t, ns, d.objs.Mip6HaIngress, frame(big))
		ptb := packetTooBig(ha, 1460, big)
		expect(t, ret, out, verdictRedirect, frame(ptb))
		if c := wire.PseudoHeaderChecksum(ha, cn, wire.ProtoICMPv6, out[14+40:]); c != 0 {
			t.Fatalf("Packet Too Big checksum residue %#x", c)
		}
	}
	if counter(t, d, "ha_too_big") != 2 {
		t.Fatalf("ha_too_big %d", counter(t, d, "ha_too_big"))
	}
	unreach := append([]byte{1, 3, 0, 0, 0, 0, 0, 0}, make([]byte, 1452)...)
	binary.BigEndian.PutUint16(unreach[2:], wire.PseudoHeaderChecksum(cn, hoa, wire.ProtoICMPv6, unreach))
	ret, _ = runIn(t, ns, d.objs.Mip6HaIngress, frame(ipv6Packet(cn, hoa, wire.ProtoICMPv6, 64, unreach)))
	if ret != verdictDrop || counter(t, d, "ptb_failed") != 1 {
		t.Fatalf("too-big ICMPv6 error: verdict %d, ptb_failed %d", ret, counter(t, d, "ptb_failed"))
	}
}

func TestHALeavesOtherPacketsAlone(t *testing.T) {
	ns := haNamespace(t)
	d := homeAgent(t)
	cases := map[string][]byte{
		"not a home address":  ipv6Packet(cn, other, wire.ProtoUDP, 64, transport(t, wire.ProtoUDP, cn, other)),
		"to the HA itself":    ipv6Packet(cn, ha, wire.ProtoUDP, 64, transport(t, wire.ProtoUDP, cn, ha)),
		"hop limit exhausted": ipv6Packet(cn, hoa, wire.ProtoUDP, 1, transport(t, wire.ProtoUDP, cn, hoa)),
		"from the home link":  ipv6Packet(hoa, cn, wire.ProtoUDP, 64, transport(t, wire.ProtoUDP, hoa, cn)),
	}
	for name, pkt := range cases {
		t.Run(name, func(t *testing.T) {
			in := frame(pkt)
			ret, out := runIn(t, ns, d.objs.Mip6HaIngress, in)
			expect(t, ret, out, verdictNext, in)
		})
	}
	if counter(t, d, "ha_hop_limit") != 1 {
		t.Fatal("ha_hop_limit not counted")
	}
	ret, _ := run(t, d.objs.Mip6HaIngress, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x08, 0x00, 0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	if ret != verdictNext || counter(t, d, "non_ipv6") != 1 {
		t.Fatalf("IPv4: verdict %d", ret)
	}
}

// RFC 6275 s.10.4.5: the reverse tunnel from the registered CoA is decapsulated and the inner
// packet forwarded (hop limit decremented).
func TestHAReverseTunnel(t *testing.T) {
	ns := haNamespace(t)
	d := homeAgent(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			l4 := transport(t, p.proto, hoa, cn)
			in := frame(tunnelled(coa, ha, ipv6Packet(hoa, cn, p.proto, 64, l4)))
			ret, out := runIn(t, ns, d.objs.Mip6HaIngress, in)
			want := frame(ipv6Packet(hoa, cn, p.proto, 63, l4))
			expect(t, ret, out, verdictRedirect, want)
			checkHomeChecksum(t, out[14:], hoa, cn)
		})
	}
	if counter(t, d, "ha_decapsulated") != 3 {
		t.Fatal("ha_decapsulated")
	}
	// Only the registered CoA may tunnel for the home address.
	l4 := transport(t, wire.ProtoUDP, hoa, cn)
	for name, pkt := range map[string][]byte{
		"unregistered care-of": tunnelled(other, ha, ipv6Packet(hoa, cn, wire.ProtoUDP, 64, l4)),
		"unknown home address": tunnelled(coa, ha, ipv6Packet(other, cn, wire.ProtoUDP, 64, l4)),
	} {
		ret, _ := runIn(t, ns, d.objs.Mip6HaIngress, frame(pkt))
		if ret != verdictDrop {
			t.Fatalf("%s: verdict %d, want drop", name, ret)
		}
	}
	if counter(t, d, "ha_reverse_unknown") != 2 {
		t.Fatal("ha_reverse_unknown")
	}
	// Inner length disagreeing with the outer payload length.
	bad := tunnelled(coa, ha, ipv6Packet(hoa, cn, wire.ProtoUDP, 64, l4))
	bad = append(bad, 0, 0, 0, 0, 0, 0, 0, 0)
	bad[4], bad[5] = byte((len(bad)-40)>>8), byte(len(bad)-40)
	if ret, _ := runIn(t, ns, d.objs.Mip6HaIngress, frame(bad)); ret != verdictDrop || counter(t, d, "malformed") != 1 {
		t.Fatalf("bad inner length: verdict %d", ret)
	}
}

func mobileNode(t testing.TB) *Datapath {
	d := newDatapath(t)
	must(t, d.SetHomeAgent(ha))
	must(t, d.SetBinding(hoa, coa))
	return d
}

// RFC 6275 s.11.3.1: away from home, packets from the HoA go to the HA inside coa -> ha; the
// inner packet is the socket's, untouched.
func TestMNReverseTunnels(t *testing.T) {
	d := mobileNode(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			inner := ipv6Packet(hoa, cn, p.proto, 64, transport(t, p.proto, hoa, cn))
			ret, out := run(t, d.objs.Mip6MnEgress, frame(inner))
			expect(t, ret, out, verdictPass, frame(tunnelled(coa, ha, inner)))
		})
	}
	// With an egress interface the packet is redirected there.
	must(t, d.SetEgress(1, netip.MustParseAddr("fe80::3")))
	inner := ipv6Packet(hoa, cn, wire.ProtoUDP, 64, transport(t, wire.ProtoUDP, hoa, cn))
	ret, out := run(t, d.objs.Mip6MnEgress, frame(inner))
	expect(t, ret, out, verdictRedirect, frame(tunnelled(coa, ha, inner)))
	if counter(t, d, "mn_tunnelled") != 4 {
		t.Fatal("mn_tunnelled")
	}
}

func TestMNAtHomeOrOtherSourceUntouched(t *testing.T) {
	d := newDatapath(t)
	must(t, d.SetHomeAgent(ha))
	in := frame(ipv6Packet(hoa, cn, wire.ProtoUDP, 64, transport(t, wire.ProtoUDP, hoa, cn)))
	ret, out := run(t, d.objs.Mip6MnEgress, in)
	expect(t, ret, out, verdictNext, in)
	must(t, d.SetBinding(hoa, coa))
	in = frame(ipv6Packet(coa, cn, wire.ProtoUDP, 64, transport(t, wire.ProtoUDP, coa, cn)))
	ret, out = run(t, d.objs.Mip6MnEgress, in)
	expect(t, ret, out, verdictNext, in)
	// Away without a home agent: counted, sent as it is.
	d2 := newDatapath(t)
	must(t, d2.SetBinding(hoa, coa))
	in = frame(ipv6Packet(hoa, cn, wire.ProtoUDP, 64, transport(t, wire.ProtoUDP, hoa, cn)))
	ret, out = run(t, d2.objs.Mip6MnEgress, in)
	expect(t, ret, out, verdictNext, in)
	if counter(t, d2, "mn_no_home_agent") != 1 {
		t.Fatal("mn_no_home_agent")
	}
}

// RFC 6275 s.11.3.3: the HA's tunnel ends at the MN; the socket sees the inner packet.
func TestMNDecapsulates(t *testing.T) {
	d := mobileNode(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			inner := ipv6Packet(cn, hoa, p.proto, 59, transport(t, p.proto, cn, hoa))
			ret, out := run(t, d.objs.Mip6MnIngress, frame(tunnelled(ha, coa, inner)))
			expect(t, ret, out, verdictPass, frame(inner))
			checkHomeChecksum(t, inner, cn, hoa)
		})
	}
	inner := ipv6Packet(cn, hoa, wire.ProtoUDP, 59, transport(t, wire.ProtoUDP, cn, hoa))
	for name, pkt := range map[string][]byte{
		"not from the HA":       tunnelled(other, coa, inner),
		"not to the care-of":    tunnelled(ha, other, inner),
		"not for the home addr": tunnelled(ha, coa, ipv6Packet(cn, other, wire.ProtoUDP, 59, transport(t, wire.ProtoUDP, cn, other))),
	} {
		in := frame(pkt)
		ret, out := run(t, d.objs.Mip6MnIngress, in)
		if ret != verdictNext || !bytes.Equal(out, in) {
			t.Fatalf("%s: verdict %d, changed %v", name, ret, !bytes.Equal(out, in))
		}
	}
	if counter(t, d, "mn_tunnel_unknown") != 3 || counter(t, d, "mn_detunnelled") != 3 {
		t.Fatal("counters")
	}
}
