package window

import "testing"

// The clamp in segments for the MSSs the lab sees (the program does the same division).
func TestSegments(t *testing.T) {
	for _, c := range []struct{ bytes, mss, want int }{
		{ThesisBytes, 1400, 234}, // the thesis's own count (5.3.3)
		{ThesisBytes, 1420, 230}, // ILNP (route MTU 1492, timestamps)
		{ThesisBytes, 1388, 236}, // MIPv6 (advmss 1400, timestamps)
		{ThesisBytes, 1428, 229}, // plain IPv6 on a 1500-byte link
		{1000, 1420, 2},          // never below two segments
		{ThesisBytes, 0, 0},      // no MSS: no clamp
	} {
		if got := Segments(c.bytes, c.mss); got != c.want {
			t.Errorf("Segments(%d, %d) = %d, want %d", c.bytes, c.mss, got, c.want)
		}
	}
}
