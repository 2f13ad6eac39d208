package ilcc

import (
	"math/rand/v2"
	"reflect"
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
	// The Tick after it acts on the peers queued due (the rescan has queued every one): it
	// leaves no pass to do.
	c.Tick(at.Add(3 * time.Second))
	check("tick", false)
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

// Tick between global changes handles only the peers whose deadline came (tickDue), and does
// exactly what a Tick over every peer does: the same effects at every step and the same next
// deadline, over a seeded random run of sessions opened, touched and moved (LUs with short
// lifetimes), idle expiry and ticks at random times.
func TestTickDueMatchesFullTick(t *testing.T) {
	mk := func() *Cache {
		c, err := New(Config{NID: cnNID, NewNonce: counterNonces(), IdleTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		mustUpdate(t, c, LocalUpdate{Locator: lCN, IfIndex: 1, ValidLifetime: Infinite, PreferredLifetime: Infinite}, t0)
		return c
	}
	due, full := mk(), mk()
	rng := rand.New(rand.NewPCG(28, 2))
	now := t0
	ticks, partial := 0, 0
	for step := range 3000 {
		nid := wire.NID(0x0a00_0000_0000_0000 + uint64(rng.IntN(60)))
		switch rng.IntN(6) {
		case 0:
			s := Session{Local: wire.ILV{Locator: lCN, NID: cnNID}, Remote: wire.ILV{Locator: lMN1, NID: nid}, RemoteNonce: nonce(uint32(nid & 0xffff))}
			e1, err1 := due.OpenSession(s, now)
			e2, err2 := full.OpenSession(s, now)
			if (err1 == nil) != (err2 == nil) || !reflect.DeepEqual(e1, e2) {
				t.Fatalf("step %d: OpenSession differs: %+v %v / %+v %v", step, e1, err1, e2, err2)
			}
		case 1:
			upd := advert(wire.LocatorEntry{Locator: wire.L64(0x20010db8_00100000 + rng.IntN(4)<<16), Lifetime: uint16(1 + rng.IntN(4))})
			e1, err1 := due.ApplyLU(nid, nonce(uint32(nid&0xffff)), upd, now)
			e2, err2 := full.ApplyLU(nid, nonce(uint32(nid&0xffff)), upd, now)
			if (err1 == nil) != (err2 == nil) || !reflect.DeepEqual(e1, e2) {
				t.Fatalf("step %d: ApplyLU differs: %+v %v / %+v %v", step, e1, err1, e2, err2)
			}
		case 2:
			due.Touch(nid, now)
			full.Touch(nid, now)
		default:
			now = now.Add(time.Duration(rng.IntN(2000)) * time.Millisecond)
			d1, ok1 := due.NextDeadline()
			d2, ok2 := full.NextDeadline()
			if ok1 != ok2 || !d1.Equal(d2) {
				t.Fatalf("step %d: NextDeadline %v %v, with full ticks %v %v", step, d1, ok1, d2, ok2)
			}
			if !ok1 || now.Before(d1) {
				continue
			}
			if !due.fullTick {
				partial++
			}
			full.fullTick = true
			e1, e2 := due.Tick(now), full.Tick(now)
			ticks++
			if !reflect.DeepEqual(e1, e2) {
				t.Fatalf("step %d: Tick at %v: only the due peers %+v, every peer %+v", step, now, e1, e2)
			}
		}
	}
	if ticks < 100 || partial < ticks/2 {
		t.Fatalf("%d ticks, %d of them over the due peers only: the run tests too little", ticks, partial)
	}
}
