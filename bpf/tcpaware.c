// SPDX-License-Identifier: GPL-2.0
/* tcpaware: a BPF TCP iterator the daemon runs when a correspondent starts or ends a move.
 * For every TCP socket whose remote address is a correspondent's session view in
 * tcpaware_peers it applies what the entry asks (bpf_setsockopt) and writes the socket's state
 * to the iterator's output, from which the daemon sends the RFC 6069 revert signal. */
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
#define TA_TCP_BPF_RTO_MIN 1004
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

struct inet_connection_sock {
	__u32 icsk_rto;
	__u8 icsk_backoff;
} TA_PRESERVE;

struct tcp_sock {
	struct inet_connection_sock inet_conn;
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

static __always_inline void ta_count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&tcpaware_counters, &idx);

	if (v)
		__sync_fetch_and_add(v, 1);
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
		if (peer->rto_min_us) {
			val = peer->rto_min_us;
			if (bpf_setsockopt(tp, TA_SOL_TCP, TA_TCP_BPF_RTO_MIN, &val, sizeof(val)) == 0) {
				rec.applied |= 2;
				ta_count(TCPAWARE_C_RTO_MIN_SET);
			} else {
				rec.failed |= 2;
				ta_count(TCPAWARE_C_SETSOCKOPT_ERRORS);
			}
		}
	}
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
