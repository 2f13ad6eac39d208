package ilcc

import (
	"testing"
	"time"

	"ilnp/internal/wire"
)

// NextDeadline after changes to single peers (sessions opened, touched, moved by LUs with short
// lifetimes) does no pass over the peers, and is never later than a full pass's answer: it
// equals it when a change brought a deadline forward, and a session's LU with a 2-s locator
// lifetime moves it to that expiry at once (issue 28: the loop asked after every event, and the
// pass made each event cost O(sessions)).
func TestNextDeadlineIncremental(t *testing.T) {
	c := cnSide(t)
	check := func(what string, wantScan bool) time.Time {
		t.Helper()
		if c.peersRescan != wantScan {
			t.Fatalf("%s: full pass pending %v, want %v", what, c.peersRescan, wantScan)
		}
		got, ok := c.NextDeadline()
		c.peersRescan = true
		want, wok := c.NextDeadline()
		if ok != wok || got.After(want) {
			t.Fatalf("%s: NextDeadline %v (%v), a full pass says %v (%v)", what, got, ok, want, wok)
		}
		return got
	}
	check("first", true) // cnSide added a local locator
	for i := 0; i < 100; i++ {
		nid := wire.NID(0x0a00_0000_0000_0000 + uint64(i))
		if _, err := c.OpenSession(Session{Local: wire.ILV{Locator: lCN, NID: cnNID}, Remote: wire.ILV{Locator: lMN1, NID: nid},
			RemoteNonce: nonce(uint32(i + 10))}, t0.Add(time.Duration(i)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		check("open", false)
	}
	c.Touch(myNID, t0.Add(time.Minute))
	check("touch", false)
	at := t0.Add(2 * time.Minute)
	if _, err := c.ApplyLU(wire.NID(0x0a00_0000_0000_0007), nonce(17), advert(wire.LocatorEntry{Locator: lMN2, Lifetime: 2}), at); err != nil {
		t.Fatal(err)
	}
	if got := check("LU", false); !got.Equal(at.Add(2 * time.Second)) {
		t.Fatalf("after an LU with a 2-s lifetime the next deadline is %v, want %v", got, at.Add(2*time.Second))
	}
	// A change to the locals may move every peer's deadline: one full pass.
	mustUpdate(t, c, LocalUpdate{Locator: lCN, IfIndex: 1, ValidLifetime: Infinite, PreferredLifetime: Infinite}, at)
	check("local update", true)
	c.Tick(at.Add(3 * time.Second))
	check("tick", true)
}

// Len counts the sessions, as `ilnpctl show stats` reports them (ilcc_sessions).
func TestLen(t *testing.T) {
	c := cnSide(t)
	if c.Len() != 1 || !c.Has(myNID) || c.Has(wire.NID(0x77)) {
		t.Fatalf("one session: Len %d, Has %v %v", c.Len(), c.Has(myNID), c.Has(wire.NID(0x77)))
	}
	c.CloseSession(myNID, "test")
	if c.Len() != 0 || c.Has(myNID) {
		t.Fatalf("closed: Len %d", c.Len())
	}
}
