package lab

import (
	"math"
	"testing"
	"time"

	"ilnp/lab/pcap"
)

// Fig. 15's overhead ratio: the nonce option's 8 bytes on each data packet and every LU
// whole, over the IPv6 bytes of that second.
func TestOverheadRatio(t *testing.T) {
	var pk []pcap.Packet
	t0 := time.Unix(500, 0)
	add := func(p pcap.Packet, sec float64) {
		p.Time = t0.Add(time.Duration(sec * float64(time.Second)))
		pk = append(pk, p)
	}
	for i := 0; i < 10; i++ {
		add(pcap.Packet{Proto: pcap.ProtoTCP, Payload: 1000, Nonce: true}, 0.05*float64(i))  // 1080 B, 8 added
		add(pcap.Packet{Proto: pcap.ProtoTCP, Payload: 1000}, 1+0.05*float64(i))             // 1072 B
		add(pcap.Packet{Proto: pcap.ProtoUDP, Payload: 100, Nonce: true}, 3+0.05*float64(i)) // 156 B, 8 added
	}
	add(pcap.Packet{Proto: pcap.ProtoICMPv6, LUOp: 1, Nonce: true}, 1.5) // 80 B, all overhead
	add(pcap.Packet{Proto: pcap.ProtoICMPv6}, 1.6)                       // not counted
	add(pcap.Packet{Proto: pcap.ProtoTCP, Payload: 1000}, 7)             // after the flow
	got := OverheadRatio(pk, 500, func(p pcap.Packet) float64 { return float64(p.Time.UnixNano()) / 1e9 }, 5)
	want := map[float64]float64{0: 100 * 80 / 10800.0, 1: 100 * 80 / (80 + 10720.0), 3: 100 * 80 / 1560.0}
	if len(got) != len(want) {
		t.Fatalf("points %v, want seconds 0, 1 and 3", got)
	}
	for _, p := range got {
		if w, ok := want[p.T]; !ok || math.Abs(p.V-w) > 1e-9 {
			t.Errorf("second %v: %.4f %%, want %.4f %%", p.T, p.V, w)
		}
	}
}
