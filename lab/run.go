package lab

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"ilnp/internal/ilcc"
	"ilnp/internal/timeline"
	"ilnp/lab/cwnd"
	"ilnp/lab/measure"
	"ilnp/lab/netns"
	"ilnp/lab/pcap"
	"ilnp/lab/plots"
	"ilnp/lab/summary"
	"ilnp/lab/window"
)

// Profile is a movement timing: the thesis's 30-s flows, or a scaled-down one for tests.
type Profile struct {
	Name                   string
	Duration, Enter, Leave time.Duration
	RAMin, RAMax           time.Duration
}

// Profiles by name.
var Profiles = map[string]Profile{
	"thesis": {"thesis", 30 * time.Second, 5 * time.Second, 20 * time.Second, time.Second, 2 * time.Second},
	"quick":  {"quick", 12 * time.Second, 3 * time.Second, 8 * time.Second, 500 * time.Millisecond, time.Second},
}

// RunConfig is one `ilnp-lab run`.
type RunConfig struct {
	Scenario string
	Mode     string
	Traffic  string
	Profile  Profile
	Reps     int
	Access   string // shape of the MN's access links (default wlan)
	// AccessR2, AccessR3: one access link's shape each (empty: Access; lab/access.go).
	AccessR2, AccessR3 string
	// Cycle repeats the move every Cycle after Enter, back and forth (thesis 3.3; cycle.go).
	Cycle time.Duration
	// Rendezvous is how the CN finds the MN in ILNP modes: "hosts" or "dns" (lab/dns.go);
	// empty: DefaultRendezvous.
	Rendezvous string
	// Congestion is the TCP congestion control (cubic, hybla, veno, bbr; empty: the traffic's).
	Congestion string
	// TCPAware runs ilnpd with `tcp-aware on` (issue 15; ILNP modes only, ignored by others).
	TCPAware bool
	// DoubleJump gives the CN two access networks and moves it at Enter and Leave too
	// (lab/doublejump.go); runs gain recovery_ms.
	DoubleJump bool
	// Multihome keeps both of the MN's access links up for the whole run instead of moving
	// (issue 16; ilnp-soft); Fails are the failures injected then (multihome.go); Policy is
	// ilnpd's handoff policy on both nodes (empty: the daemon's default, newest).
	Multihome bool
	Fails     []Fail
	Policy    string
	// Families is the address family of the MN's two access networks (issue 14,
	// lab/families.go; empty: ipv6-ipv6, today's testbed). Runs gain handover_ms.
	Families Families
	Out      string
	BinDir   string    // ilnpd/ilnpctl (ILNP modes)
	Progress io.Writer // progress line (nil: none)
	// BeforeFlow runs once the mode is set up, before captures and traffic start (e.g. a
	// signalling-loss rule in R1); AfterFlow once the flow ended, before teardown.
	BeforeFlow func(ctx context.Context, t *Topology, dir string) error
	AfterFlow  func(t *Topology, dir string)

	// RealPaths are smaller MTUs and Destination Options filters on R1's links (issue 24,
	// lab/realpaths.go); runs gain pmtu_errors_translated and path_encapsulated.
	RealPaths RealPaths
}

// Validate checks names and timings.
func (c *RunConfig) Validate() error {
	if _, ok := Scenarios[c.Scenario]; !ok {
		return fmt.Errorf("unknown scenario %q (want one of %s)", c.Scenario, strings.Join(ScenarioNames, ", "))
	}
	if _, ok := Modes[c.Mode]; !ok {
		return fmt.Errorf("unknown mode %q (want one of %s)", c.Mode, strings.Join(ModeNames(), ", "))
	}
	if _, ok := Traffics[c.Traffic]; !ok {
		return fmt.Errorf("unknown traffic %q (want one of %s)", c.Traffic, strings.Join(TrafficNames(), ", "))
	}
	if err := c.validCongestion(); err != nil {
		return err
	}
	p := c.Profile
	if p.Duration <= 0 || p.Enter <= 0 || p.Leave <= p.Enter || p.Duration <= p.Leave {
		return fmt.Errorf("timing must satisfy 0 < enter (%v) < leave (%v) < duration (%v)", p.Enter, p.Leave, p.Duration)
	}
	if p.Duration%time.Second != 0 {
		return fmt.Errorf("duration must be whole seconds (iperf3 -t), got %v", p.Duration)
	}
	if c.Reps < 1 {
		return fmt.Errorf("reps must be at least 1")
	}
	if err := ValidRendezvous(cmp.Or(c.Rendezvous, DefaultRendezvous)); err != nil {
		return err
	}
	ilnp := strings.HasPrefix(c.Mode, "ilnp-")
	if len(c.Fails) > 0 && !c.Multihome {
		return fmt.Errorf("--fail needs --multihome")
	}
	if c.Multihome && c.DoubleJump {
		return fmt.Errorf("--multihome and --double-jump exclude each other (a multihomed MN does not move)")
	}
	if c.Multihome && !MultihomeModes[c.Mode] {
		// Hard handoff ages every locator but the active one: nothing to fail over to.
		return fmt.Errorf("--multihome needs ilnp-soft, mptcp or wireguard (hard handoff keeps only the active locator usable), not %s", c.Mode)
	}
	if err := validFails(c.Fails, p.Duration); err != nil {
		return err
	}
	if c.Policy != "" {
		if !ilnp {
			return fmt.Errorf("--policy needs an ILNP mode, not %s", c.Mode)
		}
		if _, err := ilcc.PolicyByName(c.Policy); err != nil {
			return err
		}
	}
	if c.Out == "" {
		return fmt.Errorf("--out is required")
	}
	if err := c.RealPaths.Validate(); err != nil {
		return err
	}
	if err := c.validFamilies(); err != nil {
		return err
	}
	if err := c.validAccess(); err != nil {
		return err
	}
	if err := c.validCycle(); err != nil {
		return err
	}
	if c.DoubleJump && !DoubleJumpModes[c.Mode] {
		return fmt.Errorf("--double-jump: mode %s cannot move the CN (not tried with two RA-configured CN interfaces; double-jump modes: %s)",
			c.Mode, strings.Join(doubleJumpModeNames(), ", "))
	}
	return peerTrafficError(c.Mode, c.Traffic)
}

// RunMeta is written next to each repetition's captures (rep-N/run.json).
type RunMeta struct {
	Scenario   string  `json:"scenario"`
	Mode       string  `json:"mode"`
	Traffic    string  `json:"traffic"`
	Profile    string  `json:"profile"`
	Rep        int     `json:"rep"`
	Namespaces string  `json:"namespaces"`
	T0MonoNS   int64   `json:"t0_mono_ns"`
	T0UnixNS   int64   `json:"t0_unix_ns"`
	EnterS     float64 `json:"enter_s"`
	LeaveS     float64 `json:"leave_s"`
	DurationS  float64 `json:"duration_s"`
	EnterAtS   float64 `json:"enter_at_s"` // when the lab actually did it
	LeaveAtS   float64 `json:"leave_at_s"`
	ClientOK   bool    `json:"client_ok"`
	RTTL2ms    float64 `json:"rtt_l2_ms"` // before the flow, via the starting network
	RTTL3ms    float64 `json:"rtt_l3_ms"` // after it, via the network moved to (= rtt_ms)
	RTTL3MinMs float64 `json:"rtt_l3_min_ms"`
	// Rendezvous is how the CN found the MN (hosts, dns, n/a); DNS its figures (lab/dns.go).
	Rendezvous string      `json:"rendezvous"`
	DNS        *DNSMeasure `json:"dns,omitempty"`
	Congestion string      `json:"congestion,omitempty"` // TCP congestion control (iperf3 -C)
	TCPAware   bool        `json:"tcp_aware"`            // ilnpd ran with tcp-aware on
	// DoubleJump: the CN moved too (L4 -> L5); Moves are the lab's link changes (seconds
	// since the flow started), MovesApartMs how far apart the two recovery_ms runs from were
	// done (at --enter; MIPv6, which moves when the home link goes: at --leave).
	DoubleJump   bool       `json:"double_jump,omitempty"`
	Moves        []MoveMeta `json:"moves,omitempty"`
	MovesApartMs *float64   `json:"moves_apart_ms,omitempty"`
	// Multihomed runs (issue 16): the failures as given, when each took effect (seconds
	// since the flow started), and the policy.
	Multihome bool      `json:"multihome,omitempty"`
	Policy    string    `json:"policy,omitempty"`
	Fails     []string  `json:"fails,omitempty"`
	FailedAtS []float64 `json:"failed_at_s,omitempty"`
	// Families is the testbed's access network families (issue 14); LeaseAtS when the lab
	// installed the MN's IPv4 lease on L3 (seconds since the flow started; IPv4 L3 only).
	Families string   `json:"families,omitempty"`
	LeaseAtS *float64 `json:"lease_at_s,omitempty"`
	// PathMTU and DropExthdr are the run's real paths (issue 24) as given.
	PathMTU    map[string]int `json:"path_mtu,omitempty"`
	DropExthdr []string       `json:"drop_exthdr,omitempty"`
	Error      string         `json:"error,omitempty"`
}

// Run performs cfg.Reps repetitions and writes summary.json, report.md and plots to cfg.Out.
func Run(ctx context.Context, cfg RunConfig) (summary.Summary, error) {
	if err := cfg.Validate(); err != nil {
		return summary.Summary{}, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return summary.Summary{}, err
	}
	var runs []summary.Run
	var results []measure.Result
	for rep := 1; rep <= cfg.Reps; rep++ {
		if err := ctx.Err(); err != nil {
			return summary.Summary{}, err
		}
		res, err := runOnce(ctx, cfg, rep)
		if err != nil {
			return summary.Summary{}, fmt.Errorf("%s %s %s rep %d: %w", cfg.Scenario, cfg.Mode, cfg.Traffic, rep, err)
		}
		runs = append(runs, res.Run)
		results = append(results, res)
	}
	s := summary.New(cfg.Scenario, cfg.Mode, cfg.Traffic, runs)
	s.Congestion = cfg.congestion()
	s.TCPAware = cfg.tcpAware()
	if err := s.Write(filepath.Join(cfg.Out, "summary.json")); err != nil {
		return s, err
	}
	if err := overlayPlots(cfg, results); err != nil {
		return s, err
	}
	report := RunReport(cfg, s, results)
	if effectiveRendezvous(cfg) == RendezvousDNS {
		report += DNSReport(cfg.Out, cfg.Reps)
	}
	return s, os.WriteFile(filepath.Join(cfg.Out, "report.md"), []byte(report), 0o644)
}

func runOnce(ctx context.Context, cfg RunConfig, rep int) (res measure.Result, err error) {
	dir, err := filepath.Abs(filepath.Join(cfg.Out, fmt.Sprintf("rep-%d", rep)))
	if err != nil {
		return res, err
	}
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	tr := Traffics[cfg.Traffic]
	tr.Congestion = cfg.congestion()
	prof := cfg.Profile
	tty := isTerminal(cfg.Progress)
	progress := func(format string, a ...any) {
		if cfg.Progress == nil {
			return
		}
		line := fmt.Sprintf("[%s %s %s rep %d/%d] ", cfg.Scenario, cfg.Mode, cfg.Traffic, rep, cfg.Reps) + fmt.Sprintf(format, a...)
		if tty {
			// One line, rewritten in place.
			fmt.Fprint(cfg.Progress, "\r\033[K"+line)
		} else {
			fmt.Fprintln(cfg.Progress, line)
		}
	}
	defer func() {
		if cfg.Progress != nil && tty {
			fmt.Fprintln(cfg.Progress)
		}
	}()
	progress("building testbed")
	rendezvous := effectiveRendezvous(cfg)
	topo, err := Build(ctx, TopologyConfig{Scenario: Scenarios[cfg.Scenario], Access: cfg.Access, AccessR2: cfg.AccessR2, AccessR3: cfg.AccessR3,
		RAMin: prof.RAMin, RAMax: prof.RAMax, Dir: dir, Rendezvous: rendezvous, DoubleJump: cfg.DoubleJump,
		Families: cfg.Families})
	if err != nil {
		return res, err
	}
	if !tr.UDP {
		if err := topo.ClampWindow(window.ThesisBytes); err != nil {
			topo.Close()
			return res, err
		}
	}
	meta := RunMeta{Scenario: cfg.Scenario, Mode: cfg.Mode, Traffic: cfg.Traffic, Profile: prof.Name, Rep: rep,
		Namespaces: "ilab-" + topo.ID + "-*", EnterS: prof.Enter.Seconds(), LeaveS: prof.Leave.Seconds(), DurationS: prof.Duration.Seconds(),
		Rendezvous: rendezvous, Congestion: tr.Congestion, TCPAware: cfg.tcpAware(), DoubleJump: cfg.DoubleJump}
	meta.Multihome, meta.Policy = cfg.Multihome, cfg.Policy
	if cfg.Families.Cross() {
		meta.Families = string(cfg.Families)
	}
	for _, f := range cfg.Fails {
		meta.Fails = append(meta.Fails, f.String())
	}
	meta.PathMTU, meta.DropExthdr = cfg.RealPaths.MTU, cfg.RealPaths.DropExthdr
	mode := Modes[cfg.Mode](ModeOptions{BinDir: cfg.BinDir, Dir: dir, Rendezvous: rendezvous, TCPAware: cfg.tcpAware(), Policy: cfg.Policy,
		Multihome: cfg.Multihome})
	defer func() {
		if tErr := mode.Teardown(topo); tErr != nil {
			err = errors.Join(err, tErr)
		}
		if cErr := topo.Close(); cErr != nil {
			err = errors.Join(err, cErr)
		}
		if err != nil {
			meta.Error = err.Error()
		}
		writeJSON(filepath.Join(dir, "run.json"), meta)
	}()
	if cfg.Multihome {
		if err := topo.multihomeBefore(ctx); err != nil {
			return res, err
		}
	}
	progress("starting %s", mode.Name())
	if err := mode.Setup(ctx, topo); err != nil {
		return res, err
	}
	if cfg.Multihome {
		progress("multihoming: both access links up")
		if err := topo.multihomeAfter(ctx); err != nil {
			return res, err
		}
		if err := multihomeUp(ctx, mode, topo); err != nil {
			return res, err
		}
	}
	if err := topo.applyRealPaths(cfg.RealPaths); err != nil {
		return res, err
	}
	if cfg.BeforeFlow != nil {
		if err := cfg.BeforeFlow(ctx, topo, dir); err != nil {
			return res, err
		}
	}
	stopCC, err := startCongestion(tr.Congestion, dir)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, stopCC()) }()

	var singleLink *float64
	if cfg.Policy == "multipath" && !tr.UDP {
		progress("single-link phase: %s for %d s on one locator pair", cfg.Traffic, singleLinkSeconds)
		if singleLink, err = singleLinkGoodput(ctx, topo, mode, tr, dir); err != nil {
			return res, err
		}
	}

	// The CN's spurious-retransmission count before the flow (a multipath run's single-link
	// phase already sent): reordering_retransmissions is the flow's own.
	dsackBase := 0
	if out, err := topo.CN.Run("nstat", "-az"); err == nil {
		dsackBase, _ = NstatValue(out, "TcpExtTCPDSACKRecv")
	}

	progress("measuring RTT via L2")
	if pr, err := topo.Ping(topo.MN, topo.rttTarget(false), 10, 100*time.Millisecond, 2*time.Second); err != nil {
		return res, err
	} else if len(pr.RTTs) > 0 {
		meta.RTTL2ms = pr.MeanMS()
	}

	// Captures at both ends (the thesis's tcpdump at the MN and the CN).
	cnIf, cnFilter := IfCN, "ip6"
	if cfg.DoubleJump {
		cnIf, cnFilter = "any", "ip6 and not host ::1" // both access links
	}
	mnFilter, cnFilter := captureFilters(cfg.Families, "ip6 and not host ::1", cnFilter)
	mnCap, err := topo.Start(topo.MN, "tcpdump-mn", "tcpdump", "-i", "any", "-n", "-U", "--immediate-mode", "-s", "200", "-Z", "root",
		"-w", filepath.Join(dir, "mn.pcap"), mnFilter)
	if err != nil {
		return res, err
	}
	cnCap, err := topo.Start(topo.CN, "tcpdump-cn", "tcpdump", "-i", cnIf, "-n", "-U", "--immediate-mode", "-s", "200", "-Z", "root",
		"-w", filepath.Join(dir, "cn.pcap"), cnFilter)
	if err != nil {
		return res, err
	}
	for _, c := range []*Proc{mnCap, cnCap} {
		if err := waitLog(ctx, c, "listening on", 5*time.Second); err != nil {
			return res, err
		}
	}
	server, err := topo.Start(topo.MN, "iperf3-server", wrapApp(mode, tr.ServerArgs(filepath.Join(dir, "iperf-server.json")))...)
	if err != nil {
		return res, err
	}
	if err := waitListening(ctx, topo, 5201, 5*time.Second); err != nil {
		return res, fmt.Errorf("iperf3 server: %w: %s", err, server.Log())
	}

	var poll *dnsPoll
	if topo.Named != nil {
		if poll, err = topo.startDNSPoll(ctx); err != nil {
			return res, err
		}
		defer poll.finish()
	}
	lab, err := os.Create(filepath.Join(dir, "lab-events.jsonl"))
	if err != nil {
		return res, err
	}
	defer lab.Close()
	events := timeline.NewWriter(lab)
	t0Mono, t0Wall := timeline.Now(), time.Now()
	meta.T0MonoNS, meta.T0UnixNS = t0Mono, t0Wall.UnixNano()
	events.Emit(timeline.Event{MonoNS: t0Mono, Kind: "lab_flow_start", Node: "lab", Detail: cfg.Traffic})
	cargs := tr.ClientArgs(mode.Target(topo), prof.Duration, filepath.Join(dir, "iperf-client.json"))
	client, err := topo.Start(topo.CN, "iperf3-client", wrapApp(mode, cargs)...)
	if err != nil {
		return res, err
	}
	// The TCP sender's congestion window over the flow (issue 15's cwnd plots); a run does not
	// depend on it.
	var sampler *cwnd.Sampler
	var cwndNote string
	if !tr.UDP {
		sender := topo.CN
		if tr.Reverse {
			sender = topo.MN
		}
		var serr error
		if sampler, serr = cwnd.Start(ctx, sender.Do, 5201, 20*time.Millisecond); serr != nil {
			cwndNote = serr.Error()
		} else {
			defer sampler.Stop()
		}
	}

	entered, left, ticks := false, false, 0
	var enterCmdNS, leaveCmdNS int64 // just before the lab's `ip link set` (DNS figures)
	var enterMoves, leaveMoves []Move
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	hardStop := prof.Duration + 4*time.Second
	pending := slices.SortedFunc(slices.Values(cfg.Fails), func(a, b Fail) int { return cmp.Compare(a.At, b.At) })
	var failAt *float64 // the silent failure, seconds since the flow started
	if cfg.Multihome {
		entered, left = true, true // no movement
	}
	cycle := newHandoffCycle(cfg)
	for {
		el := time.Since(t0Wall)
		for len(pending) > 0 && el >= pending[0].At {
			f := pending[0]
			pending = pending[1:]
			at, err := topo.applyFail(f)
			if err != nil {
				return res, err
			}
			rel := at.Sub(t0Wall).Seconds()
			meta.FailedAtS = append(meta.FailedAtS, rel)
			if f.Kind == FailR2Silent {
				failAt = &rel
			}
			events.Emit(timeline.Event{Kind: "lab_fail", Node: "lab", Detail: f.String()})
		}
		if !entered && el >= prof.Enter {
			enterCmdNS = timeline.Now()
			moves, err := moveTogether(topo.enterChanges())
			if err != nil {
				return res, err
			}
			for _, m := range moves {
				events.Emit(timeline.Event{Kind: "lab_enter", Node: "lab", Iface: m.Iface})
			}
			enterMoves = moves
			meta.recordMoves(moves, t0Wall)
			meta.EnterAtS, entered = time.Since(t0Wall).Seconds(), true
			if cfg.Families.L3IPv4() {
				if err := topo.enterIPv4(); err != nil {
					return res, fmt.Errorf("IPv4 lease on L3: %w", err)
				}
				at := time.Since(t0Wall).Seconds()
				meta.LeaseAtS = &at
				events.Emit(timeline.Event{Kind: "lab_lease4", Node: "lab", Iface: IfMNR3, Detail: PlanFor(cfg.Families).L3.Host.String()})
			}
		}
		if !left && el >= prof.Leave {
			leaveCmdNS = timeline.Now()
			moves, err := moveTogether(topo.leaveChanges())
			if err != nil {
				return res, err
			}
			for _, m := range moves {
				events.Emit(timeline.Event{Kind: "lab_leave", Node: "lab", Iface: m.Iface})
			}
			leaveMoves = moves
			meta.recordMoves(moves, t0Wall)
			meta.LeaveAtS, left = time.Since(t0Wall).Seconds(), true
		}
		if cycle != nil && left {
			if err := cycle.step(topo, el, &meta, events); err != nil {
				return res, err
			}
		}
		phase := "in L2"
		switch {
		case cfg.Multihome:
			phase = "multihomed"
			if failAt != nil {
				phase += ", R1-R2 silent"
			}
		case left:
			phase = "in L3 (left L2)"
		case entered:
			phase = "overlap L2+L3"
		}
		// Twice a second on a terminal; every 5 s into a log.
		if ticks++; (tty && ticks%5 == 1) || ticks%50 == 1 {
			progress("%4.1f / %.0f s  %s", el.Seconds(), prof.Duration.Seconds(), phase)
		}
		if done, cerr := client.Exited(); done {
			if el < prof.Duration-time.Second {
				return res, fmt.Errorf("iperf3 client ended early after %.1f s (%v): %s", el.Seconds(), cerr, tail(filepath.Join(dir, "iperf-client.json"), 15))
			}
			meta.ClientOK = cerr == nil
			break
		}
		if el > hardStop {
			// A broken session (the ipv6 control) leaves iperf3 waiting on its control
			// connection: end it.
			client.Stop(2 * time.Second)
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
	}
	events.Emit(timeline.Event{Kind: "lab_flow_end", Node: "lab"})
	var cwndSamples []cwnd.Sample
	if sampler != nil {
		var serr error
		if cwndSamples, serr = sampler.Stop(); serr != nil {
			cwndNote = serr.Error()
		}
		writeJSON(filepath.Join(dir, "cwnd.json"), cwndSamples)
		writeJSON(filepath.Join(dir, "window.json"), topo.windowReport(cwndSamples))
	}
	progress("collecting")
	server.Stop(2 * time.Second)
	// Let the last packets reach the captures; --immediate-mode hands every packet to
	// tcpdump at once (without it, the last second sat in an unfinished TPACKET_V3 block and
	// was lost on SIGTERM, counting as UDP loss).
	time.Sleep(500 * time.Millisecond)
	mnCap.Stop(3 * time.Second)
	cnCap.Stop(3 * time.Second)
	mode.Collect(topo, dir)
	if cfg.AfterFlow != nil {
		cfg.AfterFlow(topo, dir)
	}
	// Kernel counters of the end hosts (drops by the stack do not show in a capture).
	var senderTimeouts, reorderRetrans *int
	for name, ns := range map[string]*netns.NS{"mn": topo.MN, "cn": topo.CN} {
		if out, err := ns.Run("nstat", "-az"); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "nstat-"+name+".txt"), []byte(out), 0o644)
			if name == map[bool]string{false: "cn", true: "mn"}[tr.Reverse] { // the TCP sender (CN -> MN; -R: MN -> CN)
				if v, ok := NstatValue(out, "TcpExtTCPTimeouts"); ok {
					senderTimeouts = &v
				}
				if v, ok := NstatValue(out, "TcpExtTCPDSACKRecv"); ok && !tr.UDP {
					v -= dsackBase
					reorderRetrans = &v
				}
			}
		}
	}
	// The RTT that bounds the handoff delay is the one via the network the MN moved to
	// (thesis 4.4: one RTT between MN and CN); the MN is only in L3 now.
	progress("measuring RTT via L3")
	var rtt *float64
	if pr, err := topo.Ping(topo.MN, topo.rttTarget(true), 10, 100*time.Millisecond, 2*time.Second); err == nil && len(pr.RTTs) > 0 {
		v := pr.MeanMS()
		rtt, meta.RTTL3ms = &v, v
		meta.RTTL3MinMs = float64(slices.Min(pr.RTTs)) / 1e6
	}

	// Measurement.
	progress("analysing captures")
	in := measure.Input{T0Wall: t0Wall, T0Mono: t0Mono, Enter: prof.Enter, Leave: prof.Leave, Duration: prof.Duration,
		UDP: tr.UDP, OfferedBps: tr.RateBps, RTTms: rtt, MNNID: nid64(MNNID), CNNID: nid64(CNNID), Reverse: tr.Reverse}
	if in.MN, err = readPcap(filepath.Join(dir, "mn.pcap")); err != nil {
		return res, err
	}
	if in.CN, err = readPcap(filepath.Join(dir, "cn.pcap")); err != nil {
		return res, err
	}
	if mnEv, _ := mode.Timelines(); mnEv != "" {
		if f, err := os.Open(mnEv); err == nil {
			in.MNEvents, err = timeline.Read(f)
			f.Close()
			if err != nil {
				return res, fmt.Errorf("MN timeline: %w", err)
			}
		}
	}
	in.AppLost = iperfReceiverLost(filepath.Join(dir, "iperf-server.json"))
	in.AppIntervals = iperfReceiverIntervals(filepath.Join(dir, "iperf-server.json"))
	in.HostDrops = hostDropsFrom(in.MNEvents, CNNID)
	in.SenderTimeouts = senderTimeouts
	if topo.Named != nil {
		meta.DNS = topo.collectDNS(poll, in.MNEvents, enterCmdNS, leaveCmdNS)
	}
	res = measure.Compute(in)
	adjustResult(mode, &res)
	res.Run.ReorderingRetransmissions = reorderRetrans
	if NeedsILNP(cfg.Mode) {
		res.Run.PMTUErrorsTranslated = pmtuErrorsTranslated(dir)
		res.Run.PathEncapsulated = pathEncapsulated(dir)
	}
	if cfg.Policy == "multipath" && !tr.UDP {
		res.Run.AggregateGoodputBps = iperfGoodput(filepath.Join(dir, "iperf-client.json"))
		res.Run.SingleLinkGoodputBps = singleLink
	}
	if failAt != nil {
		fo, err := failoverPackets(mode, dir, in.MN)
		if err != nil {
			return res, fmt.Errorf("failover: %w", err)
		}
		res.Run.FailoverMs = FailoverMs(fo, t0Wall, in.CNNID, in.MNNID, *failAt)
		if res.Run.FailoverMs == nil {
			res.Notes = append(res.Notes, "no CN -> MN data arrived via L3 after the silent failure")
		}
	}
	if cfg.DoubleJump {
		var from []Move
		var note string
		res.Run.RecoveryMs, from, note = doubleJumpRecovery(mode, dir, in.MN, in.CN, in.MNNID, in.CNNID, enterMoves, leaveMoves)
		meta.MovesApartMs = movesApart(from)
		if note != "" {
			res.Notes = append(res.Notes, note)
		}
	}
	if NeedsILNP(cfg.Mode) && !cfg.Multihome && !cfg.DoubleJump && len(enterMoves) > 0 {
		newLoc := PlanFor(cfg.Families).L3.Locator(L3)
		res.Run.HandoverMs = HandoverMs(in.MN, in.MNNID, in.CNNID, newLoc, enterMoves[0].At)
		if res.Run.HandoverMs == nil {
			res.Notes = append(res.Notes, fmt.Sprintf("handover: no LU from the MN after entering L3, or no CN -> MN data on %v after it", newLoc))
		}
	}
	for _, smp := range cwndSamples {
		res.Cwnd = append(res.Cwnd, measure.Point{T: float64(smp.MonoNS-t0Mono) / 1e9, V: float64(smp.Cwnd)})
	}
	if cwndNote != "" {
		res.Notes = append(res.Notes, "cwnd sampling: "+cwndNote)
	}
	for _, c := range []*Proc{mnCap, cnCap} {
		if note := captureShortfall(c.Log()); note != "" {
			res.Notes = append(res.Notes, c.Name+": "+note)
		}
	}
	writeJSON(filepath.Join(dir, "result.json"), res)
	if c := cycle.report(cfg, measureInputs{in.MN, in.CN, t0Wall, in.MNNID, in.CNNID}); c != nil {
		writeJSON(filepath.Join(dir, "cycle.json"), c)
	}
	if err := runPlots(cfg, dir, rep, res); err != nil {
		return res, err
	}
	if cfg.Multihome {
		if err := pathPlot(cfg, dir, rep, in.MN, t0Wall, meta.FailedAtS); err != nil {
			return res, err
		}
	}
	return res, nil
}

func nid64(nid string) uint64 {
	b := Addr(L1, nid).As16()
	var v uint64
	for _, x := range b[8:] {
		v = v<<8 | uint64(x)
	}
	return v
}

func readPcap(path string) ([]pcap.Packet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pkts, err := pcap.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pkts, nil
}

func writeJSON(path string, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err == nil {
		_ = os.WriteFile(path, append(b, '\n'), 0o644)
	}
}

func waitLog(ctx context.Context, p *Proc, want string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for !strings.Contains(p.Log(), want) {
		if done, err := p.Exited(); done || time.Now().After(deadline) {
			return fmt.Errorf("%s not ready (%v): %s", p.Name, err, p.Log())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func waitListening(ctx context.Context, t *Topology, port int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		out, _ := t.MN.Run("ss", "-Hltn", fmt.Sprintf("sport = :%d", port))
		if strings.TrimSpace(out) != "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listening on port %d after %v", port, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func plotMarks(r measure.Result) plots.Marks {
	m := plots.Marks{Enter: r.Enter, Leave: r.Leave, Handoff: -1, WindowStart: r.WindowStart, WindowEnd: r.WindowEnd}
	if r.HandoffAt != nil {
		m.Handoff = *r.HandoffAt
	}
	return m
}

func runPlots(cfg RunConfig, dir string, rep int, r measure.Result) error {
	title := fmt.Sprintf("%s, %s, %s (rep %d)", Scenarios[cfg.Scenario].Title, cfg.Mode, cfg.Traffic, rep)
	label := cfg.Mode
	if err := plots.Rate(filepath.Join(dir, "rate.png"), title, []plots.Series{{Label: label, Points: r.Rate}}, plotMarks(r)); err != nil {
		return err
	}
	if err := plots.Seq(filepath.Join(dir, "seq.png"), title, r.SeqUnit, []plots.Series{{Label: label, Points: r.Seq}}, plotMarks(r)); err != nil {
		return err
	}
	if len(r.Cwnd) == 0 {
		return nil
	}
	return plots.Cwnd(filepath.Join(dir, "cwnd.png"), title, []plots.Series{{Label: label, Points: r.Cwnd}}, plotMarks(r))
}

func overlayPlots(cfg RunConfig, results []measure.Result) error {
	if len(results) == 0 {
		return nil
	}
	var rate, seq, cw []plots.Series
	sampled := false
	for i, r := range results {
		rate = append(rate, plots.Series{Label: fmt.Sprintf("rep %d", i+1), Points: r.Rate})
		seq = append(seq, plots.Series{Label: fmt.Sprintf("rep %d", i+1), Points: r.Seq})
		cw = append(cw, plots.Series{Label: fmt.Sprintf("rep %d", i+1), Points: r.Cwnd})
		sampled = sampled || len(r.Cwnd) > 0
	}
	title := fmt.Sprintf("%s, %s, %s (%d reps)", Scenarios[cfg.Scenario].Title, cfg.Mode, cfg.Traffic, len(results))
	if err := plots.Rate(filepath.Join(cfg.Out, "rate.png"), title, rate, plotMarks(results[0])); err != nil {
		return err
	}
	if err := plots.Seq(filepath.Join(cfg.Out, "seq.png"), title, results[0].SeqUnit, seq, plotMarks(results[0])); err != nil {
		return err
	}
	if !sampled {
		return nil
	}
	return plots.Cwnd(filepath.Join(cfg.Out, "cwnd.png"), title, cw, plotMarks(results[0]))
}

// captureShortfall reads tcpdump's closing counters: packets the filter took but that never
// reached the file would count as losses.
func captureShortfall(log string) string {
	var captured, received, dropped int
	for _, line := range strings.Split(log, "\n") {
		var n int
		var rest string
		if _, err := fmt.Sscanf(line, "%d %s", &n, &rest); err != nil {
			continue
		}
		switch {
		case strings.Contains(line, "packets captured"):
			captured = n
		case strings.Contains(line, "received by filter"):
			received = n
		case strings.Contains(line, "dropped by kernel"):
			dropped = n
		}
	}
	if received > captured || dropped > 0 {
		return fmt.Sprintf("capture incomplete: %d captured of %d received, %d dropped by the kernel", captured, received, dropped)
	}
	return ""
}

// isTerminal says whether w is a terminal (progress rewrites one line there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// iperfReceiverLost reads the iperf3 server's (the MN's) count of lost datagrams on the
// stream it received, or nil when it wrote no report (a broken session).
func iperfReceiverLost(path string) *int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var doc struct {
		End struct {
			Streams []struct {
				UDP *struct {
					Sender      bool `json:"sender"`
					LostPackets int  `json:"lost_packets"`
				} `json:"udp"`
			} `json:"streams"`
		} `json:"end"`
	}
	if json.Unmarshal(b, &doc) != nil {
		return nil
	}
	for _, s := range doc.End.Streams {
		if s.UDP != nil && !s.UDP.Sender {
			n := s.UDP.LostPackets
			return &n
		}
	}
	return nil
}

// tcpAware says whether this run's ilnpd runs with tcp-aware on (ILNP modes only).
func (c *RunConfig) tcpAware() bool {
	return c.TCPAware && strings.HasPrefix(c.Mode, "ilnp-")
}

// NstatValue reads one counter from `nstat -az` output ("NAME VALUE RATE" lines).
func NstatValue(out, name string) (int, bool) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == name {
			v, err := strconv.Atoi(f[1])
			return v, err == nil && v >= 0
		}
	}
	return 0, false
}
