package datapath

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"ilnp/internal/bpfmaps"
	"ilnp/internal/tcx"
)

// LayoutVersion is raised by hand when what a pinned map's key or value means changes while
// its BTF stays (a flag redefined, a unit changed); size, type, count and field order changes
// are caught by the hash in Layout anyway.
const LayoutVersion = 1

// layoutPin is the name of the one-entry map, pinned beside the datapath's maps, that records
// the layout they were created with.
const layoutPin = "ilnp_layout"

// layoutLen is the size of the layout record (a NUL-padded string).
const layoutLen = 64

// ErrLayoutMismatch: the maps pinned in the pin directory were made by an ilnpd with another
// layout. They are not adopted (their sessions cannot be read right); `ilnpd -flush` removes
// them.
var ErrLayoutMismatch = errors.New("pinned datapath has another layout")

// Layout names the layout of this binary's pinned maps: "v<LayoutVersion>-<hash>", the hash
// (SHA-256, first 8 bytes) taken over every pinned map's name, type, key and value size,
// maximum entries, flags and the fields of its key and value (names, offsets, types: a field
// moved within the same size changes it too), in name order. Two binaries with the same Layout can hand the
// pinned maps over to each other. It is computed once: parsing the embedded object takes
// milliseconds, and the daemon names its layout in the state file it keeps current.
func Layout() (string, error) { return layoutOnce() }

var layoutOnce = sync.OnceValues(func() (string, error) {
	spec, err := loadIlnpBPF()
	if err != nil {
		return "", fmt.Errorf("datapath: %w", err)
	}
	return layoutOf(spec), nil
})

func layoutOf(spec *ebpf.CollectionSpec) string {
	var lines []string
	for name, m := range spec.Maps {
		if m.Pinning != ebpf.PinByName {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s type=%v key=%d value=%d max=%d flags=%#x key=%s value=%s",
			name, m.Type, m.KeySize, m.ValueSize, m.MaxEntries, m.Flags,
			btfShape(m.Key, 0), btfShape(m.Value, 0)))
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return fmt.Sprintf("v%d-%s", LayoutVersion, hex.EncodeToString(sum[:8]))
}

// btfShape describes a map key or value type by its fields' names, bit offsets and types, so
// that a field moved within the same size shows. Nil (a map declared by size only) is "-".
func btfShape(t btf.Type, depth int) string {
	if t == nil {
		return "-"
	}
	if depth > 8 {
		return "..."
	}
	members := func(kind string, ms []btf.Member, size uint32) string {
		parts := make([]string, 0, len(ms))
		for _, m := range ms {
			parts = append(parts, fmt.Sprintf("%s@%d/%d:%s", m.Name, m.Offset, m.BitfieldSize, btfShape(m.Type, depth+1)))
		}
		return fmt.Sprintf("%s%d{%s}", kind, size, strings.Join(parts, ","))
	}
	switch v := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		return members("struct", v.Members, v.Size)
	case *btf.Union:
		return members("union", v.Members, v.Size)
	case *btf.Array:
		return fmt.Sprintf("[%d]%s", v.Nelems, btfShape(v.Type, depth+1))
	case *btf.Int:
		return fmt.Sprintf("int%d/%v", v.Size, v.Encoding)
	default:
		size, err := btf.Sizeof(v)
		if err != nil {
			return fmt.Sprintf("%T", v)
		}
		return fmt.Sprintf("%T/%d", v, size)
	}
}

// pinnedNames are the names of the maps the datapath pins.
func pinnedNames(spec *ebpf.CollectionSpec) []string {
	var out []string
	for name, m := range spec.Maps {
		if m.Pinning == ebpf.PinByName {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// checkLayout compares the layout recorded in pinDir with want. fresh is true when pinDir
// holds no pinned map yet (a first start or after a flush).
func checkLayout(spec *ebpf.CollectionSpec, pinDir, want string) (fresh bool, err error) {
	rec, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, layoutPin), nil)
	if errors.Is(err, os.ErrNotExist) {
		for _, name := range pinnedNames(spec) {
			if _, err := os.Stat(filepath.Join(pinDir, name)); err == nil {
				return false, layoutError(pinDir, "none recorded", want)
			}
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("datapath: open layout record in %s: %w", pinDir, err)
	}
	defer rec.Close()
	var v [layoutLen]byte
	if err := rec.Lookup(uint32(0), &v); err != nil {
		return false, fmt.Errorf("datapath: read layout record in %s: %w", pinDir, err)
	}
	have := string(bytes.TrimRight(v[:], "\x00"))
	if have != want {
		return false, layoutError(pinDir, have, want)
	}
	return false, nil
}

// layoutError is the refusal README.md documents ("Restart and upgrade").
func layoutError(pinDir, have, want string) error {
	return fmt.Errorf("datapath: %w: the maps pinned in %s have layout %s, this ilnpd needs %s; "+
		"their sessions cannot be adopted: run `ilnpd -flush -config FILE` (ends them) and start ilnpd again",
		ErrLayoutMismatch, pinDir, have, want)
}

// writeLayout records layout in pinDir.
func writeLayout(pinDir, layout string) error {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: layoutPin, Type: ebpf.Array, KeySize: 4, ValueSize: layoutLen, MaxEntries: 1})
	if err != nil {
		return fmt.Errorf("datapath: layout record: %w", err)
	}
	defer m.Close()
	var v [layoutLen]byte
	copy(v[:], layout)
	if err := m.Put(uint32(0), v); err != nil {
		return fmt.Errorf("datapath: layout record: %w", err)
	}
	path := filepath.Join(pinDir, layoutPin)
	_ = os.Remove(path)
	if err := m.Pin(path); err != nil {
		return fmt.Errorf("datapath: pin layout record: %w", err)
	}
	return nil
}

// Adopted reports how many TCX links Attach took over from a previous process (pinned links
// updated in place) since Load.
func (d *Datapath) Adopted() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.adoptedLinks
}

// attachPinned attaches with pinned links (Options.KeepPinned with a PinDir).
func (d *Datapath) attachPinned(ifindex int) error {
	n, err := d.links.AttachPinned(ifindex, d.objs.IlnpIngress, d.objs.IlnpEgress, d.opts.PinDir)
	if err != nil {
		return fmt.Errorf("datapath: %w", err)
	}
	d.mu.Lock()
	d.adoptedLinks += n
	d.mu.Unlock()
	return nil
}

// DetachOthers detaches the pinned programs of a previous process from interfaces this one
// did not attach to (taken out of the configuration), and returns how many links went.
func (d *Datapath) DetachOthers(attached []int) (int, error) {
	if d.opts.PinDir == "" || !d.opts.KeepPinned {
		return 0, nil
	}
	keep := map[int]bool{}
	for _, i := range attached {
		keep[i] = true
	}
	n, err := tcx.UnpinOthers(d.opts.PinDir, keep)
	if err != nil {
		return n, fmt.Errorf("datapath: %w", err)
	}
	return n, nil
}

// Flush detaches the programs, removes every pin (maps, links, the layout record) and frees
// everything: what a deliberate full stop does, as opposed to Close with KeepPinned.
func (d *Datapath) Flush() error {
	errs := []error{d.links.Unpin(d.opts.PinDir), d.events.Close()}
	if d.opts.PinDir != "" {
		errs = append(errs, bpfmaps.Unpin(d.opts.PinDir, d.maps()...), FlushPinned(d.opts.PinDir))
	}
	errs = append(errs, d.objs.Close())
	return errors.Join(errs...)
}

// FlushPinned removes what a datapath pinned in pinDir (its maps, links and layout record)
// without loading it: `ilnpd -flush` after the daemon has gone. Links are detached when their
// pin goes. The directory is removed if that leaves it empty.
func FlushPinned(pinDir string) error {
	spec, err := loadIlnpBPF()
	if err != nil {
		return fmt.Errorf("datapath: %w", err)
	}
	errs := []error{tcx.UnpinDir(pinDir)}
	for _, name := range append(pinnedNames(spec), layoutPin) {
		if err := os.Remove(filepath.Join(pinDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("datapath: unpin %s: %w", name, err))
		}
	}
	_ = os.Remove(pinDir) // only if empty
	return errors.Join(errs...)
}

func unpinLayout(pinDir string) error {
	if err := os.Remove(filepath.Join(pinDir, layoutPin)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("datapath: unpin layout record: %w", err)
	}
	return nil
}

// Entries counts the entries of the datapath's tables (sessions, peers, local
// locators and identifiers), by map name: what a long run must not grow.
func (d *Datapath) Entries() (map[string]int, error) {
	m := &d.objs.ilnpBPFMaps
	out := map[string]int{}
	for name, mp := range map[string]*ebpf.Map{ilnpBPFMapSessions: m.Sessions,
		ilnpBPFMapPeers: m.Peers, ilnpBPFMapLocalLocators: m.LocalLocators, ilnpBPFMapLocalNids: m.LocalNids} {
		k, v := make([]byte, mp.KeySize()), make([]byte, mp.ValueSize())
		it := mp.Iterate()
		n := 0
		for it.Next(&k, &v) {
			n++
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("datapath: count %s: %w", name, err)
		}
		out[name] = n
	}
	return out, nil
}
