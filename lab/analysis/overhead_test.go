package analysis

import "testing"

func TestOverheadHandComputed(t *testing.T) {
	th := ThesisMIPv6Sizes()
	il := ThesisILNPSizes()
	cases := []struct {
		name string
		got  Overhead
		want Overhead
	}{
		// eqs. 43-44: 2·MN packets, 204·MN bytes
		{"no RO 1 MN", MIPv6NoROOverhead(1, th), Overhead{2, 204}},
		{"no RO 100 MNs", MIPv6NoROOverhead(100, th), Overhead{200, 20400}}, // "around 200 packets", "20 Kbytes"
		// eqs. 47-48: MN·(2+6·CN) packets, MN·(204+596·CN) bytes
		{"RO 1x1", MIPv6ROOverhead(1, 1, th), Overhead{8, 800}},
		{"RO 3x7", MIPv6ROOverhead(3, 7, th), Overhead{3 * 44, 3 * (204 + 596*7)}},
		{"RO 100x100", MIPv6ROOverhead(100, 100, th), Overhead{60200, 5980400}},
		// eqs. 51-52: 2·MN·CN packets, 172·MN·CN bytes
		{"ILNP 1x1", ILNPv6Overhead(1, 1, il), Overhead{2, 172}},
		{"ILNP 3x7", ILNPv6Overhead(3, 7, il), Overhead{42, 3612}},
		{"ILNP 100x100", ILNPv6Overhead(100, 100, il), Overhead{20000, 1720000}}, // "around 20,000 extra packets"
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, c.got, c.want)
		}
	}
	// The per-CN RO sum is 596 bytes (eq. 48) and the home pair 204 (eq. 44).
	if th.perCN() != 596 || th.home() != 204 {
		t.Errorf("thesis sums: per CN %d, home %d; want 596, 204", th.perCN(), th.home())
	}
}

func TestOverheadScalesWithSizes(t *testing.T) {
	s := MIPv6Sizes{BUHA: 1, BAckHA: 2, HoTI: 4, HoT: 8, CoTI: 16, CoT: 32, BUCN: 64, BAckCN: 128}
	if got := MIPv6ROOverhead(2, 3, s).Bytes; got != 2*(3+3*252) {
		t.Errorf("RO bytes with distinct sizes = %d, want %d", got, 2*(3+3*252))
	}
	if got := ILNPv6Overhead(2, 3, ILNPSizes{LU: 100, LUAck: 1}).Bytes; got != 606 {
		t.Errorf("ILNP bytes with LU 100, ACK 1 = %d, want 606", got)
	}
}

func TestLUWireSize(t *testing.T) {
	w := DefaultLUWire()
	if got := w.Size(); got != 68 { // 40 + 8 + 8 + 12
		t.Errorf("default LU = %d bytes, want 68", got)
	}
	if s := w.Sizes(); s.LU != 68 || s.LUAck != 68 {
		t.Errorf("LU/LU-ACK = %+v, want 68/68", s)
	}
	w.NonceLen = 12
	if got := w.NonceOptionHeader(); got != 16 {
		t.Errorf("12-byte nonce option header = %d, want 16", got)
	}
	w.Locators = 2
	w.LinkHeader = 14
	if got := w.Size(); got != 14+40+16+8+24 {
		t.Errorf("Ethernet, 12-byte nonce, 2 locators = %d, want %d", got, 14+40+16+8+24)
	}
}
