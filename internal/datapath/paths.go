package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"ilnp/internal/wire"
)

// PathKey names one locator pair of a session: the session's NIDs and the wire locators its
// packets carried.
type PathKey struct {
	LocalNID, RemoteNID wire.NID
	Local, Remote       wire.L64
}

// PathStats is what the datapath counted on one locator pair. Times are CLOCK_MONOTONIC_COARSE
// nanoseconds (MonotonicCoarseNow), 0 for never.
type PathStats struct {
	Key                 PathKey
	TxPackets, TxBytes  uint64
	RxPackets, RxBytes  uint64
	LastTxNs, LastRxNs  uint64
	FirstUnansweredTxNs uint64 // first packet sent since the last one received; 0: none
	Unanswered          uint64 // packets sent since the last one received
}

// ProbeMark is the socket mark that sends a packet of a session out of the locator pair in
// probe slot (SetProbePair): ProbeMark | slot.
const ProbeMark = 0x494c0000

// ProbeSlots is the number of probe slots.
const ProbeSlots = 256

func pathKeyToBPF(k PathKey) ilnpBPFIlnpPathKey {
	return ilnpBPFIlnpPathKey{LocalNid: be64(uint64(k.LocalNID)), RemoteNid: be64(uint64(k.RemoteNID)),
		LocalL64: be64(uint64(k.Local)), RemoteL64: be64(uint64(k.Remote))}
}

func pathKeyFromBPF(k ilnpBPFIlnpPathKey) PathKey {
	return PathKey{LocalNID: wire.NID(be64(k.LocalNid)), RemoteNID: wire.NID(be64(k.RemoteNid)),
		Local: wire.L64(be64(k.LocalL64)), Remote: wire.L64(be64(k.RemoteL64))}
}

// Paths lists the counters of every locator pair the datapath has seen traffic on: each
// session's own pair (bpf/lib/maps.h ilnp_session.pair, normally its main one) and the
// others (the paths map).
func (d *Datapath) Paths() ([]PathStats, error) {
	var out []PathStats
	if err := readAll(d.objs.Paths, func(k *ilnpBPFIlnpPathKey, v *ilnpBPFIlnpPathStats) {
		out = append(out, PathStats{
			Key: pathKeyFromBPF(*k), TxPackets: v.TxPackets, TxBytes: v.TxBytes, RxPackets: v.RxPackets,
			RxBytes: v.RxBytes, LastTxNs: v.LastTxNs, LastRxNs: v.LastRxNs,
			FirstUnansweredTxNs: v.FirstUnansweredNs, Unanswered: v.Unanswered,
		})
	}); err != nil {
		return nil, fmt.Errorf("datapath: list paths: %w", err)
	}
	// A pair in both (a packet on it while the session's pair moved) is one pair.
	inMap := make(map[PathKey]int, len(out))
	for i, p := range out {
		inMap[p.Key] = i
	}
	now := MonotonicCoarseNow()
	if err := readAll(d.objs.Sessions, func(k *ilnpBPFIlnpSessionKey, v *ilnpBPFIlnpSession) {
		if v.Pair.Local == 0 {
			return
		}
		p := ownPairStats(*k, &v.Pair, now)
		if i, ok := inMap[p.Key]; ok {
			out[i] = mergePair(out[i], p)
			return
		}
		out = append(out, p)
	}); err != nil {
		return nil, fmt.Errorf("datapath: list paths: %w", err)
	}
	return out, nil
}

// LastRxFrom is when the session (local, remote) last received a packet from the peer's
// locator remoteLoc on any of the pairs (l, remoteLoc), l in locals: CLOCK_MONOTONIC_COARSE
// nanoseconds, 0 for never or no such session. It reads the session's entry and one paths
// map entry per local locator, not the table (issue 28: no per-event pass over the sessions).
func (d *Datapath) LastRxFrom(local, remote wire.NID, remoteLoc wire.L64, locals []wire.L64) (uint64, error) {
	k := sessionKey(local, remote)
	var v ilnpBPFIlnpSession
	if err := d.objs.Sessions.Lookup(k, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("datapath: session %v-%v: %w", local, remote, err)
	}
	var last uint64
	if v.Pair.Local != 0 {
		if own := ownPairStats(k, &v.Pair, MonotonicCoarseNow()); own.Key.Remote == remoteLoc {
			last = own.LastRxNs
		}
	}
	for _, l := range locals {
		var st ilnpBPFIlnpPathStats
		pk := pathKeyToBPF(PathKey{LocalNID: local, RemoteNID: remote, Local: l, Remote: remoteLoc})
		switch err := d.objs.Paths.Lookup(pk, &st); {
		case errors.Is(err, ebpf.ErrKeyNotExist):
		case err != nil:
			return 0, fmt.Errorf("datapath: pair %v-%v of %v-%v: %w", l, remoteLoc, local, remote, err)
		default:
			last = max(last, st.LastRxNs)
		}
	}
	return last, nil
}

// pairTimeShift is bpf/lib/maps.h ILNP_PAIR_TIME_SHIFT: a session's own pair keeps its times
// in units of 2^pairTimeShift ns, modulo 2^32.
const pairTimeShift = 20

// pairNs is the CLOCK_MONOTONIC_COARSE time (ns) nearest to now whose units' low 32 bits
// are t (within 26 days either way: a packet counted while the table is read is later than
// the now read before); 0 stays 0 (never).
func pairNs(t uint32, now uint64) uint64 {
	if t == 0 {
		return 0
	}
	u := int64(now >> pairTimeShift)
	return uint64(u-int64(int32(uint32(u)-t))) << pairTimeShift
}

func ownPairStats(k ilnpBPFIlnpSessionKey, p *ilnpBPFIlnpPair, now uint64) PathStats {
	return PathStats{
		Key: PathKey{LocalNID: wire.NID(be64(k.LocalNid)), RemoteNID: wire.NID(be64(k.RemoteNid)),
			Local: wire.L64(be64(p.Local)), Remote: wire.L64(be64(p.Remote))},
		TxPackets: p.TxPackets, TxBytes: p.TxBytes, RxPackets: p.RxPackets, RxBytes: p.RxBytes,
		LastTxNs: pairNs(p.LastTx, now), LastRxNs: pairNs(p.LastRx, now),
		FirstUnansweredTxNs: pairNs(p.FirstUnanswered, now), Unanswered: uint64(p.Unanswered),
	}
}

// mergePair adds the counts of one pair counted in two places; the latest receipt decides
// whether what was sent is still unanswered.
func mergePair(a, b PathStats) PathStats {
	m := a
	m.TxPackets += b.TxPackets
	m.TxBytes += b.TxBytes
	m.RxPackets += b.RxPackets
	m.RxBytes += b.RxBytes
	m.LastTxNs = max(a.LastTxNs, b.LastTxNs)
	m.LastRxNs = max(a.LastRxNs, b.LastRxNs)
	m.Unanswered, m.FirstUnansweredTxNs = 0, 0
	for _, s := range []PathStats{a, b} {
		if s.Unanswered == 0 || s.FirstUnansweredTxNs < m.LastRxNs {
			continue
		}
		m.Unanswered += s.Unanswered
		if m.FirstUnansweredTxNs == 0 || s.FirstUnansweredTxNs < m.FirstUnansweredTxNs {
			m.FirstUnansweredTxNs = s.FirstUnansweredTxNs
		}
	}
	return m
}

// DeletePath forgets one locator pair's counters, in the session's entry or in the paths map.
func (d *Datapath) DeletePath(k PathKey) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	own := false
	sk := sessionKey(k.LocalNID, k.RemoteNID)
	var v ilnpBPFIlnpSession
	if err := d.objs.Sessions.Lookup(sk, &v); err == nil &&
		v.Pair.Local == be64(uint64(k.Local)) && v.Pair.Remote == be64(uint64(k.Remote)) {
		// A read-modify-write, as in SetRemoteLocators: at worst a packet's count is lost.
		v.Pair = ilnpBPFIlnpPair{}
		if err := d.objs.Sessions.Update(sk, &v, ebpf.UpdateExist); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("datapath: delete path %v: %w", k, err)
		}
		own = true
	}
	err := d.objs.Paths.Delete(pathKeyToBPF(k))
	if own && errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return wrapDelete(err, "path %v", k)
}

// SetProbePair makes packets of the session k names that carry the mark ProbeMark|slot leave
// on k's locator pair instead of the session's active one.
func (d *Datapath) SetProbePair(slot uint32, k PathKey) error {
	if slot >= ProbeSlots {
		return fmt.Errorf("datapath: probe slot %d: want < %d", slot, ProbeSlots)
	}
	if err := d.objs.ProbePairs.Put(slot, pathKeyToBPF(k)); err != nil {
		return fmt.Errorf("datapath: probe slot %d: %w", slot, err)
	}
	return nil
}

// MonotonicCoarseNow is the clock the datapath stamps packets with.
func MonotonicCoarseNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano())
}

// MaxMultipathPairs is how many locator pairs one session's flows can spread over.
const MaxMultipathPairs = 4

// MultipathPair is one locator pair of a session under the multipath policy and its share.
type MultipathPair struct {
	Local, Remote wire.L64
	Weight        uint32
}

// SetMultipath spreads the session's TCP and UDP flows over pairs by weight (each flow, by
// the hash of its addresses, protocol and ports, always on the same pair). No pairs, or all
// weights zero, removes the entry: the session's active pair carries everything.
func (d *Datapath) SetMultipath(local, remote wire.NID, pairs []MultipathPair) error {
	k := sessionKey(local, remote)
	var v ilnpBPFIlnpMultipath
	for _, p := range pairs {
		if p.Weight == 0 {
			continue
		}
		if v.Count == MaxMultipathPairs {
			return fmt.Errorf("datapath: multipath %v-%v: more than %d pairs", local, remote, MaxMultipathPairs)
		}
		if p.Local == 0 || p.Remote == 0 {
			return fmt.Errorf("datapath: multipath %v-%v: zero locator", local, remote)
		}
		v.Pair[v.Count].LocalL64, v.Pair[v.Count].RemoteL64 = be64(uint64(p.Local)), be64(uint64(p.Remote))
		v.Pair[v.Count].Weight = p.Weight
		v.Total += p.Weight
		v.Count++
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if v.Count == 0 {
		if err := d.setSessionFlags(k, 0, SessionMultipath); err != nil {
			return err
		}
		if err := d.objs.Multipath.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("datapath: multipath %v-%v: %w", local, remote, err)
		}
		return nil
	}
	if err := d.objs.Multipath.Put(k, &v); err != nil {
		return fmt.Errorf("datapath: multipath %v-%v: %w", local, remote, err)
	}
	return d.setSessionFlags(k, SessionMultipath, 0)
}
