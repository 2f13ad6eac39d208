package lab

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func optMs(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 1, 64)
}

func optU(v *uint64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatUint(*v, 10)
}

func writeCSVFile(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (r SignallingResults) delayRows() [][]string {
	rows := [][]string{{"scenario", "mode", "case", "dropped", "drop_fired", "attempts", "rtt_ms", "retransmit_ms",
		"measured_delay_ms", "thesis_delay_ms", "ours_delay_ms", "measured_interruption_ms", "thesis_interruption_ms", "error"}}
	for _, d := range r.Delay {
		rows = append(rows, []string{d.Scenario, d.Mode, d.Case, d.Dropped, optU(d.DropFired), strconv.Itoa(d.Attempts),
			optMs(d.RTTms), optMs(d.RetransmitMs), optMs(d.HandoffDelayMs), optMs(d.ThesisDelayMs), optMs(d.OursDelayMs),
			optMs(d.InterruptionMs), optMs(d.ThesisInterruptionMs), d.Error})
	}
	return rows
}

func (r SignallingResults) successRows() [][]string {
	rows := [][]string{{"mode", "loss_old_new", "exchanges", "first_try", "measured_rate", "ci95_low", "ci95_high",
		"analytic", "acked_eventually", "analytic_3_attempts", "error"}}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
	for _, s := range r.Success {
		ev := 0.0
		if s.Exchanges > 0 {
			ev = float64(s.Eventually) / float64(s.Exchanges)
		}
		loss := f(s.Loss)
		if o, n := s.Losses(); o != n {
			loss = f(o) + "/" + f(n)
		}
		rows = append(rows, []string{cmp.Or(s.Mode, "ilnp-soft"), loss, strconv.Itoa(s.Exchanges), strconv.Itoa(s.FirstTry), f(s.Rate), f(s.CILow), f(s.CIHigh),
			f(s.Analytic), f(ev), f(s.AnalyticRetries), s.Error})
	}
	return rows
}

func (r SignallingResults) scaleRows() [][]string {
	rows := [][]string{{"mns", "cns", "sessions", "lu_packets", "lu_ack_packets", "measured_packets", "formula_packets",
		"lu_bytes", "lu_ack_bytes", "measured_bytes", "formula_bytes_our_sizes", "formula_bytes_thesis_sizes",
		"lu_sent_timeline", "acked", "mipv6_noro_packets", "mipv6_ro_packets", "setup_s", "handoff_s", "error"}}
	for _, s := range r.Scale {
		rows = append(rows, []string{strconv.Itoa(s.MNs), strconv.Itoa(s.CNs), strconv.Itoa(s.Sessions),
			strconv.Itoa(s.LUPackets), strconv.Itoa(s.LUAckPackets), strconv.Itoa(s.LUPackets + s.LUAckPackets), strconv.Itoa(s.FormulaPackets),
			strconv.Itoa(s.LUBytes), strconv.Itoa(s.LUAckBytes), strconv.Itoa(s.LUBytes + s.LUAckBytes),
			strconv.Itoa(s.FormulaBytesOurs), strconv.Itoa(s.FormulaBytesThesis), strconv.Itoa(s.LUSentTimeline), strconv.Itoa(s.Acked),
			strconv.Itoa(s.MIPv6NoROPackets), strconv.Itoa(s.MIPv6ROPackets),
			strconv.FormatFloat(s.SetupSeconds, 'f', 1, 64), strconv.FormatFloat(s.HandoffSeconds, 'f', 2, 64), s.Error})
	}
	return rows
}

// write puts the CSVs and signalling.md into dir.
func (r SignallingResults) write(dir string) error {
	if len(r.Delay) > 0 {
		if err := writeCSVFile(filepath.Join(dir, "signalling-delay.csv"), r.delayRows()); err != nil {
			return err
		}
	}
	if len(r.Success) > 0 {
		if err := writeCSVFile(filepath.Join(dir, "signalling-success.csv"), r.successRows()); err != nil {
			return err
		}
	}
	if len(r.Scale) > 0 {
		if err := writeCSVFile(filepath.Join(dir, "signalling-scale.csv"), r.scaleRows()); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "signalling.md"), []byte(r.Markdown(2)), 0o644)
}

func mdRows(b *strings.Builder, rows [][]string) {
	for i, row := range rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		if i == 0 {
			b.WriteString(strings.Repeat("|---", len(row)) + "|\n")
		}
	}
	b.WriteString("\n")
}

// Markdown renders the measured-vs-analytic tables; level is the heading level of the title.
func (r SignallingResults) Markdown(level int) string {
	h := strings.Repeat("#", level)
	var b strings.Builder
	fmt.Fprintf(&b, "%s Control-plane signalling: measured beside the analysis (thesis ch. 6)\n\n", h)
	if len(r.Delay) > 0 {
		fmt.Fprintf(&b, "%s# Handoff delay and interruption with one lost signalling message (Tables 6.5-6.12)\n\n", h)
		fmt.Fprintf(&b, "One run each, %s profile, %s traffic; the injector (lab/sigloss, nftables in R1) drops the first "+
			"LU / LU-ACK (ILNP) or BU / BAck to/from the HA (MIPv6), or the CoT (mipv6-ro, RO packet lost) R1 forwards. MIPv6: the home agent's DAD (%g ms) before the first BAck of a new binding, T_HA = %g ms on top; mipv6-ro delay runs to the CN's BAck. *Thesis* is the Table 6.3/6.4 expression "+
			"with the thesis's inputs (RTT 5 / 200 / 400 ms, Δ_I 1 s, Δ_M 1.5 s, T_HA 1 s); *ours* is the same expression with "+
			"our inputs: the measured no-loss delay of that scenario and mode plus the measured retransmission timeout. "+
			"Measured delay: first LU/BU sent → first acknowledgement at the MN; interruption: longest gap in delivery at the MN "+
			"(its floor is the traffic's packet spacing, ~4.4 ms for UDP HD).\n\n", r.Profile, r.Traffic, r.DADTimeoutMs, r.THAms)
		rows := [][]string{{"scenario", "mode", "case", "dropped (fired)", "attempts", "retransmit timeout ms", "measured delay ms",
			"thesis delay ms", "ours delay ms", "measured interruption ms", "thesis interruption ms"}}
		for _, d := range r.Delay {
			drop := "-"
			if d.Dropped != "" {
				drop = d.Dropped + " (" + optU(d.DropFired) + ")"
			}
			meas := optMs(d.HandoffDelayMs)
			if d.Error != "" {
				meas += " (" + strings.SplitN(d.Error, "\n", 2)[0] + ")"
			}
			rows = append(rows, []string{d.Scenario, d.Mode, d.Case, drop, strconv.Itoa(d.Attempts), optMs(d.RetransmitMs),
				meas, optMs(d.ThesisDelayMs), optMs(d.OursDelayMs), optMs(d.InterruptionMs), optMs(d.ThesisInterruptionMs)})
		}
		mdRows(&b, rows)
	}
	if len(r.Success) > 0 {
		fmt.Fprintf(&b, "%s# Single-attempt handoff success under link loss (Table 6.2, eqs. 17 and 19)\n\n", h)
		b.WriteString("lan-lan, loss on the old (R1-R2) and new (R1-R3) link each way (link emulator). " +
			"ilnp-soft: the MN moves L2 → L3 → L2 …, each move two LU exchanges (new link up, old link down); analytic " +
			"eq. 19, (1-p)². mipv6: the home link goes down and comes back, each move away one home registration (BU from " +
			"the care-of address in L3 to the HA on R2, BAck back: both lossy links each way), analytic eq. 17, (1-p)⁴; the " +
			"deregistration at home crosses neither link and is not counted. mipv6-ro: each move away also a fresh return " +
			"routability (HoTI/HoT through the HA, CoTI/CoT) and the correspondent's BU/BAck, a success when all eight " +
			"messages arrived at the first try, analytic eq. 18. With unequal loss ILNP counts only the exchanges of the moves " +
			"L2 → L3. A success is an exchange acknowledged without a retransmission; beside it the share acknowledged at all, " +
			"the analytic value with 3 attempts and the LUs (home BUs) sent per exchange.\n\n")
		rows := r.successRows()
		rows[0] = []string{"mode", "loss (old / new)", "exchanges", "first try", "measured rate", "95 % CI (Wilson)", "analytic",
			"acked eventually", "analytic, 3 attempts", "sent per exchange"}
		for i := 1; i < len(rows); i++ {
			s := r.Success[i-1]
			row := rows[i]
			loss := strconv.FormatFloat(s.Loss*100, 'g', -1, 64) + " %"
			if o, n := s.Losses(); o != n {
				loss = strconv.FormatFloat(o*100, 'g', -1, 64) + " % / " + strconv.FormatFloat(n*100, 'g', -1, 64) + " %"
			}
			rows[i] = []string{row[0], loss, row[2], row[3], row[4],
				"[" + row[5] + ", " + row[6] + "]", row[7], row[8], row[9], strconv.FormatFloat(s.AttemptsPerExchange, 'f', 2, 64)}
			if s.Error != "" {
				rows[i][4] += " (" + s.Error + ")"
			}
		}
		mdRows(&b, rows)
	}
	if len(r.Scale) > 0 {
		fmt.Fprintf(&b, "%s# Signalling overhead at scale (eqs. 49-52, Figs. 6.13-6.14)\n\n", h)
		b.WriteString("N MNs x M CNs in namespaces, every CN with an ILNP session to every MN, one simultaneous handoff " +
			"(every MN's interface to L3 comes up at once, soft handoff). Packets and IP-layer bytes counted in a capture on " +
			"the core router R1's CN-side bridge (each LU and LU-ACK crosses it once). Formula: 2·N·M packets; bytes with our " +
			"measured mean sizes and with the thesis's 86 + 86 bytes. MIPv6 packets (eqs. 41-48) for the same N x M beside.\n\n")
		rows := [][]string{{"MNs x CNs", "LU", "LU-ACK", "measured packets", "formula packets", "measured bytes",
			"formula bytes (our sizes)", "formula bytes (thesis sizes)", "mean LU / LU-ACK bytes", "LUs sent (timeline) / acked", "MIPv6 no-RO / RO packets", "handoff s"}}
		for _, s := range r.Scale {
			sizes := "-"
			if s.LUPackets > 0 && s.LUAckPackets > 0 {
				sizes = fmt.Sprintf("%.1f / %.1f", float64(s.LUBytes)/float64(s.LUPackets), float64(s.LUAckBytes)/float64(s.LUAckPackets))
			}
			meas := strconv.Itoa(s.LUPackets + s.LUAckPackets)
			if s.Error != "" {
				meas += " (" + strings.SplitN(s.Error, "\n", 2)[0] + ")"
			}
			rows = append(rows, []string{fmt.Sprintf("%d x %d", s.MNs, s.CNs), strconv.Itoa(s.LUPackets), strconv.Itoa(s.LUAckPackets),
				meas, strconv.Itoa(s.FormulaPackets), strconv.Itoa(s.LUBytes + s.LUAckBytes), strconv.Itoa(s.FormulaBytesOurs),
				strconv.Itoa(s.FormulaBytesThesis), sizes, fmt.Sprintf("%d / %d", s.LUSentTimeline, s.Acked),
				fmt.Sprintf("%d / %d", s.MIPv6NoROPackets, s.MIPv6ROPackets),
				strconv.FormatFloat(s.HandoffSeconds, 'f', 2, 64)})
		}
		mdRows(&b, rows)
	}
	return b.String()
}

// SignallingSection is the matrix report's chapter 6 part: the measured tables of
// DIR/signalling.json beside their analytic values, or "" when DIR has none.
func SignallingSection(dir string) string {
	r, err := ReadSignalling(dir)
	if err != nil {
		return ""
	}
	return r.Markdown(2) + fmt.Sprintf("CSV: %s/signalling-{delay,success,scale}.csv; the full analysis: `ilnp-lab analyze`.\n\n", filepath.Base(dir))
}
