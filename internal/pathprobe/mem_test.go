package pathprobe

import (
	"runtime"
	"testing"
	"time"

	"ilnp/internal/heapstat"
)

// BenchmarkPairMemory reports the heap the stage holds per pair at 100,000 pairs (issue 28: a
// mass move at a correspondent has every pair checked once): each pair checked and found dead
// and backing off (B/pair-backing-off, what the mass move leaves), and the same pairs once
// answered again and past their backoff (B/pair-answered), and the same pairs no longer sent
// on, past their backoff, still unanswered (B/pair-idle: a mass move's correspondent whose
// movers went quiet after their LU-ACK). The figure is the live heap after
// a collection, the stage's own with its maps' overhead.
func BenchmarkPairMemory(b *testing.B) {
	const n = 100_000
	t0 := time.Unix(7000, 0)
	samples := checkingSamples(n, t0)
	answered := make([]Sample, n)
	for i := range answered {
		answered[i] = Sample{Key: samples[i].Key, LastTx: t0}
	}
	idle := checkingSamples(n, t0) // LastTx t0, 5 s before the last step
	run := func(after []Sample) float64 {
		before := heapstat.Live()
		s, err := New(Config{})
		if err != nil {
			b.Fatal(err)
		}
		s.Step(samples, t0)                            // checks begin
		s.Step(samples, t0.Add(1100*time.Millisecond)) // unanswered: dead, backing off
		if after != nil {
			s.Step(after, t0.Add(5*time.Second))
		}
		held := float64(heapstat.Live()-before) / n
		runtime.KeepAlive(s)
		return held
	}
	var backingOff, answeredAgain, idleAfter float64
	for b.Loop() {
		backingOff, answeredAgain, idleAfter = run(nil), run(answered), run(idle)
	}
	b.ReportMetric(backingOff, "B/pair-backing-off")
	b.ReportMetric(answeredAgain, "B/pair-answered")
	b.ReportMetric(idleAfter, "B/pair-idle")
}
