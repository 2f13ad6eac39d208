package ilcc

import (
	"slices"

	"ilnp/internal/luguard"
	"ilnp/internal/wire"
)

// peer is one correspondent's record, one per session (issue 28: 100,000s of them, 256 bytes
// each plus a slice of remote locators and one of bound ones). A lone idle session needs its
// view, nonces, one remote locator and its stamps: those are inline, the rest a moving or
// announcing peer needs (a set of two or more remote locators, the LU history, a retry after
// a give-up, locators marked down) is in x, allocated on the first need and dropped once
// empty again. The size is checked by TestPeerSize.
type peer struct {
	// sessLocal is this node's session view, shared with the peers of an equal one
	// (Cache.localView): a server's sessions have one.
	sessLocal *wire.ILV
	// sessRemote's NID is the correspondent's, the peer's key.
	sessRemote wire.ILV
	lastActive wire.L64
	created    stamp
	lastUsed   stamp
	// advertisedAt is when advertised was told (or assumed known: the session's opening).
	advertisedAt stamp
	// queuedAt is the earliest deadline Cache.due holds for the peer (0: none).
	queuedAt   stamp
	advertised *told
	// one is a remote locator set of one (loc 0: none); a larger set is x.remotes.
	one   [1]remote
	bound bindingState
	x     *peerRare
	// The nonces and flags last: bytes, no padding between them.
	localNonce  wire.Nonce
	remoteNonce wire.Nonce
	announced   bool // an LU was sent (or an acknowledged one adopted): advertised is what it was told
	// announceOnNonce: the other family's locators are to be announced once the peer's nonce
	// is learned from its first answer (the datapath never learns a nonce from an LU or its
	// ACK, bpf/ilnp.c, so an ACK that came first would be dropped and the LU resent 1 s later).
	announceOnNonce bool
	// sentLast: advertised is the last LU sent (emitLU), the whole replay history until
	// another is sent (then x.sent).
	sentLast bool
	// boundSet: bound holds what syncBinding last handed the datapath; nonceStale: the remote
	// nonce changed since (setRemoteNonce), so that binding's differs.
	boundSet   bool
	nonceStale bool
}

// peerRare is what only a moving or announcing correspondent needs.
type peerRare struct {
	remotes      []remote              // a remote locator set of two or more
	boundRemotes []RemoteLocator       // the bound set when it has two or more
	boundActive  wire.L64              // the bound remote locator unless it is the bound set's one (0)
	sent         [][]wire.LocatorEntry // the last luguard.History LUs, oldest first, once two were sent
	retryAt      stamp
	down         map[wire.L64]bool // remote locators whose paths stopped delivering (SetRemoteDown)
}

// told is an advertisement as the peers told it share it (Cache.shared): a pointer a peer
// where a slice header took 24 bytes.
type told struct{ set []wire.LocatorEntry }

// bindingState is the part of a peer's last Binding that changes (the rest of a Binding is
// the peer's own and fixed): a whole Binding per peer was 152 bytes (issue 28). The remote
// nonce it carried is the peer's unless nonceStale; its RemoteLocator is boundActive.
type bindingState struct {
	local *boundLocal // nil: HasLocal false
	// one is a bound remote set of one (Locator 0: none); a larger one is x.boundRemotes.
	one [1]RemoteLocator
}

// boundActive is the RemoteLocator of the binding last handed out: a lone set's locator,
// unless x says otherwise.
func (p *peer) boundActive() wire.L64 {
	if p.x != nil && p.x.boundActive != 0 {
		return p.x.boundActive
	}
	return p.bound.one[0].Locator
}

// setBound records the binding b handed out, with local its shared local locator.
func (p *peer) setBound(b Binding, local *boundLocal) {
	p.bound.local = local
	p.setBoundRemotes(b.RemoteLocators)
	if len(b.RemoteLocators) == 1 && b.RemoteLocators[0].Locator == b.RemoteLocator {
		if p.x != nil {
			p.x.boundActive = 0
			p.tidy()
		}
	} else {
		p.more().boundActive = b.RemoteLocator
	}
	p.boundSet, p.nonceStale = true, false
}

func (p *peer) nid() wire.NID { return p.sessRemote.NID }

// more is p's rare part, allocated if need be.
func (p *peer) more() *peerRare {
	if p.x == nil {
		p.x = &peerRare{}
	}
	return p.x
}

// tidy drops the rare part once nothing is in it.
func (p *peer) tidy() {
	if x := p.x; x != nil && x.remotes == nil && x.boundRemotes == nil && x.boundActive == 0 && x.sent == nil && x.retryAt == 0 && len(x.down) == 0 {
		p.x = nil
	}
}

// remotes is the correspondent's locator set; its elements may be changed in place.
func (p *peer) remotes() []remote {
	switch {
	case p.x != nil && p.x.remotes != nil:
		return p.x.remotes
	case p.one[0].loc != 0:
		return p.one[:]
	}
	return nil
}

// setRemotes makes set the correspondent's locator set; a set of two or more is kept as it
// is. set may be remotes()[:n].
func (p *peer) setRemotes(set []remote) {
	if len(set) > 1 {
		p.more().remotes = set
		p.one[0] = remote{}
		return
	}
	var one remote
	if len(set) == 1 {
		one = set[0]
	}
	p.one[0] = one
	if p.x != nil {
		p.x.remotes = nil
		p.tidy()
	}
}

// boundRemotes is the remote set of the binding last handed out.
func (p *peer) boundRemotes() []RemoteLocator {
	switch {
	case p.x != nil && p.x.boundRemotes != nil:
		return p.x.boundRemotes
	case p.bound.one[0].Locator != 0:
		return p.bound.one[:]
	}
	return nil
}

func (p *peer) setBoundRemotes(rs []RemoteLocator) {
	if len(rs) > 1 {
		p.more().boundRemotes = rs
		p.bound.one[0] = RemoteLocator{}
		return
	}
	var one RemoteLocator
	if len(rs) == 1 {
		one = rs[0]
	}
	p.bound.one[0] = one
	if p.x != nil {
		p.x.boundRemotes = nil
		p.tidy()
	}
}

// setRemoteNonce changes the correspondent's nonce.
func (p *peer) setRemoteNonce(n wire.Nonce) {
	if n != p.remoteNonce {
		p.remoteNonce = n
		p.nonceStale = true
	}
}

func (p *peer) adv() []wire.LocatorEntry {
	if p.advertised == nil {
		return nil
	}
	return p.advertised.set
}

// sent is the replay history of the LUs sent (luguard), oldest first: x.sent once two were
// sent, the advertised set alone after one.
func (p *peer) sent() [][]wire.LocatorEntry {
	switch {
	case p.x != nil && p.x.sent != nil:
		return p.x.sent
	case p.sentLast:
		return [][]wire.LocatorEntry{p.adv()}
	}
	return nil
}

// distinct is luguard.Distinct(adv, p.sent()), which looks only at the LUs before the last:
// none until two were sent.
func (p *peer) distinct(adv []wire.LocatorEntry) ([]wire.LocatorEntry, bool) {
	var sent [][]wire.LocatorEntry
	if p.x != nil {
		sent = p.x.sent
	}
	return luguard.Distinct(adv, sent)
}

// sentLU records that the LU own was sent.
func (p *peer) sentLU(own *told) {
	switch {
	case p.x != nil && p.x.sent != nil:
		p.x.sent = append(p.x.sent, own.set)
		if len(p.x.sent) > luguard.History {
			p.x.sent = slices.Delete(p.x.sent, 0, len(p.x.sent)-luguard.History)
		}
	case p.sentLast:
		p.more().sent = [][]wire.LocatorEntry{p.adv(), own.set}
	}
	p.advertised, p.sentLast = own, true
}

func (p *peer) retryAt() stamp {
	if p.x == nil {
		return 0
	}
	return p.x.retryAt
}

func (p *peer) setRetryAt(s stamp) {
	if s != 0 {
		p.more().retryAt = s
	} else if p.x != nil {
		p.x.retryAt = 0
		p.tidy()
	}
}

func (p *peer) isDown(l wire.L64) bool { return p.x != nil && p.x.down[l] }

func (p *peer) setDown(l wire.L64, down bool) {
	if down {
		x := p.more()
		if x.down == nil {
			x.down = map[wire.L64]bool{}
		}
		x.down[l] = true
		return
	}
	if p.x != nil {
		delete(p.x.down, l)
		if len(p.x.down) == 0 {
			p.x.down = nil
		}
		p.tidy()
	}
}
