// Package bpfmaps holds what the datapaths do alike with their BPF maps: pin them by name in a
// bpffs directory (or not at all), unpin them, and read per-CPU counters.
package bpfmaps

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
)

// PinOptions prepares spec for loading: with pinDir empty no map is pinned; otherwise the
// directory is created if missing and maps are pinned in it by name (those already pinned
// there are reused).
func PinOptions(spec *ebpf.CollectionSpec, pinDir string) (ebpf.CollectionOptions, error) {
	var copts ebpf.CollectionOptions
	if pinDir == "" {
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinNone
		}
		return copts, nil
	}
	if err := os.MkdirAll(pinDir, 0o700); err != nil {
		return copts, fmt.Errorf("pin directory: %w", err)
	}
	copts.Maps.PinPath = pinDir
	return copts, nil
}

// Unpin unpins those of maps that are pinned and removes pinDir if that leaves it empty.
func Unpin(pinDir string, maps ...*ebpf.Map) error {
	var errs []error
	for _, m := range maps {
		if m.IsPinned() {
			errs = append(errs, m.Unpin())
		}
	}
	_ = os.Remove(pinDir) // only if empty
	return errors.Join(errs...)
}

// SumPerCPU reads a per-CPU array of uint64 counters, names[i] at index i, and returns each
// summed over the CPUs, by name.
func SumPerCPU(m *ebpf.Map, names []string) (map[string]uint64, error) {
	out := make(map[string]uint64, len(names))
	var per []uint64
	for i, name := range names {
		if err := m.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("counter %s: %w", name, err)
		}
		var sum uint64
		for _, v := range per {
			sum += v
		}
		out[name] = sum
	}
	return out, nil
}
