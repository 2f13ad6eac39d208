// Package ephemeral keeps the per-correspondent NIDs of `nid-mode ephemeral` (RFC 8981's
// temporary addresses applied to ILNP identifiers): every
// correspondent this node opens a session to gets its own random NID, drawn when the peer is
// registered and retired when the session with it closes. A NID is never handed to two
// correspondents and never handed out again after it was retired, so two correspondents (or
// the same one before and after a session) cannot link the node's sessions by identifier.
// The stable NID (published in DNS and the hosts file) stays the one incoming sessions use.
//
// The pool is pure bookkeeping: no I/O, no clock; the daemon turns its answers into local
// NIDs in the datapath, identity addresses and route source hints (internal/node).
package ephemeral

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"ilnp/internal/wire"
)

// DefaultMaxLive bounds the NIDs alive at once; the datapath's local_nids map holds this many
// plus the stable one.
const DefaultMaxLive = 4000

// retiredMemory is how many retired NIDs the pool remembers to refuse if drawn again: a
// repeat of a random 63-bit value is already unlikely (about n^2/2^64), this makes it
// impossible within the recent past.
const retiredMemory = 8192

// ErrFull is returned when DefaultMaxLive (or Config.MaxLive) NIDs are alive.
var ErrFull = errors.New("ephemeral NID pool full")

// Config configures a Pool.
type Config struct {
	// Stable is the node's published NID: never drawn.
	Stable wire.NID
	// MaxLive bounds the live NIDs (0: DefaultMaxLive).
	MaxLive int
	// Random draws a candidate NID (nil: wire.RandomNID, crypto/rand with the u/l bit clear).
	Random func() (wire.NID, error)
}

// Pool maps correspondents to their ephemeral local NIDs. Not safe for concurrent use (the
// daemon's loop owns it).
type Pool struct {
	cfg     Config
	byPeer  map[wire.NID]wire.NID // correspondent -> its local NID
	owner   map[wire.NID]wire.NID // local NID -> correspondent
	retired map[wire.NID]bool
	order   []wire.NID // retired, oldest first (bounded by retiredMemory)
}

// New returns an empty pool.
func New(cfg Config) (*Pool, error) {
	if cfg.Stable == 0 {
		return nil, errors.New("ephemeral: stable NID 0")
	}
	if cfg.MaxLive <= 0 {
		cfg.MaxLive = DefaultMaxLive
	}
	if cfg.Random == nil {
		cfg.Random = wire.RandomNID
	}
	return &Pool{cfg: cfg, byPeer: map[wire.NID]wire.NID{}, owner: map[wire.NID]wire.NID{},
		retired: map[wire.NID]bool{}}, nil
}

// For returns the correspondent's local NID, drawing a fresh one (fresh true) when it has
// none alive.
func (p *Pool) For(peer wire.NID) (nid wire.NID, fresh bool, err error) {
	if peer == 0 {
		return 0, false, errors.New("ephemeral: correspondent NID 0")
	}
	if nid, ok := p.byPeer[peer]; ok {
		return nid, false, nil
	}
	if len(p.byPeer) >= p.cfg.MaxLive {
		return 0, false, fmt.Errorf("ephemeral NID for %v: %w (%d alive)", peer, ErrFull, len(p.byPeer))
	}
	// A handful of draws: only a broken random source collides repeatedly.
	for range 8 {
		c, err := p.cfg.Random()
		if err != nil {
			return 0, false, fmt.Errorf("ephemeral NID for %v: %w", peer, err)
		}
		if !p.usable(c) {
			continue
		}
		p.byPeer[peer] = c
		p.owner[c] = peer
		return c, true, nil
	}
	return 0, false, fmt.Errorf("ephemeral NID for %v: random source keeps repeating NIDs", peer)
}

// usable: not zero, not the stable NID, not alive, not recently retired, and not in the
// reserved interface identifiers (RFC 5453: 0 is the subnet-router anycast identifier and
// fdff:ffff:ffff:ff80-ffff the subnet anycast range; everything from ...ff00 up is refused).
func (p *Pool) usable(c wire.NID) bool {
	if c == 0 || c == p.cfg.Stable || p.retired[c] {
		return false
	}
	if _, alive := p.owner[c]; alive {
		return false
	}
	return uint64(c)&^0xff < 0xfdffffffffffff00
}

// Lookup returns the correspondent's live NID.
func (p *Pool) Lookup(peer wire.NID) (wire.NID, bool) {
	nid, ok := p.byPeer[peer]
	return nid, ok
}

// Owner returns the correspondent a live NID belongs to.
func (p *Pool) Owner(nid wire.NID) (wire.NID, bool) {
	peer, ok := p.owner[nid]
	return peer, ok
}

// Retire ends the correspondent's NID (its session closed): the next For draws a new one.
func (p *Pool) Retire(peer wire.NID) (wire.NID, bool) {
	nid, ok := p.byPeer[peer]
	if !ok {
		return 0, false
	}
	delete(p.byPeer, peer)
	delete(p.owner, nid)
	p.retired[nid] = true
	p.order = append(p.order, nid)
	if len(p.order) > retiredMemory {
		delete(p.retired, p.order[0])
		p.order = p.order[1:]
	}
	return nid, true
}

// Restore puts back a pairing a previous daemon left (restart). It fails when either side is
// already taken or nid is not usable.
func (p *Pool) Restore(peer, nid wire.NID) error {
	if peer == 0 || !p.usable(nid) {
		return fmt.Errorf("ephemeral: restore %v for %v: NID not usable", nid, peer)
	}
	if old, ok := p.byPeer[peer]; ok {
		return fmt.Errorf("ephemeral: restore %v for %v: it has %v", nid, peer, old)
	}
	p.byPeer[peer] = nid
	p.owner[nid] = peer
	return nil
}

// Pair is one live correspondent and its NID.
type Pair struct {
	Peer, NID wire.NID
}

// Live lists the live pairings, by correspondent.
func (p *Pool) Live() []Pair {
	out := make([]Pair, 0, len(p.byPeer))
	for _, peer := range slices.Sorted(maps.Keys(p.byPeer)) {
		out = append(out, Pair{Peer: peer, NID: p.byPeer[peer]})
	}
	return out
}

// Len is the number of live NIDs.
func (p *Pool) Len() int { return len(p.byPeer) }
