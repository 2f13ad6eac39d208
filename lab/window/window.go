// Package window holds the lab's TCP senders to the thesis's window (5.2: "the TCP window
// size was limited to 320 Kbytes"; 5.3.3 counts it as 320 * 1024 / 1400 ~ 234 segments).
//
// `iperf3 -w 320K` does not do that on this kernel: the receiver advertises its buffer times
// the measured payload/truesize ratio (about 410 KB for a 640 KB buffer), and neither the
// route's `window` metric nor TCP_WINDOW_CLAMP survives the next change of that ratio
// (tcp_measure_rcv_mss resets window_clamp). A Clamp therefore caps the sender: a cgroup
// of its own with a sock_ops program (bpf/window.c) that sets every connection's cwnd clamp
// to Bytes / MSS segments once it is established, so the data in flight never exceeds the
// window. Only processes started into the cgroup (Apply) are affected.
package window

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// ThesisBytes is the thesis's window: 320 Kbytes, counted as 320 * 1024 (5.3.3).
const ThesisBytes = 320 * 1024

// Counter indices (enum window_counter in bpf/window.c).
const (
	CounterClamped = iota
	CounterFailed
	CounterNoMSS
	CounterLastSegs
	CounterLastMSS
	numCounters
)

// Counters is what the program counted.
type Counters struct {
	Clamped  uint64 `json:"clamped"`   // connections whose cwnd was clamped
	Failed   uint64 `json:"failed"`    // bpf_setsockopt refused
	NoMSS    uint64 `json:"no_mss"`    // established without an MSS (left alone)
	LastSegs uint64 `json:"last_segs"` // the last clamp, segments
	LastMSS  uint64 `json:"last_mss"`  // the MSS it came from, bytes
}

// Segments is the clamp for a connection with this MSS (the program's arithmetic).
func Segments(bytes, mss int) int {
	if mss <= 0 {
		return 0
	}
	return max(2, bytes/mss)
}

// Clamp is a loaded program attached to its own cgroup.
type Clamp struct {
	Bytes int
	Dir   string // the cgroup
	dirFD *os.File
	coll  *ebpf.Collection
	link  link.Link
}

// CgroupRoot finds the cgroup v2 mount (the unified hierarchy; on a hybrid system it is not
// /sys/fs/cgroup itself).
func CgroupRoot() (string, error) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "", fmt.Errorf("cgroup2 mount: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == "cgroup2" {
			return f[1], nil
		}
	}
	return "", errors.New("no cgroup2 file system mounted")
}

// Start makes the cgroup ROOT/name and attaches the program with the window in bytes.
func Start(name string, bytes int) (c *Clamp, err error) {
	if bytes < 2*536 || name == "" || strings.ContainsAny(name, "/\x00") {
		return nil, fmt.Errorf("window clamp %q of %d bytes: want a plain name and at least two segments", name, bytes)
	}
	root, err := CgroupRoot()
	if err != nil {
		return nil, err
	}
	c = &Clamp{Bytes: bytes, Dir: filepath.Join(root, name)}
	if err := os.Mkdir(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("window clamp cgroup: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	if c.dirFD, err = os.Open(c.Dir); err != nil {
		return c, fmt.Errorf("window clamp cgroup: %w", err)
	}
	spec, err := loadWindowBPF()
	if err != nil {
		return c, fmt.Errorf("window clamp: %w", err)
	}
	v, ok := spec.Variables["window_bytes"]
	if !ok {
		return c, errors.New("window clamp: the object has no window_bytes")
	}
	if err := v.Set(uint32(bytes)); err != nil {
		return c, fmt.Errorf("window clamp: %w", err)
	}
	if c.coll, err = ebpf.NewCollection(spec); err != nil {
		return c, fmt.Errorf("window clamp: load: %w", err)
	}
	c.link, err = link.AttachCgroup(link.CgroupOptions{Path: c.Dir, Attach: ebpf.AttachCGroupSockOps, Program: c.coll.Programs["window_clamp"]})
	if err != nil {
		return c, fmt.Errorf("window clamp: attach to %s: %w", c.Dir, err)
	}
	return c, nil
}

// Apply makes cmd start inside the clamp's cgroup (clone3 CLONE_INTO_CGROUP); a nil Clamp
// leaves it alone.
func (c *Clamp) Apply(cmd *exec.Cmd) {
	if c == nil || c.dirFD == nil {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(c.dirFD.Fd())
}

// Counters reads the program's counters.
func (c *Clamp) Counters() (Counters, error) {
	var v [numCounters]uint64
	if c == nil || c.coll == nil {
		return Counters{}, errors.New("window clamp not loaded")
	}
	m := c.coll.Maps["window_counters"]
	for i := range v {
		if err := m.Lookup(uint32(i), &v[i]); err != nil {
			return Counters{}, fmt.Errorf("window counter %d: %w", i, err)
		}
	}
	return Counters{Clamped: v[CounterClamped], Failed: v[CounterFailed], NoMSS: v[CounterNoMSS],
		LastSegs: v[CounterLastSegs], LastMSS: v[CounterLastMSS]}, nil
}

// Close detaches the program and removes the cgroup (waiting up to 3 s for processes that are
// still leaving it). Safe to call twice.
func (c *Clamp) Close() error {
	if c == nil {
		return nil
	}
	var errs []error
	if c.link != nil {
		errs = append(errs, c.link.Close())
		c.link = nil
	}
	if c.coll != nil {
		c.coll.Close()
		c.coll = nil
	}
	if c.dirFD != nil {
		errs = append(errs, c.dirFD.Close())
		c.dirFD = nil
	}
	if c.Dir != "" {
		var err error
		for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if err = os.Remove(c.Dir); err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
				break
			}
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", c.Dir, err))
		}
		c.Dir = ""
	}
	return errors.Join(errs...)
}
