package datapath

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"ilnp/internal/wire"
)

// freebsdPacket is a packet as FreeBSD ILNP (github.com/ilnp/ilnp-freebsd14) sends it: the
// IPv6 header, then the Destination Options header ilnp6_nonce_output() builds (ilnp6.c:
// struct ilnp_nonce_dest = ip6_dest {nxt, len = (8 >> 3) - 1 = 0} + ip6_opt {type 0x8B,
// len 4} + the 4 nonce bytes, no padding: 8 bytes), then the transport message whose
// checksum ilnp6_cksum() computes over the NIDs only (ilnp6.c _ilnp6_cksum_pseudo: "ignore
// L64"). The nonce is the session's one shared value (ilnp6.h struct foreignnid: n_lnonce and
// n_rnonce are both n_nonce).
func freebsdPacket(src, dst netip.Addr, nonce [4]byte, proto uint8, l4 []byte) []byte {
	do := append([]byte{proto, 0, 0x8b, 4}, nonce[:]...)
	return ipv6Packet(src, dst, wire.ProtoDestOpts, do, l4)
}

// FreeBSD opens the session with its own nonce and, after our first reply, sends ours
// (ilnp6.c ilnp6_nonce_input, "Case 2": foreignnid found by I-LV, ILNP6_FOREIGN_NONCE_SET not
// yet set, so the reply's nonce is copied into the shared n_nonce). Both for an answered
// (promoted) session and for an embryo the stack answered mechanically (a SYN-ACK), its next
// packets are accepted, not counted as bad nonces, and the session expects our nonce from then.
func TestFreeBSDSharedNonce(t *testing.T) {
	for _, promoted := range []bool{true, false} {
		d := newDatapath(t, Options{})
		h := hostA(t, 4)
		h.setup(t, d, false)
		ev := events(t, d)
		from, to := h.wireFrom(), addr(h.l2, h.nid)
		theirs := [4]byte{0xf1, 0xf2, 0xf3, 0xf4}
		udp := func(n [4]byte) []byte {
			return frame(freebsdPacket(from, to, n, wire.ProtoUDP, wire.AppendUDP(nil, zeroLocator(from), zeroLocator(to), 1, 2, payload)))
		}
		if ret, _ := d.ingress(t, udp(theirs)); ret != verdictNext {
			t.Fatalf("promoted=%v: FreeBSD's first packet: verdict %d", promoted, ret)
		}
		// Our reply: a UDP datagram (promotes the embryo) or a SYN-ACK (leaves it embryonic).
		view := addr(lA1, h.nid)
		back := addr(h.peer2, h.peer)
		reply := wire.AppendUDP(nil, view, back, 2, 1, payload)
		proto := uint8(wire.ProtoUDP)
		if !promoted {
			reply = tcpSegment(view, back, nil)
			reply[13] = 0x12 // SYN|ACK
			reply[16], reply[17] = 0, 0
			binary.BigEndian.PutUint16(reply[16:], wire.PseudoHeaderChecksum(view, back, wire.ProtoTCP, reply))
			proto = wire.ProtoTCP
		}
		ret, out := d.egress(t, frame(ipv6Packet(view, back, proto, reply)))
		if ret != verdictRedirect && ret != verdictNext {
			t.Fatalf("promoted=%v: reply verdict %d", promoted, ret)
		}
		p, _ := parseFrame(t, out)
		ours, ok := p.Nonce()
		if !ok {
			t.Fatalf("promoted=%v: reply without nonce", promoted)
		}
		var shared [4]byte
		copy(shared[:], ours.Bytes())
		// FreeBSD's second and third packets carry our nonce.
		for i := range 2 {
			if ret, _ := d.ingress(t, udp(shared)); ret != verdictNext {
				c, _ := d.Counters()
				t.Fatalf("promoted=%v: FreeBSD packet %d with the shared nonce: verdict %d %v", promoted, i+2, ret, c)
			}
		}
		if c := counter(t, d, "ingress_bad_nonce"); c != 0 {
			t.Errorf("promoted=%v: ingress_bad_nonce = %d, want 0", promoted, c)
		}
		if c := counter(t, d, "ingress_shared_nonce"); c != 1 {
			t.Errorf("promoted=%v: ingress_shared_nonce = %d, want 1", promoted, c)
		}
		if promoted {
			s, err := d.GetSession(h.nid, h.peer)
			must(t, err)
			if s.RemoteNonce != ours || s.Flags&SessionSharedNonce == 0 {
				t.Fatalf("session expects %v flags %v, want %v shared-nonce", s.RemoteNonce, s.Flags, ours)
			}
			nextEvent(t, ev, EventNonceLearned)
			// Its own first nonce is no longer accepted, nor anything else.
			if ret, _ := d.ingress(t, udp(theirs)); ret != verdictDrop {
				t.Fatalf("FreeBSD's old nonce after the switch: verdict %d, want drop", ret)
			}
			if ret, _ := d.ingress(t, udp([4]byte{1, 2, 3, 4})); ret != verdictDrop {
				t.Fatalf("a third nonce: verdict %d, want drop", ret)
			}
		}
	}
}

// Only a session the peer opened switches, and only to this host's own nonce: a session this
// host opened (its peer's nonce learned from the first reply) refuses its own nonce coming
// back, and a responder session refuses it after its first packets.
func TestSharedNonceRefused(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true) // PutSession: neither responder nor initiator flag
	from, to := h.wireFrom(), addr(h.l2, h.nid)
	var mine [4]byte
	copy(mine[:], h.nonce.Bytes())
	in := frame(freebsdPacket(from, to, mine, wire.ProtoUDP, wire.AppendUDP(nil, zeroLocator(from), zeroLocator(to), 1, 2, payload)))
	if ret, _ := d.ingress(t, in); ret != verdictDrop {
		t.Fatalf("own nonce on a session this host set up: verdict %d, want drop", ret)
	}

	d = newDatapath(t, Options{})
	h.setup(t, d, false)
	theirs := [4]byte{0xf1, 0xf2, 0xf3, 0xf4}
	udp := func(n [4]byte) []byte {
		return frame(freebsdPacket(from, to, n, wire.ProtoUDP, wire.AppendUDP(nil, zeroLocator(from), zeroLocator(to), 1, 2, payload)))
	}
	view, back := addr(lA1, h.nid), addr(h.peer2, h.peer)
	for range 20 {
		if ret, _ := d.ingress(t, udp(theirs)); ret != verdictNext {
			t.Fatalf("verdict %d", ret)
		}
	}
	_, out := d.egress(t, frame(ipv6Packet(view, back, wire.ProtoUDP, wire.AppendUDP(nil, view, back, 2, 1, payload))))
	p, _ := parseFrame(t, out)
	ours, _ := p.Nonce()
	copy(mine[:], ours.Bytes())
	if ret, _ := d.ingress(t, udp(mine)); ret != verdictDrop {
		t.Fatalf("own nonce after 20 packets: verdict %d, want drop", ret)
	}
	if c := counter(t, d, "ingress_shared_nonce"); c != 0 {
		t.Fatalf("ingress_shared_nonce = %d", c)
	}
}
