package ilcc

import (
	"testing"
	"time"

	"ilnp/internal/wire"
)

// BenchmarkHandoff1000Correspondents measures one handoff (new locator -> 1000 LUs and
// bindings) and the return (old network gone).
func BenchmarkHandoff1000Correspondents(b *testing.B) {
	c, _ := New(Config{NID: myNID, NewNonce: counterNonces()})
	c.UpdateLocal(ra(lMN1, ifWifi, router1), t0)
	for i := range 1000 {
		c.OpenSession(Session{Local: wire.ILV{Locator: lMN1, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: wire.NID(0x1000 + i)}}, t0)
	}
	now := t0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Second)
		eff, _ := c.UpdateLocal(ra(lMN2, ifLTE, router2), now)
		if len(eff.Updates) != 1000 {
			b.Fatalf("%d updates", len(eff.Updates))
		}
		c.InterfaceDown(ifLTE, now)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2000, "ns/correspondent-update")
}
