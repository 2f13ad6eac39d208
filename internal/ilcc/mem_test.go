package ilcc

import (
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"ilnp/internal/heapstat"
	"ilnp/internal/luguard"
	"ilnp/internal/wire"
)

// BenchmarkSessionMemory reports the heap one ILCC session holds (issue 28), as a
// correspondent's cache holds it: a responder's session whose peer nonce is known
// (B/session), then after a local move that sent every peer an LU (B/session-moved: the
// advertised set and its replay history). The figure is the live heap after a collection over
// the sessions, so it is the cache's own, with its maps' and heap's overhead, not the GC's
// headroom.
func BenchmarkSessionMemory(b *testing.B) {
	const n = 20000
	var opened, moved float64
	for b.Loop() {
		before := heapstat.Live()
		c, err := New(Config{NID: myNID, NewNonce: counterNonces()})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.UpdateLocal(ra(lMN1, ifWifi, router1), t0); err != nil {
			b.Fatal(err)
		}
		for i := range n {
			nid := wire.NID(0x1000 + i)
			s := Session{Local: wire.ILV{Locator: lMN1, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: nid}, RemoteNonce: nonce(uint32(i + 1))}
			if _, err := c.OpenSession(s, t0); err != nil {
				b.Fatal(err)
			}
		}
		opened = float64(heapstat.Live()-before) / n
		eff, err := c.UpdateLocal(ra(lMN2, ifLTE, router2), t0.Add(time.Second))
		if err != nil || len(eff.Updates) != n {
			b.Fatalf("move: %d updates, %v", len(eff.Updates), err)
		}
		moved = float64(heapstat.Live()-before) / n
		runtime.KeepAlive(c)
	}
	b.ReportMetric(opened, "B/session")
	b.ReportMetric(moved, "B/session-moved")
}

// EachSession passes what Snapshot lists, in the same order, and LocatorViews is Snapshot's
// Locators.
func TestEachSessionMatchesSnapshot(t *testing.T) {
	c := newCache(t, Soft)
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	openCN(t, c, cn2NID, t0)
	openCN(t, c, cnNID, t0.Add(time.Second))
	lu := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{{Locator: lCN2, Lifetime: 60}, {Locator: lCN, Preference: 1, Lifetime: 60}}}
	if _, err := c.ApplyLU(cnNID, nonce(7), lu, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(5 * time.Second)
	snap := c.Snapshot(now)
	if got := c.LocatorViews(now); !reflect.DeepEqual(got, snap.Locators) {
		t.Errorf("LocatorViews = %+v, Snapshot has %+v", got, snap.Locators)
	}
	var got []SessionView
	c.EachSession(func(s SessionInfo) {
		v := SessionView{
			PeerNID: s.Peer.String(), SessionLocal: s.SessionLocal.Addr().String(), SessionRemote: s.SessionRemote.Addr().String(),
			ActiveRemote: s.ActiveRemote.String(), LocalNonce: s.LocalNonce.String(), RemoteNonce: s.RemoteNonce.String(),
			CreatedAt: s.Created, LastUsed: s.LastUsed, IdleS: now.Sub(s.LastUsed).Seconds(),
			RemoteLocators: []RemoteLocatorView{}, Advertised: []AdvertisedView{},
		}
		if s.HasLocal {
			v.ActiveLocal = s.ActiveLocal.String()
		}
		for _, r := range s.RemoteLocators {
			v.RemoteLocators = append(v.RemoteLocators, RemoteLocatorView{Locator: r.Locator.String(), Preference: r.Preference, State: r.State})
		}
		got = append(got, v)
	})
	if len(got) != 2 || len(snap.Sessions) != 2 {
		t.Fatalf("EachSession passed %d sessions, Snapshot has %d", len(got), len(snap.Sessions))
	}
	for i := range got {
		want := snap.Sessions[i]
		want.Advertised = []AdvertisedView{}
		for j := range want.RemoteLocators {
			want.RemoteLocators[j].LifetimeS = 0 // a countdown Snapshot alone computes
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("session %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
	if got[0].PeerNID != cnNID.String() || len(got[0].RemoteLocators) != 2 || got[0].ActiveRemote != lCN2.String() || got[1].PeerNID != cn2NID.String() {
		t.Errorf("sessions %+v: want %v first with 2 locators, %v active, then %v", got, cnNID, lCN2, cn2NID)
	}
}

// A lone idle session's record stays within its size class (issue 28: it was 256 bytes plus a
// slice of remote locators and one of bound ones): a field added to it belongs in peerRare
// unless every session needs it.
func TestPeerSize(t *testing.T) {
	if got := unsafe.Sizeof(peer{}); got > 160 {
		t.Errorf("peer is %d bytes, want at most 160", got)
	}
}

// An idle lone session holds no rare part; a second remote locator, a give-up's retry, a
// locator marked down and a second LU (the replay history) each take one, and it goes once
// they are gone again.
func TestPeerRareOnlyWhileNeeded(t *testing.T) {
	c := newCache(t, Soft)
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	openCN(t, c, cnNID, t0)
	p := c.peers[cnNID]
	if p.x != nil || len(p.remotes()) != 1 {
		t.Fatalf("idle lone session: rare %+v, remotes %+v", p.x, p.remotes())
	}
	two := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{{Locator: lCN2, Lifetime: 60}, {Locator: lCN, Preference: 1, Lifetime: 60}}}
	if _, err := c.ApplyLU(cnNID, nonce(7), two, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if p.x == nil || len(p.x.remotes) != 2 || len(p.x.boundRemotes) != 2 {
		t.Fatalf("two remote locators: rare %+v", p.x)
	}
	one := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{{Locator: lCN2, Lifetime: 60}}}
	if _, err := c.ApplyLU(cnNID, nonce(7), one, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if p.x != nil || len(p.remotes()) != 1 || p.remotes()[0].loc != lCN2 || len(p.boundRemotes()) != 1 {
		t.Fatalf("back to one remote locator: rare %+v, remotes %+v, bound %+v", p.x, p.remotes(), p.boundRemotes())
	}
	c.LUGaveUp(cnNID, t0.Add(3*time.Second))
	if p.x == nil || p.retryAt() == 0 {
		t.Fatalf("after a give-up: rare %+v", p.x)
	}
	c.SetRemoteDown(cnNID, lCN2, true, t0.Add(3*time.Second))
	c.SetRemoteDown(cnNID, lCN2, false, t0.Add(3*time.Second))
	if p.x == nil || p.x.down != nil {
		t.Fatalf("a locator down and up again: rare %+v", p.x)
	}
	// Two moves: the first LU's set joins the replay history, which stays.
	mustUpdate(t, c, ra(lMN2, ifLTE, router2), t0.Add(4*time.Second))
	if p.retryAt() != 0 || p.x != nil || !p.sentLast {
		t.Fatalf("after the first LU: rare %+v, sent last %v", p.x, p.sentLast)
	}
	c.RemoveLocal(lMN1, "test", t0.Add(5*time.Second))
	if p.x == nil || len(p.x.sent) != 2 || len(p.sent()) != 2 {
		t.Fatalf("after the second LU: rare %+v, history %v", p.x, p.sent())
	}
	// The history keeps the last luguard.History LUs, the newest the advertised set.
	now, here, there := t0.Add(5*time.Second), ra(lMN2, ifLTE, router2), ra(lMN1, ifWifi, router1)
	for range luguard.History {
		now = now.Add(time.Second)
		mustUpdate(t, c, there, now)
		c.RemoveLocal(here.Locator, "test", now)
		here, there = there, here
	}
	if h := p.sent(); len(h) != luguard.History || !slices.Equal(h[len(h)-1], p.adv()) {
		t.Fatalf("after %d more LUs: history of %d, last %v, advertised %v", 2*luguard.History, len(h), h[len(h)-1], p.adv())
	}
}
