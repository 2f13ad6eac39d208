/* Packet changes: IPv6-in-IPv6 encapsulation (RFC 2473), type 2 Routing header and Home Address
 * option insertion and removal (RFC 6275 s.6.3, s.6.4). None of them touches the transport
 * checksum: it is computed over the home address (s.6.3: with a HAO the receiver uses the home
 * address as source; s.6.4 / RFC 8200 s.8.1: with a routing header the final destination, the
 * home address), and tunnelling leaves the inner packet alone. Callers drop the packet if a step
 * fails, so nothing leaves half rewritten. */
#ifndef MIP6_REWRITE_H
#define MIP6_REWRITE_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "maps.h"
#include "parse.h"

#define MIP6_TUNNEL_HOP_LIMIT 64 /* RFC 2473 s.6.3: the node's default hop limit */

static __always_inline int mip6_store_ip6(struct __sk_buff *skb, const struct mip6_ip6 *ip6)
{
	return bpf_skb_store_bytes(skb, MIP6_IP6_OFF, ip6, sizeof(*ip6), BPF_F_RECOMPUTE_CSUM);
}

/* Puts an outer IPv6 header src -> dst in front of the packet whose fixed header is inner.
 * The traffic class is copied (RFC 2473 s.6.5 leaves it to configuration); the flow label is 0.
 * FIXED_GSO keeps gso_size: the 40 bytes come out of the route MTU (see the package doc). */
static __always_inline int mip6_encap(struct __sk_buff *skb, const struct mip6_ip6 *inner,
				      const struct mip6_addr *src, const struct mip6_addr *dst)
{
	struct mip6_ip6 outer = {};

	outer.vtcfl = bpf_htonl(0x60000000 | (bpf_ntohl(inner->vtcfl) & 0x0ff00000));
	outer.payload_len = bpf_htons(MIP6_IP6_HLEN + bpf_ntohs(inner->payload_len));
	outer.nexthdr = MIP6_NH_IPV6;
	outer.hop_limit = MIP6_TUNNEL_HOP_LIMIT;
	outer.src = *src;
	outer.dst = *dst;
	if (bpf_skb_adjust_room(skb, MIP6_IP6_HLEN, BPF_ADJ_ROOM_MAC,
				BPF_F_ADJ_ROOM_ENCAP_L3_IPV6 | BPF_F_ADJ_ROOM_FIXED_GSO) < 0)
		return -1;
	return mip6_store_ip6(skb, &outer);
}

/* Removes the outer IPv6 header; the inner one follows the Ethernet header afterwards. */
static __always_inline int mip6_decap(struct __sk_buff *skb)
{
	return bpf_skb_adjust_room(skb, -MIP6_IP6_HLEN, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_FIXED_GSO);
}

/* CN: inserts a type 2 Routing header carrying the home address right after the fixed header
 * and sends the packet to the care-of address (RFC 6275 s.9.3.2). */
static __always_inline int mip6_insert_rh2(struct __sk_buff *skb, struct mip6_ip6 *ip6,
					   const struct mip6_addr *coa)
{
	struct mip6_rh2 rh = {};

	rh.nexthdr = ip6->nexthdr;
	rh.hdr_ext_len = MIP6_RH2_LEN / 8 - 1;
	rh.type = MIP6_RH_TYPE2;
	rh.segments_left = 1;
	rh.home = ip6->dst;
	if (bpf_skb_adjust_room(skb, MIP6_RH2_LEN, BPF_ADJ_ROOM_NET, BPF_F_ADJ_ROOM_FIXED_GSO) < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, MIP6_EXT_OFF, &rh, sizeof(rh), BPF_F_RECOMPUTE_CSUM) < 0)
		return -1;
	ip6->nexthdr = MIP6_NH_ROUTING;
	ip6->payload_len = bpf_htons(bpf_ntohs(ip6->payload_len) + MIP6_RH2_LEN);
	ip6->dst = *coa;
	return mip6_store_ip6(skb, ip6);
}

/* MN: the type 2 Routing header's home address becomes the destination and the header goes
 * (s.11.3.3: processing it leaves the home address as the destination the socket sees). */
static __always_inline int mip6_strip_rh2(struct __sk_buff *skb, struct mip6_ip6 *ip6,
					  const struct mip6_rh2 *rh)
{
	if (bpf_skb_adjust_room(skb, -MIP6_RH2_LEN, BPF_ADJ_ROOM_NET, BPF_F_ADJ_ROOM_FIXED_GSO) < 0)
		return -1;
	ip6->nexthdr = rh->nexthdr;
	ip6->payload_len = bpf_htons(bpf_ntohs(ip6->payload_len) - MIP6_RH2_LEN);
	ip6->dst = rh->home;
	return mip6_store_ip6(skb, ip6);
}

/* MN: sends from the care-of address with the home address in a Home Address option
 * (s.11.3.1). The option sits in a Destination Options header right after the fixed header,
 * the place s.6.3 gives it when there is no routing header. */
static __always_inline int mip6_insert_hao(struct __sk_buff *skb, struct mip6_ip6 *ip6,
					   const struct mip6_addr *coa)
{
	struct mip6_hao_hdr h = {};

	h.nexthdr = ip6->nexthdr;
	h.hdr_ext_len = MIP6_HAO_HDR_LEN / 8 - 1;
	h.padn_type = MIP6_OPT_PADN;
	h.padn_len = 2;
	h.opt_type = MIP6_OPT_HOME_ADDRESS;
	h.opt_len = 16;
	h.home = ip6->src;
	if (bpf_skb_adjust_room(skb, MIP6_HAO_HDR_LEN, BPF_ADJ_ROOM_NET, BPF_F_ADJ_ROOM_FIXED_GSO) < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, MIP6_EXT_OFF, &h, sizeof(h), BPF_F_RECOMPUTE_CSUM) < 0)
		return -1;
	ip6->nexthdr = MIP6_NH_DSTOPTS;
	ip6->payload_len = bpf_htons(bpf_ntohs(ip6->payload_len) + MIP6_HAO_HDR_LEN);
	ip6->src = *coa;
	return mip6_store_ip6(skb, ip6);
}

/* CN: the home address becomes the source (s.9.3.1). A Destination Options header holding
 * nothing but the HAO and padding goes; otherwise the HAO turns into PadN of the same size so
 * the other options and every offset stay (the stack would discard an unknown option 201). */
static __always_inline int mip6_strip_hao(struct __sk_buff *skb, struct mip6_ip6 *ip6,
					  const struct mip6_do *d)
{
	if (d->only_hao) {
		__u32 len = d->len;

		if (len < 8 || len > MIP6_DO_SCAN)
			return -1;
		if (bpf_skb_adjust_room(skb, -(__s32)len, BPF_ADJ_ROOM_NET, BPF_F_ADJ_ROOM_FIXED_GSO) < 0)
			return -1;
		ip6->nexthdr = d->nexthdr;
		ip6->payload_len = bpf_htons(bpf_ntohs(ip6->payload_len) - len);
	} else {
		__u8 padn[18] = {MIP6_OPT_PADN, 16};

		if (bpf_skb_store_bytes(skb, d->hao_off, padn, sizeof(padn), BPF_F_RECOMPUTE_CSUM) < 0)
			return -1;
	}
	ip6->src = d->home;
	return mip6_store_ip6(skb, ip6);
}

#endif
