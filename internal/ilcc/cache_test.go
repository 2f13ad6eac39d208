package ilcc

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"ilnp/internal/lu"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	myNID  wire.NID = 0x021b21fffe6797a8
	cnNID  wire.NID = 0x0200000000000c01
	cn2NID wire.NID = 0x0200000000000c02
	lMN1   wire.L64 = 0x20010db8_00010000
	lMN2   wire.L64 = 0x20010db8_00020000
	lMN3   wire.L64 = 0x20010db8_00030000
	lCN    wire.L64 = 0x20010db8_00c00000
	lCN2   wire.L64 = 0x20010db8_00c10000
	ifWifi          = 2
	ifLTE           = 3
)

var (
	router1 = netip.MustParseAddr("fe80::1")
	router2 = netip.MustParseAddr("fe80::2")
)

// counterNonces yields 4-byte nonces 1, 2, 3, ... so tests know every nonce.
func counterNonces() func() (wire.Nonce, error) {
	var n uint32
	return func() (wire.Nonce, error) {
		n++
		return nonce(n), nil
	}
}

func nonce(v uint32) wire.Nonce {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	n, err := wire.NonceFromBytes(b[:])
	if err != nil {
		panic(err)
	}
	return n
}

func newCache(t *testing.T, mode Mode) *Cache {
	t.Helper()
	c, err := New(Config{NID: myNID, Mode: mode, NewNonce: counterNonces()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ra(loc wire.L64, ifindex int, router netip.Addr) LocalUpdate {
	return LocalUpdate{Locator: loc, IfIndex: ifindex, Router: router, ValidLifetime: time.Hour, PreferredLifetime: 30 * time.Minute}
}

func mustUpdate(t *testing.T, c *Cache, u LocalUpdate, now time.Time) Effects {
	t.Helper()
	eff, err := c.UpdateLocal(u, now)
	if err != nil {
		t.Fatalf("UpdateLocal(%v): %v", u.Locator, err)
	}
	return eff
}

// openCN opens a session with the correspondent cnNID at lCN whose nonce (7) is known.
func openCN(t *testing.T, c *Cache, nid wire.NID, now time.Time) Effects {
	t.Helper()
	eff, err := c.OpenSession(Session{
		Local:       wire.ILV{Locator: lMN1, NID: myNID},
		Remote:      wire.ILV{Locator: lCN, NID: nid},
		RemoteNonce: nonce(7),
	}, now)
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	return eff
}

func states(c *Cache) map[wire.L64]State {
	out := map[wire.L64]State{}
	for _, l := range c.Locals() {
		out[l.Locator] = l.State
	}
	return out
}

func locs(entries []wire.LocatorEntry) []wire.L64 {
	var out []wire.L64
	for _, e := range entries {
		out = append(out, e.Locator)
	}
	return out
}

func TestFirstRABeforeAnySession(t *testing.T) {
	c := newCache(t, Soft)
	eff := mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	if !eff.LocalChanged || len(eff.Updates) != 0 || len(eff.Bindings) != 0 {
		t.Fatalf("effects = %+v", eff)
	}
	if len(eff.Events) != 1 || eff.Events[0].Kind != timeline.LocatorAdded || eff.Events[0].To != Active {
		t.Fatalf("events = %+v", eff.Events)
	}
	a, ok := c.Active()
	if !ok || a.Locator != lMN1 || a.IfIndex != ifWifi || a.Router != router1 {
		t.Fatalf("active = %+v %v", a, ok)
	}
}

// Thesis fig 3.12, soft: L_MN2 becomes active, L_MN1 valid, the LU lists both with L_MN2
// first, leaves from L_MN2 with the session's nonce towards the CN's active locator.
func TestSoftHandoff(t *testing.T) {
	c := newCache(t, Soft)
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	openCN(t, c, cnNID, t0)
	eff := mustUpdate(t, c, ra(lMN2, ifLTE, router2), t0.Add(time.Second))
	if got := states(c); got[lMN2] != Active || got[lMN1] != Valid {
		t.Fatalf("states = %v", got)
	}
	if len(eff.Updates) != 1 {
		t.Fatalf("updates = %+v", eff.Updates)
	}
	u := eff.Updates[0]
	want := lu.Message{
		Peer:    cnNID,
		Source:  wire.ILV{Locator: lMN2, NID: myNID},
		IfIndex: ifLTE,
		Dest:    wire.ILV{Locator: lCN, NID: cnNID},
		Nonce:   nonce(1),
		Update: wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{
			{Locator: lMN2, Preference: 0, Lifetime: 3600},
			{Locator: lMN1, Preference: 1, Lifetime: 3599},
		}},
	}
	if !reflect.DeepEqual(u, want) {
		t.Fatalf("LU = %+v\nwant %+v", u, want)
	}
	if len(eff.Bindings) != 1 || eff.Bindings[0].LocalLocator != lMN2 || eff.Bindings[0].LocalIfIndex != ifLTE ||
		eff.Bindings[0].LocalRouter != router2 || eff.Bindings[0].RemoteLocator != lCN {
		t.Fatalf("bindings = %+v", eff.Bindings)
	}
	// The old network goes away: L_MN1 leaves the set, one more LU.
	eff = c.InterfaceDown(ifWifi, t0.Add(5*time.Second))
	if got := states(c); len(got) != 1 || got[lMN2] != Active {
		t.Fatalf("states after down = %v", got)
	}
	if len(eff.Updates) != 1 || !slices.Equal(locs(eff.Updates[0].Update.Locators), []wire.L64{lMN2}) {
		t.Fatalf("updates after down = %+v", eff.Updates)
	}
	if len(eff.Bindings) != 0 {
		t.Fatalf("binding changed although the active locator did not: %+v", eff.Bindings)
	}
}

// Thesis fig 3.12, hard: L_MN1 is aged at once and not advertised; if L_MN2 goes, L_MN1
// (still present) takes over.
func TestHardHandoff(t *testing.T) {
	c := newCache(t, Hard)
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	openCN(t, c, cnNID, t0)
	eff := mustUpdate(t, c, ra(lMN2, ifLTE, router2), t0.Add(time.Second))
	if got := states(c); got[lMN2] != Active || got[lMN1] != Aged {
		t.Fatalf("states = %v", got)
	}
	if len(eff.Updates) != 1 || !slices.Equal(locs(eff.Updates[0].Update.Locators), []wire.L64{lMN2}) {
		t.Fatalf("updates = %+v", eff.Updates)
	}
	eff = c.InterfaceDown(ifLTE, t0.Add(2*time.Second))
	if got := states(c); got[lMN1] != Active {
		t.Fatalf("states after LTE down = %v", got)
	}
	if len(eff.Updates) != 1 || eff.Updates[0].Source.Locator != lMN1 || eff.Updates[0].IfIndex != ifWifi {
		t.Fatalf("updates = %+v", eff.Updates)
	}
}

// Table: event sequences and the resulting local states in each mode.
func TestLocalStateTransitions(t *testing.T) {
	type step func(c *Cache, now time.Time)
	add := func(l wire.L64, ifi int) step {
		return func(c *Cache, now time.Time) { c.UpdateLocal(ra(l, ifi, router1), now) }
	}
	down := func(ifi int) step { return func(c *Cache, now time.Time) { c.InterfaceDown(ifi, now) } }
	remove := func(l wire.L64) step { return func(c *Cache, now time.Time) { c.RemoveLocal(l, "test", now) } }
	cases := []struct {
		name       string
		steps      []step
		soft, hard map[wire.L64]State
	}{
		{"nothing", nil, map[wire.L64]State{}, map[wire.L64]State{}},
		{"one", []step{add(lMN1, 1)}, map[wire.L64]State{lMN1: Active}, map[wire.L64]State{lMN1: Active}},
		{"newest wins", []step{add(lMN1, 1), add(lMN2, 2), add(lMN3, 3)},
			map[wire.L64]State{lMN3: Active, lMN2: Valid, lMN1: Valid},
			map[wire.L64]State{lMN3: Active, lMN2: Aged, lMN1: Aged}},
		{"refresh of old does not hand back", []step{add(lMN1, 1), add(lMN2, 2), add(lMN1, 1)},
			map[wire.L64]State{lMN2: Active, lMN1: Valid},
			map[wire.L64]State{lMN2: Active, lMN1: Aged}},
		{"active removed falls back to next newest", []step{add(lMN1, 1), add(lMN2, 2), add(lMN3, 3), remove(lMN3)},
			map[wire.L64]State{lMN2: Active, lMN1: Valid},
			map[wire.L64]State{lMN2: Active, lMN1: Aged}},
		{"flap makes it newest again", []step{add(lMN1, 1), add(lMN2, 2), down(1), add(lMN1, 1)},
			map[wire.L64]State{lMN1: Active, lMN2: Valid},
			map[wire.L64]State{lMN1: Active, lMN2: Aged}},
		{"all gone", []step{add(lMN1, 1), add(lMN2, 2), down(1), down(2)}, map[wire.L64]State{}, map[wire.L64]State{}},
		{"remove unknown", []step{add(lMN1, 1), remove(lMN3), down(9)}, map[wire.L64]State{lMN1: Active}, map[wire.L64]State{lMN1: Active}},
	}
	for _, tc := range cases {
		for _, mode := range []Mode{Soft, Hard} {
			t.Run(tc.name+"/"+mode.String(), func(t *testing.T) {
				c := newCache(t, mode)
				for i, s := range tc.steps {
					s(c, t0.Add(time.Duration(i)*time.Second))
				}
				want := tc.soft
				if mode == Hard {
					want = tc.hard
				}
				if got := states(c); !reflect.DeepEqual(got, want) {
					t.Fatalf("states = %v, want %v", got, want)
				}
			})
		}
	}
}

func TestModeSwitchAtRunTime(t *testing.T) {
	c := newCache(t, Soft)
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	mustUpdate(t, c, ra(lMN2, ifLTE, router2), t0.Add(time.Second))
	openCN(t, c, cnNID, t0.Add(2*time.Second))
	eff, err := c.SetMode(Hard, t0.Add(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := states(c); got[lMN1] != Aged || got[lMN2] != Active || c.Mode() != Hard {
		t.Fatalf("states after hard = %v", got)
	}
	if len(eff.Updates) != 1 || !slices.Equal(locs(eff.Updates[0].Update.Locators), []wire.L64{lMN2}) {
		t.Fatalf("updates = %+v", eff.Updates)
	}
	if eff.Events[0].Kind != timeline.HandoffMode || eff.Events[0].Detail != "soft -> hard" {
		t.Fatalf("events = %+v", eff.Events)
	}
	eff, _ = c.SetMode(Soft, t0.Add(4*time.Second))
	if got := states(c); got[lMN1] != Valid {
		t.Fatalf("states after soft = %v", got)
	}
	if len(eff.Updates) != 1 || !slices.Equal(locs(eff.Updates[0].Update.Locators), []wire.L64{lMN2, lMN1}) {
		t.Fatalf("updates = %+v", eff.Updates)
	}
	if eff, _ := c.SetMode(Soft, t0.Add(5*time.Second)); !eff.Empty() {
		t.Fatalf("same mode again changed something: %+v", eff)
	}
	if _, err := c.SetMode(Mode(9), t0); err == nil {
		t.Fatal("SetMode accepted an unknown mode")
	}
}

func TestPreferencePolicyKeepsBetterNetwork(t *testing.T) {
	p, err := PolicyByName("preference")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := New(Config{NID: myNID, Policy: p, NewNonce: counterNonces()})
	wired := ra(lMN1, ifWifi, router1)
	wired.Preference = 10
	lte := ra(lMN2, ifLTE, router2)
	lte.Preference = 20
	mustUpdate(t, c, wired, t0)
	mustUpdate(t, c, lte, t0.Add(time.Second))
	if got := states(c); got[lMN1] != Active || got[lMN2] != Valid {
		t.Fatalf("states = %v", got)
	}
	eff, _ := c.SetPolicy(Newest{}, t0.Add(2*time.Second))
	if got := states(c); got[lMN2] != Active || !eff.LocalChanged || c.Policy().Name() != "newest" {
		t.Fatalf("after newest: states = %v eff %+v", got, eff)
	}
	if _, err := PolicyByName("fastest"); err == nil || !strings.Contains(err.Error(), "newest, preference") {
		t.Fatalf("unknown policy error = %v", err)
	}
}

// brokenPolicy returns duplicates and strangers; the cache must still pick exactly one.
type brokenPolicy struct{}

func (brokenPolicy) Name() string { return "broken" }
func (brokenPolicy) Order(c []Candidate) []Candidate {
	return []Candidate{{Locator: 0xbad}, c[len(c)-1], c[len(c)-1]}
}

func TestMisbehavingPolicyIsRepaired(t *testing.T) {
	c, _ := New(Config{Policy: brokenPolicy{}, NewNonce: counterNonces()})
	mustUpdate(t, c, ra(lMN1, 1, router1), t0)
	mustUpdate(t, c, ra(lMN2, 2, router1), t0)
	mustUpdate(t, c, ra(lMN3, 3, router1), t0)
	got := states(c)
	if len(got) != 3 || got[lMN3] != Active || got[lMN1] != Valid || got[lMN2] != Valid {
		t.Fatalf("states = %v", got)
	}
}

func TestLifetimes(t *testing.T) {
	c := newCache(t, Soft)
	short := LocalUpdate{Locator: lMN2, IfIndex: ifLTE, Router: router2, ValidLifetime: 60 * time.Second, PreferredLifetime: 20 * time.Second}
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	mustUpdate(t, c, short, t0.Add(time.Second))
	openCN(t, c, cnNID, t0.Add(time.Second))
	if d, ok := c.NextDeadline(); !ok || !d.Equal(t0.Add(21*time.Second)) {
		t.Fatalf("next deadline = %v, want preferred end at 21s", d.Sub(t0))
	}
	// Preferred lifetime over: deprecated, the newest policy ranks it last, L_MN1 takes over.
	eff := c.Tick(t0.Add(21 * time.Second))
	if got := states(c); got[lMN1] != Active || got[lMN2] != Valid {
		t.Fatalf("states after deprecation = %v", got)
	}
	if len(eff.Updates) != 1 || !slices.Equal(locs(eff.Updates[0].Update.Locators), []wire.L64{lMN1, lMN2}) {
		t.Fatalf("updates = %+v", eff.Updates)
	}
	// Valid lifetime over: gone.
	if d, _ := c.NextDeadline(); !d.Equal(t0.Add(61 * time.Second)) {
		t.Fatalf("next deadline = %v, want 61s", d.Sub(t0))
	}
	eff = c.Tick(t0.Add(61 * time.Second))
	if got := states(c); len(got) != 1 || got[lMN1] != Active {
		t.Fatalf("states after expiry = %v", got)
	}
	if eff.Events[0].Kind != timeline.LocatorRemoved || eff.Events[0].Detail != "valid lifetime expired" {
		t.Fatalf("events = %+v", eff.Events)
	}
	// An RA with valid lifetime 0 withdraws; an infinite one never expires.
	eff = mustUpdate(t, c, LocalUpdate{Locator: lMN1, IfIndex: ifWifi, ValidLifetime: 0}, t0.Add(62*time.Second))
	if len(states(c)) != 0 || !eff.LocalChanged {
		t.Fatalf("withdraw left %v", states(c))
	}
	mustUpdate(t, c, LocalUpdate{Locator: lMN3, IfIndex: 1, ValidLifetime: Infinite, PreferredLifetime: Infinite}, t0.Add(63*time.Second))
	c.Touch(cnNID, t0.Add(63*time.Second))
	snap := c.Snapshot(t0.Add(64 * time.Second))
	if snap.Locators[0].ValidLifetimeS != -1 || snap.Locators[0].PreferredLifetimeS != -1 {
		t.Fatalf("infinite lifetimes shown as %+v", snap.Locators[0])
	}
}

func TestRouterGoneRemovesOnlyItsLocators(t *testing.T) {
	c := newCache(t, Soft)
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	mustUpdate(t, c, ra(lMN2, ifWifi, router2), t0)
	mustUpdate(t, c, ra(lMN3, ifLTE, router1), t0)
	c.RouterGone(ifWifi, router1, t0.Add(time.Second))
	got := states(c)
	if _, ok := got[lMN1]; ok || len(got) != 2 {
		t.Fatalf("states = %v", got)
	}
}

func TestRouterLifetimeExpiry(t *testing.T) {
	c := newCache(t, Soft)
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	mustUpdate(t, c, ra(lMN2, ifLTE, router2), t0)
	mustUpdate(t, c, ra(lMN3, ifLTE, router1), t0) // same link-local, other link: another router
	c.RouterSeen(ifWifi, router1, 30*time.Second, t0)
	c.RouterSeen(ifLTE, router2, 30*time.Second, t0)
	if d, ok := c.NextDeadline(); !ok || !d.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("NextDeadline = %v %v, want the router lifetime at +30s", d, ok)
	}
	// router2 keeps advertising; router1 on the Wi-Fi link falls silent.
	c.RouterSeen(ifLTE, router2, 30*time.Second, t0.Add(20*time.Second))
	if eff := c.Tick(t0.Add(29 * time.Second)); eff.LocalChanged {
		t.Fatalf("locator removed before the router lifetime ran out: %+v", eff.Events)
	}
	eff := c.Tick(t0.Add(30 * time.Second))
	got := states(c)
	if _, ok := got[lMN1]; ok || len(got) != 2 || !eff.LocalChanged {
		t.Fatalf("after router1's lifetime: states = %v, changed = %v", got, eff.LocalChanged)
	}
	if ev := eff.Events[0]; ev.Kind != timeline.LocatorRemoved || ev.Locator != lMN1 || ev.Detail != "router lifetime expired" {
		t.Fatalf("event = %+v", ev)
	}
	// Once expired, a router is forgotten: it no longer sets deadlines.
	if d, ok := c.NextDeadline(); ok && d.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("expired router still sets a deadline")
	}
	// Router Lifetime 0 withdraws at once (RFC 4861 s.6.3.4).
	c.RouterSeen(ifLTE, router2, 0, t0.Add(31*time.Second))
	if got := states(c); len(got) != 1 {
		t.Fatalf("after lifetime 0: states = %v", got)
	}
}

func TestUpdateLocalRejectsNonsense(t *testing.T) {
	c := newCache(t, Soft)
	for _, u := range []LocalUpdate{
		{Locator: 0, IfIndex: 1, ValidLifetime: time.Hour},
		{Locator: lMN1, IfIndex: 0, ValidLifetime: time.Hour},
	} {
		if _, err := c.UpdateLocal(u, t0); !errors.Is(err, ErrBadLocator) {
			t.Errorf("UpdateLocal(%+v) = %v", u, err)
		}
	}
	// Preferred above valid is clamped, not rejected.
	mustUpdate(t, c, LocalUpdate{Locator: lMN1, IfIndex: 1, ValidLifetime: 10 * time.Second, PreferredLifetime: time.Hour}, t0)
	if s := c.Snapshot(t0); s.Locators[0].PreferredLifetimeS != 10 {
		t.Fatalf("preferred = %d, want clamp to 10", s.Locators[0].PreferredLifetimeS)
	}
}

func TestSetIdleTimeout(t *testing.T) {
	c := newCache(t, Soft)
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	openCN(t, c, cnNID, t0)
	if err := c.SetIdleTimeout(500 * time.Millisecond); err == nil {
		t.Fatal("idle timeout below 1s accepted")
	}
	if eff := c.Tick(t0.Add(time.Minute)); len(eff.Removed) != 0 {
		t.Fatalf("session expired under the default idle timeout: %+v", eff.Removed)
	}
	if err := c.SetIdleTimeout(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if eff := c.Tick(t0.Add(time.Minute)); len(eff.Removed) != 1 || eff.Removed[0] != cnNID {
		t.Fatalf("after SetIdleTimeout(30s), a minute idle: removed %v", eff.Removed)
	}
}
