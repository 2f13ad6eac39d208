package ilcc

import (
	"net/netip"
	"testing"
	"time"

	"ilnp/internal/encap"
	"ilnp/internal/wire"
)

func l32(t *testing.T, s string) wire.L64 {
	t.Helper()
	l, err := encap.L32(netip.MustParseAddrPort(s))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A correspondent's locators are chosen among those this node can send to: IPv4 ones need an
// IPv4 locator here, IPv6 ones an IPv6 active locator; and the choice follows the active
// local locator's family.
func TestRemoteSelectionFollowsLocalFamily(t *testing.T) {
	cn4 := l32(t, "198.51.100.2:49191")
	mn4 := l32(t, "10.0.0.2:49191")
	c := newCache(t, Soft)
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	openCN(t, c, cnNID, t0)
	// The CN lists its IPv6 locator first, its IPv4 one second.
	if _, err := c.ApplyLU(cnNID, nonce(7), advert(
		wire.LocatorEntry{Locator: lCN, Preference: 0, Lifetime: 600},
		wire.LocatorEntry{Locator: cn4, Preference: 1, Lifetime: 600},
	), t0); err != nil {
		t.Fatal(err)
	}
	active := func(want wire.L64, when string) {
		t.Helper()
		b, ok := c.Binding(cnNID)
		if !ok || b.RemoteLocator != want {
			t.Fatalf("%s: remote active %v, want %v", when, b.RemoteLocator, want)
		}
	}
	active(lCN, "IPv6 here")
	// Moving to an IPv4 network (newest policy): the CN's IPv4 locator becomes active.
	eff := mustUpdate(t, c, LocalUpdate{Locator: mn4, IfIndex: ifLTE, ValidLifetime: time.Hour, PreferredLifetime: time.Hour}, t0.Add(time.Second))
	if a, _ := c.Active(); a.Locator != mn4 {
		t.Fatalf("local active %v, want the IPv4 locator", a.Locator)
	}
	active(cn4, "IPv4 here")
	if len(eff.Bindings) != 1 || eff.Bindings[0].RemoteLocator != cn4 || len(eff.Updates) != 1 {
		t.Fatalf("effects: bindings %+v updates %d", eff.Bindings, len(eff.Updates))
	}
	// The LU lists the IPv4 locator first, then the (still valid) IPv6 one.
	if got := eff.Updates[0].Update.Locators; len(got) != 2 || got[0].Locator != mn4 || got[1].Locator != lMN1 {
		t.Fatalf("LU locators %+v", got)
	}
	// Back on IPv6: the CN's IPv6 locator again.
	mustUpdate(t, c, ra(lMN2, ifWifi, router1), t0.Add(2*time.Second))
	active(lCN, "IPv6 again")
}

// Policies cannot tell locators learned together apart: IPv6 ranks first.
func TestIPv6RanksFirstOnATie(t *testing.T) {
	for _, p := range []Policy{Newest{}, ByPreference{}} {
		c, err := New(Config{NID: myNID, Mode: Soft, Policy: p, NewNonce: counterNonces()})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range []wire.L64{l32(t, "198.51.100.2:49191"), lCN} {
			mustUpdate(t, c, LocalUpdate{Locator: l, IfIndex: 1, ValidLifetime: Infinite, PreferredLifetime: Infinite}, t0)
		}
		if a, _ := c.Active(); a.Locator != lCN {
			t.Errorf("%s: active %v, want the IPv6 locator", p.Name(), a.Locator)
		}
	}
}

// A nonce-verified packet from an unlisted IPv4 endpoint while the session runs over IPv4: a
// NAT rebinding. Over IPv6 nothing changes (the LU announces a move).
func TestRoam(t *testing.T) {
	nat1 := l32(t, "203.0.113.1:61000")
	nat2 := l32(t, "203.0.113.1:61001")
	c := cnSide(t)
	mustUpdate(t, c, LocalUpdate{Locator: l32(t, "198.51.100.2:49191"), IfIndex: 1, ValidLifetime: Infinite, PreferredLifetime: Infinite}, t0)
	// Over IPv6: a packet from an IPv4 endpoint (late, or ahead of its LU) changes nothing.
	if eff, err := c.Roam(myNID, nat1, t0.Add(time.Second)); err != nil || len(eff.Bindings)+len(eff.Events) != 0 {
		t.Fatalf("roam over IPv6: %+v %v", eff, err)
	}
	// The MN's LU from behind the NAT (its source in place of its private endpoint).
	if _, err := c.ApplyLU(myNID, nonce(7), advert(
		wire.LocatorEntry{Locator: nat1, Preference: 0, Lifetime: 600},
		wire.LocatorEntry{Locator: lMN1, Preference: 1, Lifetime: 300},
	), t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// The NAT rebinds: the new endpoint replaces the old one, with its preference and lifetime.
	eff, err := c.Roam(myNID, nat2, t0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Bindings) != 1 {
		t.Fatalf("rebinding: %+v", eff)
	}
	b := eff.Bindings[0]
	if b.RemoteLocator != nat2 || len(b.RemoteLocators) != 2 || b.RemoteLocators[0].Locator != nat2 ||
		b.RemoteLocators[0].Lifetime != 600 || b.RemoteLocators[1].Locator != lMN1 {
		t.Fatalf("rebinding: %+v", b)
	}
	// Known endpoints, IPv6 locators and unknown peers change nothing.
	if eff, err := c.Roam(myNID, nat2, t0.Add(3*time.Second)); err != nil || len(eff.Bindings)+len(eff.Events) != 0 {
		t.Fatalf("known endpoint: %+v %v", eff, err)
	}
	if _, err := c.Roam(myNID, lMN2, t0); err == nil {
		t.Fatal("roaming to an IPv6 locator accepted")
	}
	if _, err := c.Roam(cn2NID, nat1, t0); err == nil {
		t.Fatal("roaming of an unknown peer accepted")
	}
}

// A dual-stack initiator tells a new correspondent its IPv4 locators (they are on none of the
// session's packets); a responder and an IPv6-only node send nothing (RFC 6743 behaviour).
func TestNewSessionLearnsOtherFamily(t *testing.T) {
	cn4 := l32(t, "198.51.100.2:49191")
	c, err := New(Config{NID: cnNID, NewNonce: counterNonces()})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []wire.L64{lCN, cn4} {
		mustUpdate(t, c, LocalUpdate{Locator: l, IfIndex: 1, ValidLifetime: Infinite, PreferredLifetime: Infinite}, t0)
	}
	// As responder (the session may come from a spoofed packet): nothing.
	eff, err := c.OpenSession(Session{Local: wire.ILV{Locator: lCN, NID: cnNID}, Remote: wire.ILV{Locator: lMN2, NID: cn2NID}, RemoteNonce: nonce(8)}, t0)
	if err != nil || len(eff.Updates) != 0 {
		t.Fatalf("responder: %d LUs at session open (%v), want 0", len(eff.Updates), err)
	}
	eff, err = c.OpenSession(Session{Local: wire.ILV{Locator: lCN, NID: cnNID}, Remote: wire.ILV{Locator: lMN1, NID: myNID}, RemoteNonce: nonce(7), Initiator: true}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Updates) != 1 {
		t.Fatalf("dual stack: %d LUs at session open, want 1", len(eff.Updates))
	}
	if got := eff.Updates[0].Update.Locators; len(got) != 2 || got[0].Locator != lCN || got[1].Locator != cn4 {
		t.Fatalf("dual stack: LU lists %+v", got)
	}
	// Before the correspondent has answered (its nonce unknown), the LU waits for its nonce:
	// its ACK could not be taken before.
	mn3 := wire.NID(0x0214_4fff_fe20_0303)
	eff, err = c.OpenSession(Session{Local: wire.ILV{Locator: lCN, NID: cnNID}, Remote: wire.ILV{Locator: lMN1, NID: mn3}, Initiator: true}, t0)
	if err != nil || len(eff.Updates) != 0 {
		t.Fatalf("dual stack, nonce not learned: %d LUs at session open (%v), want 0", len(eff.Updates), err)
	}
	eff, err = c.LearnRemoteNonce(mn3, nonce(9), t0.Add(time.Millisecond))
	if err != nil || len(eff.Updates) != 1 || eff.Updates[0].Peer != mn3 || len(eff.Updates[0].Update.Locators) != 2 {
		t.Fatalf("dual stack, nonce learned: %+v (%v), want the LU listing both locators", eff.Updates, err)
	}
	if eff, _ := c.LearnRemoteNonce(mn3, nonce(9), t0.Add(2*time.Millisecond)); len(eff.Updates) != 0 {
		t.Fatalf("the nonce learned again: %d more LUs, want 0", len(eff.Updates))
	}
	v6 := newCache(t, Soft)
	mustUpdate(t, v6, ra(lMN1, ifWifi, router1), t0)
	if eff := openCN(t, v6, cnNID, t0); len(eff.Updates) != 0 {
		t.Fatalf("IPv6-only node sent %d LUs at session open", len(eff.Updates))
	}
}

// Hard mode ages every locator but the active one, except the other family's on the active
// one's interface (dual stack on one link is no handoff); a locator of the other family on
// another interface is a handoff like any other and is aged.
func TestHardModeKeepsDualStackBeside(t *testing.T) {
	v4 := l32(t, "198.51.100.2:49191")
	other4 := l32(t, "203.0.113.7:49191")
	c := newCache(t, Hard)
	mustUpdate(t, c, LocalUpdate{Locator: lMN1, IfIndex: 1, ValidLifetime: Infinite, PreferredLifetime: Infinite}, t0)
	mustUpdate(t, c, LocalUpdate{Locator: v4, IfIndex: 1, ValidLifetime: Infinite, PreferredLifetime: Infinite}, t0)
	if got := states(c); got[lMN1] != Active || got[v4] != Valid {
		t.Fatalf("dual stack on one link in hard mode: %v, want the IPv6 locator active and the IPv4 one valid", got)
	}
	mustUpdate(t, c, LocalUpdate{Locator: other4, IfIndex: 2, ValidLifetime: Infinite, PreferredLifetime: Infinite}, t0.Add(time.Second))
	if got := states(c); got[other4] != Active || got[lMN1] != Aged || got[v4] != Aged {
		t.Fatalf("hard handoff to another link: %v, want the new IPv4 locator active and both of the old link aged", got)
	}
}
