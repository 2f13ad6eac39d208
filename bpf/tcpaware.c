// SPDX-License-Identifier: GPL-2.0
/* tcpaware: a BPF TCP iterator the daemon runs when a correspondent starts or ends a move.
 * For every TCP socket whose remote address is a correspondent's session view in
 * tcpaware_peers it applies what the entry asks (bpf_setsockopt) and writes the socket's state
 * to the iterator's output, from which the daemon sends the RFC 6069 revert signal.
 * And a tcp_congestion_ops that is the kernel's cubic (its kfuncs) except inside a loss window
 * the iterator opens at the end of a move: there a loss does not lower ssthresh, and after a
 * timeout the first ACK gives the window back its value from before the timeout. */
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

struct tcp_sock {
	struct inet_connection_sock inet_conn;
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
 * application's choice) and opens its loss window. Returns the applied bits. */
static __always_inline __u8 ta_open_window(struct tcp_sock *tp, struct tcpaware_peer *peer)
{
	static const char cubic[16] = "cubic";
	struct tcpaware_cc *cc;
	struct tcpaware_sk *st;
	char cur[16] = {};
	__u32 zero = 0;
	__u8 applied = 0;

	cc = bpf_map_lookup_elem(&tcpaware_ccname, &zero);
	if (!cc || !cc->name[0])
		return 0;
	if (bpf_probe_read_kernel(cur, sizeof(cur), tp->inet_conn.icsk_ca_ops->name))
		return 0;
	if (ta_name_is(cur, cubic)) {
		if (bpf_setsockopt(tp, TA_SOL_TCP, TA_TCP_CONGESTION, cc->name, sizeof(cc->name) - 1)) {
			ta_count(TCPAWARE_C_SETSOCKOPT_ERRORS);
			return 0;
		}
		ta_count(TCPAWARE_C_CC_SWITCHED);
		applied |= 4;
	} else if (!ta_name_is(cur, cc->name)) {
		ta_count(TCPAWARE_C_NOT_CUBIC);
		return 0;
	}
	st = bpf_sk_storage_get(&tcpaware_sks, tp, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return applied;
	st->loss_until_ns = bpf_ktime_get_ns() + (__u64)peer->loss_window_ms * 1000000;
	st->epoch = peer->epoch;
	st->restored = 0;
	return applied | 8;
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

/* The cubic wrapper. Outside a loss window every call is cubic's own. */

static __always_inline struct tcpaware_sk *ta_window(struct sock *sk)
{
	struct tcpaware_sk *st = bpf_sk_storage_get(&tcpaware_sks, sk, 0, 0);

	if (!st || !st->loss_until_ns || bpf_ktime_get_ns() >= st->loss_until_ns)
		return 0;
	return st;
}

SEC("struct_ops/ta_init")
void ta_init(unsigned long long *ctx)
{
	cubictcp_init((struct sock *)ctx[0]);
	ta_count(TCPAWARE_C_WRAPPER_INIT);
}

/* A loss inside the window is the move's (segments sent to a dead locator), not congestion:
 * ssthresh stays what it was before (and, on entering recovery, at least the window then in
 * use), so neither fast recovery nor a timeout lowers the rate TCP returns to. */
SEC("struct_ops/ta_ssthresh")
__u32 ta_ssthresh(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u32 cubic = cubictcp_recalc_ssthresh(sk);

	if (!ta_window(sk))
		return cubic;
	ta_count(TCPAWARE_C_SSTHRESH_KEPT);
	if (tp->snd_ssthresh < 0x7fffffff && tp->snd_ssthresh > tp->snd_cwnd)
		return tp->snd_ssthresh;
	return tp->snd_cwnd > cubic ? tp->snd_cwnd : cubic;
}

/* After a timeout inside the window (state Loss, cwnd cut to what is in flight + 1), the first
 * ACK restores the window TCP had before the timeout (prior_cwnd/prior_ssthresh, what the
 * kernel's own undo restores when it finds a timeout spurious): the segments the timeout marked
 * lost are then retransmitted at that rate instead of in slow start. */
SEC("struct_ops/ta_cong_avoid")
void ta_cong_avoid(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcpaware_sk *st;
	__u32 cwnd;

	cubictcp_cong_avoid(sk, (__u32)ctx[1], (__u32)ctx[2]);
	st = ta_window(sk);
	if (!st || st->restored || BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state) != TA_TCP_CA_LOSS)
		return;
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

SEC("struct_ops/ta_set_state")
void ta_set_state(unsigned long long *ctx)
{
	cubictcp_state((struct sock *)ctx[0], (__u8)ctx[1]);
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
	.set_state = (void *)ta_set_state,
	.cwnd_event = (void *)ta_cwnd_event,
	.pkts_acked = (void *)ta_pkts_acked,
	.undo_cwnd = (void *)ta_undo_cwnd,
	.name = "tcpaware",
};
