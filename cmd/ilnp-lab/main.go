// Command ilnp-lab runs the thesis's handoff experiments in network namespaces.
//
//	ilnp-lab run --scenario S --mode M --traffic T [--congestion C] [--profile thesis|quick] [--reps N]
//	             [--duration D --enter E --leave L] [--access SHAPE] [--bin DIR]
//	             [--rendezvous hosts|dns] [--tcp-aware on|off] [--double-jump]
//	             [--families ipv6-ipv6|ipv6-ipv4nat|ipv4nat-ipv6|ipv4nat-ipv4nat] --out DIR
//	ilnp-lab matrix --out DIR [--reps N] [--profile P] [--scenarios ..] [--modes ..] [--traffics ..] [--congestions ..]
//	                [--tcp-aware on|off|off,on]
//	ilnp-lab demo [--out DIR]
//	ilnp-lab analyze --out DIR
//	ilnp-lab attack --out DIR [--count 10000] [--rate 1000] [--bin DIR]
//	ilnp-lab results --out DIR [--profile P] [--reps N] [--handoffs N] [--modes ..] [--rows ..]
//	ilnp-lab soak --moves N --out DIR [--switch-every 10] [--bin DIR]
//	ilnp-lab scale --out DIR [--sessions 100000] [--lu-rate 10000] [--correspondents 1000] [--bin DIR]
//	ilnp-lab peers --out DIR [--reps 3] [--profile thesis] [--scenarios ..] [--modes ..] [--traffics ..] [--failover-scenarios lan-lan] [--report-only]
//	ilnp-lab families --out DIR [--families ..] [--modes ilnp-soft,ilnp-hard] [--traffics udp-hd,tcp] [--reps 3] [--profile quick]
//
// The link emulator runs as this same binary inside the wire namespace (ILNP_LAB_LINKEMU=1
// ilnp-lab LINK...), started by the lab itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"ilnp/lab"
	"ilnp/lab/analysis"
	"ilnp/lab/linkemu"
	"ilnp/lab/summary"
)

func main() {
	linkemu.RunIfRequested()
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	// Ctrl-C / TERM cancel the context; every run tears down namespaces, processes and
	// /etc/netns entries on the way out. A second signal kills at once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		// From now on a second signal has its default effect.
		signal.Stop(sigs)
		fmt.Fprintln(os.Stderr, "\nilnp-lab: stopping, tearing the testbed down (a second Ctrl-C abandons it)")
		cancel()
	}()
	var err error
	switch os.Args[1] {
	case "run":
		err = cmdRun(ctx, os.Args[2:])
	case "matrix":
		err = cmdMatrix(ctx, os.Args[2:])
	case "demo":
		err = cmdDemo(ctx, os.Args[2:])
	case "analyze":
		err = cmdAnalyze(os.Args[2:])
	case "signalling":
		err = cmdSignalling(ctx, os.Args[2:])
	case "results":
		err = cmdResults(ctx, os.Args[2:])
	case "soak":
		err = cmdSoak(ctx, os.Args[2:])
	case "attack":
		err = cmdAttack(ctx, os.Args[2:])
	case "families":
		err = cmdFamilies(ctx, os.Args[2:])
	case "scale":
		err = cmdScale(ctx, os.Args[2:])
	case "peers":
		err = cmdPeers(ctx, os.Args[2:])
	case "linkemu":
		os.Exit(linkemu.Main(os.Args[2:], os.Stdout, os.Stderr))
	case "-h", "--help", "help":
		usage()
		return
	default:
		usage()
		os.Exit(2)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "ilnp-lab: interrupted; testbed torn down")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "ilnp-lab:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, `usage:
  ilnp-lab run --scenario %s --mode %s --traffic %s [--congestion cubic|hybla|veno|bbr]
               [--profile thesis|quick] [--reps N] [--duration 30s --enter 5s --leave 20s]
               [--access wlan] [--access-r2 SHAPE --access-r3 SHAPE] [--cycle 9s] [--bin DIR] [--mipv6-tha 0] [--rendezvous hosts|dns] [--tcp-aware on|off]
               [--double-jump] [--families %s] --out DIR
  ilnp-lab matrix --out DIR [--reps 3] [--profile thesis] [--scenarios ...] [--modes ...] [--traffics ...] [--congestions cubic,hybla,veno]
                  [--report-only] [--signalling] [--rendezvous hosts|dns] [--tcp-aware on|off|off,on]
  ilnp-lab demo [--out lab/out/demo] [--rendezvous hosts|dns]
  ilnp-lab analyze --out DIR      (chapter 6 control-plane analysis: tables, CSV, plots)
  ilnp-lab signalling --out DIR [--parts success,delay,scale] [--handoffs 40] [--losses 0,0.02,0.05,0.1] [--loss-pairs OLD/NEW,..]
                  [--success-modes ilnp-soft,mipv6,mipv6-ro]
                  [--scenarios lan-lan,wan-wan] [--modes ilnp-hard,ilnp-soft,mipv6,mipv6-ro] [--scales 1x1,2x2,5x5,10x10]
                  (chapter 6 measured: lost LU/BU, success under loss, overhead at scale, beside the analysis)
  ilnp-lab results --out DIR [--profile thesis] [--reps 3] [--handoffs 40] [--modes ...] [--rows lan-udp,wan-tcp,success,fig4,fig5]
                  [--scenarios ...] [--quick] [--report-only]
                  (README's results table into DIR/results.md, each figure with its command, n and 95 %% interval; hours)
  ilnp-lab soak --moves N --out DIR [--switch-every 10] [--bin DIR]
                  (moves L2 <-> L3 under TCP and UDP, soft and hard; DIR/soak.json)
  ilnp-lab families --out DIR [--families ipv6-ipv6,ipv6-ipv4nat,ipv4nat-ipv6,ipv4nat-ipv4nat] [--modes ilnp-soft,ilnp-hard]
                  [--traffics udp-hd,tcp] [--scenario lan-lan] [--reps 3] [--profile quick] [--report-only] [--bin DIR]
                  (every cross-family move as a run --families; DIR/report.md beside HIP's Tables I and II)
  ilnp-lab peers --out DIR [--reps 3] [--profile thesis] [--scenarios lan-lan,lan-wan,wan-wan]
                  [--modes ilnp-soft,ilnp-hard,mipv6,mptcp,wireguard] [--traffics tcp,udp-hd] [--failover-scenarios lan-lan] [--report-only]
                  (ILNP beside MPTCP and WireGuard: DIR/peers.json, DIR/peers.md)
  ilnp-lab attack --out DIR [--count 10000] [--rate 1000] [--bin DIR]
                  (forged LUs, LU-ACKs, data, TCP RSTs and a session flood during a live flow: DIR/attack.json, report.md)
  ilnp-lab scale --out DIR [--sessions 100000] [--lu-rate 10000] [--correspondents 1000] [--lu-duration 10s] [--bin DIR]
                  (a CN with N sessions: memory, datapath ns/packet, a mass move, the MN's fan-out, a restart: DIR/scale.json, scale.md)
`, strings.Join(lab.ScenarioNames, "|"), strings.Join(lab.ModeNames(), "|"), strings.Join(lab.TrafficNames(), "|"), strings.Join(lab.FamilyNames, "|"))
}

type common struct {
	profile                string
	reps                   int
	duration, enter, leave time.Duration
	access, bin, out       string
}

func (c *common) register(fs *flag.FlagSet, reps int, profile string) {
	fs.StringVar(&c.profile, "profile", profile, "movement timing: thesis (30 s, enter 5 s, leave 20 s) or quick")
	fs.IntVar(&c.reps, "reps", reps, "repetitions")
	fs.DurationVar(&c.duration, "duration", 0, "flow duration (overrides the profile)")
	fs.DurationVar(&c.enter, "enter", 0, "when the MN's interface to R3 comes up (overrides the profile)")
	fs.DurationVar(&c.leave, "leave", 0, "when the MN's interface to R2 goes down (overrides the profile)")
	fs.StringVar(&c.access, "access", "wlan", "shape of the MN's access links (lan, wlan, wifi, 3g or key=value+...)")
	c.registerOutBin(fs)
	fs.StringVar(&lab.DefaultRendezvous, "rendezvous", lab.RendezvousHosts, "ILNP modes: how the CN finds the MN: hosts (shared hosts file) or dns (real named on R1, the MN publishes NID/L64 by RFC 2136 update)")
	fs.DurationVar(&lab.MIPv6HAProcessing, "mipv6-tha", 0, "mipv6 modes: T_HA, an extra delay at the home agent on top of its DAD of a new binding (1 s, UMIP's); default 0")
}

func (c *common) timing() (lab.Profile, error) {
	if err := lab.ValidRendezvous(lab.DefaultRendezvous); err != nil {
		return lab.Profile{}, fmt.Errorf("--rendezvous: %w", err)
	}
	p, ok := lab.Profiles[c.profile]
	if !ok {
		return p, fmt.Errorf("unknown profile %q (thesis, quick)", c.profile)
	}
	if c.duration > 0 {
		p.Duration = c.duration
	}
	if c.enter > 0 {
		p.Enter = c.enter
	}
	if c.leave > 0 {
		p.Leave = c.leave
	}
	return p, nil
}

// binaries returns a directory holding ilnpd/ilnpctl, building them when needed.
func (c *common) binaries(modes []string) (string, error) {
	need := false
	for _, m := range modes {
		need = need || lab.NeedsILNP(m)
	}
	if !need || c.bin != "" {
		return c.bin, nil
	}
	root, err := lab.ModuleRoot()
	if err != nil {
		return "", err
	}
	dir, err := filepath.Abs(filepath.Join(c.out, "bin"))
	if err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "building ilnpd and ilnpctl into %s\n", dir)
	return dir, lab.BuildBinaries(root, dir)
}

func cmdRun(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var c common
	c.register(fs, 1, "thesis")
	scenario := fs.String("scenario", "", "lan-lan, lan-wan, wan-lan or wan-wan")
	mode := fs.String("mode", "", strings.Join(lab.ModeNames(), ", "))
	traffic := fs.String("traffic", "", "udp-voip, udp-hd, tcp, tcp-r (TCP MN -> CN, iperf3 -R) or tcp-8 (8 parallel TCP flows CN -> MN)")
	congestion := fs.String("congestion", "", "TCP congestion control: cubic, hybla, veno or bbr (default: the traffic's, cubic); hybla and veno are lab/cc's BPF programs, loaded for the run")
	tcpAware := fs.String("tcp-aware", "off", "on: ilnpd's mobility-aware TCP (issue 15) in ILNP modes")
	multihome := fs.Bool("multihome", false, "ilnp-soft, mptcp, wireguard: the MN keeps both access links up for the whole run (no movement; issue 16; the peers: L2 the preferred uplink, L3 the spare)")
	policy := fs.String("policy", "", "ILNP modes: ilnpd's handoff policy on both nodes: newest (default), preference, quality or multipath")
	var fails []lab.Fail
	fs.Func("fail", "with --multihome: r2-silent@T (R1 drops everything over R1-R2 from T, no link goes down) or r2-restore@T2; repeatable", func(s string) error {
		f, err := lab.ParseFail(s)
		if err == nil {
			fails = append(fails, f)
		}
		return err
	})
	doubleJump := fs.Bool("double-jump", false, "simultaneous mobility (issue 13): the CN gets two access networks (L4 behind R4, L5 behind R5) and moves L4 -> L5 at --enter and --leave beside the MN; runs gain recovery_ms (ILNP and MIPv6 modes; in MIPv6 the CN is a mobile node with R4 its home agent)")
	var paths lab.RealPaths
	fs.Func("path-mtu", "issue 24: LINK=BYTES, the MTU of R1's link LINK (r1-r2 or r1-r3) on both routers' ends (1280-1500); repeatable; runs gain pmtu_errors_translated", func(s string) error {
		link, mtu, err := lab.ParsePathMTU(s)
		if err == nil {
			if paths.MTU == nil {
				paths.MTU = map[string]int{}
			}
			paths.MTU[link] = mtu
		}
		return err
	})
	fs.Func("drop-exthdr", "issue 24: LINK (r1-r2 or r1-r3): R1 drops forwarded packets with a Destination Options header to and from that link (nftables exthdr dst exists drop); repeatable", func(s string) error {
		paths.DropExthdr = append(paths.DropExthdr, s)
		return nil
	})
	families := fs.String("families", "", "issue 14: the MN's access networks' address families, L2-L3: ipv6-ipv6 (default, today's testbed), ipv6-ipv4nat, ipv4nat-ipv6 or ipv4nat-ipv4nat (IPv4 only behind a NAT in R2/R3; ilnp-soft and ilnp-hard only); runs gain handover_ms and report.md the table beside HIP's")
	accessR2 := fs.String("access-r2", "", "shape of the MN's access link to R2 alone (default: --access)")
	accessR3 := fs.String("access-r3", "", "shape of the MN's access link to R3 alone (default: --access)")
	cycle := fs.Duration("cycle", 0, "thesis 3.3: hand off back and forth every CYCLE after --enter, the old link down --leave minus --enter after each (e.g. --cycle 9s --enter 9s --leave 14s --duration 75s); rep-N/cycle.json")
	_ = fs.Parse(args)
	prof, err := c.timing()
	if err != nil {
		return err
	}
	fam, err := lab.ParseFamilies(*families)
	if err != nil {
		return err
	}
	if *families == "" {
		fam = "" // not asked for: no families section in the report
	}
	aware, err := onOff("tcp-aware", *tcpAware)
	if err != nil {
		return err
	}
	cfg := lab.RunConfig{Scenario: *scenario, Mode: *mode, Traffic: *traffic, Profile: prof, Reps: c.reps,
		Access: c.access, Out: c.out, Progress: os.Stderr, Congestion: *congestion, TCPAware: aware, DoubleJump: *doubleJump,
		Multihome: *multihome, Fails: fails, Policy: *policy, Families: fam, RealPaths: paths,
		AccessR2: *accessR2, AccessR3: *accessR3, Cycle: *cycle}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.BinDir, err = c.binaries([]string{cfg.Mode}); err != nil {
		return err
	}
	s, err := lab.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s, %d rep(s):\n", s.Scenario, s.Mode, s.Traffic, s.Reps)
	for _, f := range summary.Fields {
		if s.Mean.Get(f.Key) != nil {
			fmt.Printf("  %-24s %s\n", f.Title, lab.MeanCI(s, f.Key))
		}
	}
	fmt.Printf("summary %s, report %s, plots %s\n", filepath.Join(c.out, "summary.json"),
		filepath.Join(c.out, "report.md"), filepath.Join(c.out, "{rate,seq}.png"))
	return nil
}

func cmdMatrix(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("matrix", flag.ExitOnError)
	var c common
	c.register(fs, 3, "thesis")
	scenarios := fs.String("scenarios", strings.Join(lab.ScenarioNames, ","), "scenarios")
	modes := fs.String("modes", "ilnp-soft,ilnp-hard,ipv6", "modes")
	traffics := fs.String("traffics", "udp-voip,udp-hd,tcp", "traffic kinds")
	reportOnly := fs.Bool("report-only", false, "rewrite report.md and overlays from the runs already in --out")
	congestions := fs.String("congestions", "", "TCP congestion controls as an extra axis for tcp (e.g. cubic,hybla,veno): cells go to SCENARIO/MODE/tcp-NAME and the report gains the seed's figs. 17-19")
	withSignalling := fs.Bool("signalling", false, "also run the ch. 6 signalling measurements (ilnp-lab signalling defaults) into OUT/signalling")
	tcpAware := fs.String("tcp-aware", "off", "on: every ILNP cell with ilnpd's mobility-aware TCP (issue 15); off,on: both, as an axis for TCP traffic (cells SCENARIO/MODE/TRAFFIC-tcpaware beside the off ones; the report gains the on/off table)")
	_ = fs.Parse(args)
	awareAxis := *tcpAware == "off,on" || *tcpAware == "on,off"
	aware := false
	if !awareAxis {
		var err error
		if aware, err = onOff("tcp-aware", *tcpAware); err != nil {
			return fmt.Errorf("%w (or off,on for both)", err)
		}
	}
	if c.out == "" {
		return fmt.Errorf("--out is required")
	}
	prof, err := c.timing()
	if err != nil {
		return err
	}
	m := lab.MatrixConfig{Scenarios: split(*scenarios), Modes: split(*modes), Traffics: split(*traffics),
		Profile: prof, Reps: c.reps, Access: c.access, Out: c.out, Progress: os.Stderr, Congestions: split(*congestions),
		TCPAware: aware, TCPAwareAxis: awareAxis}
	if *withSignalling {
		sc := lab.DefaultSignalling("", "")
		m.Signalling = &sc
	}
	if *reportOnly {
		if err := lab.WriteMatrixReport(m); err != nil {
			return err
		}
		fmt.Printf("matrix report: %s\n", filepath.Join(c.out, "report.md"))
		return nil
	}
	if m.BinDir, err = c.binaries(append(m.Modes, map[bool]string{true: "ilnp-soft"}[*withSignalling])); err != nil {
		return err
	}
	if err := lab.Matrix(ctx, m); err != nil {
		return err
	}
	fmt.Printf("matrix report: %s\n", filepath.Join(c.out, "report.md"))
	return nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func cmdDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	out := fs.String("out", "lab/out/demo", "output directory")
	bin := fs.String("bin", "", "directory with ilnpd and ilnpctl (default: build them)")
	fs.StringVar(&lab.DefaultRendezvous, "rendezvous", lab.RendezvousHosts, "how the CN finds the MN: hosts or dns")
	_ = fs.Parse(args)
	if err := lab.ValidRendezvous(lab.DefaultRendezvous); err != nil {
		return fmt.Errorf("--rendezvous: %w", err)
	}
	c := common{out: *out, bin: *bin}
	binDir, err := c.binaries([]string{"ilnp-soft"})
	if err != nil {
		return err
	}
	return lab.Demo(ctx, *out, binDir, os.Stdout, os.Stderr)
}

func cmdAnalyze(args []string) error {
	fs := flag.NewFlagSet("analyze", flag.ExitOnError)
	out := fs.String("out", "", "output directory")
	_ = fs.Parse(args)
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	if err := analysis.Write(*out); err != nil {
		return err
	}
	fmt.Printf("chapter 6 analysis written to %s\n", *out)
	return nil
}

func cmdSignalling(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("signalling", flag.ExitOnError)
	out := fs.String("out", "", "output directory")
	bin := fs.String("bin", "", "directory with ilnpd and ilnpctl (default: build them into OUT/bin)")
	d := lab.DefaultSignalling("", "")
	parts := fs.String("parts", strings.Join(d.Parts, ","), "success, delay, scale")
	handoffs := fs.Int("handoffs", d.Handoffs, "success: signalling exchanges per loss setting and mode")
	successModes := fs.String("success-modes", strings.Join(d.SuccessModes, ","), "success: ilnp-soft (LU/LU-ACK), mipv6 (home BU/BAck) and/or mipv6-ro (and return routability, the CN's BU/BAck)")
	losses := fs.String("losses", "0,0.02,0.05,0.1", "success: loss on the old and new link (fractions)")
	lossPairs := fs.String("loss-pairs", "", "success: settings OLD/NEW, the loss on R1-R2 / R1-R3 (e.g. 0/0.2,0.2/0); given without --losses, only these run")
	scenarios := fs.String("scenarios", strings.Join(d.Scenarios, ","), "delay: scenarios")
	modes := fs.String("modes", strings.Join(d.Modes, ","), "delay: modes")
	scales := fs.String("scales", "1x1,2x2,5x5,10x10", "scale: MNsxCNs list")
	tha := fs.Duration("mipv6-tha", d.THA, "mipv6 runs of every part: T_HA, an extra delay at the home agent on top of its 1 s DAD (default 0)")
	_ = fs.Parse(args)
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	cfg := lab.DefaultSignalling(*out, *bin)
	cfg.Parts, cfg.Handoffs, cfg.Scenarios, cfg.Modes, cfg.THA, cfg.Progress = split(*parts), *handoffs, split(*scenarios), split(*modes), *tha, os.Stderr
	cfg.SuccessModes = split(*successModes)
	cfg.Losses = nil
	for _, l := range split(*losses) {
		var v float64
		if _, err := fmt.Sscanf(l, "%g", &v); err != nil || v < 0 || v >= 1 {
			return fmt.Errorf("--losses: %q is not a fraction in [0, 1)", l)
		}
		cfg.Losses = append(cfg.Losses, v)
	}
	lossesSet := false
	fs.Visit(func(f *flag.Flag) { lossesSet = lossesSet || f.Name == "losses" })
	if *lossPairs != "" && !lossesSet {
		// --loss-pairs alone runs only its settings.
		cfg.Losses = nil
	}
	for _, l := range split(*lossPairs) {
		var o, n float64
		if _, err := fmt.Sscanf(l, "%g/%g", &o, &n); err != nil || o < 0 || o >= 1 || n < 0 || n >= 1 {
			return fmt.Errorf("--loss-pairs: %q is not OLD/NEW, fractions in [0, 1)", l)
		}
		cfg.LossPairs = append(cfg.LossPairs, [2]float64{o, n})
	}
	cfg.Scales = nil
	for _, s := range split(*scales) {
		var n, m int
		if _, err := fmt.Sscanf(s, "%dx%d", &n, &m); err != nil {
			return fmt.Errorf("--scales: %q is not NxM", s)
		}
		cfg.Scales = append(cfg.Scales, [2]int{n, m})
	}
	c := common{out: *out, bin: *bin}
	var err error
	if cfg.BinDir, err = c.binaries([]string{"ilnp-soft"}); err != nil {
		return err
	}
	if err := lab.Signalling(ctx, cfg); err != nil {
		return err
	}
	fmt.Printf("signalling report: %s\n", filepath.Join(*out, "signalling.md"))
	return nil
}

// onOff parses an on|off flag.
func onOff(name, v string) (bool, error) {
	switch v {
	case "on":
		return true, nil
	case "off":
		return false, nil
	}
	return false, fmt.Errorf("--%s: want on or off, got %q", name, v)
}

func cmdResults(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("results", flag.ExitOnError)
	d := lab.DefaultResults("", "")
	out := fs.String("out", "", "output directory (results.md, results.json, the runs)")
	bin := fs.String("bin", "", "directory with ilnpd and ilnpctl (default: build them into OUT/bin)")
	profile := fs.String("profile", d.ProfileName, "movement profile of the runs")
	reps := fs.Int("reps", d.Reps, "repetitions per run")
	handoffs := fs.Int("handoffs", d.Handoffs, "signalling exchanges per mode for the success rate")
	modes := fs.String("modes", strings.Join(d.Modes, ","), "table columns")
	rows := fs.String("rows", strings.Join(d.Rows, ","), "table rows: lan-udp, wan-tcp, success; fig4, fig5: the runs and PNGs of the thesis's figs. 4.4-4.7 and 5.4-5.11")
	tha := fs.Duration("mipv6-tha", 0, "mipv6 modes: T_HA on top of the HA's DAD (default 0)")
	scenarios := fs.String("scenarios", strings.Join(d.Scenarios, ","), "scenarios of the figures' runs")
	quick := fs.Bool("quick", false, "a check under 20 minutes: profile quick, 1 rep, scenarios lan-lan,wan-wan, 10 exchanges per loss (flags given beside it still apply)")
	reportOnly := fs.Bool("report-only", false, "redraw results.md, results.json and fig-*.png from the runs already in --out")
	_ = fs.Parse(args)
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	cfg := lab.DefaultResults(*out, *bin)
	if *quick {
		cfg = lab.QuickResults(*out, *bin)
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "profile":
			cfg.ProfileName = *profile
		case "reps":
			cfg.Reps = *reps
		case "handoffs":
			cfg.Handoffs = *handoffs
		case "scenarios":
			cfg.Scenarios = split(*scenarios)
		}
	})
	cfg.Modes, cfg.Rows, cfg.THA, cfg.Progress, cfg.ReportOnly = split(*modes), split(*rows), *tha, os.Stderr, *reportOnly
	if *reportOnly {
		if err := lab.Results(ctx, cfg); err != nil {
			return err
		}
		fmt.Printf("results: %s\n", filepath.Join(*out, "results.md"))
		return nil
	}
	c := common{out: *out, bin: *bin}
	var err error
	if cfg.BinDir, err = c.binaries(append(cfg.Modes, "ilnp-soft")); err != nil {
		return err
	}
	if err := lab.Results(ctx, cfg); err != nil {
		return err
	}
	fmt.Printf("results table: %s\n", filepath.Join(*out, "results.md"))
	return nil
}
