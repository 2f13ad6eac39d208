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
