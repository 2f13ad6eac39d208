package dialect

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"ilnp/internal/wire"
)

const peerNID = wire.NID(0x021b21fffe6797a8)

var (
	l1  = wire.L64(0x20010db800010000)
	l2  = wire.L64(0x20010db800020000)
	v4  = wire.L64(0x0000c0b70a000002) // 10.0.0.2:49335 in the L32 mapping
	upd = wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{
		{Locator: l1, Preference: 20, Lifetime: 300},
		{Locator: l2, Preference: 10, Lifetime: 300},
		{Locator: v4, Preference: 5, Lifetime: 300},
	}}
)

func TestUnknownPeerGetsRFCWithoutIPv4(t *testing.T) {
	tab := New(nil)
	out, err := tab.Outgoing(peerNID, upd)
	if err != nil {
		t.Fatal(err)
	}
	if out.Layout != wire.LayoutRFC6743 || out.Checksum != wire.ChecksumFull ||
		!slices.Equal(out.Update.Locators, upd.Locators[:2]) {
		t.Fatalf("to an unknown peer: %+v", out)
	}
	// Byte for byte RFC 6743 (what LocatorUpdate.Marshal sends) once the peer knows IPv4.
	tab.LearnLocators(peerNID, []wire.L64{l1, v4})
	out, _ = tab.Outgoing(peerNID, upd)
	if !slices.Equal(out.Update.Locators, upd.Locators) || out.Layout != wire.LayoutRFC6743 {
		t.Fatalf("to a peer known by an IPv4 locator: %+v", out)
	}
	// Only IPv4 locators and a peer that has not shown it knows them: nothing to send.
	only4 := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: upd.Locators[2:]}
	if _, err := New(nil).Outgoing(peerNID, only4); !errors.Is(err, ErrNothingToSend) {
		t.Fatalf("IPv4-only LU to an unknown peer: %v", err)
	}
}

func TestLearnFromLU(t *testing.T) {
	tab := New(nil)
	// A St Andrews LU (wire.LayoutStAndrews, zeroed-locator checksum) teaches the layout.
	sa := wire.PeerLU{Update: wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{{Locator: l2, Preference: 10, Lifetime: 30}}},
		Layout: wire.LayoutStAndrews, Checksum: wire.ChecksumZeroLocators}
	if !tab.LearnLU(peerNID, sa) || tab.LearnLU(peerNID, sa) {
		t.Fatal("LearnLU: want a change once, then none")
	}
	out, err := tab.Outgoing(peerNID, upd)
	if err != nil {
		t.Fatal(err)
	}
	// One entry, the most preferred IPv6 one (the IPv4 one, preference 5, is never sent).
	if out.Layout != wire.LayoutStAndrews || out.Checksum != wire.ChecksumZeroLocators ||
		!slices.Equal(out.Update.Locators, upd.Locators[1:2]) {
		t.Fatalf("to a St Andrews peer: %+v", out)
	}
	// Its ACK names only that locator with its own preference and lifetime (rcv_lu ->
	// send_lu(msg->l64, ..., is_ack=1)): the engine gets its own body back.
	ack := wire.LocatorUpdate{Op: wire.OpAcknowledgement, Locators: []wire.LocatorEntry{{Locator: l2, Preference: 10, Lifetime: 30}}}
	if got := tab.Ack(peerNID, ack); got.Op != wire.OpAcknowledgement || !slices.Equal(got.Locators, upd.Locators) {
		t.Fatalf("St Andrews ACK mapped to %+v, want the engine's body", got)
	}
	other := wire.LocatorUpdate{Op: wire.OpAcknowledgement, Locators: []wire.LocatorEntry{{Locator: l1, Preference: 10, Lifetime: 30}}}
	if got := tab.Ack(peerNID, other); !slices.Equal(got.Locators, other.Locators) {
		t.Fatalf("ACK for a locator never sent mapped to %+v", got)
	}
	// An LU listing an IPv4 entry shows IPv4 knowledge.
	tab.LearnLU(peerNID, wire.PeerLU{Update: upd})
	if p := tab.Profile(peerNID); !p.IPv4 || p.Layout != wire.LayoutRFC6743 {
		t.Fatalf("after an RFC LU with an IPv4 entry: %v", p)
	}
	tab.Forget(peerNID)
	if p := tab.Profile(peerNID); p != (Profile{}) {
		t.Fatalf("after Forget: %v", p)
	}
}

// FreeBSD reflects our LU as its ACK (icmp6.c icmp6_input), so its ACK is the filtered body
// we sent; the engine must still see its own, IPv4 entry included.
func TestFreeBSDAckOfFilteredLU(t *testing.T) {
	tab := New(nil)
	out, _ := tab.Outgoing(peerNID, upd)
	if got := tab.Ack(peerNID, out.Update.Ack()); !slices.Equal(got.Locators, upd.Locators) {
		t.Fatalf("reflected ACK mapped to %+v", got)
	}
	if got := tab.Ack(wire.NID(1), out.Update.Ack()); !slices.Equal(got.Locators, out.Update.Locators) {
		t.Fatalf("another peer's ACK was mapped: %+v", got)
	}
	if got := tab.Ack(peerNID, out.Update); got.Op != wire.OpAdvertisement {
		t.Fatalf("an advertisement was mapped: %+v", got)
	}
}

func TestSharedNonce(t *testing.T) {
	local, _ := wire.NonceFromBytes([]byte{1, 2, 3, 4})
	remote, _ := wire.NonceFromBytes([]byte{9, 9, 9, 9})
	tab := New(nil)
	if tab.LearnNonce(peerNID, remote, local) || tab.Profile(peerNID).SharedNonce {
		t.Fatal("the peer's own nonce taught shared")
	}
	if tab.LearnNonce(peerNID, wire.Nonce{}, wire.Nonce{}) {
		t.Fatal("zero nonces taught shared")
	}
	if !tab.LearnNonce(peerNID, local, local) || !tab.Profile(peerNID).SharedNonce {
		t.Fatal("our own nonce back did not teach shared")
	}
}

func TestOverride(t *testing.T) {
	sa, err := Lookup("standrews")
	if err != nil {
		t.Fatal(err)
	}
	tab := New(map[wire.NID]Profile{peerNID: sa})
	tab.LearnLU(peerNID, wire.PeerLU{Update: upd}) // shows RFC + IPv4, but the user said otherwise
	if p := tab.Profile(peerNID); p != sa || !tab.Configured(peerNID) {
		t.Fatalf("override lost: %v", p)
	}
	if _, err := Lookup("bsd"); err == nil || !strings.Contains(err.Error(), "freebsd") {
		t.Fatalf("unknown name: %v", err)
	}
	if p, _ := Lookup("ilnpd"); !p.IPv4 || p.Layout != wire.LayoutRFC6743 {
		t.Fatalf("ilnpd profile %v", p)
	}
}

func TestReplyMirrors(t *testing.T) {
	in := wire.PeerLU{Update: wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: upd.Locators[:1]},
		Layout: wire.LayoutStAndrewsCode, Checksum: wire.ChecksumZeroLocators}
	r := Reply(in)
	if r.Update.Op != wire.OpAcknowledgement || r.Layout != in.Layout || r.Checksum != in.Checksum ||
		!slices.Equal(r.Update.Locators, in.Update.Locators) {
		t.Fatalf("Reply = %+v", r)
	}
}

func TestSentHistoryBounded(t *testing.T) {
	tab := New(nil)
	for i := range 3 * maxSent {
		u := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{{Locator: l1 + wire.L64(i)<<16, Preference: 1}}}
		if _, err := tab.Outgoing(peerNID, u); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(tab.peers[peerNID].sent); n != maxSent {
		t.Fatalf("%d sent LUs kept, want %d", n, maxSent)
	}
}
