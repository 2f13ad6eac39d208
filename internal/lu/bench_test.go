package lu

import (
	"testing"
	"time"

	"ilnp/internal/wire"
)

// BenchmarkSendAckTick1000Peers measures a full round for 1000 correspondents: Send each an
// LU, fire one retransmission round, ACK them all.
func BenchmarkSendAckTick1000Peers(b *testing.B) {
	e, _ := New(Config{})
	msgs := make([]Message, 1000)
	for i := range msgs {
		msgs[i] = msgTo(wire.NID(i+1), 0x20010db8_00020000)
	}
	now := t0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range msgs {
			msgs[k].Update.Locators[0].Lifetime = uint16(i) // a new body each round
			if _, err := e.Send(msgs[k], now); err != nil {
				b.Fatal(err)
			}
		}
		d, _ := e.NextDeadline()
		now = d
		if n := len(e.Tick(now)); n != 1000 {
			b.Fatalf("%d retransmissions", n)
		}
		for k := range msgs {
			if res, _ := e.Ack(msgs[k].Peer, msgs[k].Update.Ack(), now); res.Outcome != Acked {
				b.Fatalf("ack %v", res.Outcome)
			}
		}
		now = now.Add(time.Second)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/peer-round")
}
