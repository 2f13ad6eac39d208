package paths

import (
	"testing"
	"time"

	"ilnp/internal/wire"
)

// Abandoned finds a peer's pairs through the peer, and the local locators' counts follow
// Step: pairs of a local locator that left are gone from it, a new one's are in.
func TestAbandonedByKey(t *testing.T) {
	tr, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(100, 0)
	const l1, l2, r1, r2 = wire.L64(0x1), wire.L64(0x2), wire.L64(0x11), wire.L64(0x12)
	var cands []Key
	for i := 0; i < 1000; i++ {
		peer := wire.NID(0x0a00_0000_0000_0000 + uint64(i))
		cands = append(cands, Key{peer, l1, r1}, Key{peer, l1, r2})
	}
	tr.Step(cands, nil, now)
	if len(tr.locals) != 1 || tr.locals[l1].pairs != 2000 {
		t.Fatalf("locals index %v after 2,000 pairs from l1", tr.locals)
	}
	peer := wire.NID(0x0a00_0000_0000_0007)
	tr.Abandoned(peer, r2, now)
	for _, p := range tr.sorted() {
		k := p.s.Key
		if got, want := !p.abandonedAt.IsZero(), k == (Key{peer, l1, r2}); got != want {
			t.Fatalf("pair %v abandoned %v, want %v", k, got, want)
		}
	}
	// The node moves to l2: l1's pairs go, l2's come.
	moved := []Key{{peer, l2, r1}, {peer, l2, r2}}
	tr.Step(moved, nil, now.Add(time.Second))
	if len(tr.locals) != 1 || tr.locals[l2].pairs != 2 {
		t.Fatalf("locals index %v after the move", tr.locals)
	}
	tr.Abandoned(peer, r1, now.Add(time.Second))
	if p := tr.find(Key{peer, l2, r1}); p == nil || p.abandonedAt.IsZero() || !tr.find(Key{peer, l2, r2}).abandonedAt.IsZero() {
		t.Fatalf("after the move: %+v", tr.peers[peer].pairs)
	}
}
