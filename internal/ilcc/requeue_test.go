package ilcc

import (
	"testing"
	"time"

	"ilnp/internal/wire"
)

// cacheOf returns a correspondent's cache with n responder sessions whose peers' nonces are
// known, its one locator with infinite lifetimes (no local or router deadline), its deadlines
// queued.
func cacheOf(tb testing.TB, n int) *Cache {
	return cacheWith(tb, n, Config{NID: cnNID, NewNonce: counterNonces()}, Infinite,
		func(i int) time.Time { return t0.Add(time.Duration(i) * time.Microsecond) })
}

// cacheWith is a correspondent's cache of config cfg with n responder sessions, session i
// opened at opened(i), its one locator valid and preferred for lifetime, its deadlines queued.
func cacheWith(tb testing.TB, n int, cfg Config, lifetime time.Duration, opened func(i int) time.Time) *Cache {
	c, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := c.UpdateLocal(LocalUpdate{Locator: lCN, IfIndex: 1, ValidLifetime: lifetime, PreferredLifetime: lifetime}, t0); err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		s := Session{Local: wire.ILV{Locator: lCN, NID: cnNID}, Remote: wire.ILV{Locator: lMN1, NID: wire.NID(0x1000 + i)},
			RemoteNonce: nonce(uint32(i + 1))}
		if _, err := c.OpenSession(s, opened(i)); err != nil {
			tb.Fatal(err)
		}
	}
	c.mu.Lock()
	c.requeueAll()
	c.fullTick = false
	c.mu.Unlock()
	return c
}

// earliest is the earliest peer deadline, from every peer at once.
func earliest(c *Cache) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var at time.Time
	for _, p := range c.peers {
		if t := c.peerDeadline(p); !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	return at
}

// After a change that may move every peer's deadline, NextDeadline queues them rescanStep at
// a time, Rescanning until every peer is queued, and then says what a look at every peer at
// once says (issue 28: requeueAll queued 100,000 in one turn of the daemon's loop). A change
// to one peer (LUGaveUp, Announce, SetRemoteDown, ReplaceRemotes, a quality the policy
// ignores) queues that peer alone.
func TestRescanInSteps(t *testing.T) {
	const n = 5*rescanStep + 123
	c := cacheOf(t, n)
	if got, want := c.NextDeadline(); !got.Equal(earliest(c)) || !want {
		t.Fatalf("queued: NextDeadline %v, every peer says %v", got, earliest(c))
	}
	now := t0.Add(time.Second)
	if c.Rescanning() {
		t.Fatal("rescanning with nothing changed")
	}
	// Every idle deadline moves 29 minutes earlier.
	if err := c.SetIdleTimeout(time.Minute); err != nil {
		t.Fatal(err)
	}
	if !c.Rescanning() {
		t.Fatal("a new idle timeout opened no rescan")
	}
	c.touched = 0
	calls := 0
	for {
		before := c.touched
		got, ok := c.NextDeadline()
		calls++
		if step := c.touched - before; step > rescanStep {
			t.Fatalf("call %d queued %d peers, want at most %d", calls, step, rescanStep)
		}
		if !c.Rescanning() {
			if want := earliest(c); !ok || !got.Equal(want) {
				t.Fatalf("rescan done: NextDeadline %v (%v), every peer says %v", got, ok, want)
			}
			break
		}
		if calls > n/rescanStep+2 {
			t.Fatalf("rescan of %d peers still open after %d calls", n, calls)
		}
	}
	if c.touched != n || calls < n/rescanStep {
		t.Fatalf("rescan queued %d peers in %d calls, want %d in at least %d", c.touched, calls, n, n/rescanStep)
	}
	// The deadlines the pass found are those Tick acts on: the first idle sessions go.
	if eff := c.Tick(t0.Add(time.Minute + 500*time.Microsecond)); len(eff.Removed) == 0 || len(eff.Removed) > 501 {
		t.Fatalf("Tick a minute on removed %d idle sessions, want the first 501", len(eff.Removed))
	}

	// Changes to one peer each.
	c = cacheOf(t, n)
	c.touched = 0
	peer := wire.NID(0x1000 + 77)
	check := func(what string) {
		t.Helper()
		got, ok := c.NextDeadline()
		if c.touched != 0 || c.Rescanning() || c.fullTick {
			t.Fatalf("%s: a rescan (%d peers queued) or a full Tick followed a change to one peer", what, c.touched)
		}
		if want := earliest(c); !ok || !got.Equal(want) {
			t.Fatalf("%s: NextDeadline %v (%v), every peer says %v", what, got, ok, want)
		}
	}
	c.LUGaveUp(peer, now)
	check("LUGaveUp")
	if got, _ := c.NextDeadline(); !got.Equal(now.Add(DefaultLURetry)) {
		t.Fatalf("after LUGaveUp the next deadline is %v, want the retry at %v", got, now.Add(DefaultLURetry))
	}
	c.Announce(peer, now)
	check("Announce")
	c.SetRemoteDown(peer, lMN1, true, now)
	check("SetRemoteDown")
	if _, err := c.ReplaceRemotes(peer, []wire.LocatorEntry{{Locator: lMN2, Lifetime: 5}}, now); err != nil {
		t.Fatal(err)
	}
	check("ReplaceRemotes")
	if got, _ := c.NextDeadline(); !got.Equal(now.Add(5 * time.Second)) {
		t.Fatalf("after a 5-s remote locator the next deadline is %v, want its expiry %v", got, now.Add(5*time.Second))
	}
	c.SetLocalQuality(lCN, Quality{Measured: true, RTT: time.Millisecond}, now)
	check("SetLocalQuality")
}

// BenchmarkRequeue100k: what the loop pays at 100,000 sessions for a change the cache does not
// tie to a peer: ns per rescan run to its end (requeueAll, as one turn of the loop paid it) and
// per NextDeadline while a rescan is open (one share); and per LU given up and the
// NextDeadline after it, which rescanned every peer and made the next Tick a full one.
func BenchmarkRequeue100k(b *testing.B) {
	c := cacheOf(b, 100_000)
	b.Run("requeueAll", func(b *testing.B) {
		for b.Loop() {
			c.mu.Lock()
			c.requeueAll()
			c.mu.Unlock()
		}
	})
	b.Run("NextDeadline-in-rescan", func(b *testing.B) {
		for b.Loop() {
			c.mu.Lock()
			if c.rescan == nil {
				c.peersRescan = true
			}
			c.mu.Unlock()
			c.NextDeadline()
		}
	})
	// A refresh of the local locator (an RA) that changes nothing peers are told: it walked
	// every peer in reselect and made the next Tick a full one; now it opens a rescan (the
	// NextDeadline-in-rescan figure per turn) and passes over no peer.
	b.Run("RA-refresh", func(b *testing.B) {
		now := t0
		for b.Loop() {
			now = now.Add(time.Millisecond)
			c.UpdateLocal(LocalUpdate{Locator: lCN, IfIndex: 1, ValidLifetime: Infinite, PreferredLifetime: Infinite}, now)
		}
	})
	// What an RA costs the loop: its RouterSeen and the prefix's UpdateLocal, then the Tick
	// at the next deadline (it was a full one after every RA).
	b.Run("RA+Tick", func(b *testing.B) {
		now := t0
		for b.Loop() {
			now = now.Add(time.Millisecond)
			c.RouterSeen(1, router1, 30*time.Minute, now)
			c.UpdateLocal(LocalUpdate{Locator: lCN, IfIndex: 1, ValidLifetime: Infinite, PreferredLifetime: Infinite}, now)
			c.Tick(now)
		}
	})
	b.Run("full-Tick", func(b *testing.B) {
		now := t0
		for b.Loop() {
			now = now.Add(time.Millisecond)
			c.mu.Lock()
			c.fullTick = true
			c.mu.Unlock()
			c.Tick(now)
		}
	})
	c.mu.Lock()
	c.requeueAll()
	c.fullTick = false
	c.mu.Unlock()
	b.Run("LUGaveUp+Tick+NextDeadline", func(b *testing.B) {
		now := t0
		i := 0
		for b.Loop() {
			now = now.Add(time.Millisecond)
			c.LUGaveUp(wire.NID(0x1000+i%100_000), now)
			c.Tick(now)
			c.NextDeadline()
			i++
		}
	})
}
