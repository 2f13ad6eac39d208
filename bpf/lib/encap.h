/* ILNPv6 across IPv4 and NAT: the ILNPv6 packet, nonce option and all, inside UDP/IPv4.
 *
 * IPv4 locators (RFC 6742 L32) are carried as L64 values in the ILCC and every map, so sessions,
 * Locator Updates and the nonce checks stay the same code. The mapping (internal/encap):
 *
 *   L64 = 0x0000 | UDP port (16 bits) | IPv4 address (32 bits), all in network byte order.
 *
 * The 0000::/16 space is IETF-reserved (RFC 4291 s.2.4), so no IPv6 locator collides, and
 * address and port together make it the endpoint as a NAT shows it (WireGuard-style roaming:
 * a receiver replaces the inner locators by those of the outer header it saw).
 *
 * Why UDP: a NAT only translates protocols it knows and keeps a binding only for flows it has
 * seen leave; UDP passes every NAT (RFC 5770 for HIP, RFC 4380 Teredo do the same). The outer
 * UDP checksum is zero (allowed for IPv4, RFC 768): the inner TCP/UDP/ICMPv6 packet carries its
 * own end-to-end checksum, which the kernel may not have computed yet on egress
 * (CHECKSUM_PARTIAL), and the nonce authenticates the packet.
 *
 * Overhead on the wire: IPv4 20 + UDP 8 = 28 bytes, on top of the 8 (or 16) byte nonce header.
 * With a 1500-byte path an encapsulated session's inner IPv6 packets must stay within
 * 1500 - 28 - 8 = 1464 bytes (TCP MSS 1404); a packet that would not fit is counted
 * (encap_egress_too_big) and dropped, never fragmented: the outer header has DF set.
 */
#ifndef ILNP_ENCAP_H
#define ILNP_ENCAP_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "maps.h"
#include "parse.h"
#include "rewrite.h"

#define ILNP_ETH_P_IP 0x0800
#define ILNP_AF_INET 2
#define ILNP_IPV4_HLEN 20
#define ILNP_UDP_HLEN 8
#define ILNP_ENCAP_HLEN (ILNP_IPV4_HLEN + ILNP_UDP_HLEN)
#define ILNP_IPV4_DF 0x4000
#define ILNP_IPV4_FRAG_MASK 0x3fff /* MF + offset */
#define ILNP_ENCAP_TTL 64
#define ILNP_ENCAP_DROP 2 /* TCX_DROP */

/* BPF_F_ADJ_ROOM_DECAP_L3_IPV6 (kernel >= 6.3), newer than the uapi header here. */
#define ILNP_ADJ_ROOM_DECAP_L3_IPV6 (1ULL << 8)

/* encap_rx.state */
enum ilnp_encap_rx_state {
	ILNP_ENCAP_RX_NONE = 0,   /* a native packet */
	ILNP_ENCAP_RX_DECAP = 1,  /* decapsulated: only an accepted ILNP packet may pass */
	ILNP_ENCAP_RX_ACCEPT = 2, /* decapsulated and accepted by the ILNP checks */
};

struct ilnp_encap_rx {
	__u32 state;
	__u32 v6;       /* 1: the outer header was IPv6 (encap6.h) */
	__be64 src_l32; /* the outer source and destination as locators */
	__be64 dst_l32;
};

struct ilnp_ipv4 {
	__u8 vihl;
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag;
	__u8 ttl;
	__u8 protocol;
	__sum16 check;
	__be32 saddr;
	__be32 daddr;
};

struct ilnp_udp {
	__be16 source;
	__be16 dest;
	__be16 len;
	__sum16 check;
};

struct ilnp_encap_hdr {
	struct ilnp_ipv4 ip;
	struct ilnp_udp udp;
};

static __always_inline void ilnp_encap_count(__u32 counter)
{
	__u64 *value = bpf_map_lookup_elem(&encap_counters, &counter);

	if (value)
		*value += 1;
}

static __always_inline struct ilnp_encap_config *ilnp_encap_get_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&encap_config, &zero);
}

/* Is this locator an IPv4 endpoint (the mapping above)? */
static __always_inline int ilnp_is_l32(__be64 l64)
{
	const __u8 *b = (const __u8 *)&l64;

	return b[0] == 0 && b[1] == 0 && (b[4] | b[5] | b[6] | b[7]);
}

static __always_inline __be64 ilnp_l32(__be32 addr, __be16 port)
{
	__be64 l = 0;
	__u8 *b = (__u8 *)&l;

	__builtin_memcpy(b + 2, &port, 2);
	__builtin_memcpy(b + 4, &addr, 4);
	return l;
}

static __always_inline __be32 ilnp_l32_addr(__be64 l64)
{
	__be32 a;

	__builtin_memcpy(&a, (__u8 *)&l64 + 4, 4);
	return a;
}

static __always_inline __be16 ilnp_l32_port(__be64 l64)
{
	__be16 p;

	__builtin_memcpy(&p, (__u8 *)&l64 + 2, 2);
	return p;
}

/* The local locator an encapsulated packet leaves from: the session's own when it is an L32,
 * otherwise the host's default IPv4 locator (a dual-stack node whose active locator is an
 * L64 talking to a peer that is only reachable over IPv4). 0 when there is none. */
static __always_inline __be64 ilnp_encap_pick_local(__be64 local, __be64 remote)
{
	struct ilnp_encap_config *ec;

	if (!ilnp_is_l32(remote) || ilnp_is_l32(local))
		return local;
	ec = ilnp_encap_get_config();
	return ec ? ec->local_l32 : 0;
}

static __always_inline __u16 ilnp_csum_fold(__s64 sum)
{
	__u32 s = (__u32)sum;

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

/* Egress, after ilnp_encap(): puts IPv4 + UDP in front of the ILNPv6 packet and sends it out of
 * the local locator's interface towards the remote endpoint. */
static __always_inline int ilnp_encap_egress(struct __sk_buff *skb, __be64 local, __be64 remote)
{
	struct ilnp_encap_config *ec = ilnp_encap_get_config();
	struct bpf_redir_neigh nh = {.nh_family = ILNP_AF_INET};
	struct ilnp_local_locator *loc;
	struct ilnp_encap_hdr h = {};
	__be16 eth_ip = bpf_htons(ILNP_ETH_P_IP);
	__u32 inner = skb->len - ILNP_ETH_HLEN, ifindex, mtu = 0;
	__u64 flags = BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 | BPF_F_ADJ_ROOM_ENCAP_L4_UDP;
	__s64 sum;

	if (!ec || !ec->port) {
		ilnp_encap_count(ILNP_EC_EG_DISABLED);
		return ILNP_ENCAP_DROP;
	}
	if (!ilnp_is_l32(local)) {
		ilnp_encap_count(ILNP_EC_EG_NO_LOCAL_L32);
		return ILNP_ENCAP_DROP;
	}
	if (skb->len < ILNP_ETH_HLEN + ILNP_IP6_HLEN || inner + ILNP_ENCAP_HLEN > 0xffff) {
		ilnp_encap_count(ILNP_EC_EG_TOO_BIG);
		return ILNP_ENCAP_DROP;
	}
	loc = bpf_map_lookup_elem(&local_locators, &local);
	ifindex = loc && loc->ifindex ? loc->ifindex : skb->ifindex;
	/* GSO: segments grow by the outer headers, so gso_size shrinks by as much (the inner MSS
	 * is what the route allows for encapsulated peers). */
	if (bpf_skb_adjust_room(skb, ILNP_ENCAP_HLEN, BPF_ADJ_ROOM_MAC, flags) < 0) {
		ilnp_encap_count(ILNP_EC_EG_ERRORS);
		return ILNP_ENCAP_DROP;
	}
	h.ip.vihl = 0x45;
	h.ip.tot_len = bpf_htons(inner + ILNP_ENCAP_HLEN);
	h.ip.frag = bpf_htons(ILNP_IPV4_DF);
	h.ip.ttl = ILNP_ENCAP_TTL;
	h.ip.protocol = ILNP_NH_UDP;
	h.ip.saddr = ilnp_l32_addr(local);
	h.ip.daddr = ilnp_l32_addr(remote);
	sum = bpf_csum_diff(0, 0, (__be32 *)&h.ip, ILNP_IPV4_HLEN, 0);
	if (sum < 0) {
		ilnp_encap_count(ILNP_EC_EG_ERRORS);
		return ILNP_ENCAP_DROP;
	}
	h.ip.check = ~ilnp_csum_fold(sum);
	h.udp.source = ilnp_l32_port(local);
	h.udp.dest = ilnp_l32_port(remote);
	h.udp.len = bpf_htons(inner + ILNP_UDP_HLEN);
	if (bpf_skb_store_bytes(skb, ILNP_ETH_HLEN - 2, &eth_ip, 2, 0) < 0 ||
	    bpf_skb_store_bytes(skb, ILNP_ETH_HLEN, &h, sizeof(h), 0) < 0) {
		ilnp_encap_count(ILNP_EC_EG_ERRORS);
		return ILNP_ENCAP_DROP;
	}
	if (bpf_check_mtu(skb, ifindex, &mtu, 0, 0) != 0) {
		ilnp_encap_count(ILNP_EC_EG_TOO_BIG);
		return ILNP_ENCAP_DROP;
	}
	ilnp_encap_count(ILNP_EC_EG_PACKETS);
	if (loc && *(__u32 *)loc->nexthop) {
		__builtin_memcpy(&nh.ipv4_nh, loc->nexthop, 4);
		return bpf_redirect_neigh(ifindex, &nh, sizeof(nh), 0);
	}
	return bpf_redirect_neigh(ifindex, 0, 0, 0);
}

/* Ingress entry: an UDP/IPv4 packet to the encapsulation port loses its outer headers and goes
 * on as the ILNPv6 packet inside (rx->state = DECAP); anything else is left alone (NONE).
 * Returns 0 to continue, ILNP_ENCAP_DROP when the packet was ours but unusable. */
static __always_inline int ilnp_encap_ingress(struct __sk_buff *skb, struct ilnp_encap_rx *rx)
{
	struct ilnp_encap_config *ec;
	struct ilnp_encap_hdr h;
	__be16 proto, plen, eth_ip6 = bpf_htons(ILNP_ETH_P_IPV6);
	__u8 ver;
	__u32 tot, udp_len;
	__s64 sum;

	/* skb->protocol is the EtherType the kernel took from the frame: native IPv6 leaves
	 * without a helper call. */
	if (skb->protocol != bpf_htons(ILNP_ETH_P_IP))
		return 0;
	if (bpf_skb_load_bytes(skb, ILNP_ETH_HLEN - 2, &proto, 2) < 0 || proto != bpf_htons(ILNP_ETH_P_IP))
		return 0;
	ec = ilnp_encap_get_config();
	if (!ec || !ec->port)
		return 0;
	/* Not readable as IPv4 + UDP: not provably ours, the stack deals with it. */
	if (bpf_skb_load_bytes(skb, ILNP_ETH_HLEN, &h.ip, ILNP_IPV4_HLEN) < 0)
		return 0;
	if (h.ip.protocol != ILNP_NH_UDP || (h.ip.vihl >> 4) != 4)
		return 0;
	if ((h.ip.vihl & 0xf) != 5) {
		/* Our senders never use IPv4 options; the UDP header's place is unknown. */
		if ((h.ip.vihl & 0xf) < 5)
			return 0;
		if (bpf_skb_load_bytes(skb, ILNP_ETH_HLEN + (h.ip.vihl & 0xf) * 4, &h.udp, ILNP_UDP_HLEN) < 0 ||
		    h.udp.dest != ec->port)
			return 0;
		ilnp_encap_count(ILNP_EC_IN_BAD_OUTER);
		return ILNP_ENCAP_DROP;
	}
	if (bpf_skb_load_bytes(skb, ILNP_ETH_HLEN + ILNP_IPV4_HLEN, &h.udp, ILNP_UDP_HLEN) < 0) {
		/* A first fragment or a truncated packet: the port may still be ours. */
		return 0;
	}
	if (h.udp.dest != ec->port)
		return 0;
	ilnp_encap_count(ILNP_EC_IN_PACKETS);
	if (bpf_ntohs(h.ip.frag) & ILNP_IPV4_FRAG_MASK) {
		/* We send with DF; a fragment is someone else's making. */
		ilnp_encap_count(ILNP_EC_IN_FRAGMENTS);
		return ILNP_ENCAP_DROP;
	}
	sum = bpf_csum_diff(0, 0, (__be32 *)&h.ip, ILNP_IPV4_HLEN, 0);
	if (sum < 0 || ilnp_csum_fold(sum) != 0xffff) {
		ilnp_encap_count(ILNP_EC_IN_BAD_CHECKSUM);
		return ILNP_ENCAP_DROP;
	}
	tot = bpf_ntohs(h.ip.tot_len);
	udp_len = bpf_ntohs(h.udp.len);
	if (tot < ILNP_ENCAP_HLEN + ILNP_IP6_HLEN || ILNP_ETH_HLEN + tot > skb->len ||
	    udp_len != tot - ILNP_IPV4_HLEN) {
		ilnp_encap_count(ILNP_EC_IN_TRUNCATED);
		return ILNP_ENCAP_DROP;
	}
	if (bpf_skb_load_bytes(skb, ILNP_ETH_HLEN + ILNP_ENCAP_HLEN, &ver, 1) < 0 || (ver >> 4) != 6) {
		ilnp_encap_count(ILNP_EC_IN_NOT_IPV6);
		return ILNP_ENCAP_DROP;
	}
	/* The inner packet fills the UDP payload exactly. */
	if (bpf_skb_load_bytes(skb, ILNP_ETH_HLEN + ILNP_ENCAP_HLEN + 4, &plen, 2) < 0 ||
	    ILNP_IP6_HLEN + (__u32)bpf_ntohs(plen) != udp_len - ILNP_UDP_HLEN) {
		ilnp_encap_count(ILNP_EC_IN_TRUNCATED);
		return ILNP_ENCAP_DROP;
	}
	rx->src_l32 = ilnp_l32(h.ip.saddr, h.udp.source);
	rx->dst_l32 = ilnp_l32(h.ip.daddr, h.udp.dest);
	if (!ilnp_is_l32(rx->src_l32) || !ilnp_is_l32(rx->dst_l32)) {
		ilnp_encap_count(ILNP_EC_IN_BAD_OUTER);
		return ILNP_ENCAP_DROP;
	}
	if (bpf_skb_adjust_room(skb, -ILNP_ENCAP_HLEN, BPF_ADJ_ROOM_MAC, ILNP_ADJ_ROOM_DECAP_L3_IPV6) < 0 ||
	    bpf_skb_store_bytes(skb, ILNP_ETH_HLEN - 2, &eth_ip6, 2, 0) < 0) {
		ilnp_encap_count(ILNP_EC_IN_ERRORS);
		return ILNP_ENCAP_DROP;
	}
	rx->state = ILNP_ENCAP_RX_DECAP;
	ilnp_encap_count(ILNP_EC_IN_DECAPSULATED);
	return 0;
}

/* Ingress, after parsing the inner packet: the inner locators become the outer endpoints as
 * this host saw them (behind a NAT the sender cannot know its own), the checksum following
 * where the pseudo-header covers the locators. A decapsulated packet must carry a nonce: an
 * UDP port that let plain IPv6 in would be an open tunnel. Returns < 0 to drop. */
static __always_inline int ilnp_encap_rx_locators(struct __sk_buff *skb, struct ilnp_pkt *pkt,
						  const struct ilnp_config *cfg,
						  const struct ilnp_encap_rx *rx)
{
	__be64 pseudo_old[2] = {0, 0}, pseudo_new[2] = {0, 0};

	if (rx->state != ILNP_ENCAP_RX_DECAP)
		return 0;
	__u32 end = ILNP_IP6_OFF + ILNP_IP6_HLEN + bpf_ntohs(pkt->ip6.payload_len);

	if (pkt->nonces != 1 || pkt->malformed) {
		ilnp_encap_count(pkt->nonces ? ILNP_EC_IN_BAD_INNER : ILNP_EC_IN_NO_NONCE);
		return -1;
	}
	/* Headers past the payload length (ilnp_parse checks only the packet's end): stripping
	 * the nonce header would wrap the payload length around. */
	if (pkt->nonce_opt_off + 2 + pkt->nonce_len > end || pkt->l4_off > end) {
		ilnp_encap_count(ILNP_EC_IN_BAD_INNER);
		return -1;
	}
	if (pkt->ip6.src_l64 == rx->src_l32 && pkt->ip6.dst_l64 == rx->dst_l32)
		return 0;
	if (pkt->l4_proto == ILNP_NH_ICMPV6 || (cfg->flags & ILNP_CFG_IPV6_CHECKSUM)) {
		pseudo_old[0] = pkt->ip6.src_l64;
		pseudo_old[1] = pkt->ip6.dst_l64;
		pseudo_new[0] = rx->src_l32;
		pseudo_new[1] = rx->dst_l32;
	}
	if (ilnp_fix_l4(skb, pkt, 0, pseudo_old, pseudo_new) < 0)
		goto err;
	pkt->ip6.src_l64 = rx->src_l32;
	pkt->ip6.dst_l64 = rx->dst_l32;
	if (ilnp_store_ip6(skb, pkt) < 0)
		goto err;
	ilnp_encap_count(ILNP_EC_IN_LOCATORS_AS_SEEN);
	return 0;
err:
	ilnp_encap_count(ILNP_EC_IN_ERRORS);
	return -1;
}

/* May a nonce-verified packet from a remote locator the session does not list pass? Only a
 * decapsulated one, from an IPv4 endpoint, with ILNP_ENCAP_ROAM (NAT rebinding). */
static __always_inline int ilnp_encap_roaming(const struct ilnp_encap_rx *rx)
{
	struct ilnp_encap_config *ec;

	if (rx->state != ILNP_ENCAP_RX_DECAP || rx->v6)
		return 0;
	ec = ilnp_encap_get_config();
	if (!ec || !(ec->flags & ILNP_ENCAP_ROAM))
		return 0;
	ilnp_encap_count(ILNP_EC_IN_ROAMED);
	return 1;
}

/* The verdict of a decapsulated packet: whatever the ILNP checks did not accept goes no
 * further (passing it on would hand an unauthenticated IPv6 packet to the stack). */
static __always_inline int ilnp_encap_rx_verdict(const struct ilnp_encap_rx *rx, int verdict)
{
	if (rx->state != ILNP_ENCAP_RX_DECAP || verdict == ILNP_ENCAP_DROP)
		return verdict;
	ilnp_encap_count(ILNP_EC_IN_NOT_ACCEPTED);
	return ILNP_ENCAP_DROP;
}

#endif
