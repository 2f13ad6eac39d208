package ilcc

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

func advert(entries ...wire.LocatorEntry) wire.LocatorUpdate {
	return wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: entries}
}

// cnSide is a correspondent's cache with a session to the mobile node (myNID at lMN1), whose
// nonce (7) it has learned from the first packet.
func cnSide(t *testing.T) *Cache {
	t.Helper()
	c, err := New(Config{NID: cnNID, NewNonce: counterNonces()})
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, c, LocalUpdate{Locator: lCN, IfIndex: 1, ValidLifetime: Infinite, PreferredLifetime: Infinite}, t0)
	eff, err := c.OpenSession(Session{
		Local: wire.ILV{Locator: lCN, NID: cnNID}, Remote: wire.ILV{Locator: lMN1, NID: myNID}, RemoteNonce: nonce(7),
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Bindings) != 1 || eff.Bindings[0].RemoteLocator != lMN1 || eff.Bindings[0].LocalNonce != nonce(1) ||
		eff.Bindings[0].RemoteNonce != nonce(7) || !eff.Bindings[0].HasLocal {
		t.Fatalf("session binding = %+v", eff.Bindings)
	}
	return c
}

func TestApplyLUReplacesSetAndAcksIdenticalBody(t *testing.T) {
	c := cnSide(t)
	upd := advert(
		wire.LocatorEntry{Locator: lMN2, Preference: 0, Lifetime: 600},
		wire.LocatorEntry{Locator: lMN1, Preference: 1, Lifetime: 300},
	)
	eff, err := c.ApplyLU(myNID, nonce(7), upd, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Bindings) != 1 || eff.Bindings[0].RemoteLocator != lMN2 {
		t.Fatalf("bindings = %+v, want remote active lMN2", eff.Bindings)
	}
	if len(eff.Acks) != 1 {
		t.Fatalf("acks = %+v", eff.Acks)
	}
	ack := eff.Acks[0]
	if ack.Update.Op != wire.OpAcknowledgement || !slices.Equal(ack.Update.Locators, upd.Locators) ||
		ack.Nonce != nonce(1) || ack.Source != (wire.ILV{Locator: lCN, NID: cnNID}) || ack.IfIndex != 1 || ack.Peer != myNID {
		t.Fatalf("ack = %+v", ack)
	}
	kinds := []timeline.Kind{eff.Events[0].Kind, eff.Events[1].Kind}
	if !slices.Equal(kinds, []timeline.Kind{timeline.LUReceived, timeline.ActiveLocator}) {
		t.Fatalf("events = %+v", eff.Events)
	}
	s := c.Snapshot(t0.Add(time.Second)).Sessions[0]
	want := []RemoteLocatorView{
		{Locator: lMN2.String(), Preference: 0, State: Active, LifetimeS: 600},
		{Locator: lMN1.String(), Preference: 1, State: Valid, LifetimeS: 300},
	}
	if !reflect.DeepEqual(s.RemoteLocators, want) {
		t.Fatalf("remote locators = %+v", s.RemoteLocators)
	}
	// Duplicate: same state, no datapath change, acknowledged again.
	eff, err = c.ApplyLU(myNID, nonce(7), upd, t0.Add(2*time.Second))
	if err != nil || len(eff.Bindings) != 0 || len(eff.Acks) != 1 {
		t.Fatalf("duplicate LU: %+v %v", eff, err)
	}
	// The replacement drops locators not listed (RFC 6743: the list is the whole set).
	eff, _ = c.ApplyLU(myNID, nonce(7), advert(wire.LocatorEntry{Locator: lMN3, Lifetime: 600}), t0.Add(3*time.Second))
	if b, _ := c.Binding(myNID); b.RemoteLocator != lMN3 || len(c.Snapshot(t0).Sessions[0].RemoteLocators) != 1 {
		t.Fatalf("after replace: binding %+v", b)
	}
}

// Reordered LUs: each accepted LU is the whole set, so the last one applied wins and
// re-applying any of them gives the same state as the first time (the sender's engine
// re-sends its newest set when it sees the older ACK after the newer one).
func TestReorderedLUsAreIdempotentReplacements(t *testing.T) {
	c := cnSide(t)
	old := advert(wire.LocatorEntry{Locator: lMN1, Lifetime: 600})
	newer := advert(wire.LocatorEntry{Locator: lMN2, Lifetime: 600}, wire.LocatorEntry{Locator: lMN1, Preference: 1, Lifetime: 600})
	for i, u := range []wire.LocatorUpdate{newer, old, newer, newer} {
		if _, err := c.ApplyLU(myNID, nonce(7), u, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := c.Binding(myNID)
	if b.RemoteLocator != lMN2 {
		t.Fatalf("remote = %v", b.RemoteLocator)
	}
}

func TestApplyLURejections(t *testing.T) {
	good := advert(wire.LocatorEntry{Locator: lMN2, Lifetime: 600})
	cases := []struct {
		name     string
		setup    func(c *Cache)
		peer     wire.NID
		nonce    wire.Nonce
		upd      wire.LocatorUpdate
		want     error
		security bool
	}{
		{"unknown peer", nil, cn2NID, nonce(7), good, ErrUnknownPeer, false},
		{"missing nonce", nil, myNID, wire.Nonce{}, good, ErrMissingNonce, true},
		{"wrong nonce", nil, myNID, nonce(8), good, ErrNonceMismatch, true},
		{"our own nonce", nil, myNID, nonce(1), good, ErrNonceMismatch, true},
		{"ack not advertisement", nil, myNID, nonce(7), good.Ack(), ErrNotAdvertisement, false},
		{"no locators", nil, myNID, nonce(7), advert(), ErrNoLocators, false},
		{"only zero locators", nil, myNID, nonce(7), advert(wire.LocatorEntry{}), ErrNoLocators, false},
		{"remote nonce not learned", func(c *Cache) {
			c.OpenSession(Session{Local: wire.ILV{Locator: lCN, NID: cnNID}, Remote: wire.ILV{Locator: lMN1, NID: cn2NID}}, t0)
		}, cn2NID, nonce(7), good, ErrNoRemoteNonce, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cnSide(t)
			if tc.setup != nil {
				tc.setup(c)
			}
			before := c.Snapshot(t0)
			eff, err := c.ApplyLU(tc.peer, tc.nonce, tc.upd, t0.Add(time.Second))
			if !errors.Is(err, tc.want) || IsSecurityEvent(err) != tc.security {
				t.Fatalf("err = %v, want %v (security %v)", err, tc.want, tc.security)
			}
			var pe *PeerError
			if !errors.As(err, &pe) || pe.Peer != tc.peer {
				t.Fatalf("err %v is not a PeerError for %v", err, tc.peer)
			}
			if !eff.Empty() {
				t.Fatalf("rejected LU had effects %+v", eff)
			}
			if after := c.Snapshot(t0); !reflect.DeepEqual(before, after) {
				t.Fatalf("rejected LU changed the cache:\n%+v\n%+v", before, after)
			}
		})
	}
}

func TestDuplicateLocatorsInLUKeepFirst(t *testing.T) {
	c := cnSide(t)
	_, err := c.ApplyLU(myNID, nonce(7), advert(
		wire.LocatorEntry{Locator: lMN2, Preference: 5, Lifetime: 10},
		wire.LocatorEntry{Locator: lMN2, Preference: 0, Lifetime: 10},
		wire.LocatorEntry{Locator: lMN1, Preference: 5, Lifetime: 10},
	), t0)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Snapshot(t0).Sessions[0].RemoteLocators
	if len(r) != 2 || r[0].Locator != lMN2.String() || r[0].State != Active || r[1].State != Valid {
		t.Fatalf("remotes = %+v (equal preference: first listed wins)", r)
	}
}

func TestRemoteLocatorLifetimeExpiry(t *testing.T) {
	c := cnSide(t)
	c.ApplyLU(myNID, nonce(7), advert(
		wire.LocatorEntry{Locator: lMN2, Preference: 0, Lifetime: 10},
		wire.LocatorEntry{Locator: lMN1, Preference: 1, Lifetime: 100},
		wire.LocatorEntry{Locator: lMN3, Preference: 2, Lifetime: 0}, // no stated lifetime
	), t0)
	if d, _ := c.NextDeadline(); !d.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("deadline = %v", d.Sub(t0))
	}
	eff := c.Tick(t0.Add(10 * time.Second))
	if len(eff.Bindings) != 1 || eff.Bindings[0].RemoteLocator != lMN1 {
		t.Fatalf("after first expiry: %+v", eff)
	}
	eff = c.Tick(t0.Add(100 * time.Second))
	if len(eff.Bindings) != 1 || eff.Bindings[0].RemoteLocator != lMN3 {
		t.Fatalf("after second expiry: %+v", eff)
	}
	// All listed locators with a lifetime gone: lMN3 (no lifetime) stays.
	c.ApplyLU(myNID, nonce(7), advert(wire.LocatorEntry{Locator: lMN2, Lifetime: 5}), t0.Add(101*time.Second))
	eff = c.Tick(t0.Add(106 * time.Second))
	b, _ := c.Binding(myNID)
	if b.RemoteLocator != lMN2 || len(b.RemoteLocators) != 0 || len(eff.Bindings) != 1 || !eff.Bindings[0].Equal(b) {
		t.Fatalf("with every remote locator expired the last active one stays the destination: %+v %+v", b, eff.Bindings)
	}
	if s := c.Snapshot(t0.Add(106 * time.Second)).Sessions[0]; len(s.RemoteLocators) != 0 || s.ActiveRemote != lMN2.String() {
		t.Fatalf("session view = %+v", s)
	}
}

func TestIdleSessionExpiry(t *testing.T) {
	c, _ := New(Config{IdleTimeout: time.Minute, NewNonce: counterNonces()})
	openCN(t, c, cnNID, t0)
	openCN(t, c, cn2NID, t0)
	if !c.Touch(cnNID, t0.Add(50*time.Second)) || c.Touch(0x99, t0) {
		t.Fatal("Touch")
	}
	eff := c.Tick(t0.Add(time.Minute))
	if !slices.Equal(eff.Removed, []wire.NID{cn2NID}) || eff.Events[0].Kind != timeline.SessionExpired {
		t.Fatalf("effects = %+v", eff)
	}
	if d, _ := c.NextDeadline(); !d.Equal(t0.Add(110 * time.Second)) {
		t.Fatalf("deadline = %v", d.Sub(t0))
	}
	// An LU for an expired session is from nobody we know.
	if _, err := c.ApplyLU(cn2NID, nonce(7), advert(wire.LocatorEntry{Locator: lMN1}), t0.Add(time.Minute)); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("err = %v", err)
	}
	eff = c.CloseSession(cnNID, "closed")
	if !slices.Equal(eff.Removed, []wire.NID{cnNID}) || !c.CloseSession(cnNID, "again").Empty() {
		t.Fatalf("close = %+v", eff)
	}
}

func TestSessionBeforeAnyLocatorThenRA(t *testing.T) {
	c := newCache(t, Soft)
	eff := openCN(t, c, cnNID, t0)
	if len(eff.Bindings) != 1 || eff.Bindings[0].HasLocal || len(eff.Updates) != 0 {
		t.Fatalf("open without locators: %+v", eff)
	}
	eff = mustUpdate(t, c, ra(lMN2, ifLTE, router2), t0.Add(time.Second))
	if len(eff.Updates) != 1 || eff.Updates[0].Source.Locator != lMN2 || len(eff.Bindings) != 1 || !eff.Bindings[0].HasLocal {
		t.Fatalf("first RA with a session: %+v", eff)
	}
	// Every locator gone: nothing to advertise (an LU needs >= 1 locator), datapath told.
	eff = c.InterfaceDown(ifLTE, t0.Add(2*time.Second))
	if len(eff.Updates) != 0 || len(eff.Bindings) != 1 || eff.Bindings[0].HasLocal {
		t.Fatalf("all gone: %+v", eff)
	}
	if len(c.Advertisement(t0)) != 0 {
		t.Fatal("advertisement not empty")
	}
	// Same locator back (flap): the correspondent still holds it, no LU needed.
	eff = mustUpdate(t, c, ra(lMN2, ifLTE, router2), t0.Add(3*time.Second))
	if len(eff.Updates) != 0 || len(eff.Bindings) != 1 {
		t.Fatalf("flap back: %+v", eff)
	}
	// A different one: LU.
	c.InterfaceDown(ifLTE, t0.Add(4*time.Second))
	eff = mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0.Add(5*time.Second))
	if len(eff.Updates) != 1 || eff.Updates[0].Source.Locator != lMN1 {
		t.Fatalf("new network: %+v", eff)
	}
}

func TestManyCorrespondentsAllGetTheLU(t *testing.T) {
	c := newCache(t, Soft)
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	for i := range 50 {
		openCN(t, c, wire.NID(0x100+i), t0)
	}
	eff := mustUpdate(t, c, ra(lMN2, ifLTE, router2), t0.Add(time.Second))
	if len(eff.Updates) != 50 || len(eff.Bindings) != 50 {
		t.Fatalf("%d updates, %d bindings", len(eff.Updates), len(eff.Bindings))
	}
	seen := map[wire.Nonce]bool{}
	for i, u := range eff.Updates {
		if u.Peer != wire.NID(0x100+i) || u.Dest.NID != u.Peer || seen[u.Nonce] {
			t.Fatalf("update %d = %+v", i, u)
		}
		seen[u.Nonce] = true
	}
}

func TestOpenSessionIsIdempotentAndLearnsNonce(t *testing.T) {
	c := newCache(t, Soft)
	s := Session{Local: wire.ILV{Locator: lMN1, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: cnNID},
		RemoteLocators: []wire.LocatorEntry{{Locator: lCN2, Preference: 10}, {Locator: lCN, Preference: 20}}}
	eff, err := c.OpenSession(s, t0)
	if err != nil || len(eff.Events) != 1 || eff.Events[0].Kind != timeline.SessionNew {
		t.Fatalf("open: %+v %v", eff, err)
	}
	// The session-view locator is active even though the hosts file preferred lCN2.
	if b, _ := c.Binding(cnNID); b.RemoteLocator != lCN || !b.RemoteNonce.IsZero() {
		t.Fatalf("binding = %+v", b)
	}
	s.RemoteNonce = nonce(9)
	eff, err = c.OpenSession(s, t0.Add(time.Second))
	if err != nil || len(eff.Bindings) != 1 || eff.Bindings[0].RemoteNonce != nonce(9) || eff.Bindings[0].LocalNonce != nonce(1) {
		t.Fatalf("reopen: %+v %v", eff, err)
	}
	if _, err := c.LearnRemoteNonce(cnNID, nonce(10), t0); !errors.Is(err, ErrNonceMismatch) {
		t.Fatalf("second nonce accepted: %v", err)
	}
	if eff, err := c.LearnRemoteNonce(cnNID, nonce(9), t0); err != nil || !eff.Empty() {
		t.Fatalf("same nonce: %+v %v", eff, err)
	}
	// A shared-nonce correspondent (FreeBSD ILNP) switches to ours.
	if _, err := c.LearnRemoteNonce(cnNID, nonce(1), t0); err != nil {
		t.Fatalf("our own nonce refused: %v", err)
	}
	if b, _ := c.Binding(cnNID); b.RemoteNonce != nonce(1) {
		t.Fatalf("remote nonce after the switch: %v", b.RemoteNonce)
	}
	if _, err := c.LearnRemoteNonce(cnNID, nonce(9), t0); !errors.Is(err, ErrNonceMismatch) {
		t.Fatalf("its old nonce accepted after the switch: %v", err)
	}
	if _, err := c.LearnRemoteNonce(cn2NID, nonce(9), t0); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("unknown: %v", err)
	}
	if _, err := c.OpenSession(Session{Remote: wire.ILV{Locator: lCN}}, t0); !errors.Is(err, ErrBadSession) {
		t.Fatalf("zero NID: %v", err)
	}
}

func TestLearnRemoteNonceFirstPacket(t *testing.T) {
	c := newCache(t, Soft)
	c.OpenSession(Session{Local: wire.ILV{Locator: lMN1, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: cnNID}}, t0)
	eff, err := c.LearnRemoteNonce(cnNID, nonce(5), t0)
	if err != nil || len(eff.Bindings) != 1 || eff.Bindings[0].RemoteNonce != nonce(5) {
		t.Fatalf("learn: %+v %v", eff, err)
	}
	if _, err := c.LearnRemoteNonce(cnNID, wire.Nonce{}, t0); !errors.Is(err, ErrMissingNonce) {
		t.Fatalf("zero nonce: %v", err)
	}
}

func TestNonceGeneration(t *testing.T) {
	failing, _ := New(Config{NewNonce: func() (wire.Nonce, error) { return wire.Nonce{}, errors.New("entropy gone") }})
	if _, err := failing.OpenSession(Session{Local: wire.ILV{Locator: lMN1, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: cnNID}}, t0); err == nil ||
		!strings.Contains(err.Error(), "entropy gone") {
		t.Fatalf("err = %v", err)
	}
	zero, _ := New(Config{NewNonce: func() (wire.Nonce, error) { return wire.Nonce{}, nil }})
	if _, err := zero.OpenSession(Session{Local: wire.ILV{Locator: lMN1, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: cnNID}}, t0); err == nil {
		t.Fatal("zero nonce accepted")
	}
	// Default: crypto-random of the configured size, different per session.
	c, err := New(Config{NonceSize: 12})
	if err != nil {
		t.Fatal(err)
	}
	c.OpenSession(Session{Local: wire.ILV{Locator: lMN1, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: cnNID}}, t0)
	c.OpenSession(Session{Local: wire.ILV{Locator: lMN1, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: cn2NID}}, t0)
	b := c.Bindings()
	if b[0].LocalNonce.Len() != 12 || b[0].LocalNonce == b[1].LocalNonce {
		t.Fatalf("nonces %v %v", b[0].LocalNonce, b[1].LocalNonce)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []Config{
		{Mode: 7}, {IdleTimeout: time.Millisecond}, {NonceSize: 8}, {LURetry: time.Millisecond},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	for _, s := range []string{"soft", "Hard", " hard "} {
		if _, err := ParseMode(s); err != nil {
			t.Errorf("ParseMode(%q): %v", s, err)
		}
	}
	var m Mode
	if err := json.Unmarshal([]byte(`"hard"`), &m); err != nil || m != Hard {
		t.Fatalf("unmarshal mode: %v %v", m, err)
	}
	if _, err := ParseMode("medium"); err == nil {
		t.Fatal("ParseMode accepted medium")
	}
}

func TestLUGaveUpRetriesLater(t *testing.T) {
	c := newCache(t, Soft)
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	openCN(t, c, cnNID, t0)
	mustUpdate(t, c, ra(lMN2, ifLTE, router2), t0.Add(time.Second))
	c.LUGaveUp(cnNID, t0.Add(40*time.Second))
	if d, _ := c.NextDeadline(); !d.Equal(t0.Add(70 * time.Second)) {
		t.Fatalf("deadline = %v, want retry at 70s", d.Sub(t0))
	}
	if eff := c.Tick(t0.Add(69 * time.Second)); len(eff.Updates) != 0 {
		t.Fatalf("early retry: %+v", eff.Updates)
	}
	eff := c.Tick(t0.Add(70 * time.Second))
	if len(eff.Updates) != 1 || !slices.Equal(locs(eff.Updates[0].Update.Locators), []wire.L64{lMN2, lMN1}) {
		t.Fatalf("retry = %+v", eff.Updates)
	}
	if d, _ := c.NextDeadline(); d.Before(t0.Add(71 * time.Second)) {
		t.Fatalf("retry still armed: %v", d.Sub(t0))
	}
	// With nothing to advertise the retry is dropped instead of spinning.
	c.LUGaveUp(cnNID, t0.Add(80*time.Second))
	c.InterfaceDown(ifWifi, t0.Add(81*time.Second))
	c.InterfaceDown(ifLTE, t0.Add(81*time.Second))
	c.Tick(t0.Add(110 * time.Second))
	if d, ok := c.NextDeadline(); ok && !d.After(t0.Add(110*time.Second)) {
		t.Fatalf("deadline %v not in the future", d.Sub(t0))
	}
}

// Correspondents must not see an advertised lifetime run out while the locator is still
// valid here: the cache re-advertises half-way through.
func TestLURefreshBeforeAdvertisedLifetimeRunsOut(t *testing.T) {
	c := newCache(t, Soft)
	short := LocalUpdate{Locator: lMN1, IfIndex: ifWifi, Router: router1, ValidLifetime: 100 * time.Second, PreferredLifetime: 100 * time.Second}
	mustUpdate(t, c, short, t0)
	openCN(t, c, cnNID, t0)
	eff := mustUpdate(t, c, LocalUpdate{Locator: lMN2, IfIndex: ifLTE, Router: router2, ValidLifetime: 100 * time.Second, PreferredLifetime: 100 * time.Second}, t0)
	if eff.Updates[0].Update.Locators[0].Lifetime != 100 {
		t.Fatalf("advertised %+v", eff.Updates[0].Update.Locators)
	}
	// No RA refresh: re-advertising cannot extend anything, so no refresh LU.
	if d, _ := c.NextDeadline(); !d.Equal(t0.Add(100 * time.Second)) {
		t.Fatalf("deadline = %v, want expiry at 100s", d.Sub(t0))
	}
	// RAs refresh both at 30 s: the correspondent's copy (100 s from 0) must be refreshed at 50 s.
	mustUpdate(t, c, short, t0.Add(30*time.Second))
	mustUpdate(t, c, LocalUpdate{Locator: lMN2, IfIndex: ifLTE, Router: router2, ValidLifetime: 100 * time.Second, PreferredLifetime: 100 * time.Second}, t0.Add(30*time.Second))
	if d, _ := c.NextDeadline(); !d.Equal(t0.Add(50 * time.Second)) {
		t.Fatalf("deadline = %v, want refresh at 50s", d.Sub(t0))
	}
	eff = c.Tick(t0.Add(50 * time.Second))
	if len(eff.Updates) != 1 || eff.Updates[0].Update.Locators[0].Lifetime != 80 {
		t.Fatalf("refresh = %+v", eff.Updates)
	}
}

func TestSnapshotJSON(t *testing.T) {
	c := cnSide(t)
	c.ApplyLU(myNID, nonce(7), advert(wire.LocatorEntry{Locator: lMN2, Lifetime: 60}), t0)
	b, err := json.Marshal(c.Snapshot(t0.Add(10 * time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"handoff_mode":"soft"`, `"policy":"newest"`, `"state":"active"`, `"peer_nid":"0000:0000:0000:0000"`,
		`"remote_nonce":"00000007"`, `"local_nonce":"00000001"`, `"lifetime_s":50`, `"valid_lifetime_s":-1`,
		`"session_remote":"2001:db8:1:0:21b:21ff:fe67:97a8"`,
	} {
		if want == `"peer_nid":"0000:0000:0000:0000"` {
			want = `"peer_nid":"` + myNID.String() + `"`
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}
	// Keys are lower_snake_case.
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if strings.ToLower(k) != k || strings.Contains(k, "-") {
					t.Errorf("key %q", k)
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(generic)
}

func TestVerifyNonce(t *testing.T) {
	c := cnSide(t)
	c.OpenSession(Session{Local: wire.ILV{Locator: lCN, NID: cnNID}, Remote: wire.ILV{Locator: lMN1, NID: cn2NID}}, t0)
	cases := []struct {
		peer  wire.NID
		nonce wire.Nonce
		want  error
	}{
		{myNID, nonce(7), nil},
		{myNID, nonce(1), ErrNonceMismatch},
		{myNID, wire.Nonce{}, ErrMissingNonce},
		{cn2NID, nonce(7), ErrNoRemoteNonce},
		{0x99, nonce(7), ErrUnknownPeer},
	}
	for _, tc := range cases {
		if err := c.VerifyNonce(tc.peer, tc.nonce); !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
			t.Errorf("VerifyNonce(%v, %v) = %v, want %v", tc.peer, tc.nonce, err, tc.want)
		}
	}
}

func TestBindingCarriesRemoteSetAndAdoptsDatapathNonce(t *testing.T) {
	c := newCache(t, Soft)
	eff, err := c.OpenSession(Session{
		Local: wire.ILV{Locator: lMN1, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: cnNID},
		RemoteLocators: []wire.LocatorEntry{{Locator: lCN2, Preference: 10, Lifetime: 60}},
		LocalNonce:     nonce(0xabc), RemoteNonce: nonce(7),
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	b := eff.Bindings[0]
	want := []RemoteLocator{{Locator: lCN, Preference: 10, State: Active}, {Locator: lCN2, Preference: 10, Lifetime: 60, State: Valid}}
	if b.LocalNonce != nonce(0xabc) || !slices.Equal(b.RemoteLocators, want) {
		t.Fatalf("binding = %+v", b)
	}
	// A new remote set with the same active locator still reaches the datapath.
	eff, _ = c.ApplyLU(cnNID, nonce(7), advert(wire.LocatorEntry{Locator: lCN, Lifetime: 600}), t0)
	if len(eff.Bindings) != 1 || eff.Bindings[0].RemoteLocator != lCN || len(eff.Bindings[0].RemoteLocators) != 1 {
		t.Fatalf("bindings = %+v", eff.Bindings)
	}
}

func TestBindingEqual(t *testing.T) {
	base := Binding{Peer: cnNID, RemoteLocator: lCN, RemoteLocators: []RemoteLocator{{Locator: lCN, State: Active}}}
	same := base
	same.RemoteLocators = slices.Clone(base.RemoteLocators)
	if !base.Equal(same) {
		t.Fatal("equal bindings differ")
	}
	for name, mod := range map[string]func(*Binding){
		"remote set": func(b *Binding) {
			b.RemoteLocators = append(slices.Clone(b.RemoteLocators), RemoteLocator{Locator: lCN2})
		},
		"remote state": func(b *Binding) { b.RemoteLocators = []RemoteLocator{{Locator: lCN, State: Valid}} },
		"local":        func(b *Binding) { b.LocalLocator = lMN1 },
		"nonce":        func(b *Binding) { b.RemoteNonce = nonce(1) },
		"has local":    func(b *Binding) { b.HasLocal = true },
	} {
		o := base
		mod(&o)
		if base.Equal(o) {
			t.Errorf("%s change not detected", name)
		}
	}
}

// A correspondent's LU says whether an LU still on its way to its old locator can arrive:
// soft handoff keeps the old locator in the set (valid), hard handoff drops it.
func TestRemoteUsableAfterCorrespondentsLU(t *testing.T) {
	for _, c := range []struct {
		name    string
		entries []wire.LocatorEntry
		want    map[wire.L64]bool
	}{
		{"soft: old locator still valid", []wire.LocatorEntry{{Locator: lCN2, Preference: 0, Lifetime: 600}, {Locator: lCN, Preference: 10, Lifetime: 600}},
			map[wire.L64]bool{lCN: true, lCN2: true, lMN1: false}},
		{"hard: old locator gone", []wire.LocatorEntry{{Locator: lCN2, Lifetime: 600}},
			map[wire.L64]bool{lCN: false, lCN2: true}},
		{"old locator listed without a lifetime (0: none stated)", []wire.LocatorEntry{{Locator: lCN2, Lifetime: 600}, {Locator: lCN, Preference: 10}},
			map[wire.L64]bool{lCN: true, lCN2: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cache := newCache(t, Soft)
			openCN(t, cache, cnNID, t0)
			eff, err := cache.ApplyLU(cnNID, nonce(7), advert(c.entries...), t0)
			if err != nil || len(eff.Bindings) != 1 {
				t.Fatalf("ApplyLU: %v, bindings %+v", err, eff.Bindings)
			}
			b := eff.Bindings[0]
			if b.RemoteLocator != lCN2 {
				t.Fatalf("active remote %v, want %v", b.RemoteLocator, lCN2)
			}
			for loc, want := range c.want {
				if got := b.RemoteUsable(loc); got != want {
					t.Errorf("RemoteUsable(%v) = %v, want %v (set %+v)", loc, got, want, b.RemoteLocators)
				}
			}
		})
	}
	expired := Binding{RemoteLocators: []RemoteLocator{{Locator: lCN, State: Expired}, {Locator: lCN2, State: Aged}}}
	if expired.RemoteUsable(lCN) || expired.RemoteUsable(lCN2) {
		t.Error("expired or aged remote locator reported usable")
	}
}
