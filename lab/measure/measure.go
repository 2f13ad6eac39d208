// Package measure turns one run's captures and event timeline into the thesis's metrics
// (ch. 4.4, 5.3): data rate and sequence numbers at the MN, UDP sent/lost overall and in the
// 5-s handoff window, throughput in that window, interruption (longest gap in delivery at the
// MN), TCP bytes, retransmissions at the CN (a segment whose sequence number was sent before),
// lost segments (retransmitted at the CN but not received that many times at the MN), handoff
// delay (first LU sent after the MN entered L3 -> its LU-ACK; a MIPv6 baseline's BU -> BAck
// likewise) and whether the session lived
// through the move. Pure functions of their input: no I/O.
package measure

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/pcap"
	"ilnp/lab/summary"
)

// Input is everything one run recorded. Times: pcap stamps are wall clock, events are
// CLOCK_MONOTONIC; T0Wall and T0Mono are the same instant (the iperf3 client's start).
type Input struct {
	MN, CN       []pcap.Packet
	MNNID, CNNID uint64
	T0Wall       time.Time
	T0Mono       int64
	Enter, Leave time.Duration
	Duration     time.Duration
	UDP          bool
	OfferedBps   float64 // per direction, UDP
	MNEvents     []timeline.Event
	RTTms        *float64
	Window       time.Duration // thesis: 5 s
	// AppLost is iperf3's own count of CN -> MN datagrams lost (the server's receiving stream)
	// when it reported one: datagrams that reached the MN's interface but not the application
	// (dropped by the stack, e.g. a stale locator) are lost too (thesis 5.3.4).
	AppLost *int
	// SenderTimeouts is the TCP sender's (the CN's; with Reverse the MN's) retransmission
	// timeouts during the run (nstat TcpExtTCPTimeouts of its fresh namespace); nil: unknown.
	SenderTimeouts *int
	// Reverse: the TCP flow runs MN -> CN (iperf3 -R): its retransmissions are counted in the
	// MN's capture and its deliveries, goodput, rate and sequence numbers in the CN's.
	Reverse bool
	// AppIntervals are iperf3's per-interval receiver reports (-J "intervals" of the server's
	// receiving stream), Start/End in seconds since iperf3's test start, which is taken to be
	// the CN's first datagram (CN capture).
	AppIntervals []AppInterval
	// HostDrops are CN -> MN packets the MN's host dropped after its capture point (the
	// datapath's drop events, kernel time stamps), beyond the stale-locator drops this package
	// already infers from the timeline.
	HostDrops []HostDrop
}

// AppInterval is one iperf3 receiver interval.
type AppInterval struct {
	Start, End    float64
	Packets, Lost int
}

// HostDrop is one packet dropped inside the MN after the capture saw it.
type HostDrop struct {
	MonoNS int64 // CLOCK_MONOTONIC, the datapath's bpf_ktime_get_ns
	Reason string
}

// WindowLoss is what each source says about CN -> MN datagrams lost in the window; the
// result's udp_lost_window is the largest credible one.
type WindowLoss struct {
	// Capture: sent in the window (CN capture) and never seen arriving for a usable locator
	// at the MN's capture.
	Capture int `json:"capture"`
	// HostDrops: datagrams of the window dropped inside the MN after its capture point.
	HostDrops int `json:"host_drops"`
	// App: iperf3's receiver, lost_packets of its intervals that lie mostly in the window
	// (AppFrom..AppTo on the flow's axis); nil without intervals.
	App     *int    `json:"app,omitempty"`
	AppFrom float64 `json:"app_from,omitempty"`
	AppTo   float64 `json:"app_to,omitempty"`
	// AppCredible is false when iperf3 claims more losses than the CN sent in those intervals.
	AppCredible bool `json:"app_credible"`
	// Used names the source taken: "capture+drops" or "iperf3".
	Used string `json:"used"`
	// Disagree flags a run whose sources differ by more than 2 datagrams and 5 %.
	Disagree bool `json:"disagree"`
}

// Point is one sample of a time series (seconds since the flow started).
type Point struct {
	T float64 `json:"t"`
	V float64 `json:"v"`
}

// Result is the metrics plus what the plots need.
type Result struct {
	Run         summary.Run `json:"run"`
	Rate        []Point     `json:"rate"` // bytes/s received at the MN per second
	Seq         []Point     `json:"seq"`  // datagram number (UDP) or relative byte (TCP) received at the MN
	SeqUnit     string      `json:"seq_unit"`
	Cwnd        []Point     `json:"cwnd,omitempty"` // TCP sender's cwnd (segments), sampled by the lab (lab/cwnd)
	WindowStart float64     `json:"window_start"`
	WindowEnd   float64     `json:"window_end"`
	HandoffAt   *float64    `json:"handoff_at"` // first LU after entering L3
	// WindowLoss (UDP) is each source's count behind udp_lost_window.
	WindowLoss *WindowLoss `json:"udp_lost_window_sources,omitempty"`
	Enter      float64     `json:"enter"`
	Leave      float64     `json:"leave"`
	Duration   float64     `json:"duration"`
	Notes      []string    `json:"notes,omitempty"`
}

func (in *Input) rel(t time.Time) float64 { return t.Sub(in.T0Wall).Seconds() }
func (in *Input) relMono(ns int64) float64 {
	return float64(ns-in.T0Mono) / 1e9
}

// toMN says whether p is CN -> MN traffic; outgoing says whether p left the capturing host.
func (in *Input) toMN(p *pcap.Packet) bool {
	return p.SrcNID() == in.CNNID && p.DstNID() == in.MNNID
}
func (in *Input) toCN(p *pcap.Packet) bool {
	return p.SrcNID() == in.MNNID && p.DstNID() == in.CNNID
}

// received: a frame the MN's capture saw arriving (cooked captures tell; Ethernet: all).
func received(p *pcap.Packet) bool { return p.Dir != pcap.DirOutgoing }

// locatorStates follows the MN's own locators through its timeline. A capture sees packets
// before the MN's ILNP ingress, which drops those for a locator that is no longer usable
// (hard handoff ages the old one at once); the thesis counts them as lost (5.3.4).
type locatorStates map[string][]stateChange

type stateChange struct {
	t      float64
	usable bool
}

func newLocatorStates(in *Input) locatorStates {
	ls := locatorStates{}
	for _, e := range in.MNEvents {
		if e.Locator == "" {
			continue
		}
		var usable bool
		switch e.Kind {
		case timeline.LocatorAdded, timeline.ActiveLocator:
			usable = true
		case timeline.LocatorRemoved:
			usable = false
		case timeline.LocatorState:
			// detail "from -> to"
			_, to, ok := strings.Cut(e.Detail, "->")
			if !ok {
				continue
			}
			switch strings.TrimSpace(to) {
			case "aged", "expired", "deprecated", "removed":
				usable = false
			default:
				usable = true
			}
		default:
			continue
		}
		ls[e.Locator] = append(ls[e.Locator], stateChange{t: in.relMono(e.MonoNS), usable: usable})
	}
	for _, changes := range ls {
		sort.SliceStable(changes, func(i, j int) bool { return changes[i].t < changes[j].t })
	}
	return ls
}

// usable says whether the MN accepted a packet for dst at time t.
func (ls locatorStates) usable(dst [16]byte, t float64) bool {
	changes := ls[fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", dst[0], dst[1], dst[2], dst[3], dst[4], dst[5], dst[6], dst[7])]
	ok := true
	for _, c := range changes {
		if c.t > t {
			break
		}
		ok = c.usable
	}
	return ok
}

func ptr[T any](v T) *T { return &v }

// appWindowLoss sums iperf3's receiver losses over its intervals that lie mostly inside
// [ws, we) on the flow's axis (interval times offset by the CN's first datagram), and says
// which span they cover. iperf3 counts a gap when the next datagram arrives, so a loss is
// counted in the interval that ends it.
func appWindowLoss(ivs []AppInterval, sentAt map[int64]float64, ws, we float64) (lost int, from, to float64, ok bool) {
	if len(ivs) == 0 || len(sentAt) == 0 {
		return 0, 0, 0, false
	}
	first := -1.0
	for _, t := range sentAt {
		if first < 0 || t < first {
			first = t
		}
	}
	from, to = -1, -1
	for _, iv := range ivs {
		s, e := iv.Start+first, iv.End+first
		if e <= s || iv.Lost < 0 {
			continue
		}
		if overlap := min(e, we) - max(s, ws); overlap < (e-s)/2 {
			continue
		}
		lost += iv.Lost
		if from < 0 || s < from {
			from = s
		}
		to = max(to, e)
		ok = true
	}
	return lost, from, to, ok
}

// Compute derives the metrics.
func Compute(in Input) Result {
	if in.Window == 0 {
		in.Window = 5 * time.Second
	}
	res := Result{Enter: in.Enter.Seconds(), Leave: in.Leave.Seconds(), Duration: in.Duration.Seconds()}
	r := &res.Run
	r.RTTms = in.RTTms

	// Handoff: the first LU the MN sent after its second interface came up, to its ACK.
	var handoff *float64
	var luCount int
	var hsNS, haNS int64
	for _, e := range in.MNEvents {
		t := in.relMono(e.MonoNS)
		// ILNP's LU / LU-ACK, or a Mobile IPv6 baseline's BU / BAck on the same timeline.
		switch e.Kind {
		case timeline.LUSent, timeline.BUSent:
			if handoff == nil && t >= in.Enter.Seconds()-0.5 {
				handoff = ptr(t)
				hsNS = e.MonoNS
			}
			if handoff != nil && haNS == 0 {
				luCount++
			}
		case timeline.LUAckReceived, timeline.BAckReceived:
			if handoff != nil && haNS == 0 && e.MonoNS >= hsNS {
				haNS = e.MonoNS
			}
		}
	}
	res.HandoffAt = handoff
	states := newLocatorStates(&in)
	stale := 0
	// delivered: arrived at the MN and accepted by its stack for a usable locator.
	delivered := func(p *pcap.Packet) bool {
		if !received(p) {
			return false
		}
		if !states.usable(p.Dst, in.rel(p.Time)) {
			stale++
			return false
		}
		return true
	}
	if handoff != nil {
		r.LUSent = ptr(luCount)
		if haNS != 0 {
			r.HandoffDelayMs = ptr(float64(haNS-hsNS) / 1e6)
		} else {
			res.Notes = append(res.Notes, "no LU-ACK received for the handoff")
		}
	}
	// The 5-s window across the handoff: [h-1 s, h+4 s] around the first LU (the thesis chose
	// 11-16 s around its ILNP handoffs at 12-14 s); without a handoff signal the move that
	// matters is leaving L2 ([leave, leave+5 s], the thesis's MIPv6 window).
	ws := in.Leave.Seconds()
	if handoff != nil {
		ws = *handoff - 1
	}
	ws = max(ws, 0)
	we := min(ws+in.Window.Seconds(), in.Duration.Seconds())
	res.WindowStart, res.WindowEnd = ws, we
	inWindow := func(t float64) bool { return t >= ws && t < we }

	// Deliveries at the MN (CN -> MN data), in time order.
	type delivery struct {
		t      float64
		bytes  int
		seq    int64 // UDP datagram number or TCP relative sequence
		seqKey uint32
	}
	var got []delivery
	var fresh []timedBytes // TCP: bytes the MN received for the first time (goodput)
	var windowBytes int64

	if in.UDP {
		r.OfferedBps = ptr(in.OfferedBps)
		sentAt := map[int64]float64{}
		for i := range in.CN {
			p := &in.CN[i]
			if p.Proto == pcap.ProtoUDP && p.UDPSeq > 0 && in.toMN(p) {
				if _, dup := sentAt[p.UDPSeq]; !dup {
					sentAt[p.UDPSeq] = in.rel(p.Time)
				}
			}
		}
		recv := map[int64]bool{}
		for i := range in.MN {
			p := &in.MN[i]
			if p.Proto == pcap.ProtoUDP && p.UDPSeq > 0 && in.toMN(p) && delivered(p) {
				recv[p.UDPSeq] = true
				got = append(got, delivery{t: in.rel(p.Time), bytes: p.Payload, seq: p.UDPSeq})
			}
		}
		// The capture's own count first.
		lost, lostWin, sentWin := 0, 0, 0
		for seq, t := range sentAt {
			if inWindow(t) {
				sentWin++
			}
			if !recv[seq] {
				lost++
				if inWindow(t) {
					lostWin++
				}
			}
		}
		wl := &WindowLoss{Capture: lostWin, Used: "capture+drops"}
		// Drops inside the host after the capture point, which the capture counted as
		// delivered: in the window by their kernel stamps.
		for _, d := range in.HostDrops {
			lost++
			if inWindow(in.relMono(d.MonoNS)) {
				wl.HostDrops++
			}
		}
		lostWin = min(lostWin+wl.HostDrops, sentWin)
		capWin := lostWin
		if app, from, to, ok := appWindowLoss(in.AppIntervals, sentAt, ws, we); ok {
			wl.App, wl.AppFrom, wl.AppTo = ptr(app), from, to
			sentSpan := 0
			for _, t := range sentAt {
				if t >= from && t < to {
					sentSpan++
				}
			}
			wl.AppCredible = app <= sentSpan
			if !wl.AppCredible {
				res.Notes = append(res.Notes, fmt.Sprintf("iperf3 claims %d datagrams lost in %.1f-%.1f s, more than the CN sent (%d): not used", app, from, to, sentSpan))
			} else if app > lostWin {
				lostWin, wl.Used = app, "iperf3"
			}
			hi, lo := max(app, capWin), min(app, capWin)
			if wl.Disagree = hi-lo > 2 && float64(hi-lo) > 0.05*float64(hi); wl.Disagree || !wl.AppCredible {
				wl.Disagree = true
				res.Notes = append(res.Notes, fmt.Sprintf("UDP lost in the window: sources disagree (capture %d + host drops %d, iperf3 %d): %d used", wl.Capture, wl.HostDrops, app, lostWin))
			}
		}
		res.WindowLoss = wl
		if in.AppLost != nil && *in.AppLost > lost {
			res.Notes = append(res.Notes, fmt.Sprintf("iperf3 at the MN lost %d datagrams, the capture %d: the application's count is used", *in.AppLost, lost))
			lost = *in.AppLost
		}
		r.UDPSent, r.UDPLost, r.UDPLostWindow = ptr(len(sentAt)), ptr(lost), ptr(lostWin)
		res.SeqUnit = "datagram"
		if len(sentAt) == 0 {
			res.Notes = append(res.Notes, "no UDP data seen at the CN")
		}
	} else {
		// The data connection is the CN -> MN (Reverse: MN -> CN) TCP flow carrying the most
		// bytes (iperf3 also has a control connection to the same port). Sender and receiver
		// are the captures at its two ends; the CN does not move, so whatever its capture saw
		// arrive was delivered.
		sender, receiver, toReceiver, accepted := in.CN, in.MN, in.toMN, delivered
		if in.Reverse {
			sender, receiver, toReceiver, accepted = in.MN, in.CN, in.toCN, received
		}
		type key struct{ sp, dp uint16 }
		volume := map[key]int{}
		for i := range sender {
			p := &sender[i]
			if p.Proto == pcap.ProtoTCP && toReceiver(p) {
				volume[key{p.SrcPort, p.DstPort}] += p.Payload
			}
		}
		var data key
		best := -1
		for k, v := range volume {
			if v > best {
				data, best = k, v
			}
		}
		isData := func(p *pcap.Packet) bool {
			return p.Proto == pcap.ProtoTCP && toReceiver(p) && p.SrcPort == data.sp && p.DstPort == data.dp
		}
		var isn uint32
		haveISN := false
		for i := range sender {
			p := &sender[i]
			if isData(p) && (p.TCPFlags&pcap.SYN != 0 || (!haveISN && p.Payload > 0)) {
				isn, haveISN = p.TCPSeq, true
				if p.TCPFlags&pcap.SYN != 0 {
					isn++ // data starts one after the SYN
					break
				}
			}
		}
		sends := map[uint32]int{}
		retransmitted := map[uint32]int{}
		var maxEnd uint32
		retrans := 0
		started := false
		for i := range sender {
			p := &sender[i]
			if !isData(p) || p.Payload == 0 {
				continue
			}
			rel := p.TCPSeq - isn
			end := rel + uint32(p.Payload)
			if started && int32(rel-maxEnd) < 0 {
				retrans++
				retransmitted[rel]++
			}
			if !started || int32(end-maxEnd) > 0 {
				maxEnd = end
			}
			started = true
			sends[rel]++
		}
		recvs := map[uint32]int{}
		var maxRecvEnd int64
		for i := range receiver {
			p := &receiver[i]
			if !isData(p) || p.Payload == 0 || !accepted(p) {
				continue
			}
			rel := p.TCPSeq - isn
			recvs[rel]++
			if recvs[rel] == 1 {
				fresh = append(fresh, timedBytes{t: in.rel(p.Time), bytes: p.Payload})
			}
			end := int64(rel) + int64(p.Payload)
			maxRecvEnd = max(maxRecvEnd, end)
			got = append(got, delivery{t: in.rel(p.Time), bytes: p.Payload, seq: int64(rel)})
		}
		lost := 0
		for rel, n := range retransmitted {
			// A retransmission the MN received as often as the CN sent it was not needed
			// (reordering); each missing copy is a loss, at most one per retransmission.
			if d := sends[rel] - recvs[rel]; d > 0 {
				lost += min(d, n)
			}
		}
		r.TCPBytes = ptr(maxRecvEnd)
		r.TCPRetransmissions = ptr(retrans)
		r.TCPLost = ptr(lost)
		res.SeqUnit = "byte"
		if best <= 0 {
			res.Notes = append(res.Notes, "no TCP data seen at the sender")
		}
	}

	if stale > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d packets reached the MN for a locator it no longer accepted (stale L64): counted as lost", stale))
	}
	sort.Slice(got, func(i, j int) bool { return got[i].t < got[j].t })
	bins := int(in.Duration.Seconds()) + 2
	rate := make([]float64, bins)
	for _, d := range got {
		if d.t >= 0 && int(d.t) < bins {
			rate[int(d.t)] += float64(d.bytes)
		}
		if inWindow(d.t) {
			windowBytes += int64(d.bytes)
		}
	}
	for i, v := range rate {
		res.Rate = append(res.Rate, Point{T: float64(i), V: v})
	}
	if we > ws {
		r.ThroughputWindowBps = ptr(float64(windowBytes) * 8 / (we - ws))
	}
	if !in.UDP {
		sort.Slice(fresh, func(i, j int) bool { return fresh[i].t < fresh[j].t })
		r.TCPRTOEvents = in.SenderTimeouts
		if we > ws {
			r.TCPWindowGoodputBps = ptr(float64(bytesIn(fresh, ws, we)) * 8 / (we - ws))
		}
		// Recovery is counted from the LU-ACK (the move's end), else from the first LU.
		from := -1.0
		switch {
		case haNS != 0:
			from = in.relMono(haNS)
		case handoff != nil:
			from = *handoff
		}
		if from >= 0 {
			r.TCPRecoveryMs = tcpRecovery(fresh, from, in.Duration.Seconds(), in.RTTms)
		}
	}
	stride := max(1, len(got)/4000)
	for i := 0; i < len(got); i += stride {
		res.Seq = append(res.Seq, Point{T: got[i].t, V: float64(got[i].seq)})
	}

	// Interruption: the longest gap between deliveries, counting a delivery that stops for
	// good as a gap to the end of the flow.
	end := in.Duration.Seconds()
	if len(got) == 0 {
		r.InterruptionMs = ptr(end * 1000)
		r.SessionSurvived = ptr(false)
		res.Notes = append(res.Notes, "nothing delivered at the MN")
		return res
	}
	var gap float64
	for i := 1; i < len(got); i++ {
		gap = max(gap, got[i].t-got[i-1].t)
	}
	gap = max(gap, end-got[len(got)-1].t)
	r.InterruptionMs = ptr(gap * 1000)
	// Survived: data still reached the MN a second after it left L2.
	survived := false
	for _, d := range got {
		if d.t >= in.Leave.Seconds()+1 {
			survived = true
			break
		}
	}
	r.SessionSurvived = ptr(survived)
	return res
}

// timedBytes is a number of bytes delivered at a time (seconds since the flow started).
type timedBytes struct {
	t     float64
	bytes int
}

// bytesIn sums the bytes of ds (sorted by time) delivered in [from, to).
func bytesIn(ds []timedBytes, from, to float64) int64 {
	i := sort.Search(len(ds), func(i int) bool { return ds[i].t >= from })
	var n int64
	for ; i < len(ds) && ds[i].t < to; i++ {
		n += int64(ds[i].bytes)
	}
	return n
}

// tcpRecovery is the time from the move's end (from) until the goodput is back within 10 % of
// the new path's steady rate: the first instant, in 10-ms steps, from which a span of
// max(300 ms, 3 RTT) delivers at least 90 % of the steady rate, the steady rate being the
// goodput over [end-3 s, end-0.5 s] (the MN stays on the new path until the flow ends). Nil
// when the flow is too short after the move or never gets there.
func tcpRecovery(fresh []timedBytes, from, end float64, rttMs *float64) *float64 {
	ss, se := end-3, end-0.5
	span := 0.3
	if rttMs != nil {
		span = max(span, 3**rttMs/1000)
	}
	if ss < from+span || len(fresh) == 0 {
		return nil
	}
	steady := float64(bytesIn(fresh, ss, se)) / (se - ss)
	if steady <= 0 {
		return nil
	}
	for step := 0; ; step++ {
		t := from + float64(step)*0.01
		if t+span > se {
			return nil
		}
		if float64(bytesIn(fresh, t, t+span))/span >= 0.9*steady {
			return ptr((t - from) * 1000)
		}
	}
}
