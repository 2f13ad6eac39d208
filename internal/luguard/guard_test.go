package luguard

import (
	"slices"
	"testing"
	"time"

	"ilnp/internal/wire"
)

func adv(locs ...wire.L64) wire.LocatorUpdate {
	u := wire.LocatorUpdate{Op: wire.OpAdvertisement}
	for i, l := range locs {
		u.Locators = append(u.Locators, wire.LocatorEntry{Locator: l, Preference: uint16(i), Lifetime: 0xffff})
	}
	return u
}

const (
	peerA = wire.NID(0xa)
	peerB = wire.NID(0xb)
	l1    = wire.L64(0x20010db800010000)
	l2    = wire.L64(0x20010db800020000)
	l3    = wire.L64(0x20010db800030000)
)

// The sequences of applied LUs and what an arriving body is then.
func TestVerdicts(t *testing.T) {
	a, b, c := DigestOf(adv(l1)), DigestOf(adv(l2)), DigestOf(adv(l2, l1))
	for _, tc := range []struct {
		name    string
		applied []Digest
		arrives Digest
		want    Verdict
	}{
		{"first LU", nil, a, Fresh},
		{"retransmission of the last", []Digest{a}, a, Repeat},
		{"a new set", []Digest{a}, b, Fresh},
		{"replay after a newer set", []Digest{a, b}, a, Replay},
		{"replay two sets back", []Digest{a, b, c}, a, Replay},
		{"replay of the middle one", []Digest{a, b, c}, b, Replay},
		{"the last again after a re-apply", []Digest{a, b, a}, a, Repeat},
		{"the older one after a re-apply", []Digest{a, b, a}, b, Replay},
	} {
		g := New(0, 0)
		for _, d := range tc.applied {
			g.Applied(peerA, d)
		}
		if got := g.Check(peerA, tc.arrives); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		if got := g.Check(peerB, tc.arrives); got != Fresh {
			t.Errorf("%s: another peer's body is %v, want fresh", tc.name, got)
		}
	}
}

// The digest covers every field of the body: a lifetime or preference of a second more or less
// is another LU, and the operation matters.
func TestDigestCoversBody(t *testing.T) {
	base := adv(l1, l2)
	variants := []func(u *wire.LocatorUpdate){
		func(u *wire.LocatorUpdate) { u.Locators[0].Lifetime-- },
		func(u *wire.LocatorUpdate) { u.Locators[1].Preference++ },
		func(u *wire.LocatorUpdate) { u.Locators[1].Locator = l3 },
		func(u *wire.LocatorUpdate) { u.Op = wire.OpAcknowledgement },
		func(u *wire.LocatorUpdate) { u.Locators = u.Locators[:1] },
		func(u *wire.LocatorUpdate) { u.Locators[0], u.Locators[1] = u.Locators[1], u.Locators[0] },
	}
	for i, f := range variants {
		v := wire.LocatorUpdate{Op: base.Op, Locators: slices.Clone(base.Locators)}
		f(&v)
		if DigestOf(v) == DigestOf(base) {
			t.Errorf("variant %d has the base's digest", i)
		}
	}
	if DigestOf(adv(l1, l2)) != DigestOf(base) {
		t.Error("the same body has two digests")
	}
}

// The history is bounded: a body History+1 applications back is forgotten (fresh again).
func TestHistoryBounded(t *testing.T) {
	g := New(0, 0)
	first := DigestOf(adv(l1))
	g.Applied(peerA, first)
	for i := range History - 1 {
		g.Applied(peerA, DigestOf(adv(wire.L64(0x20010db8_1000_0000+uint64(i)<<16))))
	}
	if v := g.Check(peerA, first); v != Replay {
		t.Fatalf("%d applications back: %v, want replay", History-1, v)
	}
	g.Applied(peerA, DigestOf(adv(l3)))
	if v := g.Check(peerA, first); v != Fresh {
		t.Fatalf("%d applications back: %v, want forgotten (fresh)", History, v)
	}
	if n := len(g.peers[peerA].applied); n != History {
		t.Fatalf("%d digests kept, want %d", n, History)
	}
	g.Forget(peerA)
	if g.Len() != 0 {
		t.Fatal("forgotten peer still has state")
	}
}

// ACKs: a burst, then the rate; another correspondent has its own budget.
func TestAckBudget(t *testing.T) {
	g := New(3, 2)
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if !g.AllowAck(peerA, t0) {
			t.Fatalf("ACK %d of the burst refused", i)
		}
	}
	if g.AllowAck(peerA, t0) {
		t.Fatal("fourth ACK at once allowed")
	}
	if !g.AllowAck(peerB, t0) {
		t.Fatal("another peer's ACK refused")
	}
	if g.AllowAck(peerA, t0.Add(400*time.Millisecond)) {
		t.Fatal("ACK after 0.4 s at 2/s allowed")
	}
	if !g.AllowAck(peerA, t0.Add(500*time.Millisecond)) {
		t.Fatal("ACK after 0.5 s at 2/s refused")
	}
	// A flood of 1000 repeats over 10 s gets at most burst + 10 x rate ACKs.
	n := 0
	for i := range 1000 {
		if g.AllowAck(peerA, t0.Add(time.Second+time.Duration(i)*10*time.Millisecond)) {
			n++
		}
	}
	if n > 3+2*10 || n < 2*10 {
		t.Fatalf("%d ACKs for 1000 repeats over 10 s, want about 20 (at most 23)", n)
	}
	// The clock going backwards gives no tokens.
	g2 := New(1, 1)
	g2.AllowAck(peerA, t0)
	if g2.AllowAck(peerA, t0.Add(-time.Hour)) {
		t.Fatal("ACK allowed by a clock that went back")
	}
}

func entries(lifetime uint16, locs ...wire.L64) []wire.LocatorEntry {
	var out []wire.LocatorEntry
	for i, l := range locs {
		out = append(out, wire.LocatorEntry{Locator: l, Preference: uint16(i), Lifetime: lifetime})
	}
	return out
}

// A sender's advertisement never repeats an older one it sent: moving back to l1 after l2
// lowers the lifetimes; the last one sent may be repeated as is.
func TestDistinct(t *testing.T) {
	for _, tc := range []struct {
		name  string
		adv   []wire.LocatorEntry
		sent  [][]wire.LocatorEntry
		want  []wire.LocatorEntry
		notOK bool
	}{
		{"nothing sent", entries(600, l1), nil, entries(600, l1), false},
		{"same as the last", entries(600, l1), [][]wire.LocatorEntry{entries(600, l1)}, entries(600, l1), false},
		{"move back", entries(600, l1), [][]wire.LocatorEntry{entries(600, l1), entries(600, l2)}, entries(599, l1), false},
		{"move back twice", entries(600, l1), [][]wire.LocatorEntry{entries(600, l1), entries(600, l2), entries(599, l1), entries(600, l2)},
			entries(598, l1), false},
		{"other set", entries(600, l3), [][]wire.LocatorEntry{entries(600, l1), entries(600, l2)}, entries(600, l3), false},
		{"lifetime 1 cannot go lower", entries(1, l1), [][]wire.LocatorEntry{entries(1, l1), entries(1, l2)}, entries(1, l1), true},
	} {
		got, ok := Distinct(tc.adv, tc.sent)
		if !slices.Equal(got, tc.want) || ok == tc.notOK {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, ok, tc.want, !tc.notOK)
		}
		// What Distinct returns is never a replay at a receiver that applied sent.
		if !ok {
			continue
		}
		g := New(0, 0)
		for _, s := range tc.sent {
			g.Applied(peerA, DigestOf(wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: s}))
		}
		if v := g.Check(peerA, DigestOf(wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: got})); v == Replay {
			t.Errorf("%s: the receiver sees a replay", tc.name)
		}
	}
}
