// Package namedtest runs a real authoritative BIND9 named inside a test's own network namespace
// (made by internal/nstest), serving one dynamic test zone that a TSIG key may update. The
// configuration, zone file, journal and key live in a private directory made for the test, and
// named is started with an absolute -c path and its own directory, pid-file, session key and no
// control channel, so the machine's own DNS setup (/etc/bind, /run/named, rndc.key) is never
// read or written.
//
// AppArmor: Debian ships /etc/apparmor.d/usr.sbin.named, which (when enforced) lets named write
// only under /var/cache/bind and /var/lib/bind and read /etc/bind. Start looks at the kernel's
// AppArmor state: when the named profile is enforced, the private directory is made under
// /var/cache/bind (and removed afterwards); otherwise it is t.TempDir().
package namedtest

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ilnp/internal/nstest"
)

// Options describes the server. Zero values get the defaults named below.
type Options struct {
	Zone    string     // default "ilnp.test."
	Listen  netip.Addr // IPv6 address already configured in the namespace; default ::1
	Port    int        // default 53
	KeyName string     // TSIG key name; default "mn-key." + Zone
	// UpdateNames are the names the key may update (NID and L64 only, as ilnpd publishes);
	// default "mn." + Zone.
	UpdateNames []string
	// Records are extra master-file lines for the zone (owner names relative to it or absolute).
	Records []string
	// SOAMinimum is the negative-caching TTL (RFC 2308) in seconds; default 5.
	SOAMinimum int
}

// Files is a generated server configuration: everything named needs, in one directory.
type Files struct {
	Zone     string         // fully qualified, lower case
	Addr     netip.AddrPort // where it answers
	KeyName  string         // fully qualified
	Secret   string         // base64 hmac-sha256 secret
	KeyFile  string         // the key in BIND "key { };" syntax, as tsig-keygen writes it
	Dir      string         // private directory holding config, zone, journal
	Conf     string         // named.conf (absolute path)
	ZoneFile string         // master file; its journal is ZoneFile + ".jnl"
}

// Command is the argv that runs named in the foreground (logging to stderr) on this
// configuration; run it inside the namespace that holds Addr.
func (f *Files) Command() []string { return []string{"named", "-g", "-c", f.Conf, "-u", "root"} }

// Server is a running (or stopped) named.
type Server struct {
	*Files
	NS *nstest.NS

	t   testing.TB
	mu  sync.Mutex
	cmd *exec.Cmd
	log *nstest.SyncBuffer
}

// AppArmorState reports how the kernel confines /usr/sbin/named: "disabled" (no AppArmor in
// this kernel), or the profile mode ("enforce", "complain", "unconfined" when no profile is
// loaded for it).
func AppArmorState() string {
	data, err := os.ReadFile("/sys/kernel/security/apparmor/profiles")
	if err != nil {
		return "disabled"
	}
	return namedProfileMode(string(data))
}

// namedProfileMode finds named's profile in the kernel's list ("NAME (MODE)" lines).
func namedProfileMode(profiles string) string {
	for _, line := range strings.Split(profiles, "\n") {
		name, mode, ok := strings.Cut(line, " (")
		if ok && (name == "/usr/sbin/named" || name == "named") {
			return strings.TrimSuffix(mode, ")")
		}
	}
	return "unconfined"
}

// Start runs named in ns and waits until it answers for the zone. It is stopped (and its
// directory removed) when the test ends.
func Start(t testing.TB, ns *nstest.NS, opt Options) *Server {
	t.Helper()
	nstest.RequireTool(t, "named", "dig", "named-checkconf")
	files, err := Generate(privateDir(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("named-checkconf", files.Conf).CombinedOutput(); err != nil {
		t.Fatalf("named-checkconf %s: %v: %s", files.Conf, err, out)
	}
	s := &Server{Files: files, NS: ns, t: t, log: &nstest.SyncBuffer{}}
	t.Cleanup(s.Stop)
	s.Restart()
	return s
}

// Generate writes named.conf, the zone's master file and the TSIG key into dir, which must
// exist and belong to this one server (the journal is written there too). It is the part of
// Start that a non-test user (the lab) can run named from: exec f.Command() in a namespace.
func Generate(dir string, opt Options) (*Files, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("namedtest: directory %q is not absolute", dir)
	}
	if opt.Zone == "" {
		opt.Zone = "ilnp.test."
	}
	zone := strings.ToLower(strings.TrimSuffix(opt.Zone, ".")) + "."
	if !opt.Listen.IsValid() {
		opt.Listen = netip.IPv6Loopback()
	}
	if !opt.Listen.Is6() || opt.Listen.Is4In6() {
		return nil, fmt.Errorf("namedtest: listen address %v is not IPv6", opt.Listen)
	}
	if opt.Port == 0 {
		opt.Port = 53
	}
	if opt.KeyName == "" {
		opt.KeyName = "mn-key." + zone
	}
	if len(opt.UpdateNames) == 0 {
		opt.UpdateNames = []string{"mn." + zone}
	}
	if opt.SOAMinimum == 0 {
		opt.SOAMinimum = 5
	}
	f := &Files{
		Zone:     zone,
		Addr:     netip.AddrPortFrom(opt.Listen, uint16(opt.Port)),
		KeyName:  strings.TrimSuffix(opt.KeyName, ".") + ".",
		Dir:      dir,
		Conf:     filepath.Join(dir, "named.conf"),
		KeyFile:  filepath.Join(dir, "update.key"),
		ZoneFile: filepath.Join(dir, "zone.db"),
	}
	var err error
	if f.Secret, err = writeKey(f.KeyFile, f.KeyName); err != nil {
		return nil, err
	}

	var z strings.Builder
	fmt.Fprintf(&z, "$ORIGIN %s\n$TTL 60\n", zone)
	fmt.Fprintf(&z, "@ IN SOA ns.%s hostmaster.%s 1 3600 600 86400 %d\n", zone, zone, opt.SOAMinimum)
	fmt.Fprintf(&z, "@ IN NS ns.%s\nns IN AAAA %s\n", zone, opt.Listen)
	for _, r := range opt.Records {
		fmt.Fprintln(&z, r)
	}
	if err := os.WriteFile(f.ZoneFile, []byte(z.String()), 0o600); err != nil {
		return nil, fmt.Errorf("namedtest: %w", err)
	}

	var grants strings.Builder
	for _, n := range opt.UpdateNames {
		fmt.Fprintf(&grants, "\t\tgrant %s name %s NID L64;\n", f.KeyName, strings.TrimSuffix(n, ".")+".")
	}
	d := dir
	conf := fmt.Sprintf(`# generated by internal/namedtest for one server; never the machine's DNS
options {
	directory %[1]q;
	pid-file %[2]q;
	session-keyfile %[3]q;
	managed-keys-directory %[1]q;
	bindkeys-file "/dev/null";
	dump-file %[4]q;
	statistics-file %[5]q;
	memstatistics-file %[6]q;
	listen-on { none; };
	listen-on-v6 port %[7]d { %[8]s; };
	recursion no;
	dnssec-validation no;
	notify no;
	allow-transfer { none; };
};
controls { };
include %[9]q;
zone %[10]q {
	type primary;
	file %[11]q;
	journal %[12]q;
	update-policy {
%[13]s	};
};
`, d, filepath.Join(d, "named.pid"), filepath.Join(d, "session.key"), filepath.Join(d, "cache_dump.db"),
		filepath.Join(d, "named.stats"), filepath.Join(d, "named.memstats"), opt.Port, opt.Listen,
		f.KeyFile, strings.TrimSuffix(zone, "."), f.ZoneFile, f.ZoneFile+".jnl", grants.String())
	if err := os.WriteFile(f.Conf, []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("namedtest: %w", err)
	}
	return f, nil
}

// privateDir is where config, zone and journal live: t.TempDir(), or a directory under
// /var/cache/bind when an enforced AppArmor profile would keep named out of /tmp.
func privateDir(t testing.TB) string {
	if AppArmorState() != "enforce" {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("/var/cache/bind", "ilnp-namedtest-")
	if err != nil {
		t.Fatalf("AppArmor enforces a named profile and /var/cache/bind is not usable: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// writeKey writes a fresh hmac-sha256 key, with tsig-keygen when installed (so the key file is
// exactly what an operator would have), and returns its secret.
func writeKey(path, name string) (string, error) {
	if out, err := exec.Command("tsig-keygen", "-a", "hmac-sha256", name).Output(); err == nil {
		_, rest, _ := strings.Cut(string(out), `secret "`)
		secret, _, _ := strings.Cut(rest, `"`)
		if secret != "" {
			return secret, os.WriteFile(path, out, 0o600)
		}
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("namedtest: random TSIG secret: %w", err)
	}
	secret := base64.StdEncoding.EncodeToString(raw)
	key := fmt.Sprintf("key %q {\n\talgorithm hmac-sha256;\n\tsecret %q;\n};\n", name, secret)
	return secret, os.WriteFile(path, []byte(key), 0o600)
}

// Restart starts named again (after Stop) on the same directory: the zone comes back with
// every update from its journal. It returns once named answers for the zone.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		s.t.Fatal("namedtest: Restart while named is running")
	}
	s.cmd = s.NS.Start(func(c *exec.Cmd) {
		c.Stdout, c.Stderr = s.log, s.log
		c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
	}, s.Command()...)
	s.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, err := s.NS.Try(append([]string{"dig"}, s.digArgs("+short", s.Zone, "SOA")...)...)
		if err == nil && strings.Contains(out, "hostmaster") {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("named did not answer for %s at %s within 15 s: %v %s\nnamed log:\n%s", s.Zone, s.Addr, err, out, s.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends named with SIGTERM (so it closes its journal cleanly) and waits for it.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Log is named's output so far (it runs with -g: logs on stderr).
func (s *Server) Log() string { return s.log.String() }

func (s *Server) digArgs(args ...string) []string {
	return append([]string{"@" + s.Addr.Addr().String(), "-p", strconv.Itoa(int(s.Addr.Port())),
		"+norecurse", "+time=1", "+tries=1"}, args...)
}

// Dig runs dig against the server from inside ns (the server's namespace when nil), e.g.
// s.Dig(nil, "+short", "mn.ilnp.test.", "L64").
func (s *Server) Dig(ns *nstest.NS, args ...string) (string, error) {
	if ns == nil {
		ns = s.NS
	}
	return ns.Try(append([]string{"dig"}, s.digArgs(args...)...)...)
}
