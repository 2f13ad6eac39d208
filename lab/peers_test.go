package lab

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"ilnp/lab/measure"
	"ilnp/lab/summary"
)

func f64(v float64) *float64 { return &v }
func i(v int) *int           { return &v }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }

func TestNewStat(t *testing.T) {
	for _, tc := range []struct {
		name       string
		in         []*float64
		mean, half *float64
	}{
		{"none", nil, nil, nil},
		{"only nulls", []*float64{nil, nil}, nil, nil},
		{"one value: no interval", []*float64{f64(7)}, f64(7), nil},
		// t(0.975, 2) = 4.303, s = 1: 4.303 / sqrt(3).
		{"three", []*float64{f64(1), f64(2), f64(3)}, f64(2), f64(4.303 / math.Sqrt(3))},
		{"nulls skipped", []*float64{f64(1), nil, f64(3)}, f64(2), f64(12.706 * math.Sqrt(2) / math.Sqrt(2))},
		{"equal values", []*float64{f64(5), f64(5), f64(5)}, f64(5), f64(0)},
	} {
		s := NewStat(tc.in)
		if (s.Mean == nil) != (tc.mean == nil) || (s.Mean != nil && !near(*s.Mean, *tc.mean)) {
			t.Errorf("%s: mean %v, want %v", tc.name, s.Mean, tc.mean)
		}
		if (s.HalfWidth95 == nil) != (tc.half == nil) || (s.HalfWidth95 != nil && !near(*s.HalfWidth95, *tc.half)) {
			t.Errorf("%s: half-width %v, want %v", tc.name, s.HalfWidth95, tc.half)
		}
	}
}

func TestPeerCellFrom(t *testing.T) {
	yes, no := true, false
	reps := []peerRep{
		{run: summary.Run{HandoffDelayMs: f64(10), InterruptionMs: f64(100), TCPRetransmissions: i(4), TCPLost: i(2),
			TCPWindowGoodputBps: f64(20e6), SessionSurvived: &yes}, overhead: f64(24), preMove: f64(3e6)},
		{run: summary.Run{HandoffDelayMs: f64(20), InterruptionMs: f64(300), TCPRetransmissions: i(6), TCPLost: i(4),
			TCPWindowGoodputBps: f64(30e6), SessionSurvived: &no}, overhead: f64(24), preMove: f64(4e6)},
	}
	c := PeerCellFrom("lan-lan", "mptcp", "tcp", reps, f64(2e6))
	if c.N != 2 || c.Survived != 1 {
		t.Fatalf("n %d survived %d", c.N, c.Survived)
	}
	check := func(name string, s Stat, mean, half float64) {
		t.Helper()
		if s.Mean == nil || !near(*s.Mean, mean) || s.HalfWidth95 == nil || !near(*s.HalfWidth95, half) {
			t.Errorf("%s: %v ± %v, want %v ± %v", name, s.Mean, s.HalfWidth95, mean, half)
		}
	}
	// Two values a, b: s = |a-b|/sqrt(2), half = 12.706 * s / sqrt(2) = 12.706 * |a-b| / 2.
	check("handoff", c.HandoffDelayMs, 15, 12.706*10/2)
	check("interruption", c.InterruptionMs, 200, 12.706*200/2)
	check("retransmissions", c.TCPRetransmissions, 5, 12.706*2/2)
	check("lost", c.TCPLost, 3, 12.706*2/2)
	check("goodput", c.TCPWindowGoodputBps, 25e6, 12.706*10e6/2)
	check("overhead", c.OverheadBytesPerPacket, 24, 0)
	check("throughput vs ipv6", c.ThroughputVsIPv6, 1.75, 12.706*0.5/2)
	if c.UDPLost.Mean != nil {
		t.Errorf("udp_lost %v in a TCP cell", *c.UDPLost.Mean)
	}
	if c := PeerCellFrom("lan-lan", "mptcp", "tcp", reps, nil); c.ThroughputVsIPv6.Mean != nil {
		t.Errorf("throughput_vs_ipv6 without a baseline: %v", *c.ThroughputVsIPv6.Mean)
	}
}

// The contract of peers.json: a list of cells with exactly these fields (plus the cell's
// command, survivals, note, keepalive), each metric a mean with its 95 % half-width.
func TestPeersJSONContract(t *testing.T) {
	c := PeerCellFrom("lan-wan", "wireguard", "udp-hd", []peerRep{{run: summary.Run{UDPLost: i(3)}}}, nil)
	b, err := json.Marshal([]PeerCell{c})
	if err != nil {
		t.Fatal(err)
	}
	var cells []map[string]json.RawMessage
	if err := json.Unmarshal(b, &cells); err != nil || len(cells) != 1 {
		t.Fatalf("peers.json is not a list of cells: %v %s", err, b)
	}
	metrics := []string{"handoff_delay_ms", "interruption_ms", "udp_lost", "tcp_retransmissions", "tcp_lost",
		"tcp_window_goodput_bps", "overhead_bytes_per_packet", "throughput_vs_ipv6"}
	for _, k := range append([]string{"scenario", "mode", "traffic", "n"}, metrics...) {
		if _, ok := cells[0][k]; !ok {
			t.Errorf("cell lacks %q: %s", k, b)
		}
	}
	for _, k := range metrics {
		var s map[string]*float64
		if err := json.Unmarshal(cells[0][k], &s); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if _, ok := s["mean"]; !ok || len(s) != 2 {
			t.Errorf("%s is %s, want {mean, half_width_95}", k, cells[0][k])
		}
		if _, ok := s["half_width_95"]; !ok {
			t.Errorf("%s is %s, want {mean, half_width_95}", k, cells[0][k])
		}
	}
	if string(cells[0]["udp_lost"]) != `{"mean":3,"half_width_95":null}` {
		t.Errorf("udp_lost of one run: %s", cells[0]["udp_lost"])
	}
}

func TestPeersMarkdown(t *testing.T) {
	cfg := PeersConfig{Out: "out/peers", Reps: 1, Profile: Profiles["quick"], Scenarios: []string{"lan-lan"},
		Modes: []string{"ilnp-soft", "mptcp", "wireguard"}, Traffics: []string{"tcp", "udp-hd"}}
	yes := true
	run := func(intr float64, gp float64) []peerRep {
		return []peerRep{{run: summary.Run{InterruptionMs: f64(intr), TCPWindowGoodputBps: f64(gp), TCPLost: i(0), SessionSurvived: &yes}}}
	}
	cells := []PeerCell{
		PeerCellFrom("lan-lan", "ilnp-soft", "tcp", run(50, 20e6), nil),
		PeerCellFrom("lan-lan", "mptcp", "tcp", run(180, 45e6), nil),
		{Scenario: "lan-lan", Mode: "mptcp", Traffic: "udp-hd", Note: ErrMPTCPUDP.Error()},
	}
	for i := range cells[:2] {
		cells[i].Command = PeerCommand(cfg, "lan-lan", cells[i].Mode, "tcp")
	}
	md := PeersMarkdown(cfg, cells)
	for _, want := range []string{
		"Reduced n: 1 repetition(s) per cell, fewer than the issue's n >= 3",
		"| lan-lan | mptcp (MPTCP carries TCP only) | udp-hd | 0 | - |",
		"`ilnp-lab run --scenario lan-lan --mode mptcp --traffic tcp --profile quick --reps 1 --out out/peers/runs/lan-lan-mptcp-tcp`",
		"| lan-lan | mptcp | tcp | 1 | 1/1 | - | 180 | - | - | 0.0 | 45.00 | - | - | - | [2](#cmd-2) |",
		// mptcp's window goodput beats ILNP's, its interruption does not.
		"lan-lan tcp window goodput (4.5e+07 vs ilnp-soft 2e+07)",
		"ILNP is better on: lan-lan tcp interruption (180 vs ilnp-soft 50)",
		WGKeepaliveNote,
	} {
		if !strings.Contains(md, want) {
			t.Errorf("peers.md lacks %q:\n%s", want, md)
		}
	}
	cfg.Reps = 3
	if md := PeersMarkdown(cfg, cells); strings.Contains(md, "Reduced n") {
		t.Errorf("n = 3 called reduced")
	}
}

func TestPeerJobs(t *testing.T) {
	cfg := PeersConfig{Scenarios: []string{"lan-lan", "wan-wan"}, Modes: PeerModes, Traffics: PeerTraffics,
		FailoverScenarios: []string{"lan-lan"}, Profile: Profiles["quick"], Reps: 3, Out: "o"}
	jobs := peerJobs(cfg)
	if slices.Contains(jobs, peerJob{"lan-lan", "mptcp", "udp-hd", false}) || slices.Contains(jobs, peerJob{"lan-lan", "mptcp", "udp-hd", true}) {
		t.Errorf("peers runs mptcp with UDP")
	}
	for _, want := range []peerJob{{"lan-lan", "mptcp", "tcp", false}, {"lan-lan", "wireguard", "udp-hd", false}, {"lan-lan", "ipv6", "tcp", false},
		{"lan-lan", "mptcp", "tcp", true}, {"lan-lan", "wireguard", "udp-hd", true}, {"lan-lan", "ilnp-soft", "tcp", true}} {
		if !slices.Contains(jobs, want) {
			t.Errorf("peers does not run %v: %v", want, jobs)
		}
	}
	for _, j := range jobs {
		if j.failover && (j.scenario != "lan-lan" || !MultihomeModes[j.mode]) {
			t.Errorf("failover job %v: only lan-lan, only modes that can be multihomed", j)
		}
		// Every job is a valid run.
		cfg := j.config(cfg)
		if err := cfg.Validate(); err != nil {
			t.Errorf("job %v: %v", j, err)
		}
		if j.failover != cfg.Multihome || (j.failover && (len(cfg.Fails) != 1 || cfg.Fails[0] != (Fail{FailR2Silent, 4 * time.Second}))) {
			t.Errorf("job %v: multihome %v fails %v", j, cfg.Multihome, cfg.Fails)
		}
	}
	// Per scenario 5 modes x 2 traffics less mptcp's UDP, plus ipv6's TCP; failover on lan-lan:
	// ilnp-soft and wireguard both traffics, mptcp TCP.
	if len(jobs) != 2*(5*2-1+1)+5 {
		t.Errorf("%d jobs: %v", len(jobs), jobs)
	}
	if got := PeerFailoverCommand(cfg, "lan-lan", "ilnp-soft", "udp-hd"); got != "ilnp-lab run --scenario lan-lan --mode ilnp-soft --traffic udp-hd --profile quick --reps 3 --multihome --fail r2-silent@4s --policy preference --out o/runs/failover-lan-lan-ilnp-soft-udp-hd" {
		t.Errorf("failover command %q", got)
	}
	if err := (PeersConfig{Out: "o", Reps: 1, Scenarios: []string{"wan-wan"}, FailoverScenarios: []string{"lan-lan"}}).Validate(); err == nil {
		t.Errorf("a failover scenario outside the scenarios was accepted")
	}
}

// The failover column: a mean over the runs that failed over, "none" where no run did, and
// a peer without failover loses to ILNP's figure in its paragraph.
func TestPeersFailoverColumn(t *testing.T) {
	cfg := PeersConfig{Out: "o", Reps: 2, Profile: Profiles["quick"], Scenarios: []string{"lan-lan"},
		Modes: []string{"ilnp-soft", "wireguard"}, Traffics: []string{"udp-hd"}, FailoverScenarios: []string{"lan-lan"}}
	ilnp := PeerCellFrom("lan-lan", "ilnp-soft", "udp-hd", nil, nil)
	ilnp.setFailover([]peerRep{{run: summary.Run{FailoverMs: f64(70)}}, {run: summary.Run{FailoverMs: f64(80)}}})
	wg := PeerCellFrom("lan-lan", "wireguard", "udp-hd", nil, nil)
	wg.setFailover([]peerRep{{}, {}})
	half := 12.706 * 10 / 2
	if ilnp.FailoverN != 2 || ilnp.FailoverNone != 0 || ilnp.FailoverMs.Mean == nil || !near(*ilnp.FailoverMs.Mean, 75) || !near(*ilnp.FailoverMs.HalfWidth95, half) {
		t.Errorf("ilnp failover %+v", ilnp)
	}
	if fmtFailover(ilnp) != fmt.Sprintf("75 ± %.0f", half) || fmtFailover(wg) != "none (2/2)" {
		t.Errorf("failover column %q, %q", fmtFailover(ilnp), fmtFailover(wg))
	}
	part := PeerCellFrom("lan-lan", "mptcp", "tcp", nil, nil)
	part.setFailover([]peerRep{{run: summary.Run{FailoverMs: f64(300)}}, {}})
	if got := fmtFailover(part); got != "300 (none in 1/2)" {
		t.Errorf("failover column %q", got)
	}
	if got := fmtFailover(PeerCellFrom("lan-lan", "mipv6", "tcp", nil, nil)); got != "-" {
		t.Errorf("failover column without runs %q", got)
	}
	md := PeersMarkdown(cfg, []PeerCell{ilnp, wg})
	for _, want := range []string{"| failover (ms) |", "none (2/2)", "lan-lan udp-hd failover (none in 2/2 runs vs ilnp-soft 75)", "--multihome --fail r2-silent@4s"} {
		if !strings.Contains(md, want) {
			t.Errorf("peers.md lacks %q:\n%s", want, md)
		}
	}
}

func TestMPTCPRefusesUDP(t *testing.T) {
	c := RunConfig{Scenario: "lan-lan", Mode: "mptcp", Traffic: "udp-hd", Profile: Profiles["quick"], Reps: 1, Out: t.TempDir()}
	if err := c.Validate(); !errors.Is(err, ErrMPTCPUDP) {
		t.Errorf("mptcp with udp-hd: %v, want %v", err, ErrMPTCPUDP)
	}
	c.Traffic = "tcp"
	if err := c.Validate(); err != nil {
		t.Errorf("mptcp with tcp: %v", err)
	}
}

func TestPreMoveGoodput(t *testing.T) {
	r := measure.Result{Enter: 3, Rate: []measure.Point{{T: 0, V: 1}, {T: 1, V: 100}, {T: 2, V: 300}, {T: 3, V: 5000}}}
	if v := preMoveGoodput(r); v == nil || *v != 200 {
		t.Errorf("pre-move goodput %v, want 200 (bins 1 and 2)", v)
	}
	if v := preMoveGoodput(measure.Result{Enter: 1.5, Rate: r.Rate}); v != nil {
		t.Errorf("no whole second before the move: %v", *v)
	}
}

// ipv6Packet builds an IPv6 packet: headers (each a next-header value and its bytes) then a
// TCP segment with payload.
func ipv6Packet(src, dst [16]byte, chain []byte, exts [][]byte, payload int) []byte {
	var body []byte
	for k, e := range exts {
		h := slices.Clone(e)
		if k+1 < len(chain) {
			h[0] = chain[k+1]
		}
		body = append(body, h...)
	}
	tcp := make([]byte, 20+payload)
	tcp[12] = 5 << 4
	body = append(body, tcp...)
	b := make([]byte, 40, 40+len(body))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(body)))
	b[6] = chain[0]
	copy(b[8:], src[:])
	copy(b[24:], dst[:])
	return append(b, body...)
}

func TestPacketOverhead(t *testing.T) {
	cn, mn := Addr(L1, CNNID).As16(), Addr(L2, MNNID).As16()
	do := make([]byte, 8) // a destination options header of 8 bytes (ILNP's nonce)
	do[1] = 0
	inner := ipv6Packet(cn, mn, []byte{6}, nil, 100)
	tunnel := make([]byte, 40, 40+len(inner))
	tunnel[0] = 0x60
	binary.BigEndian.PutUint16(tunnel[4:], uint16(len(inner)))
	tunnel[6] = 41
	tunnel = append(tunnel, inner...)
	for _, tc := range []struct {
		name  string
		pkt   []byte
		extra int
		ok    bool
	}{
		{"plain", ipv6Packet(cn, mn, []byte{6}, nil, 100), 0, true},
		{"nonce option", ipv6Packet(cn, mn, []byte{60, 6}, [][]byte{do}, 100), 8, true},
		{"IPv6 in IPv6", tunnel, 40, true},
		{"no payload", ipv6Packet(cn, mn, []byte{6}, nil, 0), 0, false},
		{"truncated", ipv6Packet(cn, mn, []byte{6}, nil, 100)[:50], 0, false},
		{"not IPv6", []byte{0x45, 0, 0}, 0, false},
	} {
		extra, src, dst, ok := PacketOverhead(tc.pkt)
		if ok != tc.ok || (ok && (extra != tc.extra || src != cn || dst != mn)) {
			t.Errorf("%s: %d %v, want %d %v", tc.name, extra, ok, tc.extra, tc.ok)
		}
	}
}

func TestParseMPTCPOptions(t *testing.T) {
	// NOP NOP TS, then a DSS with a 4-byte data ACK and an 8-byte DSN mapping.
	h := make([]byte, 20, 60)
	h = append(h, 1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0)
	dss := []byte{30, 20, 2 << 4, 0x01 | 0x04 | 0x08, 0, 0, 0, 9, 0, 0, 0, 1, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0, 5, 0x05, 0xa0}
	dss[1] = byte(len(dss))
	h = append(h, dss...)
	for len(h)%4 != 0 {
		h = append(h, 1)
	}
	h[12] = byte(len(h)/4) << 4
	o := parseMPTCPOptions(h)
	if !o.mapping || o.dsn != 0xaabbccdd || o.ssn != 5 || o.dataLen != 1440 || o.optionsBytes != len(dss) {
		t.Errorf("DSS: %+v", o)
	}
	// ADD_ADDR for an IPv6 address with its HMAC.
	l3 := Addr(L3, MNNID).As16()
	add := append([]byte{30, 28, 3 << 4, 2}, l3[:]...)
	add = append(add, make([]byte, 8)...)
	h2 := append(make([]byte, 20), add...)
	if o := parseMPTCPOptions(h2); !o.addAddr || o.addAddrEcho || o.addr != l3 {
		t.Errorf("ADD_ADDR: %+v", o)
	}
	// Malformed: a length running past the header.
	if o := parseMPTCPOptions(append(make([]byte, 20), 30, 40, 0x20, 0)); o.mapping || o.optionsBytes != 0 {
		t.Errorf("malformed option read: %+v", o)
	}
}

// A peer "beats" ILNP only where the 95 % intervals do not overlap (n >= 3 both).
func TestPeerParagraphIntervals(t *testing.T) {
	reps := func(vs ...float64) []peerRep {
		var r []peerRep
		for _, v := range vs {
			r = append(r, peerRep{run: summary.Run{InterruptionMs: f64(v)}})
		}
		return r
	}
	cells := []PeerCell{
		PeerCellFrom("lan-lan", "ilnp-soft", "tcp", reps(100, 110, 120), nil),
		PeerCellFrom("lan-lan", "mptcp", "tcp", reps(90, 100, 110), nil), // overlaps
	}
	p := PeerParagraph("mptcp", cells)
	if strings.Contains(p, "interruption") || !strings.Contains(p, "intervals overlap are left out") {
		t.Errorf("overlapping intervals counted:\n%s", p)
	}
	cells[1] = PeerCellFrom("lan-lan", "mptcp", "tcp", reps(10, 11, 12), nil)
	if p := PeerParagraph("mptcp", cells); !strings.Contains(p, "It beats the better ILNP mode on: lan-lan tcp interruption (11 vs ilnp-soft 110)") {
		t.Errorf("a clear win not said:\n%s", p)
	}
}
