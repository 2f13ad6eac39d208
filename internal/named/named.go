// Package named generates the configuration of a private, authoritative BIND9 named serving one
// dynamic test zone that a TSIG key may update (NID and L64 records, as ilnpd publishes them):
// the lab runs it for DNS rendezvous, and internal/namedtest runs it inside tests. Everything
// (config, zone, journal, key, pid file) lives in one directory given by the caller and named is
// started with an absolute -c path and no control channel, so the machine's own DNS setup
// (/etc/bind, /run/named, rndc.key) is never read or written.
//
// AppArmor: Debian ships /etc/apparmor.d/usr.sbin.named, which (when enforced) lets named write
// only under /var/cache/bind and /var/lib/bind. AppArmorState tells callers where a private
// directory may live.
package named

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// Generate writes named.conf, the zone's master file and the TSIG key into dir, which must
// exist and belong to this one server (the journal is written there too). It is the part of
// namedtest.Start, and what the lab runs named from: exec f.Command() in a namespace.
func Generate(dir string, opt Options) (*Files, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("named: directory %q is not absolute", dir)
	}
	if opt.Zone == "" {
		opt.Zone = "ilnp.test."
	}
	zone := strings.ToLower(strings.TrimSuffix(opt.Zone, ".")) + "."
	if !opt.Listen.IsValid() {
		opt.Listen = netip.IPv6Loopback()
	}
	if !opt.Listen.Is6() || opt.Listen.Is4In6() {
		return nil, fmt.Errorf("named: listen address %v is not IPv6", opt.Listen)
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
		return nil, fmt.Errorf("named: %w", err)
	}

	var grants strings.Builder
	for _, n := range opt.UpdateNames {
		fmt.Fprintf(&grants, "\t\tgrant %s name %s NID L64 L32;\n", f.KeyName, strings.TrimSuffix(n, ".")+".")
	}
	d := dir
	conf := fmt.Sprintf(`# generated by internal/named for one server; never the machine's DNS
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
		return nil, fmt.Errorf("named: %w", err)
	}
	return f, nil
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
		return "", fmt.Errorf("named: random TSIG secret: %w", err)
	}
	secret := base64.StdEncoding.EncodeToString(raw)
	key := fmt.Sprintf("key %q {\n\talgorithm hmac-sha256;\n\tsecret %q;\n};\n", name, secret)
	return secret, os.WriteFile(path, []byte(key), 0o600)
}
