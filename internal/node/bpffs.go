package node

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mountBPFFS mounts a bpffs of the daemon's own at dir: `ip netns exec` remounts /sys, so the
// system's /sys/fs/bpf is not a reliable place to pin maps for a daemon in a namespace.
func mountBPFFS(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("bpffs directory: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := unix.Mount("bpffs", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs at %s: %w", dir, err)
	}
	return nil
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
