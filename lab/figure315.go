package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"ilnp/lab/plots"
	"ilnp/lab/summary"
)

// Thesis 3.3 (Table 3.5, fig. 3.15, eq. 5) in `ilnp-lab results` (row fig3): hard and soft
// handoff between emulated WiFi (R2) and 3G (R3) every 9 s with 5 s of overlap, VoIP and
// video flows, ten 75-s runs each in the thesis.

// Fig315Modes and Fig315Traffics are the experiment's bars and groups.
var (
	Fig315Modes    = []string{"ilnp-hard", "ilnp-soft"}
	Fig315Traffics = []string{"udp-voip", "udp-video"}
)

// Thesis 3.3's figures: eq. 5's natural loss and delay, the least mean handoff delay (one
// RTT, 66 ms to WiFi and 224 ms to 3G, 145 ms on average) and one LU per handoff.
const (
	thesisNaturalLossPct = 4.98
	thesisNaturalDelayMs = 70.92
	thesisMinHandoffMs   = 145
)

// thesisTable35 is Table 3.5: loss %, one-way delay mean, sd, 95 %, 99 % (ms).
var thesisTable35 = map[string][5]float64{"wifi": {0.26, 33, 26, 76, 180}, "3g": {10.10, 112, 50, 140, 276}}

// Fig315Config is the experiment's timing.
type Fig315Config struct {
	Duration, Enter, Leave, Cycle time.Duration
	Traffics                      []string
}

// fig315 is the experiment as results runs it: the thesis's 75 s (8 handoffs), or 30 s (3)
// and VoIP alone for --quick.
func (c ResultsConfig) fig315() Fig315Config {
	f := Fig315Config{Duration: 75 * time.Second, Enter: 9 * time.Second, Leave: 14 * time.Second, Cycle: 9 * time.Second, Traffics: Fig315Traffics}
	if c.Quick {
		f.Duration, f.Traffics = 30*time.Second, []string{"udp-voip"}
	}
	return f
}

func (c ResultsConfig) fig315Modes() []string {
	var m []string
	for _, mo := range Fig315Modes {
		if slices.Contains(c.Modes, mo) {
			m = append(m, mo)
		}
	}
	return m
}

func (c ResultsConfig) fig315Dir(mode, traffic string) string {
	return filepath.Join(c.Out, "runs", "wifi3g-"+traffic, mode)
}

func (c ResultsConfig) fig315Command(mode, traffic string) string {
	f := c.fig315()
	return fmt.Sprintf("ilnp-lab run --scenario lan-lan --mode %s --traffic %s --access-r2 wifi --access-r3 3g --cycle %v --enter %v --leave %v --duration %v --profile thesis --reps %d --out %s",
		mode, traffic, f.Cycle, f.Enter, f.Leave, f.Duration, c.Reps, c.fig315Dir(mode, traffic))
}

// runFig315 makes the runs (not with ReportOnly).
func (c ResultsConfig) runFig315(ctx context.Context) error {
	f := c.fig315()
	prof := Profiles["thesis"]
	prof.Duration, prof.Enter, prof.Leave = f.Duration, f.Enter, f.Leave
	for _, tr := range f.Traffics {
		for _, mo := range c.fig315Modes() {
			c.progress("%s", c.fig315Command(mo, tr))
			_, err := Run(ctx, RunConfig{Scenario: "lan-lan", Mode: mo, Traffic: tr, Profile: prof, Reps: c.Reps, AccessR2: "wifi", AccessR3: "3g",
				Cycle: f.Cycle, Out: c.fig315Dir(mo, tr), BinDir: c.BinDir, Progress: c.Progress})
			if errors.Is(err, context.Canceled) {
				return err
			}
			if err != nil {
				c.progress("  failed: %v", err)
			}
		}
	}
	return nil
}

// Fig315Cell is one bar of fig. 3.15 (results.json "fig_3_15").
type Fig315Cell struct {
	Metric  string   `json:"metric"`
	Mode    string   `json:"mode"`
	Traffic string   `json:"traffic"`
	Mean    *float64 `json:"mean"`
	CI95    *float64 `json:"ci95,omitempty"`
	N       int      `json:"n"`
	Thesis  float64  `json:"thesis"`
	Command string   `json:"command"`
}

// fig315Metrics are fig. 3.15's panels: key in cycle.json, label, unit, the thesis's line.
var fig315Metrics = []struct {
	key, title, unit string
	thesis           float64
}{
	{"delay_ms", "(a) packet delay", "ms", thesisNaturalDelayMs},
	{"handoff_delay_ms", "(b) handoff delay", "ms", thesisMinHandoffMs},
	{"lus_per_handoff", "(c) LUs per handoff", "LUs", 1},
	{"gratuitous_loss_pct", "(d) gratuitous loss", "%", 0},
}

// readCycles reads rep-*/cycle.json of one cell.
func readCycles(dir string) []CycleResult {
	var out []CycleResult
	for rep := 1; ; rep++ {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rep-%d", rep), "cycle.json"))
		if err != nil {
			return out
		}
		var r CycleResult
		if json.Unmarshal(b, &r) == nil {
			out = append(out, r)
		}
	}
}

func cycleValue(r CycleResult, key string) (float64, bool) {
	switch key {
	case "delay_ms":
		return r.DelayMs, r.Sent > 0
	case "handoff_delay_ms":
		if r.HandoffDelayMs == nil {
			return 0, false
		}
		return *r.HandoffDelayMs, true
	case "lus_per_handoff":
		return r.LUsPerHandoff, len(r.Handoffs) > 0
	case "gratuitous_loss_pct":
		return r.GratuitousLossPct, r.Sent > 0
	}
	return 0, false
}

// Fig315Cells reads every bar from the runs under cfg.Out.
func Fig315Cells(cfg ResultsConfig) []Fig315Cell {
	var cells []Fig315Cell
	for _, m := range fig315Metrics {
		for _, tr := range cfg.fig315().Traffics {
			for _, mo := range cfg.fig315Modes() {
				c := Fig315Cell{Metric: m.key, Mode: mo, Traffic: tr, Thesis: m.thesis, Command: cfg.fig315Command(mo, tr)}
				var xs []float64
				for _, r := range readCycles(cfg.fig315Dir(mo, tr)) {
					if v, ok := cycleValue(r, m.key); ok {
						xs = append(xs, v)
					}
				}
				c.N = len(xs)
				if mean, half, ok := summary.MeanCI95(xs); ok {
					c.Mean = &mean
					if len(xs) >= 2 {
						c.CI95 = &half
					}
				}
				cells = append(cells, c)
			}
		}
	}
	return cells
}

// Table35 pools the CN -> MN datagrams of every cycled run by network: measured loss and
// one-way delay beside Table 3.5 (delay percentiles pooled as the means of the runs').
func Table35(cfg ResultsConfig) map[string]NetworkStats {
	acc := map[string][]NetworkStats{}
	for _, tr := range cfg.fig315().Traffics {
		for _, mo := range cfg.fig315Modes() {
			for _, r := range readCycles(cfg.fig315Dir(mo, tr)) {
				acc[r.L2.Shape] = append(acc[r.L2.Shape], r.L2)
				acc[r.L3.Shape] = append(acc[r.L3.Shape], r.L3)
			}
		}
	}
	out := map[string]NetworkStats{}
	for shape, rs := range acc {
		var n NetworkStats
		n.Shape = shape
		lost, sent := 0.0, 0
		var w float64
		for _, r := range rs {
			n.TimeS += r.TimeS
			sent += r.Sent
			lost += r.LossPct / 100 * float64(r.Sent)
			k := float64(r.Sent)
			n.DelayMean += k * r.DelayMean
			n.DelaySD += k * r.DelaySD
			n.Delay95 += k * r.Delay95
			n.Delay99 += k * r.Delay99
			w += k
		}
		n.Sent = sent
		if sent > 0 {
			n.LossPct = 100 * lost / float64(sent)
		}
		if w > 0 {
			n.DelayMean, n.DelaySD, n.Delay95, n.Delay99 = n.DelayMean/w, n.DelaySD/w, n.Delay95/w, n.Delay99/w
		}
		out[shape] = n
	}
	return out
}

// DrawFig315 writes OUT/fig-3.15.png: one panel per metric, groups traffic, bars modes, ▲ the
// thesis's natural value (delay, loss), least handoff delay and one LU.
func DrawFig315(cfg ResultsConfig, cells []Fig315Cell) error {
	trs := cfg.fig315().Traffics
	modes := cfg.fig315Modes()
	var panels []plots.BarPanel
	for _, m := range fig315Metrics {
		var series []plots.BarSeries
		for _, mo := range modes {
			s := plots.BarSeries{Label: mo, Values: nans(len(trs)), CI: nans(len(trs)), Ref: nans(len(trs))}
			for _, c := range cells {
				i := slices.Index(trs, c.Traffic)
				if c.Metric != m.key || c.Mode != mo || i < 0 {
					continue
				}
				if c.Mean != nil {
					s.Values[i] = math.Max(*c.Mean, 0) // bars from zero; the table has the sign
				}
				if c.CI95 != nil {
					s.CI[i] = *c.CI95
				}
				s.Ref[i] = c.Thesis
			}
			series = append(series, s)
		}
		panels = append(panels, plots.BarPanel{Title: "Fig. 3.15 " + m.title, YLabel: m.unit, Groups: trs, Series: series})
	}
	return plots.GroupedBarPanels(filepath.Join(cfg.Out, "fig-3.15.png"), panels)
}

// Fig315Markdown is results.md's section 3.3.
func Fig315Markdown(cfg ResultsConfig, cells []Fig315Cell, table map[string]NetworkStats, drawErr error) string {
	var b strings.Builder
	f := cfg.fig315()
	fmt.Fprintf(&b, "## Thesis 3.3: WiFi and 3G, a handoff every %v (Table 3.5, fig. 3.15, eq. 5)\n\n", f.Cycle)
	fmt.Fprintf(&b, "The MN starts on WiFi (R2, `wifi`: 0.26 %% loss, 33 ± 26 ms one way) and hands off to 3G (R3, `3g`: 10.1 %%, "+
		"112 ± 50 ms) and back every %v, %v of overlap each time, through a %v flow (thesis: 75 s, 8 handoffs, 10 runs). "+
		"Delay and loss are the CN -> MN datagrams' (both captures, one clock); gratuitous loss is the loss above eq. 5's "+
		"natural loss from the time actually spent in each network; LUs and handoff delay are counted in the overlap.\n\n",
		f.Cycle, f.Leave-f.Enter, f.Duration)
	if drawErr != nil {
		fmt.Fprintf(&b, "Not drawn: %v\n\n", drawErr)
	} else {
		b.WriteString("![Fig. 3.15](fig-3.15.png)\n\n")
	}
	trs, modes := f.Traffics, cfg.fig315Modes()
	b.WriteString("| metric | traffic | " + strings.Join(modes, " | ") + " | thesis |\n|---|---|" + strings.Repeat("---|", len(modes)+1) + "\n")
	for _, m := range fig315Metrics {
		for _, tr := range trs {
			row := []string{m.title + " (" + m.unit + ")", tr}
			for _, mo := range modes {
				txt := ""
				for _, c := range cells {
					if c.Metric == m.key && c.Mode == mo && c.Traffic == tr {
						switch {
						case c.Mean == nil:
							txt = "- (n=0)"
						case c.CI95 != nil:
							txt = fmt.Sprintf("%s ± %s (n=%d)", num(*c.Mean), num(*c.CI95), c.N)
						default:
							txt = fmt.Sprintf("%s (n=%d)", num(*c.Mean), c.N)
						}
					}
				}
				row = append(row, txt)
			}
			row = append(row, map[string]string{"delay_ms": "natural 70.92 (+~20 measured)", "handoff_delay_ms": ">= 145 (mean RTT), < 2 RTT",
				"lus_per_handoff": "close to 1", "gratuitous_loss_pct": "soft ~0, hard > 0 (natural 4.98 %)"}[m.key])
			b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		}
	}
	b.WriteString("\nTable 3.5 measured through the link emulator (every run's CN -> MN datagrams, by the network the MN was in " +
		"when each was sent; delay percentiles are the runs' weighted by datagrams):\n\n")
	b.WriteString("| network | loss % | delay mean | sd | 95 % | 99 % | datagrams | thesis (loss, mean, sd, 95 %, 99 %) |\n|---|---|---|---|---|---|---|---|\n")
	for _, shape := range []string{"wifi", "3g"} {
		th := thesisTable35[shape]
		n, ok := table[shape]
		if !ok {
			fmt.Fprintf(&b, "| %s | - | - | - | - | - | 0 | %g, %g, %g, %g, %g |\n", shape, th[0], th[1], th[2], th[3], th[4])
			continue
		}
		fmt.Fprintf(&b, "| %s | %.2f | %.1f | %.1f | %.1f | %.1f | %d | %g, %g, %g, %g, %g |\n", shape, n.LossPct, n.DelayMean, n.DelaySD,
			n.Delay95, n.Delay99, n.Sent, th[0], th[1], th[2], th[3], th[4])
	}
	b.WriteString("\nRerun a cell: `" + cfg.fig315Command("MODE", "TRAFFIC") + "`\n")
	return b.String()
}
