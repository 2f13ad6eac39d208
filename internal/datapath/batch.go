package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// readBatch is how many entries one BPF_MAP_LOOKUP_BATCH call reads: more than a hash bucket
// ever holds (a smaller batch than a bucket fails with ENOSPC), few enough to keep the buffers
// small.
const readBatch = 4096

// readAll hands every entry of the hash map m to fn, read batchwise: one system call per
// readBatch entries instead of two per entry (NextKey and Lookup), which made listing 100,000
// sessions cost the daemon's loop a fifth of a second at every pass (issue 28). A kernel
// without batch operations falls back to the per-entry walk. Entries changed during the read
// may or may not be seen, as with any walk of a live hash map.
func readAll[K, V any](m *ebpf.Map, fn func(*K, *V)) error {
	return readUntil(m, func(k *K, v *V) bool { fn(k, v); return true })
}

// readUntil is readAll that stops when fn returns false.
func readUntil[K, V any](m *ebpf.Map, fn func(*K, *V) bool) error {
	keys := make([]K, readBatch)
	vals := make([]V, readBatch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			if !fn(&keys[i], &vals[i]) {
				return nil
			}
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil
		case errors.Is(err, ebpf.ErrNotSupported):
			if n > 0 {
				return fmt.Errorf("batch read stopped after %d entries: %w", n, err)
			}
			return readAllIterate(m, fn)
		case err != nil:
			return err
		}
	}
}

func readAllIterate[K, V any](m *ebpf.Map, fn func(*K, *V) bool) error {
	var (
		k K
		v V
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !fn(&k, &v) {
			return nil
		}
	}
	return it.Err()
}
