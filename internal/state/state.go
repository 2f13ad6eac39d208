// Package state is the small file ilnpd keeps beside its pinned BPF maps: what a restarted
// daemon needs to take the running datapath over that the maps do not hold (the addresses and
// routes it added, the locators' ranking, the peers' names, what each correspondent was last
// told). It is written atomically (a temporary file renamed over the old one), so a crash
// leaves the previous version or the new one, never half of either, and it carries a version:
// a file of another version is refused, never half understood.
package state

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"ilnp/internal/wire"
)

// Version is the format of the file. A daemon refuses a file of another version (the way out
// is `ilnpd -flush`, which removes it with the datapath it describes).
const Version = 1

// FileName is the state file's name in the daemon's state directory.
const FileName = "ilnpd.state"

// maxSize bounds what Read accepts: the file is a few KB for hundreds of correspondents and
// some 130 bytes a correspondent (its entry and its peer route), 130 MB at a million (issue
// 28; 4 MB refused the file of 30,000).
const maxSize = 256 << 20

// File is what the daemon persists.
type File struct {
	Version int `json:"version"`
	// NID is the node's identifier (an ephemeral NID must survive a restart for the pinned
	// sessions to stay its own).
	NID wire.NID `json:"nid"`
	// Layout is the datapath layout the pinned maps were created with (datapath.Layout).
	Layout string `json:"layout"`
	// Locals are the local locators, best first (the handoff policy's ranking).
	Locals []Local `json:"locals,omitempty"`
	// Formed are the [L64:NID] addresses the daemon added to its interfaces.
	Formed []Address `json:"formed,omitempty"`
	// Identities are the /128 identity addresses it keeps on lo.
	Identities []netip.Addr `json:"identities,omitempty"`
	// PeerRoutes are the session-view addresses it routes with MTU headroom.
	PeerRoutes []netip.Addr `json:"peer_routes,omitempty"`
	// Peers are the correspondents registered by name (resolver, ilnpctl peer add).
	Peers []Peer `json:"peers,omitempty"`
	// Correspondents is, per session, what the correspondent was last told and whether it
	// acknowledged it.
	Correspondents []Correspondent `json:"correspondents,omitempty"`
	// Ephemeral are the live per-correspondent NIDs of nid-mode ephemeral.
	Ephemeral []Ephemeral `json:"ephemeral,omitempty"`
	// EphemeralAddrs are the ephemeral /128 addresses on the ILNP interfaces.
	EphemeralAddrs []Address `json:"ephemeral_addrs,omitempty"`
}

// Ephemeral is one correspondent and the NID this node uses towards it.
type Ephemeral struct {
	Peer wire.NID `json:"peer"`
	NID  wire.NID `json:"nid"`
}

// Local is one local locator.
type Local struct {
	Locator wire.L64 `json:"locator"`
	IfIndex int      `json:"ifindex"`
}

// Address is an address on an interface.
type Address struct {
	Addr    netip.Addr `json:"addr"`
	IfIndex int        `json:"ifindex"`
}

// Peer is one registered correspondent: its name and I-LVs, most preferred first.
type Peer struct {
	Name string     `json:"name"`
	ILVs []RankedIL `json:"ilvs"`
}

// RankedIL is one I-LV of a peer with its preference.
type RankedIL struct {
	Addr       netip.Addr `json:"addr"`
	Preference uint16     `json:"preference"`
}

// Correspondent is the LU state of one session.
type Correspondent struct {
	NID wire.NID `json:"nid"`
	// Advertised is the locator set last sent in an LU (or known to the correspondent when
	// the session opened), best first.
	Advertised []Advertised `json:"advertised,omitempty"`
	// Acked: the correspondent acknowledged Advertised (no LU was outstanding).
	Acked bool `json:"acked"`
}

// Advertised is one entry of an advertised locator set.
type Advertised struct {
	Locator    wire.L64 `json:"locator"`
	Preference uint16   `json:"preference"`
}

// Errors of Read.
var (
	// ErrNotExist: there is no state file (a first start, or after a flush).
	ErrNotExist = errors.New("no state file")
	// ErrVersion: the file was written by a daemon with another format.
	ErrVersion = errors.New("state file of another version")
)

// Path is the state file's path in dir.
func Path(dir string) string { return filepath.Join(dir, FileName) }

// Encode returns f as the file's bytes: compact JSON (`jq .` shows it indented). Indenting
// made a second copy of a file of 100,000 correspondents at every write, and the daemon's
// resident memory followed its peaks (issue 28).
func Encode(f File) ([]byte, error) {
	var b bytes.Buffer
	if err := EncodeTo(&b, f); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// EncodeTo writes Encode's bytes to w, one list entry at a time through a small buffer: the
// file of a million correspondents is some 130 MB, which encoding it whole held in memory
// twice over (the encoder's buffer growing by doubling; issue 28).
func EncodeTo(w io.Writer, f File) error {
	f.Version = Version
	bw := bufio.NewWriterSize(w, 64<<10)
	e := &encoder{w: bw}
	e.w.WriteByte('{')
	e.field("version", f.Version)
	e.field("nid", f.NID)
	e.field("layout", f.Layout)
	list(e, "locals", f.Locals)
	list(e, "formed", f.Formed)
	list(e, "identities", f.Identities)
	if len(f.PeerRoutes) > 0 {
		e.key("peer_routes")
		e.w.WriteByte('[')
		for i, a := range f.PeerRoutes {
			if i > 0 {
				e.w.WriteByte(',')
			}
			e.addr(a)
		}
		e.w.WriteByte(']')
	}
	list(e, "peers", f.Peers)
	if len(f.Correspondents) > 0 {
		e.key("correspondents")
		e.w.WriteByte('[')
		for i := range f.Correspondents {
			if i > 0 {
				e.w.WriteByte(',')
			}
			e.correspondent(&f.Correspondents[i])
		}
		e.w.WriteByte(']')
	}
	list(e, "ephemeral", f.Ephemeral)
	list(e, "ephemeral_addrs", f.EphemeralAddrs)
	e.w.WriteString("}\n")
	if e.err != nil {
		return fmt.Errorf("state: encode: %w", e.err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("state: encode: %w", err)
	}
	return nil
}

// encoder writes File's fields in its order, as encoding/json would (the omitempty lists
// left out when empty); the first error sticks.
type encoder struct {
	w    *bufio.Writer
	err  error
	more bool   // a field was written: the next needs a comma
	buf  []byte // scratch
}

func (e *encoder) key(name string) {
	if e.more {
		e.w.WriteByte(',')
	}
	e.more = true
	e.w.WriteByte('"')
	e.w.WriteString(name)
	e.w.WriteString(`":`)
}

func (e *encoder) value(v any) {
	if e.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		e.err = err
		return
	}
	e.w.Write(b)
}

func (e *encoder) field(name string, v any) {
	e.key(name)
	e.value(v)
}

// The lists with an entry per session are written by hand, byte for byte as encoding/json
// writes them (TestEncodeToIsJSON): its reflection took twice as long.

// addr writes a's JSON string (its text; no character of an address needs escaping but in a
// zone, which goes through encoding/json).
func (e *encoder) addr(a netip.Addr) {
	if a.Zone() != "" || !a.IsValid() {
		e.value(a)
		return
	}
	e.w.WriteByte('"')
	e.buf = a.AppendTo(e.buf[:0])
	e.w.Write(e.buf)
	e.w.WriteByte('"')
}

func (e *encoder) correspondent(c *Correspondent) {
	e.buf = append(e.buf[:0], `{"nid":`...)
	e.buf = strconv.AppendUint(e.buf, uint64(c.NID), 10)
	if len(c.Advertised) > 0 {
		e.buf = append(e.buf, `,"advertised":[`...)
		for i, a := range c.Advertised {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			e.buf = append(e.buf, `{"locator":`...)
			e.buf = strconv.AppendUint(e.buf, uint64(a.Locator), 10)
			e.buf = append(e.buf, `,"preference":`...)
			e.buf = strconv.AppendUint(e.buf, uint64(a.Preference), 10)
			e.buf = append(e.buf, '}')
		}
		e.buf = append(e.buf, ']')
	}
	e.buf = append(e.buf, `,"acked":`...)
	e.buf = strconv.AppendBool(e.buf, c.Acked)
	e.buf = append(e.buf, '}')
	e.w.Write(e.buf)
}

func list[T any](e *encoder, name string, xs []T) {
	if len(xs) == 0 {
		return
	}
	e.key(name)
	e.w.WriteByte('[')
	for i := range xs {
		if i > 0 {
			e.w.WriteByte(',')
		}
		e.value(xs[i])
	}
	e.w.WriteByte(']')
}

// Parse reads a state file's bytes strictly: unknown fields, a wrong version and invalid
// values are errors naming what is wrong.
func Parse(b []byte) (File, error) {
	var probe struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return File{}, fmt.Errorf("state: %w", err)
	}
	if probe.Version == nil {
		return File{}, errors.New("state: no version")
	}
	if *probe.Version != Version {
		return File{}, fmt.Errorf("state: %w: version %d, this ilnpd reads %d", ErrVersion, *probe.Version, Version)
	}
	var f File
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return File{}, fmt.Errorf("state: %w", err)
	}
	if dec.More() {
		return File{}, errors.New("state: trailing data after the object")
	}
	if err := f.validate(); err != nil {
		return File{}, fmt.Errorf("state: %w", err)
	}
	return f, nil
}

func (f File) validate() error {
	if f.NID == 0 {
		return errors.New("NID 0")
	}
	for _, l := range f.Locals {
		if l.Locator == 0 || l.IfIndex <= 0 {
			return fmt.Errorf("local locator %v on interface %d: invalid", l.Locator, l.IfIndex)
		}
	}
	for _, a := range f.Formed {
		if !a.Addr.Is6() || a.Addr.Is4In6() || a.IfIndex <= 0 {
			return fmt.Errorf("formed address %v on interface %d: invalid", a.Addr, a.IfIndex)
		}
	}
	for _, list := range [][]netip.Addr{f.Identities, f.PeerRoutes} {
		for _, a := range list {
			if !a.Is6() || a.Is4In6() {
				return fmt.Errorf("address %v: not IPv6", a)
			}
		}
	}
	for _, p := range f.Peers {
		if p.Name == "" || len(p.ILVs) == 0 {
			return fmt.Errorf("peer %q: no name or no I-LV", p.Name)
		}
		for _, v := range p.ILVs {
			if !v.Addr.Is6() || v.Addr.Is4In6() {
				return fmt.Errorf("peer %s: I-LV %v not IPv6", p.Name, v.Addr)
			}
		}
	}
	for _, c := range f.Correspondents {
		if c.NID == 0 {
			return errors.New("correspondent NID 0")
		}
	}
	return nil
}

// Read reads and parses the state file in dir; ErrNotExist when there is none.
func Read(dir string) (File, error) {
	fh, err := os.Open(Path(dir))
	if errors.Is(err, os.ErrNotExist) {
		return File{}, ErrNotExist
	}
	if err != nil {
		return File{}, fmt.Errorf("state: %w", err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxSize+1))
	if err != nil {
		return File{}, fmt.Errorf("state: read %s: %w", Path(dir), err)
	}
	if len(b) > maxSize {
		return File{}, fmt.Errorf("state: %s larger than %d bytes", Path(dir), maxSize)
	}
	f, err := Parse(b)
	if err != nil {
		return File{}, fmt.Errorf("%s: %w", Path(dir), err)
	}
	return f, nil
}

// Write replaces the state file in dir atomically with b (from Encode): a temporary file in
// the same directory renamed over the old one. The rename alone makes a crash of the daemon
// leave one whole version. It is not synced to disk: the file describes kernel state (pinned
// maps, addresses, routes) that a power loss ends too, and the daemon rewrites it whenever it
// changes, so an fsync would only stall the loop.
func Write(dir string, b []byte) error {
	return WriteFunc(dir, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// WriteFunc is Write with the file's bytes written by fn (EncodeTo), so that they need not be
// in memory at once.
func WriteFunc(dir string, fn func(io.Writer) error) error {
	_, _, err := WriteChanged(dir, Digest{}, fn)
	return err
}

// Digest is a state file's SHA-256.
type Digest [sha256.Size]byte

// WriteChanged is WriteFunc unless the bytes fn writes have the digest last (the file as last
// written): then the file is left as it is. It returns the bytes' digest and whether it
// replaced the file. The daemon so compares a file with the last one by digest, in the one
// pass that writes it, instead of keeping the last one's bytes (issue 28).
func WriteChanged(dir string, last Digest, fn func(io.Writer) error) (sum Digest, replaced bool, err error) {
	tmp, err := os.CreateTemp(dir, FileName+".tmp-*")
	if err != nil {
		return sum, false, fmt.Errorf("state: %w", err)
	}
	name := tmp.Name()
	h := sha256.New()
	werr := fn(io.MultiWriter(tmp, h))
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	h.Sum(sum[:0])
	switch {
	case werr != nil:
	case sum == last:
		_ = os.Remove(name)
		return sum, false, nil
	default:
		werr = os.Rename(name, Path(dir))
	}
	if werr != nil {
		_ = os.Remove(name)
		return sum, false, fmt.Errorf("state: write %s: %w", Path(dir), werr)
	}
	return sum, true, nil
}

// Remove deletes the state file (and temporary files a crash left).
func Remove(dir string) error {
	tmps, _ := filepath.Glob(filepath.Join(dir, FileName+".tmp-*"))
	for _, t := range tmps {
		_ = os.Remove(t)
	}
	if err := os.Remove(Path(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}
