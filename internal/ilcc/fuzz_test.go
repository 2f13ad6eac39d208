package ilcc

import (
	"encoding/json"
	"net/netip"
	"slices"
	"testing"
	"time"

	"ilnp/internal/wire"
)

// FuzzCacheEvents feeds the cache an arbitrary order of events (RAs, withdrawals, interface
// and router loss, sessions, LUs with right and wrong nonces, nonce learning, mode and policy
// switches, clock jumps, ticks) and checks after each one that it did not panic and that its
// invariants hold: exactly one active local locator when there are any, none Valid in hard
// mode and none Aged in soft mode, every LU lists >= 1 locator with the active one first from
// the active one, every ACK repeats the LU body, bindings agree with the active locator, and
// Tick leaves no deadline in the past.
func FuzzCacheEvents(f *testing.F) {
	f.Add([]byte{0, 1, 3, 0, 0, 2, 0, 5, 1, 1, 6, 0})
	f.Add([]byte{3, 0, 0, 1, 0, 2, 4, 1, 2, 2, 7, 9, 7, 200})
	f.Add([]byte{8, 1, 0, 1, 0, 2, 3, 0, 5, 3, 1, 2, 9, 0, 7, 255, 7, 255})
	f.Add([]byte{0, 0, 10, 0, 0, 1, 3, 1, 4, 3, 11, 1, 5, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		c, err := New(Config{NID: myNID, IdleTimeout: 90 * time.Second, NewNonce: counterNonces()})
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		locators := []wire.L64{lMN1, lMN2, lMN3, lCN2}
		routers := []netip.Addr{router1, router2}
		peers := []wire.NID{cnNID, cn2NID, 0x77}
		dp := map[wire.NID]Binding{} // what the datapath holds, from the Effects alone
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%12, ops[i+1]
			var eff Effects
			var upd wire.LocatorUpdate
			switch op {
			case 0, 1: // RA
				lifetime := time.Duration(arg%5) * 20 * time.Second
				if arg%5 == 4 {
					lifetime = Infinite
				}
				eff, _ = c.UpdateLocal(LocalUpdate{
					Locator: locators[arg%4], IfIndex: int(arg%3) + 1, Router: routers[arg%2],
					ValidLifetime: lifetime, PreferredLifetime: lifetime / 2, Preference: uint16(arg % 7),
				}, now)
			case 2:
				eff = c.RemoveLocal(locators[arg%4], "fuzz", now)
			case 3:
				eff = c.InterfaceDown(int(arg%3)+1, now)
			case 4:
				// Router Lifetime 0 (gone at once), 10 s or 20 s (gone unless heard again).
				eff = c.RouterSeen(int(arg%3)+1, routers[arg%2], time.Duration(arg%3)*10*time.Second, now)
			case 5: // session, with or without the remote nonce
				s := Session{Local: wire.ILV{Locator: lMN1, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: peers[arg%3]}}
				if arg&4 != 0 {
					s.RemoteNonce = nonce(7)
				}
				eff, _ = c.OpenSession(s, now)
			case 6: // LU with the right or a wrong nonce and arbitrary entries
				n := nonce(7)
				if arg&1 != 0 {
					n = nonce(uint32(arg))
				}
				for k := range int(arg % 4) {
					upd.Locators = append(upd.Locators, wire.LocatorEntry{
						Locator: locators[(int(arg)+k)%4], Preference: uint16(arg>>k) % 3, Lifetime: uint16(arg % 50),
					})
				}
				upd.Op = wire.OpAdvertisement
				eff, _ = c.ApplyLU(peers[arg%3], n, upd, now)
			case 7: // the clock moves and the daemon's timer fires
				now = now.Add(time.Duration(arg) * time.Second)
				eff = c.Tick(now)
				if d, ok := c.NextDeadline(); ok && !d.After(now) {
					t.Fatalf("deadline %v not after now %v after Tick", d, now)
				}
			case 8:
				m := Soft
				if arg&1 != 0 {
					m = Hard
				}
				eff, _ = c.SetMode(m, now)
			case 9:
				p, _ := PolicyByName(PolicyNames()[int(arg)%len(PolicyNames())])
				eff, _ = c.SetPolicy(p, now)
			case 10:
				eff, _ = c.LearnRemoteNonce(peers[arg%3], nonce(uint32(arg%9)), now)
			case 11:
				c.LUGaveUp(peers[arg%3], now)
				eff = c.CloseSession(peers[(arg>>2)%3], "fuzz")
			}
			checkInvariants(t, c, eff, upd)
			checkDatapath(t, c, eff, dp)
		}
		if _, err := json.Marshal(c.Snapshot(now)); err != nil {
			t.Fatal(err)
		}
	})
}

// checkDatapath applies eff to dp, the datapath's entries as the daemon writes them, and checks
// that they are the cache's bindings: no change left out, and Was the entry it replaced.
func checkDatapath(t *testing.T, c *Cache, eff Effects, dp map[wire.NID]Binding) {
	t.Helper()
	for _, b := range eff.Bindings {
		if old, ok := dp[b.Peer]; b.Was != old.RemoteLocator || ok != (b.Was != 0) {
			t.Fatalf("binding %+v: Was %v, the entry it replaces has %v (present %v)", b, b.Was, old.RemoteLocator, ok)
		}
		dp[b.Peer] = b
	}
	for _, nid := range eff.Removed {
		delete(dp, nid)
	}
	bs := c.Bindings()
	if len(bs) != len(dp) {
		t.Fatalf("%d bindings, the datapath has %d", len(bs), len(dp))
	}
	for _, b := range bs {
		if !b.Equal(dp[b.Peer]) {
			t.Fatalf("binding %+v, the datapath has %+v", b, dp[b.Peer])
		}
	}
}

func checkInvariants(t *testing.T, c *Cache, eff Effects, applied wire.LocatorUpdate) {
	t.Helper()
	locals := c.Locals()
	active, hasActive := c.Active()
	nActive := 0
	for _, l := range locals {
		switch l.State {
		case Active:
			nActive++
		case Valid:
			if c.Mode() == Hard {
				t.Fatalf("valid locator %v in hard mode", l.Locator)
			}
		case Aged:
			if c.Mode() == Soft {
				t.Fatalf("aged locator %v in soft mode", l.Locator)
			}
		default:
			t.Fatalf("locator %v in state %v", l.Locator, l.State)
		}
	}
	if (len(locals) > 0) != (nActive == 1) || nActive > 1 || hasActive != (nActive == 1) {
		t.Fatalf("%d locals, %d active", len(locals), nActive)
	}
	for _, u := range eff.Updates {
		ls := u.Update.Locators
		if len(ls) == 0 || len(ls) > len(locals) || u.Update.Op != wire.OpAdvertisement {
			t.Fatalf("LU lists %d locators (%d local)", len(ls), len(locals))
		}
		if ls[0].Locator != active.Locator || u.Source.Locator != active.Locator || u.IfIndex != active.IfIndex {
			t.Fatalf("LU %+v not led by/sent from the active locator %v", u, active.Locator)
		}
		for i, e := range ls {
			if e.Preference != uint16(i) || e.Lifetime == 0 {
				t.Fatalf("LU entry %d = %+v", i, e)
			}
		}
		if u.Nonce.IsZero() || u.Dest.NID != u.Peer {
			t.Fatalf("LU %+v", u)
		}
	}
	for _, a := range eff.Acks {
		if a.Update.Op != wire.OpAcknowledgement || !slices.Equal(a.Update.Locators, applied.Locators) {
			t.Fatalf("ACK %+v does not repeat the LU %+v", a.Update, applied)
		}
	}
	for _, b := range c.Bindings() {
		if b.HasLocal != hasActive || (hasActive && b.LocalLocator != active.Locator) {
			t.Fatalf("binding %+v disagrees with active %+v", b, active)
		}
	}
}
