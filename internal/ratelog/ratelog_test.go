package ratelog

import (
	"reflect"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l, err := New(10*time.Second, 3)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	// A flood of 10,000 bad-nonce events in one second: 3 logged, the rest summarised.
	logged := 0
	for i := 0; i < 10_000; i++ {
		if l.Allow("bad_nonce", t0.Add(time.Duration(i)*100*time.Microsecond)) {
			logged++
		}
	}
	if logged != 3 {
		t.Fatalf("logged %d of a 10,000-event flood, want the burst of 3", logged)
	}
	// Another kind has its own budget.
	if !l.Allow("lu_foreign_interface", t0) {
		t.Fatal("first event of a second kind not logged")
	}
	want := []Suppressed{{Kind: "bad_nonce", Count: 9997, Total: 10_000}}
	if got := l.Summary(); !reflect.DeepEqual(got, want) {
		t.Fatalf("summary %+v, want %+v", got, want)
	}
	if got := l.Summary(); len(got) != 0 {
		t.Fatalf("second summary %+v, want nothing new", got)
	}
	// Still inside the window: suppressed; the next window logs again.
	if l.Allow("bad_nonce", t0.Add(9*time.Second)) {
		t.Fatal("event inside the window logged beyond the burst")
	}
	if !l.Allow("bad_nonce", t0.Add(10*time.Second)) {
		t.Fatal("event of the next window not logged")
	}
	if got, want := l.Total("bad_nonce"), uint64(10_002); got != want {
		t.Fatalf("total %d, want %d: every event is counted", got, want)
	}
	// A clock that goes back starts a new window rather than suppressing for ever.
	if !l.Allow("lu_foreign_interface", t0.Add(-time.Hour)) {
		t.Fatal("clock went back: not logged")
	}
	// Bounded output: over 100 intervals of a steady flood at most burst lines per interval
	// plus one summary line per interval.
	l2, _ := New(time.Second, 2)
	lines := 0
	for s := 0; s < 100; s++ {
		for i := 0; i < 1000; i++ {
			if l2.Allow("x", t0.Add(time.Duration(s)*time.Second+time.Duration(i)*time.Millisecond)) {
				lines++
			}
		}
		lines += len(l2.Summary())
	}
	if lines != 300 || l2.Total("x") != 100_000 {
		t.Fatalf("%d lines for 100,000 events over 100 intervals (total %d), want 300", lines, l2.Total("x"))
	}
}

func TestNewRejects(t *testing.T) {
	for _, c := range []struct {
		iv    time.Duration
		burst int
	}{{0, 1}, {time.Second, 0}, {-time.Second, 3}} {
		if _, err := New(c.iv, c.burst); err == nil {
			t.Errorf("New(%v, %d) accepted", c.iv, c.burst)
		}
	}
}
