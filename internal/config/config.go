// Package config reads the ilnpd configuration file.
//
// The format is line-oriented: one `key value...` per line, `#` starts a comment (at the start
// of a line or after white space), blank lines are ignored. Every key may appear at most once.
// Errors name the file and line: "ilnpd.conf:7: nonce-size: want 4 or 12, got 8".
//
// Keys and defaults (see dist/ilnpd.conf.example):
//
//	node NAME                    name used in events and logs        default: "" (daemon uses the hostname)
//	interfaces IF...             ILNP interfaces                     required, at least one
//	nid XXXX:XXXX:XXXX:XXXX      node identifier (RFC 6742 form)     default: modified EUI-64 of the first interface's MAC
//	nid-mode stable|ephemeral                                        default: stable
//	handoff soft|hard                                                default: soft
//	policy NAME                  handoff decision policy             default: newest
//	state-dir DIR                absolute path; bpffs at DIR/bpf,    default: /run/ilnpd
//	                             control socket at DIR/ctl.sock
//	events FILE                  event timeline (JSON lines)         default: none
//	hosts FILE                   ILNP hosts file                     default: none
//	dns-listen ADDR[:PORT]       stub resolver                       default: off (port 53 when omitted)
//	dns-upstream ADDR[:PORT]     forwarder for non-ILNP names        default: none (port 53 when omitted)
//	dns-lookup-server ADDR[:PORT] where the stub asks for NID/L64    default: dns-upstream (needs dns-listen)
//	dns-publish-name NAME        publish this node's NID/L64 records default: off
//	                             (RFC 2136 update on every locator change)
//	dns-publish-zone ZONE        the zone to update                  required with dns-publish-name
//	dns-publish-server ADDR[:PORT] primary server for the zone       required with dns-publish-name
//	dns-publish-key FILE [NAME]  TSIG key file (BIND syntax) and the default: unsigned updates
//	                             key to use when it holds several
//	dns-publish-ttl DURATION     TTL of the published records, whole default: 0s (RFC 6741 s.6,
//	                             seconds, 0s..24h                    thesis s.2.6.3: very low)
//	lu-initial-timeout DURATION  first LU retransmission timeout     default: 1s
//	lu-max-timeout DURATION      backoff ceiling                     default: 8s
//	lu-max-attempts N            1..100                              default: 7
//	session-idle-timeout DURATION                                    default: 10m
//	new-sessions-per-second N    sessions incoming packets may open  default: 1000 (0: no bound)
//	session-table-size N         sessions, and embryonic responder   default: 65536
//	                             sessions (LRU), 256..1048576; needs a restart
//	embryo-table-size N          embryonic responder sessions alone  default: session-table-size
//	                             (LRU), 256..1048576; needs a restart
//	path-table-size N            locator pairs other than a session's default: session-table-size/16
//	                             main one (LRU), 256..1048576;       (at least 16384)
//	                             needs a restart
//	event-ring-size SIZE         the datapath's event ring to the    default: 256K
//	                             daemon (80 bytes an event), a power of two, 64K..1G, bytes
//	                             or with K, M, G; needs a restart (and a flush)
//	memory-limit SIZE|off        soft limit of the daemon's memory   default: off
//	                             (Go runtime, debug.SetMemoryLimit), bytes or with K, M, G
//	                             (powers of 1024), 16M..1024G; needs a restart
//	gc-percent N|off             Go GC target (GOGC), 10..1000       default: off (GOGC or 100)
//	                             needs a restart
//	session-unproven-timeout DURATION  idle timeout of responder     default: 10s (0s: off)
//	                             sessions that received one packet
//	nonce-size 4|12              bytes                               default: 4
//	nonce every|first N          RFC 6744 s.6: nonce on every packet,
//	                             or only on the first N of a session default: every
//	echo-nonce off|on            a responder answers with the        default: off
//	                             initiator's nonce (one nonce per session, as the St Andrews
//	                             code does as responder; FreeBSD ILNP's is detected without it)
//	locator-verification off|opportunistic|strict  credit for locators default: opportunistic
//	                             an LU announced until they echo a
//	                             challenge (internal/locverify)
//	tcp-aware off|on             mobility signal to the TCP sockets  default: off (thesis behaviour)
//	                             of a moving correspondent (issue 15)
//	ipv4-locators off|on         IPv4 addresses of the ILNP          default: off
//	                             interfaces become locators (L32), ILNPv6 in UDP/IPv4 (issue 14)
//	encap-port PORT              UDP port of ILNPv6 in UDP/IPv4,     default: 49191
//	                             1024..65535
//	nat-keepalive DURATION       keepalive of sessions over IPv4,    default: 25s
//	                             0s (off) or 1s..1h
//	mtu-headroom BYTES           MTU reduction for ILNP peers        default: size of the nonce
//	                                                                 option (8 for a 4-byte nonce,
//	                                                                 16 for 12); smaller is an error
//	log-level debug|info|warn|error                                  default: info
//	peer-dialect NID DIALECT     what correspondent NID speaks, over default: learned per session
//	                             what it shows (internal/dialect): from its verified packets
//	                             ilnpd, rfc6743, freebsd, standrews,
//	                             standrews-code; one line per NID, the only key that repeats
package config

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	"ilnp/internal/dialect"
	"ilnp/internal/wire"
)

// Handoff is the handoff mode (issue 4): soft keeps the old locator valid until it is gone,
// hard ages it at once.
type Handoff string

const (
	HandoffSoft Handoff = "soft"
	HandoffHard Handoff = "hard"
)

// ParseHandoff accepts "soft" or "hard".
func ParseHandoff(s string) (Handoff, error) {
	switch Handoff(s) {
	case HandoffSoft, HandoffHard:
		return Handoff(s), nil
	}
	return "", fmt.Errorf("want soft or hard, got %q", s)
}

// NIDMode chooses between one stable NID per node and, for the sessions the node opens, one
// random NID per correspondent (internal/ephemeral).
type NIDMode string

const (
	NIDStable    NIDMode = "stable"
	NIDEphemeral NIDMode = "ephemeral"
)

// NonceMode says which packets of a session carry the nonce option (RFC 6744 s.6).
type NonceMode string

const (
	NonceEvery NonceMode = "every"
	NonceFirst NonceMode = "first"
)

// Config is a parsed, validated ilnpd configuration.
type Config struct {
	Node       string
	Interfaces []string
	// NID is the configured node identifier when HasNID is set.
	NID         wire.NID
	HasNID      bool
	NIDMode     NIDMode
	Handoff     Handoff
	Policy      string
	StateDir    string
	EventsFile  string
	HostsFile   string
	DNSListen   netip.AddrPort // zero: resolver off
	DNSUpstream netip.AddrPort // zero: no forwarding
	// DNSLookupServer is where the stub resolver asks for NID and L64 records; zero: use
	// DNSUpstream (the resolver looks up ILNP names in DNS only when one of them is set).
	DNSLookupServer netip.AddrPort
	// DNS rendezvous publishing (issue 6): off while DNSPublishName is empty.
	DNSPublishName     string         // lower case, no trailing dot
	DNSPublishZone     string         // lower case, no trailing dot; contains DNSPublishName
	DNSPublishServer   netip.AddrPort // primary server for the zone
	DNSPublishKeyFile  string         // TSIG key file; empty: unsigned updates
	DNSPublishKeyName  string         // key in the file; empty: the file's only key
	DNSPublishTTL      time.Duration  // whole seconds
	LUInitialTimeout   time.Duration
	LUMaxTimeout       time.Duration
	LUMaxAttempts      int
	SessionIdleTimeout time.Duration
	// NewSessionsPerSecond bounds the sessions incoming packets may create (0: no bound).
	NewSessionsPerSecond int
	// SessionTableSize is the number of sessions the datapath holds, and separately of
	// embryonic responder sessions (those this host has not answered yet, an LRU map).
	SessionTableSize int
	// PathTableSize sizes the LRU map of locator pairs other than each session's main one,
	// whose counters live in the session entry (0: SessionTableSize/16, at least 16384):
	// pairs of multihomed, multipath and just-moved sessions (issue 28).
	PathTableSize int
	// EmbryoTableSize sizes the embryonic sessions' LRU map apart (0: SessionTableSize): at a
	// million sessions the embryos' copy of the table is 300 MB of kernel memory that a flood
	// only needs tens of thousands of (issue 28).
	EmbryoTableSize int
	// EventRingSize is the bytes of the datapath's event ring (0: the datapath's 256 KiB), a
	// power of two: events it cannot queue while the daemon is behind are lost to it, and
	// their sessions adopted from the table later (issue 28).
	EventRingSize int64
	// MemoryLimit is the Go runtime's soft memory limit in bytes (debug.SetMemoryLimit; 0:
	// none): the garbage collector works harder as the heap nears it instead of letting it
	// grow to twice what is live (issue 28).
	MemoryLimit int64
	// GCPercent is the Go runtime's GOGC (debug.SetGCPercent; 0: the runtime's, GOGC or 100).
	GCPercent int
	// SessionUnprovenTimeout is the idle timeout of responder sessions whose correspondent
	// sent only the packet that opened them: what a spoofed ping leaves behind (0: SessionIdleTimeout).
	SessionUnprovenTimeout time.Duration
	NonceSize              int
	NonceMode              NonceMode
	NonceFirstN            int // packets per session carrying the nonce when NonceMode is NonceFirst
	EchoNonce              bool
	// LocatorVerification is internal/locverify's mode: "off", "opportunistic" or "strict".
	LocatorVerification string
	TCPAware            bool // the reactions of internal/tcpaware (issue 15)
	// IPv4Locators makes the IPv4 addresses of the ILNP interfaces locators (RFC 6742 L32)
	// reached with ILNPv6 in UDP/IPv4 on EncapPort (internal/encap, issue 14).
	IPv4Locators bool
	EncapPort    uint16
	// NATKeepalive is the idle time after which a session over IPv4 sends a keepalive
	// (internal/natkeep); 0: none.
	NATKeepalive time.Duration
	MTUHeadroom  int
	LogLevel     slog.Level
	// PeerDialects overrides, per correspondent NID, the dialect internal/dialect learns
	// (values: dialect.Names); nil when none is configured.
	PeerDialects map[wire.NID]string
}

// Default returns the defaults; Interfaces is empty and must be set.
func Default() Config {
	return Config{
		NIDMode:             NIDStable,
		LocatorVerification: "opportunistic",
		Handoff:             HandoffSoft,
		Policy:              "newest",
		StateDir:            "/run/ilnpd",
		LUInitialTimeout:    time.Second,
		LUMaxTimeout:        8 * time.Second,
		LUMaxAttempts:       7,
		SessionIdleTimeout:  10 * time.Minute,
		// Far above what a host accepts legitimately, far below what fills the session
		// table (65536) before idle sessions expire.
		NewSessionsPerSecond:   1000,
		SessionTableSize:       65536,
		SessionUnprovenTimeout: 10 * time.Second,
		NonceSize:              4,
		NonceMode:              NonceEvery,
		MTUHeadroom:            NonceOptionSize(4),
		EncapPort:              49191, // encap.DefaultPort
		NATKeepalive:           25 * time.Second,
		LogLevel:               slog.LevelInfo,
	}
}

// BPFDir is where ilnpd mounts its own bpffs and pins maps.
func (c Config) BPFDir() string { return filepath.Join(c.StateDir, "bpf") }

// ControlSocket is the unix socket ilnpctl talks to.
func (c Config) ControlSocket() string { return filepath.Join(c.StateDir, "ctl.sock") }

// NonceOptionSize is the size in bytes of the Destination Options header carrying an ILNP
// Nonce option of nonceSize bytes (RFC 6744 s.2: 2-byte header + 2-byte option header + nonce,
// padded to a multiple of 8).
func NonceOptionSize(nonceSize int) int {
	return (4 + nonceSize + 7) / 8 * 8
}

// Load parses the file at path.
func Load(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	return Parse(f, path)
}

// Parse reads a configuration; filename only labels errors. The first error is returned.
func Parse(r io.Reader, filename string) (Config, error) {
	cfg := Default()
	seen := map[string]int{}
	dialectLines := map[wire.NID]int{}
	headroomSet := 0
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 4096), 64*1024)
	line := 0
	for scanner.Scan() {
		line++
		fields := strings.Fields(stripComment(scanner.Text()))
		if len(fields) == 0 {
			continue
		}
		key, args := fields[0], fields[1:]
		if key == "peer-dialect" {
			if err := setPeerDialect(&cfg, args, dialectLines, line); err != nil {
				return Config{}, fmt.Errorf("%s:%d: %s: %w", filename, line, key, err)
			}
			continue
		}
		if first, dup := seen[key]; dup {
			return Config{}, fmt.Errorf("%s:%d: duplicate key %q (first set on line %d)", filename, line, key, first)
		}
		set, ok := setters[key]
		if !ok {
			return Config{}, fmt.Errorf("%s:%d: unknown key %q", filename, line, key)
		}
		seen[key] = line
		if err := set(&cfg, args); err != nil {
			return Config{}, fmt.Errorf("%s:%d: %s: %w", filename, line, key, err)
		}
		if key == "mtu-headroom" {
			headroomSet = line
		}
	}
	if err := scanner.Err(); err != nil {
		return Config{}, fmt.Errorf("%s:%d: %w", filename, line+1, err)
	}

	// Checks that involve several keys.
	if len(cfg.Interfaces) == 0 {
		return Config{}, fmt.Errorf("%s: missing required key \"interfaces\"", filename)
	}
	if cfg.LUInitialTimeout > cfg.LUMaxTimeout {
		at := max(seen["lu-initial-timeout"], seen["lu-max-timeout"])
		return Config{}, fmt.Errorf("%s:%d: lu-initial-timeout %v is larger than lu-max-timeout %v",
			filename, at, cfg.LUInitialTimeout, cfg.LUMaxTimeout)
	}
	if err := checkDNS(&cfg, seen); err != nil {
		return Config{}, fmt.Errorf("%s:%w", filename, err)
	}
	if cfg.NonceSize == 12 {
		for nid, name := range cfg.PeerDialects {
			if name == "freebsd" {
				return Config{}, fmt.Errorf("%s:%d: peer-dialect: %s is freebsd, which cannot use nonce-size 12 (line %d): "+
					"FreeBSD ILNP reflects a 12-byte nonce in an 8-byte header, so its LU-ACKs and echo replies are malformed",
					filename, dialectLines[nid], nid, seen["nonce-size"])
			}
		}
	}
	need := NonceOptionSize(cfg.NonceSize)
	if headroomSet == 0 {
		cfg.MTUHeadroom = need
	} else if cfg.MTUHeadroom < need {
		return Config{}, fmt.Errorf("%s:%d: mtu-headroom %d is less than the %d bytes a %d-byte nonce option adds",
			filename, headroomSet, cfg.MTUHeadroom, need, cfg.NonceSize)
	}
	return cfg, nil
}

// setPeerDialect reads "peer-dialect NID DIALECT"; lines records where each NID was set.
func setPeerDialect(c *Config, args []string, lines map[wire.NID]int, line int) error {
	if len(args) != 2 {
		return fmt.Errorf("want NID and dialect, got %d values", len(args))
	}
	nid, err := wire.ParseNID(args[0])
	if err != nil {
		return err
	}
	if _, err := dialect.Lookup(args[1]); err != nil {
		return err
	}
	if first, dup := lines[nid]; dup {
		return fmt.Errorf("NID %s already set on line %d", nid, first)
	}
	lines[nid] = line
	if c.PeerDialects == nil {
		c.PeerDialects = map[wire.NID]string{}
	}
	c.PeerDialects[nid] = args[1]
	return nil
}

// stripComment removes a comment: '#' at the start of the line or after white space (so a
// path like /tmp/a#b survives).
func stripComment(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t') {
			return s[:i]
		}
	}
	return s
}

type setter func(*Config, []string) error

var setters map[string]setter

func init() {
	setters = map[string]setter{
		"node": one(func(c *Config, v string) error {
			if !validName(v, 64) {
				return fmt.Errorf("want a name of letters, digits, '-', '_' or '.', got %q", v)
			}
			c.Node = v
			return nil
		}),
		"interfaces": setInterfaces,
		"nid":        one(setNID),
		"nid-mode":   one(choice(NIDStable, NIDEphemeral, func(c *Config) *NIDMode { return &c.NIDMode })),
		"locator-verification": one(func(c *Config, v string) error {
			switch v {
			case "off", "opportunistic", "strict":
				c.LocatorVerification = v
				return nil
			}
			return fmt.Errorf("want off, opportunistic or strict, got %q", v)
		}),
		"handoff":            one(choice(HandoffSoft, HandoffHard, func(c *Config) *Handoff { return &c.Handoff })),
		"policy":             one(setPolicy),
		"state-dir":          one(absPath(func(c *Config) *string { return &c.StateDir })),
		"events":             one(absPath(func(c *Config) *string { return &c.EventsFile })),
		"hosts":              one(absPath(func(c *Config) *string { return &c.HostsFile })),
		"dns-listen":         one(addrPort(func(c *Config) *netip.AddrPort { return &c.DNSListen })),
		"dns-upstream":       one(addrPort(func(c *Config) *netip.AddrPort { return &c.DNSUpstream })),
		"dns-lookup-server":  one(addrPort(func(c *Config) *netip.AddrPort { return &c.DNSLookupServer })),
		"dns-publish-name":   one(domain(func(c *Config) *string { return &c.DNSPublishName })),
		"dns-publish-zone":   one(domain(func(c *Config) *string { return &c.DNSPublishZone })),
		"dns-publish-server": one(addrPort(func(c *Config) *netip.AddrPort { return &c.DNSPublishServer })),
		"dns-publish-key":    setPublishKey,
		"dns-publish-ttl": one(func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("want a duration like 0s or 30s, got %q", v)
			}
			if d < 0 || d > 24*time.Hour {
				return fmt.Errorf("%v is out of range [0s, 24h]", d)
			}
			if d%time.Second != 0 {
				return fmt.Errorf("%v is not a whole number of seconds (DNS TTLs are seconds)", d)
			}
			c.DNSPublishTTL = d
			return nil
		}),
		"lu-initial-timeout": one(duration(time.Millisecond, time.Minute,
			func(c *Config) *time.Duration { return &c.LUInitialTimeout })),
		"lu-max-timeout": one(duration(time.Millisecond, time.Hour,
			func(c *Config) *time.Duration { return &c.LUMaxTimeout })),
		"lu-max-attempts":         one(integer(1, 100, func(c *Config) *int { return &c.LUMaxAttempts })),
		"new-sessions-per-second": one(integer(0, 1_000_000, func(c *Config) *int { return &c.NewSessionsPerSecond })),
		"session-table-size":      one(integer(256, 1<<20, func(c *Config) *int { return &c.SessionTableSize })),
		"embryo-table-size":       one(integer(256, 1<<20, func(c *Config) *int { return &c.EmbryoTableSize })),
		"path-table-size":         one(integer(256, 1<<20, func(c *Config) *int { return &c.PathTableSize })),
		"memory-limit":            one(setMemoryLimit),
		"event-ring-size":         one(setEventRingSize),
		"gc-percent": one(func(c *Config, v string) error {
			if v == "off" {
				c.GCPercent = 0
				return nil
			}
			return integer(10, 1000, func(c *Config) *int { return &c.GCPercent })(c, v)
		}),
		"session-unproven-timeout": one(duration(0, time.Hour,
			func(c *Config) *time.Duration { return &c.SessionUnprovenTimeout })),
		"session-idle-timeout": one(duration(time.Second, 7*24*time.Hour,
			func(c *Config) *time.Duration { return &c.SessionIdleTimeout })),
		"nonce-size": one(func(c *Config, v string) error {
			if v != "4" && v != "12" {
				return fmt.Errorf("want 4 or 12 (RFC 6744 s.2), got %q", v)
			}
			c.NonceSize, _ = strconv.Atoi(v)
			return nil
		}),
		"nonce": setNonce,
		"echo-nonce": one(func(c *Config, v string) error {
			switch v {
			case "on":
				c.EchoNonce = true
			case "off":
				c.EchoNonce = false
			default:
				return fmt.Errorf("want on or off, got %q", v)
			}
			return nil
		}),
		"tcp-aware": one(func(c *Config, v string) error {
			switch v {
			case "on":
				c.TCPAware = true
			case "off":
				c.TCPAware = false
			default:
				return fmt.Errorf("want on or off, got %q", v)
			}
			return nil
		}),
		"ipv4-locators": one(func(c *Config, v string) error {
			switch v {
			case "on":
				c.IPv4Locators = true
			case "off":
				c.IPv4Locators = false
			default:
				return fmt.Errorf("want on or off, got %q", v)
			}
			return nil
		}),
		"encap-port": one(func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("want a UDP port number, got %q", v)
			}
			// Below 1024 a port belongs to a system service (RFC 6335 s.6).
			if n < 1024 || n > 65535 {
				return fmt.Errorf("%d is out of range [1024, 65535]", n)
			}
			c.EncapPort = uint16(n)
			return nil
		}),
		"nat-keepalive": one(func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("want a duration like 0s or 25s, got %q", v)
			}
			if d != 0 && (d < time.Second || d > time.Hour) {
				return fmt.Errorf("%v is out of range: want 0s (off) or [1s, 1h]", d)
			}
			c.NATKeepalive = d
			return nil
		}),
		"mtu-headroom": one(integer(0, 256, func(c *Config) *int { return &c.MTUHeadroom })),
		"log-level": one(func(c *Config, v string) error {
			switch v {
			case "debug":
				c.LogLevel = slog.LevelDebug
			case "info":
				c.LogLevel = slog.LevelInfo
			case "warn":
				c.LogLevel = slog.LevelWarn
			case "error":
				c.LogLevel = slog.LevelError
			default:
				return fmt.Errorf("want debug, info, warn or error, got %q", v)
			}
			return nil
		}),
	}
}

// one wraps a single-valued setter.
func one(fn func(*Config, string) error) setter {
	return func(c *Config, args []string) error {
		if len(args) != 1 {
			return fmt.Errorf("want exactly one value, got %d", len(args))
		}
		return fn(c, args[0])
	}
}

func choice[T ~string](a, b T, field func(*Config) *T) func(*Config, string) error {
	return func(c *Config, v string) error {
		if T(v) != a && T(v) != b {
			return fmt.Errorf("want %s or %s, got %q", a, b, v)
		}
		*field(c) = T(v)
		return nil
	}
}

func absPath(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error {
		if !filepath.IsAbs(v) {
			return fmt.Errorf("want an absolute path, got %q", v)
		}
		*field(c) = filepath.Clean(v)
		return nil
	}
}

// addrPort accepts "[v6]:port", "v4:port" or a bare address (port 53).
func addrPort(field func(*Config) *netip.AddrPort) func(*Config, string) error {
	return func(c *Config, v string) error {
		if ap, err := netip.ParseAddrPort(v); err == nil {
			if ap.Port() == 0 {
				return fmt.Errorf("port 0 in %q", v)
			}
			if ap.Addr().Zone() != "" {
				return fmt.Errorf("zones are not supported in %q", v)
			}
			*field(c) = ap
			return nil
		}
		a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(v, "["), "]"))
		if err != nil || a.Zone() != "" {
			return fmt.Errorf("want ADDRESS or [IPv6]:PORT or IPv4:PORT, got %q", v)
		}
		*field(c) = netip.AddrPortFrom(a, 53)
		return nil
	}
}

func duration(lo, hi time.Duration, field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("want a duration like 500ms or 2s, got %q", v)
		}
		if d < lo || d > hi {
			return fmt.Errorf("%v is out of range [%v, %v]", d, lo, hi)
		}
		*field(c) = d
		return nil
	}
}

// Memory limits: below 16 MiB the daemon could not hold its own maps' bookkeeping.
const (
	minMemoryLimit = 16 << 20
	maxMemoryLimit = 1 << 40
)

// setMemoryLimit reads memory-limit: off, or bytes with an optional K, M or G (powers of 1024).
func setMemoryLimit(c *Config, v string) error {
	if v == "off" {
		c.MemoryLimit = 0
		return nil
	}
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	if n < minMemoryLimit || n > maxMemoryLimit {
		return fmt.Errorf("%s is out of range [16M, 1024G] (or off)", v)
	}
	c.MemoryLimit = n
	return nil
}

// Bounds of event-ring-size: the kernel wants a power of two and a multiple of the page size.
const (
	minEventRing = 64 << 10
	maxEventRing = 1 << 30
)

func setEventRingSize(c *Config, v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	if n < minEventRing || n > maxEventRing || n&(n-1) != 0 {
		return fmt.Errorf("%s is not a power of two in [64K, 1G]", v)
	}
	c.EventRingSize = n
	return nil
}

// ParseSize reads a byte count: digits with an optional suffix K, M or G (powers of 1024,
// either case, an optional trailing "iB" or "B").
func ParseSize(v string) (int64, error) {
	s := strings.TrimSuffix(strings.TrimSuffix(v, "iB"), "B")
	shift := 0
	if s != "" {
		switch s[len(s)-1] {
		case 'k', 'K':
			shift = 10
		case 'm', 'M':
			shift = 20
		case 'g', 'G':
			shift = 30
		}
		if shift != 0 {
			s = s[:len(s)-1]
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("want a size like 512M or 2G, got %q", v)
	}
	return n << shift, nil
}

// FormatSize writes a byte count as ParseSize reads it, in the largest unit that divides it.
func FormatSize(n int64) string {
	for _, u := range []struct {
		shift  uint
		suffix string
	}{{30, "G"}, {20, "M"}, {10, "K"}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func integer(lo, hi int, field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", v)
		}
		if n < lo || n > hi {
			return fmt.Errorf("%d is out of range [%d, %d]", n, lo, hi)
		}
		*field(c) = n
		return nil
	}
}

func setInterfaces(c *Config, args []string) error {
	if len(args) == 0 {
		return errors.New("want at least one interface name")
	}
	for i, name := range args {
		// Linux: IFNAMSIZ-1 bytes, no '/', ':' or white space.
		if len(name) > 15 || name == "." || name == ".." || strings.ContainsAny(name, "/:") {
			return fmt.Errorf("invalid interface name %q", name)
		}
		for _, prev := range args[:i] {
			if prev == name {
				return fmt.Errorf("interface %q listed twice", name)
			}
		}
	}
	c.Interfaces = append([]string(nil), args...)
	return nil
}

// setNID reads the RFC 6742 presentation form "0214:4fff:fe20:ee64".
func setNID(c *Config, v string) error {
	n, err := wire.ParseNID(v)
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("NID 0 is not a valid identifier")
	}
	c.NID, c.HasNID = n, true
	return nil
}

func setPolicy(c *Config, v string) error {
	// The policy registry lives in the daemon; here only the name's shape is checked.
	if !validName(v, 32) {
		return fmt.Errorf("want a policy name like newest, got %q", v)
	}
	c.Policy = v
	return nil
}

func setNonce(c *Config, args []string) error {
	switch {
	case len(args) == 1 && args[0] == "every":
		c.NonceMode, c.NonceFirstN = NonceEvery, 0
		return nil
	case len(args) == 2 && args[0] == "first":
		n, err := strconv.Atoi(args[1])
		if err != nil || n < 1 || n > 1<<20 {
			return fmt.Errorf("want a packet count 1..%d after first, got %q", 1<<20, args[1])
		}
		c.NonceMode, c.NonceFirstN = NonceFirst, n
		return nil
	}
	return fmt.Errorf("want \"every\" or \"first N\", got %q", strings.Join(args, " "))
}

// domain accepts a DNS name ("mn.ilnp.test", a trailing dot is allowed) and stores it lower
// case without the trailing dot.
func domain(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error {
		name := strings.ToLower(strings.TrimSuffix(v, "."))
		// Letters, digits, '-' and '_' per label: what a host name in a zone file needs, and
		// nothing that would need quoting in an UPDATE or a log line.
		_, ok := dns.IsDomainName(name)
		for _, l := range strings.Split(name, ".") {
			ok = ok && validName(l, 63)
		}
		if !ok || len(name) > 253 {
			return fmt.Errorf("want a domain name like mn.ilnp.test, got %q", v)
		}
		*field(c) = name
		return nil
	}
}

// setPublishKey reads "FILE [KEYNAME]". The file is read when ilnpd starts (it is a secret
// that may be rotated without touching the configuration).
func setPublishKey(c *Config, args []string) error {
	if len(args) < 1 || len(args) > 2 {
		return fmt.Errorf("want FILE [KEYNAME], got %d values", len(args))
	}
	if !filepath.IsAbs(args[0]) {
		return fmt.Errorf("want an absolute path, got %q", args[0])
	}
	c.DNSPublishKeyFile = filepath.Clean(args[0])
	c.DNSPublishKeyName = ""
	if len(args) == 2 {
		var name string
		if err := domain(func(*Config) *string { return &name })(c, args[1]); err != nil {
			return fmt.Errorf("key name: %w", err)
		}
		c.DNSPublishKeyName = name
	}
	return nil
}

// checkDNS checks the DNS keys that depend on each other; the error starts with the line.
func checkDNS(c *Config, seen map[string]int) error {
	if at := seen["dns-lookup-server"]; at != 0 && !c.DNSListen.IsValid() {
		return fmt.Errorf("%d: dns-lookup-server is only used by the stub resolver: set dns-listen too", at)
	}
	publishing := c.DNSPublishName != ""
	for _, k := range []string{"dns-publish-zone", "dns-publish-server", "dns-publish-key", "dns-publish-ttl"} {
		if at := seen[k]; at != 0 && !publishing {
			return fmt.Errorf("%d: %s without dns-publish-name", at, k)
		}
	}
	if !publishing {
		return nil
	}
	at := seen["dns-publish-name"]
	if c.DNSPublishZone == "" {
		return fmt.Errorf("%d: dns-publish-name needs dns-publish-zone (the zone to update)", at)
	}
	if !c.DNSPublishServer.IsValid() {
		return fmt.Errorf("%d: dns-publish-name needs dns-publish-server (the zone's primary server)", at)
	}
	if !dns.IsSubDomain(c.DNSPublishZone+".", c.DNSPublishName+".") {
		return fmt.Errorf("%d: dns-publish-name %s is not inside dns-publish-zone %s",
			max(at, seen["dns-publish-zone"]), c.DNSPublishName, c.DNSPublishZone)
	}
	return nil
}

func validName(s string, maxLen int) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}

// Format writes the configuration in the file format, every key explicit; Parse(Format(c))
// yields c again.
func (c Config) Format() string {
	var b strings.Builder
	kv := func(k string, v ...string) { fmt.Fprintf(&b, "%s %s\n", k, strings.Join(v, " ")) }
	if c.Node != "" {
		kv("node", c.Node)
	}
	kv("interfaces", c.Interfaces...)
	if c.HasNID {
		kv("nid", c.NID.String())
	}
	kv("nid-mode", string(c.NIDMode))
	kv("locator-verification", c.LocatorVerification)
	kv("handoff", string(c.Handoff))
	kv("policy", c.Policy)
	kv("state-dir", c.StateDir)
	if c.EventsFile != "" {
		kv("events", c.EventsFile)
	}
	if c.HostsFile != "" {
		kv("hosts", c.HostsFile)
	}
	if c.DNSListen.IsValid() {
		kv("dns-listen", c.DNSListen.String())
	}
	if c.DNSUpstream.IsValid() {
		kv("dns-upstream", c.DNSUpstream.String())
	}
	if c.DNSLookupServer.IsValid() {
		kv("dns-lookup-server", c.DNSLookupServer.String())
	}
	if c.DNSPublishName != "" {
		kv("dns-publish-name", c.DNSPublishName)
		kv("dns-publish-zone", c.DNSPublishZone)
		kv("dns-publish-server", c.DNSPublishServer.String())
		if c.DNSPublishKeyFile != "" {
			kv("dns-publish-key", strings.TrimSpace(c.DNSPublishKeyFile+" "+c.DNSPublishKeyName))
		}
		kv("dns-publish-ttl", c.DNSPublishTTL.String())
	}
	kv("lu-initial-timeout", c.LUInitialTimeout.String())
	kv("lu-max-timeout", c.LUMaxTimeout.String())
	kv("lu-max-attempts", strconv.Itoa(c.LUMaxAttempts))
	kv("session-idle-timeout", c.SessionIdleTimeout.String())
	kv("new-sessions-per-second", strconv.Itoa(c.NewSessionsPerSecond))
	kv("session-table-size", strconv.Itoa(c.SessionTableSize))
	if c.EmbryoTableSize != 0 {
		kv("embryo-table-size", strconv.Itoa(c.EmbryoTableSize))
	}
	if c.PathTableSize != 0 {
		kv("path-table-size", strconv.Itoa(c.PathTableSize))
	}
	if c.EventRingSize != 0 {
		kv("event-ring-size", FormatSize(c.EventRingSize))
	}
	if c.MemoryLimit != 0 {
		kv("memory-limit", FormatSize(c.MemoryLimit))
	}
	if c.GCPercent != 0 {
		kv("gc-percent", strconv.Itoa(c.GCPercent))
	}
	kv("session-unproven-timeout", c.SessionUnprovenTimeout.String())
	kv("nonce-size", strconv.Itoa(c.NonceSize))
	if c.NonceMode == NonceFirst {
		kv("nonce", "first", strconv.Itoa(c.NonceFirstN))
	} else {
		kv("nonce", "every")
	}
	if c.EchoNonce {
		kv("echo-nonce", "on")
	} else {
		kv("echo-nonce", "off")
	}
	if c.TCPAware {
		kv("tcp-aware", "on")
	} else {
		kv("tcp-aware", "off")
	}
	if c.IPv4Locators {
		kv("ipv4-locators", "on")
	} else {
		kv("ipv4-locators", "off")
	}
	kv("encap-port", strconv.Itoa(int(c.EncapPort)))
	kv("nat-keepalive", c.NATKeepalive.String())
	kv("mtu-headroom", strconv.Itoa(c.MTUHeadroom))
	kv("log-level", strings.ToLower(c.LogLevel.String()))
	nids := make([]wire.NID, 0, len(c.PeerDialects))
	for nid := range c.PeerDialects {
		nids = append(nids, nid)
	}
	slices.Sort(nids)
	for _, nid := range nids {
		kv("peer-dialect", nid.String(), c.PeerDialects[nid])
	}
	return b.String()
}
