package ilcc

import (
	"testing"
	"time"

	"ilnp/internal/wire"
)

// A multihomed MN whose active locator's paths fail (no link down) moves to the other one and
// tells the correspondent; when the paths deliver again the policy's order comes back.
func TestLocalDownAndUp(t *testing.T) {
	c, err := New(Config{NID: myNID, NewNonce: func() (wire.Nonce, error) { return nonce(0x3333), nil }})
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	mustUpdate(t, c, ra(lMN2, ifLTE, router2), t0.Add(1))
	if _, err := c.OpenSession(Session{Local: wire.ILV{Locator: lMN2, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: cnNID}, RemoteNonce: nonce(0xcccc)}, t0.Add(2)); err != nil {
		t.Fatal(err)
	}
	if a, _ := c.Active(); a.Locator != lMN2 {
		t.Fatalf("newest: active %v, want %v", a.Locator, lMN2)
	}
	for _, tc := range []struct {
		name       string
		loc        wire.L64
		down       bool
		wantActive wire.L64
		wantLU     bool
	}{
		{"newest fails", lMN2, true, lMN1, true},
		{"again: nothing changes", lMN2, true, lMN1, false},
		{"other fails too: policy order", lMN1, true, lMN2, true},
		{"first back", lMN1, false, lMN1, true},
		{"newest back", lMN2, false, lMN2, true},
	} {
		eff := c.SetLocalDown(tc.loc, tc.down, t0.Add(3))
		if a, _ := c.Active(); a.Locator != tc.wantActive {
			t.Fatalf("%s: active %v, want %v", tc.name, a.Locator, tc.wantActive)
		}
		if got := len(eff.Updates) == 1; got != tc.wantLU {
			t.Fatalf("%s: LU sent %v, want %v (%+v)", tc.name, got, tc.wantLU, eff.Updates)
		}
		if tc.wantLU {
			locs := eff.Updates[0].Update.Locators
			if len(locs) != 2 || locs[0].Locator != tc.wantActive {
				t.Fatalf("%s: LU lists %+v, want %v first and both", tc.name, locs, tc.wantActive)
			}
			if b := eff.Bindings; len(b) != 1 || b[0].LocalLocator != tc.wantActive {
				t.Fatalf("%s: bindings %+v", tc.name, b)
			}
		}
	}
	if eff := c.SetLocalDown(wire.L64(0x99), true, t0); !eff.Empty() {
		t.Fatalf("unknown locator: %+v", eff)
	}
}

// A CN whose path to the MN's active locator fails sends to the MN's other locator, also across
// an LU that lists the failed one first, until it is reachable again.
func TestRemoteDownAndUp(t *testing.T) {
	n := newTwoNodes(t, Soft)
	n.now = t0.Add(time.Second)
	n.mnApply(n.mn.UpdateLocal(ra(lMN2, ifLTE, router2), n.now))
	n.run(t0.Add(3 * time.Second))
	if b, _ := n.cn.Binding(myNID); b.RemoteLocator != lMN2 || len(b.RemoteLocators) != 2 {
		t.Fatalf("CN binding after the LU: %+v", b)
	}
	eff := n.cn.SetRemoteDown(myNID, lMN2, true, n.now)
	if len(eff.Bindings) != 1 || eff.Bindings[0].RemoteLocator != lMN1 {
		t.Fatalf("remote down: bindings %+v, want active %v", eff.Bindings, lMN1)
	}
	// The MN's next LU still lists lMN2 first: the CN keeps away from it.
	if _, err := n.cn.ApplyLU(myNID, nonce(0x3333), wire.LocatorUpdate{Op: wire.OpAdvertisement,
		Locators: []wire.LocatorEntry{{Locator: lMN2}, {Locator: lMN1, Preference: 1}}}, n.now); err != nil {
		t.Fatal(err)
	}
	if b, _ := n.cn.Binding(myNID); b.RemoteLocator != lMN1 {
		t.Fatalf("after an LU listing the down locator first: active %v, want %v", b.RemoteLocator, lMN1)
	}
	eff = n.cn.SetRemoteDown(myNID, lMN2, false, n.now)
	if len(eff.Bindings) != 1 || eff.Bindings[0].RemoteLocator != lMN2 {
		t.Fatalf("remote up: bindings %+v, want active %v", eff.Bindings, lMN2)
	}
	if eff := n.cn.SetRemoteDown(wire.NID(7), lMN2, true, n.now); !eff.Empty() {
		t.Fatalf("unknown peer: %+v", eff)
	}
}

// Announce tells a correspondent our whole set only when the node is multihomed (two usable
// locators under a policy other than newest) and the correspondent was never sent an LU. Under
// the thesis's newest policy a second locator is a move in progress (the make-before-break
// overlap), and a session that got the move's LU was told the set: neither gets another LU
// (the issue-16 regression: TestScaleTwoByTwo counted 2·N·M first LUs).
func TestAnnounce(t *testing.T) {
	open := func(t *testing.T, c *Cache, view wire.L64) {
		t.Helper()
		if _, err := c.OpenSession(Session{Local: wire.ILV{Locator: view, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: cnNID}, RemoteNonce: nonce(0xcccc)}, t0.Add(2*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		policy    Policy
		second    bool // a second locator before the session opens
		moveAfter bool // the second locator comes after the session opened (its LU goes out)
		wantLU    bool
	}{
		{name: "single-homed", policy: Newest{}},
		{name: "newest, two locators at open (a move's overlap)", policy: Newest{}, second: true},
		{name: "newest, moved after open", policy: Newest{}, moveAfter: true},
		{name: "preference, moved after open: told by the move's LU", policy: ByPreference{}, moveAfter: true},
		{name: "preference, two locators at open", policy: ByPreference{}, second: true, wantLU: true},
		{name: "multipath, two locators at open", policy: Multipath{}, second: true, wantLU: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{NID: myNID, Policy: tc.policy, NewNonce: func() (wire.Nonce, error) { return nonce(0x3333), nil }})
			if err != nil {
				t.Fatal(err)
			}
			mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
			if tc.second {
				mustUpdate(t, c, ra(lMN2, ifLTE, router2), t0.Add(time.Second))
			}
			active, _ := c.Active()
			open(t, c, active.Locator)
			if got := c.Told(cnNID); len(got) != 1 || got[0] != active.Locator {
				t.Fatalf("told before any LU: %v, want the view locator %v only", got, active.Locator)
			}
			if tc.moveAfter {
				eff, err := c.UpdateLocal(ra(lMN2, ifLTE, router2), t0.Add(3*time.Second))
				if err != nil || len(eff.Updates) != 1 {
					t.Fatalf("the move's LU: %+v %v", eff.Updates, err)
				}
				if got := c.Told(cnNID); len(got) != 2 {
					t.Fatalf("told after the move's LU: %v, want both", got)
				}
			}
			eff := c.Announce(cnNID, t0.Add(4*time.Second))
			if got := len(eff.Updates) == 1; got != tc.wantLU {
				t.Fatalf("announce LU %v, want %v (%+v)", got, tc.wantLU, eff.Updates)
			}
			if tc.wantLU {
				if locs := eff.Updates[0].Update.Locators; len(locs) != 2 {
					t.Fatalf("announced %+v, want both locators", locs)
				}
				if got := c.Told(cnNID); len(got) != 2 {
					t.Fatalf("told after the announcement: %v", got)
				}
				if again := c.Announce(cnNID, t0.Add(5*time.Second)); len(again.Updates) != 0 {
					t.Fatalf("announced twice: %+v", again.Updates)
				}
			}
			if got := c.Multihomed(); got != (tc.policy.Name() != "newest" && (tc.second || tc.moveAfter)) {
				t.Fatalf("multihomed %v", got)
			}
		})
	}
	c, err := New(Config{NID: myNID, Policy: Multipath{}, NewNonce: func() (wire.Nonce, error) { return nonce(0x3333), nil }})
	if err != nil {
		t.Fatal(err)
	}
	if eff := c.Announce(wire.NID(5), t0); !eff.Empty() || c.Told(wire.NID(5)) != nil {
		t.Fatalf("unknown peer: %+v", eff)
	}
	// Opened under newest with two locators (nothing announced), then switched to a
	// multihoming policy at run time: the next Announce tells the set, once.
	c, err = New(Config{NID: myNID, NewNonce: func() (wire.Nonce, error) { return nonce(0x3333), nil }})
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	mustUpdate(t, c, ra(lMN2, ifLTE, router2), t0.Add(time.Second))
	open(t, c, lMN2)
	if eff := c.Announce(cnNID, t0.Add(3*time.Second)); len(eff.Updates) != 0 {
		t.Fatalf("newest: announced %+v", eff.Updates)
	}
	if _, err := c.SetPolicy(ByPreference{}, t0.Add(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	if eff := c.Announce(cnNID, t0.Add(5*time.Second)); len(eff.Updates) != 1 {
		t.Fatalf("after set policy preference: announced %+v, want one LU", eff.Updates)
	}
	if eff := c.Announce(cnNID, t0.Add(6*time.Second)); len(eff.Updates) != 0 {
		t.Fatalf("announced twice: %+v", eff.Updates)
	}
}
