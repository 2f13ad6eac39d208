package datapath

import (
	"testing"

	"ilnp/internal/nstest"
)

func TestLoadAndCounterNames(t *testing.T) {
	nstest.RequireRoot(t)
	spec, err := loadIlnpBPF()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(counterNames), int(spec.Maps["counters"].MaxEntries); got != want {
		t.Fatalf("Go knows %d counter names, the datapath has %d counters", got, want)
	}
	d, err := Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := d.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if len(c) != len(counterNames) {
		t.Fatalf("Counters returned %d, want %d", len(c), len(counterNames))
	}
}
