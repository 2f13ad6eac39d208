package bpffs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"ilnp/internal/nstest"
)

// The test binary plays the daemon when BPFFS_TEST_ROLE is set: run under `ip netns exec` it
// is in a private mount namespace, as ilnpd is there.
func TestMain(m *testing.M) {
	if role := os.Getenv("BPFFS_TEST_ROLE"); role != "" {
		if err := daemon(role, os.Getenv("BPFFS_TEST_DIR"), os.Getenv("BPFFS_TEST_STATE")); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// daemon is one daemon's life: "first" pins a map and ends, "again" finds it.
func daemon(role, dir, stateDir string) error {
	p, err := Prepare(dir, stateDir)
	if err != nil {
		return err
	}
	fmt.Printf("private=%v holder=%d mounted=%v dir=%s\n", PrivateMountNS(), p.Holder, p.Mounted, p.Dir)
	pin := filepath.Join(p.Dir, "sessions")
	switch role {
	case "first":
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 1})
		if err != nil {
			return err
		}
		defer m.Close()
		if err := m.Put(uint32(1), uint32(42)); err != nil {
			return err
		}
		return m.Pin(pin)
	case "again":
		m, err := ebpf.LoadPinnedMap(pin, nil)
		if err != nil {
			return fmt.Errorf("the first daemon's pin: %w", err)
		}
		defer m.Close()
		var v uint32
		if err := m.Lookup(uint32(1), &v); err != nil || v != 42 {
			return fmt.Errorf("pinned map holds %d (%v), want 42", v, err)
		}
		fmt.Println("found")
		return nil
	}
	return fmt.Errorf("role %q", role)
}

// Two daemons one after the other, each under `ip netns exec` (a private mount namespace
// that ends with it): what the first pinned, the second finds; Release ends the holder.
func TestPinsOutliveADaemonInAPrivateMountNamespace(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.New(t, "bpffs")
	state := t.TempDir()
	dir := filepath.Join(state, "bpf")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Release(dir, state) })
	run := func(role string) string {
		cmd := exec.Command("ip", "netns", "exec", ns.Name, self, "-test.run=^$")
		cmd.Env = append(os.Environ(), "BPFFS_TEST_ROLE="+role, "BPFFS_TEST_DIR="+dir, "BPFFS_TEST_STATE="+state)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("daemon %q: %v\n%s", role, err, out)
		}
		t.Logf("daemon %q: %s", role, strings.TrimSpace(string(out)))
		return string(out)
	}
	if out := run("first"); !strings.Contains(out, "private=true") || !strings.Contains(out, "mounted=true") ||
		strings.Contains(out, "holder=0 ") {
		t.Fatalf("first daemon: want a private mount namespace, a bpffs it mounted and a holder: %s", out)
	}
	if IsBPFFS(dir) {
		t.Fatal("the daemon's bpffs is visible in the test's mount namespace: the test proves nothing")
	}
	pid, ok := heldBy(state, dir)
	if !ok {
		t.Fatal("no holder keeps the first daemon's bpffs after it ended")
	}
	if out := run("again"); !strings.Contains(out, "found") || !strings.Contains(out, fmt.Sprintf("holder=%d ", pid)) {
		t.Fatalf("second daemon did not reach the pins through holder %d: %s", pid, out)
	}
	if err := Release(dir, state); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); running(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("holder %d still runs after Release", pid)
		}
	}
	if _, err := os.Stat(filepath.Join(state, HolderFile)); !os.IsNotExist(err) {
		t.Fatalf("holder file after Release: %v", err)
	}
}

// Outside a private mount namespace the bpffs mounted at dir is the persistent one: no holder.
func TestPrepareInThisMountNamespace(t *testing.T) {
	nstest.RequireRoot(t)
	state := t.TempDir()
	dir := filepath.Join(state, "bpf")
	p, err := Prepare(dir, state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Release(dir, state) })
	if p.Dir != dir || p.Holder != 0 || !p.Mounted || !IsBPFFS(dir) {
		t.Fatalf("Prepare = %+v (bpffs %v), want %s mounted here without a holder", p, IsBPFFS(dir), dir)
	}
	if again, err := Prepare(dir, state); err != nil || again.Mounted || again.Dir != dir {
		t.Fatalf("second Prepare = %+v, %v: want the same bpffs, not a second mount", again, err)
	}
	if err := Release(dir, state); err != nil || IsBPFFS(dir) {
		t.Fatalf("Release: %v (still a bpffs: %v)", err, IsBPFFS(dir))
	}
}

// running: pid exists and is not a zombie (a killed holder whose daemon is gone waits for
// init to reap it).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}
