/* Every map of the ILNPv6 datapath, and the structures they hold.
 *
 * Byte order: locators (L64) and identifiers (NID) are kept exactly as they appear on the wire
 * (__be64), so they compare directly with packet bytes. The Go side converts.
 *
 * Maps are pinned by name in the bpffs directory the loader is given, so the daemon can restart
 * without losing sessions (the ILCC data-path part lives here, RFC 6741 s.5).
 */
#ifndef ILNP_MAPS_H
#define ILNP_MAPS_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

#define ILNP_MAX_REMOTE_LOCATORS 8
/* A session holds its first remote locators itself; the rest, which few sessions have (a
 * multihomed correspondent, a handoff's old locator beside them), live in remote_more. */
#define ILNP_SESSION_REMOTE_LOCATORS 2
#define ILNP_MORE_REMOTE_LOCATORS (ILNP_MAX_REMOTE_LOCATORS - ILNP_SESSION_REMOTE_LOCATORS)
#define ILNP_NONCE_MAX 12 /* RFC 6744 s.2: 4 or 12 bytes */

/* Locator states, RFC 6741 s.5 (ILCC) and thesis table 3.3. */
enum ilnp_locator_state {
	ILNP_LOC_NONE = 0,
	ILNP_LOC_ACTIVE = 1,  /* used for sending, accepted for receiving */
	ILNP_LOC_VALID = 2,   /* accepted for receiving (soft handoff keeps the old one here) */
	ILNP_LOC_AGED = 3,    /* no longer accepted (hard handoff ages the old one at once) */
	ILNP_LOC_EXPIRED = 4, /* gone */
};

/* ilnp_config.flags */
enum ilnp_config_flag {
	/* The thesis's Linux code: a responder echoes the initiator's nonce instead of using its
	 * own (RFC 6744 wants one nonce per direction). */
	ILNP_CFG_ECHO_NONCE = 1 << 0,
	/* Accept a packet with the right nonce from a remote locator not (yet) in the session's
	 * set instead of dropping it; an event is still emitted. */
	ILNP_CFG_ACCEPT_UNKNOWN_LOCATOR = 1 << 1,
	/* TCP/UDP checksums over the real addresses, as plain IPv6 computes them
	 * (draft-bhatti-ilnp-tcp-udp-checksums-00) instead of with the locators as zero. */
	ILNP_CFG_IPV6_CHECKSUM = 1 << 2,
};

struct ilnp_config {
	__be64 active_local;  /* host-wide active local locator; 0 = keep the session view */
	__u32 nonce_len;      /* 4 or 12 */
	__u32 nonce_first_n;  /* 0: nonce on every packet; N: first N packets + all ICMPv6 */
	__u32 flags;          /* enum ilnp_config_flag */
	/* Sessions that incoming packets may create per second, with a burst of one second's
	 * worth; 0 = no limit. Anyone can send a packet with a nonce option, so without a bound
	 * a flood of made-up NIDs would fill the session table (RFC 6744 s.7, RFC 6740 s.9). */
	__u32 new_sessions_per_s;
};

/* A token bucket in nanoseconds of budget (bucket.h): behind ilnp_config.new_sessions_per_s
 * (session_budget) and each security event kind's rate (event_budget). */
struct ilnp_token_bucket {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 budget_ns;
	__u64 last_ns;
};

struct ilnp_local_nid {
	/* Locator of this node's identity address (the /128 on lo that sockets bind to); sessions
	 * created by an incoming packet use it as the local session view. 0 = the packet's
	 * destination locator. */
	__be64 identity;
	__u32 flags;
	__u32 pad;
};

struct ilnp_local_locator {
	__u32 state;       /* enum ilnp_locator_state */
	__u32 ifindex;     /* interface the locator lives on; 0 = no redirect */
	__u8 nexthop[16];  /* router link-local for bpf_redirect_neigh; :: = FIB lookup */
};

struct ilnp_remote_locator {
	__be64 l64;
	__u32 state;       /* enum ilnp_locator_state */
	__u16 preference;
	__u16 lifetime;
};

struct ilnp_session_key {
	__be64 local_nid;
	__be64 remote_nid;
};

/* ilnp_session.flags */
enum ilnp_session_flag {
	ILNP_SESS_SOFT = 1 << 0,          /* soft handoff mode (informational for the daemon) */
	ILNP_SESS_IPV6_FALLBACK = 1 << 1, /* peer is not ILNP (Parameter Problem): send plain IPv6 */
	ILNP_SESS_STRICT = 1 << 2,        /* a packet without nonce from the session is dropped */
	ILNP_SESS_RESPONDER = 1 << 3,     /* created by the first incoming packet */
	ILNP_SESS_INITIATOR = 1 << 4,     /* created by the first outgoing packet to a peer */
	ILNP_SESS_WEAK_NONCE = 1 << 5,    /* nonce pool was empty: local nonce from prandom */
	ILNP_SESS_EMBRYONIC = 1 << 6,     /* responder this host has not answered yet (embryos) */
	ILNP_SESS_REMOTE_PINNED = 1 << 7, /* sends to remote_pins' locator, LUs to remote_active */
	ILNP_SESS_SHARED_NONCE = 1 << 8,  /* peer sends our nonce back (FreeBSD ILNP, dialect.h) */
	/* Set by the daemon while the session has an entry in multipath / in unverified: the
	 * packet path looks those maps up only for sessions flagged so. */
	ILNP_SESS_MULTIPATH = 1 << 9,
	ILNP_SESS_UNVERIFIED = 1 << 10,
	ILNP_SESS_UNPROVEN = 1 << 11,     /* promoted by an Echo Reply: counts in unproven_pool */
	/* Some locator pair of the session may run ILNPv6 in UDP/IPv6 (encap6_pairs): only such
	 * sessions look the map up (encap6.h). */
	ILNP_SESS_ENCAP6 = 1 << 12,
	/* Remote locators past the session's own in remote_more: only such sessions look it up. */
	ILNP_SESS_MORE_REMOTE = 1 << 13,
};

/* A session's own locator pair counters (paths.h): struct ilnp_path_stats for the pair
 * (local, remote), 0 = none counted yet. Times are CLOCK_MONOTONIC_COARSE in units of 2^20 ns
 * modulo 2^32 (about 1 ms, 52 days; 0 = never): the daemon reads them within that span. */
#define ILNP_PAIR_TIME_SHIFT 20

/* What a received packet reads and writes first, what only a sent one touches last (ilnp_session
 * says why). */
struct ilnp_pair {
	__be64 local;
	__be64 remote;
	__u64 rx_packets;
	__u64 rx_bytes;
	__u32 last_rx;
	__u32 unanswered;
	__u32 first_unanswered;
	__u32 last_tx;
	__u64 tx_packets;
	__u64 tx_bytes;
};

/* The data-path part of one ILCC entry (thesis table 3.2). The table is preallocated at
 * session-table-size entries, so every byte here is a megabyte at a million sessions: what
 * few sessions need lives in maps of its own (remote_more, multipath, unverified).
 *
 * Order: a busy correspondent's packet finds its entry cold, one cache miss per 64-byte line
 * it touches. The hash element is 48 bytes of header, the 16-byte key, then this 200-byte
 * value, so entries start on every 8-byte phase of a line, and the lookup itself reads the
 * hash and key just before the value. A received packet on the main pair reads and writes the
 * first 140 bytes only (nonce, locators, views, receive counters, then its pair's up to
 * last_rx .. first_unanswered): 3-4 lines with the key's instead of 4-5; what only sent
 * packets touch (the pair's tx part, locators to send from and to, tx counters) follows, and
 * created_ns, which no packet reads, ends it. */
struct ilnp_session {
	__u32 flags;           /* enum ilnp_session_flag */
	__u8 local_nonce_len;
	__u8 remote_nonce_len; /* 0 = not learned yet (initiator before the first reply) */
	__u16 pad;
	__u8 remote_nonce[ILNP_NONCE_MAX]; /* what we expect */
	__u8 local_nonce[ILNP_NONCE_MAX];  /* what we send */
	__be64 local_view;    /* locators the sockets see (session view) */
	__be64 remote_view;
	struct ilnp_remote_locator remote[ILNP_SESSION_REMOTE_LOCATORS]; /* then remote_more */
	__u64 rx_packets;
	__u64 last_rx_ns;      /* CLOCK_MONOTONIC_COARSE: enough for idle timers */
	/* The counters of one locator pair of the session, normally its main one (paths.h):
	 * a packet on it touches no other map element; other pairs' counters live in paths. */
	struct ilnp_pair pair;
	__be64 local_locator; /* 0 = ilnp_config.active_local */
	__be64 remote_active; /* 0 = remote_view */
	__u64 tx_packets;
	__u64 last_tx_ns;
	__u64 created_ns;      /* CLOCK_MONOTONIC */
};

/* A session's remote locators ILNP_SESSION_REMOTE_LOCATORS and on (ILNP_SESS_MORE_REMOTE). */
struct ilnp_remote_more {
	struct ilnp_remote_locator remote[ILNP_MORE_REMOTE_LOCATORS];
};

/* ILNP peers known from name resolution, keyed by the address the application uses. */
struct ilnp_peer_key {
	__be64 l64;
	__be64 nid;
};

struct ilnp_peer {
	__be64 remote_active; /* 0 = the address's own locator */
	struct ilnp_remote_locator remote[ILNP_MAX_REMOTE_LOCATORS];
	__u32 flags;          /* copied into new sessions (enum ilnp_session_flag) */
	__u32 pad;
};

enum ilnp_event_type {
	ILNP_EV_SESSION_RESPONDER = 1, /* first nonce-carrying packet from an unknown session */
	ILNP_EV_SESSION_INITIATOR = 2, /* first packet to a registered peer */
	ILNP_EV_BAD_NONCE = 3,
	ILNP_EV_MISSING_NONCE = 4,
	ILNP_EV_MULTIPLE_NONCES = 5,
	ILNP_EV_UNKNOWN_LOCATOR = 6,       /* remote locator not in the session's valid set */
	ILNP_EV_INVALID_LOCAL_LOCATOR = 7, /* arrived on a local locator that is not valid */
	ILNP_EV_PARAM_PROBLEM = 8,         /* ICMPv6 Parameter Problem code 2: peer is not ILNP */
	ILNP_EV_NONCE_LEARNED = 9,         /* initiator learned the responder's nonce */
	ILNP_EV_NONCE_POOL_EMPTY = 10,
	ILNP_EV_PMTU_BELOW_MIN = 11, /* a path leaves the session view less than 1280 (icmperr.h) */
	ILNP_EV_MAX,
};

struct ilnp_event {
	__u64 ts_ns;
	__u32 type;    /* enum ilnp_event_type */
	__u32 ifindex;
	__be64 local_nid;
	__be64 remote_nid;
	__u8 src[16];  /* wire addresses of the packet */
	__u8 dst[16];
	__u32 mtu;     /* ILNP_EV_PMTU_BELOW_MIN: the MTU the session view needs; else 0 */
	__u32 pad;
};

enum ilnp_counter {
	ILNP_C_EG_PACKETS,
	ILNP_C_EG_NON_IPV6,
	ILNP_C_EG_PASS_IPV6,
	ILNP_C_EG_PASS_HAS_NONCE,
	ILNP_C_EG_FALLBACK_IPV6,
	ILNP_C_EG_ILNP,
	ILNP_C_EG_NONCE_INSERTED,
	ILNP_C_EG_REDIRECTED,
	ILNP_C_EG_MALFORMED,
	ILNP_C_EG_UNSUPPORTED,
	ILNP_C_EG_ERRORS,
	ILNP_C_IN_PACKETS,
	ILNP_C_IN_NON_IPV6,
	ILNP_C_IN_PASS_IPV6,
	ILNP_C_IN_NOT_LOCAL_NID,
	ILNP_C_IN_ILNP,
	ILNP_C_IN_NONCE_STRIPPED,
	ILNP_C_IN_NO_NONCE_ACCEPTED,
	ILNP_C_IN_LOCATOR_UPDATES,
	ILNP_C_IN_BAD_NONCE,
	ILNP_C_IN_MISSING_NONCE,
	ILNP_C_IN_MULTIPLE_NONCES,
	ILNP_C_IN_UNKNOWN_LOCATOR,
	ILNP_C_IN_INVALID_LOCAL_LOCATOR,
	ILNP_C_IN_MALFORMED,
	ILNP_C_IN_FRAGMENTS,
	ILNP_C_IN_PARAM_PROBLEMS,
	ILNP_C_IN_ERRORS,
	ILNP_C_SESSIONS_CREATED,
	ILNP_C_NONCE_POOL_EMPTY,
	ILNP_C_EVENTS_LOST,
	ILNP_C_IN_SESSIONS_LIMITED, /* new session refused: over new_sessions_per_s */
	ILNP_C_IN_LEARN_REFUSED,    /* LU while the session waits for the responder's nonce */
	ILNP_C_EMBRYOS_CREATED,     /* responder sessions created by an incoming packet */
	ILNP_C_EMBRYOS_PROMOTED,    /* ... that this host answered: now in the session table */
	ILNP_C_SESSIONS_FULL,       /* promotion or initiator session refused: table full */
	ILNP_C_EG_UNVERIFIED_REROUTED, /* over an unverified locator's credit: sent to a verified one */
	ILNP_C_EG_UNVERIFIED_CREDIT,   /* over the credit and no verified locator: dropped */
	ILNP_C_IN_PTB_TRANSLATED,      /* Packet Too Big about our packet, to the session view */
	ILNP_C_IN_ICMP_ERROR_BAD_NONCE, /* ICMPv6 error quoting a session packet, not our nonce */
	ILNP_C_IN_SHARED_NONCE,        /* responder session switched to our nonce (dialect.h) */
	ILNP_C_IN_LU_NO_SESSION,       /* LU or LU-ACK that matches no session: never opens one */
	ILNP_C_EVENTS_LIMITED,         /* security events over their kind's rate: counted only */
	ILNP_C_EMBRYOS_REPLACED,       /* embryo replaced by a first packet with another nonce */
	ILNP_C_EMBRYOS_TO_INITIATOR,   /* embryo of a known peer dropped for an initiator session */
	ILNP_C_UNPROVEN_POOL_FULL,     /* Echo Reply left an embryo unpromoted: unproven_pool full */
	ILNP_C_IN_PTB_BELOW_MIN,       /* translated Packet Too Big: the view needs < 1280 (route) */
	ILNP_C_IN_FRAG_NEEDED_TRANSLATED, /* ICMPv4 Fragmentation Needed: a Packet Too Big to the view */
	ILNP_C_EG_ENCAP6,              /* sent as ILNPv6 in UDP/IPv6 (encap6.h) */
	ILNP_C_EG_ENCAP6_TOO_BIG,      /* ... would exceed the interface MTU: dropped */
	ILNP_C_EG_ENCAP6_ERRORS,
	ILNP_C_IN_ENCAP6,              /* UDP/IPv6 to the encap6 port, unwrapped */
	ILNP_C_IN_ENCAP6_BAD_OUTER,    /* lengths, or outer addresses not the inner ones */
	ILNP_C_IN_ENCAP6_LEARNED,      /* pair became encapsulated: an accepted encap6 packet */
	ILNP_C_IN_ENCAP6_NATIVE,       /* pair back to native: an accepted native packet */
	ILNP_C_REMOTE_MORE_FULL,       /* initiator session kept only its first remote locators */
	ILNP_C_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ilnp_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} config_map SEC(".maps");

/* The stable NID and, with nid-mode ephemeral, one NID per correspondent this host opened a
 * session to (internal/ephemeral, DefaultMaxLive 4000). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __be64);
	__type(value, struct ilnp_local_nid);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} local_nids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __be64);
	__type(value, struct ilnp_local_locator);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} local_locators SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ilnp_session_key);
	__type(value, struct ilnp_session);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sessions SEC(".maps");

/* Token bucket per event kind (observe.h ilnp_emit): security events are what a flood makes,
 * and past their rate they would fill the ring and push out the session events the daemon
 * must see. */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ILNP_EV_MAX);
	__type(key, __u32);
	__type(value, struct ilnp_token_bucket);
} event_budget SEC(".maps");

/* Responder sessions that only the remote side has spoken in ("embryos"): anyone can create
 * them with one spoofed packet, so they live apart from the session table, in an LRU map where
 * a flood only evicts other embryos, with no daemon state and no route. The
 * first packet this host sends on one promotes it into sessions (ilnp_promote_embryo). The
 * loader sizes it like sessions (session-table-size): at new_sessions_per_s an embryo survives
 * at least max_entries / rate seconds of flood. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ilnp_session_key);
	__type(value, struct ilnp_session);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} embryos SEC(".maps");

/* The loader sizes it at a sixteenth of the session table (at least 4096). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ilnp_session_key);
	__type(value, struct ilnp_remote_more);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} remote_more SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ilnp_peer_key);
	__type(value, struct ilnp_peer);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} peers SEC(".maps");

/* Locator verification (verify.h): a remote locator a session learned from a Locator Update
 * and that has not yet echoed the daemon's challenge. Present = unverified; the daemon adds
 * the entry when it applies the LU and deletes it when the echo returns. */
struct ilnp_unverified_key {
	__be64 local_nid;
	__be64 remote_nid;
	__be64 l64;
};

struct ilnp_unverified {
	__u64 rx_bytes; /* received from the locator (nonce-verified), seeded with the LU */
	__u64 tx_bytes; /* sent to it; at most 3 x rx_bytes (RFC 9000 s.8.1's factor) */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct ilnp_unverified_key);
	__type(value, struct ilnp_unverified);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} unverified SEC(".maps");

/* Random nonces from Go's crypto/rand (RFC 6744 s.7: nonces must be hard to guess); sessions
 * created in the data path take one each. */
struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, 1024);
	__uint(value_size, ILNP_NONCE_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nonce_pool SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ILNP_C_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ilnp_token_bucket);
} session_budget SEC(".maps");

/* Sessions an ICMPv6 Echo Reply promoted (ILNP_SESS_UNPROVEN). The kernel answers a ping on
 * its own, so a spoofed one proves nothing about its source (RFC 6744 s.7); only up to max of
 * them enter the session table (the loader sets a quarter of it) and the rest stay embryos. A
 * session leaves the pool when this host sends on it anything but a mechanical answer or an
 * Echo Reply. The daemon writes count from its sweep of the table (a few promotions between
 * two sweeps may be missed); not pinned: the daemon recounts after a restart. */
struct ilnp_unproven_pool {
	__u64 count;
	__u64 max;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ilnp_unproven_pool);
} unproven_pool SEC(".maps");

/* A correspondent's soft switch seen from this side (internal/tcpaware RemotePins): the
 * session's packets stay on the old remote locator while its Locator Updates and their ACKs
 * follow remote_active, until the new path's RTT is known. Looked up only for sessions flagged
 * ILNP_SESS_REMOTE_PINNED. Not pinned to bpffs: a remote pin lasts at most a second and a
 * restarted ilnpd releases every one, so the next program's empty map is the right state. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096); /* full: the daemon drains at once, as without a pin */
	__type(key, struct ilnp_session_key);
	__type(value, __be64);
} remote_pins SEC(".maps");

/* A session under construction is too big for the 512-byte BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ilnp_session);
} scratch SEC(".maps");

/* ICMPv6 errors about our own packets (icmperr.h) are rare and their quoted header, address
 * copies and checksum arrays would not fit on the ingress program's stack beside the rest. */
struct ilnp_icmperr_scratch {
	__u8 quote[64]; /* struct ilnp_quote */
	__be64 from[4];
	__be64 to[4];
	__u8 v4[56];   /* ICMPv4 error: outer IPv4 + ICMP, quoted IPv4 + UDP */
	__u8 out[112]; /* ... translated: IPv6 + ICMPv6 + quote (IPv6, nonce header <= 16, 8) */
	__u8 chunk[64]; /* ... its ICMPv4 checksum, 64 bytes at a time */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ilnp_icmperr_scratch);
} icmperr_scratch SEC(".maps");

/* ---- encap (issue 14): ILNPv6 in UDP/IPv4 across IPv4-only networks and NAT, bpf/lib/encap.h ---- */

/* ilnp_encap_config.flags */
enum ilnp_encap_flag {
	/* A nonce-verified encapsulated packet from an IPv4 endpoint the session does not list is
	 * accepted (NAT rebinding, WireGuard-style roaming) and reported as an unknown locator so
	 * the daemon makes it the session's; the nonce authenticates it as it does an LU. */
	ILNP_ENCAP_ROAM = 1 << 0,
};

struct ilnp_encap_config {
	__be16 port;      /* UDP port encapsulated packets go to and are accepted on; 0 = off */
	__be16 port6;     /* the same for ILNPv6 in UDP/IPv6 (encap6.h); 0 = off */
	__u32 flags;      /* enum ilnp_encap_flag */
	__be64 local_l32; /* default IPv4 locator for sessions whose local locator is an L64 */
};

enum ilnp_encap_counter {
	ILNP_EC_EG_PACKETS,          /* encapsulated and sent */
	ILNP_EC_EG_DISABLED,         /* remote locator is IPv4 but no port configured */
	ILNP_EC_EG_NO_LOCAL_L32,     /* remote locator is IPv4 but we have no IPv4 locator */
	ILNP_EC_EG_TOO_BIG,          /* would exceed the interface MTU: dropped, never fragmented */
	ILNP_EC_EG_ERRORS,
	ILNP_EC_IN_PACKETS,          /* UDP/IPv4 to the port */
	ILNP_EC_IN_DECAPSULATED,
	ILNP_EC_IN_FRAGMENTS,        /* outer IPv4 fragment */
	ILNP_EC_IN_BAD_OUTER,        /* IPv4 options, zero address or port */
	ILNP_EC_IN_BAD_CHECKSUM,     /* outer IPv4 header checksum */
	ILNP_EC_IN_TRUNCATED,        /* lengths of IPv4, UDP and packet disagree */
	ILNP_EC_IN_NOT_IPV6,         /* inner packet is not IPv6 */
	ILNP_EC_IN_NO_NONCE,         /* inner packet without nonce */
	ILNP_EC_IN_BAD_INNER,        /* inner packet malformed or with several nonces */
	ILNP_EC_IN_NOT_ACCEPTED,     /* inner packet not accepted by the ILNP checks */
	ILNP_EC_IN_LOCATORS_AS_SEEN, /* inner locators replaced by the outer endpoints (NAT) */
	ILNP_EC_IN_ERRORS,
	ILNP_EC_IN_ROAMED,           /* accepted from an IPv4 endpoint not (yet) in the set */
	ILNP_EC_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ilnp_encap_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} encap_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ILNP_EC_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} encap_counters SEC(".maps");

/* ---- end encap ---- */

/* Per locator pair of a session: what the liveness monitor (internal/paths) reads. A pair is
 * the session's key plus the wire locators a packet carried (local, remote). The session's
 * main pair counts in its entry (ilnp_session.pair); this map holds the others (multihomed,
 * multipath and just-moved sessions), sized by path-table-size. */
struct ilnp_path_key {
	__be64 local_nid;
	__be64 remote_nid;
	__be64 local_l64;
	__be64 remote_l64;
};

struct ilnp_path_stats {
	__u64 tx_packets;
	__u64 tx_bytes;
	__u64 rx_packets;
	__u64 rx_bytes;
	__u64 last_tx_ns;         /* CLOCK_MONOTONIC_COARSE */
	__u64 last_rx_ns;
	__u64 first_unanswered_ns; /* first data packet sent on the pair since the last one received */
	__u64 unanswered;          /* data packets (not probes) sent since the last one received */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct ilnp_path_key);
	__type(value, struct ilnp_path_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} paths SEC(".maps");

/* Liveness probes: a packet whose mark is ILNP_PROBE_MARK | slot leaves on the locator pair of
 * probe_pairs[slot] when that entry names the packet's session. */
#define ILNP_PROBE_MARK 0x494c0000 /* "IL" */
#define ILNP_PROBE_MARK_MASK 0xffff0000
/* Locator challenges to IPv4 locators: a packet whose mark is ILNP_CHALLENGE_MARK | i leaves
 * to the session's remote locator i, whatever its credit (verify.h). */
#define ILNP_CHALLENGE_MARK 0x494d0000 /* "IM" */
#define ILNP_PROBE_SLOTS 256

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ILNP_PROBE_SLOTS);
	__type(key, __u32);
	__type(value, struct ilnp_path_key);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} probe_pairs SEC(".maps");

/* ILNPv6 in UDP/IPv6 on a locator pair whose path drops Destination Options (encap6.h).
 * An entry is written by the daemon (origin local: it found the pair's native packets
 * unanswered while the path carries plain IPv6) or by the ingress when a nonce-verified
 * encapsulated packet arrived on the pair (origin peer); an accepted native packet other
 * than an echo request turns the pair back to native. LRU: a session's packets write it, and
 * the session budget bounds how fast new sessions (and so entries) appear. */
enum ilnp_encap6_state {
	ILNP_ENCAP6_NATIVE = 0,
	ILNP_ENCAP6_ON = 1,
};

enum ilnp_encap6_origin {
	ILNP_ENCAP6_BY_LOCAL = 1, /* the daemon's detection */
	ILNP_ENCAP6_BY_PEER = 2,  /* learned from the peer's authenticated packets */
};

struct ilnp_encap6_pair {
	__u32 state;  /* enum ilnp_encap6_state */
	__u32 origin; /* enum ilnp_encap6_origin */
	__u64 tx_packets; /* sent encapsulated */
	__u64 rx_packets; /* accepted encapsulated */
	__u64 changed_ns; /* CLOCK_MONOTONIC_COARSE of the last state change by a packet */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct ilnp_path_key);
	__type(value, struct ilnp_encap6_pair);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} encap6_pairs SEC(".maps");

/* Multipath policy: a session's TCP and UDP flows spread over these locator pairs by weight,
 * each flow (its 5-tuple's hash) always on the same pair so that it never reorders. */
#define ILNP_MULTIPATH_MAX 4

struct ilnp_mp_pair {
	__be64 local_l64;
	__be64 remote_l64;
	__u32 weight;
	__u32 pad;
};

struct ilnp_multipath {
	__u32 count;  /* pairs in use */
	__u32 total;  /* sum of their weights */
	struct ilnp_mp_pair pair[ILNP_MULTIPATH_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ilnp_session_key);
	__type(value, struct ilnp_multipath);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} multipath SEC(".maps");

#endif

/* ==== tcpaware (bpf/tcpaware.c, internal/tcpaware): the mobility signal to TCP sockets ====
 * Only objects that define ILNP_TCPAWARE get these; the datapath (ilnp.c) does not. */
#ifdef ILNP_TCPAWARE
#ifndef ILNP_TCPAWARE_MAPS
#define ILNP_TCPAWARE_MAPS

/* A correspondent's address as its sockets see it: the session view [L64:NID]. */
struct tcpaware_addr {
	__u8 a[16];
};

/* What the daemon wants done to every TCP socket of one correspondent on the next iterator
 * run. Zero fields leave the socket alone. */
struct tcpaware_peer {
	__u32 epoch;      /* moves signalled so far (reported back per socket) */
	__u32 moving;     /* 1 between the move's start and its end */
	__u32 rto_max_ms; /* TCP_RTO_MAX_MS to set (>= 1000, kernel limit) */
	__u32 loss_window_ms; /* >0: losses in this window after the run are not congestion */
	__u32 rtt_us;         /* the new path's RTT (LU exchange), 0: unknown; with drain: drain
			       * only when it is below the socket's srtt by 1/8 */
	/* >0: a soft switch of the path is about to happen (make-before-break): new data waits
	 * until what is in flight on the old path can no longer be overtaken. A number per
	 * switch, so that a later run does not start it again. */
	__u32 drain;
	__u32 drain_wait; /* 1: the correspondent has not switched yet (its ACKs still take the
			   * old path): no estimate before an RTT sample shows the new path */
};

/* The cubic wrapper's registered name (unique per daemon: struct_ops names are kernel-wide);
 * an empty name means no wrapper. */
struct tcpaware_cc {
	char name[16];
};

/* Per socket, set by the iterator, read by the cubic wrapper. */
struct tcpaware_sk {
	__u64 loss_until_ns; /* losses before this are the move's, not congestion */
	__u32 epoch;
	__u32 restored; /* cwnd already restored in this window */
	__u32 used;     /* the window's one loss episode has begun (ssthresh kept) */
	__u32 hold;     /* cwnd held in that episode's fast recovery; 0: none */
	__u32 held;     /* 1 while the hold is in force */
	__u32 paced;    /* 1: the hold turned on the kernel's internal pacing */
	__u32 inflight; /* packets_out when the window opened (what the old path carried) */
	__u32 srtt_us;  /* srtt then (the old path's), us */
	__u32 rtt_us;   /* the new path's RTT from the LU exchange, 0: unknown */
	__u32 prr_delivered; /* PRR's count (the kernel skips its own with cong_control) */
	/* The drain of a soft switch (bpf/tcpaware.c ta_drain). */
	__u64 drain_start_ns;
	__u64 drain_until_ns;    /* 0: not draining */
	__u64 drain_deadline_ns; /* it ends here whatever the estimate */
	__u32 drain_seq;         /* the peer's drain number last applied */
	__u32 drain_nxt;         /* snd_nxt at the start: the old path's last byte + 1 */
	__u32 drain_srtt_us;     /* srtt at the start (the old path's) */
	__u32 drain_min_rtt_us;  /* smallest RTT sample since the start (the new path's?) */
	__u32 drain_cwnd;        /* cwnd at the start, given back at the end */
	__u32 drain_wait;
	__u32 drain_slower;      /* 1: the correspondent's ACKs came slower after its switch */
	__u32 drain_paced;       /* 1: the end turned on pacing until pace_una or pace_until_ns */
	__u32 pace_una;
	__u64 pace_until_ns;
};

/* One matched socket, written by the iterator to its seq_file (read by the daemon). */
struct tcpaware_sock {
	struct tcpaware_addr saddr;
	struct tcpaware_addr daddr;
	__u16 sport; /* host order */
	__u16 dport; /* host order */
	__u32 epoch;
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 srtt_us; /* <<3, as the kernel keeps it */
	__u32 rto_jiffies;
	__u32 cwnd;
	__u32 ssthresh;
	__u32 packets_out;
	__u32 lost_out;
	__u32 retrans_out;
	__u8 backoff;
	__u8 tcp_state;
	__u8 applied; /* bits: 1 rto_max set, 4 wrapper chosen, 8 window open */
	__u8 failed;  /* same bits: bpf_setsockopt refused */
};

enum tcpaware_counter {
	TCPAWARE_C_SOCKETS_SEEN,
	TCPAWARE_C_SOCKETS_MATCHED,
	TCPAWARE_C_RTO_MAX_SET,
	TCPAWARE_C_SETSOCKOPT_ERRORS,
	TCPAWARE_C_NOT_TCP_SOCK,
	TCPAWARE_C_CC_SWITCHED,   /* sockets moved from cubic to the wrapper */
	TCPAWARE_C_NOT_CUBIC,     /* sockets left alone: another congestion control */
	TCPAWARE_C_SSTHRESH_KEPT, /* losses in a window: ssthresh not reduced */
	TCPAWARE_C_CWND_RESTORED, /* after a timeout in a window: cwnd back to its prior value */
	TCPAWARE_C_WRAPPER_INIT,
	TCPAWARE_C_HOLDS,         /* fast recoveries in a window whose cwnd was held */
	TCPAWARE_C_HOLD_ABORTED,  /* holds ended early: a loss on the new path */
	TCPAWARE_C_DRAINS,        /* soft switches that held new data back */
	TCPAWARE_C_DRAIN_NOT_FASTER, /* drains ended early: a slower path (the rest: all acked) */
	TCPAWARE_C_DRAIN_EXPIRED, /* drains ended by their deadline (1.5 old srtt) */
	TCPAWARE_C_DRAIN_SKIPPED, /* soft switches not drained: the new path is known not faster */
	TCPAWARE_C_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct tcpaware_addr);
	__type(value, struct tcpaware_peer);
} tcpaware_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TCPAWARE_C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} tcpaware_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tcpaware_cc);
} tcpaware_ccname SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tcpaware_sk);
} tcpaware_sks SEC(".maps");

#endif
#endif
/* ==== end tcpaware ==== */
