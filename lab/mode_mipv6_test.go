package lab

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/binding"
	"ilnp/lab/mipv6/daemon"
	"ilnp/lab/summary"
)

// mipv6Run is one quick repetition of a MIPv6 baseline mode and where its files are.
type mipv6Run struct {
	run  summary.Run
	meta RunMeta
	dir  string // rep-1
}

func runMIPv6(t *testing.T, mode, traffic string, tha time.Duration) mipv6Run {
	t.Helper()
	return runMIPv6Config(t, RunConfig{Scenario: "lan-lan", Mode: mode, Traffic: traffic}, tha)
}

// runMIPv6Config is runMIPv6 for any lan-lan RunConfig (Profile, Reps, Out, BinDir set here).
func runMIPv6Config(t *testing.T, cfg RunConfig, tha time.Duration) mipv6Run {
	t.Helper()
	mode, traffic := cfg.Mode, cfg.Traffic
	requireLab(t)
	nstest.RequireTool(t, "tshark")
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := BuildMip6d(root, bin); err != nil {
		t.Fatal(err)
	}
	old := MIPv6HAProcessing
	MIPv6HAProcessing = tha
	defer func() { MIPv6HAProcessing = old }()
	out := t.TempDir()
	rep := filepath.Join(out, "rep-1")
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, f := range []string{"mn-events.jsonl", "ha-events.jsonl", "cn-events.jsonl", "ha-cn-events.jsonl", "lab-events.jsonl",
			"mip6d-mn.log", "mip6d-ha.log", "mip6d-cn.log", "mip6d-ha-cn.log", "mipv6.json", "run.json"} {
			if b, err := os.ReadFile(filepath.Join(rep, f)); err == nil {
				t.Logf("%s:\n%s", f, b)
			}
		}
	})
	cfg.Profile, cfg.Reps, cfg.Out, cfg.BinDir = testProfile, 1, out, bin
	s, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := summary.Read(filepath.Join(out, "summary.json")); err != nil {
		t.Fatalf("summary.json breaks the contract: %v", err)
	}
	for _, f := range []string{"report.md", "rate.png", "seq.png", "rep-1/mn.pcap", "rep-1/mn-wire.pcap", "rep-1/r1-r3.pcap"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	report, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if !strings.Contains(string(report), THADescription(tha)) {
		t.Errorf("report.md does not say which T_HA was used (%q)", THADescription(tha))
	}
	r := mipv6Run{run: s.Runs[0], meta: leftovers(t, out), dir: rep}
	t.Logf("%s %s (%s): %s", mode, traffic, THADescription(tha), describe(r.run))
	if r.run.SessionSurvived == nil || !*r.run.SessionSurvived {
		t.Errorf("session did not survive the move: %s", describe(r.run))
	}
	if r.run.HandoffDelayMs == nil {
		t.Errorf("no handoff delay measured: %s", describe(r.run))
	}
	return r
}

// wallOf turns a timeline stamp into wall-clock seconds on the captures' axis.
func (r mipv6Run) wallOf(monoNS int64) float64 {
	return float64(r.meta.T0UnixNS+(monoNS-r.meta.T0MonoNS)) / 1e9
}

func (r mipv6Run) event(t *testing.T, file string, kind timeline.Kind, detailPrefix string) timeline.Event {
	t.Helper()
	f, err := os.Open(filepath.Join(r.dir, file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, err := timeline.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Kind == kind && strings.HasPrefix(e.Detail, detailPrefix) {
			return e
		}
	}
	t.Fatalf("no %s %q in %s", kind, detailPrefix, file)
	return timeline.Event{}
}

// r1r3 is one packet on the R1-R3 link as tshark dissects it (outer and inner header fields
// comma-joined).
type r1r3 struct {
	t                  float64
	src, dst, nxt, rh2 string
	hao                string
	data               bool
}

func (r mipv6Run) r1r3(t *testing.T) []r1r3 {
	t.Helper()
	out, err := exec.Command("tshark", "-r", filepath.Join(r.dir, "r1-r3.pcap"), "-T", "fields", "-E", "separator=|",
		"-e", "frame.time_epoch", "-e", "ipv6.src", "-e", "ipv6.dst", "-e", "ipv6.nxt", "-e", "ipv6.routing.type",
		"-e", "ipv6.opt.mipv6.home_address", "-e", "udp.length", "-e", "tcp.len").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	var pkts []r1r3
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) < 8 {
			continue
		}
		ts, _ := strconv.ParseFloat(f[0], 64)
		tcpLen, _ := strconv.Atoi(f[7])
		pkts = append(pkts, r1r3{t: ts, src: f[1], dst: f[2], nxt: f[3], rh2: f[4], hao: f[5], data: f[6] != "" || tcpLen > 0})
	}
	return pkts
}

var (
	cnText  = Addr(L1, CNNID).String()
	coaText = Addr(L3, MNNID).String()
	hoaText = Addr(L2, MNNID).String()
)

// Without route optimisation the CN's packets reach the MN through the HA: on R1-R3 they are
// IPv6-in-IPv6 (next header 41) from the HA to the care-of address around the CN -> HoA
// packet, and nothing carries a type 2 RH.
func checkTunnel(t *testing.T, r mipv6Run) {
	t.Helper()
	var down, up int
	for _, p := range r.r1r3(t) {
		if p.data && (p.rh2 == "2" || p.hao != "") {
			t.Fatalf("route-optimised data packet in mode mipv6: %+v", p)
		}
		if !p.data || !strings.HasPrefix(p.nxt, "41,") {
			continue
		}
		switch {
		case p.src == HomeAgentAddr+","+cnText && p.dst == coaText+","+hoaText:
			down++
		case p.src == coaText+","+hoaText && p.dst == HomeAgentAddr+","+cnText:
			up++
		}
	}
	t.Logf("R1-R3: %d tunnelled data packets HA -> CoA, %d CoA -> HA", down, up)
	if down < 20 {
		t.Errorf("R1-R3 shows %d tunnelled CN -> MN data packets, want the flow (> 20)", down)
	}
}

// With route optimisation, once the CN's BAck arrived, the CN's packets go straight to the
// care-of address with a type 2 RH carrying the home address, none through the tunnel, and
// the MN's carry the Home Address option.
func checkRouteOptimised(t *testing.T, r mipv6Run) {
	t.Helper()
	done := r.wallOf(r.event(t, "mn-events.jsonl", timeline.BAckReceived, "correspondent registration: accepted").MonoNS)
	var rh2, hao, tunnelled int
	for _, p := range r.r1r3(t) {
		if p.t < done+0.1 {
			continue
		}
		switch {
		case strings.HasPrefix(p.nxt, "41") && p.data:
			tunnelled++
		case p.rh2 == "2" && p.src == cnText && p.dst == coaText && p.data:
			rh2++
		case p.hao == hoaText && p.src == coaText && p.dst == cnText:
			hao++ // data, or TCP's acknowledgements
		}
	}
	t.Logf("R1-R3 after RO: %d data packets with a type 2 RH, %d MN -> CN packets with a HAO, %d data packets tunnelled", rh2, hao, tunnelled)
	if rh2 < 20 || tunnelled != 0 || hao < 20 {
		t.Errorf("after RO completed: %d type 2 RH data packets (want > 20), %d with a HAO (want > 20), %d tunnelled (want 0)", rh2, hao, tunnelled)
	}
	// The handoff runs to the CN's BAck: longer than the home registration alone.
	home := r.event(t, "mn-events.jsonl", timeline.BAckReceived, "home registration")
	first := r.event(t, "mn-events.jsonl", timeline.BUSent, "home registration")
	if d := *r.run.HandoffDelayMs; d <= float64(home.MonoNS-first.MonoNS)/1e6 {
		t.Errorf("handoff delay %.2f ms ends before the CN's BAck (home registration took %.2f ms)", d, float64(home.MonoNS-first.MonoNS)/1e6)
	}
}

func TestE2EMIPv6UDP(t *testing.T) {
	r := runMIPv6(t, "mipv6", "udp-hd", 0)
	checkTunnel(t, r)
	// T_HA 0 on a LAN: BU -> BAck is the HA's DAD (1 s) plus a round trip and processing.
	if d := *r.run.HandoffDelayMs; d < 1000 || d > 1000+r.meta.RTTL3ms+50 {
		t.Errorf("handoff delay %.2f ms, want DAD 1000 ms + RTT (%.2f) + up to 50 ms", d, r.meta.RTTL3ms)
	}
}

func TestE2EMIPv6TCP(t *testing.T) {
	checkTunnel(t, runMIPv6(t, "mipv6", "tcp", 0))
}

func TestE2EMIPv6RouteOptimisedUDP(t *testing.T) {
	checkRouteOptimised(t, runMIPv6(t, "mipv6-ro", "udp-hd", 0))
}

func TestE2EMIPv6RouteOptimisedTCP(t *testing.T) {
	checkRouteOptimised(t, runMIPv6(t, "mipv6-ro", "tcp", 0))
}

// The explicit T_HA knob comes on top of DAD: with 300 ms added at the HA the handoff takes
// DAD + T_HA and the session still survives.
func TestE2EMIPv6SlowHomeAgent(t *testing.T) {
	r := runMIPv6(t, "mipv6", "udp-voip", 300*time.Millisecond)
	if d := *r.run.HandoffDelayMs; d < 1300 || d > 1300+r.meta.RTTL3ms+50 {
		t.Errorf("handoff delay %.2f ms with DAD 1 s and T_HA 300 ms, want within [1300, 1300 + RTT + 50 ms]", d)
	}
	var mj struct {
		THAms float64 `json:"t_ha_ms"`
		DADms float64 `json:"dad_timeout_ms"`
	}
	b, err := os.ReadFile(filepath.Join(r.dir, "mipv6.json"))
	if err != nil || json.Unmarshal(b, &mj) != nil || mj.THAms != 300 || mj.DADms != 1000 {
		t.Errorf("mipv6.json does not record T_HA 300 ms and DAD 1 s: %s %v", b, err)
	}
}

// Cancelling a mipv6-ro run (Ctrl-C) stops the three daemons with the testbed: no namespace,
// /etc/netns entry or mip6d of the run is left.
func TestE2EMIPv6CancelTearsDown(t *testing.T) {
	requireLab(t)
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := BuildMip6d(root, bin); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Second)
	defer cancel()
	_, err = Run(ctx, RunConfig{Scenario: "lan-lan", Mode: "mipv6-ro", Traffic: "udp-voip", Profile: testProfile, Reps: 1, Out: out, BinDir: bin})
	if err == nil {
		t.Fatal("run finished despite the cancel")
	}
	if _, serr := os.Stat(filepath.Join(out, "rep-1", "mn-events.jsonl")); serr != nil {
		t.Fatalf("cancelled before the daemons started (%v): %v", err, serr)
	}
	leftovers(t, out)
	ps, _ := exec.Command("ps", "-eo", "args").Output()
	if strings.Contains(string(ps), filepath.Join(out, "rep-1")) {
		t.Errorf("processes of the run still alive:\n%s", ps)
	}
}

// The double jump with route optimisation (issue 13): the CN is a mobile node too (home link
// L4 behind its home agent R4) and both leave their home links at once. Each home
// registration waits its home agent's DAD, in parallel, so the first packets between the new
// care-of addresses come through both tunnels after about one DAD: recovery_ms lies between
// the DAD and the later of the two BAcks plus a path RTT. Then each route-optimises with the
// other through the other's home agent, and in the end every data packet carries both the type
// 2 RH and the Home Address option, care-of address to care-of address.
func TestE2EMIPv6DoubleJumpRouteOptimised(t *testing.T) {
	r := runMIPv6Config(t, RunConfig{Scenario: "lan-lan", Mode: "mipv6-ro", Traffic: "udp-hd", DoubleJump: true}, 0)
	if r.run.RecoveryMs == nil {
		t.Fatalf("no recovery_ms: no flow packet from the peer on the new care-of addresses both ways: %s", describe(r.run))
	}
	if len(r.meta.Moves) != 4 || r.meta.MovesApartMs == nil {
		t.Fatalf("run.json does not record the double jump: %+v", r.meta)
	}
	var leave int64 // the later move at --leave, on the timeline's clock
	for _, m := range r.meta.Moves {
		if m.State == "down" {
			leave = max(leave, r.meta.T0MonoNS+int64(m.AtS*1e9))
		}
	}
	ms := func(ns int64) float64 { return float64(ns-leave) / 1e6 }
	backMN := ms(r.event(t, "mn-events.jsonl", timeline.BAckReceived, "home registration: accepted").MonoNS)
	backCN := ms(r.event(t, "cn-events.jsonl", timeline.BAckReceived, "home registration: accepted").MonoNS)
	rec, dad := *r.run.RecoveryMs, float64(binding.DefaultDADTimeout)/1e6
	upper := max(backMN, backCN) + r.meta.RTTL3ms + 25
	t.Logf("MEASURED moves at --leave %.3f ms apart; home BAcks after %.1f (MN) and %.1f (CN) ms; recovery %.1f ms (theory: [%.0f, %.1f])",
		*r.meta.MovesApartMs, backMN, backCN, rec, dad, upper)
	if rec < dad || rec > upper {
		t.Errorf("recovery %.1f ms outside [DAD %.0f ms, later home BAck %.1f ms + RTT %.2f ms + 25 ms]", rec, dad, max(backMN, backCN), r.meta.RTTL3ms)
	}
	roMN := r.wallOf(r.event(t, "mn-events.jsonl", daemon.KindBinding, "route optimisation on").MonoNS)
	roCN := r.wallOf(r.event(t, "cn-events.jsonl", daemon.KindBinding, "route optimisation on").MonoNS)
	coaMN, coaCN := Addr(L3, MNNID).String(), Addr(L5, CNNID).String()
	var up, down, tunnelled int
	for _, p := range r.r1r3(t) {
		if p.t < max(roMN, roCN)+0.1 || !p.data {
			continue
		}
		switch {
		case strings.HasPrefix(p.nxt, "41"):
			tunnelled++
		case p.src == coaMN && p.dst == coaCN && p.rh2 == "2" && p.hao == hoaText:
			up++
		case p.src == coaCN && p.dst == coaMN && p.rh2 == "2" && p.hao == CNHomeAddress().String():
			down++
		}
	}
	t.Logf("R1-R3 after both route optimisations: %d MN -> CN and %d CN -> MN data packets with RH2 and HAO, %d tunnelled", up, down, tunnelled)
	if up < 20 || down < 20 || tunnelled != 0 {
		t.Errorf("after both ROs: %d MN -> CN and %d CN -> MN data packets with both headers (want > 20 each), %d tunnelled (want 0)", up, down, tunnelled)
	}
}
