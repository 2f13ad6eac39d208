package ilcc

import (
	"errors"
	"testing"

	"ilnp/internal/wire"
)

func TestReplaceRemotesFromRendezvous(t *testing.T) {
	c := newCache(t, Hard)
	mustUpdate(t, c, ra(lMN1, 1, router1), t0)
	openCN(t, c, cnNID, t0)

	eff, err := c.ReplaceRemotes(cnNID, []wire.LocatorEntry{{Locator: lCN2, Preference: 0}, {Locator: lCN2}, {Locator: 0}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Bindings) != 1 || len(eff.Acks) != 0 || len(eff.Updates) != 0 {
		t.Fatalf("effects %+v", eff)
	}
	b := eff.Bindings[0]
	if b.RemoteLocator != lCN2 || len(b.RemoteLocators) != 1 || b.RemoteLocators[0].State != Active {
		t.Fatalf("binding %+v", b)
	}
	// The same set again changes nothing.
	if eff, err := c.ReplaceRemotes(cnNID, []wire.LocatorEntry{{Locator: lCN2}}, t0); err != nil || len(eff.Bindings) != 0 {
		t.Fatalf("again: %+v %v", eff, err)
	}
	for _, tc := range []struct {
		nid  wire.NID
		locs []wire.LocatorEntry
		want error
	}{
		{cnNID + 1, []wire.LocatorEntry{{Locator: lCN}}, ErrUnknownPeer},
		{cnNID, []wire.LocatorEntry{{Locator: 0}}, ErrNoLocators},
		{cnNID, nil, ErrNoLocators},
	} {
		if _, err := c.ReplaceRemotes(tc.nid, tc.locs, t0); !errors.Is(err, tc.want) {
			t.Fatalf("%v %v: %v, want %v", tc.nid, tc.locs, err, tc.want)
		}
	}
}
