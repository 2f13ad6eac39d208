package lab

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"ilnp/lab/plots"
	"ilnp/lab/summary"
)

// The congestion-control axis of a matrix (seed 002 s.6.2, figs. 17-19).

// variantMetrics are the seed's three figures: data transferred, retransmissions, lost packets.
var variantMetrics = []struct{ key, title, unit, fig string }{
	{"tcp_bytes", "Data transferred", "MB", "17"},
	{"tcp_retransmissions", "Retransmissions", "segments", "18"},
	{"tcp_lost", "Lost packets", "segments", "19"},
}

func cellSuffix(congestion string) string {
	if congestion == "" {
		return ""
	}
	return "-" + congestion
}

// cellDir is where one cell goes: a TCP cell of a --congestions matrix to tcp-NAME.
func (m MatrixConfig) cellDir(sc, mo, tr, congestion string) string {
	return CellDir(m.Out, sc, mo, tr+cellSuffix(congestion))
}

// congestionsFor is a traffic kind's congestion axis ("": the traffic's own, no suffix).
func (m MatrixConfig) congestionsFor(tr string) []string {
	if len(m.Congestions) == 0 || Traffics[tr].UDP {
		return []string{""}
	}
	return m.Congestions
}

// dir is the cell the per-traffic tables and overlays show: cubic (the thesis's) when it is
// on the axis, else the axis's first.
func (m MatrixConfig) dir(sc, mo, tr string) string {
	cs := m.congestionsFor(tr)
	pick := cs[0]
	if slices.Contains(cs, "cubic") {
		pick = "cubic"
	}
	return m.cellDir(sc, mo, tr, pick)
}

func (m MatrixConfig) validCongestions() error {
	if len(m.Congestions) == 0 {
		return nil
	}
	if !slices.Contains(m.Traffics, "tcp") {
		return fmt.Errorf("--congestions applies to TCP traffic: add tcp to --traffics")
	}
	seen := map[string]bool{}
	for _, c := range m.Congestions {
		if c == "" || seen[c] {
			return fmt.Errorf("--congestions: empty or repeated %q (want a list of %s)", c, congestionList())
		}
		seen[c] = true
	}
	return nil
}

// variantGroups are the figures' x groups: scenario x mode.
func (m MatrixConfig) variantGroups() (labels []string, keys [][2]string) {
	for _, sc := range m.Scenarios {
		for _, mo := range m.Modes {
			labels = append(labels, sc+"\n"+mo)
			keys = append(keys, [2]string{sc, mo})
		}
	}
	return labels, keys
}

func (m MatrixConfig) variantSummary(sc, mo, co string) (summary.Summary, bool) {
	s, err := summary.Read(filepath.Join(m.cellDir(sc, mo, "tcp", co), "summary.json"))
	return s, err == nil
}

func meanOf(s summary.Summary, ok bool, key string) (mean, ci float64) {
	mean, ci = math.NaN(), math.NaN()
	if !ok {
		return
	}
	if v := s.Mean.Get(key); v != nil {
		mean = *v
	}
	if v := s.CI95.Get(key); v != nil {
		ci = *v
	}
	return
}

// writeVariantPlots draws OUT/cc-{tcp_bytes,tcp_retransmissions,tcp_lost}.png.
func writeVariantPlots(m MatrixConfig) {
	if len(m.Congestions) == 0 {
		return
	}
	labels, keys := m.variantGroups()
	for _, mt := range variantMetrics {
		scale := 1.0
		if mt.key == "tcp_bytes" {
			scale = 1e-6
		}
		var series []plots.BarSeries
		for _, co := range m.Congestions {
			bs := plots.BarSeries{Label: co}
			for _, k := range keys {
				s, ok := m.variantSummary(k[0], k[1], co)
				mean, ci := meanOf(s, ok, mt.key)
				bs.Values, bs.CI = append(bs.Values, mean*scale), append(bs.CI, ci*scale)
			}
			series = append(series, bs)
		}
		title := fmt.Sprintf("%s per TCP variant (%s profile, reps: %d, 95 %% CI; cf. seed 002 fig. %s)", mt.title, m.Profile.Name, m.Reps, mt.fig)
		_ = plots.GroupedBars(filepath.Join(m.Out, "cc-"+mt.key+".png"), title, mt.title+" ("+mt.unit+")", labels, series)
	}
}

// VariantsSection is the report's TCP-variants part: the three figures as tables (rows
// scenario and mode, columns variants), what the BPF programs did, and the seed's findings
// beside ours.
func VariantsSection(m MatrixConfig) string {
	if len(m.Congestions) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## TCP variants (seed 002 s.6.2, figs. 17-19)\n\n")
	fmt.Fprintf(&b, "Each TCP cell ran once per congestion control (iperf3 -C; hybla and veno are lab/cc's BPF "+
		"struct_ops programs, registered for the run and unregistered after it). Cells: mean ± 95 %% CI, reps per cell: %d. "+
		"The tcp tables above show the %s cells.\n\n", m.Reps, filepath.Base(m.dir(m.Scenarios[0], m.Modes[0], "tcp")))
	_, keys := m.variantGroups()
	for _, mt := range variantMetrics {
		fmt.Fprintf(&b, "### %s (fig. %s; cc-%s.png)\n\n| scenario | mode |", mt.title, mt.fig, mt.key)
		for _, co := range m.Congestions {
			fmt.Fprintf(&b, " %s |", co)
		}
		b.WriteString("\n|---|---|" + strings.Repeat("---|", len(m.Congestions)) + "\n")
		for _, k := range keys {
			fmt.Fprintf(&b, "| %s | %s |", Scenarios[k[0]].Title, k[1])
			for _, co := range m.Congestions {
				if s, ok := m.variantSummary(k[0], k[1], co); ok {
					fmt.Fprintf(&b, " %s |", MeanCI(s, mt.key))
				} else {
					b.WriteString(" failed |")
				}
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	b.WriteString(m.bpfTable(keys))
	b.WriteString(m.seedComparison(keys))
	return b.String()
}

// bpfTable sums the BPF programs' rep-N/cc.json over each cell's reps.
func (m MatrixConfig) bpfTable(keys [][2]string) string {
	var rows []string
	for _, co := range m.Congestions {
		for _, k := range keys {
			var acks, losses, random, congestive, steps, bad, grew uint64
			var maxCwnd, rho uint64
			found := 0
			for rep := 1; rep <= m.Reps; rep++ {
				raw, err := os.ReadFile(filepath.Join(m.cellDir(k[0], k[1], "tcp", co), fmt.Sprintf("rep-%d", rep), "cc.json"))
				var r CongestionRecord
				if err != nil || json.Unmarshal(raw, &r) != nil {
					continue
				}
				found++
				c := r.Counters
				acks, losses, random, congestive = acks+c["acks"], losses+c["losses"], random+c["losses_random"], congestive+c["losses_congestive"]
				maxCwnd, rho = max(maxCwnd, c["max_cwnd"]), max(rho, c["last_rho_16ths"])
				steps, grew, bad = steps+uint64(r.Replay.Steps), grew+uint64(r.Replay.Grew), bad+uint64(len(r.Replay.Mismatches))
			}
			if found == 0 {
				continue
			}
			rhoText := "-"
			if co == "hybla" {
				rhoText = fmt.Sprintf("%.2f", float64(rho)/16)
			}
			lossText := fmt.Sprint(losses)
			if co == "veno" {
				lossText = fmt.Sprintf("%d (%d random, %d congestive)", losses, random, congestive)
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %s | %d | %d | %s | %d | %s | %d (%d grew) | %d |", co, Scenarios[k[0]].Title, k[1],
				found, acks, lossText, maxCwnd, rhoText, steps, grew, bad))
		}
	}
	if len(rows) == 0 {
		return ""
	}
	return "### The BPF programs in these runs\n\nCounters summed over the reps (both ends' sockets that chose the " +
		"algorithm), and the first steps each run traced replayed through lab/cc/model (inputs from the trace, outputs " +
		"compared; a mismatch would mean the BPF arithmetic and the model differ).\n\n" +
		"| variant | scenario | mode | reps | growth ACKs | losses (ssthresh calls) | max cwnd | rho (Hybla, largest) | replayed steps | mismatches |\n" +
		"|---|---|---|---|---|---|---|---|---|---|\n" + strings.Join(rows, "\n") + "\n\n"
}

// seedComparison puts seed 002 s.6.2's findings (its figures are bar charts without printed
// values; these are its text's statements) beside what these cells show.
func (m MatrixConfig) seedComparison(keys [][2]string) string {
	has := func(c string) bool { return slices.Contains(m.Congestions, c) }
	mean := func(sc, mo, co, key string) float64 {
		s, ok := m.variantSummary(sc, mo, co)
		v, _ := meanOf(s, ok, key)
		return v
	}
	// count cells where cond holds over cells where both values exist.
	count := func(a, bb, key string, cond func(x, y float64) bool, only func(sc, mo string) bool) string {
		n, yes := 0, 0
		for _, k := range keys {
			if only != nil && !only(k[0], k[1]) {
				continue
			}
			x, y := mean(k[0], k[1], a, key), mean(k[0], k[1], bb, key)
			if math.IsNaN(x) || math.IsNaN(y) {
				continue
			}
			n++
			if cond(x, y) {
				yes++
			}
		}
		if n == 0 {
			return "no cell measured"
		}
		return fmt.Sprintf("%d of %d cells", yes, n)
	}
	need := func(cs ...string) string {
		for _, c := range cs {
			if !has(c) {
				return "not measured (needs " + strings.Join(cs, " and ") + " in --congestions)"
			}
		}
		return ""
	}
	gt := func(x, y float64) bool { return x > y }
	lt := func(x, y float64) bool { return x < y }
	wan := func(sc, _ string) bool { return sc == "wan-lan" || sc == "wan-wan" }
	row := func(claim, ours string) string { return "| " + claim + " | " + ours + " |\n" }
	var b strings.Builder
	b.WriteString("### Beside the seed\n\nSeed 002 gives figs. 17-19 as bar charts without printed values; its text's " +
		"findings and ours (cell means compared, reps per cell: " + fmt.Sprint(m.Reps) + "; with so few reps a difference " +
		"inside the 95 % intervals above is not significant):\n\n| seed 002 s.6.2 | ours |\n|---|---|\n")
	ours := need("cubic", "hybla")
	if ours == "" {
		ours = "Hybla sent more than CUBIC in " + count("hybla", "cubic", "tcp_bytes", gt, nil) +
			"; on WAN-to-LAN and WAN-to-WAN in " + count("hybla", "cubic", "tcp_bytes", gt, wan)
	}
	b.WriteString(row("Hybla sends slightly more data in most cases, especially WAN to LAN and WAN to WAN (6.2.1)", ours))
	ours = need("cubic", "veno")
	if ours == "" {
		least, n := 0, 0
		for _, k := range keys {
			v := mean(k[0], k[1], "veno", "tcp_bytes")
			if math.IsNaN(v) {
				continue
			}
			n++
			isMin := true
			for _, co := range m.Congestions {
				if o := mean(k[0], k[1], co, "tcp_bytes"); co != "veno" && !math.IsNaN(o) && o < v {
					isMin = false
				}
			}
			if isMin {
				least++
			}
		}
		ours = fmt.Sprintf("Veno sent the least of the variants in %d of %d cells", least, n)
	}
	b.WriteString(row("Veno sends the least data in almost every case (6.2.1)", ours))
	ours = need("cubic", "veno")
	if ours == "" {
		ours = "Veno retransmitted less than CUBIC in " + count("veno", "cubic", "tcp_retransmissions", lt, nil)
	}
	b.WriteString(row("Veno has fewer retransmissions in most cases, especially MIPv6 with RO and ILNP hard handoff (6.2.2)", ours))
	ours = need("cubic", "hybla")
	if ours == "" {
		ours = "Hybla lost fewer than CUBIC in " + count("hybla", "cubic", "tcp_lost", lt, nil) + ", more in " +
			count("hybla", "cubic", "tcp_lost", gt, nil)
	}
	b.WriteString(row("Hybla loses about as many packets as CUBIC (6.2.3)", ours))
	ours = need("cubic", "veno")
	if ours == "" {
		ours = "Veno lost fewer than CUBIC in " + count("veno", "cubic", "tcp_lost", lt, nil)
	}
	b.WriteString(row("Veno loses slightly fewer (6.2.3)", ours))
	var soft []string
	for _, co := range m.Congestions {
		worst := math.NaN()
		for _, k := range keys {
			if k[1] != "ilnp-soft" {
				continue
			}
			if v := mean(k[0], k[1], co, "tcp_lost"); !math.IsNaN(v) && (math.IsNaN(worst) || v > worst) {
				worst = v
			}
		}
		if !math.IsNaN(worst) {
			soft = append(soft, fmt.Sprintf("%s at most %.1f", co, worst))
		}
	}
	ours = "not measured (needs ilnp-soft in --modes)"
	if len(soft) > 0 {
		ours = "mean lost segments over the ilnp-soft cells: " + strings.Join(soft, ", ")
	}
	b.WriteString(row("ILNP soft handoff: packet loss almost zero for every variant (6.2.3)", ours))
	b.WriteString("\n")
	return b.String()
}
