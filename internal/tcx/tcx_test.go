package tcx

import "testing"

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
