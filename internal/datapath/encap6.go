package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// Encap6Pair is one locator pair's ILNPv6 in UDP/IPv6 state (bpf/lib/encap6.h).
type Encap6Pair struct {
	Key PathKey
	// On: the pair's packets leave inside UDP/IPv6.
	On bool
	// ByPeer: the last change came from the peer's packets (an encapsulated one turned it on),
	// not from this host's detection (SetEncap6Pair).
	ByPeer bool
	// TxPackets and RxPackets are the packets sent and accepted encapsulated on the pair.
	TxPackets, RxPackets uint64
	// ChangedNs is when a packet last changed the state (CLOCK_MONOTONIC_COARSE), 0: never.
	ChangedNs uint64
}

const (
	encap6Native  = 0
	encap6On      = 1
	encap6ByLocal = 1
	encap6ByPeer  = 2
)

// SetEncap6Pair turns ILNPv6 in UDP/IPv6 on or off for one locator pair, as this host's
// decision, keeping its counters. Turning it on flags the session (SessionEncap6) after the
// entry is in, so that its packets start looking the pair up; the flag stays when it is
// turned off (the peer's packets may turn the pair on again).
func (d *Datapath) SetEncap6Pair(k PathKey, on bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	bk := pathKeyToBPF(k)
	var v ilnpBPFIlnpEncap6Pair
	if err := d.objs.Encap6Pairs.Lookup(bk, &v); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("datapath: encap6 pair %v: %w", k, err)
	}
	v.State, v.Origin = encap6Native, encap6ByLocal
	if on {
		v.State = encap6On
	}
	if err := d.objs.Encap6Pairs.Put(bk, &v); err != nil {
		return fmt.Errorf("datapath: encap6 pair %v: %w", k, err)
	}
	if !on {
		return nil
	}
	return d.setSessionFlags(sessionKey(k.LocalNID, k.RemoteNID), SessionEncap6, 0)
}

// Encap6Pairs lists every locator pair with an ILNPv6 in UDP/IPv6 entry.
func (d *Datapath) Encap6Pairs() ([]Encap6Pair, error) {
	var (
		k   ilnpBPFIlnpPathKey
		v   ilnpBPFIlnpEncap6Pair
		out []Encap6Pair
	)
	it := d.objs.Encap6Pairs.Iterate()
	for it.Next(&k, &v) {
		out = append(out, Encap6Pair{Key: pathKeyFromBPF(k), On: v.State == encap6On, ByPeer: v.Origin == encap6ByPeer,
			TxPackets: v.TxPackets, RxPackets: v.RxPackets, ChangedNs: v.ChangedNs})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("datapath: list encap6 pairs: %w", err)
	}
	return out, nil
}

// DeleteEncap6Pair forgets one pair's entry (its session's packets go native on it).
func (d *Datapath) DeleteEncap6Pair(k PathKey) error {
	return wrapDelete(d.objs.Encap6Pairs.Delete(pathKeyToBPF(k)), "encap6 pair %v", k)
}
