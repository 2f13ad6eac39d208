// Package model is the window arithmetic of the lab's BPF congestion controls (lab/cc/bpf) in
// Go, step for step and in the same fixed point, so it can be table-tested against traces
// computed by hand and replayed against the steps the BPF programs record.
//
// Units: windows in segments; Hybla's rho in 1/16; window fractions and Veno's backlog in
// 1/256 of a segment.
package model

// Window is the part of the TCP socket the algorithms read and write.
type Window struct {
	Cwnd, Cnt, Ssthresh, Clamp uint32
}

// Reno is the reference the Hybla paper reduces to at rho = 1: slow start adds one segment
// per acknowledged segment up to ssthresh; congestion avoidance one per cwnd acknowledged.
func Reno(w Window, acked uint32) Window {
	cwnd := uint64(w.Cwnd)
	if w.Cwnd < w.Ssthresh {
		cwnd = min(cwnd+uint64(acked), uint64(w.Ssthresh))
	} else {
		w.Cnt += acked
		if w.Cnt >= w.Cwnd {
			d := w.Cnt / max(w.Cwnd, 1)
			w.Cnt -= d * w.Cwnd
			cwnd += uint64(d)
		}
	}
	w.Cwnd = uint32(min(cwnd, uint64(w.Clamp)))
	return w
}

// Hybla constants (bpf/hybla.c).
const (
	HyblaRTT0us  = 25000
	HyblaRhoOne  = 16
	HyblaRhoMax  = 16 * 16
	FracOne      = 256
	hyblaMaxAcc  = 0xffffffff
	VenoBeta     = 3
	venoFSkip    = 1
	venoFRound   = 2
	renoMinSsthr = 2
)

// hyblaPow2Frac is round(65536 * 2^(k/16)).
var hyblaPow2Frac = [16]uint64{65536, 68438, 71468, 74632, 77936, 81386, 84990, 88752,
	92682, 96785, 101070, 105545, 110218, 115098, 120194, 125515}

// HyblaState is struct hybla (icsk_ca_priv), word for word.
type HyblaState struct {
	MinSRTTus uint32 // 0: no RTT yet
	Rho       uint32 // 1/16
	SSFrac    uint32 // slow start fraction, 1/256 segment
	CAAcc     uint32 // congestion avoidance credit, 1/256 segment-ACKs
	Pad       [2]uint32
}

// NewHybla is the state after init.
func NewHybla() HyblaState { return HyblaState{Rho: HyblaRhoOne} }

// HyblaRho is rho = max(RTT / RTT0, 1), in 1/16, at most 16.
func HyblaRho(srttUs uint32) uint32 {
	rho := uint64(srttUs) * HyblaRhoOne / HyblaRTT0us
	return uint32(min(max(rho, HyblaRhoOne), HyblaRhoMax))
}

// HyblaPow2 is 2^rho in 1/256 (rho in 1/16).
func HyblaPow2(rho uint32) uint64 { return (hyblaPow2Frac[rho&15] << (rho >> 4)) >> 8 }

// HyblaAck is one cong_avoid call: acked segments acknowledged, the smoothed RTT, and whether
// the window limited sending (only then does it grow).
func HyblaAck(h HyblaState, w Window, srttUs, acked uint32, limited bool) (HyblaState, Window) {
	cwnd := uint64(w.Cwnd)
	if srttUs != 0 && (h.MinSRTTus == 0 || srttUs < h.MinSRTTus) {
		h.MinSRTTus = srttUs
		h.Rho = HyblaRho(srttUs)
	}
	if !limited || acked == 0 {
		return h, w
	}
	if w.Cwnd < w.Ssthresh {
		inc := (HyblaPow2(h.Rho)-FracOne)*uint64(acked) + uint64(h.SSFrac)
		cwnd += inc / FracOne
		h.SSFrac = uint32(inc % FracOne)
		if cwnd >= uint64(w.Ssthresh) {
			cwnd, h.SSFrac = uint64(w.Ssthresh), 0
		}
	} else {
		acc := uint64(h.CAAcc) + uint64(h.Rho)*uint64(h.Rho)*uint64(acked)
		step := uint64(FracOne) * uint64(max(w.Cwnd, 1))
		if acc >= step {
			d := acc / step
			acc -= d * step
			cwnd += d
		}
		h.CAAcc = uint32(min(acc, hyblaMaxAcc))
	}
	w.Cwnd = uint32(min(cwnd, uint64(w.Clamp)))
	return h, w
}

// HyblaSsthresh is the reaction to a loss: Reno's halving (at least 2), fractions dropped.
func HyblaSsthresh(h HyblaState, w Window) (HyblaState, uint32) {
	h.SSFrac, h.CAAcc = 0, 0
	return h, max(w.Cwnd>>1, renoMinSsthr)
}

// VenoState is struct veno (icsk_ca_priv), word for word.
type VenoState struct {
	BaseRTTus    uint32 // 0: no sample yet
	RoundRTTus   uint32 // smallest sample this round, 0: none
	RoundSamples uint32
	RoundEnd     uint32 // snd_nxt when the round started
	Backlog      uint32 // N, 1/256 segment
	Flags        uint32 // 1: skip the next RTT's growth; 2: a round is being timed
}

// VenoSample is one pkts_acked RTT sample (rtt_us > 0; the program ignores the others).
func VenoSample(v VenoState, rttUs uint32) VenoState {
	if v.BaseRTTus == 0 || rttUs < v.BaseRTTus {
		v.BaseRTTus = rttUs
	}
	if v.RoundRTTus == 0 || rttUs < v.RoundRTTus {
		v.RoundRTTus = rttUs
	}
	v.RoundSamples++
	return v
}

// Congestive says whether Veno's backlog estimate N has reached beta.
func (v VenoState) Congestive() bool { return v.Backlog >= VenoBeta*FracOne }

// VenoBacklog is N = cwnd * (RTT - BaseRTT) / RTT in 1/256 segment.
func VenoBacklog(cwnd, baseUs, rttUs uint32) uint32 {
	if rttUs == 0 {
		return 0
	}
	return uint32(uint64(cwnd) * uint64(rttUs-baseUs) * FracOne / uint64(rttUs))
}

func after(a, b uint32) bool { return int32(b-a) < 0 }

// VenoAck is one cong_avoid call: ack is the acknowledged sequence number, sndNxt the next
// to send (a round ends when ack passes the snd_nxt at its start).
func VenoAck(v VenoState, w Window, ack, sndNxt, acked uint32, limited bool) (VenoState, Window) {
	cwnd := uint64(w.Cwnd)
	if v.Flags&venoFRound == 0 || after(ack, v.RoundEnd) {
		if v.RoundSamples != 0 && v.RoundRTTus != 0 {
			v.Backlog = VenoBacklog(w.Cwnd, v.BaseRTTus, v.RoundRTTus)
		}
		v.RoundEnd, v.RoundRTTus, v.RoundSamples = sndNxt, 0, 0
		v.Flags |= venoFRound
	}
	if !limited || acked == 0 {
		return v, w
	}
	if w.Cwnd < w.Ssthresh {
		cwnd = min(cwnd+uint64(acked), uint64(w.Ssthresh))
	} else {
		w.Cnt += acked
		if w.Cnt >= w.Cwnd {
			rounds := w.Cnt / max(w.Cwnd, 1)
			w.Cnt -= rounds * w.Cwnd
			if !v.Congestive() {
				cwnd += uint64(rounds)
				v.Flags &^= venoFSkip
			} else {
				if v.Flags&venoFSkip == 0 {
					rounds++
				}
				cwnd += uint64(rounds / 2)
				if rounds&1 != 0 {
					v.Flags &^= venoFSkip
				} else {
					v.Flags |= venoFSkip
				}
			}
		}
	}
	w.Cwnd = uint32(min(cwnd, uint64(w.Clamp)))
	return v, w
}

// VenoSsthresh is the reaction to a loss: cwnd * 4/5 when N < beta (random loss), cwnd / 2
// otherwise (congestive), at least 2; random reports which.
func VenoSsthresh(v VenoState, w Window) (ssthresh uint32, random bool) {
	if !v.Congestive() {
		return max(uint32(uint64(w.Cwnd)*4/5), renoMinSsthr), true
	}
	return max(w.Cwnd>>1, renoMinSsthr), false
}
