package budget

import (
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var b Bucket
	for i := range 4 {
		if !b.Take(1, 4, 2, t0) {
			t.Fatalf("take %d of a burst of 4 refused", i+1)
		}
	}
	if b.Take(1, 4, 2, t0) {
		t.Fatal("a fifth token in the same instant")
	}
	if b.Take(1, 4, 2, t0.Add(-time.Hour)) {
		t.Fatal("a clock stepping back minted a token")
	}
	if !b.Take(1, 4, 2, t0.Add(500*time.Millisecond)) || b.Take(1, 4, 2, t0.Add(500*time.Millisecond)) {
		t.Fatal("half a second at 2 a second should give exactly one token")
	}
	if b.Take(5, 4, 2, t0.Add(time.Hour)) {
		t.Fatal("took more than the burst")
	}
	if !b.Take(4, 4, 2, t0.Add(time.Hour)) || b.Take(1, 4, 2, t0.Add(time.Hour)) {
		t.Fatal("an hour should refill to the burst, and no further")
	}
}
