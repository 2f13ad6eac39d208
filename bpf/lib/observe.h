/* Per-CPU counters and the event ring the daemon reads. */
#ifndef ILNP_OBSERVE_H
#define ILNP_OBSERVE_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"
#include "bucket.h"

static __always_inline void ilnp_count(__u32 counter)
{
	__u64 *value = bpf_map_lookup_elem(&counters, &counter);

	if (value)
		*value += 1; /* per-CPU slot: no atomics needed */
}


/* Events per second a kind of security event may put in the ring, with a burst of one
 * second's worth; 0: no limit (session events, which only this host's own packets or
 * new_sessions_per_s make). The bursts together (5 x 256 + 64 + 1024 events of 80 bytes in the
 * ring, 189 KB) leave a quarter of the 256 KiB ring to session events while the daemon reads. Drops on an aged local locator (a hard handoff's in-flight packets) get more: the
 * lab counts them as losses inside the host. */
static __always_inline __u64 ilnp_event_rate(__u32 type)
{
	switch (type) {
	case ILNP_EV_INVALID_LOCAL_LOCATOR:
		return 1024;
	case ILNP_EV_BAD_NONCE:
	case ILNP_EV_MISSING_NONCE:
	case ILNP_EV_MULTIPLE_NONCES:
	case ILNP_EV_UNKNOWN_LOCATOR:
	case ILNP_EV_PARAM_PROBLEM:
		return 256;
	case ILNP_EV_PMTU_BELOW_MIN: /* one per oversized packet until the daemon's route is in */
		return 64;
	}
	return 0;
}

static __always_inline int ilnp_event_allowed(__u32 type)
{
	__u64 rate = ilnp_event_rate(type);
	struct ilnp_token_bucket *b;
	__u32 key = type;

	if (!rate)
		return 1;
	b = bpf_map_lookup_elem(&event_budget, &key);
	return b && ilnp_bucket_take(b, rate);
}

/* src and dst point at the 32 bytes of the packet's two addresses (wire view). A security
 * event over its kind's rate is only counted (ILNP_C_EVENTS_LIMITED); an event the ring has
 * no room for is counted as lost (ILNP_C_EVENTS_LOST), which makes the daemon reconcile its
 * sessions with the maps (internal/node/reconcile.go). */
static __always_inline void ilnp_emit_mtu(__u32 type, __u32 ifindex, __be64 local_nid,
					  __be64 remote_nid, const __u8 *addrs, __u32 mtu)
{
	struct ilnp_event *ev;

	if (!ilnp_event_allowed(type)) {
		ilnp_count(ILNP_C_EVENTS_LIMITED);
		return;
	}
	ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		ilnp_count(ILNP_C_EVENTS_LOST);
		return;
	}
	ev->ts_ns = bpf_ktime_get_ns();
	ev->type = type;
	ev->ifindex = ifindex;
	ev->local_nid = local_nid;
	ev->remote_nid = remote_nid;
	__builtin_memcpy(ev->src, addrs, 16);
	__builtin_memcpy(ev->dst, addrs + 16, 16);
	ev->mtu = mtu;
	ev->pad = 0;
	bpf_ringbuf_submit(ev, 0);
}

static __always_inline void ilnp_emit(__u32 type, __u32 ifindex, __be64 local_nid,
				      __be64 remote_nid, const __u8 *addrs)
{
	ilnp_emit_mtu(type, ifindex, local_nid, remote_nid, addrs, 0);
}

#endif
