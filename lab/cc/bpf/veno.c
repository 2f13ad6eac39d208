// SPDX-License-Identifier: GPL-2.0
/* TCP Veno (C. P. Fu, S. C. Liew, "TCP Veno: TCP enhancement for transmission over wireless
 * access networks", IEEE JSAC 21(2), 2003) as a BPF tcp_congestion_ops.
 *
 * Once per round trip the Vegas backlog N = (cwnd / BaseRTT - cwnd / RTT) * BaseRTT
 * = cwnd * (RTT - BaseRTT) / RTT estimates the segments queued in the network (BaseRTT: the
 * smallest RTT seen, RTT: the smallest in the round). With beta = 3: a loss while N < beta is
 * taken as random (ssthresh = cwnd * 4/5), otherwise as congestive (cwnd / 2); congestion
 * avoidance grows one segment per RTT while N < beta and one every other RTT once N >= beta.
 * Slow start is Reno's. N is kept in 1/256 of a segment; lab/cc/model does the same in Go. */
#include "cc.h"

char LICENSE[] SEC("license") = "GPL";

#define VENO_BETA 3
#define VENO_ONE 256 /* one segment in 1/256 */

#define VENO_F_SKIP 1    /* N >= beta: the next RTT's worth of ACKs does not grow */
#define VENO_F_ROUND 2   /* a round is being timed */

/* icsk_ca_priv; the order is the model's VenoState. */
struct veno {
	__u32 base_rtt_us;  /* 0: no sample yet */
	__u32 round_rtt_us; /* smallest sample this round, 0: none */
	__u32 round_samples;
	__u32 round_end;    /* snd_nxt when the round started */
	__u32 backlog;      /* N, 1/256 segment */
	__u32 flags;
};

_Static_assert(sizeof(struct veno) == CC_STATE_WORDS * 4, "trace layout");

static __always_inline int veno_after(__u32 a, __u32 b)
{
	return (__s32)(b - a) < 0;
}

static __always_inline void veno_sample(struct veno *v, __u32 rtt_us)
{
	if (!v->base_rtt_us || rtt_us < v->base_rtt_us)
		v->base_rtt_us = rtt_us;
	if (!v->round_rtt_us || rtt_us < v->round_rtt_us)
		v->round_rtt_us = rtt_us;
	v->round_samples++;
}

static __always_inline void veno_step(struct veno *v, struct cc_window *w, __u32 ack, __u32 snd_nxt,
				      __u32 acked, int limited)
{
	__u64 cwnd = w->cwnd;

	if (!(v->flags & VENO_F_ROUND) || veno_after(ack, v->round_end)) {
		if (v->round_samples && v->round_rtt_us) {
			__u64 rtt = v->round_rtt_us;

			v->backlog = (__u64)w->cwnd * (rtt - v->base_rtt_us) * VENO_ONE / rtt;
		}
		v->round_end = snd_nxt;
		v->round_rtt_us = 0;
		v->round_samples = 0;
		v->flags |= VENO_F_ROUND;
	}
	if (!limited || !acked)
		return;
	if (w->cwnd < w->ssthresh) {
		cwnd += acked;
		if (cwnd > w->ssthresh)
			cwnd = w->ssthresh;
	} else {
		__u32 rounds;

		w->cnt += acked;
		if (w->cnt >= w->cwnd) {
			rounds = w->cnt / (w->cwnd ? w->cwnd : 1);
			w->cnt -= rounds * w->cwnd;
			if (v->backlog < VENO_BETA * VENO_ONE) {
				cwnd += rounds;
				v->flags &= ~VENO_F_SKIP;
			} else {
				/* One segment per two RTTs' worth of ACKs, carrying the odd one. */
				rounds += (v->flags & VENO_F_SKIP) ? 0 : 1;
				cwnd += rounds / 2;
				if (rounds & 1)
					v->flags &= ~VENO_F_SKIP;
				else
					v->flags |= VENO_F_SKIP;
			}
		}
	}
	if (cwnd > w->clamp)
		cwnd = w->clamp;
	w->cwnd = cwnd;
}

SEC("struct_ops/veno_init")
void veno_init(unsigned long long *ctx)
{
	struct veno *v = cc_priv((struct sock *)ctx[0]);

	v->base_rtt_us = 0;
	v->round_rtt_us = 0;
	v->round_samples = 0;
	v->round_end = 0;
	v->backlog = 0;
	v->flags = 0;
	cc_count(CC_C_INIT);
}

SEC("struct_ops/veno_pkts_acked")
void veno_pkts_acked(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	const struct ack_sample *sample = (const struct ack_sample *)ctx[1];
	struct veno *v = cc_priv(sk);
	struct cc_step *st;
	__s32 rtt_us = sample->rtt_us;

	if (rtt_us <= 0)
		return;
	cc_count(CC_C_SAMPLES);
	st = cc_trace_slot();
	if (st) {
		st->kind = CC_STEP_SAMPLE;
		st->rtt_us = rtt_us;
		__builtin_memcpy(st->s_in, v, sizeof(*v));
	}
	veno_sample(v, rtt_us);
	if (st)
		__builtin_memcpy(st->s_out, v, sizeof(*v));
}

SEC("struct_ops/veno_cong_avoid")
void veno_cong_avoid(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	__u32 ack = ctx[1], acked = ctx[2];
	struct tcp_sock *tp = cc_tcp_sk(sk);
	struct veno *v = cc_priv(sk);
	__u32 snd_nxt = tp->snd_nxt;
	int limited = cc_cwnd_limited(tp);
	struct cc_window w;
	struct cc_step *st;
	int ss;

	cc_window_read(tp, &w);
	ss = w.cwnd < w.ssthresh;
	st = cc_trace_slot();
	if (st) {
		st->kind = CC_STEP_ACK;
		st->acked = acked;
		st->ack = ack;
		st->snd_nxt = snd_nxt;
		st->limited = limited;
		st->w_in = w;
		__builtin_memcpy(st->s_in, v, sizeof(*v));
	}
	veno_step(v, &w, ack, snd_nxt, acked, limited);
	if (limited && acked) {
		cc_count(CC_C_ACKS);
		if (ss)
			cc_count(CC_C_SS_ACKS);
	}
	cc_window_write(tp, &w);
	if (st) {
		st->w_out = w;
		__builtin_memcpy(st->s_out, v, sizeof(*v));
	}
}

SEC("struct_ops/veno_ssthresh")
__u32 veno_ssthresh(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct tcp_sock *tp = cc_tcp_sk(sk);
	struct veno *v = cc_priv(sk);
	struct cc_step *st = cc_trace_slot();
	__u32 cwnd = tp->snd_cwnd, ret;

	cc_trace_ssthresh(st, tp, (const __u32 *)v);
	if (v->backlog < VENO_BETA * VENO_ONE) {
		ret = (__u64)cwnd * 4 / 5;
		cc_count(CC_C_RANDOM);
	} else {
		ret = cwnd >> 1;
		cc_count(CC_C_CONGESTIVE);
	}
	return cc_ssthresh_done(st, ret, (const __u32 *)v);
}

CC_SHARED_CALLBACKS(veno)

SEC(".struct_ops.link")
struct tcp_congestion_ops veno = {
	.init = (void *)veno_init,
	.release = (void *)veno_release,
	.pkts_acked = (void *)veno_pkts_acked,
	.cong_avoid = (void *)veno_cong_avoid,
	.ssthresh = (void *)veno_ssthresh,
	.set_state = (void *)veno_set_state,
	.cwnd_event = (void *)veno_cwnd_event,
	.undo_cwnd = (void *)veno_undo_cwnd,
	.name = "veno",
};
