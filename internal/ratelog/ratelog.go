// Package ratelog bounds how often events of one kind are logged while counting every one of
// them: a flood (a nonce-guessing attacker sends thousands of packets a second) must neither
// fill the disk nor hide the first events, so each kind may log Burst events per Interval and
// the rest are summarised, one line per kind and interval. Pure: the caller passes the time.
package ratelog

import (
	"fmt"
	"slices"
	"time"
)

// Limiter decides which events to log. The zero value is not usable: use New. Not safe for
// concurrent use (the daemon's loop owns it).
type Limiter struct {
	interval time.Duration
	burst    int
	kinds    map[string]*kind
}

type kind struct {
	windowStart time.Time
	logged      int    // logged in the current window
	suppressed  uint64 // not logged since the last summary
	total       uint64
}

// New returns a limiter that lets burst events of each kind through per interval.
func New(interval time.Duration, burst int) (*Limiter, error) {
	if interval <= 0 || burst < 1 {
		return nil, fmt.Errorf("ratelog: interval %v and burst %d must be positive", interval, burst)
	}
	return &Limiter{interval: interval, burst: burst, kinds: map[string]*kind{}}, nil
}

// Allow counts one event of kind at now and reports whether to log it.
func (l *Limiter) Allow(name string, now time.Time) bool {
	k := l.kinds[name]
	if k == nil {
		k = &kind{windowStart: now}
		l.kinds[name] = k
	}
	k.total++
	if now.Sub(k.windowStart) >= l.interval || now.Before(k.windowStart) {
		k.windowStart, k.logged = now, 0
	}
	if k.logged < l.burst {
		k.logged++
		return true
	}
	k.suppressed++
	return false
}

// Suppressed is how many events of one kind were not logged since the last summary.
type Suppressed struct {
	Kind  string
	Count uint64
	Total uint64 // every event of the kind since the limiter started
}

// Summary returns the kinds with events suppressed since the last call, by name, and resets
// their suppressed counts. Call it once per interval and log one line per entry.
func (l *Limiter) Summary() []Suppressed {
	var out []Suppressed
	for name, k := range l.kinds {
		if k.suppressed > 0 {
			out = append(out, Suppressed{Kind: name, Count: k.suppressed, Total: k.total})
			k.suppressed = 0
		}
	}
	slices.SortFunc(out, func(a, b Suppressed) int {
		switch {
		case a.Kind < b.Kind:
			return -1
		case a.Kind > b.Kind:
			return 1
		}
		return 0
	})
	return out
}

// Total is the number of events of kind counted so far.
func (l *Limiter) Total(name string) uint64 {
	if k := l.kinds[name]; k != nil {
		return k.total
	}
	return 0
}

// Interval is the window Allow counts its burst in.
func (l *Limiter) Interval() time.Duration { return l.interval }
