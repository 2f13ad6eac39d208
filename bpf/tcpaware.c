// SPDX-License-Identifier: GPL-2.0
/* tcpaware: a BPF TCP iterator the daemon runs when a correspondent starts or ends a move.
 * For every TCP socket whose remote address is a correspondent's session view in
 * tcpaware_peers it applies what the entry asks (bpf_setsockopt) and writes the socket's state
 * to the iterator's output, from which the daemon sends the RFC 6069 revert signal.
 * And a tcp_congestion_ops that is the kernel's cubic (its kfuncs, and the kernel's own
 * per-ACK window update redone in cong_control) except inside a loss window the iterator opens
 * around a move: there the move's loss episode does not lower ssthresh, its fast recovery
 * keeps the window the old path carried instead of PRR's, and after a timeout the first ACK
 * gives the window back its value from before the timeout. */
#define ILNP_TCPAWARE
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "lib/maps.h"

char LICENSE[] SEC("license") = "GPL";

#define TA_PRESERVE __attribute__((preserve_access_index))

#define TA_AF_INET6 10
#define TA_SOL_TCP 6
#define TA_TCP_RTO_MAX_MS 44 /* linux >= 6.15, range 1000..120000 */
#define TA_TCP_ESTABLISHED 1
#define TA_TCP_CLOSE_WAIT 8

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
	__u64 session_id;
	__u64 seq_num;
} TA_PRESERVE;

struct in6_addr {
	__u8 s6_addr[16];
} TA_PRESERVE;

struct sock_common {
	unsigned short skc_family;
	unsigned char skc_state;
	__u16 skc_dport;
	__u16 skc_num;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
} TA_PRESERVE;

struct sock {
	struct sock_common __sk_common;
	__u32 sk_pacing_status; /* enum sk_pacing */
	unsigned long sk_pacing_rate;
	unsigned long sk_max_pacing_rate;
} TA_PRESERVE;

struct rate_sample {
	__u32 acked_sacked; /* packets newly ACKed or SACKed */
	int losses;         /* packets newly marked lost */
	long rtt_us;        /* RTT of the last (S)ACKed packet, -1: none */
} TA_PRESERVE;

struct ack_sample {
	__u32 pkts_acked;
	__s32 rtt_us;
	__u32 in_flight;
} TA_PRESERVE;

/* Only the members used; the loader matches them to the kernel's by name. */
struct tcp_congestion_ops {
	__u32 (*ssthresh)(struct sock *sk);
	void (*cong_avoid)(struct sock *sk, __u32 ack, __u32 acked);
	void (*set_state)(struct sock *sk, __u8 new_state);
	void (*cwnd_event)(struct sock *sk, int ev);
	void (*pkts_acked)(struct sock *sk, const struct ack_sample *sample);
	void (*cong_control)(struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs);
	__u32 (*undo_cwnd)(struct sock *sk);
	char name[16];
	void (*init)(struct sock *sk);
};

/* The same kernel struct, for reading a socket's algorithm name (CO-RE flavour: the struct_ops
 * value above must keep its local layout, which the loader translates). */
struct tcp_congestion_ops___ro {
	char name[16];
} TA_PRESERVE;

struct inet_connection_sock {
	__u32 icsk_rto;
	__u8 icsk_backoff;
	__u8 icsk_ca_state : 5;
	const struct tcp_congestion_ops___ro *icsk_ca_ops;
} TA_PRESERVE;

struct tcp_rack {
	__u32 rtt_us; /* RTT of the most recently sent packet that was (S)ACKed */
} TA_PRESERVE;

struct tcp_sock {
	struct inet_connection_sock inet_conn;
	struct tcp_rack rack;
	__u32 mss_cache;
	__u32 reordering;
	__u32 undo_marker;
	__u32 prr_out;
	__u32 sacked_out;
	__u32 snd_cwnd_stamp;
	__u32 snd_cwnd_clamp;
	__u32 prior_cwnd;
	__u32 prior_ssthresh;
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 srtt_us;
	__u32 snd_cwnd;
	__u32 snd_ssthresh;
	__u32 packets_out;
	__u32 lost_out;
	__u32 retrans_out;
} TA_PRESERVE;

/* The iterator context's layout is fixed by the kernel (DEFINE_BPF_ITER_FUNC). */
struct bpf_iter__tcp {
	struct bpf_iter_meta *meta;
	struct sock_common *sk_common;
	__u32 uid;
};

extern void cubictcp_init(struct sock *sk) __ksym;
extern __u32 cubictcp_recalc_ssthresh(struct sock *sk) __ksym;
extern void cubictcp_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern void cubictcp_state(struct sock *sk, __u8 new_state) __ksym;
enum tcp_ca_event {
	TA_CA_EVENT_TX_START = 0,
};
extern void cubictcp_cwnd_event(struct sock *sk, enum tcp_ca_event event) __ksym;
extern void cubictcp_acked(struct sock *sk, const struct ack_sample *sample) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

#define TA_TCP_CONGESTION 13
#define TA_TCP_CA_LOSS 4

static __always_inline void ta_count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&tcpaware_counters, &idx);

	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline int ta_name_is(const char *a, const char *b)
{
	for (int i = 0; i < 16; i++) {
		if (a[i] != b[i])
			return 0;
		if (!a[i])
			return 1;
	}
	return 1;
}

/* Puts a cubic socket on the wrapper (cubic sockets only: another algorithm is the
 * application's choice). Returns the applied bits (4: switched now), -1 when the socket is
 * not (and will not be) on the wrapper. */
static __always_inline int ta_use_wrapper(struct tcp_sock *tp)
{
	static const char cubic[16] = "cubic";
	struct tcpaware_cc *cc;
	char cur[16] = {};
	__u32 zero = 0;

	cc = bpf_map_lookup_elem(&tcpaware_ccname, &zero);
	if (!cc || !cc->name[0])
		return -1;
	if (bpf_probe_read_kernel(cur, sizeof(cur), tp->inet_conn.icsk_ca_ops->name))
		return -1;
	if (ta_name_is(cur, cubic)) {
		if (bpf_setsockopt(tp, TA_SOL_TCP, TA_TCP_CONGESTION, cc->name, sizeof(cc->name) - 1)) {
			ta_count(TCPAWARE_C_SETSOCKOPT_ERRORS);
			return -1;
		}
		ta_count(TCPAWARE_C_CC_SWITCHED);
		return 4;
	}
	if (!ta_name_is(cur, cc->name)) {
		ta_count(TCPAWARE_C_NOT_CUBIC);
		return -1;
	}
	return 0;
}

/* Puts a cubic socket on the wrapper and opens its loss window. Returns the applied bits. */
static __always_inline __u8 ta_open_window(struct tcp_sock *tp, struct tcpaware_peer *peer)
{
	struct tcpaware_sk *st;
	int applied = ta_use_wrapper(tp);

	if (applied < 0)
		return 0;
	st = bpf_sk_storage_get(&tcpaware_sks, tp, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return applied;
	st->loss_until_ns = bpf_ktime_get_ns() + (__u64)peer->loss_window_ms * 1000000;
	st->epoch = peer->epoch;
	st->restored = 0;
	st->used = 0;
	st->hold = 0;
	st->inflight = tp->packets_out;
	st->srtt_us = tp->srtt_us >> 3;
	st->rtt_us = peer->rtt_us;
	return applied | 8;
}

/* A soft switch is about to move the socket's packets to a path that may be faster: what is
 * in flight on the old path would then be overtaken by what follows on the new one, the
 * receiver would SACK the newer data first and RACK would retransmit the older in vain. Nothing
 * leaves (the wrapper's cong_control, ta_drain) until the old path's data is acknowledged, at
 * most 1.5 old srtt, or until the ACKs show the new path is the slower (ta_drain_until).
 * Once per drain number. */
static __always_inline __u8 ta_start_drain(struct tcp_sock *tp, struct tcpaware_peer *peer)
{
	struct tcpaware_sk *st;
	__u32 srtt = tp->srtt_us >> 3;
	__u64 now;
	int applied;

	st = bpf_sk_storage_get(&tcpaware_sks, tp, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st || st->drain_seq == peer->drain)
		return 0;
	st->drain_seq = peer->drain;
	/* Nothing in flight, nothing to overtake. */
	if (!tp->packets_out || !srtt)
		return 0;
	/* A new path known not to be faster cannot overtake the old one: the LU exchange measured
	 * it (the MN switching at its LU-ACK), or the correspondent switched first and its latest
	 * ACK came 1/8 slower than the srtt. Draining would only pause the socket. */
	if ((peer->rtt_us && peer->rtt_us >= srtt - srtt / 8) ||
	    (!peer->drain_wait && tp->rack.rtt_us > srtt + srtt / 8)) {
		ta_count(TCPAWARE_C_DRAIN_SKIPPED);
		return 0;
	}
	applied = ta_use_wrapper(tp);
	if (applied < 0)
		return 0;
	now = bpf_ktime_get_ns();
	st->drain_start_ns = now;
	st->drain_deadline_ns = now + (__u64)srtt * 1500;
	st->drain_nxt = tp->snd_nxt;
	st->drain_srtt_us = srtt;
	st->drain_min_rtt_us = srtt;
	st->drain_wait = peer->drain_wait;
	/* The correspondent has switched already: its ACKs come over the new path, and the
	 * latest sample may show it faster. */
	st->drain_slower = 0;
	if (!peer->drain_wait && tp->rack.rtt_us && tp->rack.rtt_us < srtt)
		st->drain_min_rtt_us = tp->rack.rtt_us;
	st->drain_cwnd = tp->snd_cwnd;
	st->drain_until_ns = st->drain_deadline_ns;
	ta_count(TCPAWARE_C_DRAINS);
	return applied | 16;
}

SEC("iter/tcp")
int tcpaware_iter(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct seq_file *seq = ctx->meta->seq;
	struct tcpaware_sock rec = {};
	struct tcpaware_peer *peer;
	struct tcp_sock *tp;
	int val;

	if (!skc)
		return 0;
	ta_count(TCPAWARE_C_SOCKETS_SEEN);
	if (skc->skc_family != TA_AF_INET6)
		return 0;
	__builtin_memcpy(&rec.daddr, &skc->skc_v6_daddr, sizeof(rec.daddr));
	peer = bpf_map_lookup_elem(&tcpaware_peers, &rec.daddr);
	if (!peer)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp) {
		ta_count(TCPAWARE_C_NOT_TCP_SOCK);
		return 0;
	}
	ta_count(TCPAWARE_C_SOCKETS_MATCHED);
	rec.tcp_state = skc->skc_state;
	/* Only synchronised connections carry data a move can strand. */
	if (rec.tcp_state == TA_TCP_ESTABLISHED || rec.tcp_state == TA_TCP_CLOSE_WAIT) {
		if (peer->rto_max_ms) {
			val = peer->rto_max_ms;
			if (bpf_setsockopt(tp, TA_SOL_TCP, TA_TCP_RTO_MAX_MS, &val, sizeof(val)) == 0) {
				rec.applied |= 1;
				ta_count(TCPAWARE_C_RTO_MAX_SET);
			} else {
				rec.failed |= 1;
				ta_count(TCPAWARE_C_SETSOCKOPT_ERRORS);
			}
		}
	}
	if (peer->drain && (rec.tcp_state == TA_TCP_ESTABLISHED || rec.tcp_state == TA_TCP_CLOSE_WAIT))
		rec.applied |= ta_start_drain(tp, peer);
	if (peer->loss_window_ms && (rec.tcp_state == TA_TCP_ESTABLISHED || rec.tcp_state == TA_TCP_CLOSE_WAIT))
		rec.applied |= ta_open_window(tp, peer);
	__builtin_memcpy(&rec.saddr, &skc->skc_v6_rcv_saddr, sizeof(rec.saddr));
	rec.sport = skc->skc_num;
	rec.dport = __builtin_bswap16(skc->skc_dport);
	rec.epoch = peer->epoch;
	rec.snd_una = tp->snd_una;
	rec.snd_nxt = tp->snd_nxt;
	rec.srtt_us = tp->srtt_us;
	rec.rto_jiffies = tp->inet_conn.icsk_rto;
	rec.backoff = tp->inet_conn.icsk_backoff;
	rec.cwnd = tp->snd_cwnd;
	rec.ssthresh = tp->snd_ssthresh;
	rec.packets_out = tp->packets_out;
	rec.lost_out = tp->lost_out;
	rec.retrans_out = tp->retrans_out;
	bpf_seq_write(seq, &rec, sizeof(rec));
	return 0;
}

/* The cubic wrapper. Outside a loss window every decision is cubic's or the kernel's own. */

#define TA_TCP_CA_CWR 2
#define TA_TCP_CA_RECOVERY 3
#define TA_TCP_INFINITE_SSTHRESH 0x7fffffff
#define TA_SK_PACING_NONE 0
#define TA_SK_PACING_NEEDED 1
/* tcp_input.c's ACK flags (stable since 2.6). */
#define TA_FLAG_DATA_ACKED 0x04
#define TA_FLAG_SYN_ACKED 0x10
#define TA_FLAG_DATA_SACKED 0x20
#define TA_FLAG_SND_UNA_ADVANCED 0x400
/* Defaults of net.ipv4.tcp_reordering, tcp_pacing_ss_ratio and tcp_pacing_ca_ratio: a BPF
 * congestion control cannot read the namespace's sysctls, so these are assumed. */
#define TA_REORDERING 3
#define TA_PACING_SS_RATIO 200
#define TA_PACING_CA_RATIO 120

static __always_inline struct tcpaware_sk *ta_window(struct sock *sk)
{
	struct tcpaware_sk *st = bpf_sk_storage_get(&tcpaware_sks, sk, 0, 0);

	if (!st || !st->loss_until_ns || bpf_ktime_get_ns() >= st->loss_until_ns)
		return 0;
	return st;
}

static __always_inline __u8 ta_ca_state(struct sock *sk)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;

	return BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
}

static __always_inline __u32 ta_in_flight(struct tcp_sock *tp)
{
	return tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
}

/* The window to hold through the move's fast recovery: what the old path carried (packets in
 * flight when the window opened, at most the window then), scaled down to the same rate when
 * the LU exchange measured a shorter RTT on the new path (a longer one lowers the rate by
 * itself: the window is kept, not grown). Nothing in flight then: nothing was stranded, and a
 * loss is the new path's (no hold). */
static __always_inline __u32 ta_hold_cwnd(struct tcp_sock *tp, struct tcpaware_sk *st)
{
	__u32 hold = tp->snd_cwnd;

	if (!st->inflight)
		return 0;
	if (st->inflight < hold)
		hold = st->inflight;
	if (st->rtt_us && st->srtt_us && st->rtt_us < st->srtt_us)
		hold = (__u32)((__u64)hold * st->rtt_us / st->srtt_us);
	if (hold > tp->snd_cwnd_clamp)
		hold = tp->snd_cwnd_clamp;
	return hold;
}

SEC("struct_ops/ta_init")
void ta_init(unsigned long long *ctx)
{
	cubictcp_init((struct sock *)ctx[0]);
	ta_count(TCPAWARE_C_WRAPPER_INIT);
}

/* The window's first loss episode is the move's (segments sent to a dead locator), not
 * congestion: ssthresh becomes what the old path carried (or cubic's, if that is more), so
 * neither fast recovery nor a timeout lowers the rate TCP returns to. A later loss in the
 * window is congestion on the new path and gets cubic's reduction. */
SEC("struct_ops/ta_ssthresh")
__u32 ta_ssthresh(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u32 cubic = cubictcp_recalc_ssthresh(sk);
	struct tcpaware_sk *st = bpf_sk_storage_get(&tcpaware_sks, sk, 0, 0);
	__u32 hold;

	/* Segments found lost during a drain were overtaken by what left before it took hold
	 * (and arrive late), or lost on the old path: either way not the new path's congestion,
	 * and cubic's value from the drained (zero) window would be two segments. */
	if (st && st->drain_until_ns)
		return tp->snd_ssthresh;
	st = ta_window(sk);
	if (!st || st->used)
		return cubic;
	st->used = 1;
	ta_count(TCPAWARE_C_SSTHRESH_KEPT);
	hold = ta_hold_cwnd(tp, st);
	st->hold = hold;
	return hold > cubic ? hold : cubic;
}

/* The kernel's Proportional Rate Reduction (RFC 6937, tcp_cwnd_reduction()), which it skips
 * for a congestion control with cong_control; prr_delivered is counted here. */
static __always_inline void ta_prr(struct tcp_sock *tp, struct tcpaware_sk *st, __u32 acked, int lost, int flag)
{
	__u32 in_flight = ta_in_flight(tp);
	int delta = (int)tp->snd_ssthresh - (int)in_flight;
	__u32 delivered;
	int sndcnt;

	if (!acked || !tp->prior_cwnd)
		return;
	st->prr_delivered += acked;
	delivered = st->prr_delivered;
	if (delta < 0) {
		__u64 dividend = (__u64)tp->snd_ssthresh * delivered + tp->prior_cwnd - 1;

		sndcnt = (int)(dividend / tp->prior_cwnd) - (int)tp->prr_out;
	} else {
		sndcnt = (int)(delivered - tp->prr_out);
		if (sndcnt < (int)acked)
			sndcnt = acked;
		if ((flag & TA_FLAG_SND_UNA_ADVANCED) && !lost)
			sndcnt++;
		if (sndcnt > delta)
			sndcnt = delta;
	}
	if (sndcnt < (tp->prr_out ? 0 : 1))
		sndcnt = tp->prr_out ? 0 : 1;
	tp->snd_cwnd = in_flight + sndcnt;
}

/* tcp_update_pacing_rate(): twice the current rate in slow start, 1.2 times after it. */
static __always_inline void ta_pacing_rate(struct sock *sk, struct tcp_sock *tp)
{
	__u64 rate = (__u64)tp->mss_cache * ((1000000 / 100) << 3);
	__u32 cwnd = tp->snd_cwnd;

	rate *= cwnd < tp->snd_ssthresh / 2 ? TA_PACING_SS_RATIO : TA_PACING_CA_RATIO;
	rate *= cwnd > tp->packets_out ? cwnd : tp->packets_out;
	if (tp->srtt_us)
		rate /= tp->srtt_us;
	if (rate > sk->sk_max_pacing_rate)
		rate = sk->sk_max_pacing_rate;
	sk->sk_pacing_rate = rate;
}

static __always_inline void ta_unhold(struct sock *sk, struct tcpaware_sk *st)
{
	st->held = 0;
	if (st->paced) {
		st->paced = 0;
		if (!st->drain_paced)
			sk->sk_pacing_status = TA_SK_PACING_NONE;
	}
}

/* When the drain may end before the old path's data is acknowledged: only when the
 * correspondent switched first and its ACKs came slower since (the latest RTT sample above
 * the srtt by 1/8: the new path is the slower one, so nothing sent on it can overtake). An
 * earlier sample well below the old srtt shows a faster path: wait. The same srtt on both
 * (equal paths, or a faster path the srtt already converged to) cannot tell: wait too. */
static __always_inline __u64 ta_drain_until(struct tcpaware_sk *st)
{
	__u32 srtt = st->drain_srtt_us;

	if (st->drain_wait || st->drain_min_rtt_us < srtt - srtt / 8 || !st->drain_slower)
		return st->drain_deadline_ns;
	return st->drain_start_ns;
}

/* One ACK during a drain: 1 while new data must still wait. At its end the window the old
 * path carried comes back, paced by the kernel for one window (at most one old srtt) so that
 * it does not leave in one burst. */
static __always_inline int ta_drain(struct sock *sk, struct tcp_sock *tp, struct tcpaware_sk *st, const struct rate_sample *rs)
{
	long rtt = rs->rtt_us;
	__u32 cwnd;
	__u64 now;

	if (!st->drain_until_ns)
		return 0;
	/* What left between the start and this first ACK (an application's write while the
	 * window had room) must arrive before new data follows, whichever path it took. */
	if ((__s32)(tp->snd_nxt - st->drain_nxt) > 0)
		st->drain_nxt = tp->snd_nxt;
	if (rtt > 0 && rtt < st->drain_min_rtt_us)
		st->drain_min_rtt_us = (__u32)rtt;
	if (!st->drain_wait && rtt > (long)(st->drain_srtt_us + st->drain_srtt_us / 8))
		st->drain_slower = 1;
	st->drain_until_ns = ta_drain_until(st);
	now = bpf_ktime_get_ns();
	/* A timeout: the old path does not deliver, nothing to protect. */
	if (ta_ca_state(sk) == TA_TCP_CA_LOSS) {
		st->drain_until_ns = 0;
		return 0;
	}
	if ((__s32)(tp->snd_una - st->drain_nxt) < 0 && now < st->drain_until_ns && now < st->drain_deadline_ns)
		return 1;
	if ((__s32)(tp->snd_una - st->drain_nxt) < 0)
		ta_count(now < st->drain_deadline_ns ? TCPAWARE_C_DRAIN_NOT_FASTER : TCPAWARE_C_DRAIN_EXPIRED);
	st->drain_until_ns = 0;
	cwnd = st->drain_cwnd;
	if (cwnd > tp->snd_cwnd_clamp)
		cwnd = tp->snd_cwnd_clamp;
	if (cwnd > tp->snd_cwnd)
		tp->snd_cwnd = cwnd;
	if (sk->sk_pacing_status == TA_SK_PACING_NONE) {
		sk->sk_pacing_status = TA_SK_PACING_NEEDED;
		st->drain_paced = 1;
		st->pace_una = tp->snd_nxt + tp->snd_cwnd * tp->mss_cache;
		st->pace_until_ns = now + (__u64)st->drain_srtt_us * 1000;
	}
	return 0;
}

/* The kernel's per-ACK window update (tcp_cong_control() without cong_control: PRR while
 * reducing, cubic's growth when the ACK may raise the window, then the pacing rate), except
 * in the move's fast recovery: there the window stays at the hold, so the segments lost on the
 * dead path are retransmitted at the old path's rate (paced by the kernel over about one RTT)
 * instead of PRR's slow start from one segment. A loss on the new path during the hold ends
 * it with cubic's reduction. After a timeout in the window, the first ACK gives the window
 * back its value from before the timeout (prior_cwnd/prior_ssthresh, what the kernel's own
 * undo restores when it finds a timeout spurious). */
SEC("struct_ops/ta_cong_control")
void ta_cong_control(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	const struct rate_sample *rs = (const struct rate_sample *)ctx[3];
	__u32 ack = (__u32)ctx[1];
	int flag = (int)ctx[2];
	__u32 acked = rs->acked_sacked;
	int lost = rs->losses;
	__u8 state = ta_ca_state(sk);
	struct tcpaware_sk *st, *win;
	__u32 cwnd;
	int draining;

	st = bpf_sk_storage_get(&tcpaware_sks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return; /* no memory: the window stays as it is for this ACK */
	win = ta_window(sk);
	draining = ta_drain(sk, tp, st, rs);
	if (st->drain_paced && ((__s32)(tp->snd_una - st->pace_una) >= 0 || bpf_ktime_get_ns() >= st->pace_until_ns)) {
		st->drain_paced = 0;
		if (!st->paced)
			sk->sk_pacing_status = TA_SK_PACING_NONE;
	}
	if (state == TA_TCP_CA_CWR || state == TA_TCP_CA_RECOVERY) {
		if (st->held && lost > 0) {
			ta_unhold(sk, st);
			tp->snd_ssthresh = cubictcp_recalc_ssthresh(sk);
			ta_count(TCPAWARE_C_HOLD_ABORTED);
		}
		ta_prr(tp, st, acked, lost, flag);
		if (state == TA_TCP_CA_RECOVERY && win && st->hold && !st->restored) {
			/* The first ACK of the move's recovery starts the hold. */
			st->restored = 1;
			st->held = 1;
			ta_count(TCPAWARE_C_HOLDS);
			if (sk->sk_pacing_status == TA_SK_PACING_NONE) {
				sk->sk_pacing_status = TA_SK_PACING_NEEDED;
				st->paced = 1;
			}
		}
		if (st->held && tp->snd_cwnd < st->hold)
			tp->snd_cwnd = st->hold;
	} else {
		if (st->held)
			ta_unhold(sk, st);
		if (!draining && (tp->reordering > TA_REORDERING ? (flag & (TA_FLAG_DATA_ACKED | TA_FLAG_SYN_ACKED | TA_FLAG_DATA_SACKED))
								 : (flag & TA_FLAG_DATA_ACKED))) {
			cubictcp_cong_avoid(sk, ack, acked);
			tp->snd_cwnd_stamp = (__u32)bpf_jiffies64();
		}
		if (state == TA_TCP_CA_LOSS && win && !st->restored) {
			st->restored = 1;
			cwnd = tp->prior_cwnd;
			if (cwnd > tp->snd_cwnd_clamp)
				cwnd = tp->snd_cwnd_clamp;
			if (cwnd > tp->snd_cwnd) {
				tp->snd_cwnd = cwnd;
				ta_count(TCPAWARE_C_CWND_RESTORED);
			}
			if (tp->prior_ssthresh > tp->snd_ssthresh)
				tp->snd_ssthresh = tp->prior_ssthresh;
		}
	}
	if (draining) {
		/* Nothing leaves, neither new data nor a retransmission: RACK's reordering timer
		 * marks segments lost and retransmits outside this callback, within the window
		 * last set here, so any room left would go to a spurious retransmission. The
		 * kernel tolerates a zero window here: the probe timer, the only sender that
		 * ignores it besides a loss probe, runs only with nothing in flight, and then
		 * the drain has ended (all acknowledged) on this ACK. Cubic's growth, which
		 * divides by the window, is not called while draining. */
		tp->snd_cwnd = 0;
	}
	ta_pacing_rate(sk, tp);
}

/* cong_avoid is required by the kernel but not called while cong_control is set. */
SEC("struct_ops/ta_cong_avoid")
void ta_cong_avoid(unsigned long long *ctx)
{
	cubictcp_cong_avoid((struct sock *)ctx[0], (__u32)ctx[1], (__u32)ctx[2]);
}

/* With cong_control set the kernel also skips tcp_end_cwnd_reduction(): at the end of CWR or
 * of a recovery that was not undone the window drops to ssthresh here, as it would there
 * (set_state runs before the state changes, so the old state is still readable). A new
 * reduction restarts PRR's count. */
SEC("struct_ops/ta_set_state")
void ta_set_state(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u8 next = (__u8)ctx[1];
	__u8 prev = ta_ca_state(sk);
	struct tcpaware_sk *st;
	int reducing = prev == TA_TCP_CA_CWR || prev == TA_TCP_CA_RECOVERY;

	if (reducing && next < TA_TCP_CA_CWR && tp->snd_ssthresh < TA_TCP_INFINITE_SSTHRESH &&
	    (prev == TA_TCP_CA_CWR || tp->undo_marker))
		tp->snd_cwnd = tp->snd_ssthresh;
	if (!reducing && (next == TA_TCP_CA_CWR || next == TA_TCP_CA_RECOVERY)) {
		st = bpf_sk_storage_get(&tcpaware_sks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (st)
			st->prr_delivered = 0;
	}
	if (reducing && next != TA_TCP_CA_CWR && next != TA_TCP_CA_RECOVERY) {
		st = bpf_sk_storage_get(&tcpaware_sks, sk, 0, 0);
		if (st && st->held)
			ta_unhold(sk, st);
	}
	cubictcp_state(sk, next);
}

SEC("struct_ops/ta_cwnd_event")
void ta_cwnd_event(unsigned long long *ctx)
{
	cubictcp_cwnd_event((struct sock *)ctx[0], (enum tcp_ca_event)ctx[1]);
}

SEC("struct_ops/ta_pkts_acked")
void ta_pkts_acked(unsigned long long *ctx)
{
	cubictcp_acked((struct sock *)ctx[0], (const struct ack_sample *)ctx[1]);
}

SEC("struct_ops/ta_undo_cwnd")
__u32 ta_undo_cwnd(unsigned long long *ctx)
{
	return tcp_reno_undo_cwnd((struct sock *)ctx[0]);
}

/* The name is replaced by the loader (one per daemon). */
SEC(".struct_ops.link")
struct tcp_congestion_ops tcpaware_cubic = {
	.init = (void *)ta_init,
	.ssthresh = (void *)ta_ssthresh,
	.cong_avoid = (void *)ta_cong_avoid,
	.cong_control = (void *)ta_cong_control,
	.set_state = (void *)ta_set_state,
	.cwnd_event = (void *)ta_cwnd_event,
	.pkts_acked = (void *)ta_pkts_acked,
	.undo_cwnd = (void *)ta_undo_cwnd,
	.name = "tcpaware",
};
