package model

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

const big = 1 << 30

func TestHyblaPow2Table(t *testing.T) {
	for k, v := range hyblaPow2Frac {
		want := math.Round(65536 * math.Pow(2, float64(k)/16))
		if float64(v) != want {
			t.Errorf("2^(%d/16) = %d in 1/65536, want %.0f", k, v, want)
		}
	}
	for _, c := range []struct {
		rho  uint32
		want uint64
	}{
		{16, 512},    // 2^1
		{24, 724},    // 2^1.5 = 2.828 -> 724.08/256
		{128, 65536}, // 2^8
		{256, 1 << 24},
	} {
		if got := HyblaPow2(c.rho); got != c.want {
			t.Errorf("HyblaPow2(%d/16) = %d, want %d", c.rho, got, c.want)
		}
	}
}

func TestHyblaRho(t *testing.T) {
	for _, c := range []struct{ srtt, want uint32 }{
		{0, 16}, {1000, 16}, {25000, 16}, // RTT <= RTT0: rho = 1
		{37500, 24},    // 1.5
		{200000, 128},  // 200 ms: rho = 8
		{400000, 256},  // 16
		{1000000, 256}, // capped at 16
	} {
		if got := HyblaRho(c.srtt); got != c.want {
			t.Errorf("rho(%d us) = %d/16, want %d/16", c.srtt, got, c.want)
		}
	}
}

// At RTT = RTT0 (and below) Hybla must grow exactly as Reno, ACK for ACK.
func TestHyblaAtRTT0IsReno(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, srtt := range []uint32{300, 25000} {
		h := NewHybla()
		hw := Window{Cwnd: 2, Ssthresh: 40, Clamp: 500}
		rw := hw
		for i := 0; i < 5000; i++ {
			acked := uint32(1 + rng.Intn(3))
			h, hw = HyblaAck(h, hw, srtt, acked, true)
			rw = Reno(rw, acked)
			if hw.Cwnd != rw.Cwnd || h.CAAcc != 256*rw.Cnt {
				t.Fatalf("srtt %d us, ACK %d: Hybla cwnd %d (credit %d/256), Reno %d (cnt %d)", srtt, i, hw.Cwnd, h.CAAcc, rw.Cwnd, rw.Cnt)
			}
			if i == 2500 { // a loss half-way: both halve
				var ss uint32
				h, ss = HyblaSsthresh(h, hw)
				hw.Ssthresh, hw.Cwnd = ss, ss
				rw.Ssthresh, rw.Cwnd, rw.Cnt = max(rw.Cwnd/2, 2), max(rw.Cwnd/2, 2), 0
			}
		}
		if hw.Cwnd <= 40 {
			t.Errorf("srtt %d: cwnd %d after 5000 ACKs never left slow start's ssthresh", srtt, hw.Cwnd)
		}
	}
}

type hyblaStep struct {
	srtt, acked uint32
	cwnd        uint32 // after
	frac, acc   uint32 // after
}

// Traces computed by hand from the paper's rules.
func TestHyblaHandTraces(t *testing.T) {
	cases := []struct {
		name  string
		w     Window
		steps []hyblaStep
	}{
		// Reno slow start at rho = 1: +1 per acknowledged segment, capped at ssthresh.
		{"rho1-slowstart", Window{Cwnd: 10, Ssthresh: 14, Clamp: big}, []hyblaStep{
			{25000, 1, 11, 0, 0}, {25000, 2, 13, 0, 0}, {25000, 3, 14, 0, 0},
		}},
		// rho = 8 (200 ms): slow start adds 2^8 - 1 = 255 segments per ACK.
		{"rho8-slowstart", Window{Cwnd: 10, Ssthresh: big, Clamp: big}, []hyblaStep{
			{200000, 1, 265, 0, 0}, {200000, 1, 520, 0, 0}, {200000, 2, 1030, 0, 0},
		}},
		// rho = 8 in congestion avoidance: rho^2 / cwnd = 64 / 64 = 1 segment per ACK ...
		{"rho8-ca-64", Window{Cwnd: 64, Ssthresh: 64, Clamp: big}, []hyblaStep{
			{200000, 1, 65, 0, 0},     // 64*256 credit = one segment at cwnd 64
			{200000, 1, 65, 0, 16384}, // < 65 * 256
			{200000, 1, 66, 0, 16128}, // 32768 >= 16640: +1, 16128 left
		}},
		// ... and 64 / 100 = 0.64 per ACK at cwnd 100.
		{"rho8-ca-100", Window{Cwnd: 100, Ssthresh: 100, Clamp: big}, []hyblaStep{
			{200000, 1, 100, 0, 16384},
			{200000, 1, 101, 0, 7168},  // 32768 - 25600
			{200000, 1, 101, 0, 23552}, // < 101 * 256 = 25856
			{200000, 1, 102, 0, 14080}, // 39936 - 25856
		}},
		// rho = 1.5 (37.5 ms): 2^1.5 - 1 = 1.828 segments per ACK, fractions carried.
		{"rho1.5-slowstart", Window{Cwnd: 10, Ssthresh: big, Clamp: big}, []hyblaStep{
			{37500, 1, 11, 212, 0}, // 468/256 = 1 + 212/256
			{37500, 1, 13, 168, 0}, // 468 + 212 = 680 = 2 + 168/256
		}},
		// The clamp bounds the window.
		{"clamp", Window{Cwnd: 10, Ssthresh: big, Clamp: 100}, []hyblaStep{{200000, 1, 100, 0, 0}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, w := NewHybla(), c.w
			for i, s := range c.steps {
				h, w = HyblaAck(h, w, s.srtt, s.acked, true)
				if w.Cwnd != s.cwnd || h.SSFrac != s.frac || h.CAAcc != s.acc {
					t.Fatalf("step %d: cwnd %d frac %d acc %d, want %d %d %d", i, w.Cwnd, h.SSFrac, h.CAAcc, s.cwnd, s.frac, s.acc)
				}
			}
		})
	}
}

func TestHyblaNotLimitedOnlyLearnsRTT(t *testing.T) {
	h, w := HyblaAck(NewHybla(), Window{Cwnd: 10, Ssthresh: big, Clamp: big}, 200000, 5, false)
	if w.Cwnd != 10 || h.Rho != 128 || h.MinSRTTus != 200000 {
		t.Fatalf("cwnd %d rho %d min %d", w.Cwnd, h.Rho, h.MinSRTTus)
	}
	// A larger RTT later (queueing) does not raise rho.
	h, _ = HyblaAck(h, w, 300000, 1, false)
	if h.Rho != 128 {
		t.Fatalf("rho rose to %d with a larger RTT", h.Rho)
	}
}

func TestHyblaSsthresh(t *testing.T) {
	h := HyblaState{Rho: 128, SSFrac: 5, CAAcc: 99}
	for _, c := range []struct{ cwnd, want uint32 }{{100, 50}, {101, 50}, {3, 2}, {1, 2}} {
		h2, ss := HyblaSsthresh(h, Window{Cwnd: c.cwnd})
		if ss != c.want || h2.SSFrac != 0 || h2.CAAcc != 0 || h2.Rho != 128 {
			t.Errorf("cwnd %d: ssthresh %d (want %d), state %+v", c.cwnd, ss, c.want, h2)
		}
	}
}

func TestVenoBacklogAndLoss(t *testing.T) {
	for _, c := range []struct {
		cwnd, base, rtt uint32
		n               uint32 // 1/256
		ssthresh        uint32
		random          bool
	}{
		{10, 100000, 110000, 232, 8, true},    // N = 10*10/110 = 0.91 < 3: random, x 4/5
		{30, 100000, 125000, 1536, 15, false}, // N = 30*25/125 = 6 >= 3: congestive, halve
		{100, 100000, 100000, 0, 80, true},    // no queue
		{12, 100000, 133334, 768, 6, false},   // N = 3.00: congestive (beta reached)
		{2, 100000, 100000, 0, 2, true},       // never below 2
	} {
		n := VenoBacklog(c.cwnd, c.base, c.rtt)
		if n != c.n {
			t.Errorf("N(cwnd %d, base %d, rtt %d) = %d/256, want %d", c.cwnd, c.base, c.rtt, n, c.n)
		}
		ss, random := VenoSsthresh(VenoState{Backlog: n}, Window{Cwnd: c.cwnd})
		if ss != c.ssthresh || random != c.random {
			t.Errorf("cwnd %d N %d/256: ssthresh %d random %v, want %d %v", c.cwnd, n, ss, random, c.ssthresh, c.random)
		}
	}
}

// Veno halves only on a congestive loss and takes 4/5 on a random one, from the N the
// samples and rounds produced; with N >= beta it grows one segment every other RTT.
func TestVenoHandTrace(t *testing.T) {
	v := VenoState{}
	w := Window{Cwnd: 10, Ssthresh: 10, Clamp: big}
	seq := uint32(1000)
	ack := func() { // one segment acknowledged; a full window outstanding
		seq++
		v, w = VenoAck(v, w, seq, seq+w.Cwnd, 1, true)
	}
	// ACKs 1-10 (a sample of 100 ms before the third): the first starts a round ending at
	// 1011; ten acknowledged at N = 0 < beta: +1.
	for i := 1; i <= 10; i++ {
		if i == 3 {
			v = VenoSample(v, 100000)
		}
		ack()
	}
	if w.Cwnd != 11 || v.BaseRTTus != 100000 || v.RoundEnd != 1011 {
		t.Fatalf("after 10 ACKs: cwnd %d base %d round end %d", w.Cwnd, v.BaseRTTus, v.RoundEnd)
	}
	if ss, random := VenoSsthresh(v, w); ss != 8 || !random {
		t.Fatalf("loss with no queue: ssthresh %d random %v, want 8 (11*4/5) random", ss, random)
	}
	// ACKs 11-35, each after a 150 ms sample. ACK 12 ends round 1 (its minimum: 100 ms, N = 0)
	// and starts one ending at 1012+11 = 1023; ACK 21 completes 11 more: cwnd 12. ACK 24 ends
	// that round at cwnd 12 with RTT 150 ms: N = 12*(150-100)/150 = 4 >= beta. ACK 33
	// completes 12 more: the first RTT's worth at N >= beta grows (+1, cwnd 13), the next
	// will not.
	for i := 11; i <= 35; i++ {
		v = VenoSample(v, 150000)
		ack()
	}
	if v.Backlog != 4*256 || !v.Congestive() || w.Cwnd != 13 || w.Cnt != 2 {
		t.Fatalf("after 35 ACKs: N %d/256 cwnd %d cnt %d, want 1024, 13, 2", v.Backlog, w.Cwnd, w.Cnt)
	}
	if ss, random := VenoSsthresh(v, w); ss != 6 || random {
		t.Fatalf("congestive loss: ssthresh %d random %v, want 6 (13/2)", ss, random)
	}
	// Four more windows of ACKs at 150 ms (N = cwnd/3 stays >= beta): +0, +1, +0, +1.
	start := w.Cwnd
	var grown []uint32
	for r := 0; r < 4; r++ {
		for n := w.Cwnd; n > 0; n-- {
			v = VenoSample(v, 150000)
			ack()
		}
		grown = append(grown, w.Cwnd-start)
	}
	if want := []uint32{0, 1, 1, 2}; fmt.Sprint(grown) != fmt.Sprint(want) {
		t.Fatalf("growth over four RTTs at N >= beta: %v, want %v (Reno: 1 2 3 4)", grown, want)
	}
}

func TestVenoSlowStartAndNotLimited(t *testing.T) {
	v, w := VenoAck(VenoState{}, Window{Cwnd: 10, Ssthresh: 12, Clamp: big}, 5, 50, 3, true)
	if w.Cwnd != 12 {
		t.Fatalf("slow start past ssthresh: %d, want 12", w.Cwnd)
	}
	_, w2 := VenoAck(v, Window{Cwnd: 10, Ssthresh: 12, Clamp: big}, 6, 50, 3, false)
	if w2.Cwnd != 10 {
		t.Fatalf("grew while not window-limited: %d", w2.Cwnd)
	}
}
