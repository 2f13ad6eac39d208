package node

import (
	"testing"

	"ilnp/internal/datapath"
	"ilnp/internal/timeline"
)

// Every drop the datapath reports is counted; the timeline gets them, kernel-stamped, up to the
// budget, so a flood of packets to an aged locator cannot grow the events file without bound.
func TestDatapathDropsOnTimelineWithinBudget(t *testing.T) {
	n := &Node{
		history:  newHistory(4 * dropEventBurst),
		timeline: timeline.NewWriter(nil),
		counters: map[string]uint64{},
		drops:    newDropLog(),
	}
	const sent = dropEventBurst + 500
	for i := range sent {
		n.datapathDrop(datapath.Event{Type: datapath.EventInvalidLocalLocator, Ns: uint64(1000 + i)})
	}
	var onTimeline int
	for _, e := range n.history.all() {
		if e.Kind != timeline.DatapathDrop {
			continue
		}
		if onTimeline == 0 && e.MonoNS != 1000 {
			t.Errorf("first drop stamped %d, want the datapath's kernel stamp 1000", e.MonoNS)
		}
		onTimeline++
	}
	if onTimeline != dropEventBurst {
		t.Errorf("%d drops on the timeline, want the budget %d", onTimeline, dropEventBurst)
	}
	if got := n.counters["drop_invalid-local-locator"]; got != sent {
		t.Errorf("counter drop_invalid-local-locator = %d, want every drop (%d)", got, sent)
	}
}
