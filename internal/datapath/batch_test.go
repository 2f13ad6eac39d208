package datapath

import (
	"reflect"
	"testing"

	"github.com/cilium/ebpf"

	"ilnp/internal/wire"
)

// TestSessionsReadBatchwise: a table of more sessions than one batch read holds is listed
// whole, every session once with what was written, by Sessions (readAll) as by the per-entry
// walk.
func TestSessionsReadBatchwise(t *testing.T) {
	const count = 2*readBatch + 123
	d := newDatapath(t, Options{SessionTableSize: count + 100})
	for i := range count {
		s := Session{LocalNID: nidA, RemoteNID: wire.NID(0x0a00_0000_0000_0000 | i), LocalView: lA1,
			RemoteView: wire.L64(0x2001_0db8_0000_0000 | uint64(i))}
		if err := d.PutSession(s); err != nil {
			t.Fatal(err)
		}
	}
	all, err := d.Sessions()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[wire.NID]bool{}
	for _, s := range all {
		i := uint64(s.RemoteNID &^ 0x0a00_0000_0000_0000)
		if seen[s.RemoteNID] || i >= count || s.RemoteView != wire.L64(0x2001_0db8_0000_0000|i) || s.LocalNID != nidA {
			t.Fatalf("session %+v listed twice or not as written", s)
		}
		seen[s.RemoteNID] = true
	}
	if len(seen) != count {
		t.Fatalf("Sessions listed %d of %d", len(seen), count)
	}
	// EachSession passes the same sessions, without the list.
	each := map[wire.NID]Session{}
	if err := d.EachSession(func(s Session) { each[s.RemoteNID] = s }); err != nil {
		t.Fatal(err)
	}
	if len(each) != count {
		t.Fatalf("EachSession passed %d of %d", len(each), count)
	}
	for _, s := range all {
		if !reflect.DeepEqual(each[s.RemoteNID], s) {
			t.Fatalf("EachSession passed %+v, Sessions listed %+v", each[s.RemoteNID], s)
		}
	}
	// The batch read itself ran (not only its fallback): this kernel has it. A hash map's
	// batch ends at a bucket boundary, so it may hold a few less than asked for.
	var cursor ebpf.MapBatchCursor
	if n, err := d.objs.Sessions.BatchLookup(&cursor, make([]ilnpBPFIlnpSessionKey, readBatch), make([]ilnpBPFIlnpSession, readBatch), nil); err != nil || n < readBatch/2 {
		t.Fatalf("one batch read %d of %d (%v)", n, readBatch, err)
	}
	walked := 0
	if err := readAllIterate(d.objs.Sessions, func(*ilnpBPFIlnpSessionKey, *ilnpBPFIlnpSession) bool { walked++; return true }); err != nil || walked != count {
		t.Fatalf("the per-entry walk saw %d of %d (%v)", walked, count, err)
	}
}
