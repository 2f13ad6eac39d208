package datapath

import (
	"testing"

	"ilnp/internal/nstest"
)

// TestEventRingSize: event-ring-size sizes the ring the datapath queues its events in, and a
// ring of another size is another layout (a pinned one is refused until a flush).
func TestEventRingSize(t *testing.T) {
	nstest.RequireRoot(t)
	spec, err := loadIlnpBPF()
	if err != nil {
		t.Fatal(err)
	}
	def := spec.Maps["events"].MaxEntries
	d, err := Load(Options{EventRingSize: 4 * def})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := d.objs.Events.MaxEntries(); got != 4*def {
		t.Fatalf("ring of %d bytes, want %d", got, 4*def)
	}
	other := spec.Copy()
	other.Maps["events"].MaxEntries = 4 * def
	if layoutOf(spec) == layoutOf(other) {
		t.Fatal("the ring's size is not part of the layout")
	}
}
