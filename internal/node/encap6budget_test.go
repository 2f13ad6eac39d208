package node

import (
	"testing"
	"time"
)

// The encap6 probe budget (issue 28): a second's worth at once, then as time refills it, a
// check's two probes taken together or not at all.
func TestEncap6ProbeBudget(t *testing.T) {
	m := &encap6Monitor{}
	t0 := time.Unix(100, 0)
	taken := 0
	for m.budget(2, t0) {
		taken += 2
	}
	if taken != encap6ProbesPerSecond {
		t.Fatalf("%d probes at once, want %d", taken, encap6ProbesPerSecond)
	}
	if m.budget(1, t0) {
		t.Fatal("a probe beyond the budget")
	}
	// 10 ms later: 10 probes' worth, five checks.
	checks := 0
	for m.budget(2, t0.Add(10*time.Millisecond)) {
		checks++
	}
	if checks != 5 {
		t.Fatalf("%d checks after 10 ms, want 5", checks)
	}
	// An hour later the bucket holds a second's worth, no more.
	taken = 0
	for m.budget(2, t0.Add(time.Hour)) {
		taken += 2
	}
	if taken != encap6ProbesPerSecond {
		t.Fatalf("%d probes after an hour, want %d", taken, encap6ProbesPerSecond)
	}
}
