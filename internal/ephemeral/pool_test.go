package ephemeral

import (
	"errors"
	"testing"

	"ilnp/internal/wire"
)

const stable = wire.NID(0x0214_4fff_fe20_ee64)

// seq is a random source that returns the given NIDs in order.
func seq(nids ...wire.NID) func() (wire.NID, error) {
	return func() (wire.NID, error) {
		if len(nids) == 0 {
			return 0, errors.New("exhausted")
		}
		n := nids[0]
		nids = nids[1:]
		return n, nil
	}
}

func TestPool(t *testing.T) {
	const a, b = wire.NID(0xa), wire.NID(0xb)
	tests := []struct {
		name   string
		draws  []wire.NID
		max    int
		script func(t *testing.T, p *Pool)
	}{
		{name: "one NID per correspondent, kept while alive", draws: []wire.NID{11, 12},
			script: func(t *testing.T, p *Pool) {
				n1, fresh, err := p.For(a)
				if err != nil || !fresh || n1 != 11 {
					t.Fatalf("For(a) = %v %v %v, want 11 fresh", n1, fresh, err)
				}
				if again, fresh, _ := p.For(a); again != 11 || fresh {
					t.Errorf("For(a) again = %v fresh=%v, want 11 not fresh", again, fresh)
				}
				if n2, _, _ := p.For(b); n2 != 12 {
					t.Errorf("For(b) = %v, want 12", n2)
				}
				if peer, ok := p.Owner(12); !ok || peer != b {
					t.Errorf("Owner(12) = %v %v", peer, ok)
				}
			}},
		{name: "stable, zero, reserved anycast and live NIDs are never drawn",
			draws: []wire.NID{stable, 0, 0xfdff_ffff_ffff_ff80, 0xfdff_ffff_ffff_ffff, 21, 21, 22},
			script: func(t *testing.T, p *Pool) {
				if n, _, err := p.For(a); err != nil || n != 21 {
					t.Fatalf("For(a) = %v %v, want 21", n, err)
				}
				if n, _, err := p.For(b); err != nil || n != 22 {
					t.Fatalf("For(b) = %v %v, want 22 (21 is a's)", n, err)
				}
			}},
		{name: "retired NIDs are never handed out again", draws: []wire.NID{31, 31, 31, 32},
			script: func(t *testing.T, p *Pool) {
				p.For(a)
				if n, ok := p.Retire(a); !ok || n != 31 {
					t.Fatalf("Retire(a) = %v %v", n, ok)
				}
				if _, ok := p.Lookup(a); ok {
					t.Error("a still has a NID after Retire")
				}
				if n, fresh, err := p.For(b); err != nil || !fresh || n != 32 {
					t.Errorf("For(b) = %v %v %v, want 32 (31 retired)", n, fresh, err)
				}
				if _, ok := p.Retire(a); ok {
					t.Error("second Retire(a) succeeded")
				}
			}},
		{name: "bounded", draws: []wire.NID{41, 42, 43}, max: 2,
			script: func(t *testing.T, p *Pool) {
				p.For(1)
				p.For(2)
				if _, _, err := p.For(3); !errors.Is(err, ErrFull) {
					t.Errorf("third For = %v, want ErrFull", err)
				}
				p.Retire(1)
				if n, _, err := p.For(3); err != nil || n != 43 {
					t.Errorf("For after Retire = %v %v, want 43", n, err)
				}
			}},
		{name: "a broken random source is an error, not a loop", draws: []wire.NID{51, 51, 51, 51, 51, 51, 51, 51, 51, 51},
			script: func(t *testing.T, p *Pool) {
				p.For(a)
				if _, _, err := p.For(b); err == nil {
					t.Error("For(b) with a source that repeats 51 succeeded")
				}
			}},
		{name: "restore", draws: []wire.NID{61},
			script: func(t *testing.T, p *Pool) {
				if err := p.Restore(a, 60); err != nil {
					t.Fatal(err)
				}
				if err := p.Restore(b, 60); err == nil {
					t.Error("restoring a live NID for another correspondent succeeded")
				}
				if err := p.Restore(b, stable); err == nil {
					t.Error("restoring the stable NID succeeded")
				}
				if got := p.Live(); len(got) != 1 || got[0] != (Pair{Peer: a, NID: 60}) {
					t.Errorf("Live = %v", got)
				}
				if n, _, _ := p.For(a); n != 60 {
					t.Errorf("For(a) after Restore = %v, want 60", n)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(Config{Stable: stable, MaxLive: tc.max, Random: seq(tc.draws...)})
			if err != nil {
				t.Fatal(err)
			}
			tc.script(t, p)
		})
	}
}

func TestPoolRandomDefault(t *testing.T) {
	p, err := New(Config{Stable: stable})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[wire.NID]bool{}
	for peer := wire.NID(1); peer <= 100; peer++ {
		n, _, err := p.For(peer)
		if err != nil {
			t.Fatal(err)
		}
		if seen[n] || n == stable || uint64(n)&(1<<57) != 0 {
			t.Fatalf("NID %v for %v: repeated, stable or with the u/l bit set", n, peer)
		}
		seen[n] = true
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without a stable NID succeeded")
	}
}
