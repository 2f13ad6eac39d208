/* ICMPv6 errors about this host's own ILNP packets: Packet Too Big (RFC 4443 s.3.2, RFC 8201)
 * and Parameter Problem code 2 (RFC 4443 s.3.4) from a peer that does not know the nonce option
 * (RFC 6744 s.6; thesis s.7.2.5).
 *
 * Such an error comes from a router or a plain peer and carries no nonce itself; it quotes the
 * packet that caused it, which is ours in wire form: [locator:NID] addresses and our nonce in a
 * Destination Options header right after the fixed header (rewrite.h ilnp_encap). The quoted
 * nonce is the proof that the error answers a packet of this session; the sockets are bound to
 * the session view, so the error is translated to it before the kernel sees it.
 */
#ifndef ILNP_ICMPERR_H
#define ILNP_ICMPERR_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "encap.h"
#include "maps.h"
#include "observe.h"
#include "parse.h"
#include "rewrite.h"
#include "session.h"

#define ILNP_ICMPV6_PKT_TOO_BIG 2
#define ILNP_ICMPV6_HLEN 8
#define ILNP_IPV6_MIN_MTU 1280 /* RFC 8200 s.5 */
/* Where the nonce option's type byte sits in our packets: after the fixed header and the
 * Destination Options header's two bytes (the Parameter Problem's pointer, RFC 4443 s.3.4). */
#define ILNP_NONCE_OPT_POINTER (ILNP_IP6_HLEN + 2)

enum ilnp_icmperr_verdict {
	ILNP_ICMPERR_NOT_OURS = 0, /* no nonce quoted, or no session: plain IPv6 */
	ILNP_ICMPERR_PASS = 1,     /* translated to the session view */
	ILNP_ICMPERR_DROP = 2,
};

/* The start of a quoted packet of ours: fixed header and nonce header (8 or 16 bytes). */
struct ilnp_quote {
	struct ilnp_ip6 ip6;
	struct ilnp_nonce_hdr opt;
};

static __always_inline __u16 ilnp_csum_fold64(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

/* Reads the quoted ILNPv6 packet at off and finds its session; 0 when it is not an ILNP packet
 * of a session of ours. */
static __always_inline struct ilnp_session *ilnp_quote_at(struct __sk_buff *skb, __u32 off,
							  struct ilnp_quote *q, __u32 *hdr_len)
{
	struct ilnp_session_key key;

	if (bpf_skb_load_bytes(skb, off, q, ILNP_IP6_HLEN + 8) < 0)
		return 0;
	if ((bpf_ntohl(q->ip6.vtcfl) >> 28) != 6 || q->ip6.nexthdr != ILNP_NH_DSTOPTS ||
	    q->opt.opt_type != ILNP_OPT_NONCE)
		return 0;
	if (q->opt.hdr_ext_len == 0 && q->opt.opt_len == 4) {
		*hdr_len = 8;
	} else if (q->opt.hdr_ext_len == 1 && q->opt.opt_len == 12) {
		*hdr_len = 16;
		if (bpf_skb_load_bytes(skb, off + ILNP_IP6_HLEN + 8, q->opt.nonce + 4, 8) < 0)
			return 0;
	} else {
		return 0;
	}
	key.local_nid = q->ip6.src_nid;
	key.remote_nid = q->ip6.dst_nid;
	return bpf_map_lookup_elem(&sessions, &key);
}

static __always_inline struct ilnp_session *ilnp_quote_session(struct __sk_buff *skb,
							       const struct ilnp_pkt *pkt,
							       struct ilnp_quote *q, __u32 *hdr_len)
{
	struct ilnp_session *sess = ilnp_quote_at(skb, pkt->l4_off + ILNP_ICMPV6_HLEN, q, hdr_len);

	/* The error goes to the quoted packet's sender (RFC 4443 s.2.2). */
	if (sess && q->ip6.src_nid != pkt->ip6.dst_nid)
		return 0;
	return sess;
}

/* Packet Too Big: the quoted packet's and the outer destination's locators become the session
 * view, and the MTU shrinks by our nonce header so that the view's packets fit once it is
 * inserted (the kernel's PMTU is for the view). The kernel takes no PMTU below 1280 (RFC 8200
 * s.5), so a 1280-byte link leaves the view's full-size packets 8 bytes too big: the view gets
 * 1280 and *below is set to the view MTU the path needs (1280 - nonce header), for which the
 * daemon installs a locked route (internal/pmtu). Returns < 0 on error. */
static __always_inline int ilnp_ptb_translate(struct __sk_buff *skb, struct ilnp_pkt *pkt,
					      const struct ilnp_session *sess,
					      const struct ilnp_quote *q, __u32 hdr_len,
					      __be64 *from, __be64 *to, __u32 *below)
{
	__u32 l4 = pkt->l4_off;
	__be32 mtu_old, mtu_new;
	__u16 csum;
	__u32 mtu;
	__s64 diff;

	if (bpf_skb_load_bytes(skb, l4 + 2, &csum, 2) < 0 || bpf_skb_load_bytes(skb, l4 + 4, &mtu_old, 4) < 0)
		return -1;
	mtu = bpf_ntohl(mtu_old);
	if (mtu < ILNP_IPV6_MIN_MTU + hdr_len)
		*below = ILNP_IPV6_MIN_MTU - hdr_len;
	mtu = mtu > ILNP_IPV6_MIN_MTU + hdr_len ? mtu - hdr_len : ILNP_IPV6_MIN_MTU;
	mtu_new = bpf_htonl(mtu);
	from[0] = pkt->ip6.dst_l64;
	from[1] = q->ip6.src_l64;
	from[2] = q->ip6.dst_l64;
	from[3] = (__be64)mtu_old;
	to[0] = sess->local_view;
	to[1] = sess->local_view;
	to[2] = sess->remote_view;
	to[3] = (__be64)mtu_new;
	diff = bpf_csum_diff((__be32 *)from, 4 * sizeof(*from), (__be32 *)to, 4 * sizeof(*to), 0);
	if (diff < 0)
		return -1;
	csum = ~ilnp_csum_fold64((__u64)(__u16)~csum + (__u32)diff);
	pkt->ip6.dst_l64 = sess->local_view;
	if (ilnp_store_ip6(skb, pkt) < 0 ||
	    bpf_skb_store_bytes(skb, l4 + 2, &csum, 2, BPF_F_RECOMPUTE_CSUM) < 0 ||
	    bpf_skb_store_bytes(skb, l4 + 4, &mtu_new, 4, BPF_F_RECOMPUTE_CSUM) < 0 ||
	    bpf_skb_store_bytes(skb, l4 + ILNP_ICMPV6_HLEN + 8, &sess->local_view, 8, BPF_F_RECOMPUTE_CSUM) < 0 ||
	    bpf_skb_store_bytes(skb, l4 + ILNP_ICMPV6_HLEN + 24, &sess->remote_view, 8, BPF_F_RECOMPUTE_CSUM) < 0)
		return -1;
	return 0;
}

_Static_assert(sizeof(struct ilnp_quote) <= sizeof(((struct ilnp_icmperr_scratch *)0)->quote),
	       "icmperr_scratch's quote holds a struct ilnp_quote");

/* An ICMPv6 error without a nonce of its own (ilnp_ingress_plain). Only called for Packet Too
 * Big and Parameter Problem code 2, so data packets never come here. A subprogram with its
 * working memory in icmperr_scratch: inlined, it would take the ingress past the verifier's
 * 512-byte stack. */
static __noinline int ilnp_icmp_error(struct __sk_buff *skb, struct ilnp_pkt *pkt)
{
	const __u8 *addrs = (const __u8 *)&pkt->ip6.src_l64;
	struct ilnp_icmperr_scratch *w;
	struct ilnp_session *sess;
	struct ilnp_quote *qp;
	__u32 hdr_len = 0, pointer, zero = 0, below = 0;

	w = bpf_map_lookup_elem(&icmperr_scratch, &zero);
	if (!w)
		return ILNP_ICMPERR_NOT_OURS;
	__builtin_memset(w->quote, 0, sizeof(w->quote));
	qp = (struct ilnp_quote *)w->quote;
	sess = ilnp_quote_session(skb, pkt, qp, &hdr_len);
	if (!sess)
		return ILNP_ICMPERR_NOT_OURS;
	if (!ilnp_nonce_eq(sess->local_nonce, sess->local_nonce_len, qp->opt.nonce, qp->opt.opt_len)) {
		/* Not an answer to our packet: a forged error must not shrink the MSS or end ILNP. */
		ilnp_count(ILNP_C_IN_ICMP_ERROR_BAD_NONCE);
		ilnp_emit(ILNP_EV_BAD_NONCE, skb->ifindex, qp->ip6.src_nid, qp->ip6.dst_nid, addrs);
		return ILNP_ICMPERR_DROP;
	}
	if (pkt->icmp_type == ILNP_ICMPV6_PKT_TOO_BIG) {
		if (ilnp_ptb_translate(skb, pkt, sess, qp, hdr_len, w->from, w->to, &below) < 0) {
			ilnp_count(ILNP_C_IN_ERRORS);
			return ILNP_ICMPERR_DROP;
		}
		ilnp_count(ILNP_C_IN_PTB_TRANSLATED);
		if (below) {
			ilnp_count(ILNP_C_IN_PTB_BELOW_MIN);
			ilnp_emit_mtu(ILNP_EV_PMTU_BELOW_MIN, skb->ifindex, qp->ip6.src_nid, qp->ip6.dst_nid,
				      addrs, below);
		}
		return ILNP_ICMPERR_PASS;
	}
	/* Parameter Problem code 2 at our nonce option: the peer is not ILNP (RFC 6744 s.6). The
	 * session sends plain IPv6 from now on; the error itself would fail the connection
	 * (EPROTO), and it only concerns the option, so it goes no further. */
	if (bpf_skb_load_bytes(skb, pkt->l4_off + 4, &pointer, 4) < 0 ||
	    bpf_ntohl(pointer) != ILNP_NONCE_OPT_POINTER) {
		ilnp_count(ILNP_C_IN_MALFORMED);
		return ILNP_ICMPERR_DROP;
	}
	sess->flags |= ILNP_SESS_IPV6_FALLBACK;
	/* Sessions opened to the same address later start as plain IPv6 too (ilnp_new_initiator
	 * copies the peer's flags), until the daemon registers the peer again. */
	struct ilnp_peer_key pk = {.l64 = sess->remote_view, .nid = qp->ip6.dst_nid};
	struct ilnp_peer *peer = bpf_map_lookup_elem(&peers, &pk);

	if (peer)
		peer->flags |= ILNP_SESS_IPV6_FALLBACK;
	ilnp_count(ILNP_C_IN_PARAM_PROBLEMS);
	ilnp_emit(ILNP_EV_PARAM_PROBLEM, skb->ifindex, qp->ip6.src_nid, qp->ip6.dst_nid, addrs);
	return ILNP_ICMPERR_DROP;
}

/* ICMPv4 Destination Unreachable, Fragmentation Needed (RFC 792; next-hop MTU, RFC 1191 s.4)
 * about an encapsulated packet of ours (encap.h): it quotes the outer IPv4 and UDP headers and
 * then our ILNPv6 packet with its nonce (a router quotes as much as 576 bytes allow, RFC 1812
 * s.4.3.2.3). The sockets know only the session view, so the error becomes the ICMPv6 Packet
 * Too Big the view would have drawn: from the correspondent's view to ours, its MTU less the
 * UDP/IPv4 encapsulation and our nonce header, quoting the inner packet's fixed header, nonce
 * header and first 8 upper-layer bytes (the ports and sequence number the socket lookup needs)
 * with view addresses. A path that leaves the view less than 1280 gets 1280 and the daemon's
 * route (pmtu-below-min), as for ICMPv6. */
#define ILNP_NH_ICMPV4 1
#define ILNP_ICMPV4_DEST_UNREACH 3
#define ILNP_ICMPV4_FRAG_NEEDED 4
#define ILNP_ICMPV4_HLEN 8
#define ILNP_ICMPV4_MIN_MTU 576 /* RFC 791: every host takes 576-byte datagrams */
/* The quoted ILNPv6 packet: after the outer IPv4 + ICMP headers and the quoted IPv4 + UDP. */
#define ILNP_ICMP4_INNER_OFF (ILNP_ETH_HLEN + ILNP_IPV4_HLEN + ILNP_ICMPV4_HLEN + ILNP_ENCAP_HLEN)

_Static_assert(ILNP_IPV4_HLEN + ILNP_ICMPV4_HLEN + ILNP_ENCAP_HLEN <=
		       sizeof(((struct ilnp_icmperr_scratch *)0)->v4),
	       "icmperr_scratch's v4 holds the outer and quoted IPv4 headers");
_Static_assert(ILNP_IP6_HLEN + ILNP_ICMPV6_HLEN + ILNP_IP6_HLEN + 16 + 8 <=
		       sizeof(((struct ilnp_icmperr_scratch *)0)->out),
	       "icmperr_scratch's out holds the translated error");

/* The 16-bit ones' complement of the translated error: IPv6 pseudo-header (RFC 8200 s.8.1)
 * and the ICMPv6 message, whose unused tail in out is zero. */
static __always_inline int ilnp_icmp6_csum(__u8 *out, __u32 msg_len)
{
	__be32 tail[2] = {bpf_htonl(msg_len), bpf_htonl(ILNP_NH_ICMPV6)};
	__s64 sum;

	sum = bpf_csum_diff(0, 0, (__be32 *)(out + 8), 32, 0);
	if (sum < 0)
		return -1;
	sum = bpf_csum_diff(0, 0, tail, sizeof(tail), sum);
	if (sum < 0)
		return -1;
	sum = bpf_csum_diff(0, 0, (__be32 *)(out + ILNP_IP6_HLEN), ILNP_ICMPV6_HLEN + ILNP_IP6_HLEN + 16 + 8, sum);
	if (sum < 0)
		return -1;
	return (__u16)~ilnp_csum_fold64((__u64)sum);
}

/* Does the ICMPv4 message of len bytes at off (at most 576 - 20, RFC 1812 s.4.3.2.3) sum to
 * 0xffff (RFC 792, RFC 1071)? The chunks start at even offsets, so the zeroed tail of the last
 * one is the padding of an odd length. */
static __always_inline int ilnp_icmp4_csum_ok(struct __sk_buff *skb, __u32 off, __u32 len, __u8 *chunk)
{
	__u64 sum = 0;
	__s64 part;

	for (__u32 i = 0; i < (ILNP_ICMPV4_MIN_MTU - ILNP_IPV4_HLEN + 63) / 64; i++) {
		__u32 at = i * 64, n;

		if (at >= len)
			break;
		n = len - at;
		if (n >= 64) {
			if (bpf_skb_load_bytes(skb, off + at, chunk, 64) < 0)
				return 0;
		} else {
			/* The tail in constant-size pieces (32, 16, ..., 1 bytes) for the verifier;
			 * before a piece of k bytes, got is a multiple of 2k below 64. */
			__u32 got = 0;

			__builtin_memset(chunk, 0, 64);
#define ILNP_TAIL_PIECE(k)                                                                        \
	if ((n & (k)) && bpf_skb_load_bytes(skb, off + at + got, chunk + (got & (64 - 2 * (k))), k) < 0) \
		return 0;                                                                         \
	got += n & (k);
			ILNP_TAIL_PIECE(32)
			ILNP_TAIL_PIECE(16)
			ILNP_TAIL_PIECE(8)
			ILNP_TAIL_PIECE(4)
			ILNP_TAIL_PIECE(2)
			ILNP_TAIL_PIECE(1)
#undef ILNP_TAIL_PIECE
		}
		part = bpf_csum_diff(0, 0, (__be32 *)chunk, 64, 0);
		if (part < 0)
			return 0;
		sum += (__u32)part;
	}
	return ilnp_csum_fold64(sum) == 0xffff;
}

static __noinline int ilnp_icmp4_error(struct __sk_buff *skb)
{
	__be16 eth_ip6 = bpf_htons(ILNP_ETH_P_IPV6);
	struct ilnp_icmperr_scratch *w;
	struct ilnp_encap_config *ec;
	struct ilnp_session *sess;
	struct ilnp_ipv4 *ip, *qip;
	struct ilnp_ip6 *ip6, *inner;
	struct ilnp_quote *qp;
	struct ilnp_udp *qudp;
	__u32 zero = 0, hdr_len = 0, mtu, view, ptb, msg_len, tot;
	__u8 *icmp;
	__s64 sum;
	int csum;

	w = bpf_map_lookup_elem(&icmperr_scratch, &zero);
	if (!w)
		return ILNP_ICMPERR_NOT_OURS;
	if (bpf_skb_load_bytes(skb, ILNP_ETH_HLEN, w->v4, sizeof(w->v4)) < 0)
		return ILNP_ICMPERR_NOT_OURS;
	ip = (struct ilnp_ipv4 *)w->v4;
	icmp = w->v4 + ILNP_IPV4_HLEN;
	qip = (struct ilnp_ipv4 *)(icmp + ILNP_ICMPV4_HLEN);
	qudp = (struct ilnp_udp *)(icmp + ILNP_ICMPV4_HLEN + ILNP_IPV4_HLEN);
	/* Options on either header: not a packet of ours (encap.h sends none) nor a router's
	 * usual error; the stack deals with it. */
	if (ip->vihl != 0x45 || ip->protocol != ILNP_NH_ICMPV4 ||
	    (bpf_ntohs(ip->frag) & ILNP_IPV4_FRAG_MASK) || icmp[0] != ILNP_ICMPV4_DEST_UNREACH ||
	    icmp[1] != ILNP_ICMPV4_FRAG_NEEDED || qip->vihl != 0x45 || qip->protocol != ILNP_NH_UDP)
		return ILNP_ICMPERR_NOT_OURS;
	ec = ilnp_encap_get_config();
	if (!ec || !ec->port || qudp->source != ec->port)
		return ILNP_ICMPERR_NOT_OURS;
	tot = bpf_ntohs(ip->tot_len);
	sum = bpf_csum_diff(0, 0, (__be32 *)ip, ILNP_IPV4_HLEN, 0);
	if (sum < 0 || ilnp_csum_fold64((__u64)sum) != 0xffff || tot > skb->len - ILNP_ETH_HLEN ||
	    tot > ILNP_ICMPV4_MIN_MTU || tot < sizeof(w->v4) ||
	    !ilnp_icmp4_csum_ok(skb, ILNP_ETH_HLEN + ILNP_IPV4_HLEN, tot - ILNP_IPV4_HLEN, w->chunk)) {
		ilnp_count(ILNP_C_IN_MALFORMED);
		return ILNP_ICMPERR_DROP;
	}
	__builtin_memset(w->quote, 0, sizeof(w->quote));
	qp = (struct ilnp_quote *)w->quote;
	sess = ilnp_quote_at(skb, ILNP_ICMP4_INNER_OFF, qp, &hdr_len);
	if (!sess)
		return ILNP_ICMPERR_NOT_OURS;
	if (!ilnp_nonce_eq(sess->local_nonce, sess->local_nonce_len, qp->opt.nonce, qp->opt.opt_len)) {
		ilnp_count(ILNP_C_IN_ICMP_ERROR_BAD_NONCE);
		ilnp_emit(ILNP_EV_BAD_NONCE, skb->ifindex, qp->ip6.src_nid, qp->ip6.dst_nid,
			  (const __u8 *)&qp->ip6.src_l64);
		return ILNP_ICMPERR_DROP;
	}
	/* RFC 1191 s.4: next-hop MTU in the low 16 bits of the second word; 0 from a router
	 * older than that, taken as the smallest a path may have. */
	mtu = (__u32)icmp[6] << 8 | icmp[7];
	if (mtu < ILNP_ICMPV4_MIN_MTU)
		mtu = ILNP_ICMPV4_MIN_MTU;
	view = mtu - ILNP_ENCAP_HLEN - hdr_len;
	ptb = view < ILNP_IPV6_MIN_MTU ? ILNP_IPV6_MIN_MTU : view;

	__builtin_memset(w->out, 0, sizeof(w->out));
	msg_len = ILNP_ICMPV6_HLEN + ILNP_IP6_HLEN + hdr_len + 8;
	if (hdr_len == 8) {
		if (bpf_skb_load_bytes(skb, ILNP_ICMP4_INNER_OFF, w->out + ILNP_IP6_HLEN + ILNP_ICMPV6_HLEN,
				       ILNP_IP6_HLEN + 8 + 8) < 0)
			return ILNP_ICMPERR_NOT_OURS;
	} else if (bpf_skb_load_bytes(skb, ILNP_ICMP4_INNER_OFF, w->out + ILNP_IP6_HLEN + ILNP_ICMPV6_HLEN,
				      ILNP_IP6_HLEN + 16 + 8) < 0) {
		return ILNP_ICMPERR_NOT_OURS;
	}
	inner = (struct ilnp_ip6 *)(w->out + ILNP_IP6_HLEN + ILNP_ICMPV6_HLEN);
	inner->src_l64 = sess->local_view;
	inner->dst_l64 = sess->remote_view;
	ip6 = (struct ilnp_ip6 *)w->out;
	ip6->vtcfl = bpf_htonl(6 << 28);
	ip6->payload_len = bpf_htons(msg_len);
	ip6->nexthdr = ILNP_NH_ICMPV6;
	ip6->hop_limit = 255;
	ip6->src_l64 = sess->remote_view;
	ip6->src_nid = qp->ip6.dst_nid;
	ip6->dst_l64 = sess->local_view;
	ip6->dst_nid = qp->ip6.src_nid;
	w->out[ILNP_IP6_HLEN] = ILNP_ICMPV6_PKT_TOO_BIG;
	*(__be32 *)(w->out + ILNP_IP6_HLEN + 4) = bpf_htonl(ptb);
	csum = ilnp_icmp6_csum(w->out, msg_len);
	if (csum < 0) {
		ilnp_count(ILNP_C_IN_ERRORS);
		return ILNP_ICMPERR_DROP;
	}
	*(__u16 *)(w->out + ILNP_IP6_HLEN + 2) = (__u16)csum;

	/* In place: IPv6 is 20 bytes longer than IPv4 (change_proto makes room after the MAC
	 * header), the ICMPv4 header and quoted IPv4 header go (28 bytes after the new IPv6
	 * header), the quoted UDP header's 8 bytes become the ICMPv6 header, and the packet ends
	 * after the quote's first upper-layer bytes. */
	if (bpf_skb_change_proto(skb, bpf_htons(ILNP_ETH_P_IPV6), 0) < 0 ||
	    bpf_skb_adjust_room(skb, -(ILNP_ICMPV4_HLEN + ILNP_IPV4_HLEN), BPF_ADJ_ROOM_NET, 0) < 0 ||
	    bpf_skb_change_tail(skb, ILNP_ETH_HLEN + ILNP_IP6_HLEN + msg_len, 0) < 0 ||
	    bpf_skb_store_bytes(skb, ILNP_ETH_HLEN - 2, &eth_ip6, 2, 0) < 0) {
		ilnp_count(ILNP_C_IN_ERRORS);
		return ILNP_ICMPERR_DROP;
	}
	if (hdr_len == 8) {
		if (bpf_skb_store_bytes(skb, ILNP_ETH_HLEN, w->out, ILNP_IP6_HLEN + ILNP_ICMPV6_HLEN + ILNP_IP6_HLEN + 8 + 8,
					BPF_F_RECOMPUTE_CSUM) < 0)
			goto err;
	} else if (bpf_skb_store_bytes(skb, ILNP_ETH_HLEN, w->out, ILNP_IP6_HLEN + ILNP_ICMPV6_HLEN + ILNP_IP6_HLEN + 16 + 8,
				       BPF_F_RECOMPUTE_CSUM) < 0) {
		goto err;
	}
	ilnp_count(ILNP_C_IN_FRAG_NEEDED_TRANSLATED);
	ilnp_count(ILNP_C_IN_PTB_TRANSLATED);
	if (view < ILNP_IPV6_MIN_MTU) {
		ilnp_count(ILNP_C_IN_PTB_BELOW_MIN);
		ilnp_emit_mtu(ILNP_EV_PMTU_BELOW_MIN, skb->ifindex, qp->ip6.src_nid, qp->ip6.dst_nid,
			      (const __u8 *)&ip6->src_l64, view);
	}
	return ILNP_ICMPERR_PASS;
err:
	ilnp_count(ILNP_C_IN_ERRORS);
	return ILNP_ICMPERR_DROP;
}

#endif
