package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"ilnp/lab/mipv6/binding"
	"ilnp/lab/summary"
)

// `ilnp-lab results` (`make results`) regenerates the README's results table into
// OUT/results.md: it runs every measurement the table needs with the stated repetitions and
// writes each figure with its 95 % interval, its sample size and the command that produced it.

// ResultsConfig says what to run.
type ResultsConfig struct {
	Out, BinDir string
	// ProfileName is the movement profile of the runs (the table's: thesis).
	ProfileName string
	// Reps per run (the table's: 3).
	Reps int
	// Handoffs: signalling exchanges per mode for the success rate (the table's: 40).
	Handoffs int
	// Modes and Rows narrow the table (default: all); a narrowed table says so.
	Modes, Rows []string
	// THA is --mipv6-tha of the MIPv6 runs (default 0: the HA's DAD alone).
	THA      time.Duration
	Progress io.Writer
	// Scenarios of the figures' runs (rows fig4, fig5; default all four).
	Scenarios []string
	// ReportOnly redraws results.md, results.json and the figures from the runs already in
	// Out instead of running anything.
	ReportOnly bool
	// Quick marks a --quick check (QuickResults); results.md says so.
	Quick bool
}

// ResultsRows are the table's row groups: lan-lan UDP HD (handoff delay, UDP lost in the
// window), wan-wan TCP (handoff delay, lost segments), success at 10 % loss.
// fig4 and fig5 are the runs behind the thesis's figs. 4.4-4.7 and 5.4-5.11 (figures.go).
// fig3 is thesis 3.3's WiFi/3G handoff loop (figure315.go).
// ch6 is chapter 6's delay with one lost LU/BU (results_ch6.go).
// seed004 is seed 004's figs. 12-16 (seed004.go).
var ResultsRows = []string{"lan-udp", "wan-tcp", "success", "fig4", "fig5", "fig3", "ch6", "seed004"}

// ResultsModes are the table's columns.
var ResultsModes = []string{"ilnp-soft", "ilnp-hard", "mipv6", "mipv6-ro"}

// DefaultResults is the README's table as published.
func DefaultResults(out, bin string) ResultsConfig {
	return ResultsConfig{Out: out, BinDir: bin, ProfileName: "thesis", Reps: 3, Handoffs: 40,
		Modes: slices.Clone(ResultsModes), Rows: slices.Clone(ResultsRows), Scenarios: slices.Clone(ScenarioNames)}
}

// QuickResults is the --quick check (about 19 minutes of lab time here): the quick movement
// profile, one repetition, the LAN-LAN and WAN-WAN scenarios of the figures, 10 exchanges
// per success rate. Flags given beside --quick still apply on top.
func QuickResults(out, bin string) ResultsConfig {
	c := DefaultResults(out, bin)
	c.ProfileName, c.Reps, c.Handoffs, c.Scenarios, c.Quick = "quick", 1, 10, []string{"lan-lan", "wan-wan"}, true
	return c
}

// figureRows maps the figure rows to the figures they draw.
func (c ResultsConfig) figures() []FigureSpec {
	var out []FigureSpec
	for _, f := range ThesisFigures {
		if (strings.HasPrefix(f.ID, "4.") && c.has(c.Rows, "fig4")) || (strings.HasPrefix(f.ID, "5.") && c.has(c.Rows, "fig5")) {
			if f.RateScenario != "" && !slices.Contains(c.Scenarios, f.RateScenario) {
				continue
			}
			out = append(out, f)
		}
	}
	return out
}

// runCommand is the `ilnp-lab run` that makes (or remakes) one cell's runs.
func (c ResultsConfig) runCommand(scenario, mode, traffic string) string {
	cmd := fmt.Sprintf("ilnp-lab run --scenario %s --mode %s --traffic %s --profile %s --reps %d", scenario, mode, traffic, c.ProfileName, c.Reps)
	if strings.HasPrefix(mode, "mipv6") || mode == "MODE" {
		cmd += fmt.Sprintf(" --mipv6-tha %v", c.THA)
	}
	return cmd + " --out " + ResultsRunDir(c.Out)(scenario, mode, traffic)
}

// cellRunner runs each (scenario, mode, traffic) once per Results call, or with ReportOnly
// reads what an earlier call left.
type cellRunner struct {
	cfg  ResultsConfig
	prof Profile
	done map[string]cellRun
}

type cellRun struct {
	s   summary.Summary
	err error
}

func (r *cellRunner) run(ctx context.Context, scenario, mode, traffic string) (summary.Summary, string, error) {
	dir := ResultsRunDir(r.cfg.Out)(scenario, mode, traffic)
	cmd := r.cfg.runCommand(scenario, mode, traffic)
	if c, ok := r.done[dir]; ok {
		return c.s, cmd, c.err
	}
	var s summary.Summary
	var err error
	if r.cfg.ReportOnly {
		s, err = summary.Read(filepath.Join(dir, "summary.json"))
	} else {
		r.cfg.progress("%s", cmd)
		old := MIPv6HAProcessing
		MIPv6HAProcessing = r.cfg.THA
		s, err = Run(ctx, RunConfig{Scenario: scenario, Mode: mode, Traffic: traffic, Profile: r.prof, Reps: r.cfg.Reps,
			Out: dir, BinDir: r.cfg.BinDir, Progress: r.cfg.Progress})
		MIPv6HAProcessing = old
	}
	if !errors.Is(err, context.Canceled) {
		r.done[dir] = cellRun{s, err}
	}
	return s, cmd, err
}

// resultsGroup is one set of `ilnp-lab run`s, one per mode.
type resultsGroup struct {
	id, scenario, traffic string
	metrics               []resultsMetric
}

type resultsMetric struct {
	label, key, unit, thesis string
}

var resultsGroups = []resultsGroup{
	{"lan-udp", "lan-lan", "udp-hd", []resultsMetric{
		{"lan-lan handoff delay (UDP HD)", "handoff_delay_ms", "ms", "ILNP ~RTT, MIPv6 ~1 s + RTT"},
		{"UDP HD lost in the 5-s window (lan-lan)", "udp_lost_window", "", "ILNP soft 0"},
	}},
	{"wan-tcp", "wan-wan", "tcp", []resultsMetric{
		{"wan-wan handoff delay (TCP)", "handoff_delay_ms", "ms", "ILNP 202, MIPv6 1400 / 2204 ms"},
		{"TCP lost segments (wan-wan)", "tcp_lost", "", "soft 0, hard ~234"},
	}},
}

// successLoss is the loss of the success row (on R1-R2 and R1-R3); attemptsLoss the second
// loss of the LUs-per-handoff row (thesis: 10-20 %).
const (
	successLoss  = 0.10
	attemptsLoss = 0.20
)

// attemptsLabel is the row of LUs (BUs) sent per handoff at a loss.
func attemptsLabel(loss float64) string {
	return fmt.Sprintf("LUs (BUs) sent per handoff at %g %% loss", loss*100)
}

// attemptsCell is one mode's LUs (BUs) per handoff at loss from the success run.
func attemptsCell(mode string, loss float64, cmd string, res SignallingResults, err error) ResultsCell {
	c := ResultsCell{Row: attemptsLabel(loss), Mode: mode, Command: cmd}
	if err != nil {
		c.Error = err.Error()
		return c
	}
	for _, r := range res.Success {
		if o, n := r.Losses(); r.Mode != mode || o != loss || n != loss {
			continue
		}
		if r.Error != "" {
			c.Error = r.Error
			return c
		}
		if r.Exchanges > 0 && r.Attempts > 0 {
			c.Value, c.N = ptrF(r.AttemptsPerExchange), r.Exchanges
		}
		return c
	}
	c.Error = "no row in signalling.json"
	return c
}

// ResultsCell is one figure of the table.
type ResultsCell struct {
	Row     string   `json:"row"`
	Mode    string   `json:"mode"`
	Value   *float64 `json:"value"`
	CI95    *float64 `json:"ci95,omitempty"`    // half-width (t), for means
	Low     *float64 `json:"ci_low,omitempty"`  // Wilson 95 %, for rates
	High    *float64 `json:"ci_high,omitempty"` // Wilson 95 %, for rates
	N       int      `json:"n"`                 // repetitions or exchanges
	Command string   `json:"command"`
	// Source says where a MIPv6 delay comes from (DAD, RTTs, T_HA).
	Source string `json:"source,omitempty"`
	Error  string `json:"error,omitempty"`
}

func (c ResultsConfig) has(list []string, x string) bool { return slices.Contains(list, x) }

func (c ResultsConfig) progress(format string, a ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "results: "+format+"\n", a...)
	}
}

// Results runs what the table needs and writes OUT/results.md and OUT/results.json. A failed
// run is recorded in its cells and the rest still run.
func Results(ctx context.Context, cfg ResultsConfig) error {
	if cfg.Out == "" {
		return errors.New("--out is required")
	}
	prof, ok := Profiles[cfg.ProfileName]
	if !ok {
		return fmt.Errorf("unknown profile %q", cfg.ProfileName)
	}
	if cfg.Reps < 1 || cfg.Handoffs < 1 {
		return fmt.Errorf("reps (%d) and handoffs (%d) must be positive", cfg.Reps, cfg.Handoffs)
	}
	for _, m := range cfg.Modes {
		if !slices.Contains(ResultsModes, m) {
			return fmt.Errorf("mode %q is not a column of the table (%s)", m, strings.Join(ResultsModes, ", "))
		}
	}
	for _, r := range cfg.Rows {
		if !slices.Contains(ResultsRows, r) {
			return fmt.Errorf("row %q is not in the table (%s)", r, strings.Join(ResultsRows, ", "))
		}
	}
	for _, sc := range cfg.Scenarios {
		if _, ok := Scenarios[sc]; !ok {
			return fmt.Errorf("unknown scenario %q (want some of %s)", sc, strings.Join(ScenarioNames, ", "))
		}
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return err
	}
	runner := &cellRunner{cfg: cfg, prof: prof, done: map[string]cellRun{}}
	var cells []ResultsCell
	for _, g := range resultsGroups {
		if !cfg.has(cfg.Rows, g.id) {
			continue
		}
		for _, mode := range cfg.Modes {
			if err := ctx.Err(); err != nil {
				return err
			}
			s, cmd, err := runner.run(ctx, g.scenario, mode, g.traffic)
			if errors.Is(err, context.Canceled) {
				return err
			}
			for _, m := range g.metrics {
				cells = append(cells, runCell(m.label, mode, cmd, s, m.key, err, cfg.THA))
			}
		}
	}
	if cfg.has(cfg.Rows, "success") {
		var modes []string
		for _, m := range cfg.Modes {
			if m == "ilnp-soft" || m == "mipv6" {
				modes = append(modes, m)
			}
		}
		if len(modes) > 0 {
			dir := filepath.Join(cfg.Out, "success")
			cmd := fmt.Sprintf("ilnp-lab signalling --parts success --losses %g,%g --success-modes %s --handoffs %d --mipv6-tha %v --out %s",
				successLoss, attemptsLoss, strings.Join(modes, ","), cfg.Handoffs, cfg.THA, dir)
			var err error
			if !cfg.ReportOnly {
				cfg.progress("%s", cmd)
				sc := DefaultSignalling(dir, cfg.BinDir)
				sc.Parts, sc.Losses, sc.SuccessModes, sc.Handoffs, sc.THA, sc.Progress = []string{"success"}, []float64{successLoss, attemptsLoss}, modes, cfg.Handoffs, cfg.THA, cfg.Progress
				err = Signalling(ctx, sc)
				if errors.Is(err, context.Canceled) {
					return err
				}
			}
			var res SignallingResults
			if err == nil {
				var b []byte
				if b, err = os.ReadFile(filepath.Join(dir, "signalling.json")); err == nil {
					err = json.Unmarshal(b, &res)
				}
			}
			for _, m := range modes {
				cells = append(cells, successCell(m, cmd, res, err))
			}
			for _, loss := range []float64{successLoss, attemptsLoss} {
				for _, m := range modes {
					cells = append(cells, attemptsCell(m, loss, cmd, res, err))
				}
			}
		}
	}
	figs := cfg.figures()
	for _, f := range figs {
		for _, tr := range f.Traffics() {
			for _, sc := range cfg.Scenarios {
				for _, mode := range cfg.Modes {
					if f.RateScenario != "" && sc != f.RateScenario {
						continue
					}
					if _, _, err := runner.run(ctx, sc, mode, tr); errors.Is(err, context.Canceled) {
						return err
					}
				}
			}
		}
	}
	if cfg.has(cfg.Rows, "fig3") && !cfg.ReportOnly {
		if err := cfg.runFig315(ctx); err != nil {
			return err
		}
	}
	if cfg.has(cfg.Rows, "ch6") && !cfg.ReportOnly {
		if err := cfg.runCh6(ctx); err != nil {
			return err
		}
	}
	if cfg.has(cfg.Rows, "seed004") && !cfg.ReportOnly {
		if err := cfg.runSeed004(ctx, prof); err != nil {
			return err
		}
	}
	if cfg.has(cfg.Rows, "ch6") {
		cells = append(cells, cfg.ch6Cells()...)
		cells = append(cells, cfg.ch6SuccessCells()...)
	}
	return WriteResults(cfg, cells)
}

// WriteResults writes results.json, results.md and the figures from the table's cells and
// the runs under cfg.Out (what --report-only redoes, and what the tests feed recorded runs).
func WriteResults(cfg ResultsConfig, cells []ResultsCell) error {
	figs := cfg.figures()
	runs := FigureRuns{Dir: ResultsRunDir(cfg.Out), Command: cfg.runCommand}
	var figCells []FigureCell
	drawErr := map[string]string{}
	var files []string
	for _, f := range figs {
		fc := FigureCells(f, cfg.Scenarios, cfg.Modes, runs)
		figCells = append(figCells, fc...)
		if err := DrawFigure(cfg.Out, f, cfg.Scenarios, cfg.Modes, fc, runs); err != nil {
			drawErr[f.ID] = err.Error()
			continue
		}
		files = append(files, f.File())
	}
	doc := map[string]any{"config": map[string]any{"profile": cfg.ProfileName, "reps": cfg.Reps,
		"handoffs": cfg.Handoffs, "modes": cfg.Modes, "rows": cfg.Rows, "tha_ms": float64(cfg.THA) / 1e6,
		"scenarios": cfg.Scenarios, "quick": cfg.Quick}, "cells": cells, "figures": figCells, "figure_files": files}
	md := ResultsMarkdown(cfg, cells)
	if len(figs) > 0 {
		md += "\n" + FiguresMarkdown(figs, cfg.Scenarios, cfg.Modes, figCells, runs, drawErr)
	}
	if cfg.has(cfg.Rows, "fig3") && len(cfg.fig315Modes()) > 0 {
		fc := Fig315Cells(cfg)
		err := DrawFig315(cfg, fc)
		if err == nil {
			files = append(files, "fig-3.15.png")
		}
		md += "\n" + Fig315Markdown(cfg, fc, Table35(cfg), err)
		doc["fig_3_15"], doc["table_3_5"], doc["figure_files"] = fc, Table35(cfg), files
	}
	if cfg.has(cfg.Rows, "seed004") {
		sf, notes := cfg.DrawSeed004()
		files = append(files, sf...)
		doc["figure_files"] = files
		md += "\n" + cfg.Seed004Markdown(sf, notes)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.Out, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cfg.Out, "results.md"), []byte(md), 0o644)
}

func runCell(label, mode, cmd string, s summary.Summary, key string, runErr error, tha time.Duration) ResultsCell {
	c := ResultsCell{Row: label, Mode: mode, Command: cmd, N: len(s.Runs)}
	if runErr != nil {
		c.Error = runErr.Error()
		return c
	}
	var xs []float64
	for _, r := range s.Runs {
		if v := r.Values()[key]; v != nil {
			xs = append(xs, *v)
		}
	}
	c.N = len(xs)
	if mean, half, ok := summary.MeanCI95(xs); ok {
		c.Value = &mean
		if len(xs) >= 2 {
			c.CI95 = &half
		}
	}
	if key == "handoff_delay_ms" && strings.HasPrefix(mode, "mipv6") {
		var rtts []float64
		for _, r := range s.Runs {
			if r.RTTms != nil {
				rtts = append(rtts, *r.RTTms)
			}
		}
		rtt, _, _ := summary.MeanCI95(rtts)
		rts := "1 RTT (BU/BAck)"
		if mode == "mipv6-ro" {
			rts = "1 RTT to the HA, then return routability and the CN's BU/BAck (~2 RTTs)"
		}
		c.Source = fmt.Sprintf("HA DAD %v + %s, RTT %.1f ms, + T_HA %v", binding.DefaultDADTimeout, rts, rtt, tha)
	}
	return c
}

func successCell(mode, cmd string, res SignallingResults, err error) ResultsCell {
	c := ResultsCell{Row: fmt.Sprintf("handoff success at %g %% loss, first try", successLoss*100), Mode: mode, Command: cmd}
	if err != nil {
		c.Error = err.Error()
		return c
	}
	for _, r := range res.Success {
		if o, n := r.Losses(); r.Mode != mode || o != successLoss || n != successLoss {
			continue
		}
		if r.Error != "" {
			c.Error = r.Error
			return c
		}
		lo, hi := r.CILow, r.CIHigh
		c.Value, c.Low, c.High, c.N = ptrF(r.Rate), &lo, &hi, r.Exchanges
		return c
	}
	c.Error = "no row in signalling.json"
	return c
}

// ResultsMarkdown renders the table: rows by metric, columns by mode, each cell "value ± CI
// (n) [k]" where [k] is the command below that produced it.
func ResultsMarkdown(cfg ResultsConfig, cells []ResultsCell) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Results (`ilnp-lab results`, profile %s, %d repetitions per run, %d exchanges per success rate)\n\n",
		cfg.ProfileName, cfg.Reps, cfg.Handoffs)
	if cfg.Quick {
		fmt.Fprintf(&b, "A `--quick` check (scenarios %s of the figures): not the thesis's 10 repetitions of 30-s flows.\n\n", strings.Join(cfg.Scenarios, ", "))
	}
	if len(cfg.Modes) < len(ResultsModes) || len(cfg.Rows) < len(ResultsRows) {
		fmt.Fprintf(&b, "Narrowed table: modes %s, rows %s.\n\n", strings.Join(cfg.Modes, ", "), strings.Join(cfg.Rows, ", "))
	}
	b.WriteString("Means ± the 95 % confidence half-width (Student t over the repetitions; none with one), n = repetitions " +
		"with a value; success rates with their Wilson 95 % interval and n = exchanges. [k] names the command that " +
		"produced the figure (below). MIPv6 delays: where they come from is listed under the table.\n\n")
	var commands []string
	ref := func(cmd string) int {
		if i := slices.Index(commands, cmd); i >= 0 {
			return i + 1
		}
		commands = append(commands, cmd)
		return len(commands)
	}
	thesis := map[string]string{}
	var labels []string
	for _, g := range resultsGroups {
		for _, m := range g.metrics {
			thesis[m.label] = m.thesis
		}
	}
	thesis[fmt.Sprintf("handoff success at %g %% loss, first try", successLoss*100)] = "eq. 19: 0.81, eq. 17: 0.656"
	thesis[attemptsLabel(successLoss)] = "ILNP (overlay, 10-20 %): 1.1-1.4"
	thesis[attemptsLabel(attemptsLoss)] = "ILNP (overlay, 10-20 %): 1.1-1.4"
	for _, sc := range ScenarioNames {
		l := fmt.Sprintf("handoff delay, one LU/BU lost (%s)", sc)
		thesis[l] = ch6Thesis(l)
	}
	for _, c := range cells {
		if _, ok := thesis[c.Row]; !ok {
			thesis[c.Row] = ch6SuccessThesis(c.Row)
		}
	}
	byRow := map[string]map[string]ResultsCell{}
	for _, c := range cells {
		if byRow[c.Row] == nil {
			byRow[c.Row] = map[string]ResultsCell{}
			labels = append(labels, c.Row)
		}
		byRow[c.Row][c.Mode] = c
	}
	b.WriteString("| | " + strings.Join(cfg.Modes, " | ") + " | thesis |\n|---|" + strings.Repeat("---|", len(cfg.Modes)+1) + "\n")
	var sources []string
	for _, l := range labels {
		row := []string{l}
		for _, m := range cfg.Modes {
			c, ok := byRow[l][m]
			if !ok {
				row = append(row, "")
				continue
			}
			row = append(row, formatCell(c)+fmt.Sprintf(" [%d]", ref(c.Command)))
			if c.Source != "" {
				sources = append(sources, fmt.Sprintf("- %s, %s: %s", l, m, c.Source))
			}
		}
		row = append(row, thesis[l])
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	if len(sources) > 0 {
		b.WriteString("\nWhere the delays come from (MIPv6: the HA's DAD and the round trips; one LU/BU lost: the thesis's and the analytic value; chapter 6's success rates: the handoffs counted and eqs. 17-19 with their losses):\n\n" + strings.Join(sources, "\n") + "\n")
	}
	b.WriteString("\nCommands:\n\n")
	for i, c := range commands {
		fmt.Fprintf(&b, "%d. `%s`\n", i+1, c)
	}
	return b.String()
}

func formatCell(c ResultsCell) string {
	switch {
	case c.Error != "":
		return "failed: " + strings.ReplaceAll(c.Error, "|", "/")
	case c.Value == nil:
		return "- (n=0)"
	case c.Low != nil && c.High != nil:
		return fmt.Sprintf("%.2f [%.2f, %.2f] (n=%d)", *c.Value, *c.Low, *c.High, c.N)
	case c.CI95 != nil:
		return fmt.Sprintf("%s ± %s (n=%d)", num(*c.Value), num(*c.CI95), c.N)
	}
	return fmt.Sprintf("%s (n=%d)", num(*c.Value), c.N)
}

// num prints a figure with a precision that suits its size.
func num(v float64) string {
	switch {
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
