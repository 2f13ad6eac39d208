package datapath

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"

	"ilnp/internal/wire"
)

// A session keeps its first sessionRemoteLocators remote locators in its table entry and the
// rest in remote_more: a packet from the last of eight is accepted like one from the first,
// an unknown one is not, the set reads back whole, and shrinking or deleting the session
// removes the remote_more entry (issue 28: the session table entry is smaller for everyone).
func TestRemoteLocatorsPastTheEntry(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	s, err := d.GetSession(nidA, nidB)
	must(t, err)
	var set []RemoteLocator
	for i := range MaxRemoteLocators {
		set = append(set, RemoteLocator{Locator: wire.L64(0x2001_0db8_00ff_0000 | uint64(i)), State: LocatorValid, Preference: uint16(i), Lifetime: 60})
	}
	last := set[MaxRemoteLocators-1].Locator
	s.RemoteLocators = set
	must(t, d.PutSession(s))
	k := sessionKey(nidA, nidB)
	var rest ilnpBPFIlnpRemoteMore
	must(t, d.objs.RemoteMore.Lookup(k, &rest))
	got, err := d.GetSession(nidA, nidB)
	must(t, err)
	if len(got.RemoteLocators) != MaxRemoteLocators || got.RemoteLocators[MaxRemoteLocators-1] != set[MaxRemoteLocators-1] ||
		got.Flags != s.Flags {
		t.Fatalf("read back %+v, want %d locators and flags %v", got, MaxRemoteLocators, s.Flags)
	}
	pkt := func(src wire.L64) []byte {
		from, to := addr(src, nidB), addr(lA2, nidA)
		return frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: src, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, h.peerNonce,
			wire.ProtoUDP, wire.AppendUDP(nil, zeroLocator(from), zeroLocator(to), 1, 2, payload)))
	}
	if ret, _ := d.ingress(t, pkt(last)); ret != verdictNext {
		t.Fatalf("packet from the eighth remote locator: verdict %d", ret)
	}
	if ret, _ := d.ingress(t, pkt(lX)); ret != verdictDrop {
		t.Fatalf("packet from an unknown remote locator: verdict %d", ret)
	}
	if mark, err := d.ChallengeMarkFor(nidA, nidB, last); err != nil || mark != ChallengeMark|uint32(MaxRemoteLocators-1) {
		t.Fatalf("challenge mark of the eighth locator: %#x, %v", mark, err)
	}
	all, err := d.Sessions()
	must(t, err)
	if len(all) != 1 || len(all[0].RemoteLocators) != MaxRemoteLocators {
		t.Fatalf("Sessions: %+v", all)
	}

	// Back to two: the entry holds them, remote_more forgets the session and the locators
	// that were there are no longer accepted.
	if n, err := d.SetRemoteLocators(nidB, set[:2], set[0].Locator); err != nil || n != 1 {
		t.Fatalf("SetRemoteLocators: %d, %v", n, err)
	}
	if err := d.objs.RemoteMore.Lookup(k, &rest); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatalf("remote_more entry after shrinking to two: %v", err)
	}
	if ret, _ := d.ingress(t, pkt(last)); ret != verdictDrop {
		t.Fatalf("packet from a removed remote locator: verdict %d", ret)
	}
	if ret, _ := d.ingress(t, pkt(set[1].Locator)); ret != verdictNext {
		t.Fatalf("packet from the second remote locator: verdict %d", ret)
	}
	if n, err := d.SetRemoteLocators(nidB, set, last); err != nil || n != 1 {
		t.Fatalf("SetRemoteLocators: %d, %v", n, err)
	}
	if ret, _ := d.ingress(t, pkt(last)); ret != verdictNext {
		t.Fatalf("packet from the eighth remote locator after SetRemoteLocators: verdict %d", ret)
	}
	must(t, d.DeleteSession(nidA, nidB))
	if err := d.objs.RemoteMore.Lookup(k, &rest); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatalf("remote_more entry outlived its session: %v", err)
	}
}

// An initiator session opened by the packet path from a peer with more locators than the
// entry holds gets the rest in remote_more.
func TestInitiatorSessionWithManyLocators(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, false)
	var set []RemoteLocator
	for i := range 4 {
		set = append(set, RemoteLocator{Locator: wire.L64(0x2001_0db8_00ee_0000 | uint64(i)), State: LocatorValid})
	}
	must(t, d.PutPeer(Peer{Addr: addr(lB1, nidB), Active: set[3].Locator, Locators: set}))
	out := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoTCP, tcpSegment(h.viewSrc(), h.viewDst(), payload)))
	if ret, _ := d.egress(t, out); ret != verdictRedirect {
		t.Fatalf("verdict %d", ret)
	}
	s, err := d.GetSession(nidA, nidB)
	must(t, err)
	if len(s.RemoteLocators) != 4 || s.RemoteLocators[3].Locator != set[3].Locator {
		t.Fatalf("initiator session's remote locators %+v, want %+v", s.RemoteLocators, set)
	}
}
