/* ILNPv6 in UDP/IPv6: a locator pair whose path drops packets with a Destination Options header
 * (RFC 7872 measured many; RFC 9098 s.5 explains why) carries the session's packets, nonce
 * header and all, inside UDP over IPv6, as encap.h does over IPv4.
 *
 * The outer addresses are the inner wire addresses ([L64:NID] both ways): the pair stays the
 * pair, routers forward on the same prefixes, and a receiver accepts only an outer header that
 * names exactly the inner addresses (no roaming over IPv6: a locator is learned only from an
 * LU, then verified, as any other). The unwrapped packet goes through the same nonce, locator
 * and credit checks as a native one; only an accepted packet proves the pair.
 *
 * Both ends agree per pair without telling each other: the one that detected the native
 * packets' loss (internal/pathprobe) turns its pair on; the peer turns its side of the pair on
 * when a nonce-verified encapsulated packet arrives on it, and back to native when a verified
 * native one does (an echo request excepted: the detecting side's native probe asks for a
 * native answer, whose arrival turns the detecting side back, and its next native packet the
 * peer). Sessions without a pair pay one flag test (ILNP_SESS_ENCAP6).
 *
 * The outer UDP checksum is zero: allowed for tunnel protocols over IPv6 (RFC 6935, with RFC
 * 6936's conditions: the inner packet carries its own end-to-end checksum and the nonce, and a
 * receiver checks the lengths and addresses below before anything else).
 *
 * Overhead: IPv6 40 + UDP 8 = 48 bytes beside the nonce header; the daemon lowers the peer's
 * route MTU while a pair of its session is on. A packet that would not fit is counted and
 * dropped, never fragmented.
 */
#ifndef ILNP_ENCAP6_H
#define ILNP_ENCAP6_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "maps.h"
#include "parse.h"
#include "observe.h"
#include "encap.h"

#define ILNP_ENCAP6_HLEN (ILNP_IP6_HLEN + ILNP_UDP_HLEN)
#define ILNP_ENCAP6_HOPS 64
/* The byte after a liveness probe's pair (internal/pathprobe): 'N' asks for the probe and its
 * echo to go native whatever the pair's state. */
#define ILNP_PROBE_NATIVE_OFF 32
#define ILNP_PROBE_NATIVE 'N'
#define ILNP_ICMPV6_ECHO_REQUEST 128

struct ilnp_encap6_hdr {
	__be32 vtc_flow;
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__be64 src[2]; /* locator, NID */
	__be64 dst[2];
	struct ilnp_udp udp;
};

/* The daemon's plain and exthdr probes (internal/pathprobe) and their echoes go between the
 * pair's wire addresses as plain IPv6, also when those are the session view: with the nonce
 * header they would test nothing. */
#define ILNP_PLAIN_PROBE_PAYLOAD 0x69616c70504e4c49ULL /* "ILNPplai" read as a little-endian u64 */

static __always_inline int ilnp_is_plain_probe(struct __sk_buff *skb, const struct ilnp_pkt *pkt)
{
	__u64 data;

	if (!pkt->l4_off || (pkt->icmp_type != ILNP_ICMPV6_ECHO_REQUEST && pkt->icmp_type != 129))
		return 0;
	if (bpf_skb_load_bytes(skb, pkt->l4_off + 8, &data, sizeof(data)) < 0)
		return 0;
	return data == ILNP_PLAIN_PROBE_PAYLOAD;
}

static __always_inline struct ilnp_encap6_pair *
ilnp_encap6_pair(const struct ilnp_session_key *key, __be64 local, __be64 remote)
{
	struct ilnp_path_key pk = {.local_nid = key->local_nid, .remote_nid = key->remote_nid,
				   .local_l64 = local, .remote_l64 = remote};

	return bpf_map_lookup_elem(&encap6_pairs, &pk);
}

/* A liveness probe that asks to go native (read before the nonce moves the payload). */
static __always_inline int ilnp_encap6_native_probe(struct __sk_buff *skb, const struct ilnp_pkt *pkt)
{
	__u8 b;

	if (bpf_skb_load_bytes(skb, pkt->l4_off + ILNP_PROBE_NATIVE_OFF, &b, 1) < 0)
		return 0;
	return b == ILNP_PROBE_NATIVE;
}

/* Egress, after ilnp_encap(): is (local, remote) encapsulated? Only sessions flagged so ask. */
static __always_inline struct ilnp_encap6_pair *
ilnp_encap6_wanted(const struct ilnp_session_key *key, __be64 local, __be64 remote, int native)
{
	struct ilnp_encap6_pair *p;

	if (native)
		return 0;
	p = ilnp_encap6_pair(key, local, remote);
	return p && p->state == ILNP_ENCAP6_ON ? p : 0;
}

/* Egress: IPv6 + UDP in front of the ILNPv6 packet, out of the local locator's interface. */
static __always_inline int ilnp_encap6_egress(struct __sk_buff *skb, const struct ilnp_session_key *key,
					      struct ilnp_encap6_pair *p, __be64 local, __be64 remote)
{
	struct ilnp_encap_config *ec = ilnp_encap_get_config();
	struct bpf_redir_neigh nh = {.nh_family = 10 /* AF_INET6 */};
	struct ilnp_local_locator *loc;
	struct ilnp_encap6_hdr h = {};
	__u32 inner = skb->len - ILNP_ETH_HLEN, ifindex, mtu = 0;
	__u64 flags = BPF_F_ADJ_ROOM_ENCAP_L3_IPV6 | BPF_F_ADJ_ROOM_ENCAP_L4_UDP;

	if (!ec || !ec->port6 || skb->len < ILNP_ETH_HLEN + ILNP_IP6_HLEN) {
		ilnp_count(ILNP_C_EG_ENCAP6_ERRORS);
		return ILNP_ENCAP_DROP;
	}
	if (inner + ILNP_UDP_HLEN > 0xffff) {
		ilnp_count(ILNP_C_EG_ENCAP6_TOO_BIG);
		return ILNP_ENCAP_DROP;
	}
	loc = bpf_map_lookup_elem(&local_locators, &local);
	ifindex = loc && loc->ifindex ? loc->ifindex : skb->ifindex;
	if (bpf_skb_adjust_room(skb, ILNP_ENCAP6_HLEN, BPF_ADJ_ROOM_MAC, flags) < 0) {
		ilnp_count(ILNP_C_EG_ENCAP6_ERRORS);
		return ILNP_ENCAP_DROP;
	}
	h.vtc_flow = bpf_htonl(0x60000000);
	h.payload_len = bpf_htons(inner + ILNP_UDP_HLEN);
	h.nexthdr = ILNP_NH_UDP;
	h.hop_limit = ILNP_ENCAP6_HOPS;
	h.src[0] = local;
	h.src[1] = key->local_nid;
	h.dst[0] = remote;
	h.dst[1] = key->remote_nid;
	h.udp.source = ec->port6;
	h.udp.dest = ec->port6;
	h.udp.len = h.payload_len;
	if (bpf_skb_store_bytes(skb, ILNP_ETH_HLEN, &h, sizeof(h), 0) < 0) {
		ilnp_count(ILNP_C_EG_ENCAP6_ERRORS);
		return ILNP_ENCAP_DROP;
	}
	if (bpf_check_mtu(skb, ifindex, &mtu, 0, 0) != 0) {
		ilnp_count(ILNP_C_EG_ENCAP6_TOO_BIG);
		return ILNP_ENCAP_DROP;
	}
	__sync_fetch_and_add(&p->tx_packets, 1);
	ilnp_count(ILNP_C_EG_ENCAP6);
	if (!loc || !loc->ifindex || loc->ifindex == skb->ifindex)
		return 0; /* TCX_PASS */
	/* The device redirected to runs its egress program too: the outer packet is not the
	 * session's (ilnp.c ILNP_REDIRECT_MARK). */
	skb->mark = 0x494c4e50;
	if (!((__u64 *)loc->nexthop)[0] && !((__u64 *)loc->nexthop)[1])
		return bpf_redirect_neigh(loc->ifindex, 0, 0, 0);
	__builtin_memcpy(nh.ipv6_nh, loc->nexthop, 16);
	return bpf_redirect_neigh(loc->ifindex, &nh, sizeof(nh), 0);
}

/* Ingress entry: UDP/IPv6 to the encap6 port loses its outer headers (rx->state = DECAP,
 * rx->v6); everything else is left alone. Native ILNP (Next Header 60) leaves on one byte read
 * in place. Returns 0 to continue, ILNP_ENCAP_DROP when the packet was ours but unusable. */
static __always_inline int ilnp_encap6_ingress(struct __sk_buff *skb, struct ilnp_encap_rx *rx)
{
	struct ilnp_encap_config *ec;
	struct ilnp_udp udp;
	__be16 plen, inner_plen;
	__be64 a, b;
	__u8 nh, ver;

	if (rx->state != ILNP_ENCAP_RX_NONE || skb->protocol != bpf_htons(ILNP_ETH_P_IPV6))
		return 0;
	/* The verifier refuses a context pointer the compiler moved (ctx + offsetof(data))
	 * and shared with parse.h's reads: this copy is opaque to it. */
	struct __sk_buff *ctx = skb;

	asm volatile("" : "+r"(ctx));
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;

	if (data + ILNP_ETH_HLEN + 7 <= data_end)
		nh = *(__u8 *)(data + ILNP_ETH_HLEN + 6);
	else if (bpf_skb_load_bytes(skb, ILNP_ETH_HLEN + 6, &nh, 1) < 0)
		return 0;
	if (nh != ILNP_NH_UDP)
		return 0;
	ec = ilnp_encap_get_config();
	if (!ec || !ec->port6)
		return 0;
	/* Both ports are the encapsulation port (encap6 egress): another application's datagram
	 * to an ephemeral port that happens to be the same number is left to the stack. */
	if (bpf_skb_load_bytes(skb, ILNP_ETH_HLEN + ILNP_IP6_HLEN, &udp, sizeof(udp)) < 0 ||
	    udp.dest != ec->port6 || udp.source != ec->port6)
		return 0;
	if (bpf_skb_load_bytes(skb, ILNP_ETH_HLEN + 4, &plen, 2) < 0 ||
	    bpf_skb_load_bytes(skb, ILNP_ETH_HLEN + ILNP_ENCAP6_HLEN, &ver, 1) < 0 ||
	    bpf_skb_load_bytes(skb, ILNP_ETH_HLEN + ILNP_ENCAP6_HLEN + 4, &inner_plen, 2) < 0)
		goto bad;
	/* The UDP datagram fills the outer payload and the inner packet the datagram. */
	if (udp.len != plen || bpf_ntohs(plen) < ILNP_ENCAP6_HLEN ||
	    ILNP_ETH_HLEN + ILNP_IP6_HLEN + (__u32)bpf_ntohs(plen) > skb->len || (ver >> 4) != 6 ||
	    ILNP_IP6_HLEN + (__u32)bpf_ntohs(inner_plen) != (__u32)bpf_ntohs(plen) - ILNP_UDP_HLEN)
		goto bad;
	/* The outer addresses are the inner ones (no roaming over IPv6). */
	for (int i = 0; i < 4; i++) {
		if (bpf_skb_load_bytes(skb, ILNP_ADDRS_OFF + i * 8, &a, 8) < 0 ||
		    bpf_skb_load_bytes(skb, ILNP_ADDRS_OFF + ILNP_ENCAP6_HLEN + i * 8, &b, 8) < 0 || a != b)
			goto bad;
		if (i == 0)
			rx->src_l32 = a;
		if (i == 2)
			rx->dst_l32 = a;
	}
	if (bpf_skb_adjust_room(skb, -ILNP_ENCAP6_HLEN, BPF_ADJ_ROOM_MAC, ILNP_ADJ_ROOM_DECAP_L3_IPV6) < 0) {
		ilnp_count(ILNP_C_IN_ERRORS);
		return ILNP_ENCAP_DROP;
	}
	rx->state = ILNP_ENCAP_RX_DECAP;
	rx->v6 = 1;
	ilnp_count(ILNP_C_IN_ENCAP6);
	return 0;
bad:
	ilnp_count(ILNP_C_IN_ENCAP6_BAD_OUTER);
	return ILNP_ENCAP_DROP;
}

/* A pair the peer started encapsulating: its entry. Its own frame (noinline), so that the
 * ingress program's stack, which the ICMPv6 error subprogram adds to, stays within 512 bytes. */
static __noinline void ilnp_encap6_learn(const struct ilnp_session_key *key, __be64 local, __be64 remote, __u64 now)
{
	struct ilnp_path_key pk = {.local_nid = key->local_nid, .remote_nid = key->remote_nid,
				   .local_l64 = local, .remote_l64 = remote};
	struct ilnp_encap6_pair v = {.state = ILNP_ENCAP6_ON, .origin = ILNP_ENCAP6_BY_PEER,
				     .rx_packets = 1, .changed_ns = now};

	bpf_map_update_elem(&encap6_pairs, &pk, &v, BPF_NOEXIST);
	ilnp_count(ILNP_C_IN_ENCAP6_LEARNED);
}

/* Ingress, a packet of the session accepted on (local, remote): an encapsulated one turns the
 * pair on (the peer's proof that native does not pass), a native one other than an echo
 * request turns it back off (native passes towards us again). */
static __always_inline void ilnp_encap6_seen(const struct ilnp_session_key *key, struct ilnp_session *sess,
					     const struct ilnp_encap_rx *rx, __be64 local, __be64 remote,
					     int echo_request, __u64 now)
{
	struct ilnp_encap6_pair *p;

	if (rx->state == ILNP_ENCAP_RX_DECAP && rx->v6) {
		p = ilnp_encap6_pair(key, local, remote);
		if (!p) {
			ilnp_encap6_learn(key, local, remote, now);
		} else {
			__sync_fetch_and_add(&p->rx_packets, 1);
			if (p->state != ILNP_ENCAP6_ON) {
				p->state = ILNP_ENCAP6_ON;
				p->origin = ILNP_ENCAP6_BY_PEER;
				p->changed_ns = now;
				ilnp_count(ILNP_C_IN_ENCAP6_LEARNED);
			}
		}
		if (!(sess->flags & ILNP_SESS_ENCAP6))
			sess->flags |= ILNP_SESS_ENCAP6;
		return;
	}
	if (!(sess->flags & ILNP_SESS_ENCAP6) || rx->state != ILNP_ENCAP_RX_NONE || echo_request)
		return;
	p = ilnp_encap6_pair(key, local, remote);
	if (p && p->state == ILNP_ENCAP6_ON) {
		p->state = ILNP_ENCAP6_NATIVE;
		p->changed_ns = now;
		ilnp_count(ILNP_C_IN_ENCAP6_NATIVE);
	}
}

#endif
