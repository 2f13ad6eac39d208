// Package budget is a token bucket kept as a small value, so that a table of many peers can
// hold one each without a mutex or a pointer apiece (the LU-ACK budget per correspondent, the
// encap6 probes of all pairs). Pure logic: the caller passes the time.
package budget

import "time"

// Bucket holds up to a burst of tokens and gains rate a second. Its zero value is full: the
// first Take fills it.
type Bucket struct {
	tokens float64
	refill time.Time // when tokens was last brought up to date; zero: never used
}

// Take takes n tokens at now if the bucket, refilled at rate a second up to burst, holds them,
// and reports whether it did; with fewer it takes none. A now before the last one refills
// nothing (clocks that step back cannot mint tokens).
func (b *Bucket) Take(n, burst, rate float64, now time.Time) bool {
	switch {
	case b.refill.IsZero():
		b.tokens, b.refill = burst, now
	case now.After(b.refill):
		b.tokens = min(burst, b.tokens+now.Sub(b.refill).Seconds()*rate)
		b.refill = now
	}
	if b.tokens < n {
		return false
	}
	b.tokens -= n
	return true
}
