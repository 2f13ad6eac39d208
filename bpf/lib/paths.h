/* Per locator pair accounting and liveness probes (internal/paths reads the paths map). */
#ifndef ILNP_PATHS_H
#define ILNP_PATHS_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"
#include "parse.h"
#include "session.h"
#include "encap.h"

/* The payload of a liveness probe (internal/node/paths.go): an ICMPv6 echo request carrying it,
 * and the peer kernel's echo reply, are the monitor's, not the application's: they touch
 * neither the session's counters nor its idle timer, so a probed session still ages out. */
#define ILNP_PROBE_PAYLOAD 0x68746170504e4c49ULL /* "ILNPpath" read as a little-endian u64 */

static __always_inline int ilnp_is_probe(struct __sk_buff *skb, const struct ilnp_pkt *pkt)
{
	__u64 data;

	if (pkt->l4_proto != ILNP_NH_ICMPV6 || !pkt->l4_off ||
	    (pkt->icmp_type != 128 && pkt->icmp_type != 129))
		return 0;
	if (bpf_skb_load_bytes(skb, pkt->l4_off + 8, &data, sizeof(data)) < 0)
		return 0;
	return data == ILNP_PROBE_PAYLOAD;
}

/* Pairs are counted only for sessions that proved two-way traffic: ours (initiator: it has
 * the peer's nonce once the peer answered) or a responder this host answered whose
 * correspondent then sent more than the packet that opened it (internal/node/unproven.go's
 * rule). A spoofed flood (one packet per made-up NID, answered or not) leaves no pair for
 * the daemon to list or probe. */
static __always_inline int ilnp_path_proven(const struct ilnp_session *sess)
{
	if (sess->flags & ILNP_SESS_EMBRYONIC)
		return 0;
	return !(sess->flags & ILNP_SESS_RESPONDER) || sess->rx_packets > 1;
}

static __always_inline struct ilnp_path_stats *
ilnp_path_get(const struct ilnp_session_key *key, __be64 local, __be64 remote)
{
	struct ilnp_path_key pk = {.local_nid = key->local_nid, .remote_nid = key->remote_nid,
				   .local_l64 = local, .remote_l64 = remote};
	struct ilnp_path_stats *st = bpf_map_lookup_elem(&paths, &pk);
	struct ilnp_path_stats zero = {};

	if (st)
		return st;
	bpf_map_update_elem(&paths, &pk, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&paths, &pk);
}

static __always_inline __u32 ilnp_pair_time(__u64 ns)
{
	__u32 t = ns >> ILNP_PAIR_TIME_SHIFT;

	return ns && !t ? 1 : t;
}

/* A pair time back in nanoseconds: the one nearest now with those low bits (another CPU's
 * packet may have stamped it a tick later than now). */
static __always_inline __u64 ilnp_pair_ns(__u32 t, __u64 now)
{
	__s64 u = now >> ILNP_PAIR_TIME_SHIFT;

	return t ? (__u64)(u - (__s32)((__u32)u - t)) << ILNP_PAIR_TIME_SHIFT : 0;
}

/* The pair the session's packets leave on when no multipath, probe or challenge chooses
 * another (bpf/ilnp.c egress); an IPv4 remote locator's local one is the encap's (encap.h). */
static __always_inline int ilnp_main_pair(const struct ilnp_session *sess,
					  const struct ilnp_config *cfg, __be64 local, __be64 remote)
{
	__be64 l = sess->local_locator ? sess->local_locator
		   : cfg->active_local ? cfg->active_local
				       : sess->local_view;
	__be64 r = sess->remote_active ? sess->remote_active : sess->remote_view;

	return remote == r && (local == l || ilnp_is_l32(r));
}

/* The session's own pair moves to (local, remote): its counters so far go to paths under the
 * pair they were counted on, and the new pair's, if paths has them, come into the session. */
static __always_inline void ilnp_pair_move(const struct ilnp_session_key *key,
					   struct ilnp_pair *p, __be64 local, __be64 remote,
					   __u64 now)
{
	struct ilnp_path_key pk = {.local_nid = key->local_nid, .remote_nid = key->remote_nid,
				   .local_l64 = p->local, .remote_l64 = p->remote};
	struct ilnp_path_stats st = {};

	if (p->local) {
		st.tx_packets = p->tx_packets;
		st.tx_bytes = p->tx_bytes;
		st.rx_packets = p->rx_packets;
		st.rx_bytes = p->rx_bytes;
		st.last_tx_ns = ilnp_pair_ns(p->last_tx, now);
		st.last_rx_ns = ilnp_pair_ns(p->last_rx, now);
		st.first_unanswered_ns = ilnp_pair_ns(p->first_unanswered, now);
		st.unanswered = p->unanswered;
		bpf_map_update_elem(&paths, &pk, &st, BPF_ANY);
	}
	pk.local_l64 = local;
	pk.remote_l64 = remote;
	struct ilnp_path_stats *old = bpf_map_lookup_elem(&paths, &pk);

	if (old) {
		p->tx_packets = old->tx_packets;
		p->tx_bytes = old->tx_bytes;
		p->rx_packets = old->rx_packets;
		p->rx_bytes = old->rx_bytes;
		p->last_tx = ilnp_pair_time(old->last_tx_ns);
		p->last_rx = ilnp_pair_time(old->last_rx_ns);
		p->first_unanswered = ilnp_pair_time(old->first_unanswered_ns);
		p->unanswered = old->unanswered;
		bpf_map_delete_elem(&paths, &pk);
	} else {
		p->tx_packets = 0;
		p->tx_bytes = 0;
		p->rx_packets = 0;
		p->rx_bytes = 0;
		p->last_tx = 0;
		p->last_rx = 0;
		p->first_unanswered = 0;
		p->unanswered = 0;
	}
	p->local = local;
	p->remote = remote;
}

/* The session's own counters when (local, remote) is its pair; else, when it is the main pair
 * (or none is counted yet), the session's pair moves to it (a move, once); else 0: paths. */
static __always_inline struct ilnp_pair *
ilnp_own_pair(const struct ilnp_session_key *key, struct ilnp_session *sess,
	      const struct ilnp_config *cfg, __be64 local, __be64 remote, __u64 now)
{
	struct ilnp_pair *p = &sess->pair;

	if (p->local == local && p->remote == remote)
		return p;
	if (p->local && !ilnp_main_pair(sess, cfg, local, remote))
		return 0;
	ilnp_pair_move(key, p, local, remote, now);
	return p;
}

/* One packet of a session on a locator pair, for ilnp_pair_count. */
enum ilnp_pair_dir {
	ILNP_PAIR_RX = 0,
	ILNP_PAIR_TX = 1,
	ILNP_PAIR_TX_PROBE = 2,
};

struct ilnp_pair_pkt {
	struct ilnp_session_key key;
	__be64 local;
	__be64 remote;
	__u64 now;
	__u32 len;
	__u32 dir; /* enum ilnp_pair_dir */
};

/* A packet of the session left (tx) or arrived (rx) on (local, remote). Only data sent waits
 * for an answer: a probe (ours, or our kernel's echo of the peer's) is answered on whichever
 * pair the peer chooses, so an idle pair is never judged by its probes' silence; a packet
 * received (it carried the session's nonce) is the pair's proof of life. A global function,
 * so the verifier checks it once, not at every state the programs reach it in. */
__noinline int ilnp_pair_count(struct ilnp_session *sess, const struct ilnp_config *cfg,
			       const struct ilnp_pair_pkt *pp)
{
	struct ilnp_path_stats *st;
	struct ilnp_pair *p;

	if (!sess || !cfg || !pp)
		return 0;
	p = ilnp_own_pair(&pp->key, sess, cfg, pp->local, pp->remote, pp->now);
	if (p && pp->dir == ILNP_PAIR_RX) {
		__sync_fetch_and_add(&p->rx_packets, 1);
		__sync_fetch_and_add(&p->rx_bytes, pp->len);
		p->last_rx = ilnp_pair_time(pp->now);
		p->unanswered = 0;
		p->first_unanswered = 0;
		return 0;
	}
	if (p) {
		__sync_fetch_and_add(&p->tx_packets, 1);
		__sync_fetch_and_add(&p->tx_bytes, pp->len);
		p->last_tx = ilnp_pair_time(pp->now);
		if (pp->dir == ILNP_PAIR_TX_PROBE)
			return 0;
		if (!p->unanswered)
			p->first_unanswered = ilnp_pair_time(pp->now);
		__sync_fetch_and_add(&p->unanswered, 1);
		return 0;
	}
	st = ilnp_path_get(&pp->key, pp->local, pp->remote);
	if (!st)
		return 0;
	if (pp->dir == ILNP_PAIR_RX) {
		__sync_fetch_and_add(&st->rx_packets, 1);
		__sync_fetch_and_add(&st->rx_bytes, pp->len);
		st->last_rx_ns = pp->now;
		st->unanswered = 0;
		st->first_unanswered_ns = 0;
		return 0;
	}
	__sync_fetch_and_add(&st->tx_packets, 1);
	__sync_fetch_and_add(&st->tx_bytes, pp->len);
	st->last_tx_ns = pp->now;
	if (pp->dir == ILNP_PAIR_TX_PROBE)
		return 0;
	if (__sync_fetch_and_add(&st->unanswered, 1) == 0)
		st->first_unanswered_ns = pp->now;
	return 0;
}

static __always_inline void ilnp_path_tx(const struct ilnp_session_key *key,
					 struct ilnp_session *sess, const struct ilnp_config *cfg,
					 __be64 local, __be64 remote, __u32 len, int probe, __u64 now)
{
	struct ilnp_pair_pkt pp = {.key = *key, .local = local, .remote = remote, .now = now,
				   .len = len, .dir = probe ? ILNP_PAIR_TX_PROBE : ILNP_PAIR_TX};

	ilnp_pair_count(sess, cfg, &pp);
}

static __always_inline void ilnp_path_rx(const struct ilnp_session_key *key,
					 struct ilnp_session *sess, const struct ilnp_config *cfg,
					 __be64 local, __be64 remote, __u32 len, __u64 now)
{
	struct ilnp_pair_pkt pp = {.key = *key, .local = local, .remote = remote, .now = now,
				   .len = len, .dir = ILNP_PAIR_RX};

	ilnp_pair_count(sess, cfg, &pp);
}

/* Our kernel's echo of a peer's liveness probe goes back on the pair the probe came on: the
 * probe names its pair after the marker (its sender's local locator, then its remote one), so
 * that the answer proves that pair both ways and does not take the pair this node sends on,
 * which may be the one that failed (its loss would make a healthy pair look dead). Only
 * locators the session may use are taken. */
static __always_inline void ilnp_probe_reply_pair(struct __sk_buff *skb, const struct ilnp_pkt *pkt,
						  const struct ilnp_session_key *key,
						  const struct ilnp_session *sess, __be64 *local,
						  __be64 *remote)
{
	__be64 pair[2];

	if (pkt->icmp_type != 129 ||
	    bpf_skb_load_bytes(skb, pkt->l4_off + 16, pair, sizeof(pair)) < 0)
		return;
	if (!ilnp_remote_locator_ok(key, sess, pair[0]) || !ilnp_local_locator_ok(pair[1]))
		return;
	*remote = pair[0];
	*local = pair[1];
}

/* A liveness probe of this session leaves on the pair the daemon chose for its slot. */
static __always_inline void ilnp_path_probe_pair(const struct __sk_buff *skb,
						 const struct ilnp_session_key *key,
						 __be64 *local, __be64 *remote)
{
	struct ilnp_path_key *pk;
	__u32 slot;

	if ((skb->mark & ILNP_PROBE_MARK_MASK) != ILNP_PROBE_MARK)
		return;
	slot = skb->mark & 0xff;
	pk = bpf_map_lookup_elem(&probe_pairs, &slot);
	if (!pk || pk->local_nid != key->local_nid || pk->remote_nid != key->remote_nid ||
	    !pk->local_l64 || !pk->remote_l64)
		return;
	*local = pk->local_l64;
	*remote = pk->remote_l64;
}

/* A flow's hash over the identifiers, the protocol and the ports: the same for every packet of
 * the flow, and the same at both ends (each end's side hashed alone and the two added), so that
 * with the pairs listed in the same order at both ends (internal/node/paths.go) a flow's two
 * directions take the same locator pair and the pair's liveness sees its answers. */
static __always_inline __u64 ilnp_flow_hash(struct __sk_buff *skb, const struct ilnp_pkt *pkt)
{
	__be16 ports[2] = {};
	__u64 h;

	if (pkt->l4_off)
		bpf_skb_load_bytes(skb, pkt->l4_off, ports, sizeof(ports));
	h = ((pkt->ip6.src_nid * 0x9e3779b97f4a7c15ULL) ^ ((__u64)ports[0] * 0xc2b2ae3d27d4eb4fULL)) +
	    ((pkt->ip6.dst_nid * 0x9e3779b97f4a7c15ULL) ^ ((__u64)ports[1] * 0xc2b2ae3d27d4eb4fULL));
	h ^= pkt->l4_proto;
	/* murmur3's 64-bit finaliser */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/* Under the multipath policy a TCP or UDP packet leaves on its flow's pair. */
static __always_inline void ilnp_multipath_pair(struct __sk_buff *skb, const struct ilnp_pkt *pkt,
						const struct ilnp_session_key *key,
						const struct ilnp_session *sess,
						__be64 *local, __be64 *remote)
{
	struct ilnp_multipath *mp;
	__u64 x;

	if (!(sess->flags & ILNP_SESS_MULTIPATH))
		return;
	if (pkt->l4_proto != ILNP_NH_TCP && pkt->l4_proto != ILNP_NH_UDP)
		return;
	mp = bpf_map_lookup_elem(&multipath, key);
	if (!mp || !mp->total || !mp->count)
		return;
	x = ilnp_flow_hash(skb, pkt) % mp->total;
	for (int i = 0; i < ILNP_MULTIPATH_MAX; i++) {
		if (i >= mp->count)
			return;
		if (x < mp->pair[i].weight) {
			if (mp->pair[i].local_l64 && mp->pair[i].remote_l64) {
				*local = mp->pair[i].local_l64;
				*remote = mp->pair[i].remote_l64;
			}
			return;
		}
		x -= mp->pair[i].weight;
	}
}

#endif
