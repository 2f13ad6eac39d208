package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"ilnp/internal/wire"
)

// Locator verification (bpf/lib/verify.h): a remote locator in the unverified map gets at
// most CreditFactor times the bytes received from it until the daemon deletes the entry.

// CreditFactor is the anti-amplification factor the egress enforces (RFC 9000 s.8.1).
const CreditFactor = 3

// Unverified is one unverified remote locator of a session and its byte counts.
type Unverified struct {
	LocalNID, RemoteNID wire.NID
	Locator             wire.L64
	RxBytes, TxBytes    uint64
}

func unverifiedKey(local, remote wire.NID, l wire.L64) ilnpBPFIlnpUnverifiedKey {
	return ilnpBPFIlnpUnverifiedKey{LocalNid: be64(uint64(local)), RemoteNid: be64(uint64(remote)), L64: be64(uint64(l))}
}

// PutUnverified marks locator l of the session local-remote unverified, seeding its counts
// (rx: what already came from it, tx: what the daemon itself sent to it). An entry that exists
// keeps its counts; a session that does not exist is ErrNotFound.
func (d *Datapath) PutUnverified(local, remote wire.NID, l wire.L64, rx, tx uint64) error {
	if local == 0 || remote == 0 || l == 0 {
		return errors.New("datapath: unverified locator: zero NID or locator")
	}
	if _, err := d.GetSession(local, remote); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.setSessionFlags(sessionKey(local, remote), SessionUnverified, 0); err != nil {
		return err
	}
	v := ilnpBPFIlnpUnverified{RxBytes: rx, TxBytes: tx}
	err := d.objs.Unverified.Update(unverifiedKey(local, remote, l), &v, ebpf.UpdateNoExist)
	if err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
		return fmt.Errorf("datapath: unverified locator %v of %v-%v: %w", l, local, remote, err)
	}
	return nil
}

// ChallengeMark is the socket mark that sends a locator challenge of a session to its remote
// locator in slot i (ChallengeMarkFor): ChallengeMark | i (bpf/lib/verify.h). Such a packet
// passes no credit check and is never rerouted.
const ChallengeMark = 0x494d0000

// ChallengeMarkFor is the mark that sends a packet of the session local-remote to its remote
// locator l (an IPv4 locator: only the egress can encapsulate to it).
func (d *Datapath) ChallengeMarkFor(local, remote wire.NID, l wire.L64) (uint32, error) {
	var v ilnpBPFIlnpSession
	if err := d.objs.Sessions.Lookup(sessionKey(local, remote), &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, fmt.Errorf("datapath: session %v-%v: %w", local, remote, ErrNotFound)
		}
		return 0, fmt.Errorf("datapath: session %v-%v: %w", local, remote, err)
	}
	set, err := d.remoteSet(sessionKey(local, remote), &v)
	if err != nil {
		return 0, err
	}
	for i, r := range set {
		if r.L64 != 0 && wire.L64(be64(r.L64)) == l {
			return ChallengeMark | uint32(i), nil
		}
	}
	return 0, fmt.Errorf("datapath: session %v-%v has no remote locator %v: %w", local, remote, l, ErrNotFound)
}

// ChargeUnverified adds tx bytes the daemon sent past the datapath (a challenge) to the sent
// count of locator l of the session local-remote, if it is unverified. The read and the write
// are two steps: a packet the datapath counts between them is not counted, which errs by one
// packet at most.
func (d *Datapath) ChargeUnverified(local, remote wire.NID, l wire.L64, tx uint64) error {
	k := unverifiedKey(local, remote, l)
	var v ilnpBPFIlnpUnverified
	if err := d.objs.Unverified.Lookup(k, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return ErrNotFound
		}
		return fmt.Errorf("datapath: unverified locator %v of %v-%v: %w", l, local, remote, err)
	}
	v.TxBytes += tx
	if err := d.objs.Unverified.Update(k, &v, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("datapath: charge unverified locator %v of %v-%v: %w", l, local, remote, err)
	}
	return nil
}

// DeleteUnverified marks locator l of every session with remote verified; l 0 deletes every
// entry of remote (the session closed). A session left without entries loses
// SessionUnverified.
func (d *Datapath) DeleteUnverified(remote wire.NID, l wire.L64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	all, err := d.Unverified()
	if err != nil {
		return err
	}
	var errs []error
	left := map[wire.NID]bool{} // local NIDs of remote's sessions, true: an entry stays
	for _, u := range all {
		if u.RemoteNID != remote {
			continue
		}
		if l != 0 && u.Locator != l {
			left[u.LocalNID] = true
			continue
		}
		if _, seen := left[u.LocalNID]; !seen {
			left[u.LocalNID] = false
		}
		err := d.objs.Unverified.Delete(unverifiedKey(u.LocalNID, remote, u.Locator))
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			left[u.LocalNID] = true
			errs = append(errs, fmt.Errorf("datapath: verified locator %v of %v: %w", u.Locator, remote, err))
		}
	}
	for local, stays := range left {
		if !stays {
			errs = append(errs, d.setSessionFlags(sessionKey(local, remote), 0, SessionUnverified))
		}
	}
	return errors.Join(errs...)
}

// Unverified lists the unverified locators of every session.
func (d *Datapath) Unverified() ([]Unverified, error) {
	var (
		k   ilnpBPFIlnpUnverifiedKey
		v   ilnpBPFIlnpUnverified
		out []Unverified
	)
	it := d.objs.Unverified.Iterate()
	for it.Next(&k, &v) {
		out = append(out, Unverified{LocalNID: wire.NID(be64(k.LocalNid)), RemoteNID: wire.NID(be64(k.RemoteNid)),
			Locator: wire.L64(be64(k.L64)), RxBytes: v.RxBytes, TxBytes: v.TxBytes})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("datapath: list unverified locators: %w", err)
	}
	return out, nil
}
