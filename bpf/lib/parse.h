/* Parsing of Ethernet + IPv6 + extension headers into a stack copy. Every read goes through
 * bpf_skb_load_bytes, so a truncated packet is an error the caller sees, never an out-of-bounds
 * read, and non-linear (GSO) packets work the same as linear ones. */
#ifndef ILNP_PARSE_H
#define ILNP_PARSE_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "maps.h"

#define ILNP_ETH_HLEN 14
#define ILNP_ETH_P_IPV6 0x86DD
#define ILNP_IP6_OFF ILNP_ETH_HLEN
#define ILNP_IP6_HLEN 40
#define ILNP_ADDRS_OFF (ILNP_IP6_OFF + 8)

#define ILNP_NH_HOPOPTS 0
#define ILNP_NH_TCP 6
#define ILNP_NH_UDP 17
#define ILNP_NH_ROUTING 43
#define ILNP_NH_FRAGMENT 44
#define ILNP_NH_AUTH 51
#define ILNP_NH_ICMPV6 58
#define ILNP_NH_DSTOPTS 60

#define ILNP_OPT_PAD1 0x00
#define ILNP_OPT_PADN 0x01
#define ILNP_OPT_NONCE 0x8B /* RFC 6744 s.2 */
/* A Locator Update's nonce after this host's ingress checked it (wire.VerifiedNonceOptionType):
 * RFC 4727 experimental type, act bits 00, so the kernel delivers the LU and the daemon reads
 * the nonce the packet carried. */
#define ILNP_OPT_VERIFIED_NONCE 0x1E

#define ILNP_ICMPV6_PARAM_PROBLEM 4
#define ILNP_TCP_SYN 0x02
#define ILNP_TCP_RST 0x04
#define ILNP_ICMPV6_LOCATOR_UPDATE 156 /* RFC 6743 */

#define ILNP_MAX_EXT_HEADERS 6
#define ILNP_MAX_OPTIONS 4
#define ILNP_DO_SCAN 64 /* bytes of a Destination Options header searched for the nonce */

enum ilnp_malformed {
	ILNP_OK = 0,
	ILNP_BAD_IPV6 = 1,      /* truncated fixed header, wrong version, payload length past the end */
	ILNP_BAD_EXT = 2,       /* extension header truncated */
	ILNP_TOO_MANY_EXT = 3,
	ILNP_BAD_NONCE_OPT = 4, /* nonce option of a length other than 4 or 12, or past its header */
	ILNP_BAD_OPTIONS = 5,   /* options run past the header or beyond what is scanned */
	ILNP_JUMBO = 6,
	ILNP_BAD_L4 = 7,        /* upper-layer header truncated */
};

/* The fixed IPv6 header, addresses split into locator and identifier. */
struct ilnp_ip6 {
	__be32 vtcfl;
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__be64 src_l64;
	__be64 src_nid;
	__be64 dst_l64;
	__be64 dst_nid;
};

struct ilnp_pkt {
	struct ilnp_ip6 ip6;
	__u32 l4_off;          /* 0 = no upper-layer header in this packet (non-first fragment) */
	__u32 nonce_opt_off;   /* packet offset of the nonce option's type byte */
	__u32 nonce_hdr_len;   /* length of the Destination Options header holding the nonce */
	__u8 l4_proto;
	__u8 nonces;           /* nonce options seen: more than one is an attack (RFC 6744 s.7) */
	__u8 nonce_len;
	__u8 nonce_strippable; /* DO header right after the fixed header with only nonce + padding */
	__u8 has_hbh;
	__u8 fragment;
	__u8 malformed;        /* enum ilnp_malformed */
	__u8 icmp_type;
	__u8 icmp_code;
	__u8 nonce_hdr_next;   /* Next Header of the nonce's header when nonce_strippable */
	__u8 pad[2];
	__u8 nonce[ILNP_NONCE_MAX];
};

/* Reads len (a constant) bytes at off: in place when the linear data holds them (no helper
 * call: the headers of TSO/GRO packets and of most others are linear), through the helper
 * otherwise. off is clamped first: the verifier gives a packet pointer a range only while its
 * offset stays below 64 KiB. */
static __always_inline int ilnp_peek(struct __sk_buff *skb, __u32 off, void *to, const __u32 len)
{
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;

	if (off <= 0x7fff && data + off + len <= data_end) {
		__builtin_memcpy(to, data + off, len);
		return 0;
	}
	return bpf_skb_load_bytes(skb, off, to, len);
}

/* Returns 0 for IPv6 in Ethernet, -1 otherwise. The EtherType is read in place when the
 * linear part holds it (no helper call). */
static __always_inline int ilnp_is_ipv6(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
	__be16 proto;

	if (data + ILNP_ETH_HLEN <= data_end)
		proto = *(__be16 *)(data + 12);
	else if (bpf_skb_load_bytes(skb, 12, &proto, sizeof(proto)) < 0)
		return -1;
	return proto == bpf_htons(ILNP_ETH_P_IPV6) ? 0 : -1;
}

/* Searches one Destination Options header for the nonce option. RFC 6744 s.2 puts the nonce
 * first (after padding or a CALIPSO option), so the first ILNP_MAX_OPTIONS options are
 * examined; a header with more is reported as ILNP_BAD_OPTIONS (a nonce hidden further on is
 * harmless: the stack discards unknown 0x8B options). A global function, so the verifier checks
 * it once instead of at every extension header. */
__noinline int ilnp_scan_dstopts(struct __sk_buff *skb, struct ilnp_pkt *pkt, __u32 off,
				 __u32 len, __u32 first)
{
	__u8 buf[ILNP_DO_SCAN] = {};
	__u64 scan = len;
	__u32 p = 2, nonces = 0, others = 0, nonce_at = 0;
	__u8 nonce_len = 0;

	if (!skb || !pkt)
		return 0;
	if (scan > ILNP_DO_SCAN)
		scan = ILNP_DO_SCAN;
	/* Hide the clamp from the compiler so the check below is done on the very register
	 * passed to the helper, where the verifier sees it. */
	asm volatile("" : "+r"(scan));
	if (scan < 8 || scan > ILNP_DO_SCAN) {
		pkt->malformed = ILNP_BAD_EXT;
		return 0;
	}
	/* The two sizes every ILNP sender uses (4- and 12-byte nonce alone) are read in place. */
	if (scan == 8 ? ilnp_peek(skb, off, buf, 8) < 0
	    : scan == 16 ? ilnp_peek(skb, off, buf, 16) < 0
			 : bpf_skb_load_bytes(skb, off, buf, scan) < 0) {
		pkt->malformed = ILNP_BAD_EXT;
		return 0;
	}
	for (int i = 0; i < ILNP_MAX_OPTIONS; i++) {
		__u8 type, olen;

		if (p >= scan)
			break;
		type = buf[p & (ILNP_DO_SCAN - 1)];
		if (type == ILNP_OPT_PAD1) {
			p++;
			continue;
		}
		if (p + 1 >= scan) {
			pkt->malformed = ILNP_BAD_OPTIONS;
			return 0;
		}
		olen = buf[(p + 1) & (ILNP_DO_SCAN - 1)];
		if (type == ILNP_OPT_NONCE) {
			nonces++;
			if ((olen != 4 && olen != 12) || p + 2 + olen > scan) {
				pkt->nonces += nonces;
				pkt->malformed = ILNP_BAD_NONCE_OPT;
				return 0;
			}
			nonce_at = p;
			nonce_len = olen;
		} else if (type != ILNP_OPT_PADN) {
			others++;
		}
		p += 2 + olen;
	}
	pkt->nonces += nonces;
	if (p != len) {
		/* Options past the header's end, or more options than examined. */
		pkt->malformed = ILNP_BAD_OPTIONS;
		return 0;
	}
	if (nonces) {
		pkt->nonce_len = nonce_len;
		pkt->nonce_opt_off = off + nonce_at;
		pkt->nonce_hdr_len = len;
		/* Already in buf (checked above: p + 2 + olen <= scan); the bytes past a 4-byte
		 * nonce stay zero, as the nonce index keys expect. */
		for (int j = 0; j < ILNP_NONCE_MAX; j++)
			if (j < nonce_len)
				pkt->nonce[j] = buf[(nonce_at + 2 + j) & (ILNP_DO_SCAN - 1)];
	}
	if (first && nonces == 1 && others == 0)
		pkt->nonce_strippable = 1;
	return 0;
}

/* Fills pkt from the packet. Returns 0 when the fixed header could be read (pkt->malformed may
 * still be set for what follows it), -1 when this is not a readable IPv6 packet at all. */
static __always_inline int ilnp_parse(struct __sk_buff *skb, struct ilnp_pkt *pkt)
{
	__u32 off = ILNP_IP6_OFF + ILNP_IP6_HLEN;
	__u32 end; /* the packet ends where its payload length says, not where the buffer does */
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
	__u8 nh;

	/* In place when the linear data holds the fixed header (no helper call). */
	if (data + ILNP_IP6_OFF + sizeof(pkt->ip6) <= data_end)
		__builtin_memcpy(&pkt->ip6, data + ILNP_IP6_OFF, sizeof(pkt->ip6));
	else if (bpf_skb_load_bytes(skb, ILNP_IP6_OFF, &pkt->ip6, sizeof(pkt->ip6)) < 0)
		return -1;
	if ((bpf_ntohl(pkt->ip6.vtcfl) >> 28) != 6)
		return -1;
	if (pkt->ip6.payload_len == 0) {
		pkt->malformed = ILNP_JUMBO; /* RFC 2675 jumbogram or garbage */
		return 0;
	}
	end = ILNP_IP6_OFF + ILNP_IP6_HLEN + (__u32)bpf_ntohs(pkt->ip6.payload_len);
	if (end > skb->len) {
		pkt->malformed = ILNP_BAD_IPV6;
		return 0;
	}

	nh = pkt->ip6.nexthdr;
	for (int i = 0; i < ILNP_MAX_EXT_HEADERS; i++) {
		__u8 hdr[2];
		__u32 len;

		switch (nh) {
		case ILNP_NH_HOPOPTS:
		case ILNP_NH_ROUTING:
		case ILNP_NH_DSTOPTS:
		case ILNP_NH_AUTH:
			if (ilnp_peek(skb, off, hdr, 2) < 0) {
				pkt->malformed = ILNP_BAD_EXT;
				return 0;
			}
			len = nh == ILNP_NH_AUTH ? ((__u32)hdr[1] + 2) * 4 : ((__u32)hdr[1] + 1) * 8;
			if (nh == ILNP_NH_HOPOPTS)
				pkt->has_hbh = 1;
			if (nh == ILNP_NH_DSTOPTS) {
				ilnp_scan_dstopts(skb, pkt, off, len, i == 0);
				if (pkt->malformed)
					return 0;
				if (i == 0)
					pkt->nonce_hdr_next = hdr[0];
			}
			nh = hdr[0];
			off += len;
			if (off > end) {
				/* A header past the payload length: stripping the nonce would wrap it. */
				pkt->malformed = ILNP_BAD_EXT;
				return 0;
			}
			break;
		case ILNP_NH_FRAGMENT: {
			__u8 frag[4];

			if (bpf_skb_load_bytes(skb, off, frag, 4) < 0) {
				pkt->malformed = ILNP_BAD_EXT;
				return 0;
			}
			pkt->fragment = 1;
			nh = frag[0];
			off += 8;
			if (off > end) {
				pkt->malformed = ILNP_BAD_EXT;
				return 0;
			}
			if (((frag[2] << 8 | frag[3]) & 0xfff8) != 0) {
				/* Not the first fragment: no upper-layer header here. */
				pkt->l4_proto = nh;
				pkt->l4_off = 0;
				return 0;
			}
			break;
		}
		default:
			goto upper;
		}
	}
	pkt->malformed = ILNP_TOO_MANY_EXT;
	return 0;

upper:
	pkt->l4_proto = nh;
	pkt->l4_off = off;
	if (off > end) {
		pkt->malformed = ILNP_BAD_EXT;
		return 0;
	}
	switch (nh) {
	case ILNP_NH_TCP:
		if (off + 20 > end)
			pkt->malformed = ILNP_BAD_L4;
		break;
	case ILNP_NH_UDP:
		if (off + 8 > end)
			pkt->malformed = ILNP_BAD_L4;
		break;
	case ILNP_NH_ICMPV6: {
		__u8 icmp[2];

		if (off + 4 > end || ilnp_peek(skb, off, icmp, 2) < 0) {
			pkt->malformed = ILNP_BAD_L4;
			break;
		}
		pkt->icmp_type = icmp[0];
		pkt->icmp_code = icmp[1];
		break;
	}
	}
	/* A first fragment may hold only part of the upper-layer header: it is checked above
	 * like any packet, so its checksum field is present when we touch it. */
	return 0;
}

/* A Locator Update or its acknowledgement (RFC 6743: ICMPv6 type 156, both operations). */
static __always_inline int ilnp_is_locator_update(const struct ilnp_pkt *pkt)
{
	return pkt->l4_proto == ILNP_NH_ICMPV6 && pkt->l4_off &&
	       pkt->icmp_type == ILNP_ICMPV6_LOCATOR_UPDATE;
}

#endif
