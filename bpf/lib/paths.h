/* Per locator pair accounting and liveness probes (internal/paths reads the paths map). */
#ifndef ILNP_PATHS_H
#define ILNP_PATHS_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"

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

/* A packet of the session left on (local, remote). */
static __always_inline void ilnp_path_tx(const struct ilnp_session_key *key, __be64 local,
					 __be64 remote, __u32 len)
{
	struct ilnp_path_stats *st = ilnp_path_get(key, local, remote);
	__u64 now = bpf_ktime_get_coarse_ns();

	if (!st)
		return;
	__sync_fetch_and_add(&st->tx_packets, 1);
	__sync_fetch_and_add(&st->tx_bytes, len);
	st->last_tx_ns = now;
	if (__sync_fetch_and_add(&st->unanswered, 1) == 0)
		st->first_unanswered_ns = now;
}

/* A packet carrying the session's nonce arrived on (local, remote): proof of life. */
static __always_inline void ilnp_path_rx(const struct ilnp_session_key *key, __be64 local,
					 __be64 remote, __u32 len)
{
	struct ilnp_path_stats *st = ilnp_path_get(key, local, remote);

	if (!st)
		return;
	__sync_fetch_and_add(&st->rx_packets, 1);
	__sync_fetch_and_add(&st->rx_bytes, len);
	st->last_rx_ns = bpf_ktime_get_coarse_ns();
	st->unanswered = 0;
	st->first_unanswered_ns = 0;
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

#endif
