/* ILCC data-path lookups (RFC 6741 s.5.4) and sessions created by the data path. */
#ifndef ILNP_SESSION_H
#define ILNP_SESSION_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"
#include "observe.h"
#include "parse.h"

static __always_inline struct ilnp_config *ilnp_get_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&config_map, &zero);
}

static __always_inline int ilnp_locator_usable(__u32 state)
{
	return state == ILNP_LOC_ACTIVE || state == ILNP_LOC_VALID;
}

/* The session's remote locators past its own, if it has any. */
static __always_inline struct ilnp_remote_more *ilnp_remote_more(const struct ilnp_session_key *key,
								 const struct ilnp_session *sess)
{
	if (!(sess->flags & ILNP_SESS_MORE_REMOTE))
		return 0;
	return bpf_map_lookup_elem(&remote_more, key);
}

/* Is l64 in the session's remote locator set as active or valid? */
static __always_inline int ilnp_remote_locator_ok(const struct ilnp_session_key *key,
						  const struct ilnp_session *sess, __be64 l64)
{
	struct ilnp_remote_more *more;

	for (int i = 0; i < ILNP_SESSION_REMOTE_LOCATORS; i++) {
		if (sess->remote[i].l64 == l64 && ilnp_locator_usable(sess->remote[i].state))
			return 1;
	}
	more = ilnp_remote_more(key, sess);
	if (!more)
		return 0;
	for (int i = 0; i < ILNP_MORE_REMOTE_LOCATORS; i++) {
		if (more->remote[i].l64 == l64 && ilnp_locator_usable(more->remote[i].state))
			return 1;
	}
	return 0;
}

/* Remote locator i (0 .. ILNP_MAX_REMOTE_LOCATORS - 1) of the session, or 0. */
static __always_inline const struct ilnp_remote_locator *
ilnp_remote_at(const struct ilnp_session_key *key, const struct ilnp_session *sess, __u32 i)
{
	struct ilnp_remote_more *more;

	if (i < ILNP_SESSION_REMOTE_LOCATORS)
		return &sess->remote[i];
	i -= ILNP_SESSION_REMOTE_LOCATORS;
	if (i >= ILNP_MORE_REMOTE_LOCATORS)
		return 0;
	more = ilnp_remote_more(key, sess);
	if (!more)
		return 0;
	/* Keeps the index arithmetic after the null check (the verifier refuses it before). */
	asm volatile("" : "+r"(more));
	return &more->remote[i];
}

/* The remote locator a session's packets go to: its pinned one (remote_pins) while it is
 * flagged and that locator is still usable, else remote. */
static __always_inline __be64 ilnp_remote_pinned(const struct ilnp_session_key *key,
						 const struct ilnp_session *sess, __be64 remote)
{
	__be64 *pin;

	if (!(sess->flags & ILNP_SESS_REMOTE_PINNED))
		return remote;
	pin = bpf_map_lookup_elem(&remote_pins, key);
	if (!pin || !ilnp_remote_locator_ok(key, sess, *pin))
		return remote;
	return *pin;
}

static __always_inline int ilnp_local_locator_ok(__be64 l64)
{
	struct ilnp_local_locator *loc = bpf_map_lookup_elem(&local_locators, &l64);

	return loc && ilnp_locator_usable(loc->state);
}

/* A fresh local nonce: from the pool of crypto/rand nonces the daemon keeps filled; if it ran
 * dry, from bpf_get_prandom_u32 (not unpredictable enough for RFC 6744 s.7, so the session is
 * flagged and the daemon told). */
static __always_inline void ilnp_take_nonce(struct ilnp_session *s, __u32 len, struct ilnp_pkt *pkt)
{
	__u8 nonce[ILNP_NONCE_MAX];

	s->local_nonce_len = len == 12 ? 12 : 4;
	if (bpf_map_pop_elem(&nonce_pool, nonce) == 0) {
		__builtin_memcpy(s->local_nonce, nonce, ILNP_NONCE_MAX);
		return;
	}
	__u32 r0 = bpf_get_prandom_u32(), r1 = bpf_get_prandom_u32(), r2 = bpf_get_prandom_u32();

	__builtin_memcpy(s->local_nonce, &r0, 4);
	__builtin_memcpy(s->local_nonce + 4, &r1, 4);
	__builtin_memcpy(s->local_nonce + 8, &r2, 4);
	s->flags |= ILNP_SESS_WEAK_NONCE;
	ilnp_count(ILNP_C_NONCE_POOL_EMPTY);
	ilnp_emit(ILNP_EV_NONCE_POOL_EMPTY, 0, pkt->ip6.src_nid, pkt->ip6.dst_nid,
		  (const __u8 *)&pkt->ip6.src_l64);
}

static __always_inline struct ilnp_session *ilnp_scratch_session(void)
{
	__u32 zero = 0;
	struct ilnp_session *s = bpf_map_lookup_elem(&scratch, &zero);

	if (s)
		__builtin_memset(s, 0, sizeof(*s));
	return s;
}

/* A multipath entry the daemon set for the session's key before the session (re)appeared. */
static __always_inline void ilnp_flag_multipath(const struct ilnp_session_key *key,
						struct ilnp_session *s)
{
	if (bpf_map_lookup_elem(&multipath, key))
		s->flags |= ILNP_SESS_MULTIPATH;
}

static __always_inline struct ilnp_session *ilnp_commit_session(const struct ilnp_session_key *key,
								struct ilnp_session *s)
{
	long err;

	ilnp_flag_multipath(key, s);
	/* NOEXIST: when two CPUs race, the first session wins and both use it. */
	err = bpf_map_update_elem(&sessions, key, s, BPF_NOEXIST);

	if (err == 0)
		ilnp_count(ILNP_C_SESSIONS_CREATED);
	else if (err != -17 /* EEXIST */)
		ilnp_count(ILNP_C_SESSIONS_FULL);
	return bpf_map_lookup_elem(&sessions, key);
}

/* May an incoming packet create one more session now? (ilnp_config.new_sessions_per_s) */
static __always_inline int ilnp_session_budget_take(const struct ilnp_config *cfg)
{
	struct ilnp_token_bucket *b;
	__u32 zero = 0;

	if (!cfg->new_sessions_per_s)
		return 1;
	b = bpf_map_lookup_elem(&session_budget, &zero);
	return b && ilnp_bucket_take(b, cfg->new_sessions_per_s);
}

/* The first nonce-carrying packet of a session we do not know (thesis 3.2.6: "for the first
 * packet in a flow, the host would create a new ILCC entry"). */
static __always_inline struct ilnp_session *
ilnp_new_responder(struct __sk_buff *skb, struct ilnp_pkt *pkt, const struct ilnp_config *cfg,
		   const struct ilnp_local_nid *nid, const struct ilnp_session_key *key)
{
	struct ilnp_session *s = ilnp_scratch_session();

	if (!s)
		return 0;
	s->local_view = nid->identity ? nid->identity : pkt->ip6.dst_l64;
	s->remote_view = pkt->ip6.src_l64;
	s->remote_active = pkt->ip6.src_l64;
	s->remote[0].l64 = pkt->ip6.src_l64;
	s->remote[0].state = ILNP_LOC_ACTIVE;
	s->remote_nonce_len = pkt->nonce_len;
	__builtin_memcpy(s->remote_nonce, pkt->nonce, ILNP_NONCE_MAX);
	s->flags = ILNP_SESS_RESPONDER;
	if (cfg->flags & ILNP_CFG_ECHO_NONCE) {
		s->local_nonce_len = pkt->nonce_len;
		__builtin_memcpy(s->local_nonce, pkt->nonce, ILNP_NONCE_MAX);
	} else {
		ilnp_take_nonce(s, cfg->nonce_len, pkt);
	}
	s->flags |= ILNP_SESS_EMBRYONIC;
	ilnp_flag_multipath(key, s);
	s->created_ns = bpf_ktime_get_ns();
	/* An embryo: no event. */
	if (bpf_map_update_elem(&embryos, key, s, BPF_NOEXIST) == 0) {
		ilnp_count(ILNP_C_SESSIONS_CREATED);
		ilnp_count(ILNP_C_EMBRYOS_CREATED);
	}
	return bpf_map_lookup_elem(&embryos, key);
}

static __always_inline int ilnp_nonce_eq(const __u8 *a, __u8 alen, const __u8 *b, __u8 blen)
{
	__u8 diff = alen ^ blen;

	for (int i = 0; i < ILNP_NONCE_MAX; i++)
		diff |= (i < alen) ? a[i] ^ b[i] : 0;
	return diff == 0;
}

/* The embryo of this packet's session, if its nonce is the one the embryo was created with
 * (*bad set otherwise). */
static __always_inline struct ilnp_session *ilnp_embryo_match(const struct ilnp_session_key *key,
							      const struct ilnp_pkt *pkt, int *bad)
{
	struct ilnp_session *e = bpf_map_lookup_elem(&embryos, key);

	*bad = 0;
	if (!e)
		return 0;
	if (!ilnp_nonce_eq(e->remote_nonce, e->remote_nonce_len, pkt->nonce, pkt->nonce_len)) {
		*bad = 1;
		return 0;
	}
	return e;
}

static __always_inline int ilnp_is_echo_reply(const struct ilnp_pkt *pkt)
{
	return pkt->l4_proto == ILNP_NH_ICMPV6 && pkt->l4_off && pkt->icmp_type == 129;
}

/* Packets the stack sends to anyone who asks, without an application choosing to talk: ICMPv6
 * errors, TCP SYN-ACKs and RSTs. A spoofed packet can draw them out, so they prove nothing
 * about the session. (Echo replies promote, into the bounded unproven_pool only: ping is how
 * people use a session, and ping flows must move.) */
static __always_inline int ilnp_mechanical_answer(struct __sk_buff *skb, const struct ilnp_pkt *pkt)
{
	__u8 tcp_flags;

	if (pkt->l4_proto == ILNP_NH_ICMPV6)
		return pkt->icmp_type < 128;
	/* Read here, not by ilnp_parse: only a packet on an embryo needs them. ilnp_parse saw
	 * the whole TCP header within the packet. */
	if (pkt->l4_proto == ILNP_NH_TCP && pkt->l4_off && !pkt->malformed &&
	    bpf_skb_load_bytes(skb, pkt->l4_off + 13, &tcp_flags, 1) == 0)
		return tcp_flags & (ILNP_TCP_SYN | ILNP_TCP_RST);
	return 0;
}

/* This host sends on an embryo. A mechanical answer goes out through the embryo as it is;
 * anything else means an application wants the session, so it moves into the session table
 * and the daemon is told (ILCC entry, route). If the table is full the
 * embryo keeps serving, so the packet still goes out. */
static __always_inline struct ilnp_session *ilnp_promote_embryo(struct __sk_buff *skb,
								const struct ilnp_session_key *key,
								const struct ilnp_pkt *pkt,
								struct ilnp_session *e)
{
	struct ilnp_unproven_pool *pool = 0;
	struct ilnp_session *s;
	__u32 zero = 0;

	if (ilnp_is_echo_reply(pkt)) {
		pool = bpf_map_lookup_elem(&unproven_pool, &zero);
		if (!pool || pool->count >= pool->max) {
			ilnp_count(ILNP_C_UNPROVEN_POOL_FULL);
			return e;
		}
		e->flags |= ILNP_SESS_UNPROVEN;
	}
	e->flags &= ~ILNP_SESS_EMBRYONIC;
	if (bpf_map_update_elem(&sessions, key, e, BPF_NOEXIST) != 0) {
		e->flags |= ILNP_SESS_EMBRYONIC;
		e->flags &= ~ILNP_SESS_UNPROVEN;
		ilnp_count(ILNP_C_SESSIONS_FULL);
		return e;
	}
	if (pool)
		__sync_fetch_and_add(&pool->count, 1);
	s = bpf_map_lookup_elem(&sessions, key);
	if (!s)
		return e;
	bpf_map_delete_elem(&embryos, key);
	ilnp_count(ILNP_C_EMBRYOS_PROMOTED);
	ilnp_emit(ILNP_EV_SESSION_RESPONDER, skb->ifindex, key->local_nid, key->remote_nid,
		  (const __u8 *)&pkt->ip6.src_l64);
	return s;
}

/* The first packet to an ILNP peer known from name resolution (thesis 3.2.3/3.2.5). */
static __always_inline struct ilnp_session *
ilnp_new_initiator(struct __sk_buff *skb, struct ilnp_pkt *pkt, const struct ilnp_config *cfg,
		   const struct ilnp_session_key *key, const __u8 *nonce, __u8 nonce_len)
{
	struct ilnp_peer_key pk = {.l64 = pkt->ip6.dst_l64, .nid = pkt->ip6.dst_nid};
	struct ilnp_peer *peer = bpf_map_lookup_elem(&peers, &pk);
	struct ilnp_session *s;

	if (!peer || !bpf_map_lookup_elem(&local_nids, &key->local_nid))
		return 0;
	s = ilnp_scratch_session();
	if (!s)
		return 0;
	s->local_view = pkt->ip6.src_l64;
	s->remote_view = pkt->ip6.dst_l64;
	s->remote_active = peer->remote_active ? peer->remote_active : pkt->ip6.dst_l64;
	__builtin_memcpy(s->remote, peer->remote, sizeof(s->remote));
	s->flags = (peer->flags & ~(ILNP_SESS_RESPONDER | ILNP_SESS_MORE_REMOTE)) | ILNP_SESS_INITIATOR;
	if (peer->remote[ILNP_SESSION_REMOTE_LOCATORS].l64) {
		/* Before the session: the packet path never sees the flag without the entry. */
		if (bpf_map_update_elem(&remote_more, key, &peer->remote[ILNP_SESSION_REMOTE_LOCATORS],
					BPF_ANY) == 0)
			s->flags |= ILNP_SESS_MORE_REMOTE;
		else
			ilnp_count(ILNP_C_REMOTE_MORE_FULL);
	}
	if (nonce && nonce_len) {
		s->local_nonce_len = nonce_len;
		__builtin_memcpy(s->local_nonce, nonce, ILNP_NONCE_MAX);
	} else {
		ilnp_take_nonce(s, cfg->nonce_len, pkt);
	}
	if (cfg->flags & ILNP_CFG_ECHO_NONCE) {
		s->remote_nonce_len = s->local_nonce_len;
		__builtin_memcpy(s->remote_nonce, s->local_nonce, ILNP_NONCE_MAX);
	}
	s->created_ns = bpf_ktime_get_ns();
	s = ilnp_commit_session(key, s);
	ilnp_emit(ILNP_EV_SESSION_INITIATOR, skb->ifindex, key->local_nid, key->remote_nid,
		  (const __u8 *)&pkt->ip6.src_l64);
	return s;
}

/* This host sends on an embryo (the egress found no session). An embryo's nonce and locator
 * came from whoever knew the two NIDs, so when the destination is a peer this host knows from
 * name resolution the embryo is not promoted: the packet opens an initiator session with the
 * peer's own locators, which learns the peer's nonce from them (thesis 3.2.5). Our nonce stays
 * the embryo's if the embryo's answers went to this very address (the real peer may have
 * learned it from them); else it is a fresh one. Otherwise the embryo is promoted, or serves a
 * mechanical answer. */
static __always_inline struct ilnp_session *
ilnp_session_from_embryo(struct __sk_buff *skb, const struct ilnp_session_key *key,
			 struct ilnp_pkt *pkt, const struct ilnp_config *cfg)
{
	struct ilnp_peer_key pk = {.l64 = pkt->ip6.dst_l64, .nid = pkt->ip6.dst_nid};
	struct ilnp_session *e = bpf_map_lookup_elem(&embryos, key);
	__u8 nonce[ILNP_NONCE_MAX];
	__u8 nonce_len = 0;

	if (!e || ilnp_mechanical_answer(skb, pkt))
		return e;
	if (!bpf_map_lookup_elem(&peers, &pk))
		return ilnp_promote_embryo(skb, key, pkt, e);
	if (e->remote_view == pkt->ip6.dst_l64 && !(e->flags & ILNP_SESS_WEAK_NONCE))
		nonce_len = e->local_nonce_len;
	__builtin_memcpy(nonce, e->local_nonce, ILNP_NONCE_MAX);
	bpf_map_delete_elem(&embryos, key);
	ilnp_count(ILNP_C_EMBRYOS_TO_INITIATOR);
	return ilnp_new_initiator(skb, pkt, cfg, key, nonce, nonce_len);
}

#endif
