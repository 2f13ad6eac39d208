package tcx

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The zero Links has nothing attached: Detach says so, Close has nothing to do. Attaching
// real programs is covered by the datapaths' attach tests.
func TestZeroLinks(t *testing.T) {
	var s Links
	if attached, err := s.Detach(1); attached || err != nil {
		t.Fatalf("Detach on empty Links = %v, %v; want false, nil", attached, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close on empty Links: %v", err)
	}
}

// UnpinOthers removes only the link pins of interfaces not kept (plain files stand in for
// pins: the names are what it reads).
func TestUnpinOthers(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{PinName(2, "ingress"), PinName(2, "egress"), PinName(7, "ingress"), "sessions"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := UnpinOthers(dir, map[int]bool{2: true})
	if err != nil || n != 1 {
		t.Fatalf("UnpinOthers = %d, %v; want 1 removed", n, err)
	}
	ents, _ := os.ReadDir(dir)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if strings.Join(left, " ") != "sessions tcx_2_egress tcx_2_ingress" {
		t.Fatalf("left %v", left)
	}
}
