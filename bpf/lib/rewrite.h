/* Packet changes: locator rewriting with checksum repair, nonce header insertion and removal.
 * Callers validate everything first and drop the packet if any step here fails, so a packet is
 * never passed half rewritten. */
#ifndef ILNP_REWRITE_H
#define ILNP_REWRITE_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "maps.h"
#include "parse.h"

static __always_inline int ilnp_csum_field(__u8 proto)
{
	switch (proto) {
	case ILNP_NH_TCP:
		return 16;
	case ILNP_NH_UDP:
		return 6;
	case ILNP_NH_ICMPV6:
		return 2;
	}
	return -1;
}

/* Replaces the source and destination locators with new_src/new_dst. The transport checksum is
 * adjusted by the change of the locators *as the checksum sees them*: pseudo_old and
 * pseudo_new are the two locators of the pseudo-header before and after. For TCP and UDP of an
 * ILNP session these are zero on the wire (RFC 6744 s.3: locators count as zero, so the wire
 * checksum does not depend on the path taken); ICMPv6 (and so Locator Updates) keeps the
 * ordinary pseudo-header of the real addresses. */
static __always_inline int ilnp_rewrite_locators(struct __sk_buff *skb, struct ilnp_pkt *pkt,
						 __be64 new_src, __be64 new_dst,
						 __be64 *pseudo_old, __be64 *pseudo_new)
{
	int field = ilnp_csum_field(pkt->l4_proto);

	if (field >= 0 && pkt->l4_off) {
		__s64 diff = bpf_csum_diff((__be32 *)pseudo_old, 16, (__be32 *)pseudo_new, 16, 0);
		__u64 flags = BPF_F_PSEUDO_HDR;

		if (diff < 0)
			return -1;
		/* UDP: a zero checksum means "none" (RFC 768); keep a computed zero as 0xffff. */
		if (pkt->l4_proto == ILNP_NH_UDP)
			flags |= BPF_F_MARK_MANGLED_0;
		if (bpf_l4_csum_replace(skb, pkt->l4_off + field, 0, diff, flags) < 0)
			return -1;
	}
	/* BPF_F_RECOMPUTE_CSUM keeps a CHECKSUM_COMPLETE skb->csum right for the address bytes;
	 * the helper above accounts for the checksum field itself. */
	if (bpf_skb_store_bytes(skb, ILNP_ADDRS_OFF, &new_src, 8, BPF_F_RECOMPUTE_CSUM) < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, ILNP_ADDRS_OFF + 16, &new_dst, 8, BPF_F_RECOMPUTE_CSUM) < 0)
		return -1;
	pkt->ip6.src_l64 = new_src;
	pkt->ip6.dst_l64 = new_dst;
	return 0;
}

static __always_inline int ilnp_store_ip6_first8(struct __sk_buff *skb, struct ilnp_pkt *pkt)
{
	return bpf_skb_store_bytes(skb, ILNP_IP6_OFF, &pkt->ip6, 8, BPF_F_RECOMPUTE_CSUM);
}

struct ilnp_nonce_hdr {
	__u8 nexthdr;
	__u8 hdr_ext_len;
	__u8 opt_type;
	__u8 opt_len;
	__u8 nonce[ILNP_NONCE_MAX];
};

/* Inserts a Destination Options header holding only the nonce right after the fixed IPv6
 * header (RFC 6744 s.2; 8 bytes for a 4-byte nonce, 16 for a 12-byte one, no padding needed).
 * FIXED_GSO keeps gso_size: the 8 bytes of MTU headroom come from the routes (platform.md), and
 * UDP GSO refuses the adjustment otherwise. */
static __always_inline int ilnp_insert_nonce(struct __sk_buff *skb, struct ilnp_pkt *pkt,
					     const __u8 *nonce, __u8 nonce_len)
{
	struct ilnp_nonce_hdr hdr = {};
	__u32 size = nonce_len == 12 ? 16 : 8;

	hdr.nexthdr = pkt->ip6.nexthdr;
	hdr.hdr_ext_len = size / 8 - 1;
	hdr.opt_type = ILNP_OPT_NONCE;
	hdr.opt_len = nonce_len == 12 ? 12 : 4;
	__builtin_memcpy(hdr.nonce, nonce, ILNP_NONCE_MAX);

	if (bpf_skb_adjust_room(skb, size, BPF_ADJ_ROOM_NET, BPF_F_ADJ_ROOM_FIXED_GSO) < 0)
		return -1;
	if (size == 16) {
		if (bpf_skb_store_bytes(skb, ILNP_IP6_OFF + ILNP_IP6_HLEN, &hdr, 16, BPF_F_RECOMPUTE_CSUM) < 0)
			return -1;
	} else {
		if (bpf_skb_store_bytes(skb, ILNP_IP6_OFF + ILNP_IP6_HLEN, &hdr, 8, BPF_F_RECOMPUTE_CSUM) < 0)
			return -1;
	}
	pkt->ip6.nexthdr = ILNP_NH_DSTOPTS;
	pkt->ip6.payload_len = bpf_htons(bpf_ntohs(pkt->ip6.payload_len) + size);
	return ilnp_store_ip6_first8(skb, pkt);
}

/* Removes the nonce. When it sits alone in the Destination Options header right after the fixed
 * header (what every ILNP sender does) the whole header goes; otherwise the option is turned into
 * PadN of the same size, which leaves the other options and all offsets alone (the kernel would
 * otherwise discard the packet: the option's action bits are 10, RFC 6744 s.2). */
static __always_inline int ilnp_strip_nonce(struct __sk_buff *skb, struct ilnp_pkt *pkt)
{
	if (pkt->nonce_strippable) {
		__u32 len = pkt->nonce_hdr_len;
		__u8 next;

		if (len < 8 || len > ILNP_DO_SCAN)
			return -1;
		if (bpf_skb_load_bytes(skb, ILNP_IP6_OFF + ILNP_IP6_HLEN, &next, 1) < 0)
			return -1;
		if (bpf_skb_adjust_room(skb, -(__s32)len, BPF_ADJ_ROOM_NET, BPF_F_ADJ_ROOM_FIXED_GSO) < 0)
			return -1;
		pkt->ip6.nexthdr = next;
		pkt->ip6.payload_len = bpf_htons(bpf_ntohs(pkt->ip6.payload_len) - len);
		return ilnp_store_ip6_first8(skb, pkt);
	}

	__u8 padn[2 + ILNP_NONCE_MAX] = {ILNP_OPT_PADN};

	padn[1] = pkt->nonce_len;
	if (pkt->nonce_len == 12)
		return bpf_skb_store_bytes(skb, pkt->nonce_opt_off, padn, 14, BPF_F_RECOMPUTE_CSUM);
	return bpf_skb_store_bytes(skb, pkt->nonce_opt_off, padn, 6, BPF_F_RECOMPUTE_CSUM);
}

#endif
