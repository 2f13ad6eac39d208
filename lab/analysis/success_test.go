package analysis

import (
	"fmt"
	"math"
	"testing"
)

// table62Errata are the Table 6.2 cells where the printed value is not the
// formula rounded (see Errata); the test holds them to the computed value.
var table62Errata = map[[3]int]string{
	{int(MIPv6RO), 0, 0}: "0.87", // printed 0.86
	{int(MIPv6RO), 0, 3}: "0.41", // printed 0.40
}

func TestTable61(t *testing.T) {
	for _, old := range LossGrid {
		for _, nw := range LossGrid {
			p := PathFromLoss(old, nw)
			if p.R1R3 != p.R3R1 || p.R1HA != p.HAR1 {
				t.Errorf("old %v new %v: asymmetric path %+v", old, nw, p)
			}
			if got, want := fmt.Sprintf("%.2f", p.R1R3), fmt.Sprintf("%.2f", 1-nw); got != want {
				t.Errorf("new %v: P_R1-R3 = %s, want %s", nw, got, want)
			}
			if got, want := fmt.Sprintf("%.2f", p.R1HA), fmt.Sprintf("%.2f", 1-old); got != want {
				t.Errorf("old %v: P_R1-HA = %s, want %s", old, got, want)
			}
			if p.MNR3 != 1 || p.R3MN != 1 || p.CNR1 != 1 || p.R1CN != 1 {
				t.Errorf("eq. 10 violated: %+v", p)
			}
		}
	}
}

func TestTable62AsPrinted(t *testing.T) {
	matched := 0
	for _, proto := range Protocols {
		g := SuccessGrid(proto, 1)
		for i := range LossGrid {
			for j := range LossGrid {
				got := fmt.Sprintf("%.2f", g[i][j])
				printed := Table62Printed[proto][i][j]
				if want, bad := table62Errata[[3]int{int(proto), i, j}]; bad {
					if got != want || got == printed {
						t.Errorf("%s old %d new %d: got %s, want %s (erratum, printed %s)", proto, i, j, got, want, printed)
					}
					continue
				}
				if got != printed {
					t.Errorf("%s old %v new %v: got %s (%.4f), thesis prints %s", proto, LossGrid[i], LossGrid[j], got, g[i][j], printed)
				}
				matched++
			}
		}
	}
	if matched != 46 {
		t.Errorf("matched %d printed cells, want 46 of 48", matched)
	}
}

func TestTable62Examples(t *testing.T) {
	// Spot values quoted in the issue and in §6.2.3's text.
	cases := []struct {
		proto    Protocol
		old, new float64
		want     float64
	}{
		{MIPv6NoRO, 0.01, 0.01, 0.99 * 0.99 * 0.99 * 0.99},
		{MIPv6RO, 0.01, 0.01, math.Pow(0.99, 14)},
		{ILNPv6, 0.01, 0.01, 0.99 * 0.99},
		{MIPv6RO, 0.02, 0.02, math.Pow(0.98, 14)}, // "as low as 75%"
		{MIPv6RO, 0.05, 0.10, math.Pow(0.90, 8) * math.Pow(0.95, 6)},
		{ILNPv6, 0.10, 0.10, 0.81}, // "more than 80%"
	}
	for _, c := range cases {
		got := PathFromLoss(c.old, c.new).Success(c.proto)
		if math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s %v/%v: %v, want %v", c.proto, c.old, c.new, got, c.want)
		}
	}
}

func TestExchangesMatchEqs4to9(t *testing.T) {
	// Distinct per-hop probabilities so a swapped hop shows.
	p := Path{MNR3: 0.91, R3MN: 0.92, R3R1: 0.93, R1R3: 0.94, R1HA: 0.95, HAR1: 0.96, CNR1: 0.97, R1CN: 0.98}
	ro := p.Exchanges(MIPv6RO)
	if len(ro) != 4 {
		t.Fatalf("RO has %d exchanges, want 4", len(ro))
	}
	want := []Exchange{
		{"BU to HA", "BAck from HA", 0.91 * 0.93 * 0.95, 0.96 * 0.94 * 0.92},
		{"HoTI", "HoT", 0.91 * 0.93 * 0.95 * 0.96 * 0.98, 0.97 * 0.95 * 0.96 * 0.94 * 0.92},
		{"CoTI", "CoT", 0.91 * 0.93 * 0.98, 0.97 * 0.94 * 0.92},
		{"BU to CN", "BAck from CN", 0.91 * 0.93 * 0.98, 0.97 * 0.94 * 0.92},
	}
	for i, w := range want {
		g := ro[i]
		if g.Request != w.Request || g.Response != w.Response ||
			math.Abs(g.PRequest-w.PRequest) > 1e-12 || math.Abs(g.PResponse-w.PResponse) > 1e-12 {
			t.Errorf("exchange %d = %+v, want %+v", i, g, w)
		}
	}
	il := p.Exchanges(ILNPv6)
	if len(il) != 1 || il[0].PRequest != ro[2].PRequest || il[0].PResponse != ro[2].PResponse {
		t.Errorf("ILNPv6 exchange %+v, want LU = CoTI and LU-ACK = CoT (eqs. 8-9)", il)
	}
	if no := p.Exchanges(MIPv6NoRO); len(no) != 1 || no[0] != ro[0] {
		t.Errorf("MIPv6 no RO exchanges %+v, want only BU/BAck to HA", no)
	}
	if p.Exchanges(Protocol(9)) != nil || p.Success(Protocol(9)) != 0 {
		t.Error("unknown protocol must have no exchanges and zero success")
	}
}

func TestRetriesOneAttemptIsThesis(t *testing.T) {
	for _, proto := range Protocols {
		for _, old := range LossGrid {
			for _, nw := range LossGrid {
				p := PathFromLoss(old, nw)
				var direct float64
				switch proto { // eqs. 17-19 written out
				case MIPv6NoRO:
					direct = p.R3R1 * p.R1HA * p.HAR1 * p.R1R3
				case MIPv6RO:
					direct = (p.R3R1 * p.R1HA) * (p.HAR1 * p.R1R3) * (p.R3R1 * p.R1HA * p.HAR1) *
						(p.R1HA * p.HAR1 * p.R1R3) * math.Pow(p.R3R1*p.R1R3, 2)
				case ILNPv6:
					direct = p.R3R1 * p.R1R3
				}
				if got := p.SuccessWithRetries(proto, 1); math.Abs(got-direct) > 1e-12 {
					t.Errorf("%s %v/%v: 1 attempt %v, eq. %v", proto, old, nw, got, direct)
				}
			}
		}
	}
}

func TestRetriesMonotoneAndExact(t *testing.T) {
	for _, proto := range Protocols {
		p := PathFromLoss(0.10, 0.05)
		prev := 0.0
		for a := 1; a <= 10; a++ {
			got := p.SuccessWithRetries(proto, a)
			if got <= prev || got > 1 {
				t.Errorf("%s: attempts %d gives %v after %v; want strictly increasing, <= 1", proto, a, got, prev)
			}
			prev = got
		}
		if got := p.SuccessWithRetries(proto, 200); got < 1-1e-9 {
			t.Errorf("%s: 200 attempts gives %v, want ~1", proto, got)
		}
		if p.SuccessWithRetries(proto, 0) != 0 {
			t.Errorf("%s: 0 attempts must fail", proto)
		}
	}
	// Exact sum for ILNPv6, 3 attempts: success on the 1st, 2nd or 3rd try.
	q := 0.9 * 0.9
	want := q + (1-q)*q + (1-q)*(1-q)*q
	if got := PathFromLoss(0.5, 0.1).SuccessWithRetries(ILNPv6, 3); math.Abs(got-want) > 1e-12 {
		t.Errorf("ILNPv6 3 attempts: %v, want %v", got, want)
	}
	// A lossless path always succeeds; a dead new link never does.
	for _, proto := range Protocols {
		if got := PathFromLoss(0, 0).SuccessWithRetries(proto, 1); got != 1 {
			t.Errorf("%s lossless: %v", proto, got)
		}
		if got := PathFromLoss(0, 1).SuccessWithRetries(proto, 5); got != 0 {
			t.Errorf("%s dead new link: %v", proto, got)
		}
	}
}
