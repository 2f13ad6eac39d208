package lab

import (
	"fmt"
	"strings"

	"ilnp/lab/measure"
	"ilnp/lab/summary"
)

// Fmt renders a nullable number for tables.
func Fmt(v *float64, key string) string {
	if v == nil {
		return "-"
	}
	x := *v
	switch key {
	case "throughput_window_bps", "offered_bps":
		return fmt.Sprintf("%.1f kbit/s", x/1e3)
	case "tcp_bytes":
		return fmt.Sprintf("%.2f MB", x/1e6)
	case "session_survived":
		return fmt.Sprintf("%.0f %%", 100*x)
	case "rtt_ms", "handoff_delay_ms", "interruption_ms", "recovery_ms", "handover_ms":
		return fmt.Sprintf("%.1f ms", x)
	}
	return fmt.Sprintf("%.4g", x)
}

// MeanCI renders "mean ± ci95".
func MeanCI(s summary.Summary, key string) string {
	m := s.Mean.Get(key)
	if m == nil {
		return "-"
	}
	out := Fmt(m, key)
	if c := s.CI95.Get(key); c != nil {
		out += " ± " + strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(Fmt(c, key), " ms"), " %"), " kbit/s"), " MB"))
	}
	return out
}

// RunReport is report.md of one `ilnp-lab run`.
func RunReport(cfg RunConfig, s summary.Summary, results []measure.Result) string {
	var b strings.Builder
	sc := Scenarios[cfg.Scenario]
	tr := Traffics[cfg.Traffic]
	mode := Modes[cfg.Mode](ModeOptions{})
	fmt.Fprintf(&b, "# %s, %s, %s\n\n", sc.Title, cfg.Mode, cfg.Traffic)
	fmt.Fprintf(&b, "- Scenario: %s (%s); MN access links: %s\n", sc.Name, sc.Definition, cfg.accessText())
	fmt.Fprintf(&b, "- Mode: %s\n- Traffic: %s\n", mode.Describe(), tr.Describe)
	if s.Congestion != "" {
		fmt.Fprintf(&b, "- TCP congestion control (iperf3 -C): %s%s\n", s.Congestion, congestionNote(s.Congestion))
	}
	fmt.Fprintf(&b, "- Movement (%s profile): enter L3 at %v, leave L2 at %v, flow %v; RAs every %v-%v\n",
		cfg.Profile.Name, cfg.Profile.Enter, cfg.Profile.Leave, cfg.Profile.Duration, cfg.Profile.RAMin, cfg.Profile.RAMax)
	if cfg.DoubleJump {
		fmt.Fprintf(&b, "- Double jump: the CN moves too, entering L5 at %v and leaving L4 at %v, each beside the MN's move; "+
			"recovery = the later of the two moves at --enter (MIPv6: at --leave, when the home links go) to the first flow packet "+
			"between the new locators (MIPv6: from the peer on the new care-of addresses) in both directions\n",
			cfg.Profile.Enter, cfg.Profile.Leave)
	}
	if cfg.Families != "" {
		p := PlanFor(cfg.Families)
		fmt.Fprintf(&b, "- Families: %s (L2 %s, L3 %s; the move is %s)", cfg.Families, familyText(p.L2), familyText(p.L3), cfg.Families.Move())
		if cfg.Families.Cross() {
			b.WriteString("; an IPv4 access network is IPv4 only behind its router's NAT (nftables masquerade), the MN's address there static")
		}
		if cfg.Families.L3IPv4() {
			fmt.Fprintf(&b, " (on L3: %s and its default route installed %v after the link comes up)", p.L3.Host, leasePause)
		}
		b.WriteString("\n")
	}
	if cfg.Families.L2IPv4() {
		b.WriteString("- The MN starts behind a NAT: it opens the session (ping to the CN by name) before the flow; the CN's iperf3 " +
			"then joins that session (ilnpd's peer route gives it the session's source address)\n")
	}
	fmt.Fprintf(&b, "- Repetitions: %d (mean ± 95 %% confidence half-width, Student t)\n\n", s.Reps)
	b.WriteString("| metric | mean ± ci95 |")
	for i := range s.Runs {
		fmt.Fprintf(&b, " rep %d |", i+1)
	}
	b.WriteString("\n|---|---|")
	for range s.Runs {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, f := range summary.Fields {
		if f.Key == "recovery_ms" && !cfg.DoubleJump {
			continue // only a double jump has two moves to recover from
		}
		if f.Key == "handover_ms" && !NeedsILNP(cfg.Mode) {
			continue // no Locator Updates
		}
		fmt.Fprintf(&b, "| %s | %s |", f.Title, MeanCI(s, f.Key))
		for _, r := range s.Runs {
			fmt.Fprintf(&b, " %s |", Fmt(r.Values()[f.Key], f.Key))
		}
		b.WriteString("\n")
	}
	b.WriteString("\nDefinitions (thesis 4.4, 5.3): RTT is MN-CN via L3 after the move (the ideal handoff delay; " +
		"rep-N/run.json also has the RTT via L2 before it); UDP figures are the CN -> MN direction as captured at the MN; " +
		"the 5-s window starts 1 s before the first LU after entering L3 (or at leaving L2 when there is no LU); " +
		"interruption is the longest gap between deliveries at the MN (to the end of the flow if delivery stops); " +
		"TCP retransmissions are segments the CN sent again (sequence number below the highest sent), lost ones " +
		"those the MN did not receive as many times as the CN sent them; handoff delay is the first LU sent after " +
		"entering L3 to its LU-ACK at the MN; survived means data still reached the MN 1 s after leaving L2.\n\n")
	b.WriteString("Plots: `rate.png` and `seq.png` overlay the repetitions; each `rep-N/` has its own, the captures " +
		"(`mn.pcap`, `cn.pcap`), the event timelines and the iperf3 JSON.\n")
	if cfg.Families != "" {
		b.WriteString("\n## Cross-family handover beside HIP (seed 003, Tables I and II)\n\n")
		b.WriteString(FamiliesTable([]FamiliesCell{{Families: cfg.families(), Mode: cfg.Mode, Command: familiesCommand(cfg), Summary: s}}))
	}
	for i, r := range results {
		if len(r.Notes) > 0 {
			fmt.Fprintf(&b, "\nrep %d notes: %s\n", i+1, strings.Join(r.Notes, "; "))
		}
	}
	return b.String()
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func familyText(a AccessPlan) string {
	if a.IPv4 {
		return "IPv4 " + a.Net.String() + " behind NAT " + a.Outside.String()
	}
	return "IPv6"
}
