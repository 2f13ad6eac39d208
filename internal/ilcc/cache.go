// Package ilcc is the ILNP Communication Cache (RFC 6741 s.5, thesis s.3.2.4): the node's own
// locators with their handoff states, and per correspondent the remote locator set, the
// nonces, the session-view addresses and the timers. It is a pure state machine: every
// operation takes the current time, changes the cache and returns Effects saying what the
// daemon must do (send LUs and ACKs, update datapath entries). It does no I/O.
//
// Handoff (thesis s.3.2.7, fig 3.12): whenever the local locator set changes, a named Policy
// ranks the locators, the first becomes Active, the others become Valid (soft mode) or Aged
// (hard mode), and every correspondent whose advertised set differs gets an LU listing all
// Active and Valid locators, the active one first with preference 0.
//
// Driving it (ilnpd): feed UpdateLocal/RemoveLocal/InterfaceDown/RouterGone from RAs and
// netlink, OpenSession/LearnRemoteNonce/Touch from the datapath's session events, ApplyLU
// with the nonce carried in the received LU's Nonce option, VerifyNonce before handing an
// LU-ACK to the lu.Engine, and LUGaveUp on the engine's GiveUp. Apply every returned Effects:
// Updates to lu.Engine.Send, Acks out on the wire, Bindings into the datapath (and
// lu.Engine.Redirect when a binding's RemoteLocator changed), Removed to the datapath and
// lu.Engine.Forget, Locals() into the datapath when LocalChanged. Call Tick at NextDeadline.
package ilcc

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"sync"
	"time"

	"ilnp/internal/lu"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// Config parameterises a Cache. Zero fields take the defaults below.
type Config struct {
	// NID is this node's identifier (for views; sessions carry their own local NID, which
	// may be an ephemeral one).
	NID wire.NID
	// Mode is the initial handoff mode; default Soft.
	Mode Mode
	// Policy is the initial handoff policy; default Newest.
	Policy Policy
	// IdleTimeout drops a correspondent unused for this long; default 30 min. Long, because
	// a dropped entry means a new nonce, which the correspondent would reject.
	IdleTimeout time.Duration
	// NonceSize is 4 (the thesis's 32-bit nonces) or 12 bytes (RFC 6744 s.2); default 4.
	NonceSize int
	// NewNonce generates local nonces; default wire.RandomNonce(NonceSize). Tests inject a
	// deterministic one.
	NewNonce func() (wire.Nonce, error)
	// LURetry is how long after an LU was given up the cache asks for it again; default 30 s.
	LURetry time.Duration
}

// Defaults for Config.
const (
	DefaultIdleTimeout = 30 * time.Minute
	DefaultNonceSize   = 4
	DefaultLURetry     = 30 * time.Second
)

// maxLULifetime is the largest Lifetime an LU entry can carry (16 bits of seconds).
const maxLULifetime = 0xffff

type local struct {
	loc         wire.L64
	ifindex     int
	router      netip.Addr
	pref        uint16
	state       State
	rank        int
	learned     time.Time
	validEnd    time.Time // zero: infinite
	preferEnd   time.Time // zero: infinite
	deprecated  bool
	lastRefresh time.Time
	down        bool // its paths stopped delivering (SetLocalDown)
	quality     Quality
}

type remote struct {
	loc      wire.L64
	expires  stamp // 0: no expiry
	pref     uint16
	lifetime uint16 // as advertised
	state    State
}

// stamp is a peer's time (issue 28: 8 bytes where a time.Time takes 24, five or more of them
// per session): nanoseconds from the cache's epoch, the first time it was given, shifted so
// that 0 means none. It keeps the monotonic clock reading of the times it came from.
type stamp int64

// stampOf is t as a stamp (c.mu held); the zero time is 0.
func (c *Cache) stampOf(t time.Time) stamp {
	if t.IsZero() {
		return 0
	}
	if c.epoch.IsZero() {
		c.epoch = t
	}
	d := stamp(t.Sub(c.epoch))
	if d >= 0 {
		d++
	}
	return d
}

// timeOf is the time s stands for; 0 is the zero time.
func (c *Cache) timeOf(s stamp) time.Time {
	switch {
	case s == 0:
		return time.Time{}
	case s > 0:
		s--
	}
	return c.epoch.Add(time.Duration(s))
}

// routerKey names a router by the link it advertises on: link-locals repeat across links.
type routerKey struct {
	ifindex int
	addr    netip.Addr
}

// Cache is the ILCC. Its methods are safe for concurrent use.
type Cache struct {
	mu     sync.Mutex
	cfg    Config
	locals map[wire.L64]*local
	peers  map[wire.NID]*peer
	// routers holds when each advertising router's Router Lifetime (RFC 4861 s.4.2) runs
	// out unless another RA refreshes it.
	routers map[routerKey]time.Time
	// due queues the peers by deadline for NextDeadline, which the loop asks after every
	// event, and for Tick: a pass over every peer there made each event cost O(sessions)
	// (issue 28). A change to one peer queues its deadline if that came earlier
	// (peerChanged); any other change sets peersRescan (the rescan queues every peer afresh,
	// a share per NextDeadline and per Tick). A queued entry whose peer has gone or whose
	// deadline moved later is dropped or moved when it comes to the top. fullTick makes the
	// next Tick pass over every peer (the tests' whole pass); a local locator that Tick
	// expires or deprecates takes that pass too.
	due         peerHeap
	peersRescan bool
	fullTick    bool
	// rescan is the pass that queues every peer's deadline after peersRescan, rescanStep
	// peers per NextDeadline (issue 28: queuing 100,000 at once held the loop some 56 ms),
	// nil when none is open; rescanAgain: another change came during it, so another pass
	// follows. While one is open (Rescanning) a peer it has not reached may be due before
	// NextDeadline says.
	rescan      *rescanPass
	rescanAgain bool
	// touched counts the peers whose deadline was computed for the queue (tests: the work
	// a call does).
	touched int
	// lastBoundLocal is the local locator of the last binding made, which the next ones share.
	lastBoundLocal *boundLocal
	// lastLocalView is the session view of the last peer opened, which the next ones share.
	lastLocalView *wire.ILV
	// epoch is what the peers' stamps count from.
	epoch time.Time
	// sharedAdv is the advertisement peers were last told or opened with (shared).
	sharedAdv *told
	// synced is what the last syncPeers read of the local locators; syncWalked counts the
	// peers syncPeers passed over (tests: the work a call does).
	synced     syncedLocals
	syncWalked int
}

// shared returns an advertisement equal to adv that the peers told the same share (c.mu held):
// a handoff tells every peer the same set, and a copy each in advertised and in the replay
// history was two allocations a peer (issue 28). A peer's advertisements are never changed
// in place.
func (c *Cache) shared(adv []wire.LocatorEntry) *told {
	if c.sharedAdv == nil || !slices.Equal(adv, c.sharedAdv.set) {
		c.sharedAdv = &told{set: slices.Clone(adv)}
	}
	return c.sharedAdv
}

// lock takes the cache for a change that may move any peer's deadline.
func (c *Cache) lock() {
	c.mu.Lock()
	c.global()
}

// global notes a change that may move any peer's deadline (c.mu held): the rescan finds
// them, in shares. A change to one peer takes c.mu and calls peerChanged instead: a rescan
// per such event made it cost O(sessions) (issue 28). It made the next Tick a full pass over
// every peer too (~75 ms at 100,000 sessions); Tick now acts on the peers queued due, the
// rescan's shares queuing the others, as NextDeadline sees them.
func (c *Cache) global() {
	c.peersRescan = true
}

// peerChanged queues the deadline of the peer nid, which alone changed (c.mu held).
func (c *Cache) peerChanged(nid wire.NID) {
	if p := c.peers[nid]; p != nil {
		c.queuePeer(p)
	}
}

// queuePeer queues p's deadline unless an earlier one is queued for it (c.mu held).
func (c *Cache) queuePeer(p *peer) {
	if t := c.stampOf(c.peerDeadline(p)); t != 0 && (p.queuedAt == 0 || t < p.queuedAt) {
		heap.Push(&c.due, dueEntry{at: t, nid: p.nid()})
		p.queuedAt = t
	}
}

// rescanStep is how many peers a rescan queues per NextDeadline: some 1 ms of the loop (a
// peer's deadline and its push cost ~0.5 us at 100,000 peers).
const rescanStep = 2000

// rescanPass walks c.peers a share at a time: a coroutine ranging over the map, resumed only
// with c.mu held, so the map changes between shares as it would in the body of a range loop
// (a peer removed before it is reached is not visited, one added may be; peerChanged queues
// those).
type rescanPass struct {
	next func() (int, bool)
	stop func()
}

// beginRescan opens a pass that queues every peer's deadline (c.mu held). The queue keeps its
// entries (a stale one is dropped or moved when it comes to the top) unless stale ones have
// piled up: then it starts empty and each peer is queued afresh when the pass reaches it.
func (c *Cache) beginRescan() {
	fresh := len(c.due) > 2*len(c.peers)+rescanStep
	if fresh {
		c.due = c.due[:0]
	}
	next, stop := iter.Pull(func(yield func(int) bool) {
		n := 0
		for _, p := range c.peers {
			if fresh {
				p.queuedAt = 0
			}
			c.queuePeer(p)
			c.touched++
			if n++; n == rescanStep {
				if !yield(n) {
					return
				}
				n = 0
			}
		}
	})
	c.rescan = &rescanPass{next: next, stop: stop}
}

// stepRescan queues the next rescanStep peers' deadlines of the open pass; the pass that ends
// starts the next one if a change came during it (c.mu held).
func (c *Cache) stepRescan() {
	if _, more := c.rescan.next(); more {
		return
	}
	c.rescan.stop()
	c.rescan = nil
	if c.rescanAgain {
		c.rescanAgain = false
		c.beginRescan()
	}
}

// requeueAll queues every peer's deadline at once (c.mu held): a rescan run to its end.
func (c *Cache) requeueAll() {
	c.peersRescan = false
	if c.rescan == nil {
		c.beginRescan()
	}
	c.rescanAgain = false
	for c.rescan != nil {
		c.stepRescan()
	}
}

// Rescanning reports whether a rescan of the peers' deadlines is open: the caller calls
// NextDeadline again soon (a turn of its loop), each call queuing the next share, until it
// ends. Meanwhile NextDeadline may be later than a peer not reached yet: a change to every
// peer's deadline (a locator's lifetimes, the idle timeout) is applied within the rescan's
// turns.
func (c *Cache) Rescanning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rescan != nil || c.peersRescan
}

// peersNext is the earliest peer deadline queued (c.mu held), after the next share of an open
// rescan.
func (c *Cache) peersNext() (time.Time, bool) {
	if c.peersRescan {
		c.peersRescan = false
		if c.rescan == nil {
			c.beginRescan()
		} else {
			c.rescanAgain = true
		}
	}
	if c.rescan != nil {
		c.stepRescan()
	}
	for len(c.due) > 0 {
		top := c.due[0]
		p := c.peers[top.nid]
		if p == nil || top.at != p.queuedAt {
			heap.Pop(&c.due) // the peer is gone, or an earlier entry of it came first
			continue
		}
		if t := c.stampOf(c.peerDeadline(p)); t != top.at {
			heap.Pop(&c.due)
			p.queuedAt = 0
			c.queuePeer(p)
			continue
		}
		return c.timeOf(top.at), true
	}
	return time.Time{}, false
}

// popDue takes the peers whose deadline has come at now off the queue, ordered by NID (c.mu
// held); Tick handles them and queues them again.
func (c *Cache) popDue(now time.Time) []*peer {
	var out []*peer
	for len(c.due) > 0 && !now.Before(c.timeOf(c.due[0].at)) {
		e := heap.Pop(&c.due).(dueEntry)
		p := c.peers[e.nid]
		if p == nil || e.at != p.queuedAt {
			continue
		}
		p.queuedAt = 0
		if t := c.peerDeadline(p); !t.IsZero() && !now.Before(t) {
			out = append(out, p)
		} else {
			c.queuePeer(p)
		}
	}
	slices.SortFunc(out, func(a, b *peer) int { return cmp.Compare(a.nid(), b.nid()) })
	return out
}

type dueEntry struct {
	at  stamp
	nid wire.NID
}

// peerHeap is a container/heap of peer deadlines, earliest first.
type peerHeap []dueEntry

func (h peerHeap) Len() int           { return len(h) }
func (h peerHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h peerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *peerHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *peerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// peerDeadline is the earliest time Tick has something to do for p (zero: none).
func (c *Cache) peerDeadline(p *peer) (next time.Time) {
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	consider(c.timeOf(p.lastUsed).Add(c.cfg.IdleTimeout))
	for _, r := range p.remotes() {
		consider(c.timeOf(r.expires))
	}
	consider(c.timeOf(p.retryAt()))
	consider(c.refreshAt(p))
	return next
}

// New returns an empty cache.
func New(cfg Config) (*Cache, error) {
	if cfg.Mode == 0 {
		cfg.Mode = Soft
	}
	if cfg.Policy == nil {
		cfg.Policy = Newest{}
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.NonceSize == 0 {
		cfg.NonceSize = DefaultNonceSize
	}
	if cfg.LURetry == 0 {
		cfg.LURetry = DefaultLURetry
	}
	switch {
	case cfg.Mode != Soft && cfg.Mode != Hard:
		return nil, fmt.Errorf("ilcc config: handoff mode %d: want soft or hard", cfg.Mode)
	case cfg.IdleTimeout < time.Second:
		return nil, fmt.Errorf("ilcc config: idle timeout %v: want at least 1s", cfg.IdleTimeout)
	case cfg.NonceSize != 4 && cfg.NonceSize != 12:
		return nil, fmt.Errorf("ilcc config: nonce size %d: want 4 or 12 (RFC 6744 s.2)", cfg.NonceSize)
	case cfg.LURetry < time.Second:
		return nil, fmt.Errorf("ilcc config: LU retry %v: want at least 1s", cfg.LURetry)
	}
	if cfg.NewNonce == nil {
		size := cfg.NonceSize
		cfg.NewNonce = func() (wire.Nonce, error) { return wire.RandomNonce(size) }
	}
	return &Cache{cfg: cfg, locals: map[wire.L64]*local{}, peers: map[wire.NID]*peer{}, routers: map[routerKey]time.Time{}}, nil
}

// Mode returns the handoff mode.
func (c *Cache) Mode() Mode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.Mode
}

// Policy returns the handoff policy.
func (c *Cache) Policy() Policy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.Policy
}

// SetMode switches the handoff mode at run time: in soft mode the non-active locators become
// Valid again, in hard mode they are Aged; correspondents are told the new set.
func (c *Cache) SetMode(m Mode, now time.Time) (Effects, error) {
	if m != Soft && m != Hard {
		return Effects{}, fmt.Errorf("handoff mode %d: want soft or hard", m)
	}
	c.lock()
	defer c.mu.Unlock()
	var eff Effects
	if c.cfg.Mode == m {
		return eff, nil
	}
	eff.Events = append(eff.Events, Event{Kind: timeline.HandoffMode, Detail: c.cfg.Mode.String() + " -> " + m.String()})
	c.cfg.Mode = m
	c.reselect(now, &eff)
	return eff, nil
}

// SetIdleTimeout changes after how long an unused correspondent is forgotten (at least 1 s);
// the next Tick applies it to every session.
func (c *Cache) SetIdleTimeout(d time.Duration) error {
	if d < time.Second {
		return fmt.Errorf("idle timeout %v: want at least 1s", d)
	}
	c.lock()
	defer c.mu.Unlock()
	c.cfg.IdleTimeout = d
	return nil
}

// SetPolicy replaces the handoff policy at run time and re-ranks the locators.
func (c *Cache) SetPolicy(p Policy, now time.Time) (Effects, error) {
	if p == nil {
		return Effects{}, errors.New("handoff policy: nil")
	}
	c.lock()
	defer c.mu.Unlock()
	var eff Effects
	eff.Events = append(eff.Events, Event{Kind: timeline.HandoffMode, Detail: "policy " + c.cfg.Policy.Name() + " -> " + p.Name()})
	c.cfg.Policy = p
	c.reselect(now, &eff)
	return eff, nil
}

// UpdateLocal adds or refreshes a local locator (an RA's prefix, or a static one). A valid
// lifetime of 0 or less withdraws it. A refresh keeps the locator's age, so it does not look
// new to the Newest policy.
func (c *Cache) UpdateLocal(u LocalUpdate, now time.Time) (Effects, error) {
	if u.Locator == 0 {
		return Effects{}, fmt.Errorf("local locator %v: %w (all-zero)", u.Locator, ErrBadLocator)
	}
	if u.IfIndex <= 0 {
		return Effects{}, fmt.Errorf("local locator %v: %w (interface index %d)", u.Locator, ErrBadLocator, u.IfIndex)
	}
	if u.ValidLifetime <= 0 {
		return c.RemoveLocal(u.Locator, "valid lifetime 0", now), nil
	}
	// RFC 4862 s.5.5.3 (c) ignores an option whose preferred lifetime exceeds the valid one;
	// clamping keeps the locator (the RA did announce it) and stays on the safe side.
	u.PreferredLifetime = min(u.PreferredLifetime, u.ValidLifetime)
	c.mu.Lock()
	defer c.mu.Unlock()
	var eff Effects
	l := c.locals[u.Locator]
	known := l != nil
	if l == nil {
		// Unranked yet: it sorts after the ranked ones until the policy has placed it.
		l = &local{loc: u.Locator, learned: now, rank: len(c.locals)}
		c.locals[u.Locator] = l
	} else if l.ifindex != u.IfIndex || l.router != u.Router || l.pref != u.Preference {
		eff.LocalChanged = true
	}
	l.ifindex, l.router, l.pref, l.lastRefresh = u.IfIndex, u.Router, u.Preference, now
	l.validEnd = deadline(now, u.ValidLifetime)
	l.preferEnd = deadline(now, u.PreferredLifetime)
	wasDeprecated := l.deprecated
	l.deprecated = u.PreferredLifetime <= 0
	if wasDeprecated != l.deprecated {
		eff.LocalChanged = true
	}
	if known && !eff.LocalChanged {
		// A refresh (an RA renewing the lifetimes): the ranking's inputs are as they were, and
		// a peer's deadline moves only through refreshAt, which the rescan (in steps) finds; a
		// full Tick per RA walked every peer (issue 28: ~75 ms at 100,000 sessions).
		c.peersRescan = true
	} else {
		c.global()
	}
	c.reselect(now, &eff)
	return eff, nil
}

func deadline(now time.Time, d time.Duration) time.Time {
	if d == Infinite {
		return time.Time{}
	}
	if d < 0 {
		d = 0
	}
	return now.Add(d)
}

// RemoveLocal drops a local locator (lifetime out, address removed); reason goes into the
// event. Removing an unknown locator changes nothing.
func (c *Cache) RemoveLocal(loc wire.L64, reason string, now time.Time) Effects {
	c.lock()
	defer c.mu.Unlock()
	var eff Effects
	if c.removeLocal(loc, reason, &eff) {
		c.reselect(now, &eff)
	}
	return eff
}

// InterfaceDown drops every locator of the interface and forgets its routers.
func (c *Cache) InterfaceDown(ifindex int, now time.Time) Effects {
	return c.removeWhere(func(l *local) bool { return l.ifindex == ifindex },
		func(r routerKey) bool { return r.ifindex == ifindex }, "interface down", now)
}

// RouterSeen records a Router Advertisement's Router Lifetime. A router that says 0, or that
// is not heard from again before its lifetime runs out (Tick), has disappeared: the locators
// learned from it have no next hop any more, whatever their prefix lifetimes say.
func (c *Cache) RouterSeen(ifindex int, router netip.Addr, lifetime time.Duration, now time.Time) Effects {
	if lifetime <= 0 {
		return c.RouterGone(ifindex, router, now)
	}
	// No peer's deadline depends on a router's (NextDeadline and Tick look at the routers
	// themselves): every RA made the next Tick a full one (issue 28).
	c.mu.Lock()
	defer c.mu.Unlock()
	c.routers[routerKey{ifindex, router}] = now.Add(lifetime)
	return Effects{}
}

// RouterGone drops the locators learned from router on the interface (router lifetime 0, or
// the router stopped answering).
func (c *Cache) RouterGone(ifindex int, router netip.Addr, now time.Time) Effects {
	gone := routerKey{ifindex, router}
	return c.removeWhere(func(l *local) bool { return l.ifindex == ifindex && l.router == router },
		func(r routerKey) bool { return r == gone }, "router gone", now)
}

// removeWhere drops the local locators that match and forgets the routers that forget matches.
func (c *Cache) removeWhere(match func(*local) bool, forget func(routerKey) bool, reason string, now time.Time) Effects {
	c.lock()
	defer c.mu.Unlock()
	for r := range c.routers {
		if forget(r) {
			delete(c.routers, r)
		}
	}
	var eff Effects
	removed := false
	for _, l := range c.sortedLocals() {
		if match(l) {
			removed = c.removeLocal(l.loc, reason, &eff) || removed
		}
	}
	if removed {
		c.reselect(now, &eff)
	}
	return eff
}

func (c *Cache) removeLocal(loc wire.L64, reason string, eff *Effects) bool {
	l := c.locals[loc]
	if l == nil {
		return false
	}
	delete(c.locals, loc)
	eff.LocalChanged = true
	eff.Events = append(eff.Events, Event{Kind: timeline.LocatorRemoved, Locator: loc, From: l.state, To: Expired, Detail: reason})
	return true
}

func (c *Cache) sortedLocals() []*local {
	out := make([]*local, 0, len(c.locals))
	for _, l := range c.locals {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *local) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.loc, b.loc))
	})
	return out
}

func (c *Cache) sortedPeers() []*peer {
	out := make([]*peer, 0, len(c.peers))
	for _, p := range c.peers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *peer) int { return cmp.Compare(a.nid(), b.nid()) })
	return out
}

// reselect ranks the local locators with the policy, sets their states for the mode, then
// brings every correspondent up to date (bindings and LUs) unless what that reads of the
// locators is as it was.
func (c *Cache) reselect(now time.Time, eff *Effects) {
	c.rankLocals(eff)
	if c.peersInSync(now) {
		return
	}
	c.syncPeers(now, eff)
}

// rankLocals ranks the local locators with the policy and sets their states for the mode.
func (c *Cache) rankLocals(eff *Effects) {
	ls := c.sortedLocals()
	if len(ls) > 0 {
		cands := make([]Candidate, len(ls))
		for i, l := range ls {
			cands[i] = Candidate{
				Locator: l.loc, IfIndex: l.ifindex, Preference: l.pref, Learned: l.learned,
				Deprecated: l.deprecated, Current: l.state == Active, Quality: l.quality,
			}
		}
		ranked := c.demoteDown(rank(c.cfg.Policy, cands))
		for i, cand := range ranked {
			l := c.locals[cand.Locator]
			l.rank = i
			to := Valid
			switch {
			case i == 0:
				to = Active
			case c.cfg.Mode == Hard && !dualStackBeside(ranked[0], cand):
				to = Aged
			}
			if l.state == to {
				continue
			}
			eff.LocalChanged = true
			switch {
			case l.state == 0:
				eff.Events = append(eff.Events, Event{Kind: timeline.LocatorAdded, Locator: l.loc, To: to})
			case to == Active:
				eff.Events = append(eff.Events, Event{Kind: timeline.ActiveLocator, Locator: l.loc, From: l.state, To: to})
			default:
				eff.Events = append(eff.Events, Event{Kind: timeline.LocatorState, Locator: l.loc, From: l.state, To: to})
			}
			l.state = to
		}
	}
}

// syncedLocals is what syncPeers read of the local locators the last time it passed over every
// peer: the advertised set (lifetimes zeroed: sameSet ignores them), the families reached, the
// active local locator. Every change to one peer brings that peer up to date on its own
// (syncBinding, emitLU), so while these are unchanged a pass over every peer finds nothing to
// do (issue 28: an RA refresh passed over every peer, ~30 ms at 100,000 sessions).
type syncedLocals struct {
	adv    []wire.LocatorEntry
	reach  reach
	active boundLocal
	set    bool
}

func (c *Cache) syncedNow(now time.Time) syncedLocals {
	s := syncedLocals{adv: c.advertisement(now), reach: c.reach(), set: true}
	for i := range s.adv {
		s.adv[i].Lifetime = 0
	}
	if l := c.activeLocal(); l != nil {
		s.active = boundLocal{loc: l.loc, ifindex: l.ifindex, router: l.router}
	}
	return s
}

// peersInSync says whether syncPeers would change nothing: what it reads of the local
// locators is what the last pass over every peer read (c.mu held).
func (c *Cache) peersInSync(now time.Time) bool {
	s := c.syncedNow(now)
	return c.synced.set && s.reach == c.synced.reach && s.active == c.synced.active && slices.Equal(s.adv, c.synced.adv)
}

// advertisement lists the usable local locators, best first, preference = rank, lifetime =
// remaining valid lifetime in whole seconds within [1, 0xffff].
func (c *Cache) advertisement(now time.Time) []wire.LocatorEntry {
	var out []wire.LocatorEntry
	for _, l := range c.sortedLocals() {
		if !l.state.Usable() {
			continue
		}
		out = append(out, wire.LocatorEntry{Locator: l.loc, Preference: uint16(min(len(out), 0xffff)), Lifetime: luLifetime(l, now)})
	}
	return out
}

func luLifetime(l *local, now time.Time) uint16 {
	if l.validEnd.IsZero() {
		return maxLULifetime
	}
	secs := int64(l.validEnd.Sub(now) / time.Second)
	return uint16(min(max(secs, 1), maxLULifetime))
}

func (c *Cache) activeLocal() *local {
	for _, l := range c.locals {
		if l.state == Active {
			return l
		}
	}
	return nil
}

// sameSet compares what a correspondent would do with two advertisements: the locators and
// their preferences. Lifetimes change every second and are refreshed separately.
func sameSet(a, b []wire.LocatorEntry) bool {
	return slices.EqualFunc(a, b, func(x, y wire.LocatorEntry) bool {
		return x.Locator == y.Locator && x.Preference == y.Preference
	})
}

func (c *Cache) syncPeers(now time.Time, eff *Effects) {
	c.synced = c.syncedNow(now)
	adv := c.advertisement(now)
	rc := c.reach()
	for _, p := range c.sortedPeers() {
		c.syncWalked++
		// The active local locator's family may have changed (IPv6 to IPv4 behind a NAT).
		if p.selectRemote(rc) {
			eff.Events = append(eff.Events, Event{Kind: timeline.ActiveLocator, Peer: p.nid(), Locator: p.lastActive, To: Active, Detail: "remote, local family"})
		}
		c.syncBinding(p, eff)
		if len(adv) > 0 && !sameSet(adv, p.adv()) {
			c.emitLU(p, adv, now, eff)
		}
	}
}

// boundLocal is a Binding's local locator; the peers bound to the same one share it.
type boundLocal struct {
	loc     wire.L64
	ifindex int
	router  netip.Addr
}

// localView is v, shared with the peers opened with an equal one (c.mu held).
func (c *Cache) localView(v wire.ILV) *wire.ILV {
	if c.lastLocalView == nil || *c.lastLocalView != v {
		c.lastLocalView = &v
	}
	return c.lastLocalView
}

// boundLocalOf is b's local locator, shared with the peers bound to an equal one (c.mu held).
func (c *Cache) boundLocalOf(b Binding) *boundLocal {
	if !b.HasLocal {
		return nil
	}
	l := boundLocal{loc: b.LocalLocator, ifindex: b.LocalIfIndex, router: b.LocalRouter}
	if c.lastBoundLocal == nil || *c.lastBoundLocal != l {
		c.lastBoundLocal = &l
	}
	return c.lastBoundLocal
}

// sameBinding says whether b, made for p, programs the datapath as p's last binding did.
func sameBinding(p *peer, b Binding) bool {
	st := p.bound
	if !p.boundSet || p.nonceStale || p.boundActive() != b.RemoteLocator ||
		(st.local != nil) != b.HasLocal || !slices.Equal(p.boundRemotes(), b.RemoteLocators) {
		return false
	}
	return st.local == nil || (st.local.loc == b.LocalLocator && st.local.ifindex == b.LocalIfIndex && st.local.router == b.LocalRouter)
}

func (c *Cache) syncBinding(p *peer, eff *Effects) {
	b := c.bindingFor(p)
	if sameBinding(p, b) {
		return
	}
	if p.boundSet {
		b.Was = p.boundActive()
	}
	p.setBound(b, c.boundLocalOf(b))
	eff.Bindings = append(eff.Bindings, b)
}

func (c *Cache) bindingFor(p *peer) Binding {
	b := Binding{
		Peer: p.nid(), SessionLocal: *p.sessLocal, SessionRemote: p.sessRemote,
		RemoteLocator: p.lastActive, LocalNonce: p.localNonce, RemoteNonce: p.remoteNonce,
	}
	if len(p.remotes()) > 0 {
		b.RemoteLocators = make([]RemoteLocator, len(p.remotes()))
		for i, r := range p.remotes() {
			b.RemoteLocators[i] = RemoteLocator{Locator: r.loc, Preference: r.pref, Lifetime: r.lifetime, State: r.state}
		}
	}
	if l := c.activeLocal(); l != nil {
		b.LocalLocator, b.LocalIfIndex, b.LocalRouter, b.HasLocal = l.loc, l.ifindex, l.router, true
	}
	return b
}

func (c *Cache) emitLU(p *peer, adv []wire.LocatorEntry, now time.Time, eff *Effects) {
	// The correspondent drops a body it applied before a newer one as a replay (luguard):
	// moving back to an earlier set sends it with lifetimes a second shorter.
	if d, ok := p.distinct(adv); ok {
		adv = d
	}
	own := c.shared(adv)
	p.sentLU(own)
	src := c.locals[adv[0].Locator]
	eff.Updates = append(eff.Updates, lu.Message{
		Peer:    p.nid(),
		Source:  wire.ILV{Locator: src.loc, NID: p.sessLocal.NID},
		IfIndex: src.ifindex,
		Dest:    wire.ILV{Locator: p.lastActive, NID: p.nid()},
		Nonce:   p.localNonce,
		Update:  wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: slices.Clone(adv)},
	})
	p.advertisedAt = c.stampOf(now)
	p.setRetryAt(0)
	p.announced = true
}

// OpenSession records a session with a correspondent (keyed by its NID) and takes the local
// nonce from s or generates it. Opening a session that exists only refreshes it (and learns
// the remote nonce if it was unknown; the local nonce, once chosen, stays). The correspondent is assumed to know the locators usable now (it sees
// them on our packets); LUs follow when they change.
func (c *Cache) OpenSession(s Session, now time.Time) (Effects, error) {
	if s.Remote.NID == 0 || s.Local.NID == 0 || s.Remote.Locator == 0 {
		return Effects{}, fmt.Errorf("session %v -> %v: %w (zero NID or locator)", s.Local, s.Remote, ErrBadSession)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.peerChanged(s.Remote.NID)
	var eff Effects
	if p := c.peers[s.Remote.NID]; p != nil {
		c.touch(p, now)
		if p.remoteNonce.IsZero() && !s.RemoteNonce.IsZero() {
			p.setRemoteNonce(s.RemoteNonce)
			c.syncBinding(p, &eff)
			c.nonceLearned(p, now, &eff)
		}
		return eff, nil
	}
	nonce := s.LocalNonce
	if nonce.IsZero() {
		var err error
		if nonce, err = c.cfg.NewNonce(); err != nil {
			return Effects{}, fmt.Errorf("session with %v: local nonce: %w", s.Remote.NID, err)
		}
	}
	if nonce.IsZero() {
		return Effects{}, fmt.Errorf("session with %v: local nonce generator returned no nonce", s.Remote.NID)
	}
	p := &peer{
		sessLocal: c.localView(s.Local), sessRemote: s.Remote,
		localNonce: nonce, remoteNonce: s.RemoteNonce, created: c.stampOf(now), lastUsed: c.stampOf(now),
	}
	// The session-view locator is the one the application chose: it starts active, so it
	// gets the best preference of the known set and comes first among equals.
	best := uint16(0xffff)
	for _, e := range s.RemoteLocators {
		best = min(best, e.Preference)
	}
	// A lone locator stays in p.one: the set is allocated only when it grows.
	set := append(p.one[:0], remote{loc: s.Remote.Locator, pref: min(best, 0xffff)})
	for _, e := range s.RemoteLocators {
		if e.Locator == 0 || e.Locator == s.Remote.Locator {
			continue
		}
		set = append(set, remote{loc: e.Locator, pref: e.Preference, lifetime: e.Lifetime, expires: c.stampOf(remoteExpiry(now, e.Lifetime))})
	}
	p.setRemotes(set)
	p.selectRemote(c.reach())
	adv := c.advertisement(now)
	p.advertised, p.advertisedAt = c.shared(adv), c.stampOf(now)
	c.peers[p.nid()] = p
	eff.Events = append(eff.Events, Event{Kind: timeline.SessionNew, Peer: p.nid(), Locator: p.lastActive})
	c.syncBinding(p, &eff)
	if s.Initiator && unseenFamily(adv, s.Local.Locator) {
		if p.remoteNonce.IsZero() {
			p.announceOnNonce = true
		} else {
			c.emitLU(p, adv, now, &eff)
		}
	}
	return eff, nil
}

// nonceLearned sends the announcement OpenSession put off until the peer's nonce was known.
func (c *Cache) nonceLearned(p *peer, now time.Time, eff *Effects) {
	if !p.announceOnNonce {
		return
	}
	p.announceOnNonce = false
	if adv := c.advertisement(now); len(adv) > 0 && unseenFamily(adv, p.sessLocal.Locator) {
		c.emitLU(p, adv, now, eff)
	}
}

// remoteExpiry: an LU lifetime of 0 is taken as "no stated lifetime" rather than "already
// expired", since the sender listed the locator as usable.
func remoteExpiry(now time.Time, lifetime uint16) time.Time {
	if lifetime == 0 {
		return time.Time{}
	}
	return now.Add(time.Duration(lifetime) * time.Second)
}

// selectRemote makes the most preferred unexpired remote locator this node can reach Active
// (first listed wins a tie; reach, family.go); when it can reach none, the most preferred of
// all. It reports whether the active locator changed.
func (p *peer) selectRemote(rc reach) bool {
	rs := p.remotes()
	best, bestOK := -1, false
	for i, r := range rs {
		if r.state == Expired {
			continue
		}
		ok := rc.can(r.loc)
		if best < 0 || (ok && !bestOK) || (ok == bestOK && p.better(r, rs[best])) {
			best, bestOK = i, ok
		}
	}
	for i := range rs {
		if rs[i].state == Expired {
			continue
		}
		rs[i].state = Valid
		if i == best {
			rs[i].state = Active
		}
	}
	if best < 0 || rs[best].loc == p.lastActive {
		return false
	}
	p.lastActive = rs[best].loc
	return true
}

// CloseSession forgets a correspondent.
func (c *Cache) CloseSession(nid wire.NID, reason string) Effects {
	c.mu.Lock()
	defer c.mu.Unlock()
	var eff Effects
	if _, ok := c.peers[nid]; ok {
		delete(c.peers, nid)
		eff.Removed = append(eff.Removed, nid)
		eff.Events = append(eff.Events, Event{Kind: timeline.SessionExpired, Peer: nid, Detail: reason})
	}
	return eff
}

// Touch records that the session with nid carried traffic at now (keeps it from idling out).
// It reports whether the correspondent is known.
func (c *Cache) Touch(nid wire.NID, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.peerChanged(nid)
	p := c.peers[nid]
	if p == nil {
		return false
	}
	c.touch(p, now)
	return true
}

func (c *Cache) touch(p *peer, now time.Time) {
	if t := c.stampOf(now); t > p.lastUsed {
		p.lastUsed = t
	}
}

// LearnRemoteNonce records the correspondent's nonce from its first packet (thesis s.3.2.4).
// A different nonce for a known one is rejected: that packet is not from the session. The one
// exception is this host's own nonce: a correspondent with one nonce for both directions
// (FreeBSD ILNP) switches to it after opening the session, and the datapath, having checked
// the packet, switched the session too (bpf/lib/dialect.h).
func (c *Cache) LearnRemoteNonce(nid wire.NID, nonce wire.Nonce, now time.Time) (Effects, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.peerChanged(nid)
	var eff Effects
	p := c.peers[nid]
	switch {
	case p == nil:
		return eff, &PeerError{Peer: nid, Op: "nonce", Err: ErrUnknownPeer}
	case nonce.IsZero():
		return eff, &PeerError{Peer: nid, Op: "nonce", Err: ErrMissingNonce}
	case p.remoteNonce.IsZero(), nonce == p.localNonce:
		p.setRemoteNonce(nonce)
	case p.remoteNonce != nonce:
		return eff, &PeerError{Peer: nid, Op: "nonce", Err: ErrNonceMismatch}
	}
	c.touch(p, now)
	c.syncBinding(p, &eff)
	c.nonceLearned(p, now, &eff)
	return eff, nil
}

// VerifyNonce checks a nonce carried by a packet from nid (an LU-ACK, say) against the
// session's remote nonce without changing anything. The errors are ApplyLU's.
func (c *Cache) VerifyNonce(nid wire.NID, nonce wire.Nonce) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := checkNonce(c.peers[nid], nonce); err != nil {
		return &PeerError{Peer: nid, Op: "nonce", Err: err}
	}
	return nil
}

// ApplyLU processes a Locator Update advertisement from correspondent nid carrying nonce. If
// the nonce is the session's, the correspondent's locator set is replaced by the LU's (an LU
// lists all the sender's valid locators, RFC 6743), the most preferred one becomes active and
// an ACK with the identical body is returned; applying the same LU again changes nothing but
// is acknowledged again. Otherwise the LU is rejected with a *PeerError (see IsSecurityEvent)
// and nothing changes.
func (c *Cache) ApplyLU(nid wire.NID, nonce wire.Nonce, upd wire.LocatorUpdate, now time.Time) (Effects, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.peerChanged(nid)
	var eff Effects
	fail := func(err error) (Effects, error) { return Effects{}, &PeerError{Peer: nid, Op: "LU", Err: err} }
	p := c.peers[nid]
	if upd.Op != wire.OpAdvertisement {
		return fail(ErrNotAdvertisement)
	}
	if err := checkNonce(p, nonce); err != nil {
		return fail(err)
	}
	var set []remote
	seen := map[wire.L64]bool{}
	for _, e := range upd.Locators {
		if e.Locator == 0 || seen[e.Locator] {
			continue
		}
		seen[e.Locator] = true
		set = append(set, remote{loc: e.Locator, pref: e.Preference, lifetime: e.Lifetime, expires: c.stampOf(remoteExpiry(now, e.Lifetime))})
	}
	if len(set) == 0 {
		return fail(ErrNoLocators)
	}
	before := p.lastActive
	p.setRemotes(set)
	c.touch(p, now)
	p.selectRemote(c.reach())
	eff.Events = append(eff.Events, Event{Kind: timeline.LUReceived, Peer: nid, Locator: p.lastActive, Detail: fmt.Sprintf("%d locators", len(set))})
	if p.lastActive != before {
		eff.Events = append(eff.Events, Event{Kind: timeline.ActiveLocator, Peer: nid, Locator: p.lastActive, To: Active, Detail: "remote"})
	}
	c.syncBinding(p, &eff)
	src := wire.ILV{Locator: p.sessLocal.Locator, NID: p.sessLocal.NID}
	ifindex := 0
	if l := c.activeLocal(); l != nil {
		src.Locator, ifindex = l.loc, l.ifindex
	}
	eff.Acks = append(eff.Acks, Ack{Peer: nid, Source: src, IfIndex: ifindex, Nonce: p.localNonce, Update: upd.Ack()})
	return eff, nil
}

// checkNonce compares the nonce a packet carried with the session's remote nonce.
func checkNonce(p *peer, nonce wire.Nonce) error {
	switch {
	case p == nil:
		return ErrUnknownPeer
	case nonce.IsZero():
		return ErrMissingNonce
	case p.remoteNonce.IsZero():
		return ErrNoRemoteNonce
	case nonce != p.remoteNonce:
		return ErrNonceMismatch
	}
	return nil
}

// LUGaveUp tells the cache that the LU engine gave up on nid: the current set is offered
// again after Config.LURetry (by Tick), unless a change sends a newer LU first.
func (c *Cache) LUGaveUp(nid wire.NID, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.peerChanged(nid)
	if p := c.peers[nid]; p != nil {
		p.setRetryAt(c.stampOf(now.Add(c.cfg.LURetry)))
	}
}

// Tick applies every timer due at now: router lifetimes and local valid lifetimes (locator
// removed) and preferred lifetimes (deprecated, re-ranked), remote locator lifetimes, idle
// sessions, LU retries after a give-up, and LU refreshes so that correspondents never see an
// advertised lifetime run out while the locator is still valid here.
func (c *Cache) Tick(now time.Time) Effects {
	c.mu.Lock()
	defer c.mu.Unlock()
	var eff Effects
	changed := false
	for _, l := range c.sortedLocals() {
		end, heard := c.routers[routerKey{l.ifindex, l.router}]
		switch {
		case heard && !now.Before(end):
			changed = c.removeLocal(l.loc, "router lifetime expired", &eff) || changed
		case !l.validEnd.IsZero() && !now.Before(l.validEnd):
			changed = c.removeLocal(l.loc, "valid lifetime expired", &eff) || changed
		case !l.deprecated && !l.preferEnd.IsZero() && !now.Before(l.preferEnd):
			l.deprecated, changed, eff.LocalChanged = true, true, true
			eff.Events = append(eff.Events, Event{Kind: timeline.LocatorState, Locator: l.loc, From: l.state, To: l.state, Detail: "deprecated"})
		}
	}
	for k, end := range c.routers {
		if !now.Before(end) {
			delete(c.routers, k)
		}
	}
	if !changed && !c.fullTick {
		if c.peersRescan || c.rescan != nil {
			c.peersNext() // the open rescan's next share, as a turn's NextDeadline takes it
		}
		c.tickDue(now, &eff)
		return eff
	}
	c.fullTick, c.peersRescan = false, true
	for _, p := range c.sortedPeers() {
		if now.Sub(c.timeOf(p.lastUsed)) >= c.cfg.IdleTimeout {
			delete(c.peers, p.nid())
			eff.Removed = append(eff.Removed, p.nid())
			eff.Events = append(eff.Events, Event{Kind: timeline.SessionExpired, Peer: p.nid(), Detail: "idle"})
			continue
		}
		c.expireRemotes(p, now, &eff)
	}
	if changed {
		c.rankLocals(&eff)
	}
	// The pass above may have changed any peer's remote locators.
	c.syncPeers(now, &eff)
	adv := c.advertisement(now)
	for _, p := range c.sortedPeers() {
		retry := p.retryAt() != 0 && !now.Before(c.timeOf(p.retryAt()))
		if len(adv) == 0 {
			// Nothing to advertise: the next locator to appear triggers an LU anyway.
			p.setRetryAt(0)
			continue
		}
		if !sameSet(adv, p.adv()) {
			continue // syncPeers above has just sent it
		}
		if retry || c.refreshDue(p, now) {
			c.emitLU(p, adv, now, &eff)
		}
	}
	return eff
}

// tickDue is Tick for the peers whose deadline has come, when nothing else changed since the
// last full Tick (c.mu held): what Tick does for every peer, done for those only.
func (c *Cache) tickDue(now time.Time, eff *Effects) {
	due := c.popDue(now)
	live := due[:0]
	for _, p := range due {
		if now.Sub(c.timeOf(p.lastUsed)) >= c.cfg.IdleTimeout {
			delete(c.peers, p.nid())
			eff.Removed = append(eff.Removed, p.nid())
			eff.Events = append(eff.Events, Event{Kind: timeline.SessionExpired, Peer: p.nid(), Detail: "idle"})
			continue
		}
		c.expireRemotes(p, now, eff)
		live = append(live, p)
	}
	adv := c.advertisement(now)
	rc := c.reach()
	for _, p := range live {
		if p.selectRemote(rc) {
			eff.Events = append(eff.Events, Event{Kind: timeline.ActiveLocator, Peer: p.nid(), Locator: p.lastActive, To: Active, Detail: "remote, local family"})
		}
		c.syncBinding(p, eff)
		if len(adv) > 0 && !sameSet(adv, p.adv()) {
			c.emitLU(p, adv, now, eff)
		}
	}
	for _, p := range live {
		retry := p.retryAt() != 0 && !now.Before(c.timeOf(p.retryAt()))
		switch {
		case len(adv) == 0:
			p.setRetryAt(0)
		case !sameSet(adv, p.adv()):
		case retry || c.refreshDue(p, now):
			c.emitLU(p, adv, now, eff)
		}
		c.queuePeer(p)
	}
}

func (c *Cache) expireRemotes(p *peer, now time.Time, eff *Effects) {
	kept := p.remotes()[:0]
	expired := false
	for _, r := range p.remotes() {
		if r.expires != 0 && !now.Before(c.timeOf(r.expires)) {
			expired = true
			eff.Events = append(eff.Events, Event{Kind: timeline.LocatorRemoved, Peer: p.nid(), Locator: r.loc, From: r.state, To: Expired, Detail: "remote lifetime expired"})
			continue
		}
		kept = append(kept, r)
	}
	p.setRemotes(kept)
	if expired && p.selectRemote(c.reach()) {
		eff.Events = append(eff.Events, Event{Kind: timeline.ActiveLocator, Peer: p.nid(), Locator: p.lastActive, To: Active, Detail: "remote"})
	}
}

// refreshAt is when an advertisement to p should be refreshed: half-way through the shortest
// advertised lifetime whose locator is valid here for longer than advertised. Zero: never.
func (c *Cache) refreshAt(p *peer) time.Time {
	var at time.Time
	for _, e := range p.adv() {
		l := c.locals[e.Locator]
		if l == nil || !l.state.Usable() {
			continue
		}
		end := c.timeOf(p.advertisedAt).Add(time.Duration(e.Lifetime) * time.Second)
		if !l.validEnd.IsZero() && !l.validEnd.After(end) {
			continue // re-advertising cannot extend it
		}
		t := c.timeOf(p.advertisedAt).Add(time.Duration(e.Lifetime) * time.Second / 2)
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at
}

func (c *Cache) refreshDue(p *peer, now time.Time) bool {
	at := c.refreshAt(p)
	return !at.IsZero() && !now.Before(at)
}

// NextDeadline is the earliest time Tick has something to do; ok is false if none.
func (c *Cache) NextDeadline() (next time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	consider := func(t time.Time) {
		if !t.IsZero() && (!ok || t.Before(next)) {
			next, ok = t, true
		}
	}
	for _, end := range c.routers {
		consider(end)
	}
	for _, l := range c.locals {
		consider(l.validEnd)
		if !l.deprecated {
			consider(l.preferEnd)
		}
	}
	if t, due := c.peersNext(); due {
		consider(t)
	}
	return next, ok
}
