package lab

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"ilnp/lab/analysis"
	"ilnp/lab/plots"
	"ilnp/lab/summary"
)

// The thesis's evaluation figures as `ilnp-lab results` draws them (issue 27): figs. 4.4-4.7
// (UDP VoIP and HD: throughput and loss in the 5-s window, handoff delay) and 5.4-5.11 (TCP:
// data rate over the flow per scenario, data volume, retransmissions, lost segments, handoff
// delay), each a grouped bar chart (groups: scenarios; bars: modes) with 95 % error bars and
// the thesis's value beside a bar where the thesis states one, or a rate plot of one
// repetition per mode. Cells come from OUT/runs/SCENARIO-TRAFFIC/MODE/summary.json.

// FigurePanel is one chart of a figure: a metric of one traffic kind.
type FigurePanel struct {
	Title, Traffic, Key, YLabel string
	// Scale divides the summary's value (e.g. 1e3 for kbit/s).
	Scale float64
	// Thesis is the thesis's value for a bar (NaN: it states none).
	Thesis func(scenario, mode string) float64
	// ThesisSource says where Thesis comes from.
	ThesisSource string
}

// FigureSpec is one of the thesis's figures.
type FigureSpec struct {
	ID, Caption string
	Panels      []FigurePanel
	// RateScenario and RateTraffic make a rate-over-time figure (5.4-5.7) instead of bars.
	RateScenario, RateTraffic string
}

// File is the figure's PNG name (fig-4.4.png).
func (f FigureSpec) File() string { return "fig-" + f.ID + ".png" }

// Traffics are the traffic kinds the figure needs.
func (f FigureSpec) Traffics() []string {
	if f.RateTraffic != "" {
		return []string{f.RateTraffic}
	}
	var out []string
	for _, p := range f.Panels {
		if !slices.Contains(out, p.Traffic) {
			out = append(out, p.Traffic)
		}
	}
	return out
}

// thesisColumn maps a mode to Tables 6.5-6.12's columns.
var thesisColumn = map[string]int{"mipv6": 0, "mipv6-ro": 1, "ilnp-hard": 2, "ilnp-soft": 3}

// ThesisHandoffDelay is the thesis's no-loss handoff delay (Tables 6.5, 6.7, 6.9, 6.11, which
// match figs. 4.6, 4.7 and 5.11: ILNP ~1 RTT, MIPv6 ~1 s + the RTT to the HA, RO longer).
func ThesisHandoffDelay(scenario, mode string) float64 {
	col, ok := thesisColumn[mode]
	idx := slices.Index(ScenarioNames, scenario)
	if !ok || idx < 0 {
		return math.NaN()
	}
	for _, t := range analysis.DelayTablesPrinted {
		if t.Delay && int(t.Scenario) == idx {
			if v, err := strconv.ParseFloat(t.Cells[0][col], 64); err == nil {
				return v
			}
		}
	}
	return math.NaN()
}

func nan(string, string) float64 { return math.NaN() }

// ThesisFigures are the figures of chapters 4 and 5 in the thesis's order.
var ThesisFigures = []FigureSpec{
	{ID: "4.4", Caption: "Throughput for a 5 second period across the handoff period (UDP)", Panels: []FigurePanel{
		{"(a) VoIP", "udp-voip", "throughput_window_bps", "kbit/s", 1e3, offeredForSoft(64), "4.4.1(a): ILNP soft close to the offered load (64 kbit/s)"},
		{"(b) HD video", "udp-hd", "throughput_window_bps", "kbit/s", 1e3, offeredForSoft(2350), "4.4.1(a): ILNP soft close to the offered load (2350 kbit/s)"},
	}},
	{ID: "4.5", Caption: "Packet loss for a 5 second period across the handoff period (UDP)", Panels: []FigurePanel{
		{"(a) VoIP", "udp-voip", "udp_lost_window", "datagrams", 1, zeroForSoft, "fig. 4.5: ILNP soft handoff has zero loss"},
		{"(b) HD video", "udp-hd", "udp_lost_window", "datagrams", 1, zeroForSoft, "fig. 4.5: ILNP soft handoff has zero loss"},
	}},
	{ID: "4.6", Caption: "Handoff delay for the HD video flows", Panels: []FigurePanel{
		{"HD video", "udp-hd", "handoff_delay_ms", "ms", 1, ThesisHandoffDelay, "Tables 6.5-6.11, no loss (ILNP ~1 RTT, MIPv6 ~1 s + RTT to the HA)"},
	}},
	{ID: "4.7", Caption: "Handoff delay for the VoIP flows", Panels: []FigurePanel{
		{"VoIP", "udp-voip", "handoff_delay_ms", "ms", 1, ThesisHandoffDelay, "Tables 6.5-6.11, no loss"},
	}},
	{ID: "5.4", Caption: "TCP data rate at the MN, LAN to LAN handoff", RateScenario: "lan-lan", RateTraffic: "tcp"},
	{ID: "5.5", Caption: "TCP data rate at the MN, LAN to WAN handoff", RateScenario: "lan-wan", RateTraffic: "tcp"},
	{ID: "5.6", Caption: "TCP data rate at the MN, WAN to LAN handoff", RateScenario: "wan-lan", RateTraffic: "tcp"},
	{ID: "5.7", Caption: "TCP data rate at the MN, WAN to WAN handoff", RateScenario: "wan-wan", RateTraffic: "tcp"},
	{ID: "5.8", Caption: "Total data transfer volume during the TCP flow", Panels: []FigurePanel{
		{"TCP", "tcp", "tcp_bytes", "MB", 1e6, nan, "the thesis prints no figure in its text"},
	}},
	{ID: "5.9", Caption: "Retransmissions attempted at the CN", Panels: []FigurePanel{
		{"TCP", "tcp", "tcp_retransmissions", "segments", 1, nan, "the thesis prints no figure in its text"},
	}},
	{ID: "5.10", Caption: "Lost packets in each flow", Panels: []FigurePanel{
		{"TCP", "tcp", "tcp_lost", "segments", 1, oneWindowLost, "5.3.3: ~0 for ILNP soft; one window, 320*1024/1400 ~ 234, for ILNP hard and MIPv6 (medians)"},
	}},
	{ID: "5.11", Caption: "Handoff delay for the TCP flows", Panels: []FigurePanel{
		{"TCP", "tcp", "handoff_delay_ms", "ms", 1, ThesisHandoffDelay, "Tables 6.5-6.11, no loss"},
	}},
}

func offeredForSoft(kbps float64) func(string, string) float64 {
	return func(_, mode string) float64 {
		if mode == "ilnp-soft" {
			return kbps
		}
		return math.NaN()
	}
}

func zeroForSoft(_, mode string) float64 {
	if mode == "ilnp-soft" {
		return 0
	}
	return math.NaN()
}

func oneWindowLost(_, mode string) float64 {
	switch mode {
	case "ilnp-soft":
		return 0
	case "ilnp-hard", "mipv6", "mipv6-ro":
		return 234
	}
	return math.NaN()
}

// FigureCell is one bar of a figure (results.json "figures").
type FigureCell struct {
	Figure   string   `json:"figure"`
	Panel    string   `json:"panel"`
	Scenario string   `json:"scenario"`
	Mode     string   `json:"mode"`
	Traffic  string   `json:"traffic"`
	Key      string   `json:"key"`
	Unit     string   `json:"unit"`
	Mean     *float64 `json:"mean"`
	CI95     *float64 `json:"ci95,omitempty"`
	N        int      `json:"n"`
	Thesis   *float64 `json:"thesis,omitempty"`
	Command  string   `json:"command,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// FigureRuns says where a cell's runs are and which command made them.
type FigureRuns struct {
	Dir     func(scenario, mode, traffic string) string
	Command func(scenario, mode, traffic string) string
}

// ResultsRunDir is results' layout: OUT/runs/SCENARIO-TRAFFIC/MODE.
func ResultsRunDir(out string) func(scenario, mode, traffic string) string {
	return func(sc, mo, tr string) string { return filepath.Join(out, "runs", sc+"-"+tr, mo) }
}

// FigureCells reads the bars of one figure.
func FigureCells(f FigureSpec, scenarios, modes []string, runs FigureRuns) []FigureCell {
	var cells []FigureCell
	for _, p := range f.Panels {
		for _, sc := range scenarios {
			for _, mo := range modes {
				c := FigureCell{Figure: f.ID, Panel: p.Title, Scenario: sc, Mode: mo, Traffic: p.Traffic, Key: p.Key, Unit: p.YLabel}
				if runs.Command != nil {
					c.Command = runs.Command(sc, mo, p.Traffic)
				}
				if v := p.Thesis(sc, mo); !math.IsNaN(v) {
					c.Thesis = &v
				}
				s, err := summary.Read(filepath.Join(runs.Dir(sc, mo, p.Traffic), "summary.json"))
				if err != nil {
					c.Error = "no runs: " + err.Error()
					cells = append(cells, c)
					continue
				}
				var xs []float64
				for _, r := range s.Runs {
					if v := r.Values()[p.Key]; v != nil {
						xs = append(xs, *v/p.Scale)
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

// DrawFigure writes OUT/fig-ID.png from its cells (bars) or from rep 1 of each mode's runs
// (rate figures).
func DrawFigure(out string, f FigureSpec, scenarios, modes []string, cells []FigureCell, runs FigureRuns) error {
	path := filepath.Join(out, f.File())
	if f.RateScenario != "" {
		var rate []plots.Series
		var first *plots.Marks
		for _, mo := range modes {
			r, err := loadResult(filepath.Join(runs.Dir(f.RateScenario, mo, f.RateTraffic), "rep-1", "result.json"))
			if err != nil {
				continue
			}
			if first == nil {
				m := plotMarks(r)
				m.WindowStart, m.WindowEnd = 0, 0
				first = &m
			}
			rate = append(rate, plots.Series{Label: mo, Points: r.Rate})
		}
		if first == nil {
			return fmt.Errorf("fig. %s: no runs of %s %s", f.ID, f.RateScenario, f.RateTraffic)
		}
		return plots.Rate(path, fmt.Sprintf("Fig. %s: %s (rep 1 of each mode)", f.ID, f.Caption), rate, *first)
	}
	var panels []plots.BarPanel
	for _, p := range f.Panels {
		groups := make([]string, len(scenarios))
		for i, sc := range scenarios {
			groups[i] = Scenarios[sc].Title
		}
		var series []plots.BarSeries
		for _, mo := range modes {
			s := plots.BarSeries{Label: mo, Values: nans(len(scenarios)), CI: nans(len(scenarios)), Ref: nans(len(scenarios))}
			for _, c := range cells {
				if c.Panel != p.Title || c.Mode != mo {
					continue
				}
				i := slices.Index(scenarios, c.Scenario)
				if i < 0 {
					continue
				}
				if c.Mean != nil {
					s.Values[i] = *c.Mean
				}
				if c.CI95 != nil {
					s.CI[i] = *c.CI95
				}
				if c.Thesis != nil {
					s.Ref[i] = *c.Thesis
				}
			}
			series = append(series, s)
		}
		title := fmt.Sprintf("Fig. %s %s", f.ID, p.Title)
		if len(f.Panels) == 1 {
			title = fmt.Sprintf("Fig. %s: %s", f.ID, f.Caption)
		}
		panels = append(panels, plots.BarPanel{Title: title, YLabel: p.YLabel, Groups: groups, Series: series})
	}
	return plots.GroupedBarPanels(path, panels)
}

func nans(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = math.NaN()
	}
	return v
}

// FiguresMarkdown is results.md's figures section: each figure, its table (mean ± 95 %
// half-width (n), the thesis's value in brackets) and the command that reruns each cell.
func FiguresMarkdown(figs []FigureSpec, scenarios, modes []string, cells []FigureCell, runs FigureRuns, drawErr map[string]string) string {
	var b strings.Builder
	b.WriteString("## The thesis's figures (chapters 4 and 5)\n\n")
	b.WriteString("Bars: mean with its 95 % error bar (Student t over the repetitions; none with one); ▲ the thesis's value where " +
		"its text or Tables 6.5-6.11 state one (no mark: the thesis draws the bar without printing its value). Cells: " +
		"mean ± half-width (n) [thesis].\n\n")
	for _, f := range figs {
		fmt.Fprintf(&b, "### Fig. %s: %s\n\n", f.ID, f.Caption)
		if e, ok := drawErr[f.ID]; ok {
			fmt.Fprintf(&b, "Not drawn: %s\n\n", e)
		} else {
			fmt.Fprintf(&b, "![Fig. %s](%s)\n\n", f.ID, f.File())
		}
		if f.RateScenario != "" {
			fmt.Fprintf(&b, "Rep 1 of each mode. Rerun a mode: `%s`\n\n", runs.Command(f.RateScenario, "MODE", f.RateTraffic))
			continue
		}
		for _, p := range f.Panels {
			if len(f.Panels) > 1 {
				fmt.Fprintf(&b, "%s, %s (%s). ", p.Title, p.Key, p.YLabel)
			} else {
				fmt.Fprintf(&b, "%s (%s). ", p.Key, p.YLabel)
			}
			fmt.Fprintf(&b, "Thesis: %s.\n\n| scenario | %s |\n|---|%s\n", p.ThesisSource, strings.Join(modes, " | "), strings.Repeat("---|", len(modes)))
			for _, sc := range scenarios {
				row := []string{Scenarios[sc].Title}
				for _, mo := range modes {
					row = append(row, figureCellText(cells, f.ID, p.Title, sc, mo))
				}
				b.WriteString("| " + strings.Join(row, " | ") + " |\n")
			}
			b.WriteString("\n")
		}
		if len(f.Panels) > 0 {
			fmt.Fprintf(&b, "Rerun a cell: `%s`\n\n", runs.Command("SCENARIO", "MODE", strings.Join(f.Traffics(), "|")))
		}
	}
	return b.String()
}

func figureCellText(cells []FigureCell, fig, panel, sc, mo string) string {
	for _, c := range cells {
		if c.Figure != fig || c.Panel != panel || c.Scenario != sc || c.Mode != mo {
			continue
		}
		var s string
		switch {
		case c.Error != "":
			s = "-"
		case c.Mean == nil:
			s = "- (n=0)"
		case c.CI95 != nil:
			s = fmt.Sprintf("%s ± %s (n=%d)", num(*c.Mean), num(*c.CI95), c.N)
		default:
			s = fmt.Sprintf("%s (n=%d)", num(*c.Mean), c.N)
		}
		if c.Thesis != nil {
			s += fmt.Sprintf(" [%s]", num(*c.Thesis))
		}
		return s
	}
	return ""
}
