// Package sweep walks a snapshot of a large table in bounded steps. The daemon's periodic
// passes over every session (traffic times into the ILCC, lost events, unproven sessions,
// locator verification) ran in one go on its loop: at 100,000 sessions a pass held the loop
// for a fifth of a second, and a mass move's Locator Updates queued behind it (issue 28). A
// Pass hands the loop a few thousand entries per turn instead, so that whatever else is
// waiting (an LU, a command) runs between two steps.
package sweep

// Pass is one walk over a snapshot. The zero Pass is done.
type Pass[T any] struct {
	items []T
	next  int
}

// New starts a pass over items (kept, not copied: the caller hands the snapshot over).
func New[T any](items []T) *Pass[T] { return &Pass[T]{items: items} }

// Done reports whether every entry was handed out (true for a nil Pass).
func (p *Pass[T]) Done() bool { return p == nil || p.next >= len(p.items) }

// Remaining is how many entries the pass has still to hand out.
func (p *Pass[T]) Remaining() int {
	if p == nil {
		return 0
	}
	return len(p.items) - p.next
}

// Step hands out the next entries, at most limit of them (at least one while any remain,
// whatever limit says: a pass always ends).
func (p *Pass[T]) Step(limit int) []T {
	if p.Done() {
		return nil
	}
	end := p.next + max(limit, 1)
	if end > len(p.items) {
		end = len(p.items)
	}
	out := p.items[p.next:end:end]
	p.next = end
	return out
}
