package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// The packet path reads the multipath and unverified maps only for sessions flagged
// SessionMultipath / SessionUnverified (a lookup that cannot hit costs every packet of every
// session). SessionUnverified is set before the session's first unverified entry goes in and
// cleared after its last one is gone, so a session with an entry is always limited; a flag
// without an entry only costs that session a lookup that misses. SessionMultipath follows its
// entry (set after it, cleared before it: until then the session sends on its active pair, as
// without an entry). Sessions created later pick the flags up from the maps: PutSession
// (mapFlagsOf), the datapath for multipath (bpf/lib/session.h ilnp_flag_multipath), and Load
// for maps pinned by an earlier daemon (reflagSessions).

// setSessionFlags sets and clears flags of the session k, wherever it is: the session table,
// else the embryos (which keep their flags when promoted). A promotion between the two reads is
// caught by reading the session table once more. No session: nothing to flag. d.mu is held.
func (d *Datapath) setSessionFlags(k ilnpBPFIlnpSessionKey, set, clear SessionFlags) error {
	update := func(m *ebpf.Map) (bool, error) {
		var v ilnpBPFIlnpSession
		if err := m.Lookup(k, &v); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				return false, nil
			}
			return false, err
		}
		f := (SessionFlags(v.Flags) | set) &^ clear
		if f == SessionFlags(v.Flags) {
			return true, nil
		}
		v.Flags = uint32(f)
		if err := m.Update(k, &v, ebpf.UpdateExist); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				return false, nil
			}
			return false, err
		}
		return true, nil
	}
	ok, err := update(d.objs.Sessions)
	if err == nil && !ok {
		if ok, err = update(d.objs.Embryos); err == nil {
			_, err = update(d.objs.Sessions)
		}
	}
	if err != nil {
		return fmt.Errorf("datapath: flags of session %v-%v: %w", be64(k.LocalNid), be64(k.RemoteNid), err)
	}
	return nil
}

// mapFlagsOf are the flags the multipath and unverified maps call for on session k, from
// lookups only: its multipath entry, and its remote locators' (and active remote locator's)
// unverified entries, which are the locators the egress sends to.
func (d *Datapath) mapFlagsOf(k ilnpBPFIlnpSessionKey, active uint64, remote [MaxRemoteLocators]ilnpBPFIlnpRemoteLocator) SessionFlags {
	var f SessionFlags
	var mp ilnpBPFIlnpMultipath
	if d.objs.Multipath.Lookup(k, &mp) == nil {
		f |= SessionMultipath
	}
	var u ilnpBPFIlnpUnverified
	locs := []uint64{active}
	for _, r := range remote {
		locs = append(locs, r.L64)
	}
	for _, l := range locs {
		if l != 0 && d.objs.Unverified.Lookup(ilnpBPFIlnpUnverifiedKey{LocalNid: k.LocalNid, RemoteNid: k.RemoteNid, L64: l}, &u) == nil {
			f |= SessionUnverified
			break
		}
	}
	return f
}

// reflagSessions flags every session that has a multipath or unverified entry: pinned maps
// written by a daemon from before the flags existed carry entries without them. One pass over
// the two maps, at load.
func (d *Datapath) reflagSessions() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var (
		k   ilnpBPFIlnpSessionKey
		mp  ilnpBPFIlnpMultipath
		uk  ilnpBPFIlnpUnverifiedKey
		u   ilnpBPFIlnpUnverified
		set = map[ilnpBPFIlnpSessionKey]SessionFlags{}
	)
	it := d.objs.Multipath.Iterate()
	for it.Next(&k, &mp) {
		set[k] |= SessionMultipath
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("datapath: list multipath: %w", err)
	}
	it = d.objs.Unverified.Iterate()
	for it.Next(&uk, &u) {
		set[ilnpBPFIlnpSessionKey{LocalNid: uk.LocalNid, RemoteNid: uk.RemoteNid}] |= SessionUnverified
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("datapath: list unverified locators: %w", err)
	}
	for k, f := range set {
		if err := d.setSessionFlags(k, f, 0); err != nil {
			return err
		}
	}
	return nil
}
