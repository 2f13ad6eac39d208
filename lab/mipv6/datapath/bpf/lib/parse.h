/* Reading the parts of an IPv6 packet the Mobile IPv6 datapath looks at. Every read goes through
 * bpf_skb_load_bytes, so a short packet is an error the caller sees and non-linear (GSO) packets
 * read the same as linear ones. */
#ifndef MIP6_PARSE_H
#define MIP6_PARSE_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "maps.h"

#define MIP6_ETH_HLEN 14
#define MIP6_ETH_P_IPV6 0x86DD
#define MIP6_IP6_OFF MIP6_ETH_HLEN
#define MIP6_IP6_HLEN 40
#define MIP6_EXT_OFF (MIP6_IP6_OFF + MIP6_IP6_HLEN)

#define MIP6_NH_HOPOPTS 0
#define MIP6_NH_IPV6 41 /* RFC 2473 IPv6-in-IPv6 */
#define MIP6_NH_ROUTING 43
#define MIP6_NH_FRAGMENT 44
#define MIP6_NH_AUTH 51
#define MIP6_NH_DSTOPTS 60
#define MIP6_NH_MOBILITY 135 /* RFC 6275 s.6.1 */

#define MIP6_OPT_PAD1 0
#define MIP6_OPT_PADN 1
#define MIP6_OPT_HOME_ADDRESS 201 /* RFC 6275 s.6.3 */
#define MIP6_RH_TYPE2 2           /* RFC 6275 s.6.4 */
#define MIP6_MH_HOME_TEST 3       /* RFC 6275 s.6.1.5 */

#define MIP6_RH2_LEN 24
#define MIP6_HAO_HDR_LEN 24
#define MIP6_MAX_EXT 6
#define MIP6_DO_SCAN 64 /* bytes of a Destination Options header searched for the HAO */
#define MIP6_DO_OPTIONS 8

/* The fixed IPv6 header. */
struct mip6_ip6 {
	__be32 vtcfl;
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	struct mip6_addr src;
	struct mip6_addr dst;
};

/* Type 2 Routing header (RFC 6275 s.6.4): Hdr Ext Len 2, Segments Left 1. */
struct mip6_rh2 {
	__u8 nexthdr;
	__u8 hdr_ext_len;
	__u8 type;
	__u8 segments_left;
	__u32 reserved;
	struct mip6_addr home;
};

/* Destination Options header holding PadN(2 bytes of padding) and the Home Address option,
 * which puts the option at offset 6 as its 8n+6 alignment requires (RFC 6275 s.6.3). */
struct mip6_hao_hdr {
	__u8 nexthdr;
	__u8 hdr_ext_len;
	__u8 padn_type;
	__u8 padn_len;
	__u8 padn[2];
	__u8 opt_type;
	__u8 opt_len;
	struct mip6_addr home;
};

/* What the scan of a Destination Options header found. */
struct mip6_do {
	__u32 len;      /* header length in bytes */
	__u32 hao_off;  /* packet offset of the Home Address option's type byte; 0 = none */
	__u8 nexthdr;
	__u8 only_hao;  /* nothing but padding besides the HAO: the whole header can go */
	__u8 pad[2];
	struct mip6_addr home;
};

static __always_inline int mip6_addr_eq(const struct mip6_addr *a, const struct mip6_addr *b)
{
	__u64 x[2], y[2];

	__builtin_memcpy(x, a, 16);
	__builtin_memcpy(y, b, 16);
	return x[0] == y[0] && x[1] == y[1];
}

static __always_inline int mip6_addr_zero(const struct mip6_addr *a)
{
	__u64 x[2];

	__builtin_memcpy(x, a, 16);
	return x[0] == 0 && x[1] == 0;
}

/* Returns 0 for IPv6 in Ethernet, -1 otherwise. */
static __always_inline int mip6_is_ipv6(struct __sk_buff *skb)
{
	__be16 proto;

	if (bpf_skb_load_bytes(skb, 12, &proto, sizeof(proto)) < 0)
		return -1;
	return proto == bpf_htons(MIP6_ETH_P_IPV6) ? 0 : -1;
}

/* Reads the fixed header at off. -1: not a readable IPv6 packet, or a jumbogram, or a payload
 * length running past the frame. */
static __always_inline int mip6_load_ip6(struct __sk_buff *skb, __u32 off, struct mip6_ip6 *ip6)
{
	if (bpf_skb_load_bytes(skb, off, ip6, sizeof(*ip6)) < 0)
		return -1;
	if ((bpf_ntohl(ip6->vtcfl) >> 28) != 6 || ip6->payload_len == 0)
		return -1;
	if (off + MIP6_IP6_HLEN + (__u32)bpf_ntohs(ip6->payload_len) > skb->len)
		return -1;
	return 0;
}

/* Finds the upper-layer protocol and its offset behind the extension headers starting at off
 * with next header nh. -1: truncated or too many headers. */
static __always_inline int mip6_upper(struct __sk_buff *skb, __u8 nh, __u32 off, __u8 *proto,
				      __u32 *l4_off)
{
	for (int i = 0; i < MIP6_MAX_EXT; i++) {
		__u8 hdr[2];

		switch (nh) {
		case MIP6_NH_HOPOPTS:
		case MIP6_NH_ROUTING:
		case MIP6_NH_DSTOPTS:
		case MIP6_NH_AUTH:
		case MIP6_NH_FRAGMENT:
			if (bpf_skb_load_bytes(skb, off, hdr, 2) < 0)
				return -1;
			if (nh == MIP6_NH_AUTH)
				off += ((__u32)hdr[1] + 2) * 4;
			else if (nh == MIP6_NH_FRAGMENT)
				off += 8;
			else
				off += ((__u32)hdr[1] + 1) * 8;
			nh = hdr[0];
			break;
		default:
			*proto = nh;
			*l4_off = off;
			return 0;
		}
	}
	return -1;
}

/* Whether the upper layer is a Mobility Header message of the given type. */
static __always_inline int mip6_is_mh_type(struct __sk_buff *skb, __u8 nh, __u32 off, __u8 type)
{
	__u8 proto = 0, mh_type;
	__u32 l4 = 0;

	if (mip6_upper(skb, nh, off, &proto, &l4) < 0 || proto != MIP6_NH_MOBILITY)
		return 0;
	if (bpf_skb_load_bytes(skb, l4 + 2, &mh_type, 1) < 0)
		return 0;
	return mh_type == type;
}

/* Whether the upper layer behind the headers at off is a Mobility Header. */
static __always_inline int mip6_is_mh(struct __sk_buff *skb, __u8 nh, __u32 off)
{
	__u8 proto = 0;
	__u32 l4 = 0;

	return mip6_upper(skb, nh, off, &proto, &l4) == 0 && proto == MIP6_NH_MOBILITY;
}

/* The largest IPv6 packet this skb becomes on the wire: itself, or for a GSO packet one full
 * segment (headers up to the upper layer, its header, gso_size). 0 when it cannot tell. */
static __always_inline __u32 mip6_wire_len(struct __sk_buff *skb, const struct mip6_ip6 *ip6)
{
	__u8 proto = 0, doff;
	__u32 l4 = 0;

	if (!skb->gso_size)
		return skb->len - MIP6_ETH_HLEN;
	if (mip6_upper(skb, ip6->nexthdr, MIP6_EXT_OFF, &proto, &l4) < 0)
		return 0;
	if (proto == 6) {
		if (bpf_skb_load_bytes(skb, l4 + 12, &doff, 1) < 0)
			return 0;
		return l4 - MIP6_ETH_HLEN + (doff >> 4) * 4 + skb->gso_size;
	}
	if (proto == 17)
		return l4 - MIP6_ETH_HLEN + 8 + skb->gso_size;
	return 0;
}

/* Scans the Destination Options header at off for the Home Address option. -1: malformed
 * (options running past the header, a HAO of the wrong length or alignment, more than one). */
static __always_inline int mip6_scan_dstopts(struct __sk_buff *skb, __u32 off, struct mip6_do *d)
{
	__u8 buf[MIP6_DO_SCAN] = {};
	__u8 hdr[2];
	__u64 scan;
	__u32 p = 2, others = 0, hao_at = 0;

	if (bpf_skb_load_bytes(skb, off, hdr, 2) < 0)
		return -1;
	d->nexthdr = hdr[0];
	d->len = ((__u32)hdr[1] + 1) * 8;
	d->hao_off = 0;
	if (d->len > MIP6_DO_SCAN)
		return 0; /* larger than anything a MIPv6 sender builds: not ours to rewrite */
	scan = d->len;
	/* Keep the bound check on the register the helper gets, where the verifier sees it. */
	asm volatile("" : "+r"(scan));
	if (scan < 8 || scan > MIP6_DO_SCAN || bpf_skb_load_bytes(skb, off, buf, scan) < 0)
		return -1;
	for (int i = 0; i < MIP6_DO_OPTIONS; i++) {
		__u8 type, olen;

		if (p >= scan)
			break;
		type = buf[p & (MIP6_DO_SCAN - 1)];
		if (type == MIP6_OPT_PAD1) {
			p++;
			continue;
		}
		if (p + 1 >= scan)
			return -1;
		olen = buf[(p + 1) & (MIP6_DO_SCAN - 1)];
		if (p + 2 + olen > scan)
			return -1;
		if (type == MIP6_OPT_HOME_ADDRESS) {
			/* s.6.3: 16 bytes of address, alignment 8n+6, at most one. */
			if (olen != 16 || (p & 7) != 6 || hao_at)
				return -1;
			hao_at = p;
		} else if (type != MIP6_OPT_PADN) {
			others++;
		}
		p += 2 + olen;
	}
	if (p != scan)
		return -1;
	if (!hao_at)
		return 0;
	if (bpf_skb_load_bytes(skb, off + hao_at + 2, &d->home, 16) < 0)
		return -1;
	d->hao_off = off + hao_at;
	d->only_hao = others == 0;
	return 0;
}

#endif
