// Package datapath loads and drives the ILNPv6 eBPF datapath (bpf/ilnp.c): two TCX programs per
// ILNP interface that translate between the addresses unmodified TCP/UDP sockets use (the
// session view) and ILNPv6 on the wire (RFC 6740/6741/6744; thesis 3.2.3-3.2.6).
//
// # Use (what ilnpd does)
//
//	d, err := datapath.Load(datapath.Options{PinDir: "/run/ilnpd/bpf"})
//	defer d.Close()
//	d.SetLocalNID(nid, identityL64)                 // the /128 on lo sockets bind to
//	d.PutLocalLocator(datapath.LocalLocator{Locator: l, State: datapath.LocatorActive,
//		Ifindex: ifi, NextHop: routerLinkLocal})   // per locator learned from an RA
//	d.SetActiveLocator(l)                           // a handoff flips this
//	d.PutPeer(datapath.Peer{Addr: aaaaLookalike, Locators: ...}) // from the resolver
//	d.Attach(ifi)                                   // every ILNP interface, in its netns
//	events, _ := d.Events(ctx)                      // new sessions, bad nonces, ...
//	d.SetRemoteLocators(remoteNID, set, active)     // after a Locator Update
//
// # Egress (session view -> wire)
//
// A packet whose <source NID, destination NID> names a session and whose locators are that
// session's view, or the first packet to a registered Peer (which opens the session), gets:
// source and destination locators rewritten to the active local locator (the session's own, else
// the host-wide one) and the active remote locator; an 8-byte Destination Options header with
// the nonce option (16 bytes for 12-byte nonces) right after the fixed IPv6 header, inserted
// with bpf_skb_adjust_room(BPF_ADJ_ROOM_NET, BPF_F_ADJ_ROOM_FIXED_GSO); the transport checksum
// fixed incrementally (bpf_l4_csum_replace with BPF_F_PSEUDO_HDR, BPF_F_MARK_MANGLED_0 for UDP);
// and, when the active local locator lives on another interface than the one the routing table
// chose, a bpf_redirect_neigh there with the router's link-local as explicit next hop (on the
// chosen interface the stack's link-layer header already points at its router). Everything else passes untouched (dual stack): other addresses between
// the same hosts, packets that already carry a nonce (our own after a redirect, or built by the
// daemon), sessions flagged SessionIPv6Fallback. Hop-by-Hop packets of a session are dropped
// (the nonce must come first but Hop-by-Hop must stay first, RFC 8200 s.4.1), as are malformed
// ones; never passed half rewritten.
//
// # Checksums
//
// TCP and UDP of an ILNP session use the RFC 6744 s.3 (RFC 6740/6741) pseudo-header in which
// both locators count as zero: the wire checksum is the same whatever locators the packet
// takes, so a locator change never touches it, and a receiver adds its own view back. ICMPv6,
// Locator Updates included, keeps the ordinary pseudo-header of the real addresses. Wireshark
// does not know the ILNP rule and reports every ILNP TCP/UDP checksum as bad (measured with
// tshark 4.0); the netns test checks those in Go and lets tshark judge the rest.
// Options.IPv6Checksums switches to draft-bhatti-ilnp-tcp-udp-checksums-00 (2026): TCP/UDP
// checksums as plain IPv6 computes them over the wire addresses (both ends must agree).
//
// # Ingress (wire -> session view)
//
// A packet with one nonce option is matched by <remote NID, nonce> (RFC 6741 s.5.4): the
// session of its two NIDs, whose remote nonce it must carry. It must arrive on a local locator that is Active or Valid (so the old locator
// keeps receiving during a soft handoff) and come from a remote locator of the session that is
// Active or Valid (Options.AcceptUnknownLocator relaxes this). The option is then removed (the
// whole header when it holds only the nonce, which is what senders do; otherwise the option
// becomes PadN in place), the locators are rewritten to the session view and the checksum fixed.
// Drops, each counted and reported as an Event: a wrong nonce for a known session, more than one
// nonce option (RFC 6744 s.3), an invalid local locator, an unknown remote locator, malformed
// packets that carry a nonce. Those events pass a token bucket per kind (map event_budget; over
// it they are counted as events_limited only), so a flood cannot fill the ring and push out
// the session events; an event the full ring refuses is counted as events_lost. A nonce-carrying packet from an unknown NID pair opens a responder
// session (EventSessionResponder) whose view is the local NID's identity locator and the remote
// locator it came from, unless Options.NewSessionsPerSecond is used up (a token bucket with one
// second's burst, map session_budget): then the packet is dropped and counted as
// ingress_sessions_limited, so a flood of made-up NIDs cannot fill the session table. An
// initiator session (opened by a Peer) learns the responder's nonce from
// the first reply (EventNonceLearned).
//
// Packets without a nonce are plain IPv6 and pass untouched (the thesis's choice of a nonce on
// every packet is what lets a receiver tell the two apart), except: a Locator Update (ICMPv6 156)
// without a nonce is dropped; a session flagged SessionStrict drops them; with
// Options.NonceFirstN (RFC 6744 s.6) packets from a session's locators after its handshake are
// translated without a nonce. ICMPv6 errors about this host's own packets (bpf/lib/icmperr.h)
// are accepted only when the packet they quote carries the session's local nonce (else
// ingress_icmp_error_bad_nonce, dropped): Packet Too Big is translated to the session view with
// its MTU less the nonce header (ingress_ptb_translated); when that leaves the view less than
// 1280 bytes, which the kernel will not take, the view gets 1280 and EventPathMTUBelowMin names
// the MTU it needs (ingress_ptb_below_min; ilnpd clamps the view by a host route, internal/pmtu).
// An ICMPv4 Fragmentation Needed about an encapsulated packet (its quote's inner ILNPv6 packet
// carrying the local nonce, its checksums right) becomes the view's ICMPv6 Packet Too Big, its
// MTU less UDP/IPv4 and the nonce header (ingress_frag_needed_translated). Parameter Problem code 2 pointing at
// the nonce option (a peer that is not ILNP, RFC 6744 s.6) flags the session and its Peer
// SessionIPv6Fallback at once, is reported as EventParamProblem and goes no further (it would
// fail the connection).
//
// # Locator Updates
//
// An incoming LU (ICMPv6 type 156) has its nonce verified and stripped like any packet but keeps
// its wire addresses and checksum, and is accepted from any source locator (it announces new
// ones): the daemon reads it from a raw ICMPv6 socket (filter type 156) and sees the
// locator it was sent from. Wrong or missing nonce: dropped here. An LU or LU-ACK that matches
// no session (not even an embryo) is dropped and counted (ingress_lu_no_session): it never
// opens one. To send one, the daemon writes
// the LU to the peer's session-view address from its own: the egress program inserts the nonce,
// rewrites the locators to the active ones (so the LU leaves from the new locator), fixes the
// ICMPv6 checksum and redirects it. A daemon that builds the nonce header itself (IPV6_DSTOPTS)
// is passed untouched.
//
// # Nonces
//
// Sessions the daemon creates get a crypto/rand nonce (PutSession fills a zero LocalNonce).
// Sessions the datapath opens itself take theirs from the queue map nonce_pool, which Load fills
// from crypto/rand and Events tops up after every new session (RefillNonces does it on demand),
// because bpf_get_prandom_u32 is not unpredictable enough for RFC 6744 s.7. If the pool runs dry
// the datapath falls back to prandom, flags the session SessionWeakNonce and emits
// EventNoncePoolEmpty. Options.EchoNonce makes a responder echo the initiator's nonce (the
// thesis's Linux code) instead of using its own.
//
// # Maps (bpf/lib/maps.h), pinned by name under Options.PinDir
//
//	config_map      array[1]  active local locator, nonce size, first-N, flags, session rate
//	session_budget  array[1]  token bucket for new responder sessions (not pinned)
//	event_budget    array     token bucket per security event kind (not pinned)
//	remote_pins     hash      session key -> remote locator held in a soft switch (not pinned)
//	local_nids      hash      NID -> identity locator
//	local_locators  hash      L64 -> state, ifindex, next hop
//	sessions        hash      <local NID, remote NID> -> views, active locators, first two remote
//	                          locators, local/remote nonce, flags, packet counters, timestamps
//	remote_more     hash      session key -> its remote locators 3 to 8 (sessions with more than 2)
//	peers           hash      session-view address -> remote locator set, flags
//	nonce_pool      queue     crypto/rand nonces
//	counters        percpu    named counters (CounterNames)
//	events          ringbuf   Event records
//
// Locators and NIDs are stored in network byte order. Maps pinned by an earlier run are reused
// (sessions survive a daemon restart); Close unpins them unless Options.KeepPinned, which also
// pins the TCX links so the datapath runs on after the process, and the next Attach takes them
// over by a link update (pin.go). A layout record pinned beside the maps (Layout) makes a binary
// with another map layout refuse them (ErrLayoutMismatch); Flush removes everything. ip netns
// exec remounts /sys, so the daemon uses a bpffs of its own for PinDir. OpenPinned gives a tool
// (ilnpctl) the same API over a running daemon's pinned maps, without programs.
//
// # What the host must provide (the daemon's job; measured in platform.md)
//
//   - 8 bytes (16 for 12-byte nonces) of MTU headroom towards ILNP peers, e.g. routes with
//     mtu 1492 advmss 1432: a full-size non-GSO packet would grow to 1508 bytes and veth drops
//     it without a Packet Too Big.
//   - The socket-visible identity address as a /128 on lo, so sockets survive their interface
//     going down (the kernel deletes its addresses and drops packets for them otherwise).
//   - Per local locator, the interface and the router's link-local (LocalLocator.NextHop):
//     with no next hop bpf_redirect_neigh's FIB lookup honours the source address and may pick
//     the wrong device.
//   - Routes for peers' session-view addresses via a router, not on-link, and on each interface
//     via the router given as that interface's locators' NextHop: the stack resolves the view
//     address's neighbour before the tc hook runs, and a packet that stays on its interface keeps
//     that link-layer header.
//   - A kernel bug on forwarding routers: ip6_forward computes the segment length of a TSO/GRO
//     super-packet carrying the nonce header as if TCP followed the fixed header (it reads the
//     data offset from the option bytes) and drops it as too big, depending on the sequence
//     number (multi-second stalls). Work around it with TSO off on the hosts' egress interfaces
//     (GSO stays on: software segmentation after the tc hook) or router links with MTU 1600.
//     The netns test uses the first (it also turns TX checksum offload off so captured
//     checksums are final), the throughput benchmark the second. The programs use FIXED_GSO, so
//     ILNP works with GSO on.
//   - IPv6 BIG TCP off on ILNP interfaces (gso_max_size <= 65536, the default): its
//     super-packets carry a Hop-by-Hop jumbo option and payload length 0, which the nonce cannot
//     precede; the datapath drops them for ILNP sessions (counted as malformed).
//   - After a flip to an interface whose router's neighbour entry is not resolved yet, packets
//     wait in the neighbour queue and a burst can overflow it: keep the routers' entries fresh
//     (they normally are, from RAs) or expect the LU retransmission to cover a loss.
//   - Unbound UDP servers answer from a source address the kernel picks; on a host with several
//     addresses that may not be the session view, and the reply leaves as plain IPv6. Servers
//     bind the identity address (or use IPV6_PKTINFO), as for any multihomed IPv6 host.
//
// First-N mode marks redirected nonce-less packets with skb->mark 0x494c4e50 so the egress hook
// of the target device does not translate them twice.
package datapath
