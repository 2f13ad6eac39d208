/* ICMPv6 Packet Too Big from the datapath (RFC 4443 s.3.2). A real tunnel entry point answers a
 * packet the tunnel cannot take with one (RFC 2473 s.7.1), so the sender's path MTU discovery
 * adapts; veth would otherwise drop the grown frame without a trace. */
#ifndef MIP6_ICMP_H
#define MIP6_ICMP_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "maps.h"
#include "parse.h"

#define MIP6_NH_ICMPV6 58
#define MIP6_ICMPV6_PACKET_TOO_BIG 2
#define MIP6_ICMPV6_INFO_MIN 128 /* types below are errors, never answered (s.2.4 (e)) */
#define MIP6_CSUM_CHUNK 512      /* bpf_csum_diff takes at most 512 bytes per call */

/* The upper-layer pseudo-header of RFC 8200 s.8.1. */
struct mip6_pseudo {
	struct mip6_addr src;
	struct mip6_addr dst;
	__be32 len;
	__u8 zero[3];
	__u8 nexthdr;
};

struct mip6_icmp_ptb {
	__u8 type;
	__u8 code;
	__u16 csum;
	__be32 mtu;
};

static __always_inline __u16 mip6_csum_fold(__u64 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~s & 0xffff;
}

/* Turns the packet (IPv6 header *orig at MIP6_IP6_OFF) into a Packet Too Big from `from` to
 * orig->src announcing mtu, quoting as much of the packet as keeps the message within 1280
 * bytes (rounded down to 4 bytes for the checksum helper). -1: not to be sent (the packet is an
 * ICMPv6 error itself) or not buildable; the caller drops the packet. */
static __always_inline int mip6_make_ptb(struct __sk_buff *skb, const struct mip6_ip6 *orig,
					 const struct mip6_addr *from, __u32 mtu)
{
	struct mip6_ptb_quote *q;
	struct mip6_pseudo ph = {};
	struct mip6_icmp_ptb icmp = {};
	struct mip6_ip6 ip6 = {};
	__u64 qlen = MIP6_IP6_HLEN + (__u64)bpf_ntohs(orig->payload_len);
	__u64 c1, c2, c3;
	__u32 zero = 0, l4 = 0;
	__u8 proto = 0, type;
	__s64 sum;

	if (mip6_upper(skb, orig->nexthdr, MIP6_EXT_OFF, &proto, &l4) == 0 && proto == MIP6_NH_ICMPV6 &&
	    (bpf_skb_load_bytes(skb, l4, &type, 1) < 0 || type < MIP6_ICMPV6_INFO_MIN))
		return -1;
	q = bpf_map_lookup_elem(&ptb_quote, &zero);
	if (!q)
		return -1;
	if (qlen > MIP6_PTB_QUOTE_MAX)
		qlen = MIP6_PTB_QUOTE_MAX;
	qlen &= ~3ULL;
	/* Keep the bound checks on the registers the helpers get, where the verifier sees them. */
	asm volatile("" : "+r"(qlen));
	if (qlen < MIP6_IP6_HLEN || qlen > MIP6_PTB_QUOTE_MAX ||
	    bpf_skb_load_bytes(skb, MIP6_IP6_OFF, q->b, qlen) < 0)
		return -1;

	ph.src = *from;
	ph.dst = orig->src;
	ph.len = bpf_htonl(sizeof(icmp) + qlen);
	ph.nexthdr = MIP6_NH_ICMPV6;
	icmp.type = MIP6_ICMPV6_PACKET_TOO_BIG;
	icmp.mtu = bpf_htonl(mtu);
	c1 = qlen > MIP6_CSUM_CHUNK ? MIP6_CSUM_CHUNK : qlen;
	c2 = qlen - c1 > MIP6_CSUM_CHUNK ? MIP6_CSUM_CHUNK : qlen - c1;
	c3 = qlen - c1 - c2;
	asm volatile("" : "+r"(c1), "+r"(c2), "+r"(c3));
	if (c1 > MIP6_CSUM_CHUNK || c2 > MIP6_CSUM_CHUNK || c3 > MIP6_PTB_QUOTE_MAX - 2 * MIP6_CSUM_CHUNK)
		return -1;
	sum = bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph), 0);
	if (sum >= 0)
		sum = bpf_csum_diff(0, 0, (__be32 *)&icmp, sizeof(icmp), (__u32)sum);
	if (sum >= 0)
		sum = bpf_csum_diff(0, 0, (__be32 *)q->b, c1, (__u32)sum);
	if (sum >= 0 && c2)
		sum = bpf_csum_diff(0, 0, (__be32 *)(q->b + MIP6_CSUM_CHUNK), c2, (__u32)sum);
	if (sum >= 0 && c3)
		sum = bpf_csum_diff(0, 0, (__be32 *)(q->b + 2 * MIP6_CSUM_CHUNK), c3, (__u32)sum);
	if (sum < 0)
		return -1;
	icmp.csum = mip6_csum_fold((__u32)sum);

	/* Trim to the quote (this also ends GSO for a super-packet), then room for the new
	 * IPv6 and ICMPv6 headers in front of it. */
	if (bpf_skb_change_tail(skb, MIP6_ETH_HLEN + qlen, 0) < 0 ||
	    bpf_skb_adjust_room(skb, MIP6_IP6_HLEN + sizeof(icmp), BPF_ADJ_ROOM_MAC, 0) < 0)
		return -1;
	ip6.vtcfl = bpf_htonl(0x60000000);
	ip6.payload_len = bpf_htons(sizeof(icmp) + qlen);
	ip6.nexthdr = MIP6_NH_ICMPV6;
	ip6.hop_limit = 64;
	ip6.src = *from;
	ip6.dst = orig->src;
	if (bpf_skb_store_bytes(skb, MIP6_IP6_OFF, &ip6, sizeof(ip6), 0) < 0 ||
	    bpf_skb_store_bytes(skb, MIP6_EXT_OFF, &icmp, sizeof(icmp), 0) < 0)
		return -1;
	return 0;
}

/* Swaps the Ethernet addresses, so that a packet turned around to the ingress of the device
 * it was leaving is addressed to that device. */
static __always_inline int mip6_swap_eth(struct __sk_buff *skb)
{
	__u8 mac[12], swapped[12];

	if (bpf_skb_load_bytes(skb, 0, mac, 12) < 0)
		return -1;
	__builtin_memcpy(swapped, mac + 6, 6);
	__builtin_memcpy(swapped + 6, mac, 6);
	return bpf_skb_store_bytes(skb, 0, swapped, 12, 0);
}

#endif
