package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/sys/unix"

	"ilnp/internal/wire"
)

// ErrNotFound is returned (wrapped) when a session, peer or locator does not exist.
var ErrNotFound = errors.New("not found")

// LocatorState is a locator's state in the ILCC (RFC 6741 s.5, thesis table 3.3).
type LocatorState uint32

// Locator states. Active and Valid locators are accepted on receipt; the Active one is used for
// sending. Aged and Expired ones are refused.
const (
	LocatorActive  LocatorState = 1
	LocatorValid   LocatorState = 2
	LocatorAged    LocatorState = 3
	LocatorExpired LocatorState = 4
)

func (s LocatorState) String() string {
	switch s {
	case LocatorActive:
		return "active"
	case LocatorValid:
		return "valid"
	case LocatorAged:
		return "aged"
	case LocatorExpired:
		return "expired"
	}
	return fmt.Sprintf("state(%d)", uint32(s))
}

func (s LocatorState) valid() bool { return s >= LocatorActive && s <= LocatorExpired }

// LocalLocator is one of this host's locators and where packets sent from it leave.
type LocalLocator struct {
	Locator wire.L64
	State   LocatorState
	// Ifindex is the interface the locator lives on: packets sent from it are redirected there.
	// 0 leaves them on the interface the routing table chose.
	Ifindex int
	// NextHop is the router's link-local address on that interface (bpf_redirect_neigh with an
	// explicit next hop). The zero Addr lets the kernel's FIB decide, which honours the packet's
	// source address and may pick the wrong device without source routes.
	NextHop netip.Addr
}

// RemoteLocator is one locator of a correspondent (from DNS or a Locator Update).
type RemoteLocator struct {
	Locator    wire.L64
	State      LocatorState
	Preference uint16
	Lifetime   uint16 // seconds, as in the Locator Update (informational here)
}

// MaxRemoteLocators is the size of a session's remote locator set in the datapath.
const MaxRemoteLocators = 8

// SessionFlags are per-session switches.
type SessionFlags uint32

// Session flags (bpf/lib/maps.h enum ilnp_session_flag).
const (
	SessionSoft         SessionFlags = 1 << 0 // soft handoff mode (informational)
	SessionIPv6Fallback SessionFlags = 1 << 1 // peer is not ILNP: send plain IPv6
	SessionStrict       SessionFlags = 1 << 2 // drop packets from the session that lack a nonce
	SessionResponder    SessionFlags = 1 << 3 // created by the datapath on a first incoming packet
	SessionInitiator    SessionFlags = 1 << 4 // created by the datapath on a first packet to a peer
	SessionWeakNonce    SessionFlags = 1 << 5 // nonce pool was empty: local nonce from prandom
	// SessionEmbryonic: a responder session this host has not answered yet (other than
	// mechanically): it lives in the embryos LRU map, not the session table.
	SessionEmbryonic SessionFlags = 1 << 6
	// SessionRemotePinned: the session's packets go to the remote locator SetSessionsRemote
	// pins them on, its Locator Updates and their ACKs to the active one.
	SessionRemotePinned SessionFlags = 1 << 7
	// SessionSharedNonce: the peer sends this host's nonce back, as FreeBSD ILNP does; the
	// session expects it (bpf/lib/dialect.h).
	SessionSharedNonce SessionFlags = 1 << 8
	// SessionMultipath and SessionUnverified are kept by the datapath package while the
	// session has a multipath entry (SetMultipath) or an unverified locator (PutUnverified):
	// the packet path reads those maps only for sessions flagged so. PutSession keeps them.
	SessionMultipath  SessionFlags = 1 << 9
	SessionUnverified SessionFlags = 1 << 10
	// SessionUnproven: promoted by an ICMPv6 Echo Reply, which the kernel sends to anyone: one
	// of the bounded unproven pool's until this host sends anything else on it.
	SessionUnproven SessionFlags = 1 << 11
	// SessionEncap6: some locator pair of the session may run ILNPv6 in UDP/IPv6 (Encap6Pairs);
	// the packet path looks the pairs up only for sessions flagged so.
	SessionEncap6 SessionFlags = 1 << 12
	// sessionMoreRemote: the session's remote locators past sessionRemoteLocators are in the
	// remote_more map (datapath-kept, from RemoteLocators).
	sessionMoreRemote SessionFlags = 1 << 13
)

// sessionRemoteLocators of a session's remote locators are kept in its session table entry,
// the rest in remote_more (bpf/lib/maps.h ILNP_SESSION_REMOTE_LOCATORS).
const sessionRemoteLocators = 2

// sessionMapFlags are the flags that mirror other maps' entries (datapath-kept).
const sessionMapFlags = SessionMultipath | SessionUnverified | SessionEncap6

var sessionFlagNames = []struct {
	f    SessionFlags
	name string
}{
	{SessionSoft, "soft"}, {SessionIPv6Fallback, "ipv6-fallback"}, {SessionStrict, "strict"},
	{SessionResponder, "responder"}, {SessionInitiator, "initiator"}, {SessionWeakNonce, "weak-nonce"},
	{SessionEmbryonic, "embryonic"}, {SessionRemotePinned, "remote-pinned"},
	{SessionSharedNonce, "shared-nonce"}, {SessionMultipath, "multipath"}, {SessionUnverified, "unverified"}, {SessionUnproven, "unproven"},
	{SessionEncap6, "encap6"},
}

// String lists the flags, comma separated ("" for none).
func (f SessionFlags) String() string {
	var names []string
	for _, n := range sessionFlagNames {
		if f&n.f != 0 {
			names = append(names, n.name)
			f &^= n.f
		}
	}
	if f != 0 {
		names = append(names, fmt.Sprintf("%#x", uint32(f)))
	}
	return strings.Join(names, ",")
}

// Session is the datapath's part of an ILCC entry, keyed by (LocalNID, RemoteNID).
type Session struct {
	LocalNID  wire.NID
	RemoteNID wire.NID
	// LocalView and RemoteView are the locators of the addresses the sockets use (the
	// session view); the datapath translates them to LocalLocator/RemoteActive on the wire.
	LocalView  wire.L64
	RemoteView wire.L64
	// LocalLocator is the locator this session sends from; 0 uses the host-wide active
	// locator (SetActiveLocator), which is what a handoff flips.
	LocalLocator wire.L64
	// RemoteActive is where packets are sent; 0 means RemoteView.
	RemoteActive wire.L64
	// RemoteLocators: packets are accepted from the Active and Valid ones (at most 8).
	RemoteLocators []RemoteLocator
	// LocalNonce is what this host sends; RemoteNonce is what it expects (RFC 6744: one per
	// direction). A zero RemoteNonce is learned from the first reply.
	LocalNonce  wire.Nonce
	RemoteNonce wire.Nonce
	Flags       SessionFlags

	// Read-only statistics kept by the datapath, CLOCK_MONOTONIC ns (LastTxNs and LastRxNs from
	// the coarse clock: a few ms resolution, enough for idle timers).
	TxPackets, RxPackets          uint64
	CreatedNs, LastTxNs, LastRxNs uint64
}

// LocalAddr is the session-view address of this host.
func (s Session) LocalAddr() netip.Addr {
	return wire.ILV{Locator: s.LocalView, NID: s.LocalNID}.Addr()
}

// RemoteAddr is the session-view address of the correspondent.
func (s Session) RemoteAddr() netip.Addr {
	return wire.ILV{Locator: s.RemoteView, NID: s.RemoteNID}.Addr()
}

// Peer is an ILNP correspondent known from name resolution: packets to Addr from one of this
// host's NIDs open an ILNP session.
type Peer struct {
	Addr     netip.Addr // the address the application uses ([L64:NID])
	Active   wire.L64   // 0: Addr's own locator
	Locators []RemoteLocator
	Flags    SessionFlags // copied into sessions opened to this peer
}

// EventType says what an Event reports.
type EventType uint32

// Event types (bpf/lib/maps.h enum ilnp_event_type).
const (
	EventSessionResponder    EventType = 1
	EventSessionInitiator    EventType = 2
	EventBadNonce            EventType = 3
	EventMissingNonce        EventType = 4
	EventMultipleNonces      EventType = 5
	EventUnknownLocator      EventType = 6
	EventInvalidLocalLocator EventType = 7
	EventParamProblem        EventType = 8
	EventNonceLearned        EventType = 9
	EventNoncePoolEmpty      EventType = 10
	// EventPathMTUBelowMin: a Packet Too Big quoting our nonce leaves the session view less
	// than the kernel's 1280-byte minimum (Event.MTU is what the view needs).
	EventPathMTUBelowMin EventType = 11
)

var eventNames = map[EventType]string{
	EventSessionResponder:    "session-responder",
	EventSessionInitiator:    "session-initiator",
	EventBadNonce:            "bad-nonce",
	EventMissingNonce:        "missing-nonce",
	EventMultipleNonces:      "multiple-nonces",
	EventUnknownLocator:      "unknown-locator",
	EventInvalidLocalLocator: "invalid-local-locator",
	EventParamProblem:        "parameter-problem",
	EventNonceLearned:        "nonce-learned",
	EventNoncePoolEmpty:      "nonce-pool-empty",
	EventPathMTUBelowMin:     "pmtu-below-min",
}

func (t EventType) String() string {
	if n, ok := eventNames[t]; ok {
		return n
	}
	return fmt.Sprintf("event(%d)", uint32(t))
}

// Event is one record from the datapath's ring buffer.
type Event struct {
	Type      EventType
	Ns        uint64 // CLOCK_MONOTONIC (bpf_ktime_get_ns)
	Ifindex   int
	LocalNID  wire.NID
	RemoteNID wire.NID
	Src, Dst  netip.Addr // the packet's addresses as seen on the wire
	MTU       int        // EventPathMTUBelowMin: the MTU the session view needs
}

// counterNames are the datapath counters in the order of enum ilnp_counter (bpf/lib/maps.h).
var counterNames = []string{
	"egress_packets",
	"egress_non_ipv6",
	"egress_pass_ipv6",
	"egress_pass_has_nonce",
	"egress_fallback_ipv6",
	"egress_ilnp",
	"egress_nonce_inserted",
	"egress_redirected",
	"egress_malformed",
	"egress_unsupported",
	"egress_errors",
	"ingress_packets",
	"ingress_non_ipv6",
	"ingress_pass_ipv6",
	"ingress_not_local_nid",
	"ingress_ilnp",
	"ingress_nonce_stripped",
	"ingress_no_nonce_accepted",
	"ingress_locator_updates",
	"ingress_bad_nonce",
	"ingress_missing_nonce",
	"ingress_multiple_nonces",
	"ingress_unknown_locator",
	"ingress_invalid_local_locator",
	"ingress_malformed",
	"ingress_fragments",
	"ingress_param_problems",
	"ingress_errors",
	"sessions_created",
	"nonce_pool_empty",
	"events_lost",
	"ingress_sessions_limited",
	"ingress_learn_refused",
	"embryos_created",
	"embryos_promoted",
	"sessions_full",
	"egress_unverified_rerouted",
	"egress_unverified_credit",
	"ingress_ptb_translated",
	"ingress_icmp_error_bad_nonce",
	"ingress_shared_nonce",
	"ingress_lu_no_session",
	"events_limited",
	"embryos_replaced",
	"embryos_to_initiator",
	"unproven_pool_full",
	"ingress_ptb_below_min",
	"ingress_frag_needed_translated",
	"egress_encap6",
	"egress_encap6_too_big",
	"egress_encap6_errors",
	"ingress_encap6",
	"ingress_encap6_bad_outer",
	"ingress_encap6_learned",
	"ingress_encap6_native",
	"remote_more_full",
}

// CounterNames lists the counter names Counters returns, in datapath order.
func CounterNames() []string { return append([]string(nil), counterNames...) }

// MonotonicNs is CLOCK_MONOTONIC in nanoseconds, the clock of Session's timestamps and
// Event.Ns (bpf_ktime_get_ns): idle time is MonotonicNs() - max(LastTxNs, LastRxNs).
func MonotonicNs() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano())
}
