// Package bpffs finds, or makes, the bpffs that ilnpd pins its datapath in, so that the pins
// outlive the daemon wherever it runs.
//
// A daemon started under `ip netns exec` (as the lab and many users run it) lives in a private
// mount namespace: a bpffs it mounts there, and every map and TCX link pinned in it, goes
// when the process ends, and the next daemon finds an empty directory. So when the daemon has
// to mount the bpffs itself inside a private mount namespace, it leaves a holder behind: a
// `sleep infinity` started in the same mount namespace, in a session of its own, whose pid is
// written to the state directory (a plain file, visible from every mount namespace). The next
// daemon, in a mount namespace of its own, reaches the same bpffs through the holder's root,
// /proc/PID/root/DIR. Release ends the holder when the datapath is flushed.
package bpffs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// HolderFile is the file in the state directory holding the holder's pid.
const HolderFile = "bpffs-holder"

// holderArgs is the holder's command line: any process that stays would do; this one needs
// nothing but coreutils and is recognisable in ps.
var holderArgs = []string{"sleep", "infinity"}

// Pins is where the datapath's pins live, as this process reaches them.
type Pins struct {
	Dir string // the directory to pin in
	// Holder is the pid of the process whose mount namespace keeps the bpffs (0: none, the
	// bpffs is in this process's or a persistent mount namespace).
	Holder int
	// Mounted: this call mounted the bpffs (in this process's mount namespace).
	Mounted bool
}

// Prepare returns where to pin for a daemon whose pin directory is dir and whose state
// directory is stateDir: dir itself when it already is a bpffs (mounted by the user, or by a
// daemon in this mount namespace); else the bpffs a holder left by an earlier daemon keeps;
// else dir with a bpffs mounted now, and a holder started for it when this process runs in
// a private mount namespace.
func Prepare(dir, stateDir string) (Pins, error) {
	if IsBPFFS(dir) {
		return Pins{Dir: dir}, nil
	}
	if pid, ok := heldBy(stateDir, dir); ok {
		return Pins{Dir: through(pid, dir), Holder: pid}, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Pins{}, fmt.Errorf("bpffs directory: %w", err)
	}
	if err := unix.Mount("bpffs", dir, "bpf", 0, "mode=0700"); err != nil {
		return Pins{}, fmt.Errorf("mount bpffs at %s: %w", dir, err)
	}
	p := Pins{Dir: dir, Mounted: true}
	if !PrivateMountNS() {
		return p, nil
	}
	pid, err := startHolder(stateDir)
	if err != nil {
		return p, err
	}
	p.Holder = pid
	return p, nil
}

// Locate returns where an earlier daemon's pins for dir are, without mounting anything: dir,
// or the bpffs a holder keeps (for `ilnpd -flush` and tools reading a stopped daemon's pins).
func Locate(dir, stateDir string) string {
	if !IsBPFFS(dir) {
		if pid, ok := heldBy(stateDir, dir); ok {
			return through(pid, dir)
		}
	}
	return dir
}

// Release ends what Prepare (in this daemon or an earlier one) set up for dir: the holder
// and its pid file, and a bpffs mounted at dir in this mount namespace. The pins themselves
// are the datapath's to remove first.
func Release(dir, stateDir string) error {
	var errs []error
	if pid, ok := heldBy(stateDir, dir); ok {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("end bpffs holder %d: %w", pid, err))
		}
	}
	if err := os.Remove(filepath.Join(stateDir, HolderFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("bpffs holder file: %w", err))
	}
	if IsBPFFS(dir) {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount bpffs %s: %w", dir, err))
		}
		_ = os.Remove(dir) // only if empty
	}
	return errors.Join(errs...)
}

// IsBPFFS reports whether dir is on a bpffs.
func IsBPFFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.BPF_FS_MAGIC
}

// PrivateMountNS reports whether this process runs in a mount namespace of its own, as under
// `ip netns exec`: one other than init's, or, where init's cannot be read (a sandbox), other
// than its parent's.
func PrivateMountNS() bool {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return false
	}
	for _, other := range []string{"/proc/1/ns/mnt", fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid())} {
		if ns, err := os.Readlink(other); err == nil {
			return ns != self
		}
	}
	return false
}

func through(pid int, dir string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", pid), dir)
}

// heldBy returns the holder that stateDir names, if that process is still a holder and dir
// is a bpffs in its mount namespace (a reused pid is neither).
func heldBy(stateDir, dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(stateDir, HolderFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Equal(cmdline, []byte(strings.Join(holderArgs, "\x00")+"\x00")) {
		return 0, false
	}
	if !IsBPFFS(through(pid, dir)) {
		return 0, false
	}
	return pid, true
}

func startHolder(stateDir string) (int, error) {
	cmd := exec.Command(holderArgs[0], holderArgs[1:]...)
	// A session of its own: the daemon's process group ending (Ctrl-C, a supervisor's
	// kill) must not take the bpffs with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start bpffs holder: %w", err)
	}
	pid := cmd.Process.Pid
	// Reaped when it ends: by this daemon while it runs, by init afterwards.
	go func() { _ = cmd.Wait() }()
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		_ = cmd.Process.Kill()
		return 0, fmt.Errorf("bpffs holder file: %w", err)
	}
	if err := os.WriteFile(filepath.Join(stateDir, HolderFile), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return 0, fmt.Errorf("bpffs holder file: %w", err)
	}
	return pid, nil
}
