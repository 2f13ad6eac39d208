package datapath

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"ilnp/internal/encap"
	"ilnp/internal/wire"
)

// encap6Frame is inner inside UDP/IPv6 from src to dst in an Ethernet frame, as encap6.h builds
// it: hop limit 64, both ports the encapsulation port, UDP checksum zero.
func encap6Frame(src, dst netip.Addr, inner []byte) []byte {
	f := append([]byte(nil), ethHeader...)
	ip := make([]byte, 40)
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(8+len(inner)))
	ip[6], ip[7] = wire.ProtoUDP, 64
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], encap.DefaultPort)
	binary.BigEndian.PutUint16(udp[2:], encap.DefaultPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(inner)))
	return append(append(append(f, ip...), udp...), inner...)
}

func encap6Host(t testing.TB, d *Datapath, h host) {
	t.Helper()
	h.setup(t, d, true)
	must(t, d.SetEncap(EncapConfig{Port6: encap.DefaultPort}))
}

func pairOf(h host) PathKey {
	return PathKey{LocalNID: h.nid, RemoteNID: h.peer, Local: h.l2, Remote: h.peer2}
}

func encap6PairOf(t testing.TB, d *Datapath, k PathKey) (Encap6Pair, bool) {
	t.Helper()
	ps, err := d.Encap6Pairs()
	must(t, err)
	for _, p := range ps {
		if p.Key == k {
			return p, true
		}
	}
	return Encap6Pair{}, false
}

// A pair turned on sends the ILNPv6 packet, nonce and all, inside UDP/IPv6 whose addresses are
// the inner wire addresses; a session without the pair on sends natively.
func TestEncap6Egress(t *testing.T) {
	for _, pr := range protos {
		t.Run(pr.name, func(t *testing.T) {
			d := newDatapath(t, Options{})
			h := hostA(t, 4)
			encap6Host(t, d, h)
			l4 := transport(t, pr.proto, h.viewSrc(), h.viewDst(), payload)
			in := frame(ipv6Packet(h.viewSrc(), h.viewDst(), pr.proto, l4))
			_, native := d.egress(t, in)
			if p, _ := parseFrame(t, native); p.Proto != pr.proto {
				t.Fatalf("pair off: protocol %d, want native %d", p.Proto, pr.proto)
			}
			must(t, d.SetEncap6Pair(pairOf(h), true))
			s, err := d.GetSession(h.nid, h.peer)
			must(t, err)
			if s.Flags&SessionEncap6 == 0 {
				t.Fatalf("session flags %v, want encap6", s.Flags)
			}
			ret, out := d.egress(t, in)
			if ret != verdictRedirect {
				t.Fatalf("verdict %d, want redirect", ret)
			}
			if len(out) < 14+48 {
				t.Fatalf("output of %d bytes", len(out))
			}
			inner := out[14+48:]
			if want := encap6Frame(h.wireSrc(), h.wireDst(), inner); !bytes.Equal(out, want) {
				t.Fatalf("outer headers\n got % x\nwant % x", out[:62], want[:62])
			}
			if !bytes.Equal(inner, native[14:]) {
				t.Fatalf("inner packet differs from the native one")
			}
			p, err := wire.ParsePacket(inner)
			must(t, err)
			if n, ok := p.Nonce(); !ok || n != h.nonce {
				t.Fatalf("nonce %v (present %v), want %v", n, ok, h.nonce)
			}
			checkWireChecksum(t, p, inner)
			if c := counter(t, d, "egress_encap6"); c != 1 {
				t.Fatalf("egress_encap6 = %d", c)
			}
			if e, ok := encap6PairOf(t, d, pairOf(h)); !ok || !e.On || e.ByPeer || e.TxPackets != 1 {
				t.Fatalf("pair %+v (listed %v)", e, ok)
			}
		})
	}
}

// Both ends agree from authenticated packets only: B, told nothing, turns its side of the pair
// on when A's encapsulated packet passes the nonce check, answers encapsulated, and goes back
// to native when a verified native packet of A's arrives on the pair.
func TestEncap6PeerLearns(t *testing.T) {
	da, db := newDatapath(t, Options{}), newDatapath(t, Options{})
	ha, hb := hostA(t, 4), hostB(t, 4)
	encap6Host(t, da, ha)
	encap6Host(t, db, hb)
	must(t, da.SetEncap6Pair(pairOf(ha), true))
	orig := frame(ipv6Packet(ha.viewSrc(), ha.viewDst(), wire.ProtoUDP, transport(t, wire.ProtoUDP, ha.viewSrc(), ha.viewDst(), payload)))
	_, onWire := da.egress(t, orig)
	ret, back := db.ingress(t, onWire)
	if ret != verdictNext || !bytes.Equal(back, orig) {
		t.Fatalf("ingress verdict %d, round trip equal %v", ret, bytes.Equal(back, orig))
	}
	if c := counter(t, db, "ingress_encap6"); c != 1 {
		t.Fatalf("ingress_encap6 = %d", c)
	}
	e, ok := encap6PairOf(t, db, pairOf(hb))
	if !ok || !e.On || !e.ByPeer || e.RxPackets != 1 {
		t.Fatalf("B's pair %+v (listed %v)", e, ok)
	}
	reply := frame(ipv6Packet(hb.viewSrc(), hb.viewDst(), wire.ProtoUDP, transport(t, wire.ProtoUDP, hb.viewSrc(), hb.viewDst(), payload)))
	_, out := db.egress(t, reply)
	if len(out) < 14+48 || out[14+6] != wire.ProtoUDP || binary.BigEndian.Uint16(out[14+42:]) != encap.DefaultPort {
		t.Fatalf("B's answer not encapsulated: % x", out[:min(len(out), 62)])
	}
	// A's native probe asks for a native answer (the payload's 'N'); its echo request does not
	// turn B native, anything else verified and native does.
	must(t, da.SetEncap6Pair(pairOf(ha), false))
	probe := append(append([]byte("ILNPpath"), make([]byte, 16)...), 'N')
	_, req := da.egress(t, frame(ipv6Packet(ha.viewSrc(), ha.viewDst(), wire.ProtoICMPv6, icmpEcho(ha.viewSrc(), ha.viewDst(), probe))))
	if ret, _ := db.ingress(t, req); ret != verdictNext {
		t.Fatalf("native probe: verdict %d", ret)
	}
	if e, _ := encap6PairOf(t, db, pairOf(hb)); !e.On {
		t.Fatalf("an echo request turned B's pair native")
	}
	_, native := da.egress(t, orig)
	if ret, _ := db.ingress(t, native); ret != verdictNext {
		t.Fatalf("native packet: verdict %d", ret)
	}
	if e, _ := encap6PairOf(t, db, pairOf(hb)); e.On || counter(t, db, "ingress_encap6_native") != 1 {
		t.Fatalf("B's pair %+v after a verified native packet", e)
	}
	if _, out := db.egress(t, reply); len(out) >= 14+7 && out[14+6] == wire.ProtoUDP {
		t.Fatalf("B still encapsulates after going native")
	}
}

// A native probe ('N') leaves natively even on a pair that is on.
func TestEncap6NativeProbe(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	encap6Host(t, d, h)
	must(t, d.SetEncap6Pair(pairOf(h), true))
	for _, c := range []struct {
		data   []byte
		native bool
	}{
		{append(append([]byte("ILNPpath"), make([]byte, 16)...), 'N'), true},
		{append(append([]byte("ILNPpath"), make([]byte, 16)...), 'x'), false},
		{[]byte("ILNPpath"), false},
	} {
		_, out := d.egress(t, frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoICMPv6, icmpEcho(h.viewSrc(), h.viewDst(), c.data))))
		if got := out[14+6] != wire.ProtoUDP; got != c.native {
			t.Errorf("probe % x: native %v, want %v", c.data, got, c.native)
		}
	}
}

// What arrives on the port is checked before anything: outer addresses that are not the inner
// ones, lengths that disagree and inner packets without the session's nonce are dropped and
// counted; with the port off it is not unwrapped, and as plain IPv6 between the session's
// addresses it meets the missing-nonce rule (RFC 6744 s.6).
func TestEncap6IngressHostile(t *testing.T) {
	da, db := newDatapath(t, Options{}), newDatapath(t, Options{})
	ha, hb := hostA(t, 4), hostB(t, 4)
	encap6Host(t, da, ha)
	encap6Host(t, db, hb)
	must(t, da.SetEncap6Pair(pairOf(ha), true))
	orig := frame(ipv6Packet(ha.viewSrc(), ha.viewDst(), wire.ProtoUDP, transport(t, wire.ProtoUDP, ha.viewSrc(), ha.viewDst(), payload)))
	_, good := da.egress(t, orig)
	inner := good[14+48:]
	plain := ipv6Packet(ha.wireSrc(), ha.wireDst(), wire.ProtoUDP, transport(t, wire.ProtoUDP, ha.wireSrc(), ha.wireDst(), payload))
	short := append([]byte(nil), good...)
	binary.BigEndian.PutUint16(short[14+44:], uint16(len(inner))) // UDP length 8 short
	badNonce := append([]byte(nil), good...)
	badNonce[14+48+40+4] ^= 0xff
	for _, c := range []struct {
		name    string
		frame   []byte
		counter string
	}{
		{"outer source not the inner", encap6Frame(addr(lX, nidA), ha.wireDst(), inner), "ingress_encap6_bad_outer"},
		{"outer destination not the inner", encap6Frame(ha.wireSrc(), addr(lB1, nidB), inner), "ingress_encap6_bad_outer"},
		{"lengths disagree", short, "ingress_encap6_bad_outer"},
		{"no nonce inside", encap6Frame(ha.wireSrc(), ha.wireDst(), plain), ""},
		{"wrong nonce inside", badNonce, "ingress_bad_nonce"},
	} {
		before := uint64(0)
		if c.counter != "" {
			before = counter(t, db, c.counter)
		}
		if ret, _ := db.ingress(t, c.frame); ret != verdictDrop {
			t.Errorf("%s: verdict %d, want drop", c.name, ret)
		}
		if c.counter != "" && counter(t, db, c.counter) != before+1 {
			t.Errorf("%s: %s not counted", c.name, c.counter)
		}
	}
	if _, ok := encap6PairOf(t, db, pairOf(hb)); ok {
		t.Fatalf("a refused packet made an encap6 pair")
	}
	must(t, db.SetEncap(EncapConfig{}))
	unwrapped, missing := counter(t, db, "ingress_encap6"), counter(t, db, "ingress_missing_nonce")
	if ret, _ := db.ingress(t, good); ret != verdictDrop || counter(t, db, "ingress_encap6") != unwrapped ||
		counter(t, db, "ingress_missing_nonce") != missing+1 {
		t.Fatalf("port off: verdict %d, unwrapped %d -> %d", ret, unwrapped, counter(t, db, "ingress_encap6"))
	}
}

// The daemon's plain probe and the peer kernel's echo of it leave as plain IPv6 even between
// the session-view addresses (no nonce header, no locator rewriting): they test the path
// without the header. Any other echo between them is the session's.
func TestEncap6PlainProbePassesUntranslated(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	encap6Host(t, d, h)
	for _, c := range []struct {
		name  string
		typ   byte
		data  []byte
		plain bool
	}{
		{"plain probe", 128, []byte("ILNPplain-probe"), true},
		{"its echo", 129, []byte("ILNPplain-probe"), true},
		{"another echo request", 128, []byte("ILNPplan-not-a-probe"), false},
		{"a liveness probe", 128, []byte("ILNPpath"), false},
	} {
		m := icmpEcho(h.viewSrc(), h.viewDst(), c.data)
		m[0] = c.typ
		m[2], m[3] = 0, 0
		binary.BigEndian.PutUint16(m[2:], wire.PseudoHeaderChecksum(h.viewSrc(), h.viewDst(), wire.ProtoICMPv6, m))
		in := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoICMPv6, m))
		ret, out := d.egress(t, in)
		if got := ret == verdictNext && bytes.Equal(out, in); got != c.plain {
			t.Errorf("%s: passed untouched %v (verdict %d), want %v", c.name, got, ret, c.plain)
		}
	}
}
