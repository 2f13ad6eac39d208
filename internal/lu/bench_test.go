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

// engineOf returns an engine that has exchanged an acknowledged LU with n correspondents and
// has one outstanding LU to each of the first out of them, sent at t0.
func engineOf(tb testing.TB, n, out int) *Engine {
	e, err := New(Config{})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		m := msgTo(wire.NID(i+1), 0x20010db8_00020000)
		if _, err := e.Send(m, t0.Add(-time.Minute)); err != nil {
			tb.Fatal(err)
		}
		if res, _ := e.Ack(m.Peer, m.Update.Ack(), t0.Add(-time.Minute)); res.Outcome != Acked {
			tb.Fatalf("ack %v", res.Outcome)
		}
	}
	for i := range out {
		m := msgTo(wire.NID(i+1), 0x20010db8_00030000)
		if _, err := e.Send(m, t0); err != nil {
			tb.Fatal(err)
		}
	}
	return e
}

// BenchmarkTick100k: one Tick of the engine of a correspondent that has exchanged LUs with
// 100,000 peers, 10 of them outstanding, at their first timeout (10 retransmissions) and
// before it (nothing due). Tick looked at every peer (issue 28).
func BenchmarkTick100k(b *testing.B) {
	e := engineOf(b, 100_000, 10)
	e.NextDeadline() // drops the acknowledged exchanges' entries, as the loop does
	b.Run("nothing-due", func(b *testing.B) {
		for b.Loop() {
			if n := len(e.Tick(t0)); n != 0 {
				b.Fatalf("%d actions", n)
			}
		}
	})
	b.Run("10-due", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			e := engineOf(b, 100_000, 10)
			d, _ := e.NextDeadline()
			b.StartTimer()
			if n := len(e.Tick(d)); n != 10 {
				b.Fatalf("%d actions", n)
			}
		}
	})
}
