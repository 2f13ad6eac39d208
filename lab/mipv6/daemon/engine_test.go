package daemon

import (
	"crypto/rand"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/datapath"
	"ilnp/lab/mipv6/movement"
)

var (
	homePrefix = netip.MustParsePrefix("2001:db8:2::/64")
	foreign    = netip.MustParsePrefix("2001:db8:3::/64")
	haAddr     = netip.MustParseAddr("2001:db8:2::1")
	hoa        = netip.MustParseAddr("2001:db8:2::214:4fff:fe20:ee64")
	coa        = netip.MustParseAddr("2001:db8:3::214:4fff:fe20:ee64")
	cnAddr     = netip.MustParseAddr("2001:db8:1::214:4fff:fe20:cc01")
)

// fakePlane records what the engine asked of the datapath.
type fakePlane struct {
	node  string
	calls []string
}

func (p *fakePlane) rec(format string, a ...any) error {
	p.calls = append(p.calls, fmt.Sprintf(format, a...))
	return nil
}
func (p *fakePlane) SetBinding(h, c netip.Addr) error    { return p.rec("bind %v %v", h, c) }
func (p *fakePlane) DeleteBinding(h netip.Addr) error    { return p.rec("unbind %v", h) }
func (p *fakePlane) SetRO(cn netip.Addr, on bool) error  { return p.rec("ro %v %v", cn, on) }
func (p *fakePlane) ProxyND(h netip.Addr, on bool) error { return p.rec("proxynd %v %v", h, on) }
func (p *fakePlane) SetEgress(link string) error         { return p.rec("egress %q", link) }
func (p *fakePlane) SolicitDAD(h netip.Addr) error       { return p.rec("dad %v", h) }
func (p *fakePlane) has(call string) bool                { return indexOf(p.calls, call) >= 0 }
func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// net is an in-memory network with a fake clock: packets are delivered by destination address
// after a one-way delay, engines' timers fire in time order.
type simNet struct {
	t       testing.TB
	now     time.Time
	mono0   int64
	delay   time.Duration
	engines map[netip.Addr]*Engine
	all     []*Engine
	queue   []inflight
	drop    func(dst netip.Addr) bool
	dropSrc func(src netip.Addr) bool // by the packet's IPv6 source
	events  map[string][]timeline.Event
}

type inflight struct {
	at  time.Time
	pkt []byte
	dst netip.Addr
}

func newSimNet(t testing.TB, delay time.Duration) *simNet {
	return &simNet{t: t, now: time.Unix(1000, 0), mono0: 1e12, delay: delay, engines: map[netip.Addr]*Engine{},
		events: map[string][]timeline.Event{}}
}

func (n *simNet) mono(t time.Time) int64 { return n.mono0 + int64(t.Sub(time.Unix(1000, 0))) }

func (n *simNet) add(cfg Config, addrs ...netip.Addr) (*Engine, *fakePlane) {
	p := &fakePlane{node: cfg.Node}
	send := func(pkt []byte, dst netip.Addr) error {
		if n.drop != nil && n.drop(dst) {
			return nil
		}
		if src := netip.AddrFrom16([16]byte(pkt[8:24])); n.dropSrc != nil && n.dropSrc(src) {
			return nil
		}
		n.queue = append(n.queue, inflight{at: n.now.Add(n.delay), pkt: append([]byte(nil), pkt...), dst: dst})
		return nil
	}
	emit := func(ev timeline.Event) {
		if ev.MonoNS == 0 {
			ev.MonoNS = n.mono(n.now)
		}
		n.events[cfg.Node] = append(n.events[cfg.Node], ev)
	}
	e, err := NewEngine(cfg, p, send, emit, rand.Reader, nil)
	if err != nil {
		n.t.Fatal(err)
	}
	e.now = func() int64 { return n.mono(n.now) }
	for _, a := range addrs {
		n.engines[a] = e
	}
	n.all = append(n.all, e)
	return e, p
}

// run advances the clock to until, delivering packets and firing timers in order.
func (n *simNet) run(until time.Time) {
	for {
		next := until
		for _, e := range n.all {
			if d := e.Next(); !d.IsZero() && d.Before(next) {
				next = d
			}
		}
		qi := -1
		for i, f := range n.queue {
			if !f.at.After(next) {
				next, qi = f.at, i
			}
		}
		if next.After(until) {
			n.now = until
			return
		}
		n.now = next
		if qi >= 0 {
			f := n.queue[qi]
			n.queue = append(n.queue[:qi], n.queue[qi+1:]...)
			if e, ok := n.engines[f.dst]; ok {
				e.Signal(f.pkt, n.mono(n.now), n.now)
			}
			continue
		}
		for _, e := range n.all {
			if d := e.Next(); !d.IsZero() && !n.now.Before(d) {
				e.Tick(n.now)
			}
		}
		if n.now.Equal(until) {
			return
		}
	}
}

func (n *simNet) kinds(node string) []string {
	var out []string
	for _, ev := range n.events[node] {
		out = append(out, string(ev.Kind)+":"+ev.Detail)
	}
	return out
}

func (n *simNet) first(node string, kind timeline.Kind, detailPrefix string) (timeline.Event, bool) {
	for _, ev := range n.events[node] {
		if ev.Kind == kind && strings.HasPrefix(ev.Detail, detailPrefix) {
			return ev, true
		}
	}
	return timeline.Event{}, false
}

func haConfig(tha time.Duration) Config {
	return Config{Role: datapath.RoleHomeAgent, Node: "ha", Interfaces: []string{"r2-r1", "r2-mn"}, Addr: haAddr,
		HomePrefix: homePrefix, HomeLink: "r2-mn", ProcessingDelay: tha}
}

func mnConfig(ro bool) Config {
	c := Config{Role: datapath.RoleMobileNode, Node: "mn", Interfaces: []string{"mn-r2", "mn-r3"}, HomePrefix: homePrefix,
		HomeAddress: hoa, HomeAgent: haAddr}
	if ro {
		c.Correspondents = []netip.Addr{cnAddr}
	}
	return c
}

// startAtHome: the MN sees its home prefix on mn-r2, then L3 on mn-r3 (the overlap), then the
// home link goes down: the thesis's trigger.
func moveAway(n *simNet, mn *Engine) time.Time {
	day := 24 * time.Hour
	mn.Movement(movement.Advertisement{Link: "mn-r2", Prefixes: []movement.PrefixInfo{{Prefix: homePrefix, ValidLifetime: day}}}, n.now)
	if mn.Location().Location != movement.AtHome {
		n.t.Fatalf("not at home: %+v", mn.Location())
	}
	n.run(n.now.Add(time.Second))
	mn.Movement(movement.LinkState{Link: "mn-r3", Up: true}, n.now)
	mn.Movement(movement.Advertisement{Link: "mn-r3", Prefixes: []movement.PrefixInfo{{Prefix: foreign, ValidLifetime: day}}}, n.now)
	if mn.Location().Location != movement.AtHome {
		n.t.Fatalf("left home while the home link is up: %+v", mn.Location())
	}
	n.run(n.now.Add(time.Second))
	left := n.now
	mn.Movement(movement.LinkState{Link: "mn-r2", Up: false}, n.now)
	if l := mn.Location(); l.Location != movement.Away || l.Address != coa || l.Link != "mn-r3" {
		n.t.Fatalf("after the home link went down: %+v", l)
	}
	return left
}

// Home registration through the engines: the MN's own binding and egress before the BU, the
// HA's DAD solicitation at once, its tunnel and proxy ND, BU -> BAck delay = one RTT + DAD
// (1 s) + T_HA, the BAck stamped with its arrival; no route optimisation without
// correspondents.
func TestEngineHomeRegistration(t *testing.T) {
	for _, tha := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprint("T_HA=", tha), func(t *testing.T) {
			n := newSimNet(t, 5*time.Millisecond)
			ha, haPlane := n.add(haConfig(tha), haAddr)
			mn, mnPlane := n.add(mnConfig(false), hoa, coa)
			left := moveAway(n, mn)
			if len(mnPlane.calls) < 2 || mnPlane.calls[0] != fmt.Sprintf("bind %v %v", hoa, coa) || mnPlane.calls[1] != `egress "mn-r3"` {
				t.Fatalf("MN datapath before the BU: %v", mnPlane.calls)
			}
			n.run(left.Add(3 * time.Second))
			bu, ok1 := n.first("mn", timeline.BUSent, "home registration")
			back, ok2 := n.first("mn", timeline.BAckReceived, "home registration: ")
			if !ok1 || !ok2 {
				t.Fatalf("MN timeline: %v", n.kinds("mn"))
			}
			if bu.MonoNS != n.mono(left) {
				t.Errorf("BU sent at %d, want at the move %d", bu.MonoNS, n.mono(left))
			}
			if got, want := time.Duration(back.MonoNS-bu.MonoNS), 10*time.Millisecond+time.Second+tha; got != want {
				t.Errorf("BU -> BAck %v, want RTT + DAD + T_HA = %v", got, want)
			}
			if !haPlane.has(fmt.Sprintf("dad %v", hoa)) || indexOf(haPlane.calls, fmt.Sprintf("dad %v", hoa)) > indexOf(haPlane.calls, fmt.Sprintf("bind %v %v", hoa, coa)) {
				t.Errorf("HA datapath: DAD solicitation missing or after the binding: %v", haPlane.calls)
			}
			if !strings.Contains(back.Detail, "accepted") {
				t.Errorf("BAck: %+v", back)
			}
			if !haPlane.has(fmt.Sprintf("bind %v %v", hoa, coa)) || !haPlane.has(fmt.Sprintf("proxynd %v true", hoa)) {
				t.Errorf("HA datapath: %v", haPlane.calls)
			}
			bind, _ := n.first("ha", KindBinding, "bind")
			recv, _ := n.first("ha", KindBUReceived, "")
			if d := time.Duration(bind.MonoNS - recv.MonoNS); d != time.Second+tha {
				t.Errorf("HA bound %v after the BU arrived, want DAD + T_HA %v", d, time.Second+tha)
			}
			if ns, ok := n.first("ha", KindDADSolicit, ""); !ok || ns.MonoNS != recv.MonoNS || ns.Peer != hoa.String() {
				t.Errorf("DAD solicitation %+v (%v), want at the BU's arrival %d", ns, ok, recv.MonoNS)
			}
			for _, c := range mnPlane.calls {
				if strings.HasPrefix(c, "ro ") && strings.HasSuffix(c, "true") {
					t.Errorf("route optimisation without correspondents: %v", mnPlane.calls)
				}
			}
			if s := ha.Stats(); s.Malformed != 0 || s.SendErrors != 0 || s.PlaneErrors != 0 {
				t.Errorf("HA stats %+v", s)
			}
		})
	}
}

// Route optimisation starts only after the home registration: HoTI/CoTI, HoT/CoT, BU to the
// CN, the CN's binding, then the MN turns RO on; the handoff ends with the CN's BAck.
func TestEngineRouteOptimisation(t *testing.T) {
	n := newSimNet(t, 5*time.Millisecond)
	n.add(haConfig(0), haAddr)
	mn, mnPlane := n.add(mnConfig(true), hoa, coa)
	_, cnPlane := n.add(Config{Role: datapath.RoleCorrespondent, Node: "cn", Interfaces: []string{"cn-r1"}, Addr: cnAddr}, cnAddr)
	left := moveAway(n, mn)
	n.run(left.Add(3 * time.Second))
	var seq []string
	for _, ev := range n.events["mn"] {
		if ev.Kind == timeline.BUSent || ev.Kind == timeline.BAckReceived || ev.Kind == timeline.RRMessage {
			seq = append(seq, ev.Detail)
		}
	}
	homeBack := indexOf(seq, "home registration: accepted")
	if homeBack < 0 || homeBack > 1 {
		t.Fatalf("home registration first: %q", seq)
	}
	for _, want := range []string{"HoTI sent", "CoTI sent", "HoT received", "CoT received", "correspondent registration", "correspondent registration: accepted"} {
		if i := indexOf(seq, want); i < homeBack {
			t.Errorf("%q missing or before the home registration: %q", want, seq)
		}
	}
	if !cnPlane.has(fmt.Sprintf("bind %v %v", hoa, coa)) {
		t.Errorf("CN datapath: %v", cnPlane.calls)
	}
	on := indexOf(mnPlane.calls, fmt.Sprintf("ro %v true", cnAddr))
	if on < 0 || on < indexOf(mnPlane.calls, fmt.Sprintf("bind %v %v", hoa, coa)) {
		t.Fatalf("MN datapath: %v", mnPlane.calls)
	}
	// BU sent -> CN's BAck: home registration (1 RTT + DAD), then RR (1 RTT) and the BU (1 RTT).
	bu, _ := n.first("mn", timeline.BUSent, "home registration")
	cnBack, _ := n.first("mn", timeline.BAckReceived, "correspondent registration: ")
	if d := time.Duration(cnBack.MonoNS - bu.MonoNS); d != time.Second+30*time.Millisecond {
		t.Errorf("first BU -> CN's BAck %v, want DAD + 3 RTTs (1.03 s)", d)
	}
	// Back home: bindings go, RO off, deregistrations sent.
	mn.Movement(movement.LinkState{Link: "mn-r2", Up: true}, n.now)
	mn.Movement(movement.Advertisement{Link: "mn-r2", Prefixes: []movement.PrefixInfo{{Prefix: homePrefix, ValidLifetime: time.Hour}}}, n.now)
	n.run(n.now.Add(2 * time.Second))
	if !mnPlane.has(fmt.Sprintf("unbind %v", hoa)) || mnPlane.calls[len(mnPlane.calls)-1] == fmt.Sprintf("ro %v true", cnAddr) {
		t.Errorf("MN datapath after returning home: %v", mnPlane.calls)
	}
	if !cnPlane.has(fmt.Sprintf("unbind %v", hoa)) {
		t.Errorf("CN kept the binding after deregistration: %v", cnPlane.calls)
	}
}

// A lost BAck: retransmissions per RFC 6275 s.11.8 (1.5 s for a first registration, then
// doubling), all through the engine's timers.
func TestEngineRetransmission(t *testing.T) {
	n := newSimNet(t, 5*time.Millisecond)
	n.add(haConfig(0), haAddr)
	mn, _ := n.add(mnConfig(false), hoa, coa)
	n.drop = func(dst netip.Addr) bool { return dst == haAddr }
	left := moveAway(n, mn)
	n.run(left.Add(10 * time.Second))
	var at []time.Duration
	for _, ev := range n.events["mn"] {
		if ev.Kind == timeline.BUSent {
			at = append(at, time.Duration(ev.MonoNS-n.mono(left)))
		}
	}
	want := []time.Duration{0, 1500 * time.Millisecond, 4500 * time.Millisecond, 10500 * time.Millisecond}
	if len(at) != 3 || at[0] != want[0] || at[1] != want[1] || at[2] != want[2] {
		t.Fatalf("BUs at %v, want %v", at, want[:3])
	}
	// The HA comes back: the next retransmission completes the exchange.
	n.drop = nil
	n.run(left.Add(12 * time.Second))
	if back, ok := n.first("mn", timeline.BAckReceived, "home registration"); !ok || back.Attempt != 4 {
		t.Fatalf("BAck after the 4th BU: %+v %v", back, ok)
	}
}

// A packet that is no Mobility Header the machines know is counted and not fatal.
func TestEngineMalformed(t *testing.T) {
	n := newSimNet(t, time.Millisecond)
	ha, _ := n.add(haConfig(0), haAddr)
	ha.Signal([]byte{0x60, 0, 0}, 0, n.now)
	ha.Signal(nil, 0, n.now)
	if s := ha.Stats(); s.Malformed != 2 || s.Signals != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestReceivedRecord(t *testing.T) {
	for _, c := range []struct {
		ev   timeline.Event
		want bool
	}{
		{timeline.Event{Kind: timeline.BAckReceived}, true},
		{timeline.Event{Kind: timeline.RRMessage, Detail: "HoT received"}, true},
		{timeline.Event{Kind: timeline.RRMessage, Detail: "HoTI sent"}, false},
		{timeline.Event{Kind: timeline.BUSent}, false},
	} {
		if got := receivedRecord(c.ev); got != c.want {
			t.Errorf("%+v: %v", c.ev, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{},
		{Role: datapath.RoleHomeAgent, Interfaces: []string{"a"}, Addr: cnAddr, HomePrefix: homePrefix, HomeLink: "a"},
		{Role: datapath.RoleHomeAgent, Interfaces: []string{"a"}, Addr: haAddr, HomePrefix: homePrefix},
		{Role: datapath.RoleMobileNode, Interfaces: []string{"a"}, HomePrefix: homePrefix, HomeAddress: coa, HomeAgent: haAddr},
		{Role: datapath.RoleMobileNode, Interfaces: []string{"a"}, HomePrefix: homePrefix, HomeAddress: hoa},
		{Role: datapath.RoleCorrespondent, Interfaces: []string{"a"}},
		{Role: datapath.RoleCorrespondent, Interfaces: []string{"a"}, Addr: cnAddr, ProcessingDelay: -1},
		{Role: datapath.RoleCorrespondent, Interfaces: []string{"a"}, Addr: cnAddr, Correspondent: true},
		{Role: datapath.RoleHomeAgent, Interfaces: []string{"a"}, Addr: haAddr, HomePrefix: homePrefix, HomeLink: "a", Correspondent: true},
	}
	for i, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("config %d accepted: %+v", i, c)
		}
	}
	peer := mnConfig(true)
	peer.Correspondent = true
	for _, c := range []Config{haConfig(time.Second), mnConfig(true), peer} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func TestSentRecord(t *testing.T) {
	for _, c := range []struct {
		ev   timeline.Event
		want bool
	}{
		{timeline.Event{Kind: timeline.BUSent}, true},
		{timeline.Event{Kind: timeline.RRMessage, Detail: "CoTI sent"}, true},
		{timeline.Event{Kind: timeline.RRMessage, Detail: "CoT received"}, false},
		{timeline.Event{Kind: timeline.BAckReceived}, false},
	} {
		if got := sentRecord(c.ev); got != c.want {
			t.Errorf("%+v: %v", c.ev, got)
		}
	}
}

// Whatever the tap hands over, the engines count it or act on it; they never panic.
func FuzzEngineSignal(f *testing.F) {
	n := newSimNet(f, time.Millisecond)
	var seeds [][]byte
	n.add(haConfig(0), haAddr)
	mn, _ := n.add(mnConfig(true), hoa, coa)
	n.add(Config{Role: datapath.RoleCorrespondent, Node: "cn", Interfaces: []string{"cn-r1"}, Addr: cnAddr}, cnAddr)
	moveAway(n, mn)
	for _, q := range n.queue {
		seeds = append(seeds, q.pkt)
	}
	n.run(n.now.Add(time.Millisecond)) // BU delivered, BAck queued
	for _, q := range n.queue {
		seeds = append(seeds, q.pkt)
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Add([]byte{0x60})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		n := newSimNet(t, time.Millisecond)
		ha, _ := n.add(haConfig(time.Second), haAddr)
		mn, _ := n.add(mnConfig(true), hoa, coa)
		cn, _ := n.add(Config{Role: datapath.RoleCorrespondent, Node: "cn", Interfaces: []string{"cn-r1"}, Addr: cnAddr}, cnAddr)
		for _, e := range []*Engine{ha, mn, cn} {
			e.Signal(pkt, 1, n.now)
		}
		n.run(n.now.Add(5 * time.Second))
	})
}
