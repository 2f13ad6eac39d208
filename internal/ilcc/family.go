package ilcc

import (
	"fmt"
	"slices"
	"time"

	"ilnp/internal/encap"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// IPv4 locators (RFC 6742 L32, carried as L64 values, internal/encap) live in the same sets
// with the same states, lifetimes and policies as IPv6 ones. Three rules follow from what a
// node can send:
//   - a node sends native IPv6 only from an IPv6 active locator, and ILNPv6 in UDP/IPv4 only
//     when it has an IPv4 locator: a remote locator it cannot reach is chosen only when no
//     other is left (reach);
//   - between locators the policy cannot tell apart (learned together, equal preference),
//     IPv6 ranks first: no encapsulation overhead, no NAT (locatorLess);
//   - behind a NAT a correspondent's IPv4 endpoint is the one its nonce-verified packets come
//     from, not the one it lists (Roam, and encap.AsSeen for its Locator Updates).

// unseenFamily reports whether adv lists a locator of the other family than the session's
// own: the correspondent sees the session's locators on its packets, never those of the
// other family (a dual-stack node's IPv4 locator), so the initiator of a new session sends an
// LU listing them at once, or the correspondent could not follow it onto an IPv4-only
// network. (The initiator learned the responder's from the rendezvous: hosts file, DNS L32.)
func unseenFamily(adv []wire.LocatorEntry, session wire.L64) bool {
	for _, e := range adv {
		if encap.IsL32(e.Locator) != encap.IsL32(session) {
			return true
		}
	}
	return false
}

// dualStackBeside reports whether l is of the other family than the active locator on the
// active one's own interface. Hard mode ages every locator but the active one (break before
// make: one locator at a time); such a locator is no handoff but the link's dual stack, so it
// stays valid, or a stationary dual-stack node in hard mode would drop what reaches it through
// its IPv4 locator (found by the lab's --families: every packet to a hard-mode CN's L32 was
// dropped as invalid-local-locator).
func dualStackBeside(active, l Candidate) bool {
	return l.IfIndex == active.IfIndex && encap.IsL32(l.Locator) != encap.IsL32(active.Locator)
}

// reach is which remote locator families this node can send to now.
type reach struct{ v6, v4 bool }

func (r reach) can(l wire.L64) bool {
	if encap.IsL32(l) {
		return r.v4
	}
	return r.v6
}

// reach: IPv6 when the active local locator is IPv6; IPv4 when any usable local locator is
// IPv4 (the datapath encapsulates from it, encap_config.local_l32, when the active one is
// IPv6).
func (c *Cache) reach() reach {
	var r reach
	for _, l := range c.locals {
		if !l.state.Usable() {
			continue
		}
		if encap.IsL32(l.loc) {
			r.v4 = true
		} else if l.state == Active {
			r.v6 = true
		}
	}
	return r
}

// locatorLess is the policies' last tie-break: IPv6 before IPv4, then by value.
func locatorLess(a, b wire.L64) bool {
	if a4, b4 := encap.IsL32(a), encap.IsL32(b); a4 != b4 {
		return b4
	}
	return a < b
}

// Roam records that a nonce-verified packet of the session with nid came from the IPv4
// endpoint l (encap.IsL32), which its set does not list, while the session runs over IPv4: the
// correspondent's NAT chose a new endpoint for it (a rebinding, as WireGuard's roaming has
// it). The endpoint replaces the active remote locator, with its preference and lifetime. A
// session whose active remote locator is IPv6 does not roam: a correspondent that moves to an
// IPv4 network says so in an LU (whose NATed source encap.AsSeen puts in place), and a late
// packet from an endpoint it has left must not pull the session back. The caller has checked
// the nonce (the datapath did); a known endpoint or an IPv6 locator changes nothing.
func (c *Cache) Roam(nid wire.NID, l wire.L64, now time.Time) (Effects, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.peerChanged(nid)
	var eff Effects
	p := c.peers[nid]
	if p == nil {
		return eff, &PeerError{Peer: nid, Op: "roam", Err: ErrUnknownPeer}
	}
	if !encap.IsL32(l) {
		return eff, fmt.Errorf("roam %v: %v: %w (not an IPv4 endpoint)", nid, l, ErrBadLocator)
	}
	i := slices.IndexFunc(p.remotes(), func(r remote) bool { return r.loc == p.lastActive })
	if i < 0 || !encap.IsL32(p.lastActive) || slices.ContainsFunc(p.remotes(), func(r remote) bool { return r.loc == l }) {
		return eff, nil
	}
	before := p.lastActive
	p.remotes()[i].loc = l
	c.touch(p, now)
	p.selectRemote(c.reach())
	if p.lastActive != before {
		eff.Events = append(eff.Events, Event{Kind: timeline.ActiveLocator, Peer: nid, Locator: p.lastActive, To: Active,
			Detail: fmt.Sprintf("remote, NAT rebinding from %v", before)})
	}
	c.syncBinding(p, &eff)
	return eff, nil
}
