// SPDX-License-Identifier: GPL-2.0
/* ILNPv6 datapath: tc (TCX) programs that translate between the session view the sockets see
 * and ILNPv6 on the wire (RFC 6740/6741/6744, thesis 3.2.5-3.2.6). */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/maps.h"
#include "lib/observe.h"
#include "lib/parse.h"
#include "lib/rewrite.h"
#include "lib/session.h"
#include "lib/encap.h"
#include "lib/encap6.h"
#include "lib/paths.h"
#include "lib/verify.h"
#include "lib/icmperr.h"
#include "lib/dialect.h"

/* TCX verdicts (enum tcx_action_base in newer uapi headers). NEXT lets later programs on the
 * same hook see the packet; that is how untouched packets leave. */
#define TCX_NEXT -1
#define TCX_PASS 0
#define TCX_DROP 2
#define TCX_REDIRECT 7

#define ILNP_AF_INET6 10

/* Marks a packet redirected without a nonce (first-N mode) so that the egress hook of the
 * device it is redirected to does not translate it a second time. Packets with a nonce are
 * recognised by the nonce itself. */
#define ILNP_REDIRECT_MARK 0x494c4e50 /* "ILNP" */

char LICENSE[] SEC("license") = "GPL";

/* Sends the translated packet out of the active local locator's interface when that is not the
 * one the routing table chose, via the locator's router (explicit next hop: with a NULL next hop
 * the FIB lookup honours the source address and may pick the wrong device, platform.md). On the
 * chosen interface the stack's link-layer header already points at the router for the view
 * address, which is the locator's router when the daemon's routes go via it. */
static __always_inline int ilnp_egress_redirect(struct __sk_buff *skb, __be64 local, int nonce)
{
	struct ilnp_local_locator *loc = bpf_map_lookup_elem(&local_locators, &local);
	struct bpf_redir_neigh nh = {.nh_family = ILNP_AF_INET6};
	__u64 *hop;

	if (!loc || !loc->ifindex || loc->ifindex == skb->ifindex)
		return TCX_PASS;
	if (!nonce)
		skb->mark = ILNP_REDIRECT_MARK;
	ilnp_count(ILNP_C_EG_REDIRECTED);
	hop = (__u64 *)loc->nexthop;
	if (hop[0] == 0 && hop[1] == 0)
		return bpf_redirect_neigh(loc->ifindex, 0, 0, 0);
	__builtin_memcpy(nh.ipv6_nh, loc->nexthop, 16);
	return bpf_redirect_neigh(loc->ifindex, &nh, sizeof(nh), 0);
}

SEC("tcx/egress")
int ilnp_egress(struct __sk_buff *skb)
{
	struct ilnp_pkt pkt = {};
	struct ilnp_session_key key;
	struct ilnp_session *sess;
	struct ilnp_config *cfg;

	if (ilnp_is_ipv6(skb) < 0) {
		ilnp_count(ILNP_C_EG_NON_IPV6);
		return TCX_NEXT;
	}
	if (skb->mark == ILNP_REDIRECT_MARK) {
		skb->mark = 0;
		return TCX_NEXT;
	}
	ilnp_count(ILNP_C_EG_PACKETS);
	cfg = ilnp_get_config();
	if (!cfg || ilnp_parse(skb, &pkt) < 0) {
		ilnp_count(ILNP_C_EG_PASS_IPV6);
		return TCX_NEXT;
	}
	if (pkt.nonces) {
		/* Already ILNP: redirected here by our own egress, or built by the daemon. */
		ilnp_count(ILNP_C_EG_PASS_HAS_NONCE);
		return TCX_NEXT;
	}

	key.local_nid = pkt.ip6.src_nid;
	key.remote_nid = pkt.ip6.dst_nid;
	sess = bpf_map_lookup_elem(&sessions, &key);
	if (!sess)
		sess = ilnp_session_from_embryo(skb, &key, &pkt, cfg);
	/* Only the session view is translated: the same hosts may talk plain IPv6 between other
	 * addresses (dual stack). */
	if (sess && (sess->local_view != pkt.ip6.src_l64 || sess->remote_view != pkt.ip6.dst_l64)) {
		ilnp_count(ILNP_C_EG_PASS_IPV6);
		return TCX_NEXT;
	}
	if (sess && pkt.l4_proto == ILNP_NH_ICMPV6 && ilnp_is_plain_probe(skb, &pkt)) {
		ilnp_count(ILNP_C_EG_PASS_IPV6);
		return TCX_NEXT;
	}
	if (!sess)
		sess = ilnp_new_initiator(skb, &pkt, cfg, &key, 0, 0);
	if (!sess) {
		ilnp_count(ILNP_C_EG_PASS_IPV6);
		return TCX_NEXT;
	}
	if (sess->flags & ILNP_SESS_IPV6_FALLBACK) {
		ilnp_count(ILNP_C_EG_FALLBACK_IPV6);
		return TCX_NEXT;
	}
	if ((sess->flags & ILNP_SESS_UNPROVEN) && !ilnp_mechanical_answer(skb, &pkt) && !ilnp_is_echo_reply(&pkt))
		sess->flags &= ~ILNP_SESS_UNPROVEN; /* this host chose to talk: out of the pool */
	if (pkt.malformed) {
		ilnp_count(ILNP_C_EG_MALFORMED);
		return TCX_DROP;
	}
	if (pkt.has_hbh) {
		/* Hop-by-Hop must stay first (RFC 8200 s.4.1) and the room helper only inserts
		 * right after the fixed header. */
		ilnp_count(ILNP_C_EG_UNSUPPORTED);
		return TCX_DROP;
	}

	__be64 view_src = pkt.ip6.src_l64, view_dst = pkt.ip6.dst_l64;
	/* Locator Updates and their ACKs follow the active locators even while the session's
	 * packets stay on pinned ones: a soft switch sends on the old path until the new one has
	 * answered (internal/tcpaware Pins; the correspondent's side, remote_pins). */
	int lu = ilnp_is_locator_update(&pkt);
	__be64 local = sess->local_locator && !lu ? sess->local_locator
		       : cfg->active_local   ? cfg->active_local
					     : view_src;
	__be64 remote = sess->remote_active ? sess->remote_active : view_dst;

	if (!lu)
		remote = ilnp_remote_pinned(&key, sess, remote);

	ilnp_multipath_pair(skb, &pkt, &key, sess, &local, &remote);
	ilnp_path_probe_pair(skb, &key, &local, &remote);
	int probe = ilnp_is_probe(skb, &pkt);
	if (probe)
		ilnp_probe_reply_pair(skb, &pkt, &key, sess, &local, &remote);
	int native = probe && (sess->flags & ILNP_SESS_ENCAP6) && ilnp_encap6_native_probe(skb, &pkt);
	int challenge = ilnp_challenge_remote(skb, &key, sess, &remote);

	if (challenge < 0) {
		ilnp_count(ILNP_C_EG_ERRORS);
		return TCX_DROP;
	}
	if (!challenge && ilnp_unverified_credit(&key, sess, &remote, skb->len, skb->gso_segs, lu) < 0)
		return TCX_DROP;
	/* An IPv4 peer: UDP/IPv4 around the packet, and a nonce on every packet (encap.h). */
	int l32 = ilnp_is_l32(remote);
	int nonce = cfg->nonce_first_n == 0 || sess->tx_packets < cfg->nonce_first_n ||
		    pkt.l4_proto == ILNP_NH_ICMPV6 || l32;

	local = ilnp_encap_pick_local(local, remote);
	__u8 nonce_bytes[ILNP_NONCE_MAX];
	__u8 nonce_len = sess->local_nonce_len;
	__be64 pseudo_old[2] = {view_src, view_dst};
	__be64 pseudo_new[2] = {0, 0};

	__builtin_memcpy(nonce_bytes, sess->local_nonce, ILNP_NONCE_MAX);
	if (pkt.l4_proto == ILNP_NH_ICMPV6 || (cfg->flags & ILNP_CFG_IPV6_CHECKSUM)) {
		pseudo_new[0] = local;
		pseudo_new[1] = remote;
	}
	if (ilnp_encap(skb, &pkt, local, remote, pseudo_old, pseudo_new, nonce_bytes,
		       nonce ? nonce_len : 0) < 0) {
		ilnp_count(ILNP_C_EG_ERRORS);
		return TCX_DROP;
	}
	__u64 now = bpf_ktime_get_coarse_ns();

	if (!probe) {
		__sync_fetch_and_add(&sess->tx_packets, 1);
		sess->last_tx_ns = now;
	}
	if (ilnp_path_proven(sess))
		ilnp_path_tx(&key, sess, cfg, local, remote, skb->len, probe, now);
	ilnp_count(ILNP_C_EG_ILNP);
	if (nonce)
		ilnp_count(ILNP_C_EG_NONCE_INSERTED);
	if (l32)
		return ilnp_encap_egress(skb, local, remote);
	if (sess->flags & ILNP_SESS_ENCAP6) {
		struct ilnp_encap6_pair *e6 = ilnp_encap6_wanted(&key, local, remote, native);

		if (e6)
			return ilnp_encap6_egress(skb, &key, e6, local, remote);
	}
	return ilnp_egress_redirect(skb, local, nonce);
}

/* The pseudo-header locators before and after translating back to the session view. */
static __always_inline void ilnp_view_pseudo(const struct ilnp_pkt *pkt,
					     const struct ilnp_session *sess,
					     const struct ilnp_config *cfg, __be64 *pseudo_old,
					     __be64 *pseudo_new)
{
	pseudo_old[0] = 0;
	pseudo_old[1] = 0;
	if (pkt->l4_proto == ILNP_NH_ICMPV6 || (cfg->flags & ILNP_CFG_IPV6_CHECKSUM)) {
		pseudo_old[0] = pkt->ip6.src_l64;
		pseudo_old[1] = pkt->ip6.dst_l64;
	}
	pseudo_new[0] = sess->remote_view;
	pseudo_new[1] = sess->local_view;
}

/* Packets without the nonce that are not the session's: ICMPv6 errors (a router's, RFC 4443
 * s.2.1: types below 128), Neighbour Discovery (RFC 4861, types 133-137), and Echo Request and
 * Reply, which locator verification sends to [locator:NID] as plain IPv6 past the session
 * (internal/node/locverify.go) and which carry no session data. */
static __always_inline int ilnp_not_peers_packet(const struct ilnp_pkt *pkt)
{
	if (pkt->l4_proto != ILNP_NH_ICMPV6 || !pkt->l4_off)
		return 0;
	return pkt->icmp_type <= 129 || (pkt->icmp_type >= 133 && pkt->icmp_type <= 137);
}

/* A packet without a nonce: plain IPv6, unless it claims to be part of an ILNP session. */
static __always_inline int ilnp_ingress_plain(struct __sk_buff *skb, struct ilnp_pkt *pkt,
					      const struct ilnp_config *cfg)
{
	struct ilnp_session_key key = {.local_nid = pkt->ip6.dst_nid, .remote_nid = pkt->ip6.src_nid};
	const __u8 *addrs = (const __u8 *)&pkt->ip6.src_l64;
	struct ilnp_session *sess;

	if (pkt->l4_proto == ILNP_NH_ICMPV6 && pkt->l4_off && !pkt->malformed) {
		if (pkt->icmp_type == ILNP_ICMPV6_PKT_TOO_BIG ||
		    (pkt->icmp_type == ILNP_ICMPV6_PARAM_PROBLEM && pkt->icmp_code == 2)) {
			int v = ilnp_icmp_error(skb, pkt);

			if (v != ILNP_ICMPERR_NOT_OURS)
				return v == ILNP_ICMPERR_PASS ? TCX_NEXT : TCX_DROP;
		}
		if (pkt->icmp_type == ILNP_ICMPV6_LOCATOR_UPDATE) {
			/* RFC 6743 s.2: a Locator Update always carries the session's nonce. */
			ilnp_count(ILNP_C_IN_MISSING_NONCE);
			ilnp_emit(ILNP_EV_MISSING_NONCE, skb->ifindex, key.local_nid, key.remote_nid, addrs);
			return TCX_DROP;
		}
	}
	sess = bpf_map_lookup_elem(&sessions, &key);
	if (!sess || !ilnp_remote_locator_ok(&key, sess, pkt->ip6.src_l64) ||
	    !ilnp_local_locator_ok(pkt->ip6.dst_l64)) {
		ilnp_count(ILNP_C_IN_PASS_IPV6);
		return TCX_NEXT;
	}
	if (sess->flags & ILNP_SESS_STRICT) {
		ilnp_count(ILNP_C_IN_MISSING_NONCE);
		ilnp_emit(ILNP_EV_MISSING_NONCE, skb->ifindex, key.local_nid, key.remote_nid, addrs);
		return TCX_DROP;
	}
	if (!cfg->nonce_first_n && !(sess->flags & ILNP_SESS_IPV6_FALLBACK) &&
	    !ilnp_not_peers_packet(pkt)) {
		/* RFC 6744 s.6: the peer puts the nonce on every packet of the session, so one
		 * without it between the session's NIDs and locators is forged (a blind attacker
		 * needs only the addresses). Plain IPv6 with the same host goes between other
		 * addresses, or once the session fell back (Parameter Problem). */
		ilnp_count(ILNP_C_IN_MISSING_NONCE);
		ilnp_emit(ILNP_EV_MISSING_NONCE, skb->ifindex, key.local_nid, key.remote_nid, addrs);
		return TCX_DROP;
	}
	if (!cfg->nonce_first_n || !sess->remote_nonce_len) {
		ilnp_count(ILNP_C_IN_PASS_IPV6);
		return TCX_NEXT;
	}
	/* RFC 6744 s.6 "first N packets" mode: the session's later packets carry no nonce. */
	if (pkt->malformed) {
		ilnp_count(ILNP_C_IN_MALFORMED);
		return TCX_DROP;
	}
	__be64 pseudo_old[2], pseudo_new[2];

	ilnp_view_pseudo(pkt, sess, cfg, pseudo_old, pseudo_new);
	if (ilnp_rewrite(skb, pkt, sess->remote_view, sess->local_view, pseudo_old, pseudo_new) < 0) {
		ilnp_count(ILNP_C_IN_ERRORS);
		return TCX_DROP;
	}
	__sync_fetch_and_add(&sess->rx_packets, 1);
	sess->last_rx_ns = bpf_ktime_get_coarse_ns();
	ilnp_count(ILNP_C_IN_NO_NONCE_ACCEPTED);
	ilnp_count(ILNP_C_IN_ILNP);
	return TCX_NEXT;
}

static __always_inline int ilnp_ingress_ipv6(struct __sk_buff *skb, struct ilnp_encap_rx *rx)
{
	struct ilnp_pkt pkt = {};
	struct ilnp_session_key key;
	struct ilnp_session *sess = 0, *known;
	struct ilnp_local_locator *loc;
	struct ilnp_local_nid *nid = 0;
	struct ilnp_config *cfg;
	const __u8 *addrs;
	int learn = 0, is_lu, bad = 0;

	if (ilnp_is_ipv6(skb) < 0) {
		ilnp_count(ILNP_C_IN_NON_IPV6);
		return TCX_NEXT;
	}
	ilnp_count(ILNP_C_IN_PACKETS);
	cfg = ilnp_get_config();
	if (!cfg || ilnp_parse(skb, &pkt) < 0) {
		/* Not readable as IPv6: the stack drops it on its own. */
		ilnp_count(ILNP_C_IN_MALFORMED);
		return TCX_NEXT;
	}
	if (ilnp_encap_rx_locators(skb, &pkt, cfg, rx) < 0)
		return TCX_DROP;
	if (pkt.fragment)
		ilnp_count(ILNP_C_IN_FRAGMENTS);
	addrs = (const __u8 *)&pkt.ip6.src_l64;
	if (pkt.nonces == 0) {
		if (pkt.malformed)
			ilnp_count(ILNP_C_IN_MALFORMED);
		return ilnp_ingress_plain(skb, &pkt, cfg);
	}
	if (pkt.nonces > 1) {
		/* RFC 6744 s.3: at most one nonce option per packet. */
		ilnp_count(ILNP_C_IN_MULTIPLE_NONCES);
		ilnp_emit(ILNP_EV_MULTIPLE_NONCES, skb->ifindex, pkt.ip6.dst_nid, pkt.ip6.src_nid, addrs);
		return TCX_DROP;
	}
	if (pkt.malformed) {
		ilnp_count(ILNP_C_IN_MALFORMED);
		return TCX_DROP;
	}
	/* RFC 6741 s.5.4: <remote NID, nonce> finds the session. A session is keyed by its two
	 * NIDs, so the packet's pair finds the only candidate and its nonce is compared: one
	 * lookup, no index to keep beside the table. */
	key.local_nid = pkt.ip6.dst_nid;
	key.remote_nid = pkt.ip6.src_nid;
	known = bpf_map_lookup_elem(&sessions, &key);
	if (known && known->remote_nonce_len &&
	    ilnp_nonce_eq(known->remote_nonce, known->remote_nonce_len, pkt.nonce, pkt.nonce_len))
		sess = known;
	if (!sess) {
		/* Not one of our sessions: is it for us at all? (A session is always ours.) */
		nid = bpf_map_lookup_elem(&local_nids, &pkt.ip6.dst_nid);
		if (!nid) {
			ilnp_count(ILNP_C_IN_NOT_LOCAL_NID);
			return TCX_NEXT;
		}
	}
	/* Accepted on any valid local locator: the old one during a soft handoff too. */
	loc = bpf_map_lookup_elem(&local_locators, &pkt.ip6.dst_l64);
	if (!loc || !ilnp_locator_usable(loc->state)) {
		ilnp_count(ILNP_C_IN_INVALID_LOCAL_LOCATOR);
		ilnp_emit(ILNP_EV_INVALID_LOCAL_LOCATOR, skb->ifindex, pkt.ip6.dst_nid, pkt.ip6.src_nid, addrs);
		return TCX_DROP;
	}
	is_lu = ilnp_is_locator_update(&pkt);
	if (!sess) {
		sess = known;
		if (sess && sess->remote_nonce_len) {
			if (!ilnp_adopt_shared_nonce(sess, &pkt)) {
				ilnp_count(ILNP_C_IN_BAD_NONCE);
				ilnp_emit(ILNP_EV_BAD_NONCE, skb->ifindex, key.local_nid, key.remote_nid, addrs);
				return TCX_DROP;
			}
			ilnp_emit(ILNP_EV_NONCE_LEARNED, skb->ifindex, key.local_nid, key.remote_nid, addrs);
		} else if (sess) {
			learn = 1; /* our own session, waiting for the responder's first nonce */
		} else {
			sess = ilnp_embryo_match(&key, &pkt, &bad);
			if (bad) {
				sess = bpf_map_lookup_elem(&embryos, &key);
				if (sess && ilnp_adopt_shared_nonce(sess, &pkt))
					bad = 0;
				else
					sess = 0;
			}
		}
		if (!sess && is_lu) {
			/* RFC 6743 s.2-3: an LU updates a session; it never opens one (not even an
			 * embryo), or anyone could make this host believe and ACK made-up locators.
			 * One matching an embryo's nonce passes: the daemon holds it until this
			 * host answers (internal/node/luin.go). */
			ilnp_count(ILNP_C_IN_LU_NO_SESSION);
			return TCX_DROP;
		}
		if (!sess) {
			if (!ilnp_session_budget_take(cfg)) {
				ilnp_count(ILNP_C_IN_SESSIONS_LIMITED);
				return TCX_DROP;
			}
			if (bad) {
				/* Anyone who knows the two NIDs can make an embryo, so its nonce proves
				 * nothing: a first packet with another nonce replaces it (the latest
				 * wins, charged like a new session), and a squatter never locks the
				 * real peer out (RFC 6744 s.7). */
				ilnp_count(ILNP_C_EMBRYOS_REPLACED);
				bpf_map_delete_elem(&embryos, &key);
			}
			sess = nid ? ilnp_new_responder(skb, &pkt, cfg, nid, &key) : 0;
			if (!sess) {
				ilnp_count(ILNP_C_IN_ERRORS);
				return TCX_DROP;
			}
		}
	}

	if (learn && is_lu) {
		/* Nothing proves a nonce before it is learned, so only the locators the initiator
		 * itself chose (the responder's from name resolution) can vouch for the first
		 * one; an LU may come from anywhere and so never teaches it. */
		ilnp_count(ILNP_C_IN_LEARN_REFUSED);
		ilnp_emit(ILNP_EV_UNKNOWN_LOCATOR, skb->ifindex, key.local_nid, key.remote_nid, addrs);
		return TCX_DROP;
	}
	/* A Locator Update comes from a locator the session may not know yet: it announces it. */
	if (!is_lu && !ilnp_remote_locator_ok(&key, sess, pkt.ip6.src_l64)) {
		ilnp_emit(ILNP_EV_UNKNOWN_LOCATOR, skb->ifindex, key.local_nid, key.remote_nid, addrs);
		if (learn || !((cfg->flags & ILNP_CFG_ACCEPT_UNKNOWN_LOCATOR) || ilnp_encap_roaming(rx))) {
			ilnp_count(ILNP_C_IN_UNKNOWN_LOCATOR);
			return TCX_DROP;
		}
	}
	if (learn) {
		sess->remote_nonce_len = pkt.nonce_len;
		__builtin_memcpy(sess->remote_nonce, pkt.nonce, ILNP_NONCE_MAX);
		ilnp_emit(ILNP_EV_NONCE_LEARNED, skb->ifindex, key.local_nid, key.remote_nid, addrs);
	}

	/* Locator Updates keep their wire addresses and their (now verified) nonce: the daemon
	 * reads them from a raw ICMPv6 socket and needs the locator they came from. */
	__be64 pseudo_old[2], pseudo_new[2];
	__be64 wire_src = pkt.ip6.src_l64; /* decap rewrites pkt to the view */
	int err;
	__be64 wire_local = pkt.ip6.dst_l64, wire_remote = pkt.ip6.src_l64;
	int probe = ilnp_is_probe(skb, &pkt);

	ilnp_view_pseudo(&pkt, sess, cfg, pseudo_old, pseudo_new);
	if (is_lu)
		err = ilnp_mark_nonce_verified(skb, &pkt);
	else
		err = ilnp_decap(skb, &pkt, sess->remote_view, sess->local_view, pseudo_old, pseudo_new);
	if (err < 0) {
		ilnp_count(ILNP_C_IN_ERRORS);
		return TCX_DROP;
	}
	__u64 now = bpf_ktime_get_coarse_ns();

	if (!probe) {
		__sync_fetch_and_add(&sess->rx_packets, 1);
		sess->last_rx_ns = now;
	}
	if (ilnp_path_proven(sess))
		ilnp_path_rx(&key, sess, cfg, wire_local, wire_remote, skb->len, now);
	ilnp_unverified_received(&key, sess, wire_src, skb->len);
	ilnp_encap6_seen(&key, sess, rx, wire_local, wire_remote,
			 probe && pkt.icmp_type == ILNP_ICMPV6_ECHO_REQUEST, now);
	ilnp_count(ILNP_C_IN_NONCE_STRIPPED);
	ilnp_count(is_lu ? ILNP_C_IN_LOCATOR_UPDATES : ILNP_C_IN_ILNP);
	if (rx->state == ILNP_ENCAP_RX_DECAP)
		rx->state = ILNP_ENCAP_RX_ACCEPT;
	return TCX_NEXT;
}

SEC("tcx/ingress")
int ilnp_ingress(struct __sk_buff *skb)
{
	struct ilnp_encap_rx rx = {};

	/* An ICMPv4 error about our encapsulated packets becomes the view's ICMPv6 (icmperr.h);
	 * encapsulated data (UDP) pays one byte's load for it. */
	if (skb->protocol == bpf_htons(ILNP_ETH_P_IP)) {
		__u8 proto = 0;

		if (bpf_skb_load_bytes(skb, ILNP_ETH_HLEN + 9, &proto, 1) == 0 && proto == ILNP_NH_ICMPV4) {
			int v = ilnp_icmp4_error(skb);

			if (v != ILNP_ICMPERR_NOT_OURS)
				return v == ILNP_ICMPERR_PASS ? TCX_NEXT : TCX_DROP;
		}
	}
	/* ILNPv6 in UDP/IPv4 (encap.h) goes through the same checks once unwrapped. */
	if (ilnp_encap_ingress(skb, &rx) != 0 || ilnp_encap6_ingress(skb, &rx) != 0)
		return TCX_DROP;
	return ilnp_encap_rx_verdict(&rx, ilnp_ingress_ipv6(skb, &rx));
}
