package state

import "iter"

// Walk goes over a sequence a share at a time: a daemon with 100,000 sessions takes its state
// file's snapshot in steps between the events its loop serves, not in one turn (issue 28: 78
// to 176 ms). The sequence is ranged over in a coroutine resumed by Step only, so what the
// caller changes between steps it changes as it would in the body of a range loop: over a map,
// an entry deleted before the walk reached it is not visited, one added may be or not, and
// every other entry is visited once. A snapshot so taken holds each entry as it was at some
// moment during the walk; the caller takes another when something changed meanwhile.
type Walk struct {
	next   func() (struct{}, bool)
	stop   func()
	budget int
	seen   int // entries visited by the current Step
	done   bool
}

// NewWalk prepares a walk calling fn with every element of seq; nothing is visited before
// the first Step.
func NewWalk[K, V any](seq iter.Seq2[K, V], fn func(K, V)) *Walk {
	w := &Walk{}
	w.next, w.stop = iter.Pull(func(yield func(struct{}) bool) {
		for k, v := range seq {
			fn(k, v)
			w.seen++
			if w.seen >= w.budget && !yield(struct{}{}) {
				return
			}
		}
	})
	return w
}

// Step visits up to max elements (at least one) and returns how many it visited and whether
// the walk has ended (every element visited, or Stop).
func (w *Walk) Step(max int) (visited int, done bool) {
	if w.done {
		return 0, true
	}
	w.budget, w.seen = max, 0
	if _, more := w.next(); !more {
		w.done = true
		w.stop()
	}
	return w.seen, w.done
}

// Stop ends the walk early (and frees its coroutine); it may be called at any time, also
// after the walk ended.
func (w *Walk) Stop() {
	if !w.done {
		w.done = true
		w.stop()
	}
}

// Done reports whether the walk has ended.
func (w *Walk) Done() bool { return w.done }
