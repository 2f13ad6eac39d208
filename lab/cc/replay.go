package cc

import (
	"fmt"

	"ilnp/lab/cc/model"
)

// Step kinds (enum cc_step_kind).
const (
	StepAck      = 1
	StepSsthresh = 2
	StepSample   = 3
)

// Replay is what replaying a BPF trace through lab/cc/model found.
type Replay struct {
	Steps, Acks, Grew, Samples, Ssthresh int
	Mismatches                           []string // the first few steps where BPF and model differ
}

// OK says whether every step matched.
func (r Replay) OK() bool { return len(r.Mismatches) == 0 }

func stepWindows(s Step) (in, out model.Window) {
	in = model.Window{Cwnd: s.W_in.Cwnd, Cnt: s.W_in.Cnt, Ssthresh: s.W_in.Ssthresh, Clamp: s.W_in.Clamp}
	out = model.Window{Cwnd: s.W_out.Cwnd, Cnt: s.W_out.Cnt, Ssthresh: s.W_out.Ssthresh, Clamp: s.W_out.Clamp}
	return in, out
}

func hyblaState(s [6]uint32) model.HyblaState {
	return model.HyblaState{MinSRTTus: s[0], Rho: s[1], SSFrac: s[2], CAAcc: s[3], Pad: [2]uint32{s[4], s[5]}}
}

func venoState(s [6]uint32) model.VenoState {
	return model.VenoState{BaseRTTus: s[0], RoundRTTus: s[1], RoundSamples: s[2], RoundEnd: s[3], Backlog: s[4], Flags: s[5]}
}

// ReplayTrace feeds every step's inputs (the state and window before it) through the model
// and compares the model's outputs with what the BPF program computed.
func ReplayTrace(algo string, steps []Step) (Replay, error) {
	var r Replay
	bad := func(i int, s Step, format string, a ...any) {
		if len(r.Mismatches) < 5 {
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("step %d (kind %d, %+v): ", i, s.Kind, s)+fmt.Sprintf(format, a...))
		}
	}
	for i, s := range steps {
		r.Steps++
		win, wout := stepWindows(s)
		switch {
		case algo == Hybla && s.Kind == StepAck:
			r.Acks++
			h, w := model.HyblaAck(hyblaState(s.S_in), win, s.RttUs, s.Acked, s.Limited != 0)
			if w.Cwnd > win.Cwnd {
				r.Grew++
			}
			if h != hyblaState(s.S_out) || w != wout {
				bad(i, s, "model state %+v window %+v", h, w)
			}
		case algo == Hybla && s.Kind == StepSsthresh:
			r.Ssthresh++
			h, ss := model.HyblaSsthresh(hyblaState(s.S_in), win)
			if h != hyblaState(s.S_out) || ss != s.Ret {
				bad(i, s, "model state %+v ssthresh %d", h, ss)
			}
		case algo == Veno && s.Kind == StepSample:
			r.Samples++
			if v := model.VenoSample(venoState(s.S_in), s.RttUs); v != venoState(s.S_out) {
				bad(i, s, "model state %+v", v)
			}
		case algo == Veno && s.Kind == StepAck:
			r.Acks++
			v, w := model.VenoAck(venoState(s.S_in), win, s.Ack, s.SndNxt, s.Acked, s.Limited != 0)
			if w.Cwnd > win.Cwnd {
				r.Grew++
			}
			if v != venoState(s.S_out) || w != wout {
				bad(i, s, "model state %+v window %+v", v, w)
			}
		case algo == Veno && s.Kind == StepSsthresh:
			r.Ssthresh++
			ss, _ := model.VenoSsthresh(venoState(s.S_in), win)
			if ss != s.Ret || venoState(s.S_in) != venoState(s.S_out) {
				bad(i, s, "model ssthresh %d", ss)
			}
		default:
			return r, fmt.Errorf("%s trace step %d: unknown kind %d", algo, i, s.Kind)
		}
	}
	return r, nil
}
