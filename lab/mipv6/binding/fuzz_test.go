package binding

import (
	"testing"
	"time"

	"ilnp/lab/mipv6/mh"
)

// FuzzMachines feeds arbitrary packets to every machine in every state the seed scenario
// reaches: whatever parses must be handled without panicking, and a machine must never ask for
// a timer in the past.
func FuzzMachines(f *testing.F) {
	seeds := []struct {
		env mh.Envelope
		m   mh.Message
	}{
		{mh.Envelope{Src: coa, Dst: haAddr, HomeAddress: hoa}, &mh.BindingUpdate{Seq: 1, Ack: true, Home: true, Lifetime: 5}},
		{mh.Envelope{Src: haAddr, Dst: coa, RoutingHome: hoa}, &mh.BindingAck{Seq: 101, Lifetime: 5}},
		{mh.Envelope{Src: hoa, Dst: cnAddr}, &mh.HomeTestInit{}},
		{mh.Envelope{Src: coa, Dst: cnAddr}, &mh.CareOfTestInit{}},
		{mh.Envelope{Src: cnAddr, Dst: hoa}, &mh.HomeTest{}},
		{mh.Envelope{Src: cnAddr, Dst: coa}, &mh.CareOfTest{}},
		{mh.Envelope{Src: coa, Dst: cnAddr, HomeAddress: hoa}, &mh.BindingUpdate{Seq: 2, Ack: true, Lifetime: 5, Options: []mh.Option{mh.NonceIndices{}, mh.AuthData{}}}},
		{mh.Envelope{Src: cnAddr, Dst: coa, RoutingHome: hoa}, &mh.BindingAck{Status: mh.StatusExpiredNonces, Seq: 11}},
	}
	for _, s := range seeds {
		p, err := mh.AppendMessage(nil, s.env, s.m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(p, uint16(100))
	}
	f.Fuzz(func(t *testing.T, pkt []byte, ms uint16) {
		r, err := Parse(pkt)
		if err != nil {
			return
		}
		mn := newMN(t, nil)
		ha := newHA(t, time.Second)
		dad := newDADHA(t, time.Second)
		cn := newCN(t)
		ro := newRO(t)
		mn.Event(Moved{CareOf: coa}, t0)
		ro.Event(Moved{CareOf: coa}, t0)
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		for _, m := range []interface {
			Event(Event, time.Time) []Action
		}{mn, ha, dad, cn, ro} {
			for _, a := range append(m.Event(r, now), m.Event(Tick{}, now.Add(time.Hour))...) {
				if a.Kind == Timer && !a.At.IsZero() && a.At.Before(now) {
					t.Fatalf("%T asked for a timer in the past: %v", m, a.At)
				}
				if a.Kind == Send {
					if _, err := Parse(a.Packet); err != nil {
						t.Fatalf("%T sent an unparsable packet: %v", m, err)
					}
				}
			}
		}
	})
}
