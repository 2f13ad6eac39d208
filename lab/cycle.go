package lab

import (
	"fmt"
	"math"
	"slices"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/linkemu"
	"ilnp/lab/pcap"
)

// Thesis 3.3's initial evaluation (MobiArch 2014): the MN hands off between an emulated WiFi
// network and an emulated 3G network every 9 s, with 5 s in the overlap, through a 75-s flow
// (8 handoffs), and the run is judged by packet delay, handoff delay, LU/LU-ACK exchanges per
// handoff and gratuitous loss (the loss above the networks' own, eq. 5). `ilnp-lab run
// --cycle 9s` repeats the run's move: the interface of the other network comes up every
// period after --enter, the old one goes down --leave minus --enter after that
// (`--access-r2 wifi --access-r3 3g --enter 9s --leave 14s --duration 75s` is the thesis's).

// handoffCycle makes the moves after the run's first one.
type handoffCycle struct {
	period, overlap time.Duration
	ups             []float64 // each handoff (the new interface up), seconds since the flow started
	toL3            []bool    // which way it went
	downs           []float64
	pendingDown     string // the interface to take down at the next down time ("" none)
	nextUp          time.Duration
	nextDown        time.Duration
}

func newHandoffCycle(cfg RunConfig) *handoffCycle {
	if cfg.Cycle <= 0 {
		return nil
	}
	p := cfg.Profile
	return &handoffCycle{period: cfg.Cycle, overlap: p.Leave - p.Enter, nextUp: p.Enter + cfg.Cycle}
}

// validCycle checks --cycle against the timing.
func (c *RunConfig) validCycle() error {
	if c.Cycle <= 0 {
		return nil
	}
	overlap := c.Profile.Leave - c.Profile.Enter
	if c.Cycle <= overlap {
		return fmt.Errorf("--cycle %v must be longer than the overlap (--leave - --enter = %v)", c.Cycle, overlap)
	}
	if c.Multihome || c.DoubleJump || c.Families.Cross() || !NeedsILNP(c.Mode) {
		return fmt.Errorf("--cycle: ILNP modes on the plain testbed only (not --multihome, --double-jump, --families)")
	}
	return nil
}

// step makes the cycle's moves due at el (the run's first enter and leave happened already).
func (h *handoffCycle) step(topo *Topology, el time.Duration, meta *RunMeta, events *timeline.Writer) error {
	if len(h.ups) == 0 {
		h.ups, h.toL3, h.downs = []float64{meta.EnterAtS}, []bool{true}, []float64{meta.LeaveAtS}
	}
	if h.pendingDown != "" && el >= h.nextDown {
		if _, err := topo.MN.Run("ip", "link", "set", h.pendingDown, "down"); err != nil {
			return err
		}
		events.Emit(timeline.Event{Kind: "lab_leave", Node: "lab", Iface: h.pendingDown})
		h.downs = append(h.downs, el.Seconds())
		h.pendingDown = ""
	}
	if el >= h.nextUp && h.pendingDown == "" {
		toL3 := !h.toL3[len(h.toL3)-1]
		up, down := IfMNR2, IfMNR3
		if toL3 {
			up, down = IfMNR3, IfMNR2
		}
		if _, err := topo.MN.Run("ip", "link", "set", up, "up"); err != nil {
			return err
		}
		events.Emit(timeline.Event{Kind: "lab_enter", Node: "lab", Iface: up})
		h.ups, h.toL3 = append(h.ups, el.Seconds()), append(h.toL3, toL3)
		h.pendingDown, h.nextDown = down, el+h.overlap
		h.nextUp += h.period
	}
	return nil
}

// CycleHandoff is one handoff of a cycled run.
type CycleHandoff struct {
	AtS  float64 `json:"at_s"` // the new interface came up
	ToL3 bool    `json:"to_l3"`
	// LUs the MN sent from then until the old interface went down (the overlap), and the
	// first of them to the first LU-ACK after it (null: none acknowledged in the overlap).
	LUs     int      `json:"lus"`
	DelayMs *float64 `json:"delay_ms"`
}

// NetworkStats is one access network's share of a cycled run (Table 3.5's columns, measured
// on the CN -> MN datagrams sent while the MN was in that network alone).
type NetworkStats struct {
	Shape     string  `json:"shape"`
	TimeS     float64 `json:"time_s"` // from the handoff into it to the next handoff
	Sent      int     `json:"sent"`
	LossPct   float64 `json:"loss_pct"`
	DelayMean float64 `json:"delay_mean_ms"`
	DelaySD   float64 `json:"delay_sd_ms"`
	Delay95   float64 `json:"delay_95_ms"`
	Delay99   float64 `json:"delay_99_ms"`
}

// CycleResult is rep-N/cycle.json.
type CycleResult struct {
	Handoffs []CycleHandoff `json:"handoffs"`
	// CN -> MN datagrams over the whole flow (iperf3 numbers in the captures).
	Sent    int     `json:"sent"`
	Lost    int     `json:"lost"`
	LossPct float64 `json:"loss_pct"`
	// NaturalLossPct is eq. 5: the networks' loss weighted by the time spent in each;
	// gratuitous loss is the rest.
	NaturalLossPct    float64 `json:"natural_loss_pct"`
	GratuitousLossPct float64 `json:"gratuitous_loss_pct"`
	// DelayMs is the mean one-way CN -> MN delay of the delivered datagrams (both captures
	// share one clock); NaturalDelayMs eq. 5 with the networks' mean delays.
	DelayMs        float64      `json:"delay_ms"`
	NaturalDelayMs float64      `json:"natural_delay_ms"`
	HandoffDelayMs *float64     `json:"handoff_delay_ms"` // mean over the acknowledged handoffs
	LUsPerHandoff  float64      `json:"lus_per_handoff"`
	L2             NetworkStats `json:"l2"` // the network the MN starts in (R2)
	L3             NetworkStats `json:"l3"`
}

// CycleMetrics measures a cycled run from the MN's and CN's captures.
func CycleMetrics(mn, cn []pcap.Packet, t0 time.Time, mnNID, cnNID uint64, ups []float64, toL3 []bool, downs []float64,
	duration float64, shapeL2, shapeL3 string) (CycleResult, error) {
	var r CycleResult
	s2, err := linkemu.ParseShape(shapeL2)
	if err != nil {
		return r, err
	}
	s3, err := linkemu.ParseShape(shapeL3)
	if err != nil {
		return r, err
	}
	rel := func(t time.Time) float64 { return t.Sub(t0).Seconds() }
	// Which network the MN was in at t: L2 until the first handoff, then as the last one went.
	inL3 := func(t float64) bool {
		in := false
		for i, u := range ups {
			if t >= u {
				in = toL3[i]
			}
		}
		return in
	}
	sentAt := map[int64]float64{}
	for i := range cn {
		p := &cn[i]
		if p.Proto == pcap.ProtoUDP && p.UDPSeq > 0 && p.Dir != pcap.DirIncoming && p.SrcNID() == cnNID && p.DstNID() == mnNID {
			if _, dup := sentAt[p.UDPSeq]; !dup {
				sentAt[p.UDPSeq] = rel(p.Time)
			}
		}
	}
	recvAt := map[int64]float64{}
	for i := range mn {
		p := &mn[i]
		switch {
		case p.Proto == pcap.ProtoUDP && p.UDPSeq > 0 && p.Dir != pcap.DirOutgoing && p.SrcNID() == cnNID && p.DstNID() == mnNID:
			if _, dup := recvAt[p.UDPSeq]; !dup {
				recvAt[p.UDPSeq] = rel(p.Time)
			}
		}
	}
	r.Sent = len(sentAt)
	var delays []float64
	per := map[bool]*struct {
		sent, lost int
		d          []float64
	}{false: {}, true: {}}
	for seq, st := range sentAt {
		net := per[inL3(st)]
		net.sent++
		rt, ok := recvAt[seq]
		if !ok {
			r.Lost++
			net.lost++
			continue
		}
		d := (rt - st) * 1e3
		delays = append(delays, d)
		net.d = append(net.d, d)
	}
	if r.Sent > 0 {
		r.LossPct = 100 * float64(r.Lost) / float64(r.Sent)
	}
	r.DelayMs = mean(delays)
	// Time in each network: from each handoff into it to the next.
	var tL2, tL3 float64
	prev, prevL3 := 0.0, false
	for i, u := range ups {
		if prevL3 {
			tL3 += u - prev
		} else {
			tL2 += u - prev
		}
		prev, prevL3 = u, toL3[i]
	}
	if prevL3 {
		tL3 += max(0, duration-prev)
	} else {
		tL2 += max(0, duration-prev)
	}
	if total := tL2 + tL3; total > 0 {
		r.NaturalLossPct = 100 * (tL2*s2.Loss + tL3*s3.Loss) / total
		r.NaturalDelayMs = (tL2*ms(s2.Delay) + tL3*ms(s3.Delay)) / total
	}
	r.GratuitousLossPct = r.LossPct - r.NaturalLossPct
	stats := func(shape string, t float64, l3 bool) NetworkStats {
		n := per[l3]
		ns := NetworkStats{Shape: shape, TimeS: t, Sent: n.sent, DelayMean: mean(n.d), DelaySD: sd(n.d), Delay95: pct(n.d, 0.95), Delay99: pct(n.d, 0.99)}
		if n.sent > 0 {
			ns.LossPct = 100 * float64(n.lost) / float64(n.sent)
		}
		return ns
	}
	r.L2, r.L3 = stats(shapeL2, tL2, false), stats(shapeL3, tL3, true)
	// Handoffs: LUs from the MN and LU-ACKs to it between the new interface coming up and the
	// old one going down.
	var lus, acks []float64
	for i := range mn {
		p := &mn[i]
		if p.LUOp == 1 && p.Dir == pcap.DirOutgoing && p.SrcNID() == mnNID {
			lus = append(lus, rel(p.Time))
		}
		if p.LUOp == 2 && p.Dir != pcap.DirOutgoing && p.SrcNID() == cnNID {
			acks = append(acks, rel(p.Time))
		}
	}
	var hd []float64
	var luSum int
	for i, u := range ups {
		end := duration
		if i < len(downs) {
			end = downs[i]
		}
		h := CycleHandoff{AtS: u, ToL3: toL3[i]}
		first := math.NaN()
		for _, t := range lus {
			if t >= u && t < end {
				if h.LUs == 0 {
					first = t
				}
				h.LUs++
			}
		}
		if !math.IsNaN(first) {
			for _, t := range acks {
				if t >= first && t < end {
					d := (t - first) * 1e3
					h.DelayMs = &d
					hd = append(hd, d)
					break
				}
			}
		}
		luSum += h.LUs
		r.Handoffs = append(r.Handoffs, h)
	}
	if len(hd) > 0 {
		m := mean(hd)
		r.HandoffDelayMs = &m
	}
	if len(ups) > 0 {
		r.LUsPerHandoff = float64(luSum) / float64(len(ups))
	}
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func sd(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	m, s := mean(xs), 0.0
	for _, x := range xs {
		s += (x - m) * (x - m)
	}
	return math.Sqrt(s / float64(len(xs)-1))
}

func pct(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}

// cycleReport measures a cycled run and writes rep-N/cycle.json (nil: not cycled).
func (h *handoffCycle) report(cfg RunConfig, in measureInputs) *CycleResult {
	if h == nil {
		return nil
	}
	r2, r3 := cfg.accessShapes()
	res, err := CycleMetrics(in.mn, in.cn, in.t0, in.mnNID, in.cnNID, h.ups, h.toL3, h.downs, cfg.Profile.Duration.Seconds(), r2, r3)
	if err != nil {
		return nil
	}
	return &res
}

// measureInputs is what report needs of runOnce's measurement input.
type measureInputs struct {
	mn, cn       []pcap.Packet
	t0           time.Time
	mnNID, cnNID uint64
}
