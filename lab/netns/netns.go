// Package netns is the lab's handle on network namespaces at run time (internal/nstest is the
// test-only twin): create with a unique name, run commands inside, run Go code with a thread
// inside, delete with every process in it.
package netns

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	vnetns "github.com/vishvananda/netns"
)

// NS is one named network namespace.
type NS struct {
	Name string
}

// Suffix returns n random hex characters for unique names.
func Suffix(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// New creates the namespace name with loopback up.
func New(name string) (*NS, error) {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", name, err, bytes.TrimSpace(out))
	}
	ns := &NS{Name: name}
	if _, err := ns.Run("ip", "link", "set", "lo", "up"); err != nil {
		_ = ns.Delete()
		return nil, err
	}
	return ns, nil
}

// Run runs a command inside the namespace and returns its combined output.
func (ns *NS) Run(args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns.Name}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s in %s: %w: %s", strings.Join(args, " "), ns.Name, err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// Command prepares a command to run inside the namespace (`ip netns exec` execs it, so the
// process id is the command's own and signals reach it directly).
func (ns *NS) Command(args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name}, args...)...)
	// Own process group: a Ctrl-C at the terminal reaches the lab, which then tears down in
	// order, rather than every child at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// Sysctl sets key=value inside the namespace.
func (ns *NS) Sysctl(key, value string) error {
	_, err := ns.Run("sysctl", "-qw", key+"="+value)
	return err
}

// Do runs fn with the calling goroutine's thread inside the namespace. Sockets created in fn
// stay in the namespace afterwards.
func (ns *NS) Do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	origin, err := vnetns.Get()
	if err != nil {
		return fmt.Errorf("current netns: %w", err)
	}
	defer origin.Close()
	target, err := vnetns.GetFromName(ns.Name)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", ns.Name, err)
	}
	defer target.Close()
	if err := vnetns.Set(target); err != nil {
		return fmt.Errorf("enter netns %s: %w", ns.Name, err)
	}
	defer func() {
		if err := vnetns.Set(origin); err != nil {
			// A thread stuck in the wrong namespace must not be reused.
			panic(fmt.Sprintf("netns: cannot return from %s: %v", ns.Name, err))
		}
	}()
	return fn()
}

// Pids lists processes inside the namespace.
func (ns *NS) Pids() []int {
	out, err := exec.Command("ip", "netns", "pids", ns.Name).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Delete kills what still runs inside (TERM, then KILL after a grace period), removes the
// namespace and its /etc/netns directory.
func (ns *NS) Delete() error {
	pids := ns.Pids()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	for deadline := time.Now().Add(2 * time.Second); len(pids) > 0 && time.Now().Before(deadline); pids = ns.Pids() {
		time.Sleep(50 * time.Millisecond)
	}
	for _, pid := range ns.Pids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	var errs []error
	if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", ns.Name, err, bytes.TrimSpace(out)))
	}
	if err := os.RemoveAll(EtcDir(ns.Name)); err != nil {
		errs = append(errs, err)
	}
	_ = os.Remove("/etc/netns") // only if empty: other namespaces may still use it
	return errors.Join(errs...)
}

// EtcDir is the directory whose files `ip netns exec` bind-mounts over /etc.
func EtcDir(name string) string { return "/etc/netns/" + name }

// WriteEtc writes /etc/netns/NAME/file (resolv.conf, hosts) for commands run with Run/Command.
func (ns *NS) WriteEtc(file, content string) error {
	dir := EtcDir(ns.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(dir+"/"+file, []byte(content), 0o644)
}

// Veth connects a:aIf with b:bIf, both up.
func Veth(a *NS, aIf string, b *NS, bIf string) error {
	if _, err := a.Run("ip", "link", "add", aIf, "type", "veth", "peer", "name", bIf, "netns", b.Name); err != nil {
		return err
	}
	if _, err := a.Run("ip", "link", "set", aIf, "up"); err != nil {
		return err
	}
	_, err := b.Run("ip", "link", "set", bIf, "up")
	return err
}
