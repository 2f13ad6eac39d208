package analysis

import (
	"testing"
	"time"
)

// render formats a computed cell the way Tables 6.5-6.12 print it.
func render(c Cell, col Column, delay bool) string {
	if !c.OK {
		return "N/A"
	}
	s := Ms(c.D)
	if col == ColILNPSoft && !delay {
		s += "*"
	}
	return s
}

func TestTables65to612AsPrinted(t *testing.T) {
	if len(DelayTablesPrinted) != 8 {
		t.Fatalf("%d printed tables, want 8 (6.5-6.12)", len(DelayTablesPrinted))
	}
	cells := 0
	for _, pt := range DelayTablesPrinted {
		in := ThesisInputs(pt.Scenario)
		got := in.InterruptionTable()
		if pt.Delay {
			got = in.DelayTable()
		}
		for i, c := range LossCases {
			for j, col := range Columns {
				if g := render(got[i][j], col, pt.Delay); g != pt.Cells[i][j] {
					t.Errorf("Table %s %q / %s: computed %s, thesis prints %s", pt.Number, c, col, g, pt.Cells[i][j])
				}
				cells++
			}
		}
	}
	if cells != 128 {
		t.Errorf("checked %d cells, want 128", cells)
	}
}

func TestDelayExamples(t *testing.T) {
	in := ThesisInputs(LANtoLAN)
	if d, _ := in.HandoffDelay(ColILNPHard, NoLoss); d != 7*time.Millisecond {
		t.Errorf("Table 6.5 ILNP no loss = %v, want 7ms", d)
	}
	if d, _ := in.HandoffDelay(ColMIPNoRO, NoLoss); d != 1005*time.Millisecond {
		t.Errorf("Table 6.5 MIP no RO = %v, want 1005ms", d)
	}
	if d, _ := in.Interruption(ColILNPHard, NoLoss); d != 4500*time.Microsecond {
		t.Errorf("Table 6.6 ILNP hard = %v, want 4.5ms", d)
	}
	// The return routability term picks the home path when it is longer
	// (WAN to LAN: 200 + 200 + 2 > 5 + 2) and the care-of path otherwise.
	w := ThesisInputs(WANtoLAN)
	if got := w.returnRoutability(); got != 402*time.Millisecond {
		t.Errorf("WAN to LAN return routability = %v, want 402ms", got)
	}
	in2 := Inputs{RTTMNHA: time.Millisecond, RTTHACN: time.Millisecond, RTTMNCN: 50 * time.Millisecond, TCoT: 3 * time.Millisecond}
	if got := in2.returnRoutability(); got != 53*time.Millisecond {
		t.Errorf("care-of dominated return routability = %v, want 53ms", got)
	}
	// Loss timers add exactly once, to the right rows only.
	for _, s := range Scenarios {
		in := ThesisInputs(s)
		base, _ := in.HandoffDelay(ColMIPRO, NoLoss)
		if d, _ := in.HandoffDelay(ColMIPRO, ROLost); d-base != in.DeltaM1 {
			t.Errorf("%s: RO loss adds %v, want Δ_M1", s, d-base)
		}
		ib, _ := in.Interruption(ColILNPHard, NoLoss)
		if d, _ := in.Interruption(ColILNPHard, AckLost); d != ib {
			t.Errorf("%s: LU-ACK loss changes interruption to %v", s, d)
		}
		if _, ok := in.HandoffDelay(ColMIPNoRO, ROLost); ok {
			t.Errorf("%s: MIP no RO has no RO packets", s)
		}
		if _, ok := in.Interruption(ColILNPSoft, ROLost); ok {
			t.Errorf("%s: ILNP soft has no RO packets", s)
		}
	}
}

func TestMs(t *testing.T) {
	for d, want := range map[time.Duration]string{
		7 * time.Millisecond: "7", 1002500 * time.Microsecond: "1002.5", 0: "0", 4500 * time.Microsecond: "4.5",
	} {
		if got := Ms(d); got != want {
			t.Errorf("Ms(%v) = %q, want %q", d, got, want)
		}
	}
}
