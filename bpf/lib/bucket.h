/* Token buckets kept in nanoseconds of budget (struct ilnp_token_bucket, maps.h): an event
 * costs 1e9 / rate of it and the budget grows by one per nanosecond up to one second, so a
 * bucket allows rate events a second with a burst of one second's worth. */
#ifndef ILNP_BUCKET_H
#define ILNP_BUCKET_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"

#define ILNP_NSEC_PER_SEC 1000000000ULL

/* 1: b had room for one event at rate events a second, now taken. */
static __always_inline int ilnp_bucket_take(struct ilnp_token_bucket *b, __u64 rate)
{
	__u64 now, cost, elapsed, budget;
	int ok = 0;

	cost = ILNP_NSEC_PER_SEC / rate;
	now = bpf_ktime_get_ns(); /* helpers may not be called under the lock */
	bpf_spin_lock(&b->lock);
	elapsed = now - b->last_ns;
	budget = elapsed >= ILNP_NSEC_PER_SEC ? ILNP_NSEC_PER_SEC : b->budget_ns + elapsed;
	if (budget > ILNP_NSEC_PER_SEC)
		budget = ILNP_NSEC_PER_SEC;
	b->last_ns = now;
	if (budget >= cost) {
		budget -= cost;
		ok = 1;
	}
	b->budget_ns = budget;
	bpf_spin_unlock(&b->lock);
	return ok;
}

#endif
