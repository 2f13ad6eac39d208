package ilcc

import (
	"errors"
	"testing"
	"time"

	"ilnp/internal/wire"
)

// A correspondent that restarts adopts the session as the datapath holds it: the mobile
// node's locator set after its last LU (not the session view), and it still accepts the next
// LU with the session's nonce.
func TestAdoptSessionKeepsRemoteSet(t *testing.T) {
	c, err := New(Config{NID: cnNID, NewNonce: counterNonces()})
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, c, LocalUpdate{Locator: lCN, IfIndex: 1, ValidLifetime: Infinite, PreferredLifetime: Infinite}, t0)
	eff, err := c.AdoptSession(AdoptedSession{
		Local: wire.ILV{Locator: lCN, NID: cnNID}, Remote: wire.ILV{Locator: lMN1, NID: myNID},
		LocalNonce: nonce(5), RemoteNonce: nonce(7),
		RemoteLocators: []RemoteLocator{{Locator: lMN2, Preference: 0, Lifetime: 60, State: Active},
			{Locator: lMN1, Preference: 1, Lifetime: 30, State: Valid}},
		RemoteActive: lMN2,
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Bindings) != 1 || eff.Bindings[0].RemoteLocator != lMN2 || eff.Bindings[0].LocalNonce != nonce(5) ||
		len(eff.Bindings[0].RemoteLocators) != 2 {
		t.Fatalf("adopted binding = %+v, want remote active lMN2 of 2, local nonce 5", eff.Bindings)
	}
	if eff, err := c.ApplyLU(myNID, nonce(7), advert(wire.LocatorEntry{Locator: lMN3, Lifetime: 60}), t0.Add(time.Second)); err != nil ||
		len(eff.Acks) != 1 || eff.Bindings[0].RemoteLocator != lMN3 {
		t.Fatalf("LU after adoption: %+v, %v", eff, err)
	}
	// Adopting a known correspondent again changes nothing.
	if eff, err := c.AdoptSession(AdoptedSession{Local: wire.ILV{Locator: lCN, NID: cnNID},
		Remote: wire.ILV{Locator: lMN1, NID: myNID}, LocalNonce: nonce(9)}, t0); err != nil || !eff.Empty() {
		t.Fatalf("second adoption: %+v, %v", eff, err)
	}
	if b, _ := c.Binding(myNID); b.LocalNonce != nonce(5) || b.RemoteLocator != lMN3 {
		t.Fatalf("binding after second adoption: %+v", b)
	}
	if _, err := c.AdoptSession(AdoptedSession{Local: wire.ILV{Locator: lCN, NID: cnNID},
		Remote: wire.ILV{Locator: lMN1, NID: 77}}, t0); !errors.Is(err, ErrBadSession) {
		t.Fatalf("adoption without a local nonce: %v", err)
	}
}

// A mobile node that restarts tells a correspondent only what it does not know: nothing when
// the acknowledged set is current, an LU when it moved while down or an LU was outstanding.
func TestResyncAfterAdoption(t *testing.T) {
	for _, tc := range []struct {
		name       string
		locals     []wire.L64 // oldest first: the last is active (newest policy)
		advertised []wire.LocatorEntry
		want       []wire.L64 // the LU's locators; nil: no LU
	}{
		{"unchanged", []wire.L64{lMN1}, []wire.LocatorEntry{{Locator: lMN1}}, nil},
		{"outstanding LU", []wire.L64{lMN1}, nil, []wire.L64{lMN1}},
		{"moved while down", []wire.L64{lMN2}, []wire.LocatorEntry{{Locator: lMN1}}, []wire.L64{lMN2}},
		{"entered a network while down", []wire.L64{lMN1, lMN2}, []wire.LocatorEntry{{Locator: lMN1}}, []wire.L64{lMN2, lMN1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{NID: myNID, NewNonce: counterNonces()})
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range tc.locals {
				mustUpdate(t, c, LocalUpdate{Locator: l, IfIndex: i + 1, ValidLifetime: time.Minute, PreferredLifetime: time.Minute},
					t0.Add(time.Duration(i)*time.Millisecond))
			}
			now := t0.Add(time.Second)
			if _, err := c.AdoptSession(AdoptedSession{
				Local: wire.ILV{Locator: lMN1, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: cnNID},
				LocalNonce: nonce(1), RemoteNonce: nonce(2), RemoteActive: lCN, Advertised: tc.advertised,
			}, now); err != nil {
				t.Fatal(err)
			}
			eff := c.Resync(now)
			var got []wire.L64
			for _, u := range eff.Updates {
				for _, e := range u.Update.Locators {
					got = append(got, e.Locator)
				}
				if u.Nonce != nonce(1) || u.Peer != cnNID {
					t.Errorf("LU %+v: want the session's nonce and peer", u)
				}
			}
			if len(eff.Updates) > 1 || len(got) != len(tc.want) {
				t.Fatalf("Resync LUs = %+v, want one listing %v", eff.Updates, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("LU lists %v, want %v", got, tc.want)
				}
			}
			if tc.want != nil && len(c.Advertised(cnNID)) != len(tc.want) {
				t.Fatalf("Advertised = %v after the LU", c.Advertised(cnNID))
			}
		})
	}
}
