package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"ilnp/lab/measure"
	"ilnp/lab/plots"
	"ilnp/lab/summary"
)

// MatrixConfig is the thesis grid: scenarios x modes x traffic, each with Reps repetitions.
type MatrixConfig struct {
	Scenarios, Modes, Traffics []string
	Profile                    Profile
	Reps                       int
	Access                     string
	Out                        string
	BinDir                     string
	Progress                   io.Writer
	// Signalling, when set, also runs the ch. 6 measurements into OUT/signalling and puts
	// them, beside the analysis, into the combined report.
	Signalling *SignallingConfig
	// Congestions, when set, is an axis for TCP traffic: each TCP cell runs once per
	// congestion control into .../tcp-NAME (matrix_cc.go).
	Congestions []string
	// TCPAware runs every ILNP cell with tcp-aware on.
	TCPAware bool
	// TCPAwareAxis runs every ILNP cell of TCP traffic with tcp-aware off and on
	// (matrix_aware.go); TCPAware is then ignored for those cells.
	TCPAwareAxis bool
}

// CellDir is where one combination's run goes.
func CellDir(out, scenario, mode, traffic string) string {
	return filepath.Join(out, scenario, mode, traffic)
}

// Matrix runs every combination (a failed one is reported, the rest still run) and writes
// OUT/report.md with thesis-style tables and OUT/<scenario>-<traffic>-{rate,seq}.png overlays
// of the modes.
func Matrix(ctx context.Context, m MatrixConfig) error {
	for _, list := range [][]string{m.Scenarios, m.Modes, m.Traffics} {
		if len(list) == 0 {
			return fmt.Errorf("matrix: empty list of scenarios, modes or traffic")
		}
	}
	// Check every name before spending an hour.
	if err := m.validCongestions(); err != nil {
		return err
	}
	total := 0
	for _, sc := range m.Scenarios {
		for _, mo := range m.Modes {
			for _, tr := range m.Traffics {
				for _, co := range m.congestionsFor(tr) {
					c := RunConfig{Scenario: sc, Mode: mo, Traffic: tr, Congestion: co, Profile: m.Profile, Reps: m.Reps, Out: "x"}
					if err := c.Validate(); err != nil {
						return err
					}
					total += len(m.awareFor(mo, tr))
				}
			}
		}
	}
	if err := os.MkdirAll(m.Out, 0o755); err != nil {
		return err
	}
	failures := map[string]string{}
	start := time.Now()
	done := 0
	for _, sc := range m.Scenarios {
		for _, tr := range m.Traffics {
			for _, mo := range m.Modes {
				for _, co := range m.congestionsFor(tr) {
					for _, aware := range m.awareFor(mo, tr) {
						done++
						out := m.awareDir(sc, mo, tr, co, aware)
						if m.Progress != nil {
							fmt.Fprintf(m.Progress, "matrix %d/%d (%s elapsed): %s %s %s\n", done, total, time.Since(start).Round(time.Second), sc, mo, filepath.Base(out))
						}
						cfg := RunConfig{Scenario: sc, Mode: mo, Traffic: tr, Congestion: co, Profile: m.Profile, Reps: m.Reps, Access: m.Access,
							Out: out, BinDir: m.BinDir, Progress: m.Progress, TCPAware: aware}
						if _, err := Run(ctx, cfg); err != nil {
							if errors.Is(err, context.Canceled) {
								return err
							}
							failures[sc+"/"+mo+"/"+filepath.Base(out)] = err.Error()
							if m.Progress != nil {
								fmt.Fprintf(m.Progress, "  failed: %v\n", err)
							}
						}
					}
				}
			}
			overlayModes(m, sc, tr)
		}
	}
	writeVariantPlots(m)
	overlayAware(m)
	if m.Signalling != nil {
		sc := *m.Signalling
		sc.Out, sc.BinDir, sc.Progress = filepath.Join(m.Out, "signalling"), m.BinDir, m.Progress
		if err := Signalling(ctx, sc); err != nil {
			if errors.Is(err, context.Canceled) {
				return err
			}
			failures["signalling"] = err.Error()
		}
	}
	report := MatrixReport(m, failures)
	return os.WriteFile(filepath.Join(m.Out, "report.md"), []byte(report), 0o644)
}

// WriteMatrixReport redraws the overlays and rewrites OUT/report.md from the cells already
// in OUT (after an interrupted matrix, or with a newer report format).
func WriteMatrixReport(m MatrixConfig) error {
	for _, sc := range m.Scenarios {
		for _, tr := range m.Traffics {
			overlayModes(m, sc, tr)
		}
	}
	writeVariantPlots(m)
	overlayAware(m)
	return os.WriteFile(filepath.Join(m.Out, "report.md"), []byte(MatrixReport(m, nil)), 0o644)
}

func loadResult(path string) (measure.Result, error) {
	var r measure.Result
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(b, &r)
}

func overlayModes(m MatrixConfig, sc, tr string) {
	var rate, seq []plots.Series
	var first *measure.Result
	for _, mo := range m.Modes {
		r, err := loadResult(filepath.Join(m.dir(sc, mo, tr), "rep-1", "result.json"))
		if err != nil {
			continue
		}
		if first == nil {
			first = &r
		}
		rate = append(rate, plots.Series{Label: mo, Points: r.Rate})
		seq = append(seq, plots.Series{Label: mo, Points: r.Seq})
	}
	if first == nil {
		return
	}
	marks := plotMarks(*first)
	marks.WindowStart, marks.WindowEnd = 0, 0 // windows differ per mode
	title := fmt.Sprintf("%s, %s (rep 1 of each mode)", Scenarios[sc].Title, tr)
	_ = plots.Rate(filepath.Join(m.Out, sc+"-"+tr+"-rate.png"), title, rate, marks)
	_ = plots.Seq(filepath.Join(m.Out, sc+"-"+tr+"-seq.png"), title, first.SeqUnit, seq, marks)
}

// MatrixReport renders one table per traffic kind and metric group: rows are scenarios,
// columns modes, cells mean ± ci95 (as the thesis's figs 4.4-4.7, 5.8-5.11).
func MatrixReport(m MatrixConfig, failures map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Handoff experiments (%s profile, %d reps each)\n\n", m.Profile.Name, m.Reps)
	fmt.Fprintf(&b, "Movement: enter L3 at %v, leave L2 at %v, flows of %v. Cells: mean ± 95 %% CI.\n\n", m.Profile.Enter, m.Profile.Leave, m.Profile.Duration)
	b.WriteString(rendezvousLine(m))
	for _, tr := range m.Traffics {
		keys := []string{"throughput_window_bps", "udp_lost_window", "udp_lost", "handoff_delay_ms", "lu_sent", "interruption_ms", "session_survived", "rtt_ms"}
		if !Traffics[tr].UDP {
			keys = []string{"tcp_bytes", "tcp_retransmissions", "tcp_lost", "handoff_delay_ms", "lu_sent", "interruption_ms", "session_survived", "rtt_ms"}
		}
		fmt.Fprintf(&b, "## %s — %s\n\n", tr, Traffics[tr].Describe)
		for _, key := range keys {
			title := key
			for _, f := range summary.Fields {
				if f.Key == key {
					title = f.Title
				}
			}
			fmt.Fprintf(&b, "### %s\n\n| scenario |", title)
			for _, mo := range m.Modes {
				fmt.Fprintf(&b, " %s |", mo)
			}
			b.WriteString("\n|---|")
			for range m.Modes {
				b.WriteString("---|")
			}
			b.WriteString("\n")
			for _, sc := range m.Scenarios {
				fmt.Fprintf(&b, "| %s |", Scenarios[sc].Title)
				for _, mo := range m.Modes {
					s, err := summary.Read(filepath.Join(m.dir(sc, mo, tr), "summary.json"))
					if err != nil {
						b.WriteString(" failed |")
						continue
					}
					fmt.Fprintf(&b, " %s |", MeanCI(s, key))
				}
				b.WriteString("\n")
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "Thesis (%s): %s\n\n", map[bool]string{true: "ch. 4.4, figs 4.4-4.15", false: "ch. 5.3, figs 5.4-5.11"}[Traffics[tr].UDP], thesisReference[Traffics[tr].UDP])
		fmt.Fprintf(&b, "Overlays: %s-%s-rate.png, %s-%s-seq.png per scenario.\n\n", "SCENARIO", tr, "SCENARIO", tr)
	}
	b.WriteString(VariantsSection(m))
	b.WriteString(AwareSection(m))
	b.WriteString(SignallingSection(filepath.Join(m.Out, "signalling")))
	if len(failures) > 0 {
		b.WriteString("## Failed runs\n\n")
		for k, v := range failures {
			fmt.Fprintf(&b, "- %s: %s\n", k, v)
		}
	}
	return b.String()
}

// rendezvousLine says how the CN found the MN in each mode, as the cells' run.json recorded it
// (so it is right for --report-only too): the thesis's hosts file, or DNS (issue 6).
func rendezvousLine(m MatrixConfig) string {
	var parts []string
	for _, mo := range m.Modes {
		seen := map[string]bool{}
		var used []string
		for _, sc := range m.Scenarios {
			for _, tr := range m.Traffics {
				b, err := os.ReadFile(filepath.Join(m.dir(sc, mo, tr), "rep-1", "run.json"))
				var meta RunMeta
				if err != nil || json.Unmarshal(b, &meta) != nil || meta.Rendezvous == "" || seen[meta.Rendezvous] {
					continue
				}
				seen[meta.Rendezvous] = true
				used = append(used, meta.Rendezvous)
			}
		}
		if len(used) > 0 {
			parts = append(parts, mo+" "+strings.Join(used, "+"))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "Rendezvous (how the CN found the MN; hosts: the thesis's shared hosts file, dns: NID/L64 " +
		"records in BIND9 kept current by the MN, n/a: by address): " + strings.Join(parts, ", ") + ".\n\n"
}

// thesisReference states what the thesis measured, for reading the tables side by side (its
// figures are bar charts; these are the values its text gives).
var thesisReference = map[bool]string{
	true: "ILNP soft handoff: zero loss in the 5-s window and throughput at the offered load in every " +
		"scenario; hard handoff: small loss; handoff delay about one RTT (a few ms to a LAN, ~200 ms to a " +
		"WAN); MIPv6: about 1 s plus the RTT to the HA, with an interruption of the flow.",
	false: "ILNP soft handoff: no interruption in any scenario, the fewest retransmissions and near-zero " +
		"lost packets; hard handoff: a short interruption and losses close to a window (~234 segments of " +
		"1400 B); throughput ~30 Mbit/s on the LAN, at most 12.8 Mbit/s (320 KB window) over a 200 ms RTT; " +
		"handoff delay about one RTT, slightly above the UDP figure.",
}

// DemoProfile is quick-but-visible: long enough to see the flow before, during and after.
var DemoProfile = Profile{"demo", 20 * time.Second, 5 * time.Second, 12 * time.Second, 500 * time.Millisecond, time.Second}

// Demo runs one lan-wan ILNP soft handoff with UDP HD and TCP and prints a short table.
func Demo(ctx context.Context, out, binDir string, stdout, progress io.Writer) error {
	type row struct {
		traffic string
		s       summary.Summary
	}
	var rows []row
	for _, tr := range []string{"udp-hd", "tcp"} {
		cfg := RunConfig{Scenario: "lan-wan", Mode: "ilnp-soft", Traffic: tr, Profile: DemoProfile, Reps: 1,
			Out: filepath.Join(out, tr), BinDir: binDir, Progress: progress}
		s, err := Run(ctx, cfg)
		if err != nil {
			return err
		}
		rows = append(rows, row{tr, s})
	}
	fmt.Fprintf(stdout, "\nLAN to WAN, ILNP soft handoff: enter L3 (WAN, +100 ms each way) at %v, leave L2 at %v, %v flows\n\n",
		DemoProfile.Enter, DemoProfile.Leave, DemoProfile.Duration)
	fmt.Fprintf(stdout, "%-8s %10s %14s %14s %10s %12s %9s\n", "traffic", "RTT (L3)", "handoff delay", "UDP lost", "survived", "TCP retrans", "TCP lost")
	for _, r := range rows {
		run := r.s.Runs[0]
		v := run.Values()
		udp := "-"
		if run.UDPLost != nil && run.UDPSent != nil {
			udp = fmt.Sprintf("%d/%d", *run.UDPLost, *run.UDPSent)
		}
		surv := "-"
		if run.SessionSurvived != nil {
			surv = map[bool]string{true: "yes", false: "NO"}[*run.SessionSurvived]
		}
		fmt.Fprintf(stdout, "%-8s %10s %14s %14s %10s %12s %9s\n", r.traffic, Fmt(v["rtt_ms"], "rtt_ms"),
			Fmt(v["handoff_delay_ms"], "handoff_delay_ms"), udp, surv,
			Fmt(v["tcp_retransmissions"], "tcp_retransmissions"), Fmt(v["tcp_lost"], "tcp_lost"))
	}
	fmt.Fprintf(stdout, "\nPlots: %s/{udp-hd,tcp}/rate.png and seq.png; reports: %s/{udp-hd,tcp}/report.md\n", out, out)
	return nil
}
