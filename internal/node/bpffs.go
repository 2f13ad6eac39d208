package node

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mountBPFFS mounts a bpffs of the daemon's own at dir, unless dir already is one (mounted
// is false then): `ip netns exec` remounts /sys, so the system's /sys/fs/bpf is not a reliable
// place to pin maps for a daemon in a namespace.
func mountBPFFS(dir string) (mounted bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("bpffs directory: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return false, nil
	}
	if err := unix.Mount("bpffs", dir, "bpf", 0, "mode=0700"); err != nil {
		return false, fmt.Errorf("mount bpffs at %s: %w", dir, err)
	}
	return true, nil
}

// privateMountNS reports whether this process runs in a mount namespace other than init's
// (as under `ip netns exec`): a bpffs it mounts there goes away with the namespace, that is
// when the process ends, and the pins with it.
func privateMountNS() bool {
	self, err1 := os.Readlink("/proc/self/ns/mnt")
	init, err2 := os.Readlink("/proc/1/ns/mnt")
	return err1 == nil && err2 == nil && self != init
}

func unmountBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		return nil
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount bpffs %s: %w", dir, err)
	}
	return os.Remove(dir)
}
