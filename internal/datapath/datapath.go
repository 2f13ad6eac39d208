package datapath

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"ilnp/internal/bpfmaps"
	"ilnp/internal/bpfring"
	"ilnp/internal/tcx"
	"ilnp/internal/wire"
)

// Options configure Load.
type Options struct {
	// PinDir is a directory on a bpffs where the maps are pinned by name (created if
	// missing). Maps already pinned there are reused, so sessions survive a restart. Empty:
	// no pinning.
	PinDir string
	// NonceSize is 4 (default) or 12 bytes (RFC 6744 s.2).
	NonceSize int
	// NonceFirstN 0 (default) puts the nonce on every packet (the thesis's choice: it is also
	// how a receiver tells ILNP from IPv6). N > 0 puts it only on a session's first N packets
	// and on every ICMPv6 message (RFC 6744 s.6).
	NonceFirstN uint32
	// EchoNonce makes a responder send the initiator's nonce back instead of its own, as the
	// thesis's Linux code does (RFC 6744 wants one nonce per direction).
	EchoNonce bool
	// AcceptUnknownLocator accepts a packet with the right nonce from a remote locator not in
	// the session's set (an event is still emitted); by default it is dropped.
	AcceptUnknownLocator bool
	// IPv6Checksums computes TCP and UDP checksums over the packet's real addresses, as plain
	// IPv6 does (draft-bhatti-ilnp-tcp-udp-checksums-00), instead of with both locators as zero
	// (RFC 6740/6741, RFC 6744 s.3; the default). Both ends must agree. Checksum-validating
	// tools such as tshark then see valid checksums.
	IPv6Checksums bool
	// NewSessionsPerSecond bounds the sessions incoming packets create (a token bucket with
	// one second's worth of burst); packets over it are dropped and counted as
	// ingress_sessions_limited, so a peer's retransmission gets through later. 0: no bound.
	NewSessionsPerSecond uint32
	// SessionTableSize is the size of the session table and of the LRU
	// map of embryonic responder sessions (bpf/lib/maps.h embryos), and a sixteenth of it the
	// least size of the map of remote locators past a session's first two (remote_more, 4096
	// otherwise) and the default of PathTableSize; 0: 65536.
	SessionTableSize uint32
	// EmbryoTableSize sizes the embryos map alone; 0: SessionTableSize.
	EmbryoTableSize uint32
	// PathTableSize sizes the LRU map of locator pairs other than each session's main one
	// (paths: a session's main pair counts in its own entry); 0: SessionTableSize/16, at least
	// 16384.
	PathTableSize uint32
	// EventRingSize is the bytes of the event ring to user space (events), a power of two and
	// a multiple of the page size; 0: 256 KiB (bpf/lib/maps.h).
	EventRingSize uint32
	// KeepPinned leaves the pinned maps in PinDir on Close, and pins the TCX links there too,
	// so the datapath keeps forwarding after the process ends; the next Load and Attach with
	// the same PinDir take both over (pin.go). Flush removes them.
	KeepPinned bool
}

// Datapath is the loaded BPF datapath. Its methods are safe for concurrent use.
type Datapath struct {
	opts   Options
	objs   ilnpBPFObjects
	mu     sync.Mutex
	links  tcx.Links
	events bpfring.Reader // the running Events stream, if any
	// openedPinned: maps only (OpenPinned), no programs.
	openedPinned bool
	adoptedLinks int // TCX links taken over from a previous process (pin.go)
	// peerKeys indexes the peers table's keys by NID (big-endian, as in the key), read from
	// the table once (peerKeysRead) and kept by PutPeer and DeletePeer (d.mu): a Locator
	// Update's rewrite looked for its correspondent's registered names with a pass over the
	// table, two system calls per entry, for every LU (issue 28).
	peerKeys     map[uint64][]ilnpBPFIlnpPeerKey
	peerKeysRead bool
}

// peerKeysOf returns the peers table's keys with the NID nid (big-endian; d.mu held).
func (d *Datapath) peerKeysOf(nid uint64) ([]ilnpBPFIlnpPeerKey, error) {
	if !d.peerKeysRead {
		keys, err := keysWhere[ilnpBPFIlnpPeerKey, ilnpBPFIlnpPeer](d.objs.Peers, func(*ilnpBPFIlnpPeerKey) bool { return true })
		if err != nil {
			return nil, err
		}
		d.peerKeys = map[uint64][]ilnpBPFIlnpPeerKey{}
		for _, k := range keys {
			d.peerKeys[k.Nid] = append(d.peerKeys[k.Nid], k)
		}
		d.peerKeysRead = true
	}
	return d.peerKeys[nid], nil
}

const (
	flagEchoNonce            = 1 << 0
	flagAcceptUnknownLocator = 1 << 1
	flagIPv6Checksums        = 1 << 2
)

// Load loads the programs and maps (reusing maps pinned in opts.PinDir) and writes the
// configuration. Nothing is attached yet: see Attach.
func Load(opts Options) (*Datapath, error) {
	if opts.NonceSize == 0 {
		opts.NonceSize = 4
	}
	if opts.NonceSize != 4 && opts.NonceSize != 12 {
		return nil, fmt.Errorf("datapath: nonce size %d, want 4 or 12 (RFC 6744 s.2)", opts.NonceSize)
	}
	spec, err := loadIlnpBPF()
	if err != nil {
		return nil, fmt.Errorf("datapath: %w", err)
	}
	if opts.SessionTableSize != 0 {
		for _, name := range []string{"sessions", "embryos"} {
			spec.Maps[name].MaxEntries = opts.SessionTableSize
		}
	}
	// A session's main pair counts in its entry; paths holds the pairs of the few sessions
	// with more than one (multihomed, multipath, just moved).
	if opts.PathTableSize != 0 {
		spec.Maps["paths"].MaxEntries = opts.PathTableSize
	} else if m := spec.Maps["paths"]; m.MaxEntries < opts.SessionTableSize/16 {
		m.MaxEntries = opts.SessionTableSize / 16
	}
	if opts.EmbryoTableSize != 0 {
		spec.Maps["embryos"].MaxEntries = opts.EmbryoTableSize
	}
	if opts.EventRingSize != 0 {
		spec.Maps["events"].MaxEntries = opts.EventRingSize
	}
	// Only sessions with more than sessionRemoteLocators remote locators have an entry.
	if m := spec.Maps["remote_more"]; m.MaxEntries < opts.SessionTableSize/16 {
		m.MaxEntries = opts.SessionTableSize / 16
	}
	copts, err := bpfmaps.PinOptions(spec, opts.PinDir)
	if err != nil {
		return nil, fmt.Errorf("datapath: %w", err)
	}
	d := &Datapath{opts: opts}
	layout := layoutOf(spec)
	fresh := false
	if opts.PinDir != "" {
		if fresh, err = checkLayout(spec, opts.PinDir, layout); err != nil {
			return nil, err
		}
	}
	if err := spec.LoadAndAssign(&d.objs, &copts); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("datapath: load: %+v", verr)
		}
		return nil, fmt.Errorf("datapath: load (pinned maps in %q from an older layout?): %w", opts.PinDir, err)
	}
	cfg, err := d.config()
	if err != nil {
		d.objs.Close()
		return nil, err
	}
	cfg.NonceLen = uint32(opts.NonceSize)
	cfg.NonceFirstN = opts.NonceFirstN
	cfg.NewSessionsPerS = opts.NewSessionsPerSecond
	cfg.Flags = 0
	if opts.EchoNonce {
		cfg.Flags |= flagEchoNonce
	}
	if opts.AcceptUnknownLocator {
		cfg.Flags |= flagAcceptUnknownLocator
	}
	if opts.IPv6Checksums {
		cfg.Flags |= flagIPv6Checksums
	}
	if err := d.objs.ConfigMap.Put(uint32(0), cfg); err != nil {
		d.objs.Close()
		return nil, fmt.Errorf("datapath: write config: %w", err)
	}
	table := opts.SessionTableSize
	if table == 0 {
		table = spec.Maps["sessions"].MaxEntries
	}
	if err := d.objs.UnprovenPool.Put(uint32(0), ilnpBPFIlnpUnprovenPool{Max: uint64(table / UnprovenPoolShare)}); err != nil {
		d.objs.Close()
		return nil, fmt.Errorf("datapath: write unproven pool: %w", err)
	}
	if _, err := d.RefillNonces(); err != nil {
		d.objs.Close()
		return nil, err
	}
	if opts.PinDir != "" && !fresh {
		if err := d.reflagSessions(); err != nil {
			d.objs.Close()
			return nil, err
		}
	}
	if fresh {
		if err := writeLayout(opts.PinDir, layout); err != nil {
			d.objs.Close()
			return nil, err
		}
	}
	return d, nil
}

func (d *Datapath) config() (ilnpBPFIlnpConfig, error) {
	var cfg ilnpBPFIlnpConfig
	if err := d.objs.ConfigMap.Lookup(uint32(0), &cfg); err != nil {
		return cfg, fmt.Errorf("datapath: read config: %w", err)
	}
	return cfg, nil
}

// Attach attaches the ingress and egress programs to the interface (TCX, in the network
// namespace of the calling thread).
func (d *Datapath) Attach(ifindex int) error {
	if d.openedPinned {
		return errPinnedOnly
	}
	if d.opts.KeepPinned && d.opts.PinDir != "" {
		return d.attachPinned(ifindex)
	}
	if err := d.links.Attach(ifindex, d.objs.IlnpIngress, d.objs.IlnpEgress); err != nil {
		return fmt.Errorf("datapath: %w", err)
	}
	return nil
}

// Detach removes the programs from the interface.
func (d *Datapath) Detach(ifindex int) error {
	attached, err := d.links.Detach(ifindex)
	if !attached {
		return fmt.Errorf("datapath: interface %d: %w", ifindex, ErrNotFound)
	}
	return err
}

// Close detaches every interface, unpins the maps (unless Options.KeepPinned) and frees
// everything.
func (d *Datapath) Close() error {
	errs := []error{d.links.Close(), d.events.Close()} // the latter ends the Events goroutine
	if d.opts.PinDir != "" && !d.opts.KeepPinned {
		errs = append(errs, unpinLayout(d.opts.PinDir), bpfmaps.Unpin(d.opts.PinDir, d.maps()...))
	}
	errs = append(errs, d.objs.Close())
	return errors.Join(errs...)
}

func (d *Datapath) maps() []*ebpf.Map {
	m := &d.objs.ilnpBPFMaps
	return []*ebpf.Map{m.ConfigMap, m.Counters, m.Embryos, m.Events, m.LocalLocators, m.LocalNids,
		m.NoncePool, m.Peers, m.Scratch, m.Sessions, m.EncapConfig, m.EncapCounters,
		m.Paths, m.ProbePairs, m.Multipath, m.Unverified, m.Encap6Pairs, m.RemoteMore}
}

// be64 converts between a locator or identifier value and the network-order bytes the BPF
// side keeps in a __be64 (the datapath only runs on little-endian hosts).
func be64(v uint64) uint64 { return bits.ReverseBytes64(v) }

// SetLocalNID registers one of this host's identifiers. identity is the locator of the
// identity address sockets bind to (the /128 on lo); sessions opened by a correspondent use it
// as their local view (0: the locator the first packet arrived on).
func (d *Datapath) SetLocalNID(nid wire.NID, identity wire.L64) error {
	if nid == 0 {
		return errors.New("datapath: local NID 0")
	}
	v := ilnpBPFIlnpLocalNid{Identity: be64(uint64(identity))}
	if err := d.objs.LocalNids.Put(be64(uint64(nid)), v); err != nil {
		return fmt.Errorf("datapath: set local NID %v: %w", nid, err)
	}
	return nil
}

// DeleteLocalNID removes one of this host's identifiers.
func (d *Datapath) DeleteLocalNID(nid wire.NID) error {
	return wrapDelete(d.objs.LocalNids.Delete(be64(uint64(nid))), "local NID %v", nid)
}

// LocalNIDs lists this host's identifiers.
func (d *Datapath) LocalNIDs() ([]wire.NID, error) {
	var (
		k   uint64
		v   ilnpBPFIlnpLocalNid
		out []wire.NID
	)
	it := d.objs.LocalNids.Iterate()
	for it.Next(&k, &v) {
		out = append(out, wire.NID(be64(k)))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("datapath: list local NIDs: %w", err)
	}
	return out, nil
}

// SetActiveLocator sets the host-wide active local locator: every session without its own
// LocalLocator sends from it. 0 keeps the session view's locator.
func (d *Datapath) SetActiveLocator(l wire.L64) error {
	return d.updateConfig(fmt.Sprintf("set active locator %v", l), func(cfg *ilnpBPFIlnpConfig) {
		cfg.ActiveLocal = be64(uint64(l))
	})
}

// UnprovenPoolShare: at most 1/UnprovenPoolShare of the session table holds sessions only an
// Echo Reply promoted (SessionUnproven, bpf/lib/maps.h unproven_pool).
const UnprovenPoolShare = 4

// SetUnprovenCount tells the datapath how many sessions of the table are SessionUnproven now
// (the daemon's sweep counts them; the datapath adds its promotions in between).
func (d *Datapath) SetUnprovenCount(n uint64) error {
	var p ilnpBPFIlnpUnprovenPool
	if err := d.objs.UnprovenPool.Lookup(uint32(0), &p); err != nil {
		return fmt.Errorf("datapath: read unproven pool: %w", err)
	}
	p.Count = n
	if err := d.objs.UnprovenPool.Put(uint32(0), p); err != nil {
		return fmt.Errorf("datapath: write unproven pool: %w", err)
	}
	return nil
}

// SetNewSessionsPerSecond changes Options.NewSessionsPerSecond of a loaded datapath.
func (d *Datapath) SetNewSessionsPerSecond(rate uint32) error {
	return d.updateConfig("set new sessions per second", func(cfg *ilnpBPFIlnpConfig) {
		cfg.NewSessionsPerS = rate
	})
}

// updateConfig changes one field of config_map: read, change, write under d.mu, so two setters
// never undo each other.
func (d *Datapath) updateConfig(what string, change func(*ilnpBPFIlnpConfig)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cfg, err := d.config()
	if err != nil {
		return err
	}
	change(&cfg)
	if err := d.objs.ConfigMap.Put(uint32(0), cfg); err != nil {
		return fmt.Errorf("datapath: %s: %w", what, err)
	}
	return nil
}

// ActiveLocator returns the host-wide active local locator.
func (d *Datapath) ActiveLocator() (wire.L64, error) {
	cfg, err := d.config()
	return wire.L64(be64(cfg.ActiveLocal)), err
}

// PutLocalLocator adds or replaces one of this host's locators.
func (d *Datapath) PutLocalLocator(l LocalLocator) error {
	if l.Locator == 0 || !l.State.valid() {
		return fmt.Errorf("datapath: local locator %v state %v: invalid", l.Locator, l.State)
	}
	if l.NextHop.IsValid() && (!l.NextHop.Is6() || l.NextHop.Is4In6()) {
		return fmt.Errorf("datapath: local locator %v: next hop %v is not IPv6", l.Locator, l.NextHop)
	}
	v := ilnpBPFIlnpLocalLocator{State: uint32(l.State), Ifindex: uint32(l.Ifindex)}
	if l.NextHop.IsValid() {
		v.Nexthop = l.NextHop.As16()
	}
	if err := d.objs.LocalLocators.Put(be64(uint64(l.Locator)), v); err != nil {
		return fmt.Errorf("datapath: put local locator %v: %w", l.Locator, err)
	}
	return nil
}

// DeleteLocalLocator removes one of this host's locators.
func (d *Datapath) DeleteLocalLocator(l wire.L64) error {
	return wrapDelete(d.objs.LocalLocators.Delete(be64(uint64(l))), "local locator %v", l)
}

// LocalLocators lists this host's locators.
func (d *Datapath) LocalLocators() ([]LocalLocator, error) {
	var (
		k   uint64
		v   ilnpBPFIlnpLocalLocator
		out []LocalLocator
	)
	it := d.objs.LocalLocators.Iterate()
	for it.Next(&k, &v) {
		l := LocalLocator{Locator: wire.L64(be64(k)), State: LocatorState(v.State), Ifindex: int(v.Ifindex)}
		if nh := netip.AddrFrom16(v.Nexthop); !nh.IsUnspecified() {
			l.NextHop = nh
		}
		out = append(out, l)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("datapath: list local locators: %w", err)
	}
	return out, nil
}

func remoteToBPF(locs []RemoteLocator) ([8]ilnpBPFIlnpRemoteLocator, error) {
	var out [8]ilnpBPFIlnpRemoteLocator
	if len(locs) > MaxRemoteLocators {
		return out, fmt.Errorf("%d remote locators, at most %d", len(locs), MaxRemoteLocators)
	}
	for i, l := range locs {
		if l.Locator == 0 || !l.State.valid() {
			return out, fmt.Errorf("remote locator %v state %v: invalid", l.Locator, l.State)
		}
		out[i] = ilnpBPFIlnpRemoteLocator{L64: be64(uint64(l.Locator)), State: uint32(l.State),
			Preference: l.Preference, Lifetime: l.Lifetime}
	}
	return out, nil
}

func remoteFromBPF(in [8]ilnpBPFIlnpRemoteLocator) []RemoteLocator {
	var out []RemoteLocator
	for _, l := range in {
		if l.L64 == 0 && l.State == 0 {
			continue
		}
		out = append(out, RemoteLocator{Locator: wire.L64(be64(l.L64)), State: LocatorState(l.State),
			Preference: l.Preference, Lifetime: l.Lifetime})
	}
	return out
}

// splitRemote divides a remote locator set between the session table entry and remote_more;
// more: the set does not fit the entry.
func splitRemote(set [MaxRemoteLocators]ilnpBPFIlnpRemoteLocator) (own [sessionRemoteLocators]ilnpBPFIlnpRemoteLocator, rest ilnpBPFIlnpRemoteMore, more bool) {
	copy(own[:], set[:sessionRemoteLocators])
	copy(rest.Remote[:], set[sessionRemoteLocators:])
	return own, rest, rest.Remote[0] != ilnpBPFIlnpRemoteLocator{}
}

// remoteSet is the whole remote locator set of the session k (v its table entry).
func (d *Datapath) remoteSet(k ilnpBPFIlnpSessionKey, v *ilnpBPFIlnpSession) ([MaxRemoteLocators]ilnpBPFIlnpRemoteLocator, error) {
	var set [MaxRemoteLocators]ilnpBPFIlnpRemoteLocator
	copy(set[:], v.Remote[:])
	if SessionFlags(v.Flags)&sessionMoreRemote == 0 {
		return set, nil
	}
	var rest ilnpBPFIlnpRemoteMore
	if err := d.objs.RemoteMore.Lookup(k, &rest); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return set, nil
		}
		return set, fmt.Errorf("datapath: remote locators of session %v-%v: %w", be64(k.LocalNid), be64(k.RemoteNid), err)
	}
	copy(set[sessionRemoteLocators:], rest.Remote[:])
	return set, nil
}

func peerKey(a netip.Addr) (ilnpBPFIlnpPeerKey, error) {
	v, err := wire.ILVFromAddr(a)
	if err != nil {
		return ilnpBPFIlnpPeerKey{}, err
	}
	return ilnpBPFIlnpPeerKey{L64: be64(uint64(v.Locator)), Nid: be64(uint64(v.NID))}, nil
}

// PutPeer registers an ILNP correspondent: the first packet from this host to p.Addr opens a
// session with p's locators.
func (d *Datapath) PutPeer(p Peer) error {
	k, err := peerKey(p.Addr)
	if err != nil {
		return fmt.Errorf("datapath: put peer: %w", err)
	}
	remote, err := remoteToBPF(p.Locators)
	if err != nil {
		return fmt.Errorf("datapath: put peer %v: %w", p.Addr, err)
	}
	v := ilnpBPFIlnpPeer{RemoteActive: be64(uint64(p.Active)), Remote: remote, Flags: uint32(p.Flags)}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.objs.Peers.Put(k, v); err != nil {
		return fmt.Errorf("datapath: put peer %v: %w", p.Addr, err)
	}
	if d.peerKeysRead && !slices.Contains(d.peerKeys[k.Nid], k) {
		d.peerKeys[k.Nid] = append(d.peerKeys[k.Nid], k)
	}
	return nil
}

// DeletePeer forgets a correspondent (its sessions stay).
func (d *Datapath) DeletePeer(addr netip.Addr) error {
	k, err := peerKey(addr)
	if err != nil {
		return fmt.Errorf("datapath: delete peer: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.peerKeysRead {
		d.peerKeys[k.Nid] = slices.DeleteFunc(d.peerKeys[k.Nid], func(x ilnpBPFIlnpPeerKey) bool { return x == k })
		if len(d.peerKeys[k.Nid]) == 0 {
			delete(d.peerKeys, k.Nid)
		}
	}
	return wrapDelete(d.objs.Peers.Delete(k), "peer %v", addr)
}

// Peers lists the registered correspondents.
func (d *Datapath) Peers() ([]Peer, error) {
	var (
		k   ilnpBPFIlnpPeerKey
		v   ilnpBPFIlnpPeer
		out []Peer
	)
	it := d.objs.Peers.Iterate()
	for it.Next(&k, &v) {
		out = append(out, Peer{
			Addr:     wire.ILV{Locator: wire.L64(be64(k.L64)), NID: wire.NID(be64(k.Nid))}.Addr(),
			Active:   wire.L64(be64(v.RemoteActive)),
			Locators: remoteFromBPF(v.Remote),
			Flags:    SessionFlags(v.Flags),
		})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("datapath: list peers: %w", err)
	}
	return out, nil
}

func sessionKey(local, remote wire.NID) ilnpBPFIlnpSessionKey {
	return ilnpBPFIlnpSessionKey{LocalNid: be64(uint64(local)), RemoteNid: be64(uint64(remote))}
}

func nonceFrom(b [12]uint8, n uint8) wire.Nonce {
	if n != 4 && n != 12 {
		return wire.Nonce{}
	}
	nonce, _ := wire.NonceFromBytes(b[:n])
	return nonce
}

// sessionFromBPF is the session k with its table entry v and its whole remote locator set.
func sessionFromBPF(k ilnpBPFIlnpSessionKey, v *ilnpBPFIlnpSession, remote [MaxRemoteLocators]ilnpBPFIlnpRemoteLocator) Session {
	return Session{
		LocalNID:       wire.NID(be64(k.LocalNid)),
		RemoteNID:      wire.NID(be64(k.RemoteNid)),
		LocalView:      wire.L64(be64(v.LocalView)),
		RemoteView:     wire.L64(be64(v.RemoteView)),
		LocalLocator:   wire.L64(be64(v.LocalLocator)),
		RemoteActive:   wire.L64(be64(v.RemoteActive)),
		RemoteLocators: remoteFromBPF(remote),
		LocalNonce:     nonceFrom(v.LocalNonce, v.LocalNonceLen),
		RemoteNonce:    nonceFrom(v.RemoteNonce, v.RemoteNonceLen),
		Flags:          SessionFlags(v.Flags) &^ sessionMoreRemote,
		TxPackets:      v.TxPackets,
		RxPackets:      v.RxPackets,
		CreatedNs:      v.CreatedNs,
		LastTxNs:       v.LastTxNs,
		LastRxNs:       v.LastRxNs,
	}
}

// PutSession creates or replaces a session (statistics are kept when it exists). A zero
// LocalNonce gets a fresh random one of the configured size.
func (d *Datapath) PutSession(s Session) error {
	if s.LocalNID == 0 || s.RemoteNID == 0 || s.LocalView == 0 || s.RemoteView == 0 {
		return fmt.Errorf("datapath: put session %v-%v: NIDs and view locators must be set", s.LocalNID, s.RemoteNID)
	}
	if s.LocalNonce.IsZero() {
		n, err := wire.RandomNonce(d.opts.NonceSize)
		if err != nil {
			return fmt.Errorf("datapath: put session: %w", err)
		}
		s.LocalNonce = n
	}
	remote, err := remoteToBPF(s.RemoteLocators)
	if err != nil {
		return fmt.Errorf("datapath: put session %v-%v: %w", s.LocalNID, s.RemoteNID, err)
	}
	own, rest, more := splitRemote(remote)
	d.mu.Lock()
	defer d.mu.Unlock()
	k := sessionKey(s.LocalNID, s.RemoteNID)
	var v ilnpBPFIlnpSession
	exists := false
	if err := d.objs.Sessions.Lookup(k, &v); err == nil {
		exists = true
	} else {
		v = ilnpBPFIlnpSession{CreatedNs: MonotonicNs()}
	}
	mapFlags := SessionFlags(v.Flags) & sessionMapFlags
	hadMore := SessionFlags(v.Flags)&sessionMoreRemote != 0
	v.LocalView = be64(uint64(s.LocalView))
	v.RemoteView = be64(uint64(s.RemoteView))
	v.LocalLocator = be64(uint64(s.LocalLocator))
	v.RemoteActive = be64(uint64(s.RemoteActive))
	v.Remote = own
	v.LocalNonce, v.LocalNonceLen = [12]uint8{}, uint8(s.LocalNonce.Len())
	copy(v.LocalNonce[:], s.LocalNonce.Bytes())
	// A zero remote nonce is the caller not knowing it yet, never a reason to forget one the
	// packet path learned meanwhile (an initiator's session learns the responder's nonce from
	// its first packet while the daemon is still recording the session: erased, the ILCC never
	// got it, and every LU-ACK of the peer was refused).
	if learned := nonceFrom(v.RemoteNonce, v.RemoteNonceLen); exists && s.RemoteNonce.IsZero() && !learned.IsZero() {
		s.RemoteNonce = learned
	}
	v.RemoteNonce, v.RemoteNonceLen = [12]uint8{}, uint8(s.RemoteNonce.Len())
	copy(v.RemoteNonce[:], s.RemoteNonce.Bytes())
	if !exists {
		mapFlags = d.mapFlagsOf(k, v.RemoteActive, remote)
	}
	if more {
		// Before the entry that flags it: the packet path never sees the flag without it.
		if err := d.objs.RemoteMore.Put(k, &rest); err != nil {
			return fmt.Errorf("datapath: put session %v-%v: remote locators past %d: %w", s.LocalNID, s.RemoteNID, sessionRemoteLocators, err)
		}
		mapFlags |= sessionMoreRemote
	}
	v.Flags = uint32(s.Flags&^(sessionMapFlags|sessionMoreRemote) | mapFlags)
	if err := d.objs.Sessions.Put(k, &v); err != nil {
		return fmt.Errorf("datapath: put session %v-%v: %w", s.LocalNID, s.RemoteNID, err)
	}
	if hadMore && !more {
		_ = d.objs.RemoteMore.Delete(k)
	}
	return nil
}

// GetSession returns the session between a local and a remote NID.
func (d *Datapath) GetSession(local, remote wire.NID) (Session, error) {
	k := sessionKey(local, remote)
	var v ilnpBPFIlnpSession
	err := lookupSessionOrEmbryo(
		func() error { return d.objs.Sessions.Lookup(k, &v) },
		func() error { return d.objs.Embryos.Lookup(k, &v) })
	if err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return Session{}, fmt.Errorf("datapath: session %v-%v: %w", local, remote, ErrNotFound)
		}
		return Session{}, fmt.Errorf("datapath: session %v-%v: %w", local, remote, err)
	}
	set, err := d.remoteSet(k, &v)
	if err != nil {
		return Session{}, err
	}
	return sessionFromBPF(k, &v, set), nil
}

// lookupSessionOrEmbryo reads a session from the session table, else from the embryos. The
// datapath promotes an embryo while this runs (bpf/lib/session.h ilnp_promote_embryo: into
// the session table first, then out of the embryos), so a miss in both can be a promotion
// that happened between the two reads: the session table is read once more. Without that, an
// LU that arrived with the packet that promoted its session was dropped as sessionless, and its
// sender retried only after 1 s.
func lookupSessionOrEmbryo(session, embryo func() error) error {
	err := session()
	if !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	if err = embryo(); !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return session()
}

// DeleteSession removes a session.
func (d *Datapath) DeleteSession(local, remote wire.NID) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := d.GetSession(local, remote)
	if err != nil {
		return err
	}
	if s.Flags&SessionEmbryonic != 0 {
		return wrapDelete(d.objs.Embryos.Delete(sessionKey(local, remote)), "embryonic session %v-%v", local, remote)
	}
	if s.Flags&SessionRemotePinned != 0 {
		_ = d.objs.RemotePins.Delete(sessionKey(local, remote))
	}
	err = wrapDelete(d.objs.Sessions.Delete(sessionKey(local, remote)), "session %v-%v", local, remote)
	if len(s.RemoteLocators) > sessionRemoteLocators {
		_ = d.objs.RemoteMore.Delete(sessionKey(local, remote))
	}
	return err
}

// EachSession calls fn with every session of the table, in no order, read batchwise: Sessions
// without the list (a table of 100,000 sessions made a list of some 30 MB; issue 28).
func (d *Datapath) EachSession(fn func(Session)) error {
	var setErr error
	if err := readAll(d.objs.Sessions, func(k *ilnpBPFIlnpSessionKey, v *ilnpBPFIlnpSession) {
		set, err := d.remoteSet(*k, v)
		if err != nil && setErr == nil {
			setErr = err
		}
		fn(sessionFromBPF(*k, v, set))
	}); err != nil {
		return fmt.Errorf("datapath: list sessions: %w", err)
	}
	if setErr != nil {
		return fmt.Errorf("datapath: list sessions: %w", setErr)
	}
	return nil
}

// Sessions lists every session.
func (d *Datapath) Sessions() ([]Session, error) {
	var out []Session
	if err := d.EachSession(func(s Session) { out = append(out, s) }); err != nil {
		return nil, err
	}
	return out, nil
}

// SetRemoteLocators replaces the remote locator set and the active remote locator of every
// session with the remote NID, and of every registered peer with that NID (so sessions opened
// later start with it). It returns how many sessions changed; with none it returns ErrNotFound
// (the peers are still updated).
func (d *Datapath) SetRemoteLocators(remote wire.NID, locs []RemoteLocator, active wire.L64) (int, error) {
	return d.setRemoteLocators(nil, remote, locs, active)
}

// SetRemoteLocatorsOf is SetRemoteLocators for the sessions between the local NIDs locals and
// remote only, read and written by key: no pass over the session table, which took one per
// Locator Update (a correspondent with 100,000 sessions answered a few LUs a second; issue
// 28). The node knows every local NID a session with remote can have (its stable NID and the
// ephemeral one it gave remote), as for DeleteSession.
func (d *Datapath) SetRemoteLocatorsOf(locals []wire.NID, remote wire.NID, locs []RemoteLocator, active wire.L64) (int, error) {
	if len(locals) == 0 {
		return 0, fmt.Errorf("datapath: set remote locators of %v: no local NID", remote)
	}
	return d.setRemoteLocators(locals, remote, locs, active)
}

// setRemoteLocators writes the remote locator set into the peers and into the sessions with
// remote: those of the local NIDs locals, or with nil every one the session table has.
func (d *Datapath) setRemoteLocators(locals []wire.NID, remote wire.NID, locs []RemoteLocator, active wire.L64) (int, error) {
	set, err := remoteToBPF(locs)
	if err != nil {
		return 0, fmt.Errorf("datapath: set remote locators of %v: %w", remote, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	nid := be64(uint64(remote))
	peerKeys, err := d.peerKeysOf(nid)
	if err != nil {
		return 0, fmt.Errorf("datapath: peers of %v: %w", remote, err)
	}
	if _, err = updateKeys(d.objs.Peers, peerKeys,
		func(v *ilnpBPFIlnpPeer) { v.Remote, v.RemoteActive = set, be64(uint64(active)) }); err != nil {
		return 0, fmt.Errorf("datapath: update peers of %v: %w", remote, err)
	}
	var keys []ilnpBPFIlnpSessionKey
	if locals == nil {
		if keys, err = keysWhere[ilnpBPFIlnpSessionKey, ilnpBPFIlnpSession](d.objs.Sessions,
			func(k *ilnpBPFIlnpSessionKey) bool { return k.RemoteNid == nid }); err != nil {
			return 0, fmt.Errorf("datapath: sessions with %v: %w", remote, err)
		}
	}
	for _, l := range locals {
		keys = append(keys, sessionKey(l, remote))
	}
	// The BPF side updates only counters, timestamps and a learned nonce in place; a
	// read-modify-write here can at worst lose a packet count.
	own, rest, more := splitRemote(set)
	n := 0
	for _, k := range keys {
		var v ilnpBPFIlnpSession
		if err := d.objs.Sessions.Lookup(k, &v); err != nil {
			continue
		}
		hadMore := SessionFlags(v.Flags)&sessionMoreRemote != 0
		v.Flags &^= uint32(sessionMoreRemote)
		if more {
			if err := d.objs.RemoteMore.Put(k, &rest); err != nil {
				return n, fmt.Errorf("datapath: set remote locators of %v: past %d: %w", remote, sessionRemoteLocators, err)
			}
			v.Flags |= uint32(sessionMoreRemote)
		}
		v.Remote, v.RemoteActive = own, be64(uint64(active))
		if err := d.objs.Sessions.Put(k, &v); err != nil {
			return n, fmt.Errorf("datapath: set remote locators of %v: %w", remote, err)
		}
		if hadMore && !more {
			_ = d.objs.RemoteMore.Delete(k)
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("datapath: sessions with %v: %w", remote, ErrNotFound)
	}
	return n, nil
}

// Counters returns every datapath counter summed over the CPUs, by name (CounterNames).
func (d *Datapath) Counters() (map[string]uint64, error) {
	out, err := bpfmaps.SumPerCPU(d.objs.Counters, counterNames)
	if err != nil {
		return nil, fmt.Errorf("datapath: %w", err)
	}
	return out, nil
}

// EventsLost is how many events the datapath could not put in the full ring so far
// (counter events_lost): when it moves, the reader has missed some, maybe a new session's.
func (d *Datapath) EventsLost() (uint64, error) {
	var per []uint64
	if err := d.objs.Counters.Lookup(uint32(slices.Index(counterNames, "events_lost")), &per); err != nil {
		return 0, fmt.Errorf("datapath: counter events_lost: %w", err)
	}
	var sum uint64
	for _, v := range per {
		sum += v
	}
	return sum, nil
}

// RefillNonces tops the pool of crypto/rand nonces up to its capacity and returns how many
// were added. Sessions the datapath creates on its own take their local nonce from it
// (RFC 6744 s.7); Events calls it after every new session.
func (d *Datapath) RefillNonces() (int, error) {
	added := 0
	buf := make([]byte, 12*64)
	for {
		if _, err := rand.Read(buf); err != nil {
			return added, fmt.Errorf("datapath: nonce pool: %w", err)
		}
		for i := 0; i < 64; i++ {
			var n [12]byte
			copy(n[:], buf[i*12:])
			if err := d.objs.NoncePool.Update(nil, n, ebpf.UpdateAny); err != nil {
				if errors.Is(err, unix.E2BIG) {
					return added, nil
				}
				return added, fmt.Errorf("datapath: nonce pool: %w", err)
			}
			added++
		}
	}
}

func wrapDelete(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf(format, args...)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("datapath: %s: %w", what, ErrNotFound)
	}
	return fmt.Errorf("datapath: delete %s: %w", what, err)
}

// keysWhere collects the keys of m that match.
func keysWhere[K, V any](m *ebpf.Map, match func(*K) bool) ([]K, error) {
	var (
		k    K
		v    V
		keys []K
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		if match(&k) {
			keys = append(keys, k)
		}
	}
	return keys, it.Err()
}

// updateWhere rewrites, with update, every entry of m whose key matches, and returns how many it
// rewrote. Keys are collected first: changing a hash map while iterating it may revisit or skip
// entries. An entry deleted in between is skipped.
func updateWhere[K, V any](m *ebpf.Map, match func(*K) bool, update func(*V)) (int, error) {
	keys, err := keysWhere[K, V](m, match)
	if err != nil {
		return 0, err
	}
	return updateKeys(m, keys, update)
}

// updateKeys rewrites, with update, the entries of m with these keys that exist, and returns how
// many it rewrote.
func updateKeys[K, V any](m *ebpf.Map, keys []K, update func(*V)) (int, error) {
	var v V
	n := 0
	for _, key := range keys {
		if err := m.Lookup(key, &v); err != nil {
			continue
		}
		update(&v)
		if err := m.Put(key, &v); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// SetSessionsRemote keeps every session with the remote NID sending to its remote locator loc
// (0: to the active remote locator again) and returns how many it changed. Locator Updates and
// their ACKs keep going to the active one, and so does a session while loc is not in its usable
// set (bpf/lib/session.h ilnp_remote_pinned).
func (d *Datapath) SetSessionsRemote(remote wire.NID, loc wire.L64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	nid := be64(uint64(remote))
	match := func(k *ilnpBPFIlnpSessionKey) bool { return k.RemoteNid == nid }
	keys, err := keysWhere[ilnpBPFIlnpSessionKey, ilnpBPFIlnpSession](d.objs.Sessions, match)
	if err != nil {
		return 0, fmt.Errorf("datapath: sessions with %v: %w", remote, err)
	}
	// The pinned locator is in place before the flag that makes the egress read it, and the
	// flag is gone before the entry (a session opened meanwhile may get the flag alone: the
	// egress then finds no entry and sends to the active locator).
	if loc != 0 {
		for _, key := range keys {
			if err := d.objs.RemotePins.Put(key, be64(uint64(loc))); err != nil {
				return 0, fmt.Errorf("datapath: pin sessions with %v on %v: %w", remote, loc, err)
			}
		}
	}
	n, err := updateWhere(d.objs.Sessions, match, func(v *ilnpBPFIlnpSession) {
		if loc != 0 {
			v.Flags |= uint32(SessionRemotePinned)
		} else {
			v.Flags &^= uint32(SessionRemotePinned)
		}
	})
	if err != nil {
		return n, fmt.Errorf("datapath: remote locator of sessions with %v: %w", remote, err)
	}
	if loc == 0 {
		for _, key := range keys {
			if err := d.objs.RemotePins.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return n, fmt.Errorf("datapath: release sessions with %v: %w", remote, err)
			}
		}
	}
	return n, nil
}

// SetSessionsLocal makes every session with the remote NID send from loc (0: from the host's
// active locator again) and returns how many it changed. Locator Updates keep leaving from
// the active locator (bpf/ilnp.c). A read-modify-write, as in SetRemoteLocators.
func (d *Datapath) SetSessionsLocal(remote wire.NID, loc wire.L64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	nid := be64(uint64(remote))
	n, err := updateWhere(d.objs.Sessions,
		func(k *ilnpBPFIlnpSessionKey) bool { return k.RemoteNid == nid },
		func(v *ilnpBPFIlnpSession) { v.LocalLocator = be64(uint64(loc)) })
	if err != nil {
		return n, fmt.Errorf("datapath: local locator of sessions with %v: %w", remote, err)
	}
	return n, nil
}
