// SPDX-License-Identifier: GPL-2.0
/* Mobile IPv6 (RFC 6275) baseline datapath for the lab: tc (TCX) programs for the home agent's
 * bidirectional tunnel (RFC 2473 IPv6-in-IPv6, s.10.4.1, s.10.4.5), the mobile node's reverse
 * tunnel and route-optimised sending/receiving (s.11.3.1, s.11.3.3) and the correspondent's
 * route optimisation (s.9.3.1, s.9.3.2). This kernel has neither ip6 tunnels nor
 * CONFIG_IPV6_MIP6, so all of it happens here; signalling lives in Go. */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/rewrite.h"
#include "lib/icmp.h"

/* TCX verdicts (enum tcx_action_base in newer uapi headers). */
#define TCX_NEXT -1
#define TCX_PASS 0
#define TCX_DROP 2
#define TCX_REDIRECT 7

#define MIP6_AF_INET6 10

char LICENSE[] SEC("license") = "GPL";

/* Common start of every program: the frame's fixed IPv6 header, or a verdict to return. */
static __always_inline int mip6_begin(struct __sk_buff *skb, struct mip6_ip6 *ip6)
{
	if (mip6_is_ipv6(skb) < 0) {
		mip6_count(MIP6_C_NON_IPV6);
		return TCX_NEXT;
	}
	mip6_count(MIP6_C_PACKETS);
	if (mip6_load_ip6(skb, MIP6_IP6_OFF, ip6) < 0) {
		/* Not readable as IPv6: the stack drops it on its own. */
		mip6_count(MIP6_C_MALFORMED);
		return TCX_NEXT;
	}
	return 1;
}

/* Whether a packet of wire_len bytes plus overhead fits the MTU of ifindex (0: the skb's
 * device), which goes to *mtu. veth drops an oversized frame without a trace, so callers answer
 * with a Packet Too Big instead. */
static __always_inline int mip6_fits(struct __sk_buff *skb, __u32 ifindex, __u32 wire_len,
				     __u32 overhead, __u32 *mtu)
{
	*mtu = 0;
	if (!wire_len || bpf_check_mtu(skb, ifindex, mtu, 0, 0) < 0 || !*mtu)
		return 1;
	return wire_len + overhead <= *mtu;
}

/* MN or CN: the local socket's packet does not fit once the tunnel, HAO or RH2 is added. It
 * turns into a Packet Too Big from `from` announcing the room left, sent back up the stack
 * (the ingress of the same device), where the socket's path MTU drops, as with a tunnel
 * device's MTU. */
static __always_inline int mip6_local_too_big(struct __sk_buff *skb, const struct mip6_ip6 *ip6,
					      const struct mip6_addr *from, __u32 mtu, __u32 counter)
{
	if (mip6_make_ptb(skb, ip6, from, mtu) < 0 || mip6_swap_eth(skb) < 0) {
		mip6_count(MIP6_C_PTB_FAILED);
		return TCX_DROP;
	}
	mip6_count(counter);
	return bpf_redirect(skb->ifindex, BPF_F_INGRESS);
}

/* With the signalling tap on, a Mobility Header packet for this node is copied to the
 * signalling ring and dropped (MIP6_CFG_SIGNALLING_TAP). Returns a verdict, or 1 when the
 * packet is not the tap's. */
static __always_inline int mip6_tap(struct __sk_buff *skb, const struct mip6_config *cfg,
				    const struct mip6_ip6 *ip6)
{
	struct mip6_signal *sig;
	__u64 len;

	if (!(cfg->flags & MIP6_CFG_SIGNALLING_TAP) ||
	    !mip6_is_mh(skb, ip6->nexthdr, MIP6_EXT_OFF))
		return 1;
	len = MIP6_IP6_HLEN + (__u64)bpf_ntohs(ip6->payload_len);
	sig = bpf_ringbuf_reserve(&signalling, sizeof(*sig), 0);
	if (!sig) {
		mip6_count(MIP6_C_SIGNALLING_LOST);
		return TCX_DROP;
	}
	/* Keep the bound check on the register the helper gets, where the verifier sees it. */
	asm volatile("" : "+r"(len));
	if (len < MIP6_IP6_HLEN || len > MIP6_SIGNAL_MAX ||
	    bpf_skb_load_bytes(skb, MIP6_IP6_OFF, sig->data, len) < 0) {
		bpf_ringbuf_discard(sig, 0);
		mip6_count(MIP6_C_SIGNALLING_LOST);
		return TCX_DROP;
	}
	sig->ts_ns = bpf_ktime_get_ns();
	sig->ifindex = skb->ifindex;
	sig->len = len;
	bpf_ringbuf_submit(sig, 0);
	mip6_count(MIP6_C_SIGNALLING);
	return TCX_DROP;
}

static __always_inline void mip6_binding_used(struct mip6_binding *b)
{
	__sync_fetch_and_add(&b->packets, 1);
}

/* FIB lookup of src -> dst as the HA forwards. 0: *ifindex and nh filled; 1: the frame does not
 * fit the route's device (*mtu); -1: not forwardable here (local destination, no route). */
static __always_inline int mip6_route(struct __sk_buff *skb, const struct mip6_addr *src,
				      const struct mip6_addr *dst, __u32 *ifindex,
				      struct bpf_redir_neigh *nh, __u32 *mtu)
{
	struct bpf_fib_lookup fib = {};
	long rc;

	fib.family = MIP6_AF_INET6;
	fib.ifindex = skb->ifindex;
	/* tot_len stays 0: the helper then checks the frame against the output device's MTU
	 * with is_skb_forwardable, which lets GSO packets through (a tot_len would be compared
	 * with the super-packet's size); mip6_fits judges those by their segments. */
	__builtin_memcpy(fib.ipv6_src, src, 16);
	__builtin_memcpy(fib.ipv6_dst, dst, 16);
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SKIP_NEIGH);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		*mtu = fib.mtu_result;
		return 1;
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return -1;
	*ifindex = fib.ifindex;
	nh->nh_family = MIP6_AF_INET6;
	/* With SKIP_NEIGH the lookup leaves the gateway (or the on-link destination) here. */
	__builtin_memcpy(nh->ipv6_nh, fib.ipv6_dst, 16);
	return 0;
}

/* HA: forwards the packet src -> dst itself (FIB lookup, bpf_redirect_neigh); what the lookup
 * cannot forward goes to the stack. wire_len is its largest frame on the wire; one the route's
 * device cannot take is dropped and counted as `too_big`. */
static __always_inline int mip6_ha_forward(struct __sk_buff *skb, const struct mip6_addr *src,
					   const struct mip6_addr *dst, __u32 wire_len, __u32 too_big)
{
	struct bpf_redir_neigh nh = {};
	__u32 ifindex = 0, mtu = 0;
	int rc = mip6_route(skb, src, dst, &ifindex, &nh, &mtu);

	if (rc > 0 || (rc == 0 && !mip6_fits(skb, ifindex, wire_len, 0, &mtu))) {
		mip6_count(too_big);
		return TCX_DROP;
	}
	if (rc < 0) {
		mip6_count(MIP6_C_HA_NO_ROUTE);
		return TCX_PASS;
	}
	return bpf_redirect_neigh(ifindex, &nh, sizeof(nh), 0);
}

/* HA, reverse tunnel (s.10.4.5): a packet tunnelled to the HA from a registered care-of address
 * whose inner source is the matching home address is decapsulated and forwarded. */
static __always_inline int mip6_ha_reverse(struct __sk_buff *skb, const struct mip6_ip6 *outer)
{
	struct mip6_binding *b;
	struct mip6_ip6 inner;
	__u32 wire_len;
	int rc;

	if (mip6_load_ip6(skb, MIP6_EXT_OFF, &inner) < 0 ||
	    MIP6_IP6_HLEN + bpf_ntohs(inner.payload_len) != bpf_ntohs(outer->payload_len)) {
		mip6_count(MIP6_C_MALFORMED);
		return TCX_DROP;
	}
	b = bpf_map_lookup_elem(&bindings, &inner.src);
	if (!b || !mip6_addr_eq((const struct mip6_addr *)b->coa, &outer->src)) {
		mip6_count(MIP6_C_HA_REVERSE_UNKNOWN);
		return TCX_DROP;
	}
	if (mip6_decap(skb) < 0) {
		mip6_count(MIP6_C_ERRORS);
		return TCX_DROP;
	}
	mip6_binding_used(b);
	mip6_count(MIP6_C_HA_DECAPSULATED);
	if (inner.hop_limit <= 1)
		return TCX_PASS; /* the stack sends Time Exceeded */
	wire_len = mip6_wire_len(skb, &inner);
	rc = mip6_ha_forward(skb, &inner.src, &inner.dst, wire_len, MIP6_C_PTB_FAILED);
	if (rc == TCX_REDIRECT) {
		/* Forwarded by us, so the hop limit is ours to decrement (RFC 8200 s.3). */
		inner.hop_limit--;
		if (bpf_skb_store_bytes(skb, MIP6_IP6_OFF + 7, &inner.hop_limit, 1, BPF_F_RECOMPUTE_CSUM) < 0) {
			mip6_count(MIP6_C_ERRORS);
			return TCX_DROP;
		}
	}
	return rc;
}

/* Home agent, on every interface of the HA (its home-link one too: on-link nodes reach the home
 * address through proxy ND, s.10.4.1). */
SEC("tcx/ingress")
int mip6_ha_ingress(struct __sk_buff *skb)
{
	struct mip6_config *cfg = mip6_get_config();
	struct mip6_binding *b;
	struct mip6_ip6 ip6;
	struct bpf_redir_neigh nh = {};
	__u32 wire_len, ifindex = 0, mtu = 0;
	int rc = mip6_begin(skb, &ip6);

	if (rc != 1)
		return rc;
	if (!cfg)
		return TCX_NEXT;
	if (mip6_addr_eq(&ip6.dst, (const struct mip6_addr *)cfg->home_agent)) {
		if (ip6.nexthdr == MIP6_NH_IPV6)
			return mip6_ha_reverse(skb, &ip6);
		rc = mip6_tap(skb, cfg, &ip6);
		if (rc != 1)
			return rc;
		return TCX_NEXT;
	}

	/* s.10.4.1: packets for a registered home address are tunnelled to its care-of address. */
	b = bpf_map_lookup_elem(&bindings, &ip6.dst);
	if (!b)
		return TCX_NEXT;
	if (ip6.hop_limit <= 1) {
		mip6_count(MIP6_C_HA_HOP_LIMIT);
		return TCX_NEXT;
	}
	/* RFC 2473 s.7.1: what the tunnel cannot carry is answered with a Packet Too Big
	 * announcing the tunnel's MTU (the route's minus the 40 bytes). */
	wire_len = mip6_wire_len(skb, &ip6);
	rc = mip6_route(skb, (const struct mip6_addr *)cfg->home_agent,
			(const struct mip6_addr *)b->coa, &ifindex, &nh, &mtu);
	if (rc > 0 || (rc == 0 && !mip6_fits(skb, ifindex, wire_len, MIP6_IP6_HLEN, &mtu))) {
		if (mtu <= MIP6_IP6_HLEN ||
		    mip6_make_ptb(skb, &ip6, (const struct mip6_addr *)cfg->home_agent,
				  mtu - MIP6_IP6_HLEN) < 0) {
			mip6_count(MIP6_C_PTB_FAILED);
			return TCX_DROP;
		}
		mip6_count(MIP6_C_HA_TOO_BIG);
		return mip6_ha_forward(skb, (const struct mip6_addr *)cfg->home_agent, &ip6.src, 0,
				       MIP6_C_PTB_FAILED);
	}
	/* The HA forwards the original packet into the tunnel (RFC 2473 s.3.1). */
	ip6.hop_limit--;
	if (bpf_skb_store_bytes(skb, MIP6_IP6_OFF + 7, &ip6.hop_limit, 1, BPF_F_RECOMPUTE_CSUM) < 0 ||
	    mip6_encap(skb, &ip6, (const struct mip6_addr *)cfg->home_agent,
		       (const struct mip6_addr *)b->coa) < 0) {
		mip6_count(MIP6_C_ERRORS);
		return TCX_DROP;
	}
	mip6_binding_used(b);
	mip6_count(MIP6_C_HA_ENCAPSULATED);
	if (rc < 0) {
		mip6_count(MIP6_C_HA_NO_ROUTE);
		return TCX_PASS;
	}
	return bpf_redirect_neigh(ifindex, &nh, sizeof(nh), 0);
}

/* Correspondent part of egress (s.9.3.2): a packet to a home address with a binding goes to the
 * care-of address with a type 2 Routing header. Mobility Header messages leave as the
 * signalling built them: a Home Test goes to the home address, since return routability tests
 * the home path (s.5.2.5), and a mobile node's BU to a mobile peer's home address goes through
 * the peer's home agent. `none` is the verdict when there is nothing to do. */
static __always_inline int mip6_peer_rh2(struct __sk_buff *skb, struct mip6_ip6 *ip6, int none)
{
	struct mip6_binding *b;
	struct mip6_addr coa;
	__u32 mtu = 0;

	b = bpf_map_lookup_elem(&bindings, &ip6->dst);
	if (!b)
		return none;
	if (ip6->nexthdr == MIP6_NH_HOPOPTS) {
		mip6_count(MIP6_C_UNSUPPORTED);
		return none; /* goes the unoptimised way, through the HA */
	}
	if (mip6_is_mh(skb, ip6->nexthdr, MIP6_EXT_OFF))
		return none;
	if (!mip6_fits(skb, 0, mip6_wire_len(skb, ip6), MIP6_RH2_LEN, &mtu))
		return mip6_local_too_big(skb, ip6, &ip6->src, mtu - MIP6_RH2_LEN, MIP6_C_CN_TOO_BIG);
	__builtin_memcpy(&coa, b->coa, 16);
	if (mip6_insert_rh2(skb, ip6, &coa) < 0) {
		mip6_count(MIP6_C_ERRORS);
		return TCX_DROP;
	}
	mip6_binding_used(b);
	mip6_count(MIP6_C_CN_RH2_INSERTED);
	return TCX_PASS;
}

/* Correspondent part of ingress (s.9.3.1): a packet with a Home Address option is accepted when
 * a binding for the home address names the packet's source as care-of address; the home
 * address becomes the source and the option goes. A Binding Update carries the option before
 * any binding exists: Mobility Header packets are left to the signalling. `none` is the
 * verdict for a packet without the option. */
static __always_inline int mip6_accept_hao(struct __sk_buff *skb, struct mip6_ip6 *ip6, int none)
{
	struct mip6_binding *b;
	struct mip6_do d = {};
	__u8 proto = 0;
	__u32 l4 = 0;

	if (ip6->nexthdr != MIP6_NH_DSTOPTS)
		return none;
	if (mip6_scan_dstopts(skb, MIP6_EXT_OFF, &d) < 0) {
		mip6_count(MIP6_C_MALFORMED);
		return none;
	}
	if (!d.hao_off)
		return none;
	if (mip6_upper(skb, d.nexthdr, MIP6_EXT_OFF + d.len, &proto, &l4) == 0 &&
	    proto == MIP6_NH_MOBILITY) {
		/* A Binding Update (the one message allowed a HAO, s.6.1.7) is the signalling's. */
		mip6_count(MIP6_C_CN_HAO_SIGNALLING);
		return none;
	}
	b = bpf_map_lookup_elem(&bindings, &d.home);
	if (!b || !mip6_addr_eq((const struct mip6_addr *)b->coa, &ip6->src)) {
		/* s.9.3.1: discard (the Binding Error is the signalling's). */
		mip6_count(MIP6_C_CN_HAO_NO_BINDING);
		return TCX_DROP;
	}
	if (mip6_strip_hao(skb, ip6, &d) < 0) {
		mip6_count(MIP6_C_ERRORS);
		return TCX_DROP;
	}
	mip6_binding_used(b);
	mip6_count(MIP6_C_CN_HAO_SWAPPED);
	return TCX_PASS;
}

/* MN: where a packet it rewrote leaves. */
static __always_inline int mip6_mn_send(struct __sk_buff *skb, const struct mip6_config *cfg)
{
	struct bpf_redir_neigh nh = {.nh_family = MIP6_AF_INET6};

	if (!(cfg->flags & MIP6_CFG_MN_REDIRECT) || !cfg->egress_ifindex)
		return TCX_PASS;
	if (mip6_addr_zero((const struct mip6_addr *)cfg->nexthop))
		return bpf_redirect_neigh(cfg->egress_ifindex, 0, 0, 0);
	__builtin_memcpy(nh.ipv6_nh, cfg->nexthop, 16);
	return bpf_redirect_neigh(cfg->egress_ifindex, &nh, sizeof(nh), 0);
}

/* Mobile node, egress: while away (a binding for the source home address exists), packets
 * from the home address go through the reverse tunnel to the HA (s.11.3.1), or, to a
 * correspondent with route optimisation, straight from the care-of address with a Home
 * Address option. Mobility Header messages from the home address (HoTI) always take the
 * tunnel: the return routability test needs the home path (s.5.2.5).
 * A mobile node is also the correspondent of a mobile peer that route-optimised with it (the
 * double jump): packets to the peer's home address with a binding get the type 2 Routing
 * header, after the Home Address option when both apply (s.6.3: the option follows the
 * routing header). What goes through the reverse tunnel keeps the peer's home address: the
 * peer's home agent tunnels it on. */
SEC("tcx/egress")
int mip6_mn_egress(struct __sk_buff *skb)
{
	struct mip6_config *cfg = mip6_get_config();
	struct mip6_binding *b;
	struct mip6_ip6 ip6;
	struct mip6_addr coa;
	__u32 l4 = 0, wire_len, out_ifindex, mtu = 0;
	__u8 proto = 0;
	int rc = mip6_begin(skb, &ip6);

	if (rc != 1)
		return rc;
	if (!cfg)
		return TCX_NEXT;
	b = bpf_map_lookup_elem(&bindings, &ip6.src);
	if (!b)
		return mip6_peer_rh2(skb, &ip6, TCX_NEXT); /* at home, or not from a home address */
	__builtin_memcpy(&coa, b->coa, 16);
	wire_len = mip6_wire_len(skb, &ip6);
	out_ifindex = cfg->flags & MIP6_CFG_MN_REDIRECT ? cfg->egress_ifindex : 0;

	if (bpf_map_lookup_elem(&ro_peers, &ip6.dst) &&
	    mip6_upper(skb, ip6.nexthdr, MIP6_EXT_OFF, &proto, &l4) == 0 &&
	    proto != MIP6_NH_MOBILITY) {
		if (ip6.nexthdr == MIP6_NH_HOPOPTS) {
			/* Hop-by-Hop must stay first and the room helper inserts right after the
			 * fixed header: the tunnel takes such a packet. */
			mip6_count(MIP6_C_UNSUPPORTED);
		} else {
			struct mip6_binding *peer = bpf_map_lookup_elem(&bindings, &ip6.dst);
			__u32 room = MIP6_HAO_HDR_LEN + (peer ? MIP6_RH2_LEN : 0);
			struct mip6_addr peer_coa;

			if (!mip6_fits(skb, out_ifindex, wire_len, room, &mtu))
				return mip6_local_too_big(skb, &ip6, &coa, mtu - room, MIP6_C_MN_TOO_BIG);
			if (peer)
				__builtin_memcpy(&peer_coa, peer->coa, 16);
			if (mip6_insert_hao(skb, &ip6, &coa) < 0 ||
			    (peer && mip6_insert_rh2(skb, &ip6, &peer_coa) < 0)) {
				mip6_count(MIP6_C_ERRORS);
				return TCX_DROP;
			}
			mip6_binding_used(b);
			mip6_count(MIP6_C_MN_HAO_INSERTED);
			if (peer) {
				mip6_binding_used(peer);
				mip6_count(MIP6_C_CN_RH2_INSERTED);
			}
			return mip6_mn_send(skb, cfg);
		}
	}

	if (mip6_addr_zero((const struct mip6_addr *)cfg->home_agent)) {
		mip6_count(MIP6_C_MN_NO_HOME_AGENT);
		return TCX_NEXT;
	}
	if (!mip6_fits(skb, out_ifindex, wire_len, MIP6_IP6_HLEN, &mtu))
		return mip6_local_too_big(skb, &ip6, &coa, mtu - MIP6_IP6_HLEN, MIP6_C_MN_TOO_BIG);
	if (mip6_encap(skb, &ip6, &coa, (const struct mip6_addr *)cfg->home_agent) < 0) {
		mip6_count(MIP6_C_ERRORS);
		return TCX_DROP;
	}
	mip6_binding_used(b);
	mip6_count(MIP6_C_MN_TUNNELLED);
	return mip6_mn_send(skb, cfg);
}

/* Mobile node, ingress: packets tunnelled by the HA to the care-of address are decapsulated
 * (s.11.3.3); a type 2 Routing header carrying our home address turns into that destination.
 * As a mobile peer's correspondent, a Home Address option from the peer's bound care-of
 * address is then accepted as at a correspondent (the double jump). */
SEC("tcx/ingress")
int mip6_mn_ingress(struct __sk_buff *skb)
{
	struct mip6_config *cfg = mip6_get_config();
	struct mip6_binding *b;
	struct mip6_ip6 ip6;
	int none = TCX_NEXT; /* the verdict when nothing here changes the packet */
	int rc = mip6_begin(skb, &ip6);

	if (rc != 1)
		return rc;
	if (!cfg)
		return TCX_NEXT;

	if (ip6.nexthdr == MIP6_NH_IPV6) {
		struct mip6_ip6 inner;

		if (mip6_load_ip6(skb, MIP6_EXT_OFF, &inner) < 0 ||
		    MIP6_IP6_HLEN + bpf_ntohs(inner.payload_len) != bpf_ntohs(ip6.payload_len)) {
			mip6_count(MIP6_C_MALFORMED);
			return TCX_DROP;
		}
		b = bpf_map_lookup_elem(&bindings, &inner.dst);
		if (!b || !mip6_addr_eq((const struct mip6_addr *)b->coa, &ip6.dst) ||
		    !mip6_addr_eq((const struct mip6_addr *)cfg->home_agent, &ip6.src)) {
			mip6_count(MIP6_C_MN_TUNNEL_UNKNOWN);
			return TCX_NEXT;
		}
		if (mip6_decap(skb) < 0) {
			mip6_count(MIP6_C_ERRORS);
			return TCX_DROP;
		}
		mip6_binding_used(b);
		mip6_count(MIP6_C_MN_DETUNNELLED);
		ip6 = inner;
		none = TCX_PASS;
	}

	/* A Home Test comes through the tunnel (s.5.2.5), and so does a mobile peer's BU to the
	 * home address; a Care-of Test, BAck or Binding Refresh Request straight, a BAck with its
	 * type 2 RH in place. */
	rc = mip6_tap(skb, cfg, &ip6);
	if (rc != 1)
		return rc;

	if (ip6.nexthdr == MIP6_NH_ROUTING) {
		struct mip6_rh2 rh;

		if (bpf_skb_load_bytes(skb, MIP6_EXT_OFF, &rh, 4) < 0) {
			mip6_count(MIP6_C_MALFORMED);
			return TCX_NEXT;
		}
		if (rh.type != MIP6_RH_TYPE2)
			return TCX_NEXT;
		/* s.6.4: exactly one address, Segments Left 1; anything else is the stack's to
		 * reject. */
		if (rh.hdr_ext_len != MIP6_RH2_LEN / 8 - 1 || rh.segments_left != 1 ||
		    bpf_skb_load_bytes(skb, MIP6_EXT_OFF, &rh, sizeof(rh)) < 0) {
			mip6_count(MIP6_C_MALFORMED);
			return TCX_NEXT;
		}
		/* s.11.3.3: the address must be our home address, and the packet must have come to
		 * the care-of address registered for it. */
		b = bpf_map_lookup_elem(&bindings, &rh.home);
		if (!b || !mip6_addr_eq((const struct mip6_addr *)b->coa, &ip6.dst)) {
			mip6_count(MIP6_C_MN_RH2_UNKNOWN);
			return TCX_DROP;
		}
		if (mip6_strip_rh2(skb, &ip6, &rh) < 0) {
			mip6_count(MIP6_C_ERRORS);
			return TCX_DROP;
		}
		mip6_binding_used(b);
		mip6_count(MIP6_C_MN_RH2_STRIPPED);
		none = TCX_PASS;
	}
	/* One place for the correspondent part, whichever way the packet came (verifier). */
	return mip6_accept_hao(skb, &ip6, none);
}

/* Correspondent, egress: packets to a home address with a binding go to the care-of address
 * with a type 2 Routing header (s.9.3.2). */
SEC("tcx/egress")
int mip6_cn_egress(struct __sk_buff *skb)
{
	struct mip6_ip6 ip6;
	int rc = mip6_begin(skb, &ip6);

	if (rc != 1)
		return rc;
	return mip6_peer_rh2(skb, &ip6, TCX_NEXT);
}

/* Correspondent, ingress: signalling to the tap, then the Home Address option (s.9.3.1). */
SEC("tcx/ingress")
int mip6_cn_ingress(struct __sk_buff *skb)
{
	struct mip6_config *cfg = mip6_get_config();
	struct mip6_ip6 ip6;
	int rc = mip6_begin(skb, &ip6);

	if (rc != 1)
		return rc;
	if (cfg) {
		/* HoTI, CoTI, and the BU with its Home Address option in place. */
		rc = mip6_tap(skb, cfg, &ip6);
		if (rc != 1)
			return rc;
	}
	return mip6_accept_hao(skb, &ip6, TCX_NEXT);
}
