package node

import (
	"sync"

	"ilnp/internal/timeline"
)

// history keeps the last events for `ilnpctl events` (the timeline file keeps them all).
type history struct {
	mu     sync.Mutex
	events []timeline.Event
	next   int
	full   bool
}

func newHistory(size int) *history { return &history{events: make([]timeline.Event, size)} }

func (h *history) add(e timeline.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events[h.next] = e
	h.next = (h.next + 1) % len(h.events)
	if h.next == 0 {
		h.full = true
	}
}

// all returns the kept events, oldest first.
func (h *history) all() []timeline.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.full {
		return append([]timeline.Event(nil), h.events[:h.next]...)
	}
	return append(append([]timeline.Event(nil), h.events[h.next:]...), h.events[:h.next]...)
}
