package ilcc

import (
	"fmt"
	"time"

	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// ReplaceRemotes replaces the correspondent's remote locator set with one found in the
// rendezvous (its DNS NID/L64 records, which it updates on its move) when its LUs cannot reach
// us: the double jump, where both ends moved and each LU went to a locator already gone. The
// most preferred one becomes active, as for an LU; no ACK is owed. The caller has checked that
// the records are the correspondent's NID; the session's nonces still guard every LU.
func (c *Cache) ReplaceRemotes(nid wire.NID, locs []wire.LocatorEntry, now time.Time) (Effects, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.peerChanged(nid)
	var eff Effects
	p := c.peers[nid]
	if p == nil {
		return eff, &PeerError{Peer: nid, Op: "rendezvous", Err: ErrUnknownPeer}
	}
	var set []remote
	seen := map[wire.L64]bool{}
	for _, e := range locs {
		if e.Locator == 0 || seen[e.Locator] {
			continue
		}
		seen[e.Locator] = true
		set = append(set, remote{loc: e.Locator, pref: e.Preference, lifetime: e.Lifetime, expires: c.stampOf(remoteExpiry(now, e.Lifetime))})
	}
	if len(set) == 0 {
		return eff, &PeerError{Peer: nid, Op: "rendezvous", Err: ErrNoLocators}
	}
	before := p.lastActive
	p.setRemotes(set)
	p.selectRemote(c.reach())
	if p.lastActive != before {
		eff.Events = append(eff.Events, Event{Kind: timeline.ActiveLocator, Peer: nid, Locator: p.lastActive, To: Active,
			Detail: fmt.Sprintf("remote from rendezvous, %d locators", len(set))})
	}
	c.syncBinding(p, &eff)
	return eff, nil
}
