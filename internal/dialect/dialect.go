// Package dialect learns, per correspondent, which ILNPv6 dialect it speaks and speaks it back.
//
// Three implementations are public besides this one and differ on the wire (README,
// "Interoperability"):
//
//   - FreeBSD ILNP (github.com/ilnp/ilnp-freebsd14) keeps ONE nonce per correspondent for both
//     directions (sys/netinet6/ilnp6.h struct foreignnid: n_lnonce and n_rnonce are both
//     n_nonce). As responder it takes ours (ilnp6.c tentativenid_update); as initiator it
//     sends its own and then adopts ours from our first reply (ilnp6.c ilnp6_nonce_input,
//     "Case 2"), so from then on its data, LUs and LU-ACKs carry OUR nonce. Its LUs are
//     RFC 6743 s.2 byte for byte, and it installs every listed locator (ilnp6.c
//     lu_input_advert) and sends to each in turn (ilnp6_update_inpcb).
//   - The St Andrews Linux patch (github.com/ilnp/ilnp-public-1) sends one locator per LU in
//     a 16-byte entry with a checksum over zeroed locators (wire.LayoutStAndrews,
//     wire.LayoutStAndrewsCode), makes the first entry of an LU its active locator (ilnp6.c
//     rcv_lu) and acknowledges with an LU of its own naming only that locator.
//   - Neither knows IPv4 (0000::/16, internal/encap) locator entries.
//
// What a peer is, is learned only from packets whose nonce the datapath verified (the caller's
// duty): the layout and checksum rule of its LUs, whether it sent our own nonce back (a
// shared-nonce peer), whether it has shown IPv4 locators (an IPv4 entry in its LU, an IPv4
// locator among those it is known by). A per-peer override from the configuration replaces
// the learned profile. Until a peer has shown otherwise, it gets RFC 6743 LUs with a full
// checksum and no IPv4 entries; a peer like us therefore sees byte-for-byte RFC 6743.
//
// The package is pure: no I/O, no clock. It is not safe for concurrent use; the daemon calls
// it from its event loop.
package dialect

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"ilnp/internal/encap"
	"ilnp/internal/wire"
)

// Profile is what a correspondent understands.
type Profile struct {
	// Layout and Checksum are how its LUs look and how ours to it are built.
	Layout   wire.LULayout
	Checksum wire.LUChecksum
	// SharedNonce: it uses one nonce for both directions (FreeBSD ILNP).
	SharedNonce bool
	// IPv4: it understands IPv4 locator entries (0000::/16, internal/encap).
	IPv4 bool
}

// Named profiles, the values of the configuration's peer-dialect key.
var named = map[string]Profile{
	// This daemon: RFC 6743 LUs, one nonce per direction, IPv4 locators.
	"ilnpd": {IPv4: true},
	// Any RFC 6743 implementation without IPv4 locators.
	"rfc6743":        {},
	"freebsd":        {SharedNonce: true},
	"standrews":      {Layout: wire.LayoutStAndrews, Checksum: wire.ChecksumZeroLocators},
	"standrews-code": {Layout: wire.LayoutStAndrewsCode, Checksum: wire.ChecksumZeroLocators},
}

// Names lists the named profiles, sorted.
func Names() []string {
	out := make([]string, 0, len(named))
	for n := range named {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Lookup returns the named profile.
func Lookup(name string) (Profile, error) {
	p, ok := named[name]
	if !ok {
		return Profile{}, fmt.Errorf("unknown dialect %q, want one of %s", name, strings.Join(Names(), ", "))
	}
	return p, nil
}

func (p Profile) String() string {
	s := fmt.Sprintf("layout=%v checksum=%v", p.Layout, p.Checksum)
	if p.SharedNonce {
		s += " shared-nonce"
	}
	if p.IPv4 {
		s += " ipv4"
	}
	return s
}

// RepeatsAdvertisements: the peer sends the same LU body again when it moves back to a
// locator set it had before (FreeBSD ILNP, the St Andrews kernel). This daemon never does
// (internal/ilcc lowers the lifetimes of a repeated advertisement), so for a peer like us an
// older body arriving after a newer one is a replay; for these it may be a move back.
func (p Profile) RepeatsAdvertisements() bool {
	return p.SharedNonce || p.Layout != wire.LayoutRFC6743
}

// ErrNothingToSend: every locator of the LU is of a kind the peer has not shown it knows.
var ErrNothingToSend = errors.New("dialect: no locator the peer understands")

// sentLU is an LU as the engine made it and as it went on the wire.
type sentLU struct {
	orig wire.LocatorUpdate
	wire []wire.LocatorEntry
}

// maxSent is how many sent LUs per peer an ACK is matched against (the engine keeps a short
// history of its own; an ACK for an older one is unknown either way).
const maxSent = 8

type peer struct {
	learned Profile
	sent    []sentLU
}

// Table holds the profile of every correspondent.
type Table struct {
	overrides map[wire.NID]Profile
	peers     map[wire.NID]*peer
}

// New returns a table with these per-peer overrides (copied).
func New(overrides map[wire.NID]Profile) *Table {
	t := &Table{overrides: map[wire.NID]Profile{}, peers: map[wire.NID]*peer{}}
	for nid, p := range overrides {
		t.overrides[nid] = p
	}
	return t
}

func (t *Table) peer(nid wire.NID) *peer {
	p := t.peers[nid]
	if p == nil {
		p = &peer{}
		t.peers[nid] = p
	}
	return p
}

// Profile is what nid is taken to understand: the override if configured, else what it has
// shown.
func (t *Table) Profile(nid wire.NID) Profile {
	if o, ok := t.overrides[nid]; ok {
		return o
	}
	if p := t.peers[nid]; p != nil {
		return p.learned
	}
	return Profile{}
}

// Configured reports whether nid's profile comes from the configuration.
func (t *Table) Configured(nid wire.NID) bool {
	_, ok := t.overrides[nid]
	return ok
}

// LearnLU records what a nonce-verified LU or LU-ACK from nid shows: its layout and checksum
// rule, and IPv4 knowledge when it lists an IPv4 locator. It reports whether the learned
// profile changed.
func (t *Table) LearnLU(nid wire.NID, lu wire.PeerLU) bool {
	p := t.peer(nid)
	before := p.learned
	p.learned.Layout, p.learned.Checksum = lu.Layout, lu.Checksum
	for _, e := range lu.Update.Locators {
		if encap.IsL32(e.Locator) {
			p.learned.IPv4 = true
		}
	}
	return p.learned != before
}

// LearnLocators records IPv4 knowledge when nid is known by an IPv4 locator: one it
// published (name resolution, the hosts file) or one its verified packets came from.
func (t *Table) LearnLocators(nid wire.NID, locs []wire.L64) bool {
	for _, l := range locs {
		if encap.IsL32(l) {
			p := t.peer(nid)
			changed := !p.learned.IPv4
			p.learned.IPv4 = true
			return changed
		}
	}
	return false
}

// LearnNonce records a shared-nonce peer: a nonce-verified packet from nid carried local, the
// nonce this host sends to nid, which a peer with one nonce per direction never sends. It
// reports whether the learned profile changed.
func (t *Table) LearnNonce(nid wire.NID, carried, local wire.Nonce) bool {
	if carried.IsZero() || carried != local {
		return false
	}
	p := t.peer(nid)
	changed := !p.learned.SharedNonce
	p.learned.SharedNonce = true
	return changed
}

// Outgoing turns an LU the engine wants to send to nid into what nid understands: IPv4
// entries only to a peer that has shown it knows them; in the St Andrews layouts only the
// most preferred locator (lowest preference value, the first of equals), which those
// receivers make active. The result is remembered so that nid's ACK can be matched (Ack).
func (t *Table) Outgoing(nid wire.NID, upd wire.LocatorUpdate) (wire.PeerLU, error) {
	prof := t.Profile(nid)
	locs := make([]wire.LocatorEntry, 0, len(upd.Locators))
	for _, e := range upd.Locators {
		if encap.IsL32(e.Locator) && !prof.IPv4 {
			continue
		}
		locs = append(locs, e)
	}
	if len(locs) == 0 {
		return wire.PeerLU{}, ErrNothingToSend
	}
	if prof.Layout != wire.LayoutRFC6743 {
		best := 0
		for i, e := range locs {
			if e.Preference < locs[best].Preference {
				best = i
			}
		}
		locs = locs[best : best+1]
	}
	p := t.peer(nid)
	p.sent = append(p.sent, sentLU{orig: upd, wire: locs})
	if len(p.sent) > maxSent {
		p.sent = slices.Delete(p.sent, 0, len(p.sent)-maxSent)
	}
	return wire.PeerLU{
		Update:   wire.LocatorUpdate{Op: upd.Op, Locators: locs},
		Layout:   prof.Layout,
		Checksum: prof.Checksum,
	}, nil
}

// Ack maps an LU-ACK from nid back onto the LU the engine sent, so the engine's byte-for-byte
// match (internal/lu) sees its own body: an RFC 6743 ACK echoes what went on the wire; a St
// Andrews ACK names only the locator it made active. An ACK that matches nothing sent is
// returned unchanged (the engine counts it as unknown).
func (t *Table) Ack(nid wire.NID, ack wire.LocatorUpdate) wire.LocatorUpdate {
	p := t.peers[nid]
	if p == nil || ack.Op != wire.OpAcknowledgement {
		return ack
	}
	for i := len(p.sent) - 1; i >= 0; i-- {
		s := p.sent[i]
		if slices.Equal(s.wire, ack.Locators) ||
			(len(s.wire) == 1 && len(ack.Locators) == 1 && s.wire[0].Locator == ack.Locators[0].Locator) {
			return s.orig.Ack()
		}
	}
	return ack
}

// Reply is the acknowledgement of lu, an LU received from a peer, in the peer's dialect: its own body
// with the Operation set to acknowledgement, in the layout and checksum rule it came in (the
// St Andrews receivers match an ACK by its first locator, FreeBSD by its nonce alone).
func Reply(lu wire.PeerLU) wire.PeerLU {
	return wire.PeerLU{Update: lu.Update.Ack(), Layout: lu.Layout, Checksum: lu.Checksum}
}

// Forget drops what was learned about nid (its session is gone).
func (t *Table) Forget(nid wire.NID) { delete(t.peers, nid) }
