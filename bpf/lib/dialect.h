/* Peer dialects in the packet path (internal/dialect): FreeBSD ILNP's one nonce per session.
 *
 * FreeBSD ILNP keeps ONE nonce per correspondent for both directions. When it opens a session
 * it sends its own and, on our first reply, replaces it by ours (ilnp-freebsd14,
 * sys/netinet6/ilnp6.c ilnp6_nonce_input "Case 2"), so its next packets carry the nonce this
 * host sends it. Such a packet proves what any nonce proves (its sender saw this session's
 * packets), so a session this host did not open switches to expecting that nonce, once,
 * within its first packets; anything else with a wrong nonce stays a bad nonce.
 */
#ifndef ILNP_DIALECT_H
#define ILNP_DIALECT_H

#include "maps.h"
#include "observe.h"
#include "session.h"

#define ILNP_SHARED_NONCE_WINDOW 16 /* packets received before the switch is refused */

/* 1: s (a responder session or an embryo) now expects its own local nonce from the peer. */
static __always_inline int ilnp_adopt_shared_nonce(struct ilnp_session *s, const struct ilnp_pkt *pkt)
{
	if (!(s->flags & ILNP_SESS_RESPONDER) || (s->flags & ILNP_SESS_SHARED_NONCE) ||
	    s->rx_packets >= ILNP_SHARED_NONCE_WINDOW || !s->local_nonce_len ||
	    !ilnp_nonce_eq(s->local_nonce, s->local_nonce_len, pkt->nonce, pkt->nonce_len))
		return 0;
	/* What the packet carried: bytes past the length are zero (the pool fills all 12 bytes
	 * of a 4-byte local nonce). */
	s->remote_nonce_len = s->local_nonce_len;
	for (int i = 0; i < ILNP_NONCE_MAX; i++)
		s->remote_nonce[i] = i < s->local_nonce_len ? s->local_nonce[i] : 0;
	s->flags |= ILNP_SESS_SHARED_NONCE;
	ilnp_count(ILNP_C_IN_SHARED_NONCE);
	return 1;
}

#endif
