package node

import (
	"testing"
	"time"
)

// A path poll that takes a share of the loop pushes the next one out; a cheap one keeps the
// tracker's own schedule (issue 28).
func TestNextPathPoll(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		cost, want, got time.Duration // want and got after t0
	}{
		{100 * time.Microsecond, 20 * time.Millisecond, 20 * time.Millisecond},
		{time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond},
		{2 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond},
		{40 * time.Millisecond, 20 * time.Millisecond, 400 * time.Millisecond},
	} {
		if got := nextPathPoll(t0, c.cost, t0.Add(c.want)); !got.Equal(t0.Add(c.got)) {
			t.Errorf("poll of %v wanting +%v: next at +%v, want +%v", c.cost, c.want, got.Sub(t0), c.got)
		}
	}
}
