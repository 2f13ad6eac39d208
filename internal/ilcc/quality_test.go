package ilcc

import (
	"testing"
	"time"

	"ilnp/internal/wire"
)

func TestByQualityOrder(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	q := func(rtt int, loss float64) Quality { return Quality{Measured: true, RTT: ms(rtt), Loss: loss} }
	cases := []struct {
		name  string
		cands []Candidate
		want  []wire.L64
	}{
		{"lowest RTT first", []Candidate{
			{Locator: 1, Quality: q(40, 0)}, {Locator: 2, Quality: q(10, 0)}, {Locator: 3, Quality: q(20, 0)},
		}, []wire.L64{2, 3, 1}},
		{"loss before RTT", []Candidate{
			{Locator: 1, Quality: q(10, 0.2)}, {Locator: 2, Quality: q(50, 0)},
		}, []wire.L64{2, 1}},
		{"unmeasured after measured, newest first among them", []Candidate{
			{Locator: 1, Learned: t0}, {Locator: 2, Learned: t0.Add(time.Second)}, {Locator: 3, Quality: q(90, 0)},
		}, []wire.L64{3, 2, 1}},
		{"deprecated last", []Candidate{
			{Locator: 1, Quality: q(1, 0), Deprecated: true}, {Locator: 2, Quality: q(90, 0)},
		}, []wire.L64{2, 1}},
		{"current kept when the other is only a little better", []Candidate{
			{Locator: 1, Quality: q(11, 0), Current: true}, {Locator: 2, Quality: q(10, 0)},
		}, []wire.L64{1, 2}},
		{"current kept when the difference is below 2 ms", []Candidate{
			{Locator: 1, Quality: Quality{Measured: true, RTT: 900 * time.Microsecond}, Current: true}, {Locator: 2, Quality: Quality{Measured: true, RTT: 300 * time.Microsecond}},
		}, []wire.L64{1, 2}},
		{"current replaced when the other is clearly better", []Candidate{
			{Locator: 1, Quality: q(20, 0), Current: true}, {Locator: 2, Quality: q(10, 0)},
		}, []wire.L64{2, 1}},
		{"current replaced on clearly lower loss", []Candidate{
			{Locator: 1, Quality: q(10, 0.1), Current: true}, {Locator: 2, Quality: q(12, 0)},
		}, []wire.L64{2, 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ByQuality{}.Order(tc.cands)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d candidates", len(got))
			}
			for i, c := range got {
				if c.Locator != tc.want[i] {
					t.Fatalf("order %v, want %v", candLocs(got), tc.want)
				}
			}
		})
	}
}

func candLocs(cs []Candidate) []wire.L64 {
	out := make([]wire.L64, len(cs))
	for i, c := range cs {
		out[i] = c.Locator
	}
	return out
}

// With the quality policy a measurement that makes another locator clearly better moves the
// node there (and tells the correspondent); under newest it changes nothing.
func TestSetLocalQuality(t *testing.T) {
	p, err := PolicyByName("quality")
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{NID: myNID, Policy: p, NewNonce: func() (wire.Nonce, error) { return nonce(0x3333), nil }})
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, c, ra(lMN1, ifWifi, router1), t0)
	mustUpdate(t, c, ra(lMN2, ifLTE, router2), t0.Add(time.Second))
	if _, err := c.OpenSession(Session{Local: wire.ILV{Locator: lMN2, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: cnNID}, RemoteNonce: nonce(0xcccc)}, t0); err != nil {
		t.Fatal(err)
	}
	c.SetLocalQuality(lMN2, Quality{Measured: true, RTT: 80 * time.Millisecond}, t0)
	eff := c.SetLocalQuality(lMN1, Quality{Measured: true, RTT: 20 * time.Millisecond}, t0)
	if a, _ := c.Active(); a.Locator != lMN1 || len(eff.Updates) != 1 {
		t.Fatalf("quality: active %v, %d LUs; want %v and one LU", a.Locator, len(eff.Updates), lMN1)
	}
	if _, err := c.SetPolicy(Newest{}, t0); err != nil {
		t.Fatal(err)
	}
	if a, _ := c.Active(); a.Locator != lMN2 {
		t.Fatalf("newest: active %v", a.Locator)
	}
	if eff := c.SetLocalQuality(lMN1, Quality{Measured: true, RTT: 5 * time.Millisecond}, t0); len(eff.Updates) != 0 {
		t.Fatalf("newest reacted to quality: %+v", eff)
	}
}
