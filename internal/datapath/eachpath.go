package datapath

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"ilnp/internal/wire"
)

// PathReader hands out what Paths lists a share at a time, so that a path poll holds one
// step's pairs instead of every session's (issue 28: Paths' list was 10.8 MB at 100,000
// sessions, about 110 MB at 1 M, for the whole poll). The paths map (the sessions' other
// pairs, bounded by path-table-size) is read whole when the reader opens; the sessions' own
// pairs are read a batch per Next, each session's with its other pairs.
//
// A session present through the whole read is handed out once (a hash map's batch read walks
// its buckets, and an entry never changes bucket); one made or deleted meanwhile may or may
// not be. A pair that moves between a session's entry and the paths map while the read is
// under way may be missed, or counted twice (merged as Paths does), for that read. Not safe
// for concurrent use.
type PathReader struct {
	d *Datapath
	// others is the paths map as read at the start, ordered by peer, then local NID, then
	// pair; met marks those handed out with their session.
	others []PathStats
	met    []bool
	keys   []ilnpBPFIlnpSessionKey
	vals   []ilnpBPFIlnpSession
	cursor ebpf.MapBatchCursor
	iter   *ebpf.MapIterator // the sessions' walk where the kernel has no batch read
	done   bool              // every session read
	rest   int               // the next of others to look at once every session was read
	out    []PathStats
}

// ReadPaths opens a read of every locator pair's counters (Next).
func (d *Datapath) ReadPaths() (*PathReader, error) {
	r := &PathReader{d: d}
	if err := readAll(d.objs.Paths, func(k *ilnpBPFIlnpPathKey, v *ilnpBPFIlnpPathStats) {
		r.others = append(r.others, PathStats{
			Key: pathKeyFromBPF(*k), TxPackets: v.TxPackets, TxBytes: v.TxBytes, RxPackets: v.RxPackets,
			RxBytes: v.RxBytes, LastTxNs: v.LastTxNs, LastRxNs: v.LastRxNs,
			FirstUnansweredTxNs: v.FirstUnansweredNs, Unanswered: v.Unanswered,
		})
	}); err != nil {
		return nil, fmt.Errorf("datapath: read paths: %w", err)
	}
	slices.SortFunc(r.others, func(a, b PathStats) int { return comparePathKeys(a.Key, b.Key) })
	r.met = make([]bool, len(r.others))
	return r, nil
}

// comparePathKeys orders pairs by peer, then local NID, then local and remote locator.
func comparePathKeys(a, b PathKey) int {
	return cmp.Or(cmp.Compare(a.RemoteNID, b.RemoteNID), cmp.Compare(a.LocalNID, b.LocalNID),
		cmp.Compare(a.Local, b.Local), cmp.Compare(a.Remote, b.Remote))
}

// othersOf is the range of others of the session (local, remote).
func (r *PathReader) othersOf(local, remote wire.NID) (from, to int) {
	cmpSession := func(p PathStats, k PathKey) int {
		return cmp.Or(cmp.Compare(p.Key.RemoteNID, k.RemoteNID), cmp.Compare(p.Key.LocalNID, k.LocalNID))
	}
	k := PathKey{LocalNID: local, RemoteNID: remote}
	from, _ = slices.BinarySearchFunc(r.others, k, cmpSession)
	to = from
	for to < len(r.others) && cmpSession(r.others[to], k) == 0 {
		to++
	}
	return from, to
}

// session appends the pairs of one session to out: its own pair (from its entry, read at
// now) and its others, one pair counted in both merged.
func (r *PathReader) session(out []PathStats, k *ilnpBPFIlnpSessionKey, v *ilnpBPFIlnpSession, now uint64, mark bool) []PathStats {
	local, remote := wire.NID(be64(k.LocalNid)), wire.NID(be64(k.RemoteNid))
	from, to := r.othersOf(local, remote)
	start := len(out)
	out = append(out, r.others[from:to]...)
	if mark {
		for i := from; i < to; i++ {
			r.met[i] = true
		}
	}
	if v.Pair.Local == 0 {
		return out
	}
	own := ownPairStats(*k, &v.Pair, now)
	for i := start; i < len(out); i++ {
		if out[i].Key == own.Key {
			out[i] = mergePair(out[i], own)
			return out
		}
	}
	return append(out, own)
}

// Next hands out the next pairs: those of about limit sessions (at least 64), ordered by peer,
// each session's all, then the paths map's pairs of sessions not met (each peer's all). None
// once every pair was handed out. The slice is the reader's, valid until the next call.
func (r *PathReader) Next(limit int) ([]PathStats, error) {
	limit = max(limit, 64) // more than a hash bucket holds (a batch read takes buckets whole)
	r.out = r.out[:0]
	for len(r.out) == 0 && !r.done {
		if err := r.nextSessions(limit); err != nil {
			return nil, fmt.Errorf("datapath: read paths: %w", err)
		}
	}
	if len(r.out) == 0 {
		// The paths map's pairs whose session was not read: a peer's all in one share.
		for r.rest < len(r.others) && (len(r.out) < limit || r.out[len(r.out)-1].Key.RemoteNID == r.others[r.rest].Key.RemoteNID) {
			if !r.met[r.rest] {
				r.out = append(r.out, r.others[r.rest])
			}
			r.rest++
		}
	}
	slices.SortStableFunc(r.out, func(a, b PathStats) int { return cmp.Compare(a.Key.RemoteNID, b.Key.RemoteNID) })
	return r.out, nil
}

// nextSessions appends the pairs of up to limit more sessions to r.out (maybe none: sessions
// not proven two-way have no pair).
func (r *PathReader) nextSessions(limit int) error {
	now := MonotonicCoarseNow()
	if r.iter != nil {
		var (
			k ilnpBPFIlnpSessionKey
			v ilnpBPFIlnpSession
		)
		for range limit {
			if !r.iter.Next(&k, &v) {
				r.done = true
				return r.iter.Err()
			}
			r.out = r.session(r.out, &k, &v, now, true)
		}
		return nil
	}
	if len(r.keys) != limit {
		r.keys, r.vals = make([]ilnpBPFIlnpSessionKey, limit), make([]ilnpBPFIlnpSession, limit)
	}
	n, err := r.d.objs.Sessions.BatchLookup(&r.cursor, r.keys, r.vals, nil)
	for i := range n {
		r.out = r.session(r.out, &r.keys[i], &r.vals[i], now, true)
	}
	switch {
	case errors.Is(err, ebpf.ErrKeyNotExist):
		r.done = true
	case errors.Is(err, ebpf.ErrNotSupported) && n == 0:
		r.iter = r.d.objs.Sessions.Iterate()
	case err != nil:
		return err
	case n == 0:
		return errors.New("batch read of the sessions returned nothing")
	}
	return nil
}

// Of is the pairs of the session (local, remote) now: its entry read again, with the paths
// map's pairs as read at the start. None when there is no such session.
func (r *PathReader) Of(local, remote wire.NID) ([]PathStats, error) {
	k := sessionKey(local, remote)
	var v ilnpBPFIlnpSession
	if err := r.d.objs.Sessions.Lookup(k, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("datapath: pairs of %v-%v: %w", local, remote, err)
	}
	return r.session(nil, &k, &v, MonotonicCoarseNow(), false), nil
}
