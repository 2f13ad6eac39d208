package ilcc

import (
	"net/netip"
	"slices"
	"time"

	"ilnp/internal/wire"
)

// Local is a local locator as the datapath needs it.
type Local struct {
	Locator    wire.L64
	IfIndex    int
	Router     netip.Addr
	State      State
	Preference uint16
	Deprecated bool
	// Down: the path liveness found no path through it (SetLocalDown).
	Down bool
}

// Locals returns the local locators, best ranked first.
func (c *Cache) Locals() []Local {
	c.mu.Lock()
	defer c.mu.Unlock()
	ls := c.sortedLocals()
	out := make([]Local, len(ls))
	for i, l := range ls {
		out[i] = Local{Locator: l.loc, IfIndex: l.ifindex, Router: l.router, State: l.state, Preference: l.pref, Deprecated: l.deprecated, Down: l.down}
	}
	return out
}

// Active returns the active local locator; ok is false when the node has none.
func (c *Cache) Active() (Local, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.activeLocal()
	if l == nil {
		return Local{}, false
	}
	return Local{Locator: l.loc, IfIndex: l.ifindex, Router: l.router, State: l.state, Preference: l.pref, Deprecated: l.deprecated}, true
}

// Advertisement returns the locator entries an LU sent now would list (empty: nothing to send).
func (c *Cache) Advertisement(now time.Time) []wire.LocatorEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.advertisement(now)
}

// Has reports whether the cache has a session with nid (Binding without building one).
func (c *Cache) Has(nid wire.NID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peers[nid] != nil
}

// Len is the number of sessions (correspondents) in the cache.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.peers)
}

// Binding returns the datapath entry of one correspondent.
func (c *Cache) Binding(nid wire.NID) (Binding, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.peers[nid]
	if p == nil {
		return Binding{}, false
	}
	return c.bindingFor(p), true
}

// SessionView returns the session view of the session with nid: this node's I-LV and the
// correspondent's (ok false: no session). It copies nothing else: the daemon asks it for
// every peer route it writes, instead of keeping a map of its own (issue 28).
func (c *Cache) SessionView(nid wire.NID) (local, remote wire.ILV, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.peers[nid]
	if p == nil {
		return wire.ILV{}, wire.ILV{}, false
	}
	return *p.sessLocal, p.sessRemote, true
}

// Bindings returns every correspondent's datapath entry, ordered by peer (for a full resync).
func (c *Cache) Bindings() []Binding {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := c.sortedPeers()
	out := make([]Binding, len(ps))
	for i, p := range ps {
		out[i] = c.bindingFor(p)
	}
	return out
}

// Snapshot is the JSON view for `ilnpctl show locators|sessions`.
type Snapshot struct {
	NID      string        `json:"nid"`
	Mode     Mode          `json:"handoff_mode"`
	Policy   string        `json:"policy"`
	Locators []LocatorView `json:"locators"`
	Sessions []SessionView `json:"sessions"`
}

// LocatorView is one local locator. Lifetimes are the remaining seconds, -1 for infinite.
type LocatorView struct {
	Locator            string    `json:"locator"`
	IfIndex            int       `json:"ifindex"`
	Router             string    `json:"router,omitempty"`
	State              State     `json:"state"`
	Preference         uint16    `json:"preference"`
	Deprecated         bool      `json:"deprecated"`
	LearnedAt          time.Time `json:"learned_at"`
	ValidLifetimeS     int64     `json:"valid_lifetime_s"`
	PreferredLifetimeS int64     `json:"preferred_lifetime_s"`
}

// RemoteLocatorView is one locator of a correspondent; LifetimeS is -1 without expiry.
type RemoteLocatorView struct {
	Locator    string `json:"locator"`
	Preference uint16 `json:"preference"`
	State      State  `json:"state"`
	LifetimeS  int64  `json:"lifetime_s"`
}

// AdvertisedView is one entry of the last LU sent to a correspondent.
type AdvertisedView struct {
	Locator    string `json:"locator"`
	Preference uint16 `json:"preference"`
	LifetimeS  uint16 `json:"lifetime_s"`
}

// SessionView is one correspondent.
type SessionView struct {
	PeerNID        string              `json:"peer_nid"`
	SessionLocal   string              `json:"session_local"`
	SessionRemote  string              `json:"session_remote"`
	ActiveLocal    string              `json:"active_local,omitempty"`
	ActiveRemote   string              `json:"active_remote"`
	RemoteLocators []RemoteLocatorView `json:"remote_locators"`
	Advertised     []AdvertisedView    `json:"advertised"`
	LocalNonce     string              `json:"local_nonce"`
	RemoteNonce    string              `json:"remote_nonce,omitempty"`
	CreatedAt      time.Time           `json:"created_at"`
	LastUsed       time.Time           `json:"last_used"`
	IdleS          float64             `json:"idle_s"`
}

func remaining(end, now time.Time) int64 {
	if end.IsZero() {
		return -1
	}
	return max(int64(end.Sub(now)/time.Second), 0)
}

// Snapshot returns the whole cache as plain values.
func (c *Cache) Snapshot(now time.Time) Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Snapshot{
		NID: c.cfg.NID.String(), Mode: c.cfg.Mode, Policy: c.cfg.Policy.Name(),
		Locators: c.locatorViews(now), Sessions: []SessionView{},
	}
	active := c.activeLocal()
	for _, p := range c.sortedPeers() {
		v := SessionView{
			PeerNID: p.nid().String(), SessionLocal: p.sessLocal.Addr().String(), SessionRemote: p.sessRemote.Addr().String(),
			ActiveRemote: p.lastActive.String(), RemoteLocators: []RemoteLocatorView{}, Advertised: []AdvertisedView{},
			LocalNonce: p.localNonce.String(), RemoteNonce: p.remoteNonce.String(),
			CreatedAt: c.timeOf(p.created), LastUsed: c.timeOf(p.lastUsed), IdleS: now.Sub(c.timeOf(p.lastUsed)).Seconds(),
		}
		if active != nil {
			v.ActiveLocal = active.loc.String()
		}
		for _, r := range p.remotes() {
			v.RemoteLocators = append(v.RemoteLocators, RemoteLocatorView{
				Locator: r.loc.String(), Preference: r.pref, State: r.state, LifetimeS: remaining(c.timeOf(r.expires), now),
			})
		}
		for _, e := range p.adv() {
			v.Advertised = append(v.Advertised, AdvertisedView{Locator: e.Locator.String(), Preference: e.Preference, LifetimeS: e.Lifetime})
		}
		s.Sessions = append(s.Sessions, v)
	}
	return s
}

// LocatorViews is Snapshot's Locators alone: `ilnpctl show locators` need not copy every
// session.
func (c *Cache) LocatorViews(now time.Time) []LocatorView {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.locatorViews(now)
}

func (c *Cache) locatorViews(now time.Time) []LocatorView {
	out := []LocatorView{}
	for _, l := range c.sortedLocals() {
		v := LocatorView{
			Locator: l.loc.String(), IfIndex: l.ifindex, State: l.state, Preference: l.pref,
			Deprecated: l.deprecated, LearnedAt: l.learned,
			ValidLifetimeS: remaining(l.validEnd, now), PreferredLifetimeS: remaining(l.preferEnd, now),
		}
		if l.router.IsValid() {
			v.Router = l.router.String()
		}
		out = append(out, v)
	}
	return out
}

// SessionInfo is one session as EachSession passes it: Snapshot's SessionView in plain
// values, no strings.
type SessionInfo struct {
	Peer          wire.NID
	SessionLocal  wire.ILV
	SessionRemote wire.ILV
	// ActiveLocal is the node's active locator (HasLocal false: none).
	ActiveLocal  wire.L64
	HasLocal     bool
	ActiveRemote wire.L64
	// RemoteLocators is valid only during the call.
	RemoteLocators []RemoteLocator
	LocalNonce     wire.Nonce
	RemoteNonce    wire.Nonce
	Created        time.Time
	LastUsed       time.Time
}

// EachSession calls fn for every session, ordered by peer NID, with the cache locked (fn must
// not call the cache): what Snapshot lists, without a copy of the table in strings, which at
// 100,000 sessions was some 500 bytes a session of transient heap for one `ilnpctl show
// sessions` (issue 28).
func (c *Cache) EachSession(fn func(SessionInfo)) {
	c.EachSessionOf(c.PeerNIDs(), fn)
}

// PeerNIDs lists the correspondents' NIDs in order.
func (c *Cache) PeerNIDs() []wire.NID {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]wire.NID, 0, len(c.peers))
	for nid := range c.peers {
		out = append(out, nid)
	}
	slices.Sort(out)
	return out
}

// EachSessionOf is EachSession for the sessions with nids (those still there), in their order:
// a long listing takes the cache a slice of PeerNIDs at a time, not for all of it at once.
func (c *Cache) EachSessionOf(nids []wire.NID, fn func(SessionInfo)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var info SessionInfo
	if l := c.activeLocal(); l != nil {
		info.ActiveLocal, info.HasLocal = l.loc, true
	}
	for _, nid := range nids {
		p := c.peers[nid]
		if p == nil {
			continue
		}
		info.Peer, info.SessionLocal, info.SessionRemote = p.nid(), *p.sessLocal, p.sessRemote
		info.ActiveRemote, info.LocalNonce, info.RemoteNonce = p.lastActive, p.localNonce, p.remoteNonce
		info.Created, info.LastUsed = c.timeOf(p.created), c.timeOf(p.lastUsed)
		info.RemoteLocators = info.RemoteLocators[:0]
		for _, r := range p.remotes() {
			info.RemoteLocators = append(info.RemoteLocators, RemoteLocator{Locator: r.loc, Preference: r.pref, Lifetime: r.lifetime, State: r.state})
		}
		fn(info)
	}
}
