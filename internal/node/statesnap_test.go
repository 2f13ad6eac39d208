package node

import (
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"ilnp/internal/config"
	"ilnp/internal/ilcc"
	"ilnp/internal/state"
	"ilnp/internal/wire"
)

// snapNode is a node with n correspondents (each with its peer route) and no datapath, its
// state file in a directory of the test's.
func snapNode(t testing.TB, n int) *Node {
	t.Helper()
	cfg := config.Default()
	cfg.NID, cfg.HasNID = 0x0c0c_0000_0000_0001, true
	cfg.StateDir = t.TempDir()
	nd, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	nd.host = &host{peerRoutes: newRouteTable()}
	now := time.Now()
	if _, err := nd.cache.UpdateLocal(ilcc.LocalUpdate{Locator: 0x2001_0db8_0000_0001, IfIndex: 1,
		ValidLifetime: ilcc.Infinite, PreferredLifetime: ilcc.Infinite}, now); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		snapOpen(t, nd, i, now)
	}
	nd.continuity.adopted = true
	return nd
}

// snapOpen opens correspondent i's session and routes it.
func snapOpen(t testing.TB, nd *Node, i int, now time.Time) {
	t.Helper()
	remote := wire.ILV{Locator: 0x2001_0db8_0000_0100, NID: wire.NID(0x0a00_0000_0000_0000 + uint64(i))}
	nonce, err := wire.NonceFromBytes([]byte{0, 0, byte(i >> 8), byte(i) | 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nd.cache.OpenSession(ilcc.Session{Local: wire.ILV{Locator: 0x2001_0db8_0000_0001, NID: nd.nid},
		Remote: remote, RemoteNonce: nonce}, now); err != nil {
		t.Fatal(err)
	}
	nd.host.peerRoutes.set(remote.Addr(), &peerRoute{})
}

// written waits for the state file's writer and reads the file.
func written(t *testing.T, nd *Node) state.File {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); nd.continuity.writing.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("state file writer still busy after 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	f, err := state.Read(nd.cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The loop takes the state file's snapshot snapshotStep entries a turn (issue 28: 100,000
// correspondents and their routes in one turn held it 78-176 ms), and a snapshot during which
// the loop served events is followed by another: once the events stop, the file is what a
// snapshot taken at once says, sessions opened and closed during the walk included.
func TestStateSnapshotInSteps(t *testing.T) {
	const n = 2*snapshotStep + 321
	nd := snapNode(t, n)
	c := &nd.continuity
	nd.persist() // an event's turn: the first step
	if c.snap == nil {
		t.Fatalf("a snapshot of %d correspondents and %d routes was taken in one step", n, n)
	}
	first := c.snap
	if first.most > snapshotStep || first.steps != 1 {
		t.Fatalf("the first step took %d entries in %d steps, want at most %d in one", first.most, first.steps, snapshotStep)
	}
	now := time.Now()
	turns := 0
	for c.snap != nil {
		<-nd.persistReady()
		nd.persistStep()
		nd.persist()
		turns++
		switch turns {
		case 1: // events between steps: a session closes, another opens
			nd.cache.CloseSession(wire.NID(0x0a00_0000_0000_0000+uint64(n-1)), "test")
			nd.host.peerRoutes.del(wire.ILV{Locator: 0x2001_0db8_0000_0100, NID: wire.NID(0x0a00_0000_0000_0000 + uint64(n-1))}.Addr())
			snapOpen(t, nd, n, now)
			nd.persist()
		}
		if turns > 2*n/snapshotStep+4 {
			t.Fatalf("snapshot still being taken after %d steps", turns)
		}
	}
	if first.most > snapshotStep || first.steps < 2*n/snapshotStep {
		t.Fatalf("%d entries taken in %d steps, at most %d in one: want at most %d a step", 2*n, first.steps, first.most, snapshotStep)
	}
	if !first.dirty || !c.pending {
		t.Fatalf("events came during the snapshot, yet no other follows (dirty %v, pending %v)", first.dirty, c.pending)
	}
	written(t, nd)
	// The loop comes back at nextCheck (armTimer) and takes the next snapshot; the turns that
	// only step it begin no other.
	for c.pending || c.snap != nil {
		if c.snap != nil {
			<-nd.persistReady()
			nd.persistStep()
		} else {
			time.Sleep(time.Until(c.nextCheck))
		}
		nd.persist()
	}
	got := written(t, nd)
	want := nd.stateFile()
	sortState(&want)
	want.Version = state.Version
	if len(got.Correspondents) != n || len(got.PeerRoutes) != n {
		t.Fatalf("file lists %d correspondents and %d routes, want %d each", len(got.Correspondents), len(got.PeerRoutes), n)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("the file taken in steps differs from a snapshot taken at once")
	}
}

// BenchmarkStateSnapshot100k: the loop's time in the state file's snapshot of 100,000
// correspondents and their routes: taken at once (as one turn paid it), and per step.
func BenchmarkStateSnapshot100k(b *testing.B) {
	nd := snapNode(b, 100_000)
	b.Run("at-once", func(b *testing.B) {
		for b.Loop() {
			nd.stateFile()
		}
	})
	b.Run("step", func(b *testing.B) {
		s := nd.beginSnapshot()
		for b.Loop() {
			if _, whole := s.step(snapshotStep); whole {
				s = nd.beginSnapshot()
			}
		}
		s.stop()
	})
}
