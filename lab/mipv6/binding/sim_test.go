package binding

import (
	"net/netip"
	"testing"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/mh"
)

// sim is a toy network for the thesis topology (CN - HA - MN): one-way latencies per hop,
// the HA intercepting packets for the home address while it holds a binding and tunnelling
// them to the care-of address, and a drop hook. Every packet crosses the wire encoding.
type sim struct {
	t        *testing.T
	now      time.Time
	mn       *MobileNode
	ro       *RouteOptimizer
	ha       *HomeAgent
	cn       *Correspondent
	careOf   netip.Addr // current care-of address; invalid while at home
	timers   map[string]time.Time
	queue    []delivery
	drop     func(to string, r Received) bool
	results  map[string][]Result
	records  []timeline.Event
	haBound  map[netip.Addr]netip.Addr // HoA -> CoA as installed by Bind/Unbind
	tunneled int
	// sent is every packet as it left its node, the reverse-tunnelled ones encapsulated.
	sent [][]byte
	// onDone lets the scenario chain procedures the way the lab does.
	onDone func(s *sim, who string, r Result)
}

type delivery struct {
	at  time.Time
	to  string
	pkt []byte
}

const (
	latMNHA = 20 * time.Millisecond
	latMNCN = 10 * time.Millisecond
	latHACN = 15 * time.Millisecond
)

func newSim(t *testing.T, tha time.Duration) *sim {
	s := &sim{t: t, now: t0, timers: map[string]time.Time{}, results: map[string][]Result{}, haBound: map[netip.Addr]netip.Addr{}}
	var err error
	if s.mn, err = NewMobileNode(MNConfig{HomeAddress: hoa, HomeAgent: haAddr, Node: "mn"}); err != nil {
		t.Fatal(err)
	}
	c1, c2 := counter(0), counter(50)
	if s.ro, err = NewRouteOptimizer(ROConfig{HomeAddress: hoa, Correspondent: cnAddr, Rand: &c1, Node: "mn"}); err != nil {
		t.Fatal(err)
	}
	if s.ha, err = NewHomeAgent(HAConfig{Addr: haAddr, HomePrefix: homePrefix, ProcessingDelay: tha, Node: "ha"}); err != nil {
		t.Fatal(err)
	}
	if s.cn, err = NewCorrespondent(CNConfig{Addr: cnAddr, Rand: &c2, Node: "cn"}); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *sim) machine(name string) interface {
	Event(Event, time.Time) []Action
} {
	switch name {
	case "mn":
		return s.mn
	case "ro":
		return s.ro
	case "ha":
		return s.ha
	}
	return s.cn
}

func (s *sim) enqueue(after time.Duration, to string, pkt []byte) {
	s.queue = append(s.queue, delivery{at: s.now.Add(after), to: to, pkt: pkt})
}

// route sends a packet from a node: by destination address, with the HA's interception.
func (s *sim) route(from string, a Action) {
	if a.ViaTunnel {
		outer, err := mh.AppendTunnel(nil, s.careOf, haAddr, a.Packet)
		if err != nil {
			s.t.Fatalf("tunnel: %v", err)
		}
		s.sent = append(s.sent, outer)
	} else {
		s.sent = append(s.sent, a.Packet)
	}
	dst := a.Env.Dst
	switch {
	case a.ViaTunnel: // MN -> HA (outer) -> inner destination
		s.tunneled++
		s.queue = append(s.queue, delivery{at: s.now.Add(latMNHA + latHACN), to: "cn", pkt: a.Packet})
	case dst == haAddr:
		s.enqueue(latMNHA, "ha", a.Packet)
	case dst == cnAddr:
		lat := latMNCN
		if from == "ha" {
			lat = latHACN
		}
		s.enqueue(lat, "cn", a.Packet)
	case dst == hoa:
		if c, ok := s.haBound[hoa]; ok && from != "ha" {
			// Intercepted on the home link and tunnelled to the care-of address.
			s.tunneled++
			if c == s.careOf {
				s.enqueue(latHACN+latMNHA, "mn", a.Packet)
			}
			return
		}
		if !s.careOf.IsValid() {
			lat := latMNHA
			if from == "cn" {
				lat = latMNCN
			}
			s.enqueue(lat, "mn", a.Packet)
		}
	case dst == s.careOf:
		lat := latMNCN
		if from == "ha" {
			lat = latMNHA
		}
		s.enqueue(lat, "mn", a.Packet)
	}
}

func (s *sim) apply(name string, as []Action) {
	for _, a := range as {
		switch a.Kind {
		case Send:
			from := name
			if from == "ro" {
				from = "mn"
			}
			s.route(from, a)
		case Timer:
			s.timers[name] = a.At
		case Done:
			s.results[name] = append(s.results[name], a.Result)
			if s.onDone != nil {
				s.onDone(s, name, a.Result)
			}
		case Bind:
			if name == "ha" {
				s.haBound[a.Binding.HomeAddress] = a.Binding.CareOf
			}
		case Unbind:
			if name == "ha" {
				delete(s.haBound, a.Binding.HomeAddress)
			}
		case Record:
			s.records = append(s.records, a.Event)
		}
	}
}

func (s *sim) event(name string, ev Event) { s.apply(name, s.machine(name).Event(ev, s.now)) }

// run advances the clock through deliveries and timers until until.
func (s *sim) run(until time.Time) {
	for {
		next, kind, idx := time.Time{}, "", -1
		for i, d := range s.queue {
			if next.IsZero() || d.at.Before(next) {
				next, kind, idx = d.at, "pkt", i
			}
		}
		for name, at := range s.timers {
			if !at.IsZero() && (next.IsZero() || at.Before(next)) {
				next, kind = at, name
			}
		}
		if next.IsZero() || next.After(until) {
			s.now = until
			return
		}
		s.now = next
		if kind != "pkt" {
			s.timers[kind] = time.Time{}
			s.event(kind, Tick{})
			continue
		}
		d := s.queue[idx]
		s.queue = append(s.queue[:idx], s.queue[idx+1:]...)
		r, err := Parse(d.pkt)
		if err != nil {
			s.t.Fatalf("packet to %s does not parse: %v", d.to, err)
		}
		if s.drop != nil && s.drop(d.to, r) {
			continue
		}
		if d.to == "mn" {
			s.event("mn", r)
			s.event("ro", r)
		} else {
			s.event(d.to, r)
		}
	}
}

// chainRO starts route optimisation once the home registration completes, and the
// correspondent deregistration once the home deregistration completes.
func chainRO(s *sim, who string, r Result) {
	if who != "mn" || r.Err != nil {
		return
	}
	if r.Deregistered {
		s.event("ro", ReturnedHome{})
	} else {
		s.event("ro", Moved{CareOf: r.CareOf})
	}
}

func TestSimulatedHandoffWithRouteOptimisation(t *testing.T) {
	s := newSim(t, 0) // DAD 1 s at the HA, as UMIP does
	s.onDone = chainRO
	s.careOf = coa
	s.event("mn", Moved{CareOf: coa})
	s.run(t0.Add(10 * time.Second))

	home := s.results["mn"]
	if len(home) != 1 || home[0].Err != nil || home[0].Attempts != 1 {
		t.Fatalf("home registration %+v", home)
	}
	// BU 20 ms + DAD 1 s + BAck 20 ms.
	if home[0].Elapsed != 1040*time.Millisecond {
		t.Fatalf("home registration took %v", home[0].Elapsed)
	}
	ro := s.results["ro"]
	if len(ro) != 1 || ro[0].Err != nil {
		t.Fatalf("route optimisation %+v", ro)
	}
	// HoTI MN->HA->CN 35 ms and HoT CN->HA->MN 35 ms; CoTI/CoT 20 ms; BU/BAck 20 ms.
	if ro[0].Total != 90*time.Millisecond || ro[0].Elapsed != 20*time.Millisecond {
		t.Fatalf("route optimisation total %v, BU->BAck %v", ro[0].Total, ro[0].Elapsed)
	}
	if e, ok := s.ha.Binding(hoa); !ok || e.CareOf != coa {
		t.Fatal("HA binding")
	}
	if e, ok := s.cn.Binding(hoa); !ok || e.CareOf != coa {
		t.Fatal("CN binding")
	}
	// HoTI out through the tunnel and HoT back through the HA's interception.
	if s.tunneled != 2 {
		t.Fatalf("tunnelled %d packets, want HoTI and HoT", s.tunneled)
	}
	var kinds []string
	for _, r := range s.records {
		if r.Node == "mn" {
			kinds = append(kinds, string(r.Kind)+":"+r.Detail)
		}
	}
	want := []string{
		"bu_sent:home registration, lifetime 420s", "back_received:home registration: accepted",
		"rr_message:CoTI sent", "rr_message:HoTI sent", "rr_message:CoT received", "rr_message:HoT received",
		"bu_sent:correspondent registration", "back_received:correspondent registration: accepted",
	}
	if len(kinds) != len(want) {
		t.Fatalf("mn records %q", kinds)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("mn records %q, want %q", kinds, want)
		}
	}

	// Second move within the token lifetime: re-registration, then CoTI only.
	s.careOf = coa2
	s.event("mn", Moved{CareOf: coa2})
	s.run(t0.Add(20 * time.Second))
	// A binding exists: no DAD, the BAck comes after one round trip.
	if home := s.results["mn"]; len(home) != 2 || home[1].CareOf != coa2 || home[1].Elapsed != 40*time.Millisecond || home[1].Attempts != 1 {
		t.Fatalf("second home registration %+v", home)
	}
	if ro := s.results["ro"]; len(ro) != 2 || ro[1].Total != 40*time.Millisecond {
		t.Fatalf("second route optimisation %+v", ro)
	}
	if e, _ := s.cn.Binding(hoa); e.CareOf != coa2 {
		t.Fatal("CN binding not moved")
	}

	// Back home: both bindings deleted.
	s.careOf = netip.Addr{}
	s.event("mn", ReturnedHome{})
	s.run(t0.Add(30 * time.Second))
	if home := s.results["mn"]; len(home) != 3 || !home[2].Deregistered || home[2].Err != nil {
		t.Fatalf("home deregistration %+v", home)
	}
	if ro := s.results["ro"]; len(ro) != 3 || !ro[2].Deregistered || ro[2].Err != nil {
		t.Fatalf("correspondent deregistration %+v", ro)
	}
	if _, ok := s.ha.Binding(hoa); ok {
		t.Fatal("HA binding left")
	}
	if _, ok := s.cn.Binding(hoa); ok {
		t.Fatal("CN binding left")
	}
	if st, _ := s.ro.State(); st != ROIdle {
		t.Fatalf("RO state %v", st)
	}
}

func TestSimulatedLostBindingUpdate(t *testing.T) {
	for _, tha := range []time.Duration{0, time.Second} {
		s := newSim(t, tha)
		s.careOf = coa
		lost := 0
		s.drop = func(to string, r Received) bool {
			if _, ok := r.Msg.(*mh.BindingUpdate); ok && to == "ha" && lost == 0 {
				lost++
				return true
			}
			return false
		}
		s.event("mn", Moved{CareOf: coa})
		s.run(t0.Add(10 * time.Second))
		home := s.results["mn"]
		// The first BU is lost; the retransmission leaves at InitialBindackTimeoutFirstReg.
		want := 1500*time.Millisecond + 2*latMNHA + DefaultDADTimeout + tha
		if len(home) != 1 || home[0].Attempts != 2 || home[0].Elapsed != want {
			t.Fatalf("T_HA %v: %+v, want elapsed %v", tha, home, want)
		}
	}
}
