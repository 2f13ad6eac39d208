// SPDX-License-Identifier: GPL-2.0
/* TCP Hybla (C. Caini, R. Firrincieli, "TCP Hybla: a TCP enhancement for heterogeneous
 * networks", Int. J. Satell. Commun. Netw. 22(5), 2004) as a BPF tcp_congestion_ops.
 *
 * rho = RTT / RTT0 (RTT0 = 25 ms, rho >= 1), from the smallest smoothed RTT seen so queueing
 * does not inflate it. Per acknowledged segment: slow start adds 2^rho - 1 segments,
 * congestion avoidance rho^2 / cwnd; losses halve the window as in Reno. Fixed point: rho in
 * 1/16, window fractions in 1/256 of a segment; lab/cc/model does the same arithmetic in Go. */
#include "cc.h"

char LICENSE[] SEC("license") = "GPL";

#define HYBLA_RTT0_US 25000
#define HYBLA_RHO_ONE 16         /* rho = 1 in 1/16 */
#define HYBLA_RHO_MAX (16 * 16)  /* rho <= 16 (RTT 400 ms): 2^rho stays in 64 bits */
#define HYBLA_FRAC_ONE 256       /* one segment in 1/256 */

/* round(65536 * 2^(k/16)), k = 0..15 */
static const __u32 hybla_pow2_frac[16] = {
	65536, 68438, 71468, 74632, 77936, 81386, 84990, 88752,
	92682, 96785, 101070, 105545, 110218, 115098, 120194, 125515,
};

/* icsk_ca_priv; the order is the model's HyblaState. */
struct hybla {
	__u32 min_srtt_us; /* 0: no RTT yet */
	__u32 rho;         /* 1/16 */
	__u32 ss_frac;     /* slow start: fraction of a segment, 1/256 */
	__u32 ca_acc;      /* congestion avoidance: acknowledged rho^2, 1/256 segment-ACKs */
	__u32 pad[2];
};

_Static_assert(sizeof(struct hybla) == CC_STATE_WORDS * 4, "trace layout");

static __always_inline __u32 hybla_rho(__u32 srtt_us)
{
	__u64 rho = (__u64)srtt_us * HYBLA_RHO_ONE / HYBLA_RTT0_US;

	if (rho < HYBLA_RHO_ONE)
		return HYBLA_RHO_ONE;
	if (rho > HYBLA_RHO_MAX)
		return HYBLA_RHO_MAX;
	return rho;
}

/* 2^rho in 1/256 */
static __always_inline __u64 hybla_pow2(__u32 rho)
{
	return ((__u64)hybla_pow2_frac[rho & 15] << (rho >> 4)) >> 8;
}

static __always_inline void hybla_step(struct hybla *h, struct cc_window *w, __u32 srtt_us,
				       __u32 acked, int limited)
{
	__u64 cwnd = w->cwnd;

	if (srtt_us && (!h->min_srtt_us || srtt_us < h->min_srtt_us)) {
		h->min_srtt_us = srtt_us;
		h->rho = hybla_rho(srtt_us);
	}
	if (!limited || !acked)
		return;
	if (w->cwnd < w->ssthresh) {
		__u64 inc = (hybla_pow2(h->rho) - HYBLA_FRAC_ONE) * acked + h->ss_frac;

		cwnd += inc / HYBLA_FRAC_ONE;
		h->ss_frac = inc % HYBLA_FRAC_ONE;
		if (cwnd >= w->ssthresh) {
			cwnd = w->ssthresh;
			h->ss_frac = 0;
		}
	} else {
		__u64 acc = h->ca_acc + (__u64)h->rho * h->rho * acked;
		__u64 step = (__u64)HYBLA_FRAC_ONE * (w->cwnd ? w->cwnd : 1);

		if (acc >= step) {
			__u64 delta = acc / step;

			acc -= delta * step;
			cwnd += delta;
		}
		h->ca_acc = acc > 0xffffffffULL ? 0xffffffffU : acc;
	}
	if (cwnd > w->clamp)
		cwnd = w->clamp;
	w->cwnd = cwnd;
}

SEC("struct_ops/hybla_init")
void hybla_init(unsigned long long *ctx)
{
	struct hybla *h = cc_priv((struct sock *)ctx[0]);

	h->min_srtt_us = 0;
	h->rho = HYBLA_RHO_ONE;
	h->ss_frac = 0;
	h->ca_acc = 0;
	cc_count(CC_C_INIT);
}

SEC("struct_ops/hybla_cong_avoid")
void hybla_cong_avoid(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	__u32 acked = ctx[2];
	struct tcp_sock *tp = cc_tcp_sk(sk);
	struct hybla *h = cc_priv(sk);
	struct cc_window w;
	struct cc_step *st;
	__u32 srtt_us = tp->srtt_us >> 3;
	int limited = cc_cwnd_limited(tp);
	int ss;

	cc_window_read(tp, &w);
	ss = w.cwnd < w.ssthresh;
	st = cc_trace_slot();
	if (st) {
		st->kind = CC_STEP_ACK;
		st->acked = acked;
		st->rtt_us = srtt_us;
		st->limited = limited;
		st->w_in = w;
		__builtin_memcpy(st->s_in, h, sizeof(*h));
	}
	hybla_step(h, &w, srtt_us, acked, limited);
	if (limited && acked) {
		cc_count(CC_C_ACKS);
		if (ss)
			cc_count(CC_C_SS_ACKS);
	}
	cc_set(CC_C_LAST_RHO, h->rho);
	cc_window_write(tp, &w);
	if (st) {
		st->w_out = w;
		__builtin_memcpy(st->s_out, h, sizeof(*h));
	}
}

SEC("struct_ops/hybla_ssthresh")
__u32 hybla_ssthresh(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct tcp_sock *tp = cc_tcp_sk(sk);
	struct hybla *h = cc_priv(sk);
	struct cc_step *st = cc_trace_slot();
	__u32 ret = tp->snd_cwnd >> 1;

	cc_trace_ssthresh(st, tp, (const __u32 *)h);
	h->ss_frac = 0;
	h->ca_acc = 0;
	return cc_ssthresh_done(st, ret, (const __u32 *)h);
}

CC_SHARED_CALLBACKS(hybla)

SEC(".struct_ops.link")
struct tcp_congestion_ops hybla = {
	.init = (void *)hybla_init,
	.release = (void *)hybla_release,
	.cong_avoid = (void *)hybla_cong_avoid,
	.ssthresh = (void *)hybla_ssthresh,
	.set_state = (void *)hybla_set_state,
	.cwnd_event = (void *)hybla_cwnd_event,
	.undo_cwnd = (void *)hybla_undo_cwnd,
	.name = "hybla",
};
