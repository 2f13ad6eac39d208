package config

import (
	"ilnp/internal/wire"

	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const full = `# mobile node
node mn                       # name used in events/logs
interfaces mn-r2 mn-r3
nid 0214:4fff:fe20:ee64
nid-mode stable
handoff hard
policy newest
state-dir /run/ilnpd-mn
events /tmp/lab/mn/events.jsonl
hosts /tmp/lab/hosts
dns-listen [::1]:5353
dns-upstream [2001:db8::53]:53
dns-lookup-server [2001:db8:53::1]:5353
dns-publish-name MN.ilnp.test.
dns-publish-zone ilnp.test
dns-publish-server [2001:db8:53::1]:53
dns-publish-key /etc/ilnp/mn.key mn-key.ilnp.test.
dns-publish-ttl 5s
lu-initial-timeout 200ms
lu-max-timeout 4s
lu-max-attempts 5
session-idle-timeout 2m
new-sessions-per-second 50
session-table-size 4096
embryo-table-size 1024
path-table-size 2048
event-ring-size 4M
memory-limit 512M
gc-percent 50
session-unproven-timeout 3s
nonce-size 12
nonce first 10
echo-nonce on
locator-verification strict
tcp-aware on
ipv4-locators on
encap-port 4500
nat-keepalive 10s
mtu-headroom 24
log-level debug
peer-dialect 0214:4fff:fe20:aaaa rfc6743   # nonce-size 12 rules out freebsd
peer-dialect 2:0:0:1 standrews
`

func TestParseFull(t *testing.T) {
	cfg, err := Parse(strings.NewReader(full), "mn.conf")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Node:                   "mn",
		Interfaces:             []string{"mn-r2", "mn-r3"},
		NID:                    0x02144fff_fe20ee64,
		HasNID:                 true,
		NIDMode:                NIDStable,
		Handoff:                HandoffHard,
		Policy:                 "newest",
		StateDir:               "/run/ilnpd-mn",
		EventsFile:             "/tmp/lab/mn/events.jsonl",
		HostsFile:              "/tmp/lab/hosts",
		DNSListen:              netip.MustParseAddrPort("[::1]:5353"),
		DNSUpstream:            netip.MustParseAddrPort("[2001:db8::53]:53"),
		DNSLookupServer:        netip.MustParseAddrPort("[2001:db8:53::1]:5353"),
		DNSPublishName:         "mn.ilnp.test",
		DNSPublishZone:         "ilnp.test",
		DNSPublishServer:       netip.MustParseAddrPort("[2001:db8:53::1]:53"),
		DNSPublishKeyFile:      "/etc/ilnp/mn.key",
		DNSPublishKeyName:      "mn-key.ilnp.test",
		DNSPublishTTL:          5 * time.Second,
		LUInitialTimeout:       200 * time.Millisecond,
		LUMaxTimeout:           4 * time.Second,
		LUMaxAttempts:          5,
		SessionIdleTimeout:     2 * time.Minute,
		NewSessionsPerSecond:   50,
		SessionTableSize:       4096,
		EmbryoTableSize:        1024,
		PathTableSize:          2048,
		EventRingSize:          4 << 20,
		MemoryLimit:            512 << 20,
		GCPercent:              50,
		SessionUnprovenTimeout: 3 * time.Second,
		NonceSize:              12,
		NonceMode:              NonceFirst,
		NonceFirstN:            10,
		EchoNonce:              true,
		LocatorVerification:    "strict",
		TCPAware:               true,
		IPv4Locators:           true,
		EncapPort:              4500,
		NATKeepalive:           10 * time.Second,
		MTUHeadroom:            24,
		LogLevel:               slog.LevelDebug,
		PeerDialects:           map[wire.NID]string{0x02144ffffe20aaaa: "rfc6743", 0x0002000000000001: "standrews"},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", cfg, want)
	}
	if cfg.BPFDir() != "/run/ilnpd-mn/bpf" || cfg.ControlSocket() != "/run/ilnpd-mn/ctl.sock" {
		t.Fatalf("paths: %s %s", cfg.BPFDir(), cfg.ControlSocket())
	}
}

func TestParseDefaults(t *testing.T) {
	cfg, err := Parse(strings.NewReader("interfaces eth0\n"), "x")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Interfaces = []string{"eth0"}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got %+v want %+v", cfg, want)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"handoff", cfg.Handoff, HandoffSoft},
		{"nid-mode", cfg.NIDMode, NIDStable},
		{"locator-verification", cfg.LocatorVerification, "opportunistic"},
		{"policy", cfg.Policy, "newest"},
		{"state-dir", cfg.StateDir, "/run/ilnpd"},
		{"lu-initial", cfg.LUInitialTimeout, time.Second},
		{"lu-max", cfg.LUMaxTimeout, 8 * time.Second},
		{"attempts", cfg.LUMaxAttempts, 7},
		{"idle", cfg.SessionIdleTimeout, 10 * time.Minute},
		{"nonce-size", cfg.NonceSize, 4},
		{"nonce", cfg.NonceMode, NonceEvery},
		{"echo", cfg.EchoNonce, false},
		{"tcp-aware", cfg.TCPAware, false},
		{"ipv4-locators", cfg.IPv4Locators, false},
		{"encap-port", cfg.EncapPort, uint16(49191)},
		{"nat-keepalive", cfg.NATKeepalive, 25 * time.Second},
		{"headroom", cfg.MTUHeadroom, 8},
		{"log", cfg.LogLevel, slog.LevelInfo},
		{"dns off", cfg.DNSListen.IsValid(), false},
		{"nid unset", cfg.HasNID, false},
		{"publish off", cfg.DNSPublishName, ""},
		{"publish ttl", cfg.DNSPublishTTL, time.Duration(0)},
		{"lookup server", cfg.DNSLookupServer.IsValid(), false},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("default %s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestParseValues(t *testing.T) {
	for _, tc := range []struct {
		in    string
		check func(Config) bool
	}{
		{"dns-listen ::1", func(c Config) bool { return c.DNSListen == netip.MustParseAddrPort("[::1]:53") }},
		{"dns-listen [::1]", func(c Config) bool { return c.DNSListen == netip.MustParseAddrPort("[::1]:53") }},
		{"dns-listen 127.0.0.1:5300", func(c Config) bool { return c.DNSListen == netip.MustParseAddrPort("127.0.0.1:5300") }},
		{"nid 1:2:3:4", func(c Config) bool { return c.NID == 0x0001000200030004 }},
		{"nonce-size 12", func(c Config) bool { return c.MTUHeadroom == 16 }},
		{"nonce every", func(c Config) bool { return c.NonceMode == NonceEvery }},
		{"events /a/b/../c#d  # comment", func(c Config) bool { return c.EventsFile == "/a/c#d" }},
		{"nid-mode ephemeral", func(c Config) bool { return c.NIDMode == NIDEphemeral }},
		{"\t log-level   warn\t", func(c Config) bool { return c.LogLevel == slog.LevelWarn }},
		{"log-level error", func(c Config) bool { return c.LogLevel == slog.LevelError }},
		{"memory-limit 1GiB", func(c Config) bool { return c.MemoryLimit == 1<<30 }},
		{"memory-limit 20000000", func(c Config) bool { return c.MemoryLimit == 20_000_000 }},
		{"memory-limit 640MB", func(c Config) bool { return c.MemoryLimit == 640<<20 }},
		{"memory-limit off", func(c Config) bool { return c.MemoryLimit == 0 }},
		{"event-ring-size 64K", func(c Config) bool { return c.EventRingSize == 64<<10 }},
		{"event-ring-size 1G", func(c Config) bool { return c.EventRingSize == 1<<30 }},
		{"gc-percent off", func(c Config) bool { return c.GCPercent == 0 }},
		{"gc-percent 1000", func(c Config) bool { return c.GCPercent == 1000 }},
	} {
		cfg, err := Parse(strings.NewReader("interfaces eth0\n"+tc.in+"\n"), "t")
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if !tc.check(cfg) {
			t.Errorf("%q: unexpected %+v", tc.in, cfg)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "f.conf: missing required key \"interfaces\""},
		{"# nothing\n\n", "f.conf: missing required key \"interfaces\""},
		{"interfaces\n", "f.conf:1: interfaces: want at least one interface name"},
		{"interfaces a a\n", "f.conf:1: interfaces: interface \"a\" listed twice"},
		{"interfaces averyveryverylongname\n", "f.conf:1: interfaces: invalid interface name"},
		{"interfaces a/b\n", "invalid interface name"},
		{"interfaces a\nfoo bar\n", "f.conf:2: unknown key \"foo\""},
		{"interfaces a\nhandoff soft\nhandoff hard\n", "f.conf:3: duplicate key \"handoff\" (first set on line 2)"},
		{"interfaces a\npeer-dialect 1:2:3:4 freebsd\n\npeer-dialect 0001:2:3:4 standrews\n", "f.conf:4: peer-dialect: NID 0001:0002:0003:0004 already set on line 2"},
		{"interfaces a\npeer-dialect 1:2:3:4 bsd\n", "f.conf:2: peer-dialect: unknown dialect \"bsd\", want one of freebsd, ilnpd, rfc6743, standrews, standrews-code"},
		{"interfaces a\npeer-dialect 1:2:3:4\n", "f.conf:2: peer-dialect: want NID and dialect, got 1 values"},
		{"interfaces a\npeer-dialect 1:2:3 ilnpd\n", "f.conf:2: peer-dialect: parse NID"},
		{"interfaces a\npeer-dialect 1:2:3:4 freebsd\nnonce-size 12\n", "f.conf:2: peer-dialect: 0001:0002:0003:0004 is freebsd, which cannot use nonce-size 12 (line 3)"},
		{"interfaces a\n\n# c\nhandoff medium\n", "f.conf:4: handoff: want soft or hard, got \"medium\""},
		{"interfaces a\nhandoff\n", "f.conf:2: handoff: want exactly one value, got 0"},
		{"interfaces a\nhandoff soft hard\n", "want exactly one value, got 2"},
		{"interfaces a\nnid-mode random\n", "nid-mode: want stable or ephemeral"},
		{"interfaces a\nlocator-verification on\n", "f.conf:2: locator-verification: want off, opportunistic or strict"},
		{"interfaces a\nnid 1:2:3\n", "nid: parse NID \"1:2:3\": want 4 colon-separated groups"},
		{"interfaces a\nnid 1:2:3:xyz\n", "is not a hex digit"},
		{"interfaces a\nnid 1:2:3:12345\n", "want 1 to 4 hex digits"},
		{"interfaces a\nnid 0:0:0:0\n", "NID 0 is not a valid identifier"},
		{"interfaces a\nnid ::1\n", "nid:"},
		{"interfaces a\npolicy new$est\n", "policy: want a policy name"},
		{"interfaces a\nstate-dir run/ilnpd\n", "state-dir: want an absolute path"},
		{"interfaces a\nevents x.jsonl\n", "events: want an absolute path"},
		{"interfaces a\nhosts ./hosts\n", "hosts: want an absolute path"},
		{"interfaces a\ndns-listen localhost:53\n", "dns-listen: want ADDRESS"},
		{"interfaces a\ndns-listen [::1]:0\n", "dns-listen: port 0"},
		{"interfaces a\ndns-listen [fe80::1%eth0]:53\n", "zones are not supported"},
		{"interfaces a\ndns-upstream [::1]:99999\n", "dns-upstream: want ADDRESS"},
		{"interfaces a\nlu-initial-timeout 1\n", "lu-initial-timeout: want a duration"},
		{"interfaces a\nlu-initial-timeout 0s\n", "out of range"},
		{"interfaces a\nlu-initial-timeout -1s\n", "out of range"},
		{"interfaces a\nlu-initial-timeout 9s\n", "f.conf:2: lu-initial-timeout 9s is larger than lu-max-timeout 8s"},
		{"interfaces a\nlu-max-timeout 500ms\nlu-initial-timeout 2s\n", "f.conf:3: lu-initial-timeout 2s is larger"},
		{"interfaces a\nlu-max-attempts 0\n", "lu-max-attempts: 0 is out of range [1, 100]"},
		{"interfaces a\nlu-max-attempts seven\n", "want an integer"},
		{"interfaces a\nnew-sessions-per-second -1\n", "new-sessions-per-second: -1 is out of range [0, 1000000]"},
		{"interfaces a\nsession-table-size 100\n", "session-table-size: 100 is out of range [256, 1048576]"},
		{"interfaces a\nembryo-table-size 2000000\n", "embryo-table-size: 2000000 is out of range [256, 1048576]"},
		{"interfaces a\npath-table-size 100\n", "path-table-size: 100 is out of range [256, 1048576]"},
		{"interfaces a\nmemory-limit 8M\n", "memory-limit: 8M is out of range [16M, 1024G]"},
		{"interfaces a\nevent-ring-size 32K\n", "event-ring-size: 32K is not a power of two in [64K, 1G]"},
		{"interfaces a\nevent-ring-size 3M\n", "event-ring-size: 3M is not a power of two"},
		{"interfaces a\nevent-ring-size 2G\n", "event-ring-size: 2G is not a power of two in [64K, 1G]"},
		{"interfaces a\nevent-ring-size lots\n", "event-ring-size: want a size"},
		{"interfaces a\nmemory-limit 2T\n", "memory-limit: want a size like 512M"},
		{"interfaces a\nmemory-limit -1G\n", "memory-limit: want a size"},
		{"interfaces a\nmemory-limit 99999999999999999999G\n", "memory-limit: want a size"},
		{"interfaces a\ngc-percent 5\n", "gc-percent: 5 is out of range [10, 1000]"},
		{"interfaces a\nsession-idle-timeout 10ms\n", "out of range"},
		{"interfaces a\nnonce-size 8\n", "nonce-size: want 4 or 12"},
		{"interfaces a\nnonce first\n", "nonce: want \"every\" or \"first N\""},
		{"interfaces a\nnonce first 0\n", "want a packet count"},
		{"interfaces a\nnonce sometimes\n", "nonce: want \"every\""},
		{"interfaces a\necho-nonce yes\n", "echo-nonce: want on or off"},
		{"interfaces a\ntcp-aware maybe\n", "tcp-aware: want on or off"},
		{"interfaces a\nipv4-locators yes\n", "f.conf:2: ipv4-locators: want on or off"},
		{"interfaces a\nencap-port 80\n", "f.conf:2: encap-port: 80 is out of range [1024, 65535]"},
		{"interfaces a\nencap-port 65536\n", "encap-port: 65536 is out of range"},
		{"interfaces a\nencap-port udp\n", "encap-port: want a UDP port number"},
		{"interfaces a\nnat-keepalive 500ms\n", "f.conf:2: nat-keepalive: 500ms is out of range"},
		{"interfaces a\nnat-keepalive 2h\n", "nat-keepalive: 2h0m0s is out of range"},
		{"interfaces a\nnat-keepalive often\n", "nat-keepalive: want a duration"},
		{"interfaces a\nmtu-headroom 4\n", "f.conf:2: mtu-headroom 4 is less than the 8 bytes"},
		{"interfaces a\nmtu-headroom 8\nnonce-size 12\n", "f.conf:2: mtu-headroom 8 is less than the 16 bytes a 12-byte nonce"},
		{"interfaces a\nmtu-headroom 1000\n", "out of range"},
		{"interfaces a\nlog-level verbose\n", "log-level: want debug, info, warn or error"},
		{"interfaces a\nnode bad/name\n", "node: want a name"},
		{"interfaces a\n" + strings.Repeat("x", 70000) + "\n", "f.conf:2:"},
		{"interfaces a\ndns-lookup-server [::1]:53\n", "f.conf:2: dns-lookup-server is only used by the stub resolver"},
		{"interfaces a\ndns-listen ::1\ndns-lookup-server name:53\n", "f.conf:3: dns-lookup-server: want ADDRESS"},
		{"interfaces a\ndns-publish-name mn.ilnp.test\n", "f.conf:2: dns-publish-name needs dns-publish-zone"},
		{"interfaces a\ndns-publish-name mn.ilnp.test\ndns-publish-zone ilnp.test\n", "f.conf:2: dns-publish-name needs dns-publish-server"},
		{"interfaces a\ndns-publish-name mn.other.test\ndns-publish-zone ilnp.test\ndns-publish-server ::1\n",
			"f.conf:3: dns-publish-name mn.other.test is not inside dns-publish-zone ilnp.test"},
		{"interfaces a\ndns-publish-name mn..test\n", "f.conf:2: dns-publish-name: want a domain name"},
		{"interfaces a\ndns-publish-name mn;x.test\n", "dns-publish-name: want a domain name"},
		{"interfaces a\ndns-publish-name .\n", "dns-publish-name: want a domain name"},
		{"interfaces a\ndns-publish-name " + strings.Repeat("a", 64) + ".test\n", "dns-publish-name: want a domain name"},
		{"interfaces a\ndns-publish-zone ilnp.test\n", "f.conf:2: dns-publish-zone without dns-publish-name"},
		{"interfaces a\ndns-publish-ttl 0s\n", "f.conf:2: dns-publish-ttl without dns-publish-name"},
		{"interfaces a\ndns-publish-ttl 1.5s\n", "f.conf:2: dns-publish-ttl: 1.5s is not a whole number of seconds"},
		{"interfaces a\ndns-publish-ttl -1s\n", "dns-publish-ttl: -1s is out of range"},
		{"interfaces a\ndns-publish-ttl 48h\n", "dns-publish-ttl: 48h0m0s is out of range"},
		{"interfaces a\ndns-publish-ttl soon\n", "dns-publish-ttl: want a duration"},
		{"interfaces a\ndns-publish-key\n", "f.conf:2: dns-publish-key: want FILE [KEYNAME], got 0 values"},
		{"interfaces a\ndns-publish-key mn.key\n", "dns-publish-key: want an absolute path"},
		{"interfaces a\ndns-publish-key /k a b\n", "want FILE [KEYNAME], got 3 values"},
		{"interfaces a\ndns-publish-key /k bad/key\n", "dns-publish-key: key name: want a domain name"},
		{"interfaces a\ndns-publish-server [::1]:0\n", "dns-publish-server: port 0"},
	} {
		_, err := Parse(strings.NewReader(tc.in), "f.conf")
		if err == nil {
			t.Errorf("%q: no error, want %q", tc.in, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %q, want it to contain %q", tc.in, err, tc.want)
		}
	}
}

func TestFormatRoundTrip(t *testing.T) {
	cfg, err := Parse(strings.NewReader(full), "mn.conf")
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(strings.NewReader(cfg.Format()), "formatted")
	if err != nil {
		t.Fatalf("%v\n%s", err, cfg.Format())
	}
	if !reflect.DeepEqual(cfg, again) {
		t.Fatalf("round trip changed the config:\n%+v\n%+v", cfg, again)
	}
}

// The shipped example must parse: it is what users copy.
func TestExampleFile(t *testing.T) {
	path := filepath.Join("..", "..", "dist", "ilnpd.conf.example")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the shipped example is missing: %v", err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Interfaces) == 0 {
		t.Fatal("example has no interfaces")
	}
}

// Every default shown commented out in the example, uncommented together, is a valid file too
// (so the documented keys and values cannot rot).
func TestExampleFileUncommented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "dist", "ilnpd.conf.example"))
	if err != nil {
		t.Fatalf("the shipped example is missing: %v", err)
	}
	var b strings.Builder
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if key, _, ok := strings.Cut(strings.TrimPrefix(line, "#"), " "); ok && line != "" && line[0] == '#' {
			if _, known := setters[key]; known {
				line = line[1:]
				n++
			}
		}
		b.WriteString(line + "\n")
	}
	cfg, err := Parse(strings.NewReader(b.String()), "example-uncommented")
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 || cfg.DNSPublishName != "mn.ilnp.test" || !cfg.DNSLookupServer.IsValid() {
		t.Fatalf("uncommented %d keys; publish %q lookup %v", n, cfg.DNSPublishName, cfg.DNSLookupServer)
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "none.conf"))
	if err == nil || !strings.Contains(err.Error(), "none.conf") {
		t.Fatalf("err = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(full)
	f.Add("interfaces eth0\n")
	f.Add("interfaces a b\nnonce first 3\nnid 1:2:3:4 # x\n")
	f.Add("interfaces a\ndns-listen ::1\nlu-max-timeout 1h\n")
	f.Add("interfaces a\ndns-listen ::1\ndns-lookup-server ::1\ndns-publish-name mn.ilnp.test\n" +
		"dns-publish-zone ilnp.test\ndns-publish-server [::1]:53\ndns-publish-key /k\ndns-publish-ttl 0s\n")
	f.Fuzz(func(t *testing.T, in string) {
		cfg, err := Parse(strings.NewReader(in), "fuzz")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz:") {
				t.Fatalf("error without file name: %v", err)
			}
			return
		}
		if len(cfg.Interfaces) == 0 || cfg.LUInitialTimeout > cfg.LUMaxTimeout ||
			cfg.MTUHeadroom < NonceOptionSize(cfg.NonceSize) {
			t.Fatalf("invalid config accepted: %+v", cfg)
		}
		again, err := Parse(strings.NewReader(cfg.Format()), "formatted")
		if err != nil {
			t.Fatalf("formatted config does not parse: %v\n%s", err, cfg.Format())
		}
		if !reflect.DeepEqual(cfg, again) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", cfg, again)
		}
	})
}
