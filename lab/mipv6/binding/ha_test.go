package binding

import (
	"net/netip"
	"testing"
	"time"

	"ilnp/lab/mipv6/mh"
)

// newHA is a home agent without DAD: the tests of BU processing (DAD has its own below).
func newHA(t *testing.T, delay time.Duration) *HomeAgent {
	t.Helper()
	h, err := NewHomeAgent(HAConfig{Addr: haAddr, HomePrefix: homePrefix, ProcessingDelay: delay, Node: "ha", SkipDAD: true})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// buFrom builds the BU a mobile node at src would send for home (HAO when src != home).
func buFrom(t *testing.T, src, home netip.Addr, bu *mh.BindingUpdate) Received {
	t.Helper()
	env := mh.Envelope{Src: src, Dst: haAddr}
	if src != home {
		env.HomeAddress = home
	}
	pkt, err := mh.AppendMessage(nil, env, bu)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse(pkt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestHomeAgentAccepts(t *testing.T) {
	h := newHA(t, 0)
	as := h.Event(buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 7, Ack: true, Home: true, Lifetime: 0xffff}), t0)
	b := one(t, as, Bind).Binding
	// The lifetime is capped at the configured 420 s.
	if b.HomeAddress != hoa || b.CareOf != coa || b.Seq != 7 || b.Lifetime != 420*time.Second || !b.New || !b.Expires.Equal(t0.Add(420*time.Second)) {
		t.Fatalf("binding %+v", b)
	}
	r := wireRoundTrip(t, one(t, as, Send))
	back := r.Msg.(*mh.BindingAck)
	if back.Status != mh.StatusAccepted || back.Seq != 7 || back.Lifetime != 105 {
		t.Fatalf("BAck %+v", back)
	}
	// To the care-of address through a type 2 routing header holding the home address.
	if r.Packet.Envelope != (mh.Envelope{Src: haAddr, Dst: coa, RoutingHome: hoa, HopLimit: 64}) {
		t.Fatalf("BAck envelope %+v", r.Packet.Envelope)
	}
	if tm := one(t, as, Timer); !tm.At.Equal(t0.Add(420 * time.Second)) {
		t.Fatalf("expiry timer %v", tm.At.Sub(t0))
	}
	if e, ok := h.Binding(hoa); !ok || e.CareOf != coa {
		t.Fatal("binding not cached")
	}

	// A newer BU from another care-of address updates the entry (not New).
	as = h.Event(buFrom(t, coa2, hoa, &mh.BindingUpdate{Seq: 8, Ack: true, Home: true, Lifetime: 10}), t0.Add(time.Second))
	if b := one(t, as, Bind).Binding; b.New || b.CareOf != coa2 || b.Lifetime != 40*time.Second {
		t.Fatalf("update %+v", b)
	}
	// A replayed (older or equal) sequence number: 135 with the cached number, no change.
	as = h.Event(buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 8, Home: true, Lifetime: 10}), t0.Add(2*time.Second))
	if len(ofKind(as, Bind)) != 0 {
		t.Fatal("replay re-bound")
	}
	if back := wireRoundTrip(t, one(t, as, Send)).Msg.(*mh.BindingAck); back.Status != mh.StatusSeqOutOfWindow || back.Seq != 8 {
		t.Fatalf("replay BAck %+v (sent even without the A flag)", back)
	}
	// Expiry.
	as = h.Event(Tick{}, t0.Add(41*time.Second))
	if u := one(t, as, Unbind).Binding; u.CareOf != coa2 {
		t.Fatalf("unbind %+v", u)
	}
	if _, ok := h.Binding(hoa); ok {
		t.Fatal("expired binding kept")
	}
	if tm := one(t, as, Timer); !tm.At.IsZero() {
		t.Fatal("timer after the cache emptied")
	}
	if s := h.Stats(); s.Accepted != 2 || s.Rejected != 1 || s.Expired != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestHomeAgentRejects(t *testing.T) {
	h := newHA(t, 0)
	foreign := netip.MustParseAddr("2001:db8:9::5")
	tests := []struct {
		name string
		r    Received
		want mh.Status
	}{
		{"home address outside the home prefix", buFrom(t, coa, foreign, &mh.BindingUpdate{Seq: 1, Ack: true, Home: true, Lifetime: 5}), mh.StatusNotHomeSubnet},
		{"no H flag", buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 1, Ack: true, Lifetime: 5}), mh.StatusProhibited},
		{"no H flag and no A flag still answered", buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 1, Lifetime: 5}), mh.StatusProhibited},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			as := h.Event(tc.r, t0)
			if len(ofKind(as, Bind)) != 0 {
				t.Fatal("bound")
			}
			if back := wireRoundTrip(t, one(t, as, Send)).Msg.(*mh.BindingAck); back.Status != tc.want || back.Lifetime != 0 {
				t.Fatalf("BAck %+v", back)
			}
		})
	}
	// Without the A flag an accepted BU gets no BAck.
	as := h.Event(buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 1, Home: true, Lifetime: 5}), t0)
	if len(ofKind(as, Send)) != 0 || len(ofKind(as, Bind)) != 1 {
		t.Fatalf("actions %+v", as)
	}
	// Messages other than BU are not the home agent's.
	if as := h.Event(Received{Msg: &mh.HomeTestInit{}}, t0); len(as) != 0 {
		t.Fatalf("HoTI gave %+v", as)
	}
}

func TestHomeAgentDeregistration(t *testing.T) {
	h := newHA(t, 0)
	h.Event(buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 1, Ack: true, Home: true, Lifetime: 100}), t0)
	as := h.Event(buFrom(t, hoa, hoa, &mh.BindingUpdate{Seq: 2, Ack: true, Home: true}), t0.Add(time.Second))
	if u := one(t, as, Unbind).Binding; u.CareOf != coa {
		t.Fatalf("unbind %+v", u)
	}
	r := wireRoundTrip(t, one(t, as, Send))
	if back := r.Msg.(*mh.BindingAck); back.Status != mh.StatusAccepted || back.Seq != 2 || back.Lifetime != 0 {
		t.Fatalf("BAck %+v", back)
	}
	if r.Packet.Envelope != (mh.Envelope{Src: haAddr, Dst: hoa, HopLimit: 64}) {
		t.Fatalf("BAck to the home address without routing header: %+v", r.Packet.Envelope)
	}
	// A care-of address equal to the home address (Alternate CoA) also deregisters.
	h.Event(buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 3, Ack: true, Home: true, Lifetime: 100}), t0.Add(2*time.Second))
	as = h.Event(buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 4, Ack: true, Home: true, Lifetime: 100,
		Options: []mh.Option{mh.AltCareOf{Addr: hoa}}}), t0.Add(3*time.Second))
	if len(ofKind(as, Unbind)) != 1 {
		t.Fatalf("alternate CoA = HoA did not deregister: %+v", as)
	}
	if s := h.Stats(); s.Deregistered != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// TestHomeAgentProcessingDelay checks T_HA: the binding and the BAck wait the configured time.
func TestHomeAgentProcessingDelay(t *testing.T) {
	h := newHA(t, time.Second)
	as := h.Event(buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 1, Ack: true, Home: true, Lifetime: 100}), t0)
	if len(ofKind(as, Send)) != 0 || len(ofKind(as, Bind)) != 0 {
		t.Fatalf("acted before T_HA: %+v", as)
	}
	if tm := one(t, as, Timer); !tm.At.Equal(t0.Add(time.Second)) {
		t.Fatalf("timer %v", tm.At.Sub(t0))
	}
	if as := h.Event(Tick{}, t0.Add(999*time.Millisecond)); len(ofKind(as, Send)) != 0 {
		t.Fatal("acted early")
	}
	as = h.Event(Tick{}, t0.Add(time.Second))
	one(t, as, Bind)
	one(t, as, Send)
	if tm := one(t, as, Timer); !tm.At.Equal(t0.Add(time.Second + 400*time.Second)) {
		t.Fatalf("expiry timer %v: the lifetime starts when the binding is installed", tm.At.Sub(t0))
	}
}

func newDADHA(t *testing.T, delay time.Duration) *HomeAgent {
	t.Helper()
	h, err := NewHomeAgent(HAConfig{Addr: haAddr, HomePrefix: homePrefix, ProcessingDelay: delay, Node: "ha"})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func backOf(t *testing.T, as []Action) *mh.BindingAck {
	t.Helper()
	return wireRoundTrip(t, one(t, as, Send)).Msg.(*mh.BindingAck)
}

// s.10.3.1: a new binding waits for DAD of the home address (UMIP's one second) before the
// binding and the BAck; a refresh and a deregistration do not probe; the next new binding
// probes again. T_HA comes on top of DAD.
func TestHomeAgentDAD(t *testing.T) {
	for _, tha := range []time.Duration{0, 300 * time.Millisecond} {
		h := newDADHA(t, tha)
		as := h.Event(buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 1, Ack: true, Home: true, Lifetime: 100}), t0)
		if p := one(t, as, Probe).Binding; p.HomeAddress != hoa || p.CareOf != coa {
			t.Fatalf("probe %+v", p)
		}
		if len(ofKind(as, Send)) != 0 || len(ofKind(as, Bind)) != 0 {
			t.Fatalf("acted before DAD: %+v", as)
		}
		if r := one(t, as, Record).Event; r.Kind != KindDAD || r.Detail != "start" || r.Peer != hoa.String() {
			t.Fatalf("record %+v", r)
		}
		if tm := one(t, as, Timer); !tm.At.Equal(t0.Add(DefaultDADTimeout)) {
			t.Fatalf("timer %v", tm.At.Sub(t0))
		}
		if as := h.Event(Tick{}, t0.Add(DefaultDADTimeout-time.Millisecond)); len(ofKind(as, Send)) != 0 || len(ofKind(as, Bind)) != 0 {
			t.Fatalf("acted before the DAD timeout: %+v", as)
		}
		as = h.Event(Tick{}, t0.Add(DefaultDADTimeout))
		if tha > 0 {
			if len(ofKind(as, Send)) != 0 {
				t.Fatalf("T_HA %v: BAck right after DAD: %+v", tha, as)
			}
			as = h.Event(Tick{}, t0.Add(DefaultDADTimeout+tha))
		}
		if b := one(t, as, Bind).Binding; !b.New || b.CareOf != coa {
			t.Fatalf("binding %+v", b)
		}
		if back := backOf(t, as); back.Status != mh.StatusAccepted || back.Seq != 1 {
			t.Fatalf("BAck %+v", back)
		}
		// Refresh: no probe, answered at once (plus T_HA).
		as = h.Event(buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 2, Ack: true, Home: true, Lifetime: 100}), t0.Add(5*time.Second))
		if len(ofKind(as, Probe)) != 0 {
			t.Fatalf("refresh probed: %+v", as)
		}
		if tha > 0 {
			as = h.Event(Tick{}, t0.Add(5*time.Second+tha))
		}
		if back := backOf(t, as); back.Status != mh.StatusAccepted || back.Seq != 2 {
			t.Fatalf("refresh BAck %+v", back)
		}
		// Deregistration: no probe.
		as = h.Event(buFrom(t, hoa, hoa, &mh.BindingUpdate{Seq: 3, Ack: true, Home: true}), t0.Add(6*time.Second))
		if len(ofKind(as, Probe)) != 0 {
			t.Fatalf("deregistration probed: %+v", as)
		}
		// Away again: a new binding, a new probe.
		as = h.Event(buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 4, Ack: true, Home: true, Lifetime: 100}), t0.Add(10*time.Second))
		one(t, as, Probe)
		if s := h.Stats(); s.DADStarted != 2 || s.DADFailed != 0 {
			t.Fatalf("stats %+v", s)
		}
	}
}

// A Neighbor Advertisement for the home address during DAD: status 134, no binding, and the
// BU retransmitted meanwhile is refused too. An advertisement for an address not being
// probed changes nothing.
func TestHomeAgentDADDefended(t *testing.T) {
	h := newDADHA(t, 0)
	h.Event(buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 1, Ack: true, Home: true, Lifetime: 100}), t0)
	as := h.Event(buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 2, Ack: true, Home: true, Lifetime: 100}), t0.Add(500*time.Millisecond))
	if len(as) != 0 {
		t.Fatalf("retransmission during DAD: %+v", as)
	}
	if as := h.Event(Defended{Addr: coa}, t0.Add(600*time.Millisecond)); len(ofKind(as, Send)) != 0 {
		t.Fatalf("advertisement for another address: %+v", as)
	}
	as = h.Event(Defended{Addr: hoa}, t0.Add(700*time.Millisecond))
	sends := ofKind(as, Send)
	if len(sends) != 2 || len(ofKind(as, Bind)) != 0 {
		t.Fatalf("actions %+v", as)
	}
	for i, s := range sends {
		back := wireRoundTrip(t, s).Msg.(*mh.BindingAck)
		if back.Status != mh.StatusDADFailed || back.Seq != uint16(i+1) || back.Lifetime != 0 {
			t.Fatalf("BAck %d: %+v", i, back)
		}
	}
	if r := one(t, as, Record).Event; r.Kind != KindDAD || r.Detail != "failed" {
		t.Fatalf("record %+v", r)
	}
	if _, ok := h.Binding(hoa); ok {
		t.Fatal("bound despite the defence")
	}
	if as := h.Event(Tick{}, t0.Add(2*time.Second)); len(ofKind(as, Send))+len(ofKind(as, Bind)) != 0 {
		t.Fatalf("DAD timer still ran: %+v", as)
	}
	if s := h.Stats(); s.DADFailed != 1 || s.Rejected != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// A BU retransmitted during DAD is handled once DAD passed, as a refresh of the new binding
// (UMIP's handler waits for DAD, so the next BU finds the binding).
func TestHomeAgentDADQueue(t *testing.T) {
	h := newDADHA(t, 0)
	h.Event(buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 1, Ack: true, Home: true, Lifetime: 100}), t0)
	h.Event(buFrom(t, coa, hoa, &mh.BindingUpdate{Seq: 2, Ack: true, Home: true, Lifetime: 100}), t0.Add(500*time.Millisecond))
	as := h.Event(Tick{}, t0.Add(time.Second))
	binds, sends := ofKind(as, Bind), ofKind(as, Send)
	if len(binds) != 2 || !binds[0].Binding.New || binds[1].Binding.New || len(sends) != 2 || len(ofKind(as, Probe)) != 0 {
		t.Fatalf("actions %+v", as)
	}
	for i, s := range sends {
		if back := wireRoundTrip(t, s).Msg.(*mh.BindingAck); back.Status != mh.StatusAccepted || back.Seq != uint16(i+1) {
			t.Fatalf("BAck %d: %+v", i, back)
		}
	}
}
