package ilcc

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"ilnp/internal/lu"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// State is the state of a locator in the ILCC (RFC 6741 s.5, thesis table 3.4).
type State uint8

const (
	// Active: valid and the one in use (one local and one remote per session).
	Active State = iota + 1
	// Valid: valid and usable but not the one in use; still receives (soft handoff).
	Valid
	// Aged: still present but not to be used (hard handoff in progress).
	Aged
	// Expired: no longer usable; reported once, then dropped.
	Expired
)

var stateNames = [...]string{Active: "active", Valid: "valid", Aged: "aged", Expired: "expired"}

func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MarshalText makes State a JSON string.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Usable reports whether packets may be sent from / accepted on a locator in this state:
// Active and Valid are, Aged and Expired are not.
func (s State) Usable() bool { return s == Active || s == Valid }

// Mode is the handoff mode (thesis s.3.2.7, fig 3.12).
type Mode uint8

const (
	// Soft: on handoff the previous locator stays Valid (and keeps receiving) until it is
	// really gone, so the node is multihomed during the overlap. The default: it is the mode
	// that loses no packets when two networks overlap.
	Soft Mode = iota + 1
	// Hard: on handoff the previous locator is Aged at once; one locator at a time.
	Hard
)

func (m Mode) String() string {
	switch m {
	case Soft:
		return "soft"
	case Hard:
		return "hard"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// MarshalText makes Mode a JSON string.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText accepts "soft" or "hard".
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// ParseMode parses "soft" or "hard" (case-insensitive).
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "soft":
		return Soft, nil
	case "hard":
		return Hard, nil
	}
	return 0, fmt.Errorf("handoff mode %q: want soft or hard", s)
}

// Infinite is a lifetime that never runs out (an RA lifetime of 0xffffffff).
const Infinite = time.Duration(math.MaxInt64)

// LocalUpdate announces or refreshes one local locator. Router Advertisements produce it (one
// per Prefix Information option with the autonomous flag), and so do statically configured
// locators (with Infinite lifetimes).
type LocalUpdate struct {
	Locator wire.L64
	// IfIndex is the interface the locator belongs to; packets from it leave there.
	IfIndex int
	// Router is the advertising router's link-local address: the next hop for the locator.
	Router netip.Addr
	// ValidLifetime and PreferredLifetime come from the Prefix Information option (RFC 4861
	// s.4.6.2). ValidLifetime 0 withdraws the locator.
	ValidLifetime     time.Duration
	PreferredLifetime time.Duration
	// Preference ranks this locator for the "preference" policy: lower is better, as for the
	// RFC 6742 L64 record. The daemon sets it per interface from its configuration.
	Preference uint16
}

// Session describes a new ILNP session as the datapath or the resolver reports it.
type Session struct {
	// Local and Remote are the addresses the sockets see (the session view, thesis s.3.2.2):
	// the datapath rewrites locators on the wire and restores these on receive.
	Local  wire.ILV
	Remote wire.ILV
	// RemoteLocators are further locators of the correspondent already known (hosts file,
	// DNS L64 records), lower preference better. Remote.Locator is always included.
	RemoteLocators []wire.LocatorEntry
	// RemoteNonce is the correspondent's nonce if a packet from it has been seen (RFC 6744);
	// zero otherwise.
	RemoteNonce wire.Nonce
	// LocalNonce is our nonce if the datapath already chose one for this session (it puts
	// it on the wire from the first packet); zero lets the cache generate it.
	LocalNonce wire.Nonce
	// Initiator: this node sent the session's first packet. Only an initiator tells the
	// correspondent its locators of the other family at once (unseenFamily): a responder's
	// session may come from a spoofed packet, and an LU to it would be a reflected message.
	Initiator bool
}

// RemoteLocator is one locator of a correspondent as the datapath sees it. Lifetime is the
// value last advertised (seconds; 0: none), not a countdown, so bindings change only when the
// set does; the cache expires the locator itself.
type RemoteLocator struct {
	Locator    wire.L64
	Preference uint16
	Lifetime   uint16
	State      State
}

// Binding is what the datapath needs for one correspondent: the session view and the
// locators and nonces to put on the wire. The daemon upserts it into the ILCC map.
type Binding struct {
	Peer          wire.NID
	SessionLocal  wire.ILV
	SessionRemote wire.ILV
	// LocalLocator is the active local locator, with its interface and next hop. HasLocal is
	// false while the node has no usable locator (keep the session-view locator then).
	LocalLocator wire.L64
	LocalIfIndex int
	LocalRouter  netip.Addr
	HasLocal     bool
	// RemoteLocator is the active remote locator (the last known one if all have expired).
	RemoteLocator wire.L64
	// RemoteLocators is the correspondent's current locator set, in the order received.
	RemoteLocators []RemoteLocator
	// LocalNonce goes into every packet we send; RemoteNonce is what packets from the peer
	// must carry (zero until learned).
	LocalNonce  wire.Nonce
	RemoteNonce wire.Nonce
	// Was, in Effects.Bindings, is the RemoteLocator of the binding handed out before this
	// one for the session (0: this is its first); zero elsewhere, and not part of Equal. The
	// daemon tells a correspondent's switch by it instead of keeping a copy of every
	// session's remote locator (issue 28).
	Was wire.L64
}

// Equal reports whether two bindings would program the datapath identically.
func (b Binding) Equal(o Binding) bool {
	return b.Peer == o.Peer && b.SessionLocal == o.SessionLocal && b.SessionRemote == o.SessionRemote &&
		b.LocalLocator == o.LocalLocator && b.LocalIfIndex == o.LocalIfIndex && b.LocalRouter == o.LocalRouter &&
		b.HasLocal == o.HasLocal && b.RemoteLocator == o.RemoteLocator && b.LocalNonce == o.LocalNonce &&
		b.RemoteNonce == o.RemoteNonce && slices.Equal(b.RemoteLocators, o.RemoteLocators)
}

// RemoteUsable reports whether loc is in the correspondent's current set in a usable state
// (Active or Valid): an LU outstanding to it can still arrive. When it is not (the
// correspondent's LU or the rendezvous no longer lists it: it left that network, as in a
// hard-handoff double jump), the daemon redirects the LU (lu.Engine.Redirect) to
// RemoteLocator at once instead of waiting for its next timeout.
func (b Binding) RemoteUsable(loc wire.L64) bool {
	for _, r := range b.RemoteLocators {
		if r.Locator == loc {
			return r.State.Usable()
		}
	}
	return false
}

// Ack is an LU-ACK to send in answer to an accepted LU: the same body with Operation 2 (RFC
// 6743 s.2), from our active I-LV with our nonce, back to the LU's source address.
type Ack struct {
	Peer    wire.NID
	Source  wire.ILV
	IfIndex int
	Nonce   wire.Nonce
	Update  wire.LocatorUpdate
}

// Event is one state change, for the event timeline and logs.
type Event struct {
	Kind    timeline.Kind
	Locator wire.L64
	Peer    wire.NID
	From    State
	To      State
	Detail  string
}

// Effects is what an operation changed and what the daemon must do about it.
type Effects struct {
	// LocalChanged: the local locator set or a local state changed; reprogram the datapath's
	// table of local locators from Locals().
	LocalChanged bool
	// Updates are LUs to start, one per correspondent (pass them to lu.Engine.Send).
	Updates []lu.Message
	// Acks are LU-ACKs to send now.
	Acks []Ack
	// Bindings are datapath entries to insert or replace, ordered by peer.
	Bindings []Binding
	// Removed are correspondents whose state is gone (idle expiry, closed): delete their
	// datapath entry and call lu.Engine.Forget.
	Removed []wire.NID
	// Events are the state changes, in the order they happened.
	Events []Event
}

// Empty reports whether nothing changed.
func (e Effects) Empty() bool {
	return !e.LocalChanged && len(e.Updates) == 0 && len(e.Acks) == 0 && len(e.Bindings) == 0 &&
		len(e.Removed) == 0 && len(e.Events) == 0
}

// Errors of ApplyLU and LearnRemoteNonce. Those for which IsSecurityEvent is true mean
// someone sent a message they had no right to: log a security event and count it.
var (
	ErrUnknownPeer      = errors.New("no ILNP session with this correspondent")
	ErrMissingNonce     = errors.New("no nonce option")
	ErrNonceMismatch    = errors.New("nonce does not match the session")
	ErrNoRemoteNonce    = errors.New("correspondent's nonce not learned yet")
	ErrNotAdvertisement = errors.New("not an LU advertisement")
	ErrNoLocators       = errors.New("LU lists no locator")
	ErrBadSession       = errors.New("invalid session")
	ErrBadLocator       = errors.New("invalid locator")
)

// PeerError is an error about one correspondent's message.
type PeerError struct {
	Peer wire.NID
	Op   string
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("%s from %v: %v", e.Op, e.Peer, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }

// IsSecurityEvent reports whether err means a message for an existing session failed the
// RFC 6744 nonce check (wrong or missing nonce): drop it and log a security event. An LU from
// a node with no session, or before its nonce is known, is dropped too but not reported as an
// attack: it happens innocently when an LU overtakes the session's first packet or arrives
// after the session idled out, and the sender's retransmission sorts it out.
func IsSecurityEvent(err error) bool {
	return errors.Is(err, ErrNonceMismatch) || errors.Is(err, ErrMissingNonce)
}
