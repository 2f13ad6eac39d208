// Package luguard remembers, per correspondent, the Locator Updates a node applied and the
// LU-ACKs it sent, against two attacks the nonce alone does not stop (issue 23):
//
//   - Replay. An LU carries no sequence number (RFC 6743 s.2: type, code, checksum, number of
//     locators, operation, reserved, then locator/preference/lifetime entries; the reserved
//     field must be zero), and its nonce is the session's for the session's life (RFC 6744
//     s.2), so an LU captured on the path is valid forever. The guard keeps the digests of the
//     last History bodies applied: the one applied last may come again (a retransmission whose
//     ACK was lost, RFC 6743 s.3) and is acknowledged again; an older one, after a newer set
//     was applied, is a replay and is dropped without an ACK. A node's own successive
//     advertisements never repeat an older body (ilcc lowers their lifetimes by a second
//     where they would, Distinct), so a correspondent that moves back to a locator it had is
//     applied as new.
//   - Reflection. Every LU is acknowledged towards the session's address; a token bucket per
//     correspondent bounds the ACKs of repeated bodies (AllowAck), so repeats cannot turn the
//     node into a reflector. A fresh body is always acknowledged (the daemon does not ask):
//     only a peer that holds the nonce can make one, and it is a real change of its set.
//
// The guard is pure: no I/O, no clock of its own; not safe for concurrent use.
package luguard

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"time"

	"ilnp/internal/budget"
	"ilnp/internal/wire"
)

// History is how many applied bodies the guard remembers per correspondent, and how many
// sent ones a sender keeps distinct from (Distinct).
const History = 16

// Default ACK budget per correspondent: a burst of AckBurst, then AckPerSecond. A genuine
// correspondent sends one or two LUs per move plus retransmissions that back off exponentially
// (internal/lu), below it even when it moves twice a second: the short soak (50 moves in 22 s)
// had 111 of its ACKs withheld at 8 and 4/s, and its LUs retransmitted.
const (
	AckBurst     = 32
	AckPerSecond = 16
)

// Digest identifies an LU body: its operation and entries as on the wire.
type Digest [sha256.Size]byte

// DigestOf is the digest of u's body.
func DigestOf(u wire.LocatorUpdate) Digest {
	b := make([]byte, 0, 2+12*len(u.Locators))
	b = append(b, byte(u.Op), byte(len(u.Locators)))
	for _, e := range u.Locators {
		b = binary.BigEndian.AppendUint64(b, uint64(e.Locator))
		b = binary.BigEndian.AppendUint16(b, e.Preference)
		b = binary.BigEndian.AppendUint16(b, e.Lifetime)
	}
	return sha256.Sum256(b)
}

// Verdict is what to do with an LU.
type Verdict int

const (
	// Fresh: never applied (or forgotten): apply it.
	Fresh Verdict = iota + 1
	// Repeat: the body applied last: applying it again changes nothing; ACK it (within the
	// budget).
	Repeat
	// Replay: applied before and superseded since: drop it, no ACK.
	Replay
)

func (v Verdict) String() string {
	switch v {
	case Fresh:
		return "fresh"
	case Repeat:
		return "repeat"
	case Replay:
		return "replay"
	}
	return "verdict(?)"
}

type peer struct {
	applied []Digest // oldest first, at most History
	acks    budget.Bucket
}

// Guard holds the state of every correspondent.
type Guard struct {
	burst, rate float64
	peers       map[wire.NID]*peer
}

// New returns a guard with the ACK budget burst and perSecond (0: the defaults).
func New(burst int, perSecond float64) *Guard {
	if burst <= 0 {
		burst = AckBurst
	}
	if perSecond <= 0 {
		perSecond = AckPerSecond
	}
	return &Guard{burst: float64(burst), rate: perSecond, peers: map[wire.NID]*peer{}}
}

func (g *Guard) peer(p wire.NID) *peer {
	st := g.peers[p]
	if st == nil {
		st = &peer{}
		g.peers[p] = st
	}
	return st
}

// Check classifies an LU body from p without changing anything.
func (g *Guard) Check(p wire.NID, d Digest) Verdict {
	st := g.peers[p]
	if st == nil {
		return Fresh
	}
	switch i := slices.Index(st.applied, d); {
	case i < 0:
		return Fresh
	case i == len(st.applied)-1:
		return Repeat
	}
	return Replay
}

// Applied records that p's body d was applied: it becomes the latest.
func (g *Guard) Applied(p wire.NID, d Digest) {
	st := g.peer(p)
	st.applied = slices.DeleteFunc(st.applied, func(x Digest) bool { return x == d })
	if len(st.applied) == History {
		st.applied = slices.Delete(st.applied, 0, 1)
	}
	st.applied = append(st.applied, d)
}

// AllowAck takes one ACK to p from its budget at now; false: over it, send none.
func (g *Guard) AllowAck(p wire.NID, now time.Time) bool {
	return g.peer(p).acks.Take(1, g.burst, g.rate, now)
}

// Forget drops p's state (its session ended).
func (g *Guard) Forget(p wire.NID) { delete(g.peers, p) }

// Len is the number of correspondents with state.
func (g *Guard) Len() int { return len(g.peers) }

// Distinct returns adv, or adv with every lifetime lowered by the fewest whole seconds that
// make its body differ from each of sent (a sender's earlier advertisements to the same
// correspondent, of which the last is exempt: repeating it is a retransmission). Lifetimes
// stay at least 1. Lowering a lifetime only shortens what the correspondent may assume
// (RFC 6743 s.2: "the maximum number of seconds"). ok is false if no lowering helps (every
// lifetime is 1).
func Distinct(adv []wire.LocatorEntry, sent [][]wire.LocatorEntry) (out []wire.LocatorEntry, ok bool) {
	older := sent
	if len(older) > 0 {
		older = older[:len(older)-1]
	}
	out = slices.Clone(adv)
	for range History + 1 {
		if !slices.ContainsFunc(older, func(s []wire.LocatorEntry) bool { return slices.Equal(s, out) }) {
			return out, true
		}
		lowered := false
		for i := range out {
			if out[i].Lifetime > 1 {
				out[i].Lifetime--
				lowered = true
			}
		}
		if !lowered {
			break
		}
	}
	return adv, false
}
