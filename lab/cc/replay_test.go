package cc

import (
	"strings"
	"testing"

	"ilnp/lab/cc/model"
)

func toStep(kind uint32, in, out model.Window, sin, sout [6]uint32) Step {
	var s Step
	s.Kind = kind
	s.W_in.Cwnd, s.W_in.Cnt, s.W_in.Ssthresh, s.W_in.Clamp = in.Cwnd, in.Cnt, in.Ssthresh, in.Clamp
	s.W_out.Cwnd, s.W_out.Cnt, s.W_out.Ssthresh, s.W_out.Clamp = out.Cwnd, out.Cnt, out.Ssthresh, out.Clamp
	s.S_in, s.S_out = sin, sout
	return s
}

func hyblaWords(h model.HyblaState) [6]uint32 {
	return [6]uint32{h.MinSRTTus, h.Rho, h.SSFrac, h.CAAcc, h.Pad[0], h.Pad[1]}
}

// A trace the model itself produced replays cleanly; one changed output is caught.
func TestReplayTraceCatchesADifference(t *testing.T) {
	h, w := model.NewHybla(), model.Window{Cwnd: 10, Ssthresh: 40, Clamp: 1000}
	var steps []Step
	for i := 0; i < 60; i++ {
		h2, w2 := model.HyblaAck(h, w, 200000, 1, true)
		s := toStep(StepAck, w, w2, hyblaWords(h), hyblaWords(h2))
		s.Acked, s.RttUs, s.Limited = 1, 200000, 1
		steps = append(steps, s)
		h, w = h2, w2
	}
	h2, ss := model.HyblaSsthresh(h, w)
	s := toStep(StepSsthresh, w, w, hyblaWords(h), hyblaWords(h2))
	s.Ret = ss
	steps = append(steps, s)

	r, err := ReplayTrace(Hybla, steps)
	if err != nil || !r.OK() || r.Acks != 60 || r.Ssthresh != 1 || r.Grew == 0 {
		t.Fatalf("clean trace: %+v, %v", r, err)
	}
	steps[30].W_out.Cwnd++
	steps[60].Ret--
	r, _ = ReplayTrace(Hybla, steps)
	if len(r.Mismatches) != 2 || !strings.HasPrefix(r.Mismatches[0], "step 30") {
		t.Fatalf("altered trace: %+v", r.Mismatches)
	}
	if _, err := ReplayTrace(Veno, []Step{{Kind: 9}}); err == nil {
		t.Fatal("unknown step kind accepted")
	}
}
