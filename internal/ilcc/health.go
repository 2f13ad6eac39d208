package ilcc

import (
	"slices"
	"time"

	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// Path health (issue 16): a locator whose paths stopped delivering without its link going
// down (internal/paths decides) ranks after every healthy one, whatever the policy says, and
// comes back to its place when a path through it delivers again. A down locator stays usable:
// it still receives, and probes keep testing it.

// SetLocalDown marks a local locator's paths as failed (down) or working again, re-ranks the
// locators and tells the correspondents when the active one changes.
func (c *Cache) SetLocalDown(loc wire.L64, down bool, now time.Time) Effects {
	c.lock()
	defer c.mu.Unlock()
	var eff Effects
	l := c.locals[loc]
	if l == nil || l.down == down {
		return eff
	}
	l.down = down
	eff.Events = append(eff.Events, Event{Kind: timeline.LocatorState, Locator: loc, From: l.state, To: l.state, Detail: healthDetail(down)})
	c.reselect(now, &eff)
	return eff
}

// SetRemoteDown marks a correspondent's locator as unreachable (down) or reachable again; the
// correspondent's active locator is chosen among the others while it is down.
func (c *Cache) SetRemoteDown(nid wire.NID, loc wire.L64, down bool, now time.Time) Effects {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.peerChanged(nid)
	var eff Effects
	p := c.peers[nid]
	if p == nil || p.isDown(loc) == down {
		return eff
	}
	p.setDown(loc, down)
	eff.Events = append(eff.Events, Event{Kind: timeline.LocatorState, Peer: nid, Locator: loc, Detail: "remote " + healthDetail(down)})
	if p.selectRemote(c.reach()) {
		eff.Events = append(eff.Events, Event{Kind: timeline.ActiveLocator, Peer: nid, Locator: p.lastActive, To: Active, Detail: "remote"})
	}
	c.syncBinding(p, &eff)
	return eff
}

func healthDetail(down bool) string {
	if down {
		return "paths down"
	}
	return "paths up"
}

// demoteDown moves the down locators after the others, keeping each group's order.
func (c *Cache) demoteDown(ranked []Candidate) []Candidate {
	up := slices.DeleteFunc(slices.Clone(ranked), func(x Candidate) bool { return c.locals[x.Locator].down })
	for _, x := range ranked {
		if c.locals[x.Locator].down {
			up = append(up, x)
		}
	}
	return up
}

// better: a's locator is preferred to b's (a reachable one first, then the lower preference).
func (p *peer) better(a, b remote) bool {
	if p.isDown(a.loc) != p.isDown(b.loc) {
		return !p.isDown(a.loc)
	}
	return a.pref < b.pref
}

// Multihomed reports whether the node keeps several locators on purpose: more than one
// usable local locator under a policy other than newest. The newest policy is the thesis's
// single-homed model (s.3.2.7): a new locator means the node moved, and the older ones are
// being left (the make-before-break overlap of a soft handoff, which lasts 15 s in the
// thesis's runs), so under it the node is never multihomed and sends exactly the thesis's
// LUs.
func (c *Cache) Multihomed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.multihomed()
}

func (c *Cache) multihomed() bool {
	if c.cfg.Policy.Name() == (Newest{}).Name() {
		return false
	}
	usable := 0
	for _, l := range c.locals {
		if l.state.Usable() {
			usable++
		}
	}
	return usable > 1
}

// Announce sends nid an LU with the current advertisement when the node is multihomed and the
// correspondent was never sent one: a session opened while multihomed is assumed (by
// OpenSession, the thesis's rule) to know our usable locators, but it knows only the one its
// packets show, and it needs the whole set to use another pair when one fails. Nothing without
// the correspondent's nonce, nothing when the session's view locator alone is what it would
// list, and nothing once an LU went to it (it was told the set then).
func (c *Cache) Announce(nid wire.NID, now time.Time) Effects {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.peerChanged(nid)
	var eff Effects
	p := c.peers[nid]
	if p == nil || p.remoteNonce.IsZero() || p.announced || !c.multihomed() {
		return eff
	}
	adv := c.advertisement(now)
	if len(adv) == 0 || (len(adv) == 1 && adv[0].Locator == p.sessLocal.Locator) {
		return eff
	}
	c.emitLU(p, adv, now, &eff)
	return eff
}

// Told lists our locators the correspondent knows: those of the last LU sent to it, or, when
// none was, the session's view locator alone (the one its packets show).
func (c *Cache) Told(nid wire.NID) []wire.L64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.peers[nid]
	if p == nil {
		return nil
	}
	if !p.announced {
		return []wire.L64{p.sessLocal.Locator}
	}
	out := make([]wire.L64, len(p.adv()))
	for i, e := range p.adv() {
		out[i] = e.Locator
	}
	return out
}

// SetLocalQuality records what the paths through a local locator measured and re-ranks the
// locators (only the quality policy looks at it).
func (c *Cache) SetLocalQuality(loc wire.L64, q Quality, now time.Time) Effects {
	c.mu.Lock()
	defer c.mu.Unlock()
	var eff Effects
	l := c.locals[loc]
	if l == nil || l.quality == q {
		return eff
	}
	l.quality = q
	if c.cfg.Policy.Name() == (ByQuality{}).Name() {
		c.global()
		c.reselect(now, &eff)
	}
	return eff
}
