package state

import (
	"maps"
	"testing"
)

// A walk visits at most the share asked for per step, every entry of a map once, none
// deleted before it was reached, and stops when asked (issue 28: the state file's snapshot
// is taken a share per turn of the daemon's loop).
func TestWalkInSteps(t *testing.T) {
	const n, share = 10_000, 700
	m := map[int]int{}
	for i := range n {
		m[i] = i
	}
	seen := map[int]int{}
	w := NewWalk(maps.All(m), func(k, _ int) { seen[k]++ })
	if len(seen) != 0 {
		t.Fatal("NewWalk visited entries before the first Step")
	}
	deleted := map[int]bool{}
	steps, total := 0, 0
	for {
		v, done := w.Step(share)
		steps++
		total += v
		if v > share {
			t.Fatalf("step %d visited %d entries, want at most %d", steps, v, share)
		}
		if done {
			break
		}
		// Between steps the map changes: entries not reached yet are deleted, others added.
		for k := range m {
			if seen[k] == 0 && len(deleted) < 50*steps {
				delete(m, k)
				deleted[k] = true
			}
		}
		m[n+steps] = 0
		if steps > 2*n/share {
			t.Fatalf("walk still going after %d steps", steps)
		}
	}
	if steps < (n-len(deleted))/share {
		t.Fatalf("%d steps for %d entries of %d a step", steps, total, share)
	}
	for k := range n {
		switch {
		case deleted[k] && seen[k] != 0:
			t.Fatalf("entry %d visited though deleted before the walk reached it", k)
		case !deleted[k] && seen[k] != 1:
			t.Fatalf("entry %d visited %d times, want once", k, seen[k])
		}
	}
	if len(deleted) == 0 || total != len(seen) {
		t.Fatalf("%d deleted, %d visits of %d entries", len(deleted), total, len(seen))
	}
	if v, done := w.Step(share); v != 0 || !done || !w.Done() {
		t.Fatalf("a step after the end visited %d (done %v)", v, done)
	}
	w.Stop()

	// Stop mid-walk: no further visit.
	clear(seen)
	w = NewWalk(maps.All(m), func(k, _ int) { seen[k]++ })
	if v, done := w.Step(10); v != 10 || done {
		t.Fatalf("first step visited %d (done %v), want 10", v, done)
	}
	w.Stop()
	if v, done := w.Step(10); v != 0 || !done || len(seen) != 10 {
		t.Fatalf("after Stop a step visited %d (done %v), %d entries seen", v, done, len(seen))
	}
}
