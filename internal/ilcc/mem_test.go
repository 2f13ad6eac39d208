package ilcc

import (
	"runtime"
	"testing"
	"time"

	"ilnp/internal/wire"
)

// liveHeap is the heap the program holds after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkSessionMemory reports the heap one ILCC session holds (issue 28), as a
// correspondent's cache holds it: a responder's session whose peer nonce is known
// (B/session), then after a local move that sent every peer an LU (B/session-moved: the
// advertised set and its replay history). The figure is the live heap after a collection over
// the sessions, so it is the cache's own, with its maps' and heap's overhead, not the GC's
// headroom.
func BenchmarkSessionMemory(b *testing.B) {
	const n = 20000
	var opened, moved float64
	for b.Loop() {
		before := liveHeap()
		c, err := New(Config{NID: myNID, NewNonce: counterNonces()})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.UpdateLocal(ra(lMN1, ifWifi, router1), t0); err != nil {
			b.Fatal(err)
		}
		for i := range n {
			nid := wire.NID(0x1000 + i)
			s := Session{Local: wire.ILV{Locator: lMN1, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: nid}, RemoteNonce: nonce(uint32(i + 1))}
			if _, err := c.OpenSession(s, t0); err != nil {
				b.Fatal(err)
			}
		}
		opened = float64(liveHeap()-before) / n
		eff, err := c.UpdateLocal(ra(lMN2, ifLTE, router2), t0.Add(time.Second))
		if err != nil || len(eff.Updates) != n {
			b.Fatalf("move: %d updates, %v", len(eff.Updates), err)
		}
		moved = float64(liveHeap()-before) / n
		runtime.KeepAlive(c)
	}
	b.ReportMetric(opened, "B/session")
	b.ReportMetric(moved, "B/session-moved")
}
