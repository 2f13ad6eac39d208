// SPDX-License-Identifier: GPL-2.0
/* The thesis's TCP window (5.2: "limited to 320 Kbytes") for the lab's iperf3 sockets.
 *
 * On this kernel neither SO_RCVBUF (iperf3 -w), the route's `window` metric nor
 * TCP_WINDOW_CLAMP holds the advertised window: tcp_measure_rcv_mss() resets window_clamp to
 * the buffer times the measured payload/truesize ratio whenever that ratio changes, so
 * -w 320K advertised ~410 KB. The sender's cwnd clamp is never reset, so this sock_ops program
 * (attached to the lab run's own cgroup, which only the iperf3 processes join) caps every
 * established connection's congestion window at window_bytes / MSS segments: the data in
 * flight, min(cwnd, rwnd), is then at most the thesis's window. */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

#define SOL_TCP 6

/* Set by the loader (RewriteConstants). */
volatile const __u32 window_bytes = 327680;

enum window_counter {
	WINDOW_CLAMPED,   /* connections clamped */
	WINDOW_FAILED,    /* bpf_setsockopt refused */
	WINDOW_NO_MSS,    /* established without an MSS (not clamped) */
	WINDOW_LAST_SEGS, /* the last clamp, in segments */
	WINDOW_LAST_MSS,  /* the MSS it was computed from */
	WINDOW_NUM_COUNTERS,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WINDOW_NUM_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} window_counters SEC(".maps");

static __always_inline void window_count(__u32 idx, __u64 v, int set)
{
	__u64 *c = bpf_map_lookup_elem(&window_counters, &idx);

	if (!c)
		return;
	if (set)
		*c = v;
	else
		__sync_fetch_and_add(c, v);
}

SEC("sockops")
int window_clamp(struct bpf_sock_ops *skops)
{
	__u32 mss;
	int segs;

	if (skops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB &&
	    skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	mss = skops->mss_cache;
	if (mss == 0) {
		window_count(WINDOW_NO_MSS, 1, 0);
		return 1;
	}
	segs = window_bytes / mss;
	if (segs < 2)
		segs = 2;
	/* TCP_BPF_SNDCWND_CLAMP sets snd_cwnd_clamp (and snd_ssthresh) to segs. */
	if (bpf_setsockopt(skops, SOL_TCP, TCP_BPF_SNDCWND_CLAMP, &segs, sizeof(segs))) {
		window_count(WINDOW_FAILED, 1, 0);
		return 1;
	}
	window_count(WINDOW_CLAMPED, 1, 0);
	window_count(WINDOW_LAST_SEGS, segs, 1);
	window_count(WINDOW_LAST_MSS, mss, 1);
	return 1;
}
