package ilcc

import (
	"fmt"
	"slices"
	"time"

	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// AdoptedSession is a session a restarted daemon finds in the pinned datapath: its view and
// nonces, the correspondent's locator set as last applied, and what the correspondent was
// last told about ours.
type AdoptedSession struct {
	Local, Remote wire.ILV
	LocalNonce    wire.Nonce
	RemoteNonce   wire.Nonce
	// RemoteLocators is the correspondent's locator set with states; RemoteActive the one in
	// use. An empty set keeps Remote.Locator.
	RemoteLocators []RemoteLocator
	RemoteActive   wire.L64
	// Advertised is the local set the correspondent acknowledged last; nil when unknown or
	// unacknowledged, so that Resync sends it an LU.
	Advertised []wire.LocatorEntry
}

// AdoptSession records a session taken over from a previous daemon. Unlike OpenSession it
// keeps the correspondent's locator set and active locator as they are (an LU may have
// changed them since the session opened), and the record of what the correspondent knows, so
// that Resync tells it only what changed. Remote locator lifetimes count from now. A known
// correspondent is left alone.
func (c *Cache) AdoptSession(s AdoptedSession, now time.Time) (Effects, error) {
	if s.Remote.NID == 0 || s.Local.NID == 0 || s.Remote.Locator == 0 || s.LocalNonce.IsZero() {
		return Effects{}, fmt.Errorf("adopted session %v -> %v: %w (zero NID, locator or local nonce)", s.Local, s.Remote, ErrBadSession)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.peerChanged(s.Remote.NID)
	var eff Effects
	if c.peers[s.Remote.NID] != nil {
		return eff, nil
	}
	p := &peer{
		sessLocal: c.localView(s.Local), sessRemote: s.Remote,
		localNonce: s.LocalNonce, remoteNonce: s.RemoteNonce, created: c.stampOf(now), lastUsed: c.stampOf(now),
		lastActive: s.RemoteActive, advertised: c.shared(s.Advertised), advertisedAt: c.stampOf(now),
		announced: len(s.Advertised) > 0,
	}
	var set []remote
	for _, r := range s.RemoteLocators {
		if r.Locator == 0 {
			continue
		}
		st := r.State
		if st != Expired && st != Active && st != Valid {
			st = Valid
		}
		set = append(set, remote{loc: r.Locator, pref: r.Preference, lifetime: r.Lifetime,
			expires: c.stampOf(remoteExpiry(now, r.Lifetime)), state: st})
	}
	if len(set) == 0 {
		set = []remote{{loc: s.Remote.Locator}}
	}
	p.setRemotes(set)
	if p.lastActive == 0 {
		p.lastActive = s.Remote.Locator
	}
	p.selectRemote(c.reach())
	c.peers[p.nid()] = p
	eff.Events = append(eff.Events, Event{Kind: timeline.SessionNew, Peer: p.nid(), Locator: p.lastActive, Detail: "adopted"})
	c.syncBinding(p, &eff)
	return eff, nil
}

// Resync brings every correspondent up to date after adoption: an LU to each whose
// acknowledged advertisement differs from the current one (the node moved while its daemon
// was down, or an LU was outstanding), and the bindings that changed.
func (c *Cache) Resync(now time.Time) Effects {
	c.lock()
	defer c.mu.Unlock()
	var eff Effects
	c.syncPeers(now, &eff)
	return eff
}

// EachAdvertised calls fn with every correspondent and what it was last told (as Advertised,
// but fn must not keep or change the slice), in no particular order, without building whole
// bindings: the state file wants only this, and Bindings (sorted, full) for 100,000
// correspondents held the daemon's loop (issue 28). fn must not call the cache.
func (c *Cache) EachAdvertised(fn func(nid wire.NID, advertised []wire.LocatorEntry)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for nid, p := range c.peers {
		fn(nid, p.adv())
	}
}

// Advertised returns what the correspondent was last sent (nil: unknown correspondent).
func (c *Cache) Advertised(nid wire.NID) []wire.LocatorEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.peers[nid]; p != nil {
		return slices.Clone(p.adv())
	}
	return nil
}
