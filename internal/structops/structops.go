// Package structops holds what every BPF tcp_congestion_ops (struct_ops) this project loads
// needs around the load: a name of its own written into the object before loading (the names are
// kernel-wide, so two daemons or a test and the lab must not collide), whether the kernel lists
// a name, and waiting for a closed registration to go (platform notes: an unregistration that is
// not waited for can leave the object behind).
package structops

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// AvailablePath lists the registered congestion controls (kernel-wide).
const AvailablePath = "/proc/sys/net/ipv4/tcp_available_congestion_control"

// nameLen is the size of tcp_congestion_ops.name (TCP_CA_NAME_MAX), NUL included.
const nameLen = 16

// SetName writes name into the struct_ops value's name member before the object is loaded.
func SetName(ms *ebpf.MapSpec, name string) error {
	if len(name) == 0 || len(name) >= nameLen {
		return fmt.Errorf("struct_ops name %q: want 1 to %d bytes", name, nameLen-1)
	}
	if ms == nil || ms.Type != ebpf.StructOpsMap || len(ms.Contents) != 1 {
		return errors.New("no struct_ops map in the object")
	}
	st, ok := ms.Value.(*btf.Struct)
	if !ok {
		return fmt.Errorf("struct_ops value is %T, not a struct", ms.Value)
	}
	val, ok := ms.Contents[0].Value.([]byte)
	if !ok {
		return fmt.Errorf("struct_ops contents are %T", ms.Contents[0].Value)
	}
	for _, m := range st.Members {
		if m.Name != "name" {
			continue
		}
		off := int(m.Offset.Bytes())
		if off+nameLen > len(val) {
			return errors.New("struct_ops name beyond the value")
		}
		var buf [nameLen]byte
		copy(buf[:], name)
		copy(val[off:off+nameLen], buf[:])
		return nil
	}
	return errors.New("struct_ops value has no name member")
}

// Registered says whether the kernel lists name as an available congestion control.
func Registered(name string) (bool, error) {
	b, err := os.ReadFile(AvailablePath)
	if err != nil {
		return false, fmt.Errorf("congestion controls: %w", err)
	}
	return slices.Contains(strings.Fields(string(bytes.TrimSpace(b))), name), nil
}

// WaitUnregistered waits, up to limit, until the kernel no longer lists name (after its
// struct_ops link was closed).
func WaitUnregistered(name string, limit time.Duration) error {
	for deadline := time.Now().Add(limit); ; time.Sleep(20 * time.Millisecond) {
		reg, err := Registered(name)
		if err != nil {
			return err
		}
		if !reg {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("congestion control %q still registered %v after closing its link", name, limit)
		}
	}
}
