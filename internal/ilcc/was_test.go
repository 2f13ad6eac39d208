package ilcc

import (
	"testing"
	"time"

	"ilnp/internal/wire"
)

// A binding handed out in Effects says which remote locator it replaces (Binding.Was): none for
// the session's first, the old one when the correspondent's LU moves it, the same one when
// only the local side changes; the bindings asked for outside Effects carry none.
func TestBindingWas(t *testing.T) {
	c := newCache(t, Soft)
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	eff := openCN(t, c, cnNID, t0)
	if len(eff.Bindings) != 1 || eff.Bindings[0].Was != 0 || eff.Bindings[0].RemoteLocator != lCN {
		t.Fatalf("opened: %+v", eff.Bindings)
	}
	lu := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{{Locator: lCN2, Lifetime: 60}, {Locator: lCN, Preference: 1, Lifetime: 60}}}
	eff, err := c.ApplyLU(cnNID, nonce(7), lu, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Bindings) != 1 || eff.Bindings[0].Was != lCN || eff.Bindings[0].RemoteLocator != lCN2 {
		t.Fatalf("after the LU: %+v", eff.Bindings)
	}
	eff = mustUpdate(t, c, ra(lMN2, ifLTE, router2), t0.Add(2*time.Second))
	if len(eff.Bindings) != 1 {
		t.Errorf("a local move: %d bindings, want 1", len(eff.Bindings))
	}
	for _, b := range eff.Bindings {
		if b.Was != lCN2 || b.RemoteLocator != lCN2 {
			t.Errorf("after a local change: %+v", b)
		}
	}
	if b, ok := c.Binding(cnNID); !ok || b.Was != 0 {
		t.Errorf("Binding: %+v %v", b, ok)
	}
}
