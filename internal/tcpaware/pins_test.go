package tcpaware

import (
	"slices"
	"testing"
	"time"

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

func TestPinsLinger(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name      string
		rtt, srtt time.Duration
		want      time.Duration
	}{
		{"slower path: one old srtt", 200 * ms, 150 * ms, 150 * ms},
		{"slower path, a receiving socket's tiny srtt: half the exchange", 200 * ms, 1 * ms, 100 * ms},
		{"equal path", 200 * ms, 210 * ms, 210 * ms},
		{"faster by more than 1/8: none (the sockets drain)", 1 * ms, 100 * ms, 0},
		{"just under 7/8 of the srtt: faster", 87 * ms, 100 * ms, 0},
		{"no RTT sample", 0, 100 * ms, 0},
		{"no socket", 200 * ms, 0, 0},
		{"bounded", 3 * time.Second, 2 * time.Second, MaxLinger},
	} {
		if got := Linger(c.rtt, c.srtt); got != c.want {
			t.Errorf("%s: Linger(%v, %v) = %v, want %v", c.name, c.rtt, c.srtt, got, c.want)
		}
	}

	const peerA, peerB wire.NID = 1, 2
	const loc wire.L64 = 0x20010db800020000
	var p Pins
	t0 := time.Unix(1000, 0)
	if _, ok := p.NextDeadline(); ok {
		t.Fatal("deadline without pins")
	}
	if p.ReleaseAfter(peerA, t0) {
		t.Fatal("timed a pin that does not exist")
	}
	p.Pin(peerA, loc)
	p.Pin(peerB, loc)
	if p.Lingering(peerA) {
		t.Fatal("lingering before its LU-ACK")
	}
	p.ReleaseAfter(peerA, t0.Add(100*time.Millisecond))
	p.ReleaseAfter(peerB, t0.Add(50*time.Millisecond))
	if !p.Lingering(peerA) {
		t.Fatal("not lingering after ReleaseAfter")
	}
	if d, ok := p.NextDeadline(); !ok || !d.Equal(t0.Add(50*time.Millisecond)) {
		t.Fatalf("next deadline %v %v", d, ok)
	}
	if got := p.Due(t0.Add(49 * time.Millisecond)); len(got) != 0 {
		t.Fatalf("due early: %v", got)
	}
	if got := p.Due(t0.Add(100 * time.Millisecond)); !slices.Equal(got, []wire.NID{peerA, peerB}) {
		t.Fatalf("due %v, want [A B]", got)
	}
	if _, ok := p.Pinned(peerA); ok || p.Lingering(peerA) {
		t.Fatal("pin left after it was due")
	}
	if _, ok := p.NextDeadline(); ok {
		t.Fatal("deadline left after all were due")
	}
	// A released pin forgets its time.
	p.Pin(peerA, loc)
	p.ReleaseAfter(peerA, t0)
	p.Release(peerA)
	if _, ok := p.NextDeadline(); ok {
		t.Fatal("deadline of a released pin")
	}
}
