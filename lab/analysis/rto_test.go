package analysis

import (
	"math"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestRTO(t *testing.T) {
	p := DefaultRTOPolicy()
	cases := map[time.Duration]time.Duration{
		5 * ms:                 50 * ms,  // R + 2R = 15 ms, raised to the floor
		20 * ms:                60 * ms,  // R + 2R
		200 * ms:               600 * ms, // R + 2R
		0:                      time.Second,
		30 * time.Second:       8 * time.Second, // capped
		100 * time.Microsecond: 50 * ms,
	}
	for est, want := range cases {
		if got := p.RTO(est); got != want {
			t.Errorf("RTO(%v) = %v, want %v", est, got, want)
		}
	}
	// Granularity dominates 2R when R is tiny.
	q := RTOPolicy{K: 4, G: 100 * ms, Backoff: 2, MaxAttempts: 3}
	if got := q.RTO(ms); got != 101*ms {
		t.Errorf("RTO with G=100ms = %v, want 101ms", got)
	}
}

func TestSchedule(t *testing.T) {
	p := DefaultRTOPolicy()
	got := p.Schedule(5 * ms)
	// raw 15 ms doubling: 15, 30, 60, ... with the 50 ms floor applied after.
	want := []time.Duration{50 * ms, 50 * ms, 60 * ms, 120 * ms, 240 * ms, 480 * ms}
	if len(got) != len(want) {
		t.Fatalf("schedule %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("wait %d = %v, want %v", i, got[i], want[i])
		}
	}
	p.Max = 100 * ms
	if g := p.Schedule(5 * ms); g[2] != 60*ms || g[3] != 100*ms || g[5] != 100*ms {
		t.Errorf("capped schedule %v", g)
	}
	if g := DefaultRTOPolicy().Schedule(0); g[0] != time.Second || g[3] != 8*time.Second || g[5] != 8*time.Second {
		t.Errorf("no-sample schedule %v, want 1, 2, 4, 8, 8, 8 s", g)
	}
	p.MaxAttempts = 1
	if g := p.Schedule(5 * ms); g != nil {
		t.Errorf("one attempt has no retransmissions, got %v", g)
	}
	if g := FixedSchedule(time.Second, 3); len(g) != 2 || g[0] != time.Second || g[1] != time.Second {
		t.Errorf("fixed schedule %v", g)
	}
}

func TestAdaptiveTables(t *testing.T) {
	p := DefaultRTOPolicy()
	in := ThesisInputs(LANtoLAN).WithAdaptiveLU(p, 5*ms)
	if d, _ := in.HandoffDelay(ColILNPHard, UpdateLost); d != 57*ms { // 5 + 2 + 50
		t.Errorf("LAN-LAN LU lost, adaptive = %v, want 57ms", d)
	}
	if d, _ := in.Interruption(ColILNPHard, UpdateLost); d != 54500*time.Microsecond { // 2.5 + 2 + 50
		t.Errorf("LAN-LAN interruption LU lost, adaptive = %v, want 54.5ms", d)
	}
	w := ThesisInputs(WANtoWAN).WithAdaptiveLU(p, 200*ms)
	if d, _ := w.HandoffDelay(ColILNPSoft, AckLost); d != 802*ms { // 200 + 2 + 600
		t.Errorf("WAN-WAN LU-ACK lost, adaptive = %v, want 802ms", d)
	}
	// Nothing but Δ_I changes: MIPv6 rows stay as printed.
	if d, _ := in.HandoffDelay(ColMIPNoRO, UpdateLost); d != 2505*ms {
		t.Errorf("MIPv6 changed under adaptive LU timer: %v", d)
	}
	if OldPathRTTMNCN(LANtoWAN) != 5*ms || OldPathRTTMNCN(WANtoLAN) != 200*ms {
		t.Error("old-path RTT assumption changed")
	}
}

func TestRetry(t *testing.T) {
	base := 7 * ms
	if r := Retry(1, FixedSchedule(time.Second, 7), base); r.PSuccess != 1 || r.MeanDelay != base {
		t.Errorf("lossless: %+v", r)
	}
	if r := Retry(0, FixedSchedule(time.Second, 7), base); r.PSuccess != 0 || r.MeanDelay != 0 {
		t.Errorf("dead path: %+v", r)
	}
	// Two attempts, p = 0.5: success 0.75; delay base w.p. 0.5, base + 1 s w.p. 0.25.
	r := Retry(0.5, []time.Duration{time.Second}, base)
	wantMean := (0.5*float64(base) + 0.25*float64(time.Second+base)) / 0.75
	if math.Abs(r.PSuccess-0.75) > 1e-12 || math.Abs(float64(r.MeanDelay)-wantMean) > 1 || r.MaxDelay != time.Second+base {
		t.Errorf("two attempts: %+v, want P 0.75 mean %v", r, time.Duration(wantMean))
	}
	// Transmissions: one on a clean path with a long timer; all seven when
	// the timer (15 ms) is far below the RTT (202 ms) or nothing answers.
	if r := Retry(1, FixedSchedule(time.Second, 7), base); r.MeanTransmissions != 1 {
		t.Errorf("clean path sends %v LUs, want 1", r.MeanTransmissions)
	}
	if r := Retry(1, FixedSchedule(15*ms, 7), 202*ms); r.MeanTransmissions != 7 {
		t.Errorf("short timer sends %v LUs, want 7", r.MeanTransmissions)
	}
	if r := Retry(0, FixedSchedule(time.Second, 7), base); r.MeanTransmissions != 7 {
		t.Errorf("dead path sends %v LUs, want 7", r.MeanTransmissions)
	}
	// p = 0.5, waits 1 s, base 7 ms: 1 LU w.p. 0.5, 2 w.p. 0.25, 3 w.p. 0.25.
	if r := Retry(0.5, FixedSchedule(time.Second, 3), base); math.Abs(r.MeanTransmissions-1.75) > 1e-12 {
		t.Errorf("p 0.5, 3 attempts: %v LUs, want 1.75", r.MeanTransmissions)
	}
	// Retry's P(success) is SuccessWithRetries for the same attempts.
	path := PathFromLoss(0.05, 0.10)
	for a := 1; a <= 7; a++ {
		got := Retry(path.Exchanges(ILNPv6)[0].P(), FixedSchedule(time.Second, a), base).PSuccess
		if want := path.SuccessWithRetries(ILNPv6, a); math.Abs(got-want) > 1e-12 {
			t.Errorf("attempts %d: Retry %v, SuccessWithRetries %v", a, got, want)
		}
	}
	// Adaptive beats fixed on a LAN whenever an LU is lost.
	p := PathFromLoss(0, 0.10).Exchanges(ILNPv6)[0].P()
	fixed := Retry(p, FixedSchedule(time.Second, 7), base)
	adaptive := Retry(p, DefaultRTOPolicy().Schedule(5*ms), base)
	if adaptive.MeanDelay >= fixed.MeanDelay {
		t.Errorf("adaptive mean %v not below fixed %v", adaptive.MeanDelay, fixed.MeanDelay)
	}
}
