/* Every map of the Mobile IPv6 (RFC 6275) baseline datapath, and the structures they hold.
 *
 * Addresses are kept as the 16 bytes on the wire. One object serves every role (home agent,
 * mobile node, correspondent); each node loads its own copy and fills the maps for its role.
 */
#ifndef MIP6_MAPS_H
#define MIP6_MAPS_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

struct mip6_addr {
	__u8 b[16];
};

/* config_map.flags */
enum mip6_config_flag {
	/* MN: send redirected packets out of egress_ifindex via nexthop (bpf_redirect_neigh)
	 * instead of the interface the route chose. */
	MIP6_CFG_MN_REDIRECT = 1 << 0,
	/* Mobility Header packets for this node go to the signalling ring and are dropped: this
	 * kernel has no MIPv6, so it would discard a BU's Home Address option or a BAck's type 2
	 * RH with an ICMP error, and answers any MH without a raw socket open with one. */
	MIP6_CFG_SIGNALLING_TAP = 1 << 1,
};

struct mip6_config {
	/* HA: its own address, the outer source of the tunnel (RFC 6275 s.10.4.1).
	 * MN: the home agent's address, the outer destination of the reverse tunnel (s.11.3.1). */
	__u8 home_agent[16];
	/* MN: next hop on egress_ifindex (a router's link-local); :: = FIB lookup by the helper. */
	__u8 nexthop[16];
	__u32 egress_ifindex;
	__u32 flags; /* enum mip6_config_flag */
};

/* A binding: home address -> care-of address. The HA's binding cache (s.10.1), the CN's binding
 * cache for route optimisation (s.9.1), and on the MN its own binding while away from home
 * (s.11.1: its Binding Update List entry for the HA). */
struct mip6_binding {
	__u8 coa[16];
	__u64 packets; /* packets tunnelled or route-optimised with this binding */
};

enum mip6_counter {
	MIP6_C_PACKETS,
	MIP6_C_NON_IPV6,
	MIP6_C_MALFORMED,
	/* home agent */
	MIP6_C_HA_ENCAPSULATED,
	MIP6_C_HA_DECAPSULATED,
	MIP6_C_HA_REVERSE_UNKNOWN,  /* tunnelled to the HA, inner/outer source not a binding */
	MIP6_C_HA_HOP_LIMIT,        /* hop limit exhausted: left to the stack (Time Exceeded) */
	MIP6_C_HA_TOO_BIG,          /* too big for the tunnel: Packet Too Big to the source */
	MIP6_C_HA_NO_ROUTE,         /* FIB lookup failed: left to the stack */
	/* mobile node */
	MIP6_C_MN_TUNNELLED,
	MIP6_C_MN_DETUNNELLED,
	MIP6_C_MN_HAO_INSERTED,
	MIP6_C_MN_RH2_STRIPPED,
	MIP6_C_MN_RH2_UNKNOWN,      /* type 2 RH for an address that is not a home address here */
	MIP6_C_MN_TUNNEL_UNKNOWN,   /* IPv6-in-IPv6 not from the HA or not for the home address */
	MIP6_C_MN_NO_HOME_AGENT,    /* away, but no home agent configured: sent untouched */
	/* correspondent */
	MIP6_C_CN_RH2_INSERTED,
	MIP6_C_CN_HAO_SWAPPED,
	MIP6_C_CN_HAO_NO_BINDING,   /* s.9.3.1: no binding for the home address: dropped */
	MIP6_C_CN_HAO_SIGNALLING,   /* Mobility Header with a HAO (Binding Update): left alone */
	MIP6_C_UNSUPPORTED,         /* Hop-by-Hop header first: sent the unoptimised way */
	MIP6_C_ERRORS,              /* a helper failed: dropped */
	MIP6_C_SIGNALLING,          /* Mobility Header packets handed to the signalling ring */
	MIP6_C_SIGNALLING_LOST,     /* ring full, or longer than MIP6_SIGNAL_MAX: dropped */
	MIP6_C_MN_TOO_BIG,          /* tunnel or HAO would exceed the device MTU: PTB to the socket */
	MIP6_C_CN_TOO_BIG,          /* the type 2 RH would exceed the device MTU: PTB to the socket */
	MIP6_C_PTB_FAILED,          /* too big, but no Packet Too Big possible: dropped */
	MIP6_C_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mip6_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} config_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct mip6_addr);
	__type(value, struct mip6_binding);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} bindings SEC(".maps");

/* MN: correspondents with a completed route optimisation (s.11.3.1: packets to them carry the
 * Home Address option instead of going through the reverse tunnel). Value unused (1). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct mip6_addr);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ro_peers SEC(".maps");

#define MIP6_PTB_QUOTE_MAX (1280 - 40 - 8) /* RFC 4443 s.3.2: within the minimum MTU */

/* A Packet Too Big's quote, for the checksum (too big for the 512-byte stack). */
struct mip6_ptb_quote {
	__u8 b[MIP6_PTB_QUOTE_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mip6_ptb_quote);
} ptb_quote SEC(".maps");

#define MIP6_SIGNAL_MAX 1280 /* the IPv6 minimum MTU: more than any MH message we build */

/* One Mobility Header packet for the signalling, as it arrived (after the tunnel was removed;
 * the Home Address option and type 2 RH still in place). */
struct mip6_signal {
	__u64 ts_ns;
	__u32 ifindex;
	__u32 len; /* bytes of IPv6 packet in data */
	__u8 data[MIP6_SIGNAL_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} signalling SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MIP6_C_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} counters SEC(".maps");

static __always_inline void mip6_count(__u32 counter)
{
	__u64 *value = bpf_map_lookup_elem(&counters, &counter);

	if (value)
		*value += 1; /* per-CPU slot: no atomics needed */
}

static __always_inline struct mip6_config *mip6_get_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&config_map, &zero);
}

#endif
