package node_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"ilnp/internal/bpffs"
	"ilnp/internal/datapath"
	"ilnp/internal/wire"
)

// TestReconcileLostSessionEvents: a session in the CN's datapath whose creation event never
// reached the daemon (the ring was full) is orphaned until the datapath reports lost events;
// then the daemon adopts it from the maps within a touch interval: an ILCC session with the
// datapath's nonces (issue 23 item 9).
func TestReconcileLostSessionEvents(t *testing.T) {
	const touch = 11 * time.Second // two of the daemon's touch intervals (5 s) and a margin
	n, pins, dp := cnWithSession(t)
	orphan := mustNID("0214:4fff:fe20:0a0a")
	remote := mustL64("2001:db8:2::")
	local, err := wire.NonceFromBytes([]byte{0x11, 0x22, 0x33, 0x44})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := wire.NonceFromBytes([]byte{0x55, 0x66, 0x77, 0x88})
	if err != nil {
		t.Fatal(err)
	}
	if err := dp.PutSession(datapath.Session{
		LocalNID: cnNID, RemoteNID: orphan, LocalView: l1, RemoteView: remote, RemoteActive: remote,
		RemoteLocators: []datapath.RemoteLocator{{Locator: remote, State: datapath.LocatorActive}},
		LocalNonce:     local, RemoteNonce: theirs, Flags: datapath.SessionInitiator,
	}); err != nil {
		t.Fatal(err)
	}
	known := func() bool {
		rows, err := n.cn.sessions()
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(rows, func(r sessionRow) bool { return r.PeerNID == orphan.String() })
	}
	// No loss reported: the daemon does not scan for strangers (two touch intervals).
	time.Sleep(touch)
	if known() {
		t.Fatal("the daemon adopted a session with no event lost")
	}
	// The ring lost an event: events_lost moves.
	counters, err := ebpf.LoadPinnedMap(filepath.Join(pins, "counters"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer counters.Close()
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	key := uint32(slices.Index(datapath.CounterNames(), "events_lost"))
	var per []uint64
	if err := counters.Lookup(key, &per); err != nil {
		t.Fatal(err)
	}
	per = append(per[:0:0], per...)
	per[0]++
	if len(per) != ncpu {
		t.Fatalf("%d per-CPU values, %d CPUs", len(per), ncpu)
	}
	if err := counters.Update(key, per, ebpf.UpdateExist); err != nil {
		t.Fatal(err)
	}
	n.waitFor(touch, "the CN adopts the orphaned session", func() (bool, string) {
		return known(), "not in the ILCC"
	})
	s := n.cn.session(t, orphan)
	if s.RemoteNonce != fmt.Sprintf("%x", theirs.Bytes()) || s.LocalNonce != fmt.Sprintf("%x", local.Bytes()) {
		t.Errorf("adopted session's nonces %s/%s, want the datapath's %x/%x", s.LocalNonce, s.RemoteNonce, local.Bytes(), theirs.Bytes())
	}
	st, err := n.cn.stats()
	if err != nil {
		t.Fatal(err)
	}
	if st["sessions_reconciled"] != 1 || st["events_reconciliations"] != 1 {
		t.Errorf("sessions_reconciled %d, events_reconciliations %d: want 1 and 1", st["sessions_reconciled"], st["events_reconciliations"])
	}
	// The session with the MN, known all along, is still one session.
	_ = n.cn.session(t, mnNID)
}

// TestReconcileManyLostSessions: 20,000 sessions in the CN's datapath whose events were all
// lost (a burst that filled the ring) are all adopted by the walk the next touch starts and
// the ones that follow it at once, a bounded share per turn of the loop: within two touch
// intervals and a margin, where adopting 5,000 per 5-s walk (the daemon before issue 28's
// million-session run) took four walks, 15 s after the first. The daemon goes on answering
// meanwhile, and the session with the MN stays.
func TestReconcileManyLostSessions(t *testing.T) {
	const orphans = 20000
	n, pins, dp := cnWithSession(t)
	remote := mustL64("2001:db8:2::")
	local, err := wire.NonceFromBytes([]byte{0x11, 0x22, 0x33, 0x44})
	if err != nil {
		t.Fatal(err)
	}
	before, err := n.cn.stats()
	if err != nil {
		t.Fatal(err)
	}
	for i := range orphans {
		if err := dp.PutSession(datapath.Session{
			LocalNID: cnNID, RemoteNID: wire.NID(0x0214_4fff_fe30_0000 + uint64(i)), LocalView: l1, RemoteView: remote,
			RemoteActive: remote, RemoteLocators: []datapath.RemoteLocator{{Locator: remote, State: datapath.LocatorActive}},
			LocalNonce: local, Flags: datapath.SessionInitiator,
		}); err != nil {
			t.Fatal(err)
		}
	}
	counters, err := ebpf.LoadPinnedMap(filepath.Join(pins, "counters"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer counters.Close()
	key := uint32(slices.Index(datapath.CounterNames(), "events_lost"))
	var per []uint64
	if err := counters.Lookup(key, &per); err != nil {
		t.Fatal(err)
	}
	per = append(per[:0:0], per...)
	per[0] += orphans
	if err := counters.Update(key, per, ebpf.UpdateExist); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	want := before["ilcc_sessions"] + orphans
	n.waitFor(14*time.Second, "the CN adopts every orphaned session", func() (bool, string) {
		st, err := n.cn.stats()
		if err != nil {
			return false, err.Error()
		}
		return st["ilcc_sessions"] >= want, fmt.Sprintf("ilcc_sessions %d of %d, sessions_reconciled %d",
			st["ilcc_sessions"], want, st["sessions_reconciled"])
	})
	st, err := n.cn.stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d sessions adopted within %.1f s of the loss", st["sessions_reconciled"]-before["sessions_reconciled"], time.Since(begin).Seconds())
	if got := st["sessions_reconciled"] - before["sessions_reconciled"]; got != orphans {
		t.Errorf("sessions_reconciled grew by %d, want %d (each adopted once)", got, orphans)
	}
	if _, err := ping(n.CN, ilv(l2, mnNID), 2, 100*time.Millisecond, 2*time.Second); err != nil {
		t.Fatalf("the session with the MN after the catching up: %v", err)
	}
	_ = n.cn.session(t, mnNID)
}

// cnWithSession is the test net with a session CN -> MN and the CN's pinned datapath opened
// (its directory, closed when the test ends), into which a test puts sessions behind the
// daemon's back.
func cnWithSession(t *testing.T) (*testNet, string, *datapath.Datapath) {
	t.Helper()
	n := newTestNet(t, "soft")
	if _, err := ping(n.CN, ilv(l2, mnNID), 2, 100*time.Millisecond, 2*time.Second); err != nil {
		t.Fatalf("session CN -> MN: %v", err)
	}
	pins := bpffs.Locate(filepath.Join(n.cn.state, "bpf"), n.cn.state)
	dp, err := datapath.OpenPinned(pins)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	return n, pins, dp
}
