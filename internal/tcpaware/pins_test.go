package tcpaware

import (
	"slices"
	"testing"

	"ilnp/internal/wire"
)

func TestPins(t *testing.T) {
	const (
		peerA, peerB, peerC  wire.NID = 1, 2, 3
		oldLoc, newLoc, gone wire.L64 = 0x20010db800020000, 0x20010db800030000, 0x20010db800040000
	)
	var p Pins
	if _, ok := p.Pinned(peerA); ok {
		t.Fatal("zero Pins has a pin")
	}
	if p.Pin(peerA, 0) {
		t.Fatal("pinned to locator 0")
	}
	if !p.Pin(peerA, oldLoc) || !p.Pin(peerB, gone) || !p.Pin(peerC, newLoc) {
		t.Fatal("first pins refused")
	}
	// A second switch keeps the older path.
	if p.Pin(peerA, newLoc) {
		t.Fatal("repinned")
	}
	if loc, ok := p.Pinned(peerA); !ok || loc != oldLoc {
		t.Fatalf("peer A pinned to %v %v, want %v", loc, ok, oldLoc)
	}
	usable := func(l wire.L64) bool { return l != gone }
	// gone is no longer usable (B), newLoc is the active one (C): both end; A stays.
	if got := p.Stale(newLoc, usable); !slices.Equal(got, []wire.NID{peerB, peerC}) {
		t.Fatalf("stale %v, want [B C]", got)
	}
	if got := p.Stale(newLoc, usable); len(got) != 0 {
		t.Fatalf("stale twice: %v", got)
	}
	if !p.Release(peerA) || p.Release(peerA) {
		t.Fatal("release: want true once")
	}
	p.Pin(peerB, oldLoc)
	p.Pin(peerA, oldLoc)
	if got := p.ReleaseAll(); !slices.Equal(got, []wire.NID{peerA, peerB}) {
		t.Fatalf("release all %v", got)
	}
	if _, ok := p.Pinned(peerB); ok {
		t.Fatal("pin left after ReleaseAll")
	}
}
