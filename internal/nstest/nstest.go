// Package nstest gives tests their own network namespaces: created with a unique name, wired
// with veth pairs, and removed (with every process left in them) when the test ends, pass or
// fail. Tests send traffic only inside namespaces made here.
package nstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// RequireRoot skips a test that needs root and network namespaces. Under CI (CI=true) a missing
// privilege is a failure, not a skip, so CI can never pass by running nothing.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("test needs root (network namespaces) and CI is set")
	}
	t.Skip("needs root for network namespaces")
}

// RequireTool is RequireRoot's twin for external programs (tshark, radvd, iperf3, ...).
func RequireTool(t testing.TB, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("test needs %s and CI is set: %v", name, err)
			}
			t.Skipf("needs %s: %v", name, err)
		}
	}
}

// Require is RequireRoot's twin for anything else a test needs from its environment (a bpffs
// mount, an IPv6 loopback address): err non-nil says it is missing, what names it. Without CI
// the test is skipped; under CI (CI=true) it fails.
func Require(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("test needs %s and CI is set: %v", what, err)
		return
	}
	t.Skipf("needs %s: %v", what, err)
}

// NS is a network namespace owned by one test.
type NS struct {
	Name string
	t    testing.TB
}

// New creates a namespace named prefix-XXXXXX with loopback up and IPv6 forwarding off.
func New(t testing.TB, prefix string) *NS {
	t.Helper()
	RequireRoot(t)
	suffix := make([]byte, 3)
	if _, err := rand.Read(suffix); err != nil {
		t.Fatalf("random namespace suffix: %v", err)
	}
	ns := &NS{Name: prefix + "-" + hex.EncodeToString(suffix), t: t}
	if out, err := exec.Command("ip", "netns", "add", ns.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns.Name, err, out)
	}
	t.Cleanup(ns.remove)
	ns.Run("ip", "link", "set", "lo", "up")
	return ns
}

func (ns *NS) remove() {
	// Processes keep a namespace's interfaces alive: kill them first.
	if out, err := exec.Command("ip", "netns", "pids", ns.Name).Output(); err == nil {
		for _, pid := range strings.Fields(string(out)) {
			_ = exec.Command("kill", "-9", pid).Run()
		}
	}
	if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
		ns.t.Errorf("ip netns del %s: %v: %s", ns.Name, err, out)
	}
}

// Try runs a command inside the namespace and returns its combined output.
func (ns *NS) Try(args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s in %s: %w: %s", strings.Join(args, " "), ns.Name, err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// Run is Try that fails the test on error.
func (ns *NS) Run(args ...string) string {
	ns.t.Helper()
	out, err := ns.Try(args...)
	if err != nil {
		ns.t.Fatal(err)
	}
	return out
}

// Start runs a command in the background inside the namespace; it is killed when the test
// ends. Its output goes to the returned buffer-backed command's Stdout/Stderr when set by the
// caller before Start is called, so pass a configure func for that.
func (ns *NS) Start(configure func(*exec.Cmd), args ...string) *exec.Cmd {
	ns.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name}, args...)...)
	cmd.WaitDelay = 2 * time.Second
	if configure != nil {
		configure(cmd)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		ns.t.Fatalf("start %s in %s: %v", strings.Join(args, " "), ns.Name, err)
	}
	ns.t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	return cmd
}

// Do runs fn with the calling goroutine's OS thread inside the namespace (for netlink and BPF
// attach calls), and restores the original namespace afterwards.
func (ns *NS) Do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	origin, err := netns.Get()
	if err != nil {
		return fmt.Errorf("current netns: %w", err)
	}
	defer origin.Close()
	target, err := netns.GetFromName(ns.Name)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", ns.Name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return fmt.Errorf("enter netns %s: %w", ns.Name, err)
	}
	defer func() { _ = netns.Set(origin) }()
	return fn()
}

// Link connects two namespaces with a veth pair named aIf (in a) and bIf (in b), both up.
func Link(t testing.TB, a *NS, aIf string, b *NS, bIf string) {
	t.Helper()
	a.Run("ip", "link", "add", aIf, "type", "veth", "peer", "name", bIf, "netns", b.Name)
	a.Run("ip", "link", "set", aIf, "up")
	b.Run("ip", "link", "set", bIf, "up")
}

// Ifindex returns the index of the namespace's interface name.
func (ns *NS) Ifindex(name string) int {
	ns.t.Helper()
	var idx int
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		idx = ifi.Index
		return nil
	}); err != nil {
		ns.t.Fatal(err)
	}
	return idx
}

// Capture is tcpdump writing what one interface of a namespace sees to a pcap file.
type Capture struct {
	// File is the pcap file.
	File string
	cmd  *exec.Cmd
	log  *SyncBuffer
}

// Capture runs `tcpdump -i dev -n -U -w file args...` in the namespace (args: more options,
// then the filter) and returns once tcpdump listens (at most 5 s, or the test fails). It runs
// until Stop or the end of the test; either way it ends with SIGTERM, so the file is complete.
func (ns *NS) Capture(dev, file string, args ...string) *Capture {
	ns.t.Helper()
	c := &Capture{File: file, log: &SyncBuffer{}}
	c.cmd = ns.Start(func(cmd *exec.Cmd) {
		cmd.Stdout, cmd.Stderr = c.log, c.log
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	}, append([]string{"tcpdump", "-i", dev, "-n", "-U", "-w", file}, args...)...)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(c.log.String(), "listening on") {
		if time.Now().After(deadline) {
			ns.t.Fatalf("tcpdump on %s in %s did not start: %s", dev, ns.Name, c.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}

// Stop ends tcpdump (SIGTERM) and waits for it; the file is then complete. Stopping twice is
// harmless.
func (c *Capture) Stop() {
	if c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		_ = c.cmd.Wait()
	}
}

// SyncBuffer collects what a process writes (set it as the command's Stdout or Stderr) while
// the test reads it. The zero value is ready.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Listen is net.Listen inside the namespace; the listener keeps working from any thread. An
// error fails the test.
func (ns *NS) Listen(network, address string) net.Listener {
	ns.t.Helper()
	var ln net.Listener
	ns.must(ns.Do(func() (err error) { ln, err = net.Listen(network, address); return err }))
	return ln
}

// ListenPacket is net.ListenPacket inside the namespace, as Listen.
func (ns *NS) ListenPacket(network, address string) net.PacketConn {
	ns.t.Helper()
	var pc net.PacketConn
	ns.must(ns.Do(func() (err error) { pc, err = net.ListenPacket(network, address); return err }))
	return pc
}

// Dial is net.Dial from inside the namespace, as Listen.
func (ns *NS) Dial(network, address string) net.Conn {
	ns.t.Helper()
	var c net.Conn
	ns.must(ns.Do(func() (err error) { c, err = net.Dial(network, address); return err }))
	return c
}

func (ns *NS) must(err error) {
	ns.t.Helper()
	if err != nil {
		ns.t.Fatal(err)
	}
}
