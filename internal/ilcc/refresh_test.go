package ilcc

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"ilnp/internal/wire"
)

// refreshCache is a correspondent with n sessions opened at t0, its one locator valid (and
// preferred) for an hour: every advertisement ends with the locator, so no refresh is due yet.
func refreshCache(tb testing.TB, n int) *Cache {
	return cacheWith(tb, n, Config{NID: cnNID, NewNonce: counterNonces(), IdleTimeout: 24 * time.Hour}, time.Hour,
		func(int) time.Time { return t0 })
}

// drain runs NextDeadline as the daemon's loop does, one turn each, until no rescan is open,
// and returns the most peers one turn queued.
func drain(t *testing.T, c *Cache) (most int) {
	t.Helper()
	for turns := 0; ; turns++ {
		before := c.touched
		c.NextDeadline()
		most = max(most, c.touched-before)
		if !c.Rescanning() {
			return most
		}
		if turns > len(c.peers) {
			t.Fatal("rescan never ends")
		}
	}
}

func updated(eff Effects) []wire.NID {
	var out []wire.NID
	for _, m := range eff.Updates {
		out = append(out, m.Peer)
	}
	slices.Sort(out)
	return out
}

// An RA that renews the local locator's lifetimes and changes nothing else passes over no
// peer and makes the next Tick no full one (issue 28: reselect's pass over every peer and the
// full Tick after it cost ~30 ms and ~75 ms of the loop at 100,000 sessions); the rescan finds
// the deadlines the longer lifetime moves, rescanStep peers a turn. What follows is what the
// whole passes did: the same (no) effects at the refresh, the same refresh LUs when due.
func TestRARefreshPassesNoPeer(t *testing.T) {
	const n = 3*rescanStep + 7
	stepped, whole := refreshCache(t, n), refreshCache(t, n)
	now := t0.Add(10 * time.Minute)
	renew := LocalUpdate{Locator: lCN, IfIndex: 1, ValidLifetime: time.Hour, PreferredLifetime: time.Hour}

	stepped.syncWalked = 0
	eff := stepped.RouterSeen(1, router1, 30*time.Minute, now) // as the node feeds an RA
	if len(eff.Updates)+len(eff.Bindings)+len(eff.Events) != 0 || stepped.fullTick || stepped.Rescanning() {
		t.Fatalf("RouterSeen: effects %+v, full Tick next %v, rescan %v, want none", eff, stepped.fullTick, stepped.Rescanning())
	}
	eff = mustUpdate(t, stepped, renew, now)
	if stepped.syncWalked != 0 || stepped.fullTick {
		t.Fatalf("RA refresh: passed over %d peers (full Tick next: %v), want 0 and no", stepped.syncWalked, stepped.fullTick)
	}
	if eff.LocalChanged || len(eff.Updates)+len(eff.Bindings)+len(eff.Events) != 0 {
		t.Fatalf("RA refresh: effects %+v, want none", eff)
	}
	if !stepped.Rescanning() {
		t.Fatal("RA refresh opened no rescan: the deadlines the longer lifetime moves are not found")
	}
	if most := drain(t, stepped); most > rescanStep {
		t.Fatalf("a turn of the rescan queued %d peers, want at most %d", most, rescanStep)
	}

	// The whole pass, as before: every peer synced, the next Tick a full one.
	whole.RouterSeen(1, router1, 30*time.Minute, now)
	mustUpdate(t, whole, renew, now)
	whole.mu.Lock()
	var all Effects
	whole.global()
	whole.syncPeers(now, &all)
	whole.mu.Unlock()
	if len(all.Updates)+len(all.Bindings)+len(all.Events) != 0 {
		t.Fatalf("the whole pass after a refresh had effects %+v: the stepped one skipped them", all)
	}
	drain(t, whole)

	// The longer lifetime makes the advertisements (3600 s from t0) worth refreshing at their
	// half-way point: both send every peer one at t0+30 min, and nothing before.
	for _, at := range []time.Duration{20 * time.Minute, 29 * time.Minute, 31 * time.Minute, 40 * time.Minute} {
		now := t0.Add(at)
		se, we := stepped.Tick(now), whole.Tick(now)
		su, wu := updated(se), updated(we)
		if !slices.Equal(su, wu) || len(se.Bindings) != len(we.Bindings) {
			t.Fatalf("Tick at t0+%v: stepped sent %d LUs and %d bindings, the whole pass %d and %d", at, len(su), len(se.Bindings), len(wu), len(we.Bindings))
		}
		want := 0
		if at == 31*time.Minute {
			want = n
		}
		if len(su) != want {
			t.Fatalf("Tick at t0+%v sent %d refresh LUs, want %d", at, len(su), want)
		}
		drain(t, stepped)
		drain(t, whole)
	}

	// A refresh that does change what peers are told (the locator deprecated) still passes
	// over every peer.
	stepped.syncWalked = 0
	eff = mustUpdate(t, stepped, LocalUpdate{Locator: lCN, IfIndex: 1, ValidLifetime: time.Hour}, t0.Add(41*time.Minute))
	if !eff.LocalChanged || !stepped.Rescanning() {
		t.Fatalf("deprecating refresh: LocalChanged %v, rescan %v, want both", eff.LocalChanged, stepped.Rescanning())
	}
}

// After a change that may move every peer's deadline (here the idle timeout), Tick takes the
// open rescan's next share (at most rescanStep peers) and acts on the peers queued due, not a
// pass over every peer (issue 28: ~75 ms at 100,000 sessions); once the rescan has passed, it
// does what the whole pass does.
func TestTickAfterGlobalChangeInSteps(t *testing.T) {
	const n = 3*rescanStep + 123
	stepped, whole := cacheOf(t, n), cacheOf(t, n)
	for _, c := range []*Cache{stepped, whole} {
		if err := c.SetIdleTimeout(time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	stepped.touched, stepped.syncWalked = 0, 0
	ticks := 0
	for now := t0.Add(30 * time.Second); stepped.Rescanning(); ticks++ {
		if ticks > n/rescanStep+2 {
			t.Fatalf("rescan of %d peers still open after %d Ticks", n, ticks)
		}
		before := stepped.touched
		if eff := stepped.Tick(now); len(eff.Removed)+len(eff.Updates)+len(eff.Bindings) != 0 {
			t.Fatalf("Tick %d before any deadline: %+v", ticks, eff)
		}
		if step := stepped.touched - before; step > rescanStep || stepped.syncWalked != 0 {
			t.Fatalf("Tick %d queued %d peers and passed over %d, want at most %d and 0", ticks, step, stepped.syncWalked, rescanStep)
		}
	}
	if ticks < n/rescanStep || stepped.touched != n {
		t.Fatalf("%d Ticks queued %d peers, want %d in at least %d", ticks, stepped.touched, n, n/rescanStep)
	}
	for _, at := range []time.Duration{time.Minute + 500*time.Microsecond, time.Minute + 3*time.Millisecond, time.Minute + time.Second} {
		now := t0.Add(at)
		whole.mu.Lock()
		whole.fullTick = true
		whole.mu.Unlock()
		se, we := stepped.Tick(now), whole.Tick(now)
		if !reflect.DeepEqual(se, we) {
			t.Fatalf("Tick at t0+%v: stepped removed %d, the whole pass %d (effects differ)", at, len(se.Removed), len(we.Removed))
		}
		if len(se.Removed) == 0 {
			t.Fatalf("Tick at t0+%v removed no idle session", at)
		}
		if stepped.syncWalked != 0 {
			t.Fatalf("Tick at t0+%v passed over %d peers", at, stepped.syncWalked)
		}
	}
	if len(stepped.peers) != 0 || len(whole.peers) != 0 {
		t.Fatalf("after a minute idle %d and %d sessions left, want none", len(stepped.peers), len(whole.peers))
	}
}
