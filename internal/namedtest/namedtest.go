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
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ilnp/internal/named"
	"ilnp/internal/nstest"
)

// Options describes the server (see named.Options).
type Options = named.Options

// Files is a generated server configuration (see named.Files).
type Files = named.Files

// Generate writes a server's configuration into dir (see named.Generate).
func Generate(dir string, opt Options) (*Files, error) { return named.Generate(dir, opt) }

// AppArmorState reports how the kernel confines /usr/sbin/named (see named.AppArmorState).
func AppArmorState() string { return named.AppArmorState() }

// Server is a running (or stopped) named.
type Server struct {
	*Files
	NS *nstest.NS

	t   testing.TB
	mu  sync.Mutex
	cmd *exec.Cmd
	log *nstest.SyncBuffer
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
