package analysis

import (
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Options parameterise the report. The thesis's own inputs are fixed; what
// can vary is what we put beside them: our message sizes, our LU timer and
// the retransmission budgets to tabulate.
type Options struct {
	MIPv6Sizes MIPv6Sizes // thesis sizes unless a MIPv6 baseline is measured
	ThesisILNP ILNPSizes  // the thesis's LU/LU-ACK (86/86)
	OurILNP    ILNPSizes  // ours: computed from LUWire or measured from captures
	OurLabel   string     // how OurILNP was obtained, printed in the report
	RTO        RTOPolicy  // our adaptive LU timer
	Attempts   []int      // retransmission budgets for the success tables
	MaxNodes   int        // MNs and CNs range over 1..MaxNodes (100 in Figs. 6.13-6.14)
}

// DefaultOptions uses the thesis's sizes, our LU size computed from
// DefaultLUWire, DefaultRTOPolicy and attempts 1, 2, 3 and 7.
func DefaultOptions() Options {
	w := DefaultLUWire()
	return Options{
		MIPv6Sizes: ThesisMIPv6Sizes(),
		ThesisILNP: ThesisILNPSizes(),
		OurILNP:    w.Sizes(),
		OurLabel: fmt.Sprintf("computed, IP layer: IPv6 %d + nonce Destination Options %d + ICMPv6 LU header %d + %d per locator x %d = %d bytes",
			w.IPv6Header, w.NonceOptionHeader(), w.ICMPHeader, w.PerLocator, w.Locators, w.Size()),
		RTO:      DefaultRTOPolicy(),
		Attempts: []int{1, 2, 3, 7},
		MaxNodes: 100,
	}
}

// Write renders the analysis with DefaultOptions into outDir (created if
// missing): CSV files, PNG plots and analysis.md.
func Write(outDir string) error { return WriteWith(outDir, DefaultOptions()) }

// WriteWith renders the analysis with opt into outDir.
func WriteWith(outDir string, opt Options) error {
	if opt.MaxNodes < 1 {
		return fmt.Errorf("analysis: MaxNodes %d, want at least 1", opt.MaxNodes)
	}
	if len(opt.Attempts) == 0 {
		return errors.New("analysis: no retransmission budgets in Attempts")
	}
	for _, a := range opt.Attempts {
		if a < 1 {
			return fmt.Errorf("analysis: attempts %d, want at least 1", a)
		}
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("analysis: create output directory: %w", err)
	}
	steps := []struct {
		name string
		fn   func(string, Options) error
	}{
		{"success CSV", writeSuccessCSV},
		{"delay CSV", writeDelayCSV},
		{"adaptive timer CSV", writeRetryCSV},
		{"overhead CSV", writeOverheadCSV},
		{"success plots", plotSuccess},
		{"overhead plots", plotOverhead},
		{"markdown report", writeMarkdown},
	}
	for _, s := range steps {
		if err := s.fn(outDir, opt); err != nil {
			return fmt.Errorf("analysis: %s: %w", s.name, err)
		}
	}
	return nil
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func pct(loss float64) string { return strconv.FormatFloat(loss*100, 'g', -1, 64) }

func f4(x float64) string { return strconv.FormatFloat(x, 'f', 6, 64) }

func writeSuccessCSV(dir string, opt Options) error {
	rows := [][]string{{"protocol", "old_loss_pct", "new_loss_pct", "attempts", "p_success", "p_rounded", "thesis_printed"}}
	for _, proto := range Protocols {
		for _, a := range opt.Attempts {
			g := SuccessGrid(proto, a)
			for i, old := range LossGrid {
				for j, nw := range LossGrid {
					printed := ""
					if a == 1 {
						printed = Table62Printed[proto][i][j]
					}
					rows = append(rows, []string{proto.Slug(), pct(old), pct(nw), strconv.Itoa(a),
						f4(g[i][j]), fmt.Sprintf("%.2f", g[i][j]), printed})
				}
			}
		}
	}
	return writeCSV(filepath.Join(dir, "success.csv"), rows)
}

func msf(d time.Duration) string { return Ms(d) }

func writeDelayCSV(dir string, _ Options) error {
	rows := [][]string{{"table", "scenario", "metric", "case", "column", "computed_ms", "thesis_printed"}}
	for _, t := range DelayTablesPrinted {
		in := ThesisInputs(t.Scenario)
		cells, metric := in.InterruptionTable(), "interruption"
		if t.Delay {
			cells, metric = in.DelayTable(), "handoff_delay"
		}
		for i, c := range LossCases {
			for j, col := range Columns {
				v := "N/A"
				if cells[i][j].OK {
					v = msf(cells[i][j].D)
				}
				rows = append(rows, []string{t.Number, t.Scenario.String(), metric, c.Slug(), col.Slug(), v, t.Cells[i][j]})
			}
		}
	}
	return writeCSV(filepath.Join(dir, "delay.csv"), rows)
}

// timers are the LU timers compared beyond the thesis, per scenario.
func timers(s Scenario, opt Options) []struct {
	name  string
	waits []time.Duration
	first time.Duration
} {
	in := ThesisInputs(s)
	attempts := max(opt.RTO.MaxAttempts, 1)
	newEst, oldEst := in.RTTMNCN, OldPathRTTMNCN(s)
	return []struct {
		name  string
		waits []time.Duration
		first time.Duration
	}{
		{"fixed Δ_I (thesis)", FixedSchedule(in.DeltaI, attempts), in.DeltaI},
		{"adaptive, new-path RTT", opt.RTO.Schedule(newEst), opt.RTO.RTO(newEst)},
		{"adaptive, old-path RTT", opt.RTO.Schedule(oldEst), opt.RTO.RTO(oldEst)},
	}
}

func writeRetryCSV(dir string, opt Options) error {
	rows := [][]string{{"scenario", "timer", "first_rto_ms", "new_loss_pct", "attempts", "p_success", "mean_delay_ms", "max_delay_ms",
		"mean_lus_sent", "delay_lu_lost_ms", "interruption_lu_lost_ms"}}
	for _, s := range Scenarios {
		in := ThesisInputs(s)
		base := in.RTTMNCN + in.TCN
		for _, t := range timers(s, opt) {
			adj := in
			adj.DeltaI = t.first
			d, _ := adj.HandoffDelay(ColILNPHard, UpdateLost)
			it, _ := adj.Interruption(ColILNPHard, UpdateLost)
			for _, loss := range LossGrid {
				p := PathFromLoss(0, loss).Exchanges(ILNPv6)[0].P()
				r := Retry(p, t.waits, base)
				rows = append(rows, []string{s.String(), t.name, msf(t.first), pct(loss), strconv.Itoa(len(t.waits) + 1),
					f4(r.PSuccess), fmt.Sprintf("%.3f", float64(r.MeanDelay)/1e6), msf(r.MaxDelay),
					fmt.Sprintf("%.4f", r.MeanTransmissions), msf(d), msf(it)})
			}
		}
	}
	return writeCSV(filepath.Join(dir, "retry_delay.csv"), rows)
}

func writeOverheadCSV(dir string, opt Options) error {
	rows := [][]string{{"mns", "cns",
		"mipv6_noro_packets", "mipv6_noro_bytes", "mipv6_ro_packets", "mipv6_ro_bytes",
		"ilnpv6_packets", "ilnpv6_bytes_thesis", "ilnpv6_bytes_ours"}}
	for mn := 1; mn <= opt.MaxNodes; mn++ {
		for cn := 1; cn <= opt.MaxNodes; cn++ {
			no := MIPv6NoROOverhead(mn, opt.MIPv6Sizes)
			ro := MIPv6ROOverhead(mn, cn, opt.MIPv6Sizes)
			il := ILNPv6Overhead(mn, cn, opt.ThesisILNP)
			ours := ILNPv6Overhead(mn, cn, opt.OurILNP)
			rows = append(rows, []string{strconv.Itoa(mn), strconv.Itoa(cn),
				strconv.Itoa(no.Packets), strconv.Itoa(no.Bytes), strconv.Itoa(ro.Packets), strconv.Itoa(ro.Bytes),
				strconv.Itoa(il.Packets), strconv.Itoa(il.Bytes), strconv.Itoa(ours.Bytes)})
		}
	}
	return writeCSV(filepath.Join(dir, "overhead.csv"), rows)
}

func savePlot(p *plot.Plot, dir, name string) error {
	return p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, name))
}

func plotSuccess(dir string, opt Options) error {
	// Table 6.2 as curves: success vs new-link loss, best and worst old link.
	p := plot.New()
	p.Title.Text = "Handoff success probability, one attempt (Table 6.2)"
	p.X.Label.Text = "new-link loss (%)"
	p.Y.Label.Text = "P(success)"
	var lines []any
	for _, proto := range Protocols {
		for _, oi := range []int{0, len(LossGrid) - 1} {
			xy := make(plotter.XYs, len(LossGrid))
			for j, nw := range LossGrid {
				xy[j].X = nw * 100
				xy[j].Y = PathFromLoss(LossGrid[oi], nw).Success(proto)
			}
			lines = append(lines, fmt.Sprintf("%s, old link %s%%", proto, pct(LossGrid[oi])), xy)
		}
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Left = true // bottom left: the curves all start high
	var ticks []plot.Tick
	for _, l := range LossGrid {
		ticks = append(ticks, plot.Tick{Value: l * 100, Label: pct(l)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if err := savePlot(p, dir, "success_probability.png"); err != nil {
		return err
	}

	// Beyond the thesis: success vs attempts at the worst grid point.
	worst := LossGrid[len(LossGrid)-1]
	maxA := 1
	for _, a := range opt.Attempts {
		maxA = max(maxA, a)
	}
	p = plot.New()
	p.Title.Text = fmt.Sprintf("Success with retransmissions, %s%% loss on old and new link", pct(worst))
	p.X.Label.Text = "attempts per exchange"
	p.Y.Label.Text = "P(success)"
	lines = lines[:0]
	for _, proto := range Protocols {
		xy := make(plotter.XYs, maxA)
		for a := 1; a <= maxA; a++ {
			xy[a-1].X = float64(a)
			xy[a-1].Y = PathFromLoss(worst, worst).SuccessWithRetries(proto, a)
		}
		lines = append(lines, proto.String(), xy)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Left = true
	return savePlot(p, dir, "success_retransmissions.png")
}

func plotOverhead(dir string, opt Options) error {
	n := opt.MaxNodes
	type series struct {
		name string
		f    func(mn, cn int) float64
	}
	pk := []series{
		{"MIPv6 without RO", func(mn, cn int) float64 { return float64(MIPv6NoROOverhead(mn, opt.MIPv6Sizes).Packets) }},
		{"MIPv6 with RO", func(mn, cn int) float64 { return float64(MIPv6ROOverhead(mn, cn, opt.MIPv6Sizes).Packets) }},
		{"ILNPv6", func(mn, cn int) float64 { return float64(ILNPv6Overhead(mn, cn, opt.ThesisILNP).Packets) }},
	}
	by := []series{
		{"MIPv6 without RO", func(mn, cn int) float64 { return float64(MIPv6NoROOverhead(mn, opt.MIPv6Sizes).Bytes) }},
		{"MIPv6 with RO", func(mn, cn int) float64 { return float64(MIPv6ROOverhead(mn, cn, opt.MIPv6Sizes).Bytes) }},
		{"ILNPv6 (thesis sizes)", func(mn, cn int) float64 { return float64(ILNPv6Overhead(mn, cn, opt.ThesisILNP).Bytes) }},
		{"ILNPv6 (our sizes)", func(mn, cn int) float64 { return float64(ILNPv6Overhead(mn, cn, opt.OurILNP).Bytes) }},
	}
	figs := []struct {
		file, title, y string
		ss             []series
		vsMN           bool
	}{
		{"fig6_13_packets_vs_mns.png", fmt.Sprintf("Overhead packets vs MNs (%d CNs each), Fig. 6.13", n), "packets", pk, true},
		{"fig6_13_packets_vs_cns.png", fmt.Sprintf("Overhead packets vs CNs per MN (%d MNs), Fig. 6.13", n), "packets", pk, false},
		{"fig6_14_bytes_vs_mns.png", fmt.Sprintf("Overhead bytes vs MNs (%d CNs each), Fig. 6.14", n), "bytes", by, true},
		{"fig6_14_bytes_vs_cns.png", fmt.Sprintf("Overhead bytes vs CNs per MN (%d MNs), Fig. 6.14", n), "bytes", by, false},
	}
	for _, fg := range figs {
		p := plot.New()
		p.Title.Text = fg.title
		p.Y.Label.Text = fg.y
		p.X.Label.Text = "number of CNs per MN"
		if fg.vsMN {
			p.X.Label.Text = "number of MNs"
		}
		var lines []any
		for _, s := range fg.ss {
			xy := make(plotter.XYs, n)
			for k := 1; k <= n; k++ {
				mn, cn := n, k
				if fg.vsMN {
					mn, cn = k, n
				}
				xy[k-1].X = float64(k)
				xy[k-1].Y = s.f(mn, cn)
			}
			lines = append(lines, s.name, xy)
		}
		if err := plotutil.AddLines(p, lines...); err != nil {
			return err
		}
		p.Legend.Left, p.Legend.Top = true, true
		if err := savePlot(p, dir, fg.file); err != nil {
			return err
		}
	}
	return nil
}

// mdTable renders a markdown table.
func mdTable(b *strings.Builder, header []string, rows [][]string) {
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(header)) + "\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	b.WriteString("\n")
}

func writeMarkdown(dir string, opt Options) error {
	var b strings.Builder
	b.WriteString("# Control-plane analysis of ILNPv6 and MIPv6 (thesis chapter 6)\n\n")
	b.WriteString("Computed by `lab/analysis` from the thesis's equations and inputs. Cells that differ from the " +
		"printed thesis value show the printed value in brackets and are listed under Errata.\n\n")

	// §6.2
	b.WriteString("## 6.2 Handoff success rate under loss\n\n")
	b.WriteString("Loss only on the old link (R1-HA, position 1 of Fig. 6.4) and the new link (R1-R3, position 2); " +
		"every other hop lossless (eq. 10). Eqs. 17-19:\n\n" +
		"- MIPv6 without RO: P = P_new^2 · P_old^2\n" +
		"- MIPv6 with RO: P = P_new^8 · P_old^6\n" +
		"- ILNPv6: P = P_new^2\n\n")
	b.WriteString("### Table 6.1. Individual probabilities under different packet loss rates\n\n")
	var rows [][]string
	for _, nw := range LossGrid {
		for _, old := range LossGrid {
			p := PathFromLoss(old, nw)
			rows = append(rows, []string{pct(nw), pct(old), fmt.Sprintf("%.2f", p.R1R3), fmt.Sprintf("%.2f", p.R1HA)})
		}
	}
	mdTable(&b, []string{"% loss, new link", "% loss, old link", "P_R1-R3 = P_R3-R1", "P_R1-HA = P_HA-R1"}, rows)

	b.WriteString("### Table 6.2. Probability of handoff success rate, under different loss conditions\n\n")
	header := []string{"Old \\ New link loss"}
	for _, nw := range LossGrid {
		header = append(header, pct(nw)+"%")
	}
	for k, proto := range Protocols {
		g := SuccessGrid(proto, 1)
		rows = rows[:0]
		for i, old := range LossGrid {
			r := []string{pct(old) + "%"}
			for j := range LossGrid {
				v := fmt.Sprintf("%.2f", g[i][j])
				if pr := Table62Printed[proto][i][j]; pr != v {
					v += " [printed " + pr + "]"
				}
				r = append(r, v)
			}
			rows = append(rows, r)
		}
		fmt.Fprintf(&b, "(%c) %s\n\n", 'A'+k, proto)
		mdTable(&b, header, rows)
	}

	b.WriteString("### Beyond the thesis: success with retransmissions\n\n")
	b.WriteString("Each request/response exchange (BU/BAck to the HA, HoTI/HoT, CoTI/CoT, BU/BAck to the CN, LU/LU-ACK) " +
		"is retried until it completes or the budget of attempts runs out; a lost request or a lost response costs one attempt, " +
		"attempts are independent: P = Π_exchanges (1 - (1 - p_exchange)^attempts). One attempt is eqs. 17-19.\n\n")
	for _, proto := range Protocols {
		h := []string{"old %", "new %"}
		for _, a := range opt.Attempts {
			h = append(h, fmt.Sprintf("%d attempt(s)", a))
		}
		rows = rows[:0]
		for _, old := range LossGrid {
			for _, nw := range LossGrid {
				r := []string{pct(old), pct(nw)}
				for _, a := range opt.Attempts {
					r = append(r, fmt.Sprintf("%.4f", PathFromLoss(old, nw).SuccessWithRetries(proto, a)))
				}
				rows = append(rows, r)
			}
		}
		fmt.Fprintf(&b, "%s\n\n", proto)
		mdTable(&b, h, rows)
	}
	b.WriteString("![success](success_probability.png)\n\n![retransmissions](success_retransmissions.png)\n\n")

	// §6.3
	b.WriteString("## 6.3 Handoff delay and interruption time with one lost signalling packet\n\n")
	b.WriteString("### Table 6.3. Summary of expressions for handoff delay\n\n")
	rr := "max[(RTT_MN-HA + RTT_HA-CN + T_HoT), (RTT_MN-CN + T_CoT)]"
	ro := "RTT_MN-HA + T_HA + RTT_MN-CN + T_CN + "
	mdTable(&b, []string{"Case", "MIPv6 no RO", "MIPv6 with RO", "ILNP hard", "ILNP soft"}, [][]string{
		{"No loss", "RTT_MN-HA + T_HA", ro + rr, "RTT_MN-CN + T_CN", "RTT_MN-CN + T_CN"},
		{"LU or BU loss", "RTT_MN-HA + T_HA + Δ_M", ro + "Δ_M + " + rr, "RTT_MN-CN + T_CN + Δ_I", "RTT_MN-CN + T_CN + Δ_I"},
		{"LU-Ack or BAck loss", "RTT_MN-HA + T_HA + Δ_M", ro + "Δ_M + " + rr, "RTT_MN-CN + T_CN + Δ_I", "RTT_MN-CN + T_CN + Δ_I"},
		{"Any of RO+ packets loss", "N/A", ro + "Δ_M1 + " + rr, "N/A", "N/A"},
	})
	b.WriteString("### Table 6.4. Summary of expressions for interruption time\n\n")
	mdTable(&b, []string{"Case", "MIPv6 no RO", "MIPv6 with RO", "ILNP hard", "ILNP soft"}, [][]string{
		{"No loss", "(RTT_MN-HA/2) + T_HA", "(RTT_MN-HA/2) + T_HA", "(RTT_MN-CN/2) + T_CN", "0*"},
		{"LU or BU loss", "(RTT_MN-HA/2) + T_HA + Δ_M", "(RTT_MN-HA/2) + T_HA + Δ_M", "(RTT_MN-CN/2) + T_CN + Δ_I", "0*"},
		{"LU-Ack or BAck loss", "(RTT_MN-HA/2) + T_HA", "(RTT_MN-HA/2) + T_HA", "(RTT_MN-CN/2) + T_CN", "0*"},
		{"Any of RO+ packets loss", "N/A", "(RTT_MN-HA/2) + T_HA", "N/A", "N/A"},
	})
	b.WriteString("+RO packets include HoTI/HoT, CoTI/CoT and BU/BAck to CN. *If MN is in overlap area.\n\n")
	in0 := ThesisInputs(LANtoLAN)
	fmt.Fprintf(&b, "Inputs (§6.3.3): T_HA = %s ms, T_CN = T_HoT = T_CoT = %s ms, Δ_M = %s ms, Δ_M1 = %s ms, Δ_I = %s ms.\n\n",
		Ms(in0.THA), Ms(in0.TCN), Ms(in0.DeltaM), Ms(in0.DeltaM1), Ms(in0.DeltaI))
	rows = rows[:0]
	for _, s := range Scenarios {
		in := ThesisInputs(s)
		rows = append(rows, []string{s.Title(), Ms(in.RTTMNHA), Ms(in.RTTMNCN), Ms(in.RTTHACN)})
	}
	mdTable(&b, []string{"Scenario", "RTT_MN-HA (ms)", "RTT_MN-CN (ms)", "RTT_HA-CN (ms)"}, rows)

	for _, t := range DelayTablesPrinted {
		in := ThesisInputs(t.Scenario)
		cells := in.InterruptionTable()
		if t.Delay {
			cells = in.DelayTable()
		}
		rows = rows[:0]
		for i, c := range LossCases {
			r := []string{c.String()}
			for j, col := range Columns {
				v := "N/A"
				if cells[i][j].OK {
					v = Ms(cells[i][j].D)
					if col == ColILNPSoft && !t.Delay {
						v += "*"
					}
				}
				if pr := t.Cells[i][j]; pr != v {
					v += " [printed " + pr + "]"
				}
				r = append(r, v)
			}
			rows = append(rows, r)
		}
		fmt.Fprintf(&b, "### Table %s. %s\n\n", t.Number, t.Caption)
		h := []string{"Case"}
		for _, col := range Columns {
			h = append(h, col.String())
		}
		mdTable(&b, h, rows)
	}

	b.WriteString("### Beyond the thesis: adaptive LU retransmission timeout\n\n")
	pol := opt.RTO
	fmt.Fprintf(&b, "Our LU engine's timer (RFC 6298 from one RTT sample R): RTO = R + max(G, %g·R/2), "+
		"x%g after each timeout, then clamped to [%s, %s] ms, %d transmissions; G = %s ms, no sample: %s ms. Estimates: the new path's RTT_MN-CN "+
		"(the sender knows the new path), or the old path's (the only sample before the first LU; assumed 5 ms leaving a LAN, "+
		"200 ms leaving a WAN). Rows: ILNP hard handoff with the first LU lost (Tables 6.3/6.4 with Δ_I = first RTO), "+
		"then random loss on the new link with every retransmission allowed: P(success) and the expected delay given success.\n\n",
		pol.K, pol.Backoff, Ms(pol.Min), Ms(pol.Max), pol.MaxAttempts, Ms(pol.G), Ms(pol.Initial))
	b.WriteString("Each loss column gives P(success) / E[delay | success] in ms / expected LUs sent (more than " +
		"1 + losses means spurious retransmissions: the timer fired before the answer could arrive).\n\n")
	h := []string{"Scenario", "Timer", "first RTO (ms)", "delay, LU lost (ms)", "interruption, LU lost (ms)"}
	for _, loss := range LossGrid {
		h = append(h, fmt.Sprintf("%s%% new-link loss", pct(loss)))
	}
	rows = rows[:0]
	for _, s := range Scenarios {
		in := ThesisInputs(s)
		base := in.RTTMNCN + in.TCN
		for _, t := range timers(s, opt) {
			adj := in
			adj.DeltaI = t.first
			d, _ := adj.HandoffDelay(ColILNPHard, UpdateLost)
			it, _ := adj.Interruption(ColILNPHard, UpdateLost)
			r := []string{s.Title(), t.name, Ms(t.first), Ms(d), Ms(it)}
			for _, loss := range LossGrid {
				p := PathFromLoss(0, loss).Exchanges(ILNPv6)[0].P()
				o := Retry(p, t.waits, base)
				r = append(r, fmt.Sprintf("%.6f / %.1f / %.2f", o.PSuccess, float64(o.MeanDelay)/1e6, o.MeanTransmissions))
			}
			rows = append(rows, r)
		}
	}
	mdTable(&b, h, rows)

	// §6.4
	b.WriteString("## 6.4 Signalling overhead for one simultaneous handoff\n\n")
	s := opt.MIPv6Sizes
	fmt.Fprintf(&b, "Eqs. 41-52. MIPv6 sizes: BU_HA %d, BAck_HA %d, HoTI %d, HoT %d, CoTI %d, CoT %d, BU_CN %d, BAck_CN %d bytes. "+
		"ILNPv6 (thesis): LU %d, LU-ACK %d bytes. ILNPv6 (ours): LU %d, LU-ACK %d bytes (%s).\n\n",
		s.BUHA, s.BAckHA, s.HoTI, s.HoT, s.CoTI, s.CoT, s.BUCN, s.BAckCN,
		opt.ThesisILNP.LU, opt.ThesisILNP.LUAck, opt.OurILNP.LU, opt.OurILNP.LUAck, opt.OurLabel)
	b.WriteString("- MIPv6 without RO: packets = 2·MN, bytes = MN·(BU_HA + BAck_HA) (eqs. 43-44)\n" +
		"- MIPv6 with RO: packets = MN·(2 + 6·CN), bytes = MN·(BU_HA + BAck_HA + CN·(HoTI + HoT + CoTI + CoT + BU_CN + BAck_CN)) (eqs. 47-48)\n" +
		"- ILNPv6: packets = 2·MN·CN, bytes = MN·CN·(LU + LU-ACK) (eqs. 51-52)\n\n")
	rows = rows[:0]
	var pts []int
	for _, v := range []int{1, 10, 50, 100} {
		if v <= opt.MaxNodes {
			pts = append(pts, v)
		}
	}
	if len(pts) == 0 || pts[len(pts)-1] != opt.MaxNodes {
		pts = append(pts, opt.MaxNodes)
	}
	for _, mn := range pts {
		for _, cn := range pts {
			no := MIPv6NoROOverhead(mn, s)
			r := MIPv6ROOverhead(mn, cn, s)
			il := ILNPv6Overhead(mn, cn, opt.ThesisILNP)
			ours := ILNPv6Overhead(mn, cn, opt.OurILNP)
			rows = append(rows, []string{strconv.Itoa(mn), strconv.Itoa(cn),
				strconv.Itoa(no.Packets), strconv.Itoa(no.Bytes), strconv.Itoa(r.Packets), strconv.Itoa(r.Bytes),
				strconv.Itoa(il.Packets), strconv.Itoa(il.Bytes), strconv.Itoa(ours.Bytes)})
		}
	}
	mdTable(&b, []string{"MNs", "CNs", "MIPv6 no RO packets", "MIPv6 no RO bytes", "MIPv6 RO packets", "MIPv6 RO bytes",
		"ILNPv6 packets", "ILNPv6 bytes (thesis sizes)", "ILNPv6 bytes (our sizes)"}, rows)
	b.WriteString("Full 1..N x 1..N grid in overhead.csv.\n\n")
	b.WriteString("![Fig 6.13 vs MNs](fig6_13_packets_vs_mns.png)\n![Fig 6.13 vs CNs](fig6_13_packets_vs_cns.png)\n\n" +
		"![Fig 6.14 vs MNs](fig6_14_bytes_vs_mns.png)\n![Fig 6.14 vs CNs](fig6_14_bytes_vs_cns.png)\n\n")

	b.WriteString("## Errata: printed values that disagree with the thesis's own formulas\n\n")
	rows = rows[:0]
	for _, e := range Errata {
		rows = append(rows, []string{e.Where, e.Printed, e.Computed, e.Note})
	}
	mdTable(&b, []string{"Where", "Printed", "Computed", "Note"}, rows)

	b.WriteString("## Files\n\n- success.csv: Table 6.2 and the retransmission extension\n- delay.csv: Tables 6.5-6.12 beside the printed values\n" +
		"- retry_delay.csv: LU timers, fixed vs adaptive\n- overhead.csv: Figs. 6.13-6.14 over the whole grid\n")
	return os.WriteFile(filepath.Join(dir, "analysis.md"), []byte(b.String()), 0o644)
}
