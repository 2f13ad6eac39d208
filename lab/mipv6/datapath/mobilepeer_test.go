package datapath

import (
	"net/netip"
	"testing"

	"ilnp/internal/wire"
	"ilnp/lab/mipv6/mh"
)

// A mobile peer (the double jump): the other end is a mobile node too, with its home address
// in L4 and its care-of address in L5, and this mobile node is its correspondent.
var (
	peerHoA = netip.MustParseAddr("2001:db8:4::cc")
	peerCoA = netip.MustParseAddr("2001:db8:5::cc")
)

// mobilePeers is a mobile node away from home that has accepted its peer's route
// optimisation (the peer's binding is in the same map) and route-optimised with it (ro).
func mobilePeers(t *testing.T, ro bool) *Datapath {
	d := mobileNode(t)
	must(t, d.SetBinding(peerHoA, peerCoA))
	must(t, d.SetRO(peerHoA, ro))
	return d
}

// Both ends route-optimised: one packet carries the type 2 RH for the peer's home address and
// the Home Address option for ours, the RH first (RFC 6275 s.6.3, s.6.4), from CoA to CoA; the
// socket's checksum (home address to home address) verifies over them.
func TestMobilePeersSendBothHeaders(t *testing.T) {
	d := mobilePeers(t, true)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			l4 := transport(t, p.proto, hoa, peerHoA)
			ret, out := run(t, d.objs.Mip6MnEgress, frame(ipv6Packet(hoa, peerHoA, p.proto, 64, l4)))
			want := frame(envelope(t, mh.Envelope{Src: coa, Dst: peerCoA, HomeAddress: hoa, RoutingHome: peerHoA}, p.proto, l4))
			expect(t, ret, out, verdictPass, want)
			checkHomeChecksum(t, out[14:], hoa, peerHoA)
		})
	}
	if counter(t, d, "mn_hao_inserted") != 3 || counter(t, d, "cn_rh2_inserted") != 3 {
		t.Fatal("counters")
	}
}

// Before our own route optimisation completes, packets to the peer take the reverse tunnel with
// the peer's home address inside (its home agent tunnels them on); signalling the daemon built
// (a BU from the care-of address with its HAO) leaves as it is, to the peer's home address.
func TestMobilePeerTunnelAndSignallingUntouched(t *testing.T) {
	d := mobilePeers(t, false)
	inner := ipv6Packet(hoa, peerHoA, wire.ProtoUDP, 64, transport(t, wire.ProtoUDP, hoa, peerHoA))
	ret, out := run(t, d.objs.Mip6MnEgress, frame(inner))
	expect(t, ret, out, verdictPass, frame(tunnelled(coa, ha, inner)))

	bu, err := mh.AppendMessage(nil, mh.Envelope{Src: coa, Dst: peerHoA, HomeAddress: hoa}, &mh.BindingUpdate{Seq: 1, Ack: true, Lifetime: 10})
	must(t, err)
	ret, out = run(t, d.objs.Mip6MnEgress, frame(bu))
	expect(t, ret, out, verdictNext, frame(bu))
	if counter(t, d, "cn_rh2_inserted") != 0 {
		t.Fatal("a type 2 RH went onto the tunnel or the BU")
	}
}

// What the peer sends arrives route-optimised both ways (RH2 for our home address, HAO for
// its), or with only its HAO through our home agent's tunnel: either way the socket gets home
// address to home address, and the checksum verifies. A HAO from a care-of address that is not
// bound is dropped (s.9.3.1).
func TestMobilePeerReceives(t *testing.T) {
	d := mobilePeers(t, true)
	l4 := transport(t, wire.ProtoUDP, peerHoA, hoa)
	plain := frame(ipv6Packet(peerHoA, hoa, wire.ProtoUDP, 64, l4))
	both := envelope(t, mh.Envelope{Src: peerCoA, Dst: coa, RoutingHome: hoa, HomeAddress: peerHoA}, wire.ProtoUDP, l4)
	ret, out := run(t, d.objs.Mip6MnIngress, frame(both))
	expect(t, ret, out, verdictPass, plain)
	checkHomeChecksum(t, out[14:], peerHoA, hoa)

	viaHA := envelope(t, mh.Envelope{Src: peerCoA, Dst: hoa, HomeAddress: peerHoA}, wire.ProtoUDP, l4)
	ret, out = run(t, d.objs.Mip6MnIngress, frame(tunnelled(ha, coa, viaHA)))
	expect(t, ret, out, verdictPass, plain)

	if counter(t, d, "mn_rh2_stripped") != 1 || counter(t, d, "mn_detunnelled") != 1 || counter(t, d, "cn_hao_swapped") != 2 {
		t.Fatal("counters")
	}
	spoofed := envelope(t, mh.Envelope{Src: other, Dst: coa, RoutingHome: hoa, HomeAddress: peerHoA}, wire.ProtoUDP, l4)
	if ret, _ := run(t, d.objs.Mip6MnIngress, frame(spoofed)); ret != verdictDrop || counter(t, d, "cn_hao_no_binding") != 1 {
		t.Fatalf("HAO from an unbound care-of address: verdict %d", ret)
	}
}
