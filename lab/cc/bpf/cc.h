/* SPDX-License-Identifier: GPL-2.0 */
/* Shared by the lab's BPF congestion controls (hybla.c, veno.c): the few kernel types they
 * touch (CO-RE: offsets come from the running kernel's BTF, these layouts only name fields),
 * the kfuncs they call, their counters and the step trace the Go tests replay through the
 * model in lab/cc/model. */
#ifndef ILNP_CC_H
#define ILNP_CC_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define CC_PRESERVE __attribute__((preserve_access_index))

struct sock {
	__u32 sk_pacing_status;
} CC_PRESERVE;

struct inet_connection_sock {
	__u64 icsk_ca_priv[13];
} CC_PRESERVE;

struct tcp_sock {
	__u32 snd_cwnd;
	__u32 snd_cwnd_cnt;
	__u32 snd_cwnd_clamp;
	__u32 snd_ssthresh;
	__u32 srtt_us;
	__u32 snd_nxt;
	__u32 max_packets_out;
	__u8 is_cwnd_limited : 1;
} CC_PRESERVE;

struct ack_sample {
	__u32 pkts_acked;
	__s32 rtt_us;
	__u32 in_flight;
} CC_PRESERVE;

/* Only the members the programs fill; the loader matches them to the kernel's by name. */
struct tcp_congestion_ops {
	__u32 (*ssthresh)(struct sock *sk);
	void (*cong_avoid)(struct sock *sk, __u32 ack, __u32 acked);
	void (*set_state)(struct sock *sk, __u8 new_state);
	void (*cwnd_event)(struct sock *sk, int ev);
	void (*pkts_acked)(struct sock *sk, const struct ack_sample *sample);
	__u32 (*undo_cwnd)(struct sock *sk);
	char name[16];
	void (*init)(struct sock *sk);
	void (*release)(struct sock *sk);
};

extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

#define TCP_CA_LOSS 4 /* enum tcp_ca_state */

static __always_inline struct tcp_sock *cc_tcp_sk(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline void *cc_priv(struct sock *sk)
{
	return (void *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

/* The kernel's tcp_is_cwnd_limited() (include/net/tcp.h), which BPF cannot call: growth only
 * while the window, not the application or the receiver, limits sending. */
static __always_inline int cc_cwnd_limited(struct tcp_sock *tp)
{
	if (BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited))
		return 1;
	if (tp->snd_cwnd < tp->snd_ssthresh)
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return 0;
}

/* Counters (index into the `counters` array map); mirrored by lab/cc.Counter*. */
enum cc_counter {
	CC_C_INIT,       /* sockets that chose this algorithm */
	CC_C_RELEASE,    /* sockets that let it go */
	CC_C_ACKS,       /* cong_avoid calls that changed the window arithmetic */
	CC_C_SS_ACKS,    /* ... of them in slow start */
	CC_C_SAMPLES,    /* RTT samples (pkts_acked with rtt_us > 0) */
	CC_C_LOSSES,     /* ssthresh calls (a loss or ECN reduction) */
	CC_C_RANDOM,     /* Veno: losses classified random (N < beta) */
	CC_C_CONGESTIVE, /* Veno: losses classified congestive (N >= beta) */
	CC_C_LOSS_STATE, /* set_state to TCP_CA_Loss (a retransmission timeout) */
	CC_C_CWND_EVENT, /* cwnd_event calls */
	CC_C_TRACE,      /* trace slots taken (may exceed CC_TRACE_LEN: those were not kept) */
	CC_C_MAX_CWND,   /* largest cwnd set (a maximum, not a count) */
	CC_C_LAST_RHO,   /* Hybla: last rho in 1/16 (a value, not a count) */
	CC_C_N,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, CC_C_N);
} counters SEC(".maps");

static __always_inline void cc_count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);

	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline void cc_set(__u32 idx, __u64 val)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);

	if (v)
		*v = val;
}

static __always_inline void cc_max(__u32 idx, __u64 val)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);

	if (v && *v < val)
		*v = val;
}

/* One arithmetic step, inputs and outputs, for replay through the Go model. */
enum cc_step_kind {
	CC_STEP_ACK = 1,      /* cong_avoid */
	CC_STEP_SSTHRESH = 2, /* ssthresh */
	CC_STEP_SAMPLE = 3,   /* pkts_acked */
};

#define CC_STATE_WORDS 6

struct cc_window {
	__u32 cwnd;
	__u32 cnt;
	__u32 ssthresh;
	__u32 clamp;
};

struct cc_step {
	__u32 kind;
	__u32 acked;  /* segments acknowledged (ACK) */
	__u32 rtt_us; /* smoothed RTT (Hybla ACK), RTT sample (Veno SAMPLE) */
	__u32 ack;    /* acknowledged sequence number (Veno ACK) */
	__u32 snd_nxt;
	__u32 limited; /* the window limited sending (ACK): growth allowed */
	__u32 ret;     /* returned ssthresh (SSTHRESH) */
	struct cc_window w_in, w_out;
	__u32 s_in[CC_STATE_WORDS], s_out[CC_STATE_WORDS];
};

#define CC_TRACE_LEN 1024

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct cc_step);
	__uint(max_entries, CC_TRACE_LEN);
} trace SEC(".maps");

/* Reserves the next trace slot, or NULL when the trace is full. */
static __always_inline struct cc_step *cc_trace_slot(void)
{
	__u32 idx = CC_C_TRACE;
	__u64 *n = bpf_map_lookup_elem(&counters, &idx);
	__u32 slot;

	if (!n)
		return NULL;
	slot = __sync_fetch_and_add(n, 1);
	if (slot >= CC_TRACE_LEN)
		return NULL;
	return bpf_map_lookup_elem(&trace, &slot);
}

static __always_inline void cc_window_read(struct tcp_sock *tp, struct cc_window *w)
{
	w->cwnd = tp->snd_cwnd;
	w->cnt = tp->snd_cwnd_cnt;
	w->ssthresh = tp->snd_ssthresh;
	w->clamp = tp->snd_cwnd_clamp;
}

/* Writes back what the arithmetic may change (the kernel owns ssthresh and the clamp). */
static __always_inline void cc_window_write(struct tcp_sock *tp, const struct cc_window *w)
{
	tp->snd_cwnd = w->cwnd;
	tp->snd_cwnd_cnt = w->cnt;
	cc_max(CC_C_MAX_CWND, w->cwnd);
}

/* Starts an ssthresh trace step: the window unchanged and the algorithm's state on entry. */
static __always_inline void cc_trace_ssthresh(struct cc_step *st, struct tcp_sock *tp,
					      const __u32 *state)
{
	if (!st)
		return;
	st->kind = CC_STEP_SSTHRESH;
	cc_window_read(tp, &st->w_in);
	st->w_out = st->w_in;
	__builtin_memcpy(st->s_in, state, CC_STATE_WORDS * 4);
}

/* Ends ssthresh: at least two segments (RFC 5681 s.3.1), counted, its trace step closed. */
static __always_inline __u32 cc_ssthresh_done(struct cc_step *st, __u32 ret, const __u32 *state)
{
	if (ret < 2)
		ret = 2;
	cc_count(CC_C_LOSSES);
	if (st) {
		st->ret = ret;
		__builtin_memcpy(st->s_out, state, CC_STATE_WORDS * 4);
	}
	return ret;
}

/* The callbacks every algorithm here shares; struct_ops needs one SEC-named program per
 * object, so they are stamped out per algorithm: release, set_state and cwnd_event only
 * count, undo_cwnd is Reno's. */
#define CC_SHARED_CALLBACKS(algo)                                      \
	SEC("struct_ops/" #algo "_release")                            \
	void algo##_release(unsigned long long *ctx)                   \
	{                                                              \
		cc_count(CC_C_RELEASE);                                \
	}                                                              \
	SEC("struct_ops/" #algo "_set_state")                          \
	void algo##_set_state(unsigned long long *ctx)                 \
	{                                                              \
		if ((__u8)ctx[1] == TCP_CA_LOSS)                       \
			cc_count(CC_C_LOSS_STATE);                     \
	}                                                              \
	SEC("struct_ops/" #algo "_cwnd_event")                         \
	void algo##_cwnd_event(unsigned long long *ctx)                \
	{                                                              \
		cc_count(CC_C_CWND_EVENT);                             \
	}                                                              \
	SEC("struct_ops/" #algo "_undo_cwnd")                          \
	__u32 algo##_undo_cwnd(unsigned long long *ctx)                \
	{                                                              \
		return tcp_reno_undo_cwnd((struct sock *)ctx[0]);      \
	}

#endif
