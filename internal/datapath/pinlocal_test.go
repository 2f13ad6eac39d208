package datapath

import (
	"testing"

	"ilnp/internal/wire"
)

// A session's packets pinned to one local locator (a soft switch held on the old path,
// internal/tcpaware Pins) leave from it, while its Locator Updates leave from the active one;
// unpinned, everything leaves from the active one again.
func TestSessionsLocalPinsAllButLUs(t *testing.T) {
	d := newDatapath(t, Options{NonceSize: 4})
	h := hostA(t, 4)
	h.setup(t, d, true) // active: l2 on another interface; l1 on lo
	udp := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoUDP, wire.AppendUDP(nil, h.viewSrc(), h.viewDst(), 1, 2, payload)))
	lu, err := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{{Locator: h.l2, Lifetime: 30}}}.Marshal(h.viewSrc(), h.viewDst())
	must(t, err)
	luPkt := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoICMPv6, lu))
	src := func(in []byte) (uint32, wire.L64) {
		t.Helper()
		ret, out := d.egress(t, in)
		p, _ := parseFrame(t, out)
		if p.IPv6.Dst != h.wireDst() {
			t.Fatalf("destination %v, want %v", p.IPv6.Dst, h.wireDst())
		}
		ilv, err := wire.ILVFromAddr(p.IPv6.Src)
		must(t, err)
		return ret, ilv.Locator
	}

	if n, err := d.SetSessionsLocal(h.peer, h.l1); err != nil || n != 1 {
		t.Fatalf("pin: %d sessions, %v; want 1", n, err)
	}
	if ret, loc := src(udp); loc != h.l1 || ret != verdictPass {
		t.Fatalf("pinned UDP left from %v (verdict %d), want %v on its own interface (pass)", loc, ret, h.l1)
	}
	if ret, loc := src(luPkt); loc != h.l2 || ret != verdictRedirect {
		t.Fatalf("LU of a pinned session left from %v (verdict %d), want the active %v (redirect)", loc, ret, h.l2)
	}
	s, err := d.GetSession(h.nid, h.peer)
	must(t, err)
	if s.LocalLocator != h.l1 || s.LocalNonce != h.nonce || s.RemoteActive != h.peer2 {
		t.Fatalf("pinned session %+v: the pin changed more than the local locator", s)
	}

	if n, err := d.SetSessionsLocal(h.peer, 0); err != nil || n != 1 {
		t.Fatalf("unpin: %d sessions, %v; want 1", n, err)
	}
	if ret, loc := src(udp); loc != h.l2 || ret != verdictRedirect {
		t.Fatalf("unpinned UDP left from %v (verdict %d), want the active %v (redirect)", loc, ret, h.l2)
	}
	if n, err := d.SetSessionsLocal(wire.NID(0x77), h.l1); err != nil || n != 0 {
		t.Fatalf("pin of a peer without sessions: %d, %v; want 0, nil", n, err)
	}
}

// TestSessionsRemotePinsAllButLUs: a session pinned to a remote locator (the correspondent's
// soft switch seen from this side) sends its packets there, its Locator Updates and LU-ACKs
// to the active remote locator; a pinned locator that leaves the usable set, and the release,
// send everything to the active one again.
func TestSessionsRemotePinsAllButLUs(t *testing.T) {
	d := newDatapath(t, Options{NonceSize: 4})
	h := hostA(t, 4)
	h.setup(t, d, true) // remote active: peer2; peer1 valid
	udp := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoUDP, wire.AppendUDP(nil, h.viewSrc(), h.viewDst(), 1, 2, payload)))
	packet := func(op wire.Operation) []byte {
		lu, err := wire.LocatorUpdate{Op: op, Locators: []wire.LocatorEntry{{Locator: h.l2, Lifetime: 30}}}.Marshal(h.viewSrc(), h.viewDst())
		must(t, err)
		return frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoICMPv6, lu))
	}
	lu, ack := packet(wire.OpAdvertisement), packet(wire.OpAcknowledgement)
	dst := func(in []byte) wire.L64 {
		t.Helper()
		_, out := d.egress(t, in)
		p, _ := parseFrame(t, out)
		ilv, err := wire.ILVFromAddr(p.IPv6.Dst)
		must(t, err)
		return ilv.Locator
	}

	if n, err := d.SetSessionsRemote(h.peer, h.peer1); err != nil || n != 1 {
		t.Fatalf("pin: %d sessions, %v; want 1", n, err)
	}
	if got := dst(udp); got != h.peer1 {
		t.Fatalf("pinned UDP went to %v, want the pinned %v", got, h.peer1)
	}
	if got := dst(lu); got != h.peer2 {
		t.Fatalf("LU of a pinned session went to %v, want the active %v", got, h.peer2)
	}
	if got := dst(ack); got != h.peer2 {
		t.Fatalf("LU-ACK of a pinned session went to %v, want the active %v", got, h.peer2)
	}
	s, err := d.GetSession(h.nid, h.peer)
	must(t, err)
	if s.Flags&SessionRemotePinned == 0 || s.RemoteActive != h.peer2 || s.LocalLocator != 0 {
		t.Fatalf("pinned session %+v: want the flag and nothing else changed", s)
	}

	// The pinned locator leaves the usable set: the active one again, pin or not.
	_, err = d.SetRemoteLocators(h.peer, []RemoteLocator{{Locator: h.peer1, State: LocatorExpired}, {Locator: h.peer2, State: LocatorActive}}, h.peer2)
	must(t, err)
	if got := dst(udp); got != h.peer2 {
		t.Fatalf("UDP pinned to an expired locator went to %v, want the active %v", got, h.peer2)
	}
	_, err = d.SetRemoteLocators(h.peer, []RemoteLocator{{Locator: h.peer1, State: LocatorValid}, {Locator: h.peer2, State: LocatorActive}}, h.peer2)
	must(t, err)
	if got := dst(udp); got != h.peer1 {
		t.Fatalf("UDP pinned to a valid locator again went to %v, want %v", got, h.peer1)
	}

	if n, err := d.SetSessionsRemote(h.peer, 0); err != nil || n != 1 {
		t.Fatalf("release: %d sessions, %v; want 1", n, err)
	}
	if got := dst(udp); got != h.peer2 {
		t.Fatalf("released UDP went to %v, want the active %v", got, h.peer2)
	}
	if s, _ := d.GetSession(h.nid, h.peer); s.Flags&SessionRemotePinned != 0 {
		t.Fatalf("released session still flagged: %v", s.Flags)
	}
	var k ilnpBPFIlnpSessionKey
	var v uint64
	if d.objs.RemotePins.Iterate().Next(&k, &v) {
		t.Fatalf("release left a remote_pins entry")
	}
	if n, err := d.SetSessionsRemote(wire.NID(0x77), h.peer1); err != nil || n != 0 {
		t.Fatalf("pin of a peer without sessions: %d, %v; want 0, nil", n, err)
	}
}
