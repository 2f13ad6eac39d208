package lab

import (
	"math"
	"testing"
	"time"

	"ilnp/lab/pcap"
)

func pktAddr(prefix string, nid uint64) (a [16]byte) {
	copy(a[:8], []byte(prefix))
	for i := 0; i < 8; i++ {
		a[15-i] = byte(nid >> (8 * i))
	}
	return a
}

// Thesis 3.3's metrics from the captures of a cycled run: loss and delay per network and
// overall, eq. 5's natural values from the time in each network, LUs and handoff delay per
// handoff counted between the new link coming up and the old one going down.
func TestCycleMetrics(t *testing.T) {
	const mnNID, cnNID = 0x0214_4fff_fe20_ee64, 0x0214_4fff_fe20_cc01
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	cnA, mnA := pktAddr("\x20\x01\x0d\xb8\x00\x01\x00\x00", cnNID), pktAddr("\x20\x01\x0d\xb8\x00\x02\x00\x00", mnNID)
	var cn, mn []pcap.Packet
	for i := 1; i <= 100; i++ {
		sent := 0.1*float64(i) + 0.05
		cn = append(cn, pcap.Packet{Time: at(sent), Dir: pcap.DirUnknown, Src: cnA, Dst: mnA, Proto: pcap.ProtoUDP, UDPSeq: int64(i)})
		if i == 50 || i == 51 {
			continue // lost
		}
		d := 0.033
		if sent >= 4 {
			d = 0.112
		}
		p := pcap.Packet{Time: at(sent + d), Dir: pcap.DirIncoming, Src: cnA, Dst: mnA, Proto: pcap.ProtoUDP, UDPSeq: int64(i)}
		mn = append(mn, p, p) // `-i any` can see a datagram twice: counted once
	}
	// MN -> CN datagrams and the CN's own LU-ACKs out are not CN -> MN data.
	mn = append(mn, pcap.Packet{Time: at(2), Dir: pcap.DirOutgoing, Src: mnA, Dst: cnA, Proto: pcap.ProtoUDP, UDPSeq: 7})
	lu := func(s float64, op uint8, out bool) pcap.Packet {
		p := pcap.Packet{Time: at(s), Proto: pcap.ProtoICMPv6, LUOp: op, Src: cnA, Dst: mnA, Dir: pcap.DirIncoming}
		if out {
			p.Src, p.Dst, p.Dir = mnA, cnA, pcap.DirOutgoing
		}
		return p
	}
	// Handoff 1 at 4 s (down 6 s): LU lost once, acknowledged 1.2 s after the first.
	// Handoff 2 at 8 s (no down before the end): one LU, acknowledged after 66 ms. The LU
	// at 6.5 s (the old link went) belongs to neither.
	mn = append(mn, lu(4.1, 1, true), lu(5.1, 1, true), lu(5.3, 2, false), lu(6.5, 1, true), lu(6.7, 2, false),
		lu(8.2, 1, true), lu(8.266, 2, false))
	r, err := CycleMetrics(mn, cn, t0, mnNID, cnNID, []float64{4, 8}, []bool{true, false}, []float64{6}, 10, "wifi", "3g")
	if err != nil {
		t.Fatal(err)
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6*max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if r.Sent != 100 || r.Lost != 2 {
		t.Errorf("sent %d lost %d, want 100 and 2", r.Sent, r.Lost)
	}
	near("loss", r.LossPct, 2)
	// 4 s in WiFi, 4 s in 3G, 2 s in WiFi again: (6*0.26 + 4*10.1)/10.
	near("natural loss", r.NaturalLossPct, (6*0.26+4*10.1)/10)
	near("gratuitous loss", r.GratuitousLossPct, 2-(6*0.26+4*10.1)/10)
	near("natural delay", r.NaturalDelayMs, (6*33+4*112)/10.0)
	// Sent before 4 s: 39 at 33 ms; 4-8 s: 40 (2 lost) at 112 ms; after 8 s: 21 at 112 ms.
	near("delay", r.DelayMs, (39*33+59*112)/98.0)
	near("L2 time", r.L2.TimeS, 6)
	near("L3 time", r.L3.TimeS, 4)
	if r.L3.Sent != 40 || r.L2.Sent != 60 {
		t.Errorf("sent per network L2 %d, L3 %d, want 60 and 40", r.L2.Sent, r.L3.Sent)
	}
	near("L3 loss", r.L3.LossPct, 5)
	near("L3 delay", r.L3.DelayMean, 112)
	if len(r.Handoffs) != 2 || r.Handoffs[0].LUs != 2 || r.Handoffs[1].LUs != 1 || r.Handoffs[0].DelayMs == nil || r.Handoffs[1].DelayMs == nil {
		t.Fatalf("handoffs %+v, want 2 LUs then 1, both acknowledged", r.Handoffs)
	}
	near("handoff 1 delay", *r.Handoffs[0].DelayMs, 1200)
	near("handoff 2 delay", *r.Handoffs[1].DelayMs, 66)
	near("mean handoff delay", *r.HandoffDelayMs, 633)
	near("LUs per handoff", r.LUsPerHandoff, 1.5)
	if _, err := CycleMetrics(mn, cn, t0, mnNID, cnNID, nil, nil, nil, 10, "wifi", "bogus"); err == nil {
		t.Error("an unknown shape was accepted")
	}
}
