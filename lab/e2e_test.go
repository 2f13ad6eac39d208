package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/lab/summary"
)

// testProfile is shorter than "quick": enough for a move and a second of flow after it.
var testProfile = Profile{"test", 9 * time.Second, 2 * time.Second, 5 * time.Second, 300 * time.Millisecond, 600 * time.Millisecond}

func requireLab(t *testing.T) {
	t.Helper()
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "radvd", "iperf3", "tcpdump", "ethtool", "ss", "getent")
}

// runLab does one repetition and checks the summary file against the contract.
func runLab(t *testing.T, scenario, mode, traffic, binDir string) summary.Run {
	r, _ := runLabMeta(t, scenario, mode, traffic, binDir)
	return r
}

func runLabMeta(t *testing.T, scenario, mode, traffic, binDir string) (summary.Run, RunMeta) {
	t.Helper()
	return runLabConfig(t, RunConfig{Scenario: scenario, Mode: mode, Traffic: traffic, BinDir: binDir})
}

// runLabConfig does one repetition of cfg in the test profile (Profile, Reps and Out are set
// here) and checks the summary file against the contract.
func runLabConfig(t *testing.T, cfg RunConfig) (summary.Run, RunMeta) {
	t.Helper()
	out := t.TempDir()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// The evidence a failure needs, before the directory goes away.
		for _, f := range []string{"mn-events.jsonl", "cn-events.jsonl", "lab-events.jsonl", "run.json"} {
			b, err := os.ReadFile(filepath.Join(out, "rep-1", f))
			if err != nil {
				continue
			}
			var keep []string
			for _, line := range strings.Split(string(b), "\n") {
				if !strings.Contains(line, `"ra_seen"`) {
					keep = append(keep, line)
				}
			}
			t.Logf("%s:\n%s", f, strings.Join(keep, "\n"))
		}
	})
	cfg.Profile, cfg.Reps, cfg.Out = testProfile, 1, out
	s, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := summary.Read(filepath.Join(out, "summary.json")); err != nil {
		t.Fatalf("summary.json breaks the contract: %v", err)
	}
	for _, f := range []string{"report.md", "rate.png", "seq.png", "rep-1/rate.png", "rep-1/seq.png", "rep-1/mn.pcap", "rep-1/cn.pcap"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	t.Logf("%s %s %s: %s", cfg.Scenario, cfg.Mode, cfg.Traffic, describe(s.Runs[0]))
	return s.Runs[0], leftovers(t, out)
}

func describe(r summary.Run) string {
	var out string
	for _, f := range summary.Fields {
		out += f.Key + "=" + Fmt(r.Values()[f.Key], f.Key) + " "
	}
	return out
}

// explainFailure registers, for a run writing into out (a t.TempDir, removed after this runs),
// what a failing test prints of its first repetition: the measurement's notes, its files and
// their sizes, iperf3's error and the tail of every log (the traffic tools', the daemons'), so
// that a failure seen once in CI says why.
func explainFailure(t *testing.T, out string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		rep := filepath.Join(out, "rep-1")
		if r, err := loadResult(filepath.Join(rep, "result.json")); err == nil {
			t.Logf("result.json notes: %q", r.Notes)
		}
		if entries, err := os.ReadDir(rep); err == nil {
			var files []string
			for _, e := range entries {
				if info, err := e.Info(); err == nil {
					files = append(files, fmt.Sprintf("%s %d", e.Name(), info.Size()))
				}
			}
			t.Logf("%s: %s", rep, strings.Join(files, ", "))
		}
		iperfs, _ := filepath.Glob(filepath.Join(rep, "iperf-*.json"))
		for _, f := range iperfs {
			var r struct{ Error string }
			if b, err := os.ReadFile(f); err == nil && json.Unmarshal(b, &r) == nil && r.Error != "" {
				t.Logf("%s: iperf3 error %q", filepath.Base(f), r.Error)
			}
		}
		logs, _ := filepath.Glob(filepath.Join(rep, "*.log"))
		for _, l := range logs {
			t.Logf("--- %s (tail) ---\n%s", filepath.Base(l), tail(l, 12))
		}
	})
}

// leftovers fails the test if the run left its namespaces or /etc/netns entries behind.
func leftovers(t *testing.T, out string) RunMeta {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "rep-1", "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var meta RunMeta
	if err := json.Unmarshal(b, &meta); err != nil || meta.Namespaces == "" {
		t.Fatalf("run.json: %v %q", err, meta.Namespaces)
	}
	for _, dir := range []string{"/run/netns/", "/etc/netns/"} {
		if m, _ := filepath.Glob(dir + meta.Namespaces); len(m) > 0 {
			t.Errorf("left behind: %v", m)
		}
	}
	return meta
}

// Plain IPv6 is the control: bound to the L2 address, the session dies when the MN leaves L2.
// This proves the experiment can fail.
func TestE2EIPv6SessionBreaks(t *testing.T) {
	requireLab(t)
	r := runLab(t, "lan-lan", "ipv6", "udp-hd", "")
	if r.SessionSurvived == nil || *r.SessionSurvived {
		t.Errorf("plain IPv6 session survived the move: %s", describe(r))
	}
	if r.UDPLost == nil || *r.UDPLost == 0 {
		t.Errorf("no UDP loss after leaving L2: %s", describe(r))
	}
	if r.InterruptionMs == nil || *r.InterruptionMs < 3000 {
		t.Errorf("interruption %v, want >= 3 s (leave at 5 s, end at 9 s)", r.InterruptionMs)
	}
	if r.HandoffDelayMs != nil || r.LUSent != nil {
		t.Errorf("handoff figures in a mode without handoff signalling")
	}
}

var (
	ilnpOnce sync.Once
	ilnpBin  string
	ilnpErr  error
)

// ilnpBinaries builds ilnpd and ilnpctl once, or skips while the daemon does not build yet.
func ilnpBinaries(t *testing.T) string {
	t.Helper()
	ilnpOnce.Do(func() {
		root, err := ModuleRoot()
		if err != nil {
			ilnpErr = err
			return
		}
		dir, err := os.MkdirTemp("", "ilnp-lab-bin-")
		if err != nil {
			ilnpErr = err
			return
		}
		ilnpBin, ilnpErr = dir, BuildBinaries(root, dir)
	})
	if ilnpErr != nil {
		msg := ilnpErr.Error()
		if lines := strings.SplitN(msg, "\n", 4); len(lines) > 3 {
			msg = strings.Join(lines[:3], "\n") + "\n..."
		}
		t.Fatalf("ilnpd/ilnpctl do not build (go build ./cmd/ilnpd ./cmd/ilnpctl): %s", msg)
	}
	return ilnpBin
}

// ILNP soft handoff keeps a bidirectional UDP flow whole: no datagram lost, session alive,
// and on a LAN the handoff (LU -> LU-ACK) takes about one RTT: within [RTT, RTT + 50 ms].
func TestE2EILNPSoftUDP(t *testing.T) {
	requireLab(t)
	bin := ilnpBinaries(t)
	r, meta := runLabMeta(t, "lan-lan", "ilnp-soft", "udp-hd", bin)
	if r.SessionSurvived == nil || !*r.SessionSurvived {
		t.Errorf("session did not survive: %s", describe(r))
	}
	if r.UDPLost == nil || *r.UDPLost != 0 {
		t.Errorf("UDP lost %s, want 0 with soft handoff", Fmt(r.Values()["udp_lost"], "udp_lost"))
	}
	if r.HandoffDelayMs == nil || r.RTTms == nil {
		t.Fatalf("no handoff delay or RTT measured: %s", describe(r))
	}
	// RTT: the fastest echo via L3 (the path's RTT without queueing), with 0.5 ms for the
	// daemon stamping its events in user space while ping uses kernel receive stamps.
	if d, rtt := *r.HandoffDelayMs, meta.RTTL3MinMs; d < rtt-0.5 || d > rtt+50 {
		t.Errorf("handoff delay %.2f ms outside [RTT, RTT+50 ms] = [%.2f, %.2f] (mean RTT %.2f)", d, rtt, rtt+50, *r.RTTms)
	}
}

func TestE2EILNPSoftTCP(t *testing.T) {
	requireLab(t)
	r := runLab(t, "lan-lan", "ilnp-soft", "tcp", ilnpBinaries(t))
	if r.SessionSurvived == nil || !*r.SessionSurvived {
		t.Errorf("TCP session did not survive soft handoff: %s", describe(r))
	}
}

func TestE2EILNPHardTCP(t *testing.T) {
	requireLab(t)
	r := runLab(t, "lan-lan", "ilnp-hard", "tcp", ilnpBinaries(t))
	if r.SessionSurvived == nil || !*r.SessionSurvived {
		t.Errorf("TCP session did not survive hard handoff: %s", describe(r))
	}
}

// The double jump (issue 13): the CN moves L4 -> L5 at the MN's instant. In soft mode the old
// locators keep receiving, so the crossing LUs arrive: the bidirectional UDP flow loses nothing
// and both directions reach the new locators (recovery_ms measured).
func TestE2EDoubleJumpSoftUDP(t *testing.T) {
	requireLab(t)
	r, meta := runLabConfig(t, RunConfig{Scenario: "lan-lan", Mode: "ilnp-soft", Traffic: "udp-hd",
		BinDir: ilnpBinaries(t), DoubleJump: true})
	if r.SessionSurvived == nil || !*r.SessionSurvived {
		t.Errorf("session did not survive the double jump: %s", describe(r))
	}
	if r.UDPLost == nil || *r.UDPLost != 0 {
		t.Errorf("UDP lost %s, want 0 in a soft double jump", Fmt(r.Values()["udp_lost"], "udp_lost"))
	}
	if r.RecoveryMs == nil {
		t.Errorf("no recovery_ms: no flow packet between the new locators both ways: %s", describe(r))
	}
	if !meta.DoubleJump || len(meta.Moves) != 4 || meta.MovesApartMs == nil {
		t.Fatalf("run.json does not record the double jump: %+v", meta)
	}
	t.Logf("MEASURED moves at --enter %.3f ms apart, recovery %s", *meta.MovesApartMs, Fmt(r.RecoveryMs, "recovery_ms"))
}

// Cancelling a run (what Ctrl-C does) tears the testbed down: no namespace, /etc/netns entry
// or process of the run is left.
func TestE2ECancelTearsDown(t *testing.T) {
	requireLab(t)
	out := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Cancel a second into the flow, with every process of the run going.
	go func() {
		for ctx.Err() == nil {
			if b, _ := os.ReadFile(filepath.Join(out, "rep-1", "lab-events.jsonl")); strings.Contains(string(b), "lab_flow_start") {
				time.Sleep(time.Second)
				cancel()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	_, err := Run(ctx, RunConfig{Scenario: "lan-wan", Mode: "ipv6", Traffic: "tcp", Profile: testProfile, Reps: 1, Out: out})
	if err == nil {
		t.Fatal("run finished despite the cancel")
	}
	meta := leftovers(t, out)
	if meta.Error == "" {
		t.Error("run.json does not record the interruption")
	}
	ps, _ := exec.Command("ps", "-eo", "args").Output()
	if strings.Contains(string(ps), filepath.Join(out, "rep-1")) {
		t.Errorf("processes of the run still alive:\n%s", ps)
	}
}
