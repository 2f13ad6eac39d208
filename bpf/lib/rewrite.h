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

/* Adjusts the transport checksum for a change of the locators *as the checksum sees them*:
 * pseudo_old and pseudo_new are the two locators of the pseudo-header before and after. For TCP
 * and UDP of an ILNP session they are zero on the wire (RFC 6744 s.3: locators count as zero,
 * so the wire checksum does not depend on the path taken); ICMPv6 (and so Locator Updates)
 * keeps the ordinary pseudo-header of the real addresses. shift is how far the upper-layer
 * header has moved since parsing (a nonce header inserted before it). */
static __always_inline int ilnp_fix_l4(struct __sk_buff *skb, struct ilnp_pkt *pkt, __u32 shift,
				       __be64 *pseudo_old, __be64 *pseudo_new)
{
	int field = ilnp_csum_field(pkt->l4_proto);
	__u64 flags = BPF_F_PSEUDO_HDR;
	const __u32 *o = (const __u32 *)pseudo_old, *n = (const __u32 *)pseudo_new;
	__u64 diff = 0;

	if (field < 0 || !pkt->l4_off)
		return 0;
	/* What bpf_csum_diff(old, 16, new, 16, 0) gives, without the helper call: the ones'
	 * complement sum of new and of old's complement, folded to 32 bits. */
	for (int i = 0; i < 4; i++)
		diff += (__u64)(__u32)~o[i] + n[i];
	diff = (diff & 0xffffffff) + (diff >> 32);
	diff = (diff & 0xffffffff) + (diff >> 32);
	/* UDP: a zero checksum means "none" (RFC 768); keep a computed zero as 0xffff. */
	if (pkt->l4_proto == ILNP_NH_UDP)
		flags |= BPF_F_MARK_MANGLED_0;
	return bpf_l4_csum_replace(skb, pkt->l4_off + shift + field, 0, diff, flags) < 0 ? -1 : 0;
}

/* Writes the fixed header back in one store. BPF_F_RECOMPUTE_CSUM keeps a CHECKSUM_COMPLETE
 * skb->csum right for the changed bytes; bpf_l4_csum_replace accounts for the checksum field. */
static __always_inline int ilnp_store_ip6(struct __sk_buff *skb, struct ilnp_pkt *pkt)
{
	return bpf_skb_store_bytes(skb, ILNP_IP6_OFF, &pkt->ip6, ILNP_IP6_HLEN, BPF_F_RECOMPUTE_CSUM);
}

struct ilnp_nonce_hdr {
	__u8 nexthdr;
	__u8 hdr_ext_len;
	__u8 opt_type;
	__u8 opt_len;
	__u8 nonce[ILNP_NONCE_MAX];
};

struct ilnp_ip6_nonce {
	struct ilnp_ip6 ip6;
	struct ilnp_nonce_hdr opt;
};

/* Egress: rewrites the locators to src/dst and, when nonce_len is 4 or 12, inserts a
 * Destination Options header holding only the nonce right after the fixed header (RFC 6744 s.2;
 * 8 or 16 bytes, no padding needed). FIXED_GSO keeps gso_size: the headroom comes from the
 * routes (platform.md), and UDP GSO refuses the adjustment otherwise. The fixed header and the
 * nonce header go out in a single store. */
static __always_inline int ilnp_encap(struct __sk_buff *skb, struct ilnp_pkt *pkt, __be64 src,
				      __be64 dst, __be64 *pseudo_old, __be64 *pseudo_new,
				      const __u8 *nonce, __u8 nonce_len)
{
	struct ilnp_ip6_nonce hdr;
	__u32 size = nonce_len == 12 ? 16 : nonce_len == 4 ? 8 : 0;

	if (size && bpf_skb_adjust_room(skb, size, BPF_ADJ_ROOM_NET, BPF_F_ADJ_ROOM_FIXED_GSO) < 0)
		return -1;
	if (ilnp_fix_l4(skb, pkt, size, pseudo_old, pseudo_new) < 0)
		return -1;
	hdr.ip6 = pkt->ip6;
	hdr.ip6.src_l64 = src;
	hdr.ip6.dst_l64 = dst;
	if (!size)
		return bpf_skb_store_bytes(skb, ILNP_IP6_OFF, &hdr, ILNP_IP6_HLEN, BPF_F_RECOMPUTE_CSUM);
	hdr.opt.nexthdr = pkt->ip6.nexthdr;
	hdr.opt.hdr_ext_len = size / 8 - 1;
	hdr.opt.opt_type = ILNP_OPT_NONCE;
	hdr.opt.opt_len = nonce_len;
	__builtin_memcpy(hdr.opt.nonce, nonce, ILNP_NONCE_MAX);
	hdr.ip6.nexthdr = ILNP_NH_DSTOPTS;
	hdr.ip6.payload_len = bpf_htons(bpf_ntohs(pkt->ip6.payload_len) + size);
	if (size == 16)
		return bpf_skb_store_bytes(skb, ILNP_IP6_OFF, &hdr, ILNP_IP6_HLEN + 16, BPF_F_RECOMPUTE_CSUM);
	return bpf_skb_store_bytes(skb, ILNP_IP6_OFF, &hdr, ILNP_IP6_HLEN + 8, BPF_F_RECOMPUTE_CSUM);
}

/* Ingress: removes the nonce and rewrites the locators to src/dst. When the
 * nonce sits alone in the Destination Options header right after the fixed header (what every
 * ILNP sender does) the whole header goes; otherwise the option is turned into PadN of the same
 * size, which leaves the other options and all offsets alone (the kernel would discard the
 * packet otherwise: the option's action bits are 10, RFC 6744 s.2). */
static __always_inline int ilnp_decap(struct __sk_buff *skb, struct ilnp_pkt *pkt, __be64 src,
				      __be64 dst, __be64 *pseudo_old, __be64 *pseudo_new)
{
	if (ilnp_fix_l4(skb, pkt, 0, pseudo_old, pseudo_new) < 0)
		return -1;
	pkt->ip6.src_l64 = src;
	pkt->ip6.dst_l64 = dst;
	if (pkt->nonce_strippable) {
		__u32 len = pkt->nonce_hdr_len;
		__u8 next = pkt->nonce_hdr_next;

		if (len < 8 || len > ILNP_DO_SCAN)
			return -1;
		if (bpf_skb_adjust_room(skb, -(__s32)len, BPF_ADJ_ROOM_NET, BPF_F_ADJ_ROOM_FIXED_GSO) < 0)
			return -1;
		pkt->ip6.nexthdr = next;
		pkt->ip6.payload_len = bpf_htons(bpf_ntohs(pkt->ip6.payload_len) - len);
	} else {
		__u8 padn[2 + ILNP_NONCE_MAX] = {ILNP_OPT_PADN};
		int err;

		padn[1] = pkt->nonce_len;
		if (pkt->nonce_len == 12)
			err = bpf_skb_store_bytes(skb, pkt->nonce_opt_off, padn, 14, BPF_F_RECOMPUTE_CSUM);
		else
			err = bpf_skb_store_bytes(skb, pkt->nonce_opt_off, padn, 6, BPF_F_RECOMPUTE_CSUM);
		if (err < 0)
			return -1;
	}
	return ilnp_store_ip6(skb, pkt);
}

/* Ingress, Locator Updates and their ACKs: the nonce stays in the packet, its option type turned
 * into ILNP_OPT_VERIFIED_NONCE, and the wire addresses stay too, so the daemon sees the locator
 * the LU came from and the nonce it carried, and compares that nonce with the session's itself. */
static __always_inline int ilnp_mark_nonce_verified(struct __sk_buff *skb, const struct ilnp_pkt *pkt)
{
	__u8 type = ILNP_OPT_VERIFIED_NONCE;

	return bpf_skb_store_bytes(skb, pkt->nonce_opt_off, &type, 1, BPF_F_RECOMPUTE_CSUM);
}

/* Rewrites the locators only (RFC 6744 s.6 packets that carry no nonce). */
static __always_inline int ilnp_rewrite(struct __sk_buff *skb, struct ilnp_pkt *pkt, __be64 src,
					__be64 dst, __be64 *pseudo_old, __be64 *pseudo_new)
{
	if (ilnp_fix_l4(skb, pkt, 0, pseudo_old, pseudo_new) < 0)
		return -1;
	pkt->ip6.src_l64 = src;
	pkt->ip6.dst_l64 = dst;
	return ilnp_store_ip6(skb, pkt);
}

#endif
