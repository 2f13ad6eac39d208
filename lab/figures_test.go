package lab

import (
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ilnp/lab/measure"
	"ilnp/lab/summary"
)

// recordRuns writes summary.json (and rep-1/result.json) under results' layout as a run
// would, with metric values from f(scenario, mode, traffic, rep).
func recordRuns(t *testing.T, out string, scenarios, modes, traffics []string, reps int, f func(sc, mo, tr string, rep int) summary.Run) {
	t.Helper()
	for _, sc := range scenarios {
		for _, mo := range modes {
			for _, tr := range traffics {
				dir := ResultsRunDir(out)(sc, mo, tr)
				var runs []summary.Run
				for rep := 1; rep <= reps; rep++ {
					runs = append(runs, f(sc, mo, tr, rep))
				}
				if err := os.MkdirAll(filepath.Join(dir, "rep-1"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := summary.New(sc, mo, tr, runs).Write(filepath.Join(dir, "summary.json")); err != nil {
					t.Fatal(err)
				}
				r := measure.Result{Run: runs[0], Enter: 3, Leave: 8, Duration: 12}
				for s := 0; s < 12; s++ {
					r.Rate = append(r.Rate, measure.Point{T: float64(s), V: 1.5e6})
				}
				writeJSON(filepath.Join(dir, "rep-1", "result.json"), r)
			}
		}
	}
}

// results --report-only over recorded runs: every figure of the chosen scenarios is a PNG
// named after the thesis's figure, results.json holds each bar's mean, 95 % half-width, n and
// the thesis's value, and results.md prints them with the command that reruns the cell.
func TestResultsFigures(t *testing.T) {
	out := t.TempDir()
	scenarios, modes := []string{"lan-lan", "wan-wan"}, []string{"ilnp-soft", "ilnp-hard", "mipv6", "mipv6-ro"}
	recordRuns(t, out, scenarios, modes, []string{"udp-voip", "udp-hd", "tcp"}, 2, func(sc, mo, tr string, rep int) summary.Run {
		d := 200.0 + float64(rep)       // 201, 202: mean 201.5, half-width t(1)*0.707 = 6.35
		thr := 2.3e6 + 1e4*float64(rep) // 2310, 2320 kbit/s
		lost, bytes := 230+rep, int64(12e6)+int64(rep)*1e6
		return summary.Run{HandoffDelayMs: &d, ThroughputWindowBps: &thr, TCPLost: &lost, TCPBytes: &bytes}
	})
	cfg := QuickResults(out, "")
	cfg.Reps, cfg.Rows, cfg.Modes, cfg.Scenarios = 2, []string{"fig4", "fig5"}, modes, scenarios
	if err := WriteResults(cfg, nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"4.4", "4.5", "4.6", "4.7", "5.4", "5.7", "5.8", "5.9", "5.10", "5.11"} {
		f, err := os.Open(filepath.Join(out, "fig-"+id+".png"))
		if err != nil {
			t.Errorf("fig. %s: %v", id, err)
			continue
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() < 300 {
			t.Errorf("fig. %s: not a drawn PNG: %v", id, err)
		}
	}
	for _, id := range []string{"5.5", "5.6"} { // LAN-WAN and WAN-LAN were not run
		if _, err := os.Stat(filepath.Join(out, "fig-"+id+".png")); err == nil {
			t.Errorf("fig. %s drawn without its scenario's runs", id)
		}
	}
	var doc struct {
		Figures []FigureCell `json:"figures"`
		Files   []string     `json:"figure_files"`
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	find := func(fig, panel, sc, mo string) FigureCell {
		for _, c := range doc.Figures {
			if c.Figure == fig && strings.HasPrefix(c.Panel, panel) && c.Scenario == sc && c.Mode == mo {
				return c
			}
		}
		t.Fatalf("no cell fig. %s %s %s %s", fig, panel, sc, mo)
		return FigureCell{}
	}
	c := find("5.11", "TCP", "wan-wan", "mipv6")
	if c.N != 2 || c.Mean == nil || *c.Mean != 201.5 || c.CI95 == nil || *c.CI95 < 6.3 || *c.CI95 > 6.4 || c.Thesis == nil || *c.Thesis != 1400 {
		t.Errorf("fig. 5.11 wan-wan mipv6: %+v, want mean 201.5 ± 6.35 (n=2), thesis 1400 (Table 6.11)", c)
	}
	if !strings.Contains(c.Command, "--scenario wan-wan --mode mipv6 --traffic tcp --profile quick --reps 2") {
		t.Errorf("fig. 5.11 command %q", c.Command)
	}
	c = find("4.4", "(b)", "lan-lan", "ilnp-soft")
	if c.Mean == nil || *c.Mean != 2315 || c.Thesis == nil || *c.Thesis != 2350 || c.Unit != "kbit/s" {
		t.Errorf("fig. 4.4(b) lan-lan soft: %+v, want 2315 kbit/s beside the offered 2350", c)
	}
	if c = find("4.6", "HD", "lan-lan", "ilnp-hard"); c.Thesis == nil || *c.Thesis != 7 {
		t.Errorf("fig. 4.6 lan-lan hard: thesis %v, want 7 ms (Table 6.5)", c.Thesis)
	}
	if c = find("5.10", "TCP", "wan-wan", "ilnp-hard"); c.Mean == nil || *c.Mean != 231.5 || *c.Thesis != 234 {
		t.Errorf("fig. 5.10 wan-wan hard: %+v, want 231.5 beside 234", c)
	}
	if c = find("5.9", "TCP", "lan-lan", "mipv6"); c.Mean != nil || c.N != 0 || c.Thesis != nil {
		t.Errorf("fig. 5.9: runs without retransmission figures gave %+v, want no mean and no thesis value", c)
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"![Fig. 5.10](fig-5.10.png)",
		"| WAN to WAN | 202 ± 6.35 (n=2) [202] | 202 ± 6.35 (n=2) [202] | 202 ± 6.35 (n=2) [1400] | 202 ± 6.35 (n=2) [2204] |",
		"`ilnp-lab run --scenario SCENARIO --mode MODE --traffic tcp --profile quick --reps 2 --mipv6-tha 0s --out " + out,
		"A `--quick` check",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q", want)
		}
	}
	if len(doc.Files) != 10 {
		t.Errorf("figure_files %v, want 10", doc.Files)
	}
}

// Row fig3 over recorded cycle.json files: fig-3.15.png, each bar's mean ± half-width (n) in
// results.json and results.md, and Table 3.5 pooled by network.
func TestResultsFig315(t *testing.T) {
	out := t.TempDir()
	cfg := QuickResults(out, "")
	cfg.Reps, cfg.Rows = 2, []string{"fig3"}
	for _, mo := range Fig315Modes {
		for rep := 1; rep <= 2; rep++ {
			hd := 200.0 + 100*float64(rep) // 300, 400
			loss := 1.0
			if mo == "ilnp-soft" {
				loss = 0
			}
			r := CycleResult{Sent: 100, DelayMs: 70 + float64(rep), HandoffDelayMs: &hd, LUsPerHandoff: 1, GratuitousLossPct: loss,
				Handoffs: []CycleHandoff{{AtS: 9, ToL3: true, LUs: 1}},
				L2:       NetworkStats{Shape: "wifi", Sent: 60, LossPct: 0, DelayMean: 33}, L3: NetworkStats{Shape: "3g", Sent: 40, LossPct: 10, DelayMean: 112}}
			dir := filepath.Join(cfg.fig315Dir(mo, "udp-voip"), fmt.Sprintf("rep-%d", rep))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			writeJSON(filepath.Join(dir, "cycle.json"), r)
		}
	}
	if err := WriteResults(cfg, nil); err != nil {
		t.Fatal(err)
	}
	if f, err := os.Open(filepath.Join(out, "fig-3.15.png")); err != nil {
		t.Fatal(err)
	} else if _, err := png.Decode(f); err != nil {
		t.Errorf("fig-3.15.png: %v", err)
	}
	var doc struct {
		Cells []Fig315Cell            `json:"fig_3_15"`
		Table map[string]NetworkStats `json:"table_3_5"`
	}
	b, _ := os.ReadFile(filepath.Join(out, "results.json"))
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var got *Fig315Cell
	for i, c := range doc.Cells {
		if c.Metric == "handoff_delay_ms" && c.Mode == "ilnp-hard" && c.Traffic == "udp-voip" {
			got = &doc.Cells[i]
		}
	}
	if got == nil || got.N != 2 || got.Mean == nil || *got.Mean != 350 || got.CI95 == nil || math.Abs(*got.CI95-635.3) > 0.1 || got.Thesis != 145 {
		t.Errorf("handoff delay, hard, VoIP: %+v, want 350 ± 635.3 (n=2) beside 145", got)
	}
	if n := doc.Table["3g"]; n.Sent != 160 || n.LossPct != 10 || n.DelayMean != 112 {
		t.Errorf("Table 3.5 3g: %+v, want 160 datagrams, 10 %% loss, 112 ms", n)
	}
	md, _ := os.ReadFile(filepath.Join(out, "results.md"))
	for _, want := range []string{"![Fig. 3.15](fig-3.15.png)", "| (d) gratuitous loss (%) | udp-voip | 1.00 ± 0.00 (n=2) | 0.00 ± 0.00 (n=2) |",
		"| 3g | 10.00 | 112.0 |", "--access-r2 wifi --access-r3 3g --cycle 9s --enter 9s --leave 14s --duration 30s"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
}

// Row ch6 reads `signalling --parts delay`'s lost-LU/BU rows into the table beside Tables
// 6.5-6.11.
func TestResultsCh6(t *testing.T) {
	out := t.TempDir()
	cfg := QuickResults(out, "")
	cfg.Rows = []string{"ch6"}
	d, th, ours := 1215.0, 1202.0, 1210.0
	res := SignallingResults{Delay: []DelayRow{
		{Scenario: "wan-wan", Mode: "ilnp-soft", Case: "no_loss", HandoffDelayMs: &th},
		{Scenario: "wan-wan", Mode: "ilnp-soft", Case: "update_lost", HandoffDelayMs: &d, ThesisDelayMs: &th, OursDelayMs: &ours, Attempts: 2},
		{Scenario: "wan-wan", Mode: "mipv6", Case: "update_lost", Error: "injector did not fire"},
	}}
	if err := os.MkdirAll(filepath.Join(out, "ch6"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeJSON(filepath.Join(out, "ch6", "signalling.json"), res)
	cells := cfg.ch6Cells()
	if sc := cfg.ch6SuccessCells(); len(sc) != 6 || sc[0].Error == "" {
		t.Errorf("success cells of a --quick table without any success run: %+v, want 10 %%/10 %% for ilnp-soft, mipv6 and mipv6-ro (rate and LUs)", sc)
	}
	if len(cells) != 2 || cells[0].Value == nil || *cells[0].Value != d || cells[0].N != 1 || cells[1].Error != "injector did not fire" {
		t.Fatalf("cells %+v", cells)
	}
	md := ResultsMarkdown(cfg, cells)
	for _, want := range []string{
		"| handoff delay, one LU/BU lost (wan-wan) | 1215 (n=1) [1] |  | failed: injector did not fire [1] |  | ILNP 1202, MIPv6 2900 / RO 3704 |",
		"thesis 1202 ms, the same expression with our inputs 1210 ms; 2 attempts",
		"`ilnp-lab signalling --parts delay --scenarios wan-wan --modes ilnp-soft,mipv6 --mipv6-tha 0s --out " + out,
	} {
		if !strings.Contains(md, want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
}

// The success run's LUs per handoff at 10 and 20 % loss become their own rows.
func TestResultsAttempts(t *testing.T) {
	res := SignallingResults{Success: []SuccessRow{
		{Mode: "ilnp-soft", Loss: 0.1, Exchanges: 40, Attempts: 46, AttemptsPerExchange: 1.15},
		{Mode: "ilnp-soft", Loss: 0.2, Exchanges: 40, Attempts: 0},
		{Mode: "mipv6", Loss: 0.2, Error: "HA gone"},
	}}
	cells := []ResultsCell{attemptsCell("ilnp-soft", 0.1, "C", res, nil), attemptsCell("ilnp-soft", 0.2, "C", res, nil),
		attemptsCell("mipv6", 0.2, "C", res, nil), attemptsCell("mipv6", 0.1, "C", res, nil)}
	if c := cells[0]; c.Value == nil || *c.Value != 1.15 || c.N != 40 {
		t.Errorf("10 %%: %+v, want 1.15 over 40 exchanges", c)
	}
	if c := cells[1]; c.Value != nil {
		t.Errorf("no attempts recorded (a summary from before they were): %+v, want no value", c)
	}
	if cells[2].Error != "HA gone" || cells[3].Error != "no row in signalling.json" {
		t.Errorf("errors %q, %q", cells[2].Error, cells[3].Error)
	}
	md := ResultsMarkdown(ResultsConfig{ProfileName: "quick", Reps: 1, Handoffs: 40, Modes: []string{"ilnp-soft", "mipv6"}, Rows: ResultsRows}, cells)
	if !strings.Contains(md, "| LUs (BUs) sent per handoff at 10 % loss | 1.15 (n=40) [1] | failed: no row in signalling.json [1] | ILNP (overlay, 10-20 %): 1.1-1.4 |") {
		t.Errorf("results.md:\n%s", md)
	}
}

// Row ch6's success rates pool every run of a setting under OUT/ch6/success (the chunks it was
// measured in), recompute the rate and its interval over the pool, and stand beside Table 6.2
// (10 %/10 %) or eqs. 17-19 beyond it; ILNP's LUs per handoff beside Fig. 3.5's overlay.
func TestResultsCh6Success(t *testing.T) {
	out := t.TempDir()
	cfg := DefaultResults(out, "")
	cfg.Rows, cfg.Handoffs = []string{"ch6"}, 40
	lo, ln, z, tw := 0.1, 0.1, 0.0, 0.2
	write := func(dir string, rows ...SuccessRow) {
		if err := os.MkdirAll(filepath.Join(out, "ch6", "success", dir), 0o755); err != nil {
			t.Fatal(err)
		}
		writeJSON(filepath.Join(out, "ch6", "success", dir, "signalling.json"), SignallingResults{Success: rows})
	}
	write("mipv6-ro-10-10", SuccessRow{Mode: "mipv6-ro", Loss: 0.1, LossOld: &lo, LossNew: &ln, Exchanges: 40, FirstTry: 10, Eventually: 40, Attempts: 48, Analytic: 0.2288})
	write("mipv6-ro-10-10-b", SuccessRow{Mode: "mipv6-ro", Loss: 0.1, LossOld: &lo, LossNew: &ln, Exchanges: 20, FirstTry: 5, Eventually: 20, Attempts: 24, Analytic: 0.2288},
		SuccessRow{Mode: "mipv6", Loss: 0.1, LossOld: &lo, LossNew: &ln, Error: "HA gone"})
	write("ilnp-soft-0-20", SuccessRow{Mode: "ilnp-soft", Loss: 0.2, LossOld: &z, LossNew: &tw, Exchanges: 50, FirstTry: 32, Eventually: 50, Attempts: 70, Analytic: 0.64})
	// An old file: Loss alone means old = new.
	write("ilnp-soft-10-10", SuccessRow{Mode: "ilnp-soft", Loss: 0.1, Exchanges: 30, FirstTry: 24, Eventually: 30, Attempts: 36, Analytic: 0.81})
	cells := cfg.ch6SuccessCells()
	by := map[string]ResultsCell{}
	for _, c := range cells {
		by[c.Row+"|"+c.Mode] = c
	}
	ro := by[ch6SuccessLabel(0.1, 0.1)+"|mipv6-ro"]
	if ro.Value == nil || *ro.Value != 0.25 || ro.N != 60 || ro.Low == nil || *ro.Low >= 0.25 || *ro.High <= 0.25 {
		t.Fatalf("pooled RO cell %+v, want 15/60 with an interval around it", ro)
	}
	if c := by[ch6AttemptsLabel(0.1, 0.1)+"|mipv6-ro"]; c.Value == nil || *c.Value != 1.2 {
		t.Errorf("RO BUs per handoff %+v, want 72/60", c)
	}
	if c := by[ch6SuccessLabel(0.1, 0.1)+"|mipv6"]; c.Error != "HA gone" {
		t.Errorf("failed run: %+v", c)
	}
	if c := by[ch6SuccessLabel(0, 0.2)+"|ilnp-soft"]; c.Value == nil || *c.Value != 0.64 || c.N != 50 {
		t.Errorf("unequal loss cell %+v", c)
	}
	if _, ok := by[ch6AttemptsLabel(0, 0.2)+"|ilnp-soft"]; ok {
		t.Error("LUs per handoff with unequal loss: not a thesis row")
	}
	if c := by[ch6SuccessLabel(0.1, 0.1)+"|ilnp-soft"]; c.Value == nil || *c.Value != 0.8 {
		t.Errorf("old-format row %+v", c)
	}
	if c := by[ch6SuccessLabel(0.2, 0)+"|ilnp-soft"]; c.Error == "" {
		t.Errorf("a setting without a run: %+v", c)
	}
	// A --quick table shows 10 %/10 % and whatever else was measured.
	quick := QuickResults(out, "")
	quick.Rows = []string{"ch6"}
	qc := quick.ch6SuccessCells()
	if len(qc) != 7 || qc[6].Row != ch6SuccessLabel(0, 0.2) || qc[6].Mode != "ilnp-soft" {
		t.Errorf("--quick cells %+v, want 10 %%/10 %% (3 modes, rate and LUs) and the measured 0 %%/20 %%", qc)
	}
	md := ResultsMarkdown(cfg, cells)
	for _, want := range []string{
		"| handoff success, first try, loss old/new 10 %/10 % | 0.80 [0.63, 0.90] (n=30) [",
		"0.25 [0.16, 0.37] (n=60) [", "| Table 6.2: ILNP 0.81, MIPv6 0.66, RO 0.23 |",
		"| eqs. 17-19 (beyond Table 6.2's 1-10 %): ILNP 0.64, MIPv6 0.64, RO 0.17 |",
		"ILNP overlay, 20 % round trip (Fig. 3.5): 1.2-1.4",
		"`ilnp-lab signalling --parts success --success-modes mipv6-ro --loss-pairs 0.1/0.1 --handoffs 40 --mipv6-tha 0s --out " + out,
	} {
		if !strings.Contains(md, want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
}
