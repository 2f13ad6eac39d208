package datapath

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"ilnp/internal/heapstat"
	"ilnp/internal/wire"
)

// putSession writes a session entry whose own pair is (local, remote) with rx packets (0 for
// local: no own pair).
func putSession(t *testing.T, d *Datapath, lnid, rnid wire.NID, local, remote wire.L64, rx uint64) {
	t.Helper()
	var v ilnpBPFIlnpSession
	v.Pair.Local, v.Pair.Remote, v.Pair.RxPackets, v.Pair.TxPackets = be64(uint64(local)), be64(uint64(remote)), rx, 2*rx
	must(t, d.objs.Sessions.Put(sessionKey(lnid, rnid), &v))
}

func putPath(t *testing.T, d *Datapath, k PathKey, rx uint64) {
	t.Helper()
	must(t, d.objs.Paths.Put(pathKeyToBPF(k), &ilnpBPFIlnpPathStats{RxPackets: rx, TxPackets: 3 * rx}))
}

// A read in shares (PathReader) hands out what Paths lists, each pair once: every session's
// own pair with its other pairs from the paths map (one counted in both merged), the paths
// map's pairs without a session at the end, each share ordered by peer with each peer's
// pairs all in it, about the share's size of sessions each; and Of one session's pairs.
func TestPathReaderSharesAreWhatPathsLists(t *testing.T) {
	d := newDatapath(t, Options{SessionTableSize: 8192})
	rng := rand.New(rand.NewPCG(28, 3))
	const sessions = 5000
	for i := range sessions {
		peer := wire.NID(0x0a00_0000_0000_0000 + uint64(i))
		lnid := wire.NID(1)
		if i%500 == 7 {
			// A second session of the same peer from another local NID.
			putSession(t, d, 2, peer, 0x30, 0x40, 1)
		}
		local, remote := wire.L64(0x10), wire.L64(0x20+rng.IntN(3))
		if i%10 == 3 {
			local = 0 // no own pair: not proven two-way
		}
		putSession(t, d, lnid, peer, local, remote, uint64(1+i))
		switch i % 7 {
		case 1: // another pair
			putPath(t, d, PathKey{LocalNID: lnid, RemoteNID: peer, Local: 0x11, Remote: 0x99}, 5)
		case 2: // the own pair counted in the map too
			putPath(t, d, PathKey{LocalNID: lnid, RemoteNID: peer, Local: local, Remote: remote}, 7)
		}
	}
	// Pairs of sessions that are gone.
	for i := range 300 {
		putPath(t, d, PathKey{LocalNID: 1, RemoteNID: wire.NID(0x0b00_0000_0000_0000 + uint64(i/2)), Local: 0x12, Remote: wire.L64(0x50 + i)}, 1)
	}
	want, err := d.Paths()
	must(t, err)
	wantOf := map[PathKey]PathStats{}
	for _, p := range want {
		wantOf[p.Key] = p
	}
	r, err := d.ReadPaths()
	must(t, err)
	const limit = 400
	got := map[PathKey]PathStats{}
	shares := 0
	for {
		share, err := r.Next(limit)
		must(t, err)
		if len(share) == 0 {
			break
		}
		shares++
		sessionsIn := map[[2]wire.NID]bool{}
		for i, p := range share {
			if i > 0 && p.Key.RemoteNID < share[i-1].Key.RemoteNID {
				t.Fatalf("share %d not ordered by peer at %d", shares, i)
			}
			if _, dup := got[p.Key]; dup {
				t.Fatalf("pair %+v handed out twice", p.Key)
			}
			got[p.Key] = p
			sessionsIn[[2]wire.NID{p.Key.LocalNID, p.Key.RemoteNID}] = true
		}
		if len(sessionsIn) > limit+64 {
			t.Fatalf("share %d holds %d sessions' pairs, want about %d", shares, len(sessionsIn), limit)
		}
		// Each session's pairs are all in the share that has one of them.
		for _, p := range want {
			if sessionsIn[[2]wire.NID{p.Key.LocalNID, p.Key.RemoteNID}] {
				if _, ok := got[p.Key]; !ok {
					t.Fatalf("share %d holds session %v-%v but not its pair %+v", shares, p.Key.LocalNID, p.Key.RemoteNID, p.Key)
				}
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("the shares hold %d pairs, Paths lists %d", len(got), len(want))
	}
	for k, p := range wantOf {
		g, ok := got[k]
		// The read times of own pairs differ by the read; the counts do not.
		if !ok || g.RxPackets != p.RxPackets || g.TxPackets != p.TxPackets {
			t.Fatalf("pair %+v: shares %+v (%v), Paths %+v", k, g, ok, p)
		}
	}
	if shares < sessions/limit {
		t.Fatalf("%d shares of at most %d sessions for %d sessions", shares, limit, sessions)
	}
	// Of: one session's pairs, merged as Paths merges them.
	for _, i := range []int{1, 2, 4} {
		peer := wire.NID(0x0a00_0000_0000_0000 + uint64(i))
		of, err := r.Of(1, peer)
		must(t, err)
		n := 0
		for _, p := range want {
			if p.Key.LocalNID == 1 && p.Key.RemoteNID == peer {
				n++
			}
		}
		if len(of) != n || n == 0 {
			t.Fatalf("Of(1, %v): %+v, want %d pairs", peer, of, n)
		}
		for _, p := range of {
			if w := wantOf[p.Key]; w.RxPackets != p.RxPackets {
				t.Fatalf("Of(1, %v): %+v, Paths %+v", peer, p, w)
			}
		}
	}
	if of, err := r.Of(1, 0x0c00_0000_0000_0000); err != nil || len(of) != 0 {
		t.Fatalf("Of a session that does not exist: %+v %v", of, err)
	}
}

// Sessions made and deleted while a read is under way do not make it miss or repeat one that
// stays (a hash map's batch read walks buckets, and an entry keeps its bucket).
func TestPathReaderWhileSessionsChange(t *testing.T) {
	d := newDatapath(t, Options{SessionTableSize: 8192})
	const sessions = 3000
	for i := range sessions {
		putSession(t, d, 1, wire.NID(0x0a00_0000_0000_0000+uint64(i)), 0x10, 0x20, 1)
	}
	r, err := d.ReadPaths()
	must(t, err)
	seen := map[wire.NID]int{}
	churn := 0
	for {
		share, err := r.Next(200)
		must(t, err)
		if len(share) == 0 {
			break
		}
		for _, p := range share {
			seen[p.Key.RemoteNID]++
		}
		// Between shares: 100 new sessions and 100 of the churned ones deleted.
		for j := range 100 {
			putSession(t, d, 1, wire.NID(0x0d00_0000_0000_0000+uint64(churn+j)), 0x10, 0x20, 1)
		}
		if churn >= 100 {
			for j := range 100 {
				must(t, d.objs.Sessions.Delete(sessionKey(1, wire.NID(0x0d00_0000_0000_0000+uint64(churn-100+j)))))
			}
		}
		churn += 100
	}
	if churn < 1000 {
		t.Fatalf("only %d sessions churned: the test decides little", churn)
	}
	for i := range sessions {
		if n := seen[wire.NID(0x0a00_0000_0000_0000+uint64(i))]; n != 1 {
			t.Fatalf("session %d handed out %d times", i, n)
		}
	}
	for peer, n := range seen {
		if n != 1 {
			t.Fatalf("peer %v handed out %d times", peer, n)
		}
	}
}

// BenchmarkPathsHeld100k reports the heap a path poll holds at 100,000 sessions, each with its
// own pair, while it walks them (issue 28): the whole list Paths returns (B/session-whole),
// and a PathReader with one share of 2,000 sessions read (B/session-shares, live at once).
func BenchmarkPathsHeld100k(b *testing.B) {
	const sessions = 100_000
	d := newDatapath(b, Options{SessionTableSize: 131072})
	var v ilnpBPFIlnpSession
	for i := range sessions {
		v.Pair.Local, v.Pair.Remote, v.Pair.RxPackets = be64(0x10), be64(0x20), 1
		if err := d.objs.Sessions.Put(sessionKey(1, wire.NID(0x0a00_0000_0000_0000+uint64(i))), &v); err != nil {
			b.Fatal(err)
		}
	}
	var whole, shares float64
	for b.Loop() {
		before := heapstat.Live()
		all, err := d.Paths()
		if err != nil || len(all) != sessions {
			b.Fatalf("Paths: %d pairs, %v", len(all), err)
		}
		whole = float64(heapstat.Live()-before) / sessions
		runtime.KeepAlive(all)
		all = nil
		before = heapstat.Live()
		r, err := d.ReadPaths()
		if err != nil {
			b.Fatal(err)
		}
		share, err := r.Next(2000)
		if err != nil || len(share) == 0 {
			b.Fatalf("Next: %d pairs, %v", len(share), err)
		}
		shares = float64(heapstat.Live()-before) / sessions
		runtime.KeepAlive(r)
	}
	b.ReportMetric(whole, "B/session-whole")
	b.ReportMetric(shares, "B/session-shares")
}
