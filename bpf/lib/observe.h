/* Per-CPU counters and the event ring the daemon reads. */
#ifndef ILNP_OBSERVE_H
#define ILNP_OBSERVE_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"

static __always_inline void ilnp_count(__u32 counter)
{
	__u64 *value = bpf_map_lookup_elem(&counters, &counter);

	if (value)
		*value += 1; /* per-CPU slot: no atomics needed */
}

/* src and dst point at the 32 bytes of the packet's two addresses (wire view). */
static __always_inline void ilnp_emit(__u32 type, __u32 ifindex, __be64 local_nid,
				      __be64 remote_nid, const __u8 *addrs)
{
	struct ilnp_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);

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
	bpf_ringbuf_submit(ev, 0);
}

#endif
