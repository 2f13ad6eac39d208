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

#define ILNP_CREDIT_FACTOR 3
/* Counted on top of skb->len for the nonce header the egress inserts afterwards (at most 16). */
#define ILNP_CREDIT_NONCE_ROOM 16

/* May this session send len bytes to *remote? 0: yes (*remote may have been replaced by a
 * verified locator), -1: no. */
static __always_inline int ilnp_unverified_credit(const struct ilnp_session_key *key,
						  const struct ilnp_session *sess, __be64 *remote,
						  __u64 len)
{
	struct ilnp_unverified_key uk = {.local_nid = key->local_nid, .remote_nid = key->remote_nid,
					 .l64 = *remote};
	struct ilnp_unverified *u = bpf_map_lookup_elem(&unverified, &uk);

	if (!u)
		return 0;
	len += ILNP_CREDIT_NONCE_ROOM;
	if (u->tx_bytes + len <= ILNP_CREDIT_FACTOR * u->rx_bytes) {
		__sync_fetch_and_add(&u->tx_bytes, len);
		return 0;
	}
	for (int i = 0; i < ILNP_MAX_REMOTE_LOCATORS; i++) {
		__be64 l = sess->remote[i].l64;

		if (!l || l == *remote || !ilnp_locator_usable(sess->remote[i].state))
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

/* A packet of the session arrived from src: it adds to src's credit if src is unverified. */
static __always_inline void ilnp_unverified_received(const struct ilnp_session_key *key,
						     __be64 src, __u64 len)
{
	struct ilnp_unverified_key uk = {.local_nid = key->local_nid, .remote_nid = key->remote_nid,
					 .l64 = src};
	struct ilnp_unverified *u = bpf_map_lookup_elem(&unverified, &uk);

	if (u)
		__sync_fetch_and_add(&u->rx_bytes, len);
}

#endif
