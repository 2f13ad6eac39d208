/* Locator verification against redirection ("bombing"): until a remote locator learned from a
 * Locator Update has echoed the daemon's challenge, a session sends to it at most three times
 * the bytes it received from it (QUIC's anti-amplification limit, RFC 9000 s.8.1). Beyond the
 * credit a packet goes to a verified usable locator of the session instead (the old one in a
 * soft handoff), or is dropped when there is none. */
#ifndef ILNP_VERIFY_H
#define ILNP_VERIFY_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"
#include "observe.h"
#include "session.h"
#include "encap.h"

#define ILNP_CREDIT_FACTOR 3
/* Counted on top of skb->len for the nonce header the egress inserts afterwards (at most 16). */
#define ILNP_CREDIT_NONCE_ROOM 16
/* A GSO packet leaves as gso_segs packets, each with its own headers, which skb->len counts
 * once: every further segment is charged the most its headers can be on the wire (Ethernet 14,
 * IPv6 40, TCP with options 60, nonce 16), so the credit bounds the bytes on the wire. */
#define ILNP_CREDIT_SEGMENT_ROOM (14 + 40 + 60 + ILNP_CREDIT_NONCE_ROOM)
#define ILNP_CREDIT_MAX_SEGS 65535
/* To an IPv4 locator every packet (every segment) also gets UDP/IPv4 around it (encap.h). */
#define ILNP_CREDIT_ENCAP_ROOM 28

/* The bytes a packet of len bytes in segs GSO segments (0 or 1: not GSO) puts on the wire, at
 * most; l32: it goes to an IPv4 locator. */
static __always_inline __u64 ilnp_credit_cost(__u64 len, __u32 segs, int l32)
{
	__u64 n = segs > 1 && segs <= ILNP_CREDIT_MAX_SEGS ? segs : 1;

	len += ILNP_CREDIT_NONCE_ROOM + (n - 1) * ILNP_CREDIT_SEGMENT_ROOM;
	if (l32)
		len += n * ILNP_CREDIT_ENCAP_ROOM;
	return len;
}

/* May this session send a packet of len bytes in segs GSO segments to *remote? 0: yes
 * (*remote may have been replaced by a verified locator), -1: no. exempt: a Locator Update or
 * its acknowledgement, which passes once the locator has sent anything: a node must be able to
 * tell a correspondent whose only locator is still unverified where it is (a hard handoff),
 * and each is one small message that a Locator Update or this node's own move caused, never a
 * flood (the LU engine's retransmissions back off exponentially). To a locator only announced
 * from elsewhere (a victim's, in a redirection) nothing passes. */
static __always_inline int ilnp_unverified_credit(const struct ilnp_session_key *key,
						  const struct ilnp_session *sess, __be64 *remote,
						  __u64 len, __u32 segs, int exempt)
{
	struct ilnp_unverified_key uk = {.local_nid = key->local_nid, .remote_nid = key->remote_nid,
					 .l64 = *remote};
	struct ilnp_unverified *u;

	if (!(sess->flags & ILNP_SESS_UNVERIFIED))
		return 0;
	u = bpf_map_lookup_elem(&unverified, &uk);
	if (!u)
		return 0;
	len = ilnp_credit_cost(len, segs, ilnp_is_l32(*remote));
	if (u->tx_bytes + len <= ILNP_CREDIT_FACTOR * u->rx_bytes || (exempt && u->rx_bytes)) {
		__sync_fetch_and_add(&u->tx_bytes, len);
		return 0;
	}
	for (__u32 i = 0; i < ILNP_MAX_REMOTE_LOCATORS; i++) {
		const struct ilnp_remote_locator *r = ilnp_remote_at(key, sess, i);
		__be64 l;

		if (!r)
			break;
		l = r->l64;
		if (!l || l == *remote || !ilnp_locator_usable(r->state))
			continue;
		uk.l64 = l;
		if (bpf_map_lookup_elem(&unverified, &uk))
			continue;
		*remote = l;
		ilnp_count(ILNP_C_EG_UNVERIFIED_REROUTED);
		return 0;
	}
	ilnp_count(ILNP_C_EG_UNVERIFIED_CREDIT);
	return -1;
}

/* A locator challenge the daemon sends through the session (to an IPv4 locator, which only
 * the egress can reach: it encapsulates) leaves to the remote locator its mark names, never
 * another: an echo of a challenge that went elsewhere would verify the wrong locator. The
 * daemon charges it to the credit itself. 1: a challenge, *remote set; 0: not one; -1: a
 * challenge for a slot that is empty now (dropped). */
static __always_inline int ilnp_challenge_remote(const struct __sk_buff *skb,
						 const struct ilnp_session_key *key,
						 const struct ilnp_session *sess, __be64 *remote)
{
	const struct ilnp_remote_locator *r;

	if ((skb->mark & ILNP_PROBE_MARK_MASK) != ILNP_CHALLENGE_MARK)
		return 0;
	r = ilnp_remote_at(key, sess, skb->mark & 0xff);
	if (!r || !r->l64)
		return -1;
	*remote = r->l64;
	return 1;
}

/* A packet of the session arrived from src: it adds to src's credit if src is unverified. */
static __always_inline void ilnp_unverified_received(const struct ilnp_session_key *key,
						     const struct ilnp_session *sess,
						     __be64 src, __u64 len)
{
	struct ilnp_unverified_key uk = {.local_nid = key->local_nid, .remote_nid = key->remote_nid,
					 .l64 = src};
	struct ilnp_unverified *u;

	if (!(sess->flags & ILNP_SESS_UNVERIFIED))
		return;
	u = bpf_map_lookup_elem(&unverified, &uk);
	if (u)
		__sync_fetch_and_add(&u->rx_bytes, len);
}

#endif
