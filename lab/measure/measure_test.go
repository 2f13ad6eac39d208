package measure

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/pcap"
	"ilnp/lab/summary"
)

const (
	cnNID = 0x02144ffffe20cc01
	mnNID = 0x02144ffffe20ee64
)

var t0 = time.Unix(1700000000, 0)

func addr(prefix uint16, nid uint64) (a [16]byte) {
	a[0], a[1], a[2], a[3] = 0x20, 0x01, 0x0d, 0xb8
	binary.BigEndian.PutUint16(a[4:], prefix)
	binary.BigEndian.PutUint64(a[8:], nid)
	return a
}

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func udp(s float64, seq int64, toMN bool, dir int) pcap.Packet {
	p := pcap.Packet{Time: at(s), Dir: dir, Proto: pcap.ProtoUDP, UDPSeq: seq, Payload: 1300, SrcPort: 5201, DstPort: 40000}
	if toMN {
		p.Src, p.Dst = addr(1, cnNID), addr(2, mnNID)
	} else {
		p.Src, p.Dst = addr(2, mnNID), addr(1, cnNID)
	}
	return p
}

func tcp(s float64, seq uint32, payload int, dir int, flags uint8) pcap.Packet {
	return pcap.Packet{Time: at(s), Dir: dir, Proto: pcap.ProtoTCP, TCPSeq: seq, Payload: payload, TCPFlags: flags,
		SrcPort: 40001, DstPort: 5201, Src: addr(1, cnNID), Dst: addr(3, mnNID), UDPSeq: -1}
}

func base() Input {
	return Input{MNNID: mnNID, CNNID: cnNID, T0Wall: t0, T0Mono: 1_000_000_000, Enter: 5 * time.Second,
		Leave: 20 * time.Second, Duration: 30 * time.Second}
}

// 10 datagrams per second for 30 s; those sent in [12, 12.5) s never arrive.
func TestUDPLossWindowInterruption(t *testing.T) {
	in := base()
	in.UDP, in.OfferedBps = true, 104000
	seq := int64(0)
	for ms := 0; ms < 30000; ms += 100 {
		s := float64(ms) / 1000
		seq++
		in.CN = append(in.CN, udp(s, seq, true, pcap.DirUnknown))
		if s < 12 || s >= 12.5 {
			in.MN = append(in.MN, udp(s+0.001, seq, true, pcap.DirIncoming))
		}
		// The MN's own datagrams (outgoing at the MN) are not deliveries.
		in.MN = append(in.MN, udp(s, seq, false, pcap.DirOutgoing))
	}
	// The handoff: first LU at 11 s (mono), ACK 4 ms later, one retry before it.
	mono := func(s float64) int64 { return in.T0Mono + int64(s*1e9) }
	in.MNEvents = []timeline.Event{
		{MonoNS: mono(1), Kind: timeline.LUSent}, // before entering: ignored
		{MonoNS: mono(11), Kind: timeline.LUSent, Attempt: 1},
		{MonoNS: mono(11.002), Kind: timeline.LUSent, Attempt: 2},
		{MonoNS: mono(11.004), Kind: timeline.LUAckReceived},
		{MonoNS: mono(20.1), Kind: timeline.LUSent},
	}
	r := Compute(in).Run
	if *r.UDPSent != 300 || *r.UDPLost != 5 {
		t.Errorf("sent %d lost %d, want 300 and 5", *r.UDPSent, *r.UDPLost)
	}
	// Window [10, 15): all 5 losses inside; 45 datagrams of 1300 B delivered in 5 s.
	if *r.UDPLostWindow != 5 || *r.ThroughputWindowBps != 45*1300*8/5.0 {
		t.Errorf("window lost %d throughput %v", *r.UDPLostWindow, *r.ThroughputWindowBps)
	}
	if d := *r.HandoffDelayMs; d < 3.999 || d > 4.001 || *r.LUSent != 2 {
		t.Errorf("handoff delay %v ms, LUs %d; want 4 ms and 2", d, *r.LUSent)
	}
	// Last delivery before the gap at 11.901, next at 12.501: 600 ms.
	if g := *r.InterruptionMs; g < 599 || g > 601 {
		t.Errorf("interruption %v ms, want 600", g)
	}
	if !*r.SessionSurvived || r.TCPBytes != nil || *r.OfferedBps != 104000 {
		t.Errorf("survived %v tcp %v offered %v", *r.SessionSurvived, r.TCPBytes, *r.OfferedBps)
	}
}

// Deliveries stop at leave: the session is broken and the gap runs to the end of the flow.
func TestUDPBroken(t *testing.T) {
	in := base()
	in.UDP = true
	for i := 1; i <= 290; i++ {
		s := float64(i) / 10
		in.CN = append(in.CN, udp(s, int64(i), true, pcap.DirUnknown))
		if s < 20 {
			in.MN = append(in.MN, udp(s, int64(i), true, pcap.DirIncoming))
		}
	}
	res := Compute(in)
	r := res.Run
	if *r.SessionSurvived || r.HandoffDelayMs != nil || r.LUSent != nil {
		t.Errorf("survived %v handoff %v lu %v", *r.SessionSurvived, r.HandoffDelayMs, r.LUSent)
	}
	if g := *r.InterruptionMs; g < 10099 || g > 10101 {
		t.Errorf("interruption %v ms, want 10100 (19.9 s to 30 s)", g)
	}
	if res.WindowStart != 20 || *r.UDPLostWindow != 50 {
		t.Errorf("window from %v lost %d, want 20 and 50", res.WindowStart, *r.UDPLostWindow)
	}
}

// TCP: the CN sends 1000-byte segments; segment 5000 is lost once and retransmitted, segment
// 8000 is retransmitted although the MN had it (reordering): 2 retransmissions, 1 lost.
func TestTCPRetransmissionsAndLoss(t *testing.T) {
	in := base()
	isn := uint32(0xfffff000) // the relative sequence wraps through zero
	in.CN = append(in.CN, tcp(0, isn, 0, pcap.DirUnknown, pcap.SYN))
	// The control connection to the same port carries little and must not be taken for data.
	ctl := tcp(0.1, 77, 37, pcap.DirUnknown, pcap.ACK)
	ctl.SrcPort = 40000
	in.CN = append(in.CN, ctl)
	for k := 0; k < 10; k++ {
		seq := isn + 1 + uint32(k*1000)
		s := 1 + float64(k)*0.1
		in.CN = append(in.CN, tcp(s, seq, 1000, pcap.DirUnknown, pcap.ACK))
		if k != 5 {
			in.MN = append(in.MN, tcp(s+0.01, seq, 1000, pcap.DirIncoming, pcap.ACK))
		}
	}
	in.CN = append(in.CN, tcp(3, isn+1+5000, 1000, pcap.DirUnknown, pcap.ACK))
	in.MN = append(in.MN, tcp(3.01, isn+1+5000, 1000, pcap.DirIncoming, pcap.ACK))
	in.CN = append(in.CN, tcp(3.1, isn+1+8000, 1000, pcap.DirUnknown, pcap.ACK))
	in.MN = append(in.MN, tcp(3.11, isn+1+8000, 1000, pcap.DirIncoming, pcap.ACK))
	in.Leave, in.Duration = 2*time.Second, 4*time.Second
	res := Compute(in)
	r := res.Run
	if *r.TCPRetransmissions != 2 || *r.TCPLost != 1 || *r.TCPBytes != 10000 {
		t.Errorf("retransmissions %d lost %d bytes %d; want 2, 1, 10000", *r.TCPRetransmissions, *r.TCPLost, *r.TCPBytes)
	}
	if !*r.SessionSurvived || r.UDPSent != nil || r.OfferedBps != nil {
		t.Errorf("survived %v udp %v offered %v", *r.SessionSurvived, r.UDPSent, r.OfferedBps)
	}
	if res.SeqUnit != "byte" || len(res.Seq) != 11 {
		t.Errorf("seq series %s %d points", res.SeqUnit, len(res.Seq))
	}
}

func show(r summary.Run) string {
	d := func(p *int) string {
		if p == nil {
			return "nil"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("retransmissions %s lost %s bytes %s survived %v", d(r.TCPRetransmissions), d(r.TCPLost),
		func() string {
			if r.TCPBytes == nil {
				return "nil"
			}
			return fmt.Sprint(*r.TCPBytes)
		}(), r.SessionSurvived != nil && *r.SessionSurvived)
}

// The same flow MN -> CN (iperf3 -R): the MN's capture is the sender's, the CN's the
// receiver's; the figures must be the same.
func TestTCPReverse(t *testing.T) {
	rev := func(p pcap.Packet, dir int) pcap.Packet {
		p.Src, p.Dst = addr(3, mnNID), addr(1, cnNID)
		p.Dir = dir
		return p
	}
	in := base()
	in.Reverse = true
	isn := uint32(1000)
	in.MN = append(in.MN, rev(tcp(0, isn, 0, 0, pcap.SYN), pcap.DirOutgoing))
	for k := 0; k < 10; k++ {
		seq := isn + 1 + uint32(k*1000)
		s := 1 + float64(k)*0.1
		in.MN = append(in.MN, rev(tcp(s, seq, 1000, 0, pcap.ACK), pcap.DirOutgoing))
		if k != 5 {
			in.CN = append(in.CN, rev(tcp(s+0.01, seq, 1000, 0, pcap.ACK), pcap.DirIncoming))
		}
	}
	in.MN = append(in.MN, rev(tcp(3, isn+1+5000, 1000, 0, pcap.ACK), pcap.DirOutgoing))
	in.CN = append(in.CN, rev(tcp(3.01, isn+1+5000, 1000, 0, pcap.ACK), pcap.DirIncoming))
	// CN -> MN data (the other direction) must not count.
	in.CN = append(in.CN, tcp(3.05, 1, 50000, pcap.DirUnknown, pcap.ACK))
	in.Leave, in.Duration = 2*time.Second, 4*time.Second
	r := Compute(in).Run
	if r.TCPRetransmissions == nil || *r.TCPRetransmissions != 1 || *r.TCPLost != 1 || *r.TCPBytes != 10000 || !*r.SessionSurvived {
		t.Errorf("reverse: %s; want 1 retransmission, 1 lost, 10000 bytes, survived", show(r))
	}
}

func TestNothingDelivered(t *testing.T) {
	in := base()
	r := Compute(in).Run
	if *r.SessionSurvived || *r.InterruptionMs != 30000 {
		t.Errorf("survived %v interruption %v", *r.SessionSurvived, *r.InterruptionMs)
	}
}

// The application's loss count wins when the stack dropped datagrams the capture saw.
func TestAppLostWins(t *testing.T) {
	in := base()
	in.UDP = true
	for i := 1; i <= 100; i++ {
		in.CN = append(in.CN, udp(float64(i)/10, int64(i), true, pcap.DirUnknown))
		in.MN = append(in.MN, udp(float64(i)/10, int64(i), true, pcap.DirIncoming))
	}
	in.AppLost = func(n int) *int { return &n }(7)
	res := Compute(in)
	if *res.Run.UDPLost != 7 || len(res.Notes) == 0 {
		t.Errorf("lost %d notes %v, want iperf3's 7 with a note", *res.Run.UDPLost, res.Notes)
	}
	in.AppLost = func(n int) *int { return &n }(0)
	if r := Compute(in).Run; *r.UDPLost != 0 {
		t.Errorf("lost %d", *r.UDPLost)
	}
}

// Hard handoff: the MN ages L2 at the handoff and its ILNP ingress drops what still arrives
// for L2; those segments count as lost although the capture saw them.
func TestStaleLocatorIsLoss(t *testing.T) {
	in := base()
	mono := func(s float64) int64 { return in.T0Mono + int64(s*1e9) }
	in.MNEvents = []timeline.Event{
		{MonoNS: mono(0), Kind: timeline.LocatorAdded, Locator: "2001:0db8:0002:0000", Detail: "new -> active"},
		{MonoNS: mono(5.1), Kind: timeline.LocatorAdded, Locator: "2001:0db8:0003:0000", Detail: "new -> active"},
		{MonoNS: mono(5.1), Kind: timeline.LocatorState, Locator: "2001:0db8:0002:0000", Detail: "active -> aged"},
	}
	isn := uint32(1000)
	in.CN = append(in.CN, tcp(0, isn-1, 0, pcap.DirUnknown, pcap.SYN))
	for k := 0; k < 10; k++ {
		s := 5 + float64(k)*0.02
		seq := isn + uint32(k*1000)
		p := tcp(s, seq, 1000, pcap.DirUnknown, pcap.ACK)
		p.Dst = addr(2, mnNID) // still to L2
		in.CN = append(in.CN, p)
		m := p
		m.Time, m.Dir = at(s+0.001), pcap.DirIncoming
		in.MN = append(in.MN, m)
	}
	// Segments 6..9 arrived after L2 was aged: dropped; the CN resends them to L3.
	for k := 6; k < 10; k++ {
		seq := isn + uint32(k*1000)
		p := tcp(6+float64(k)*0.01, seq, 1000, pcap.DirUnknown, pcap.ACK)
		in.CN = append(in.CN, p)
		m := p
		m.Time, m.Dir = at(6.001+float64(k)*0.01), pcap.DirIncoming
		in.MN = append(in.MN, m)
	}
	res := Compute(in)
	if r := res.Run; *r.TCPRetransmissions != 4 || *r.TCPLost != 4 {
		t.Errorf("retransmissions %d lost %d, want 4 and 4 (notes %v)", *r.TCPRetransmissions, *r.TCPLost, res.Notes)
	}
	if len(res.Notes) == 0 {
		t.Error("no note about stale-locator drops")
	}
}

// tcpRecovery: a flow at 1000 B per 10 ms that stops at the move's end (t=3) and resumes at
// full rate at t=4 recovers in ~1 s; one that resumes at half rate and reaches full rate at t=5
// recovers in ~2 s; one that stops for good gives nil, and so does a flow too short after the
// move.
func TestTCPRecovery(t *testing.T) {
	flow := func(end float64, rate func(t float64) int) []timedBytes {
		var ds []timedBytes
		for i := 0; float64(i)*0.01 < end; i++ {
			tt := float64(i) * 0.01
			if b := rate(tt); b > 0 {
				ds = append(ds, timedBytes{t: tt, bytes: b})
			}
		}
		return ds
	}
	for _, tc := range []struct {
		name string
		rate func(t float64) int
		end  float64
		want float64 // ms; < 0: nil
	}{
		{"gap then full", func(t float64) int {
			if t >= 3 && t < 4 {
				return 0
			}
			return 1000
		}, 12, 970}, // [3.97, 4.27) holds 90 % of the steady rate
		{"half then full", func(t float64) int {
			switch {
			case t < 3:
				return 1000
			case t < 5:
				return 500
			}
			return 1000
		}, 12, 1940},
		{"stops for good", func(t float64) int {
			if t < 3 {
				return 1000
			}
			return 0
		}, 12, -1},
		{"too short", func(float64) int { return 1000 }, 4, -1},
	} {
		got := tcpRecovery(flow(tc.end, tc.rate), 3, tc.end, nil)
		switch {
		case tc.want < 0 && got != nil:
			t.Errorf("%s: %v ms, want nil", tc.name, *got)
		case tc.want >= 0 && (got == nil || *got < tc.want-15 || *got > tc.want+15):
			t.Errorf("%s: %s, want %v ms", tc.name, fmtPtr(got), tc.want)
		}
	}
}

func fmtPtr(p *float64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprintf("%.1f ms", *p)
}

// windowRun: 10 datagrams a second for 30 s that the MN's capture all sees arriving; the
// handoff's first LU at 11 s puts the window at [10, 15).
func windowRun() Input {
	in := base()
	in.UDP, in.OfferedBps = true, 104000
	seq := int64(0)
	for ms := 0; ms < 30000; ms += 100 {
		s := float64(ms) / 1000
		seq++
		in.CN = append(in.CN, udp(s, seq, true, pcap.DirUnknown))
		in.MN = append(in.MN, udp(s+0.001, seq, true, pcap.DirIncoming))
	}
	mono := func(s float64) int64 { return in.T0Mono + int64(s*1e9) }
	in.MNEvents = []timeline.Event{{MonoNS: mono(11), Kind: timeline.LUSent}, {MonoNS: mono(11.004), Kind: timeline.LUAckReceived}}
	return in
}

// hostDrops: the 20 datagrams of [12, 14) dropped inside the MN after the capture saw them.
func hostDrops(in Input) []HostDrop {
	var d []HostDrop
	for ms := 12000; ms < 14000; ms += 100 {
		d = append(d, HostDrop{MonoNS: in.T0Mono + int64(ms)*1e6 + 1e6, Reason: "bad nonce"})
	}
	return d
}

func oneSecondIntervals(lost map[int]int) []AppInterval {
	var ivs []AppInterval
	for s := 0; s < 30; s++ {
		ivs = append(ivs, AppInterval{Start: float64(s), End: float64(s + 1), Packets: 10 - lost[s], Lost: lost[s]})
	}
	return ivs
}

// The host drops packets after the capture point: the window count still includes them,
// from the datapath's drop events or from iperf3's receiver intervals, and a run whose sources
// disagree is flagged.
func TestWindowLossCannotUndercount(t *testing.T) {
	appLost := map[int]int{12: 10, 13: 10}
	for _, c := range []struct {
		name               string
		drops, intervals   bool
		appLost            map[int]int
		want               int
		used               string
		disagree, credible bool
	}{
		{name: "drop events only", drops: true, want: 20, used: "capture+drops"},
		{name: "iperf3 intervals only", intervals: true, appLost: appLost, want: 20, used: "iperf3", disagree: true, credible: true},
		{name: "both agree", drops: true, intervals: true, appLost: appLost, want: 20, used: "capture+drops", credible: true},
		{name: "iperf3 not credible", drops: true, intervals: true, appLost: map[int]int{12: 500}, want: 20, used: "capture+drops", disagree: true},
	} {
		in := windowRun()
		if c.drops {
			in.HostDrops = hostDrops(in)
		}
		if c.intervals {
			in.AppIntervals = oneSecondIntervals(c.appLost)
		}
		res := Compute(in)
		wl := res.WindowLoss
		if *res.Run.UDPLostWindow != c.want || wl == nil || wl.Capture != 0 || wl.Used != c.used || wl.Disagree != c.disagree {
			t.Errorf("%s: window lost %d (%+v), want %d from %s, disagree %v; notes %q", c.name, *res.Run.UDPLostWindow, wl, c.want, c.used, c.disagree, res.Notes)
			continue
		}
		if c.intervals && (wl.App == nil || wl.AppCredible != c.credible || wl.AppFrom != 10 || wl.AppTo != 15) {
			t.Errorf("%s: iperf3 source %+v", c.name, wl)
		}
		if c.drops && (wl.HostDrops != 20 || *res.Run.UDPLost != 20) {
			t.Errorf("%s: host drops %d, total lost %d, want 20 and 20", c.name, wl.HostDrops, *res.Run.UDPLost)
		}
	}
	// Without either source the capture alone sees nothing lost: the undercount this guards.
	if r := Compute(windowRun()); *r.Run.UDPLostWindow != 0 || r.WindowLoss.Disagree {
		t.Errorf("capture only: %d %+v", *r.Run.UDPLostWindow, r.WindowLoss)
	}
}
