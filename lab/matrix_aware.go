package lab

import (
	"fmt"
	"path/filepath"
	"strings"

	"ilnp/lab/plots"
	"ilnp/lab/summary"
)

// The tcp-aware axis of a matrix (issue 15, `--tcp-aware off,on`): every ILNP cell of TCP
// traffic runs once with tcp-aware off (the thesis's behaviour, in the cell's usual directory,
// so the main tables stay comparable with the thesis) and once with it on (beside it, suffix
// awareSuffix); the report gains the on/off table and on/off overlays.

const awareSuffix = "-tcpaware"

// awareMetrics are the per-run figures, read side by side off and on.
var awareMetrics = []string{"tcp_window_goodput_bps", "tcp_recovery_ms", "tcp_rto_events", "tcp_retransmissions", "interruption_ms"}

// awareFor is a cell's tcp-aware axis: off and on for an ILNP mode's TCP traffic on an axis
// matrix, else the matrix's single setting.
func (m MatrixConfig) awareFor(mo, tr string) []bool {
	if !m.TCPAwareAxis || Traffics[tr].UDP || !strings.HasPrefix(mo, "ilnp-") {
		return []bool{m.TCPAware}
	}
	return []bool{false, true}
}

// awareDir is where a cell with tcp-aware on goes on an axis matrix (off: the usual cell).
func (m MatrixConfig) awareDir(sc, mo, tr, congestion string, on bool) string {
	d := m.cellDir(sc, mo, tr, congestion)
	if m.TCPAwareAxis && on {
		d += awareSuffix
	}
	return d
}

// awarePairs are the (scenario, mode, traffic) cells that have both sides.
func (m MatrixConfig) awarePairs() (pairs [][3]string) {
	for _, tr := range m.Traffics {
		for _, mo := range m.Modes {
			if len(m.awareFor(mo, tr)) != 2 {
				continue
			}
			for _, sc := range m.Scenarios {
				pairs = append(pairs, [3]string{sc, mo, tr})
			}
		}
	}
	return pairs
}

// awareDirs are the off and on directories of a pair (the table's congestion: m.dir's).
func (m MatrixConfig) awareDirs(sc, mo, tr string) (off, on string) {
	off = m.dir(sc, mo, tr)
	return off, off + awareSuffix
}

// AwareSection is the report's on/off table: per TCP traffic kind, rows scenario x ILNP mode,
// for each figure the cell's mean ± 95 % CI with tcp-aware off and on.
func AwareSection(m MatrixConfig) string {
	pairs := m.awarePairs()
	if len(pairs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Mobility-aware TCP: tcp-aware off vs on\n\n")
	b.WriteString("Each ILNP cell of TCP traffic ran with `tcp-aware off` (the tables above) and `on` " +
		"(cells `TRAFFIC" + awareSuffix + "` beside them). Issue 15's targets: window goodput on >= 2x off in the " +
		"wan-wan hard handoff, no RTO-driven pause, nothing worse anywhere.\n\n")
	for _, tr := range m.Traffics {
		header := false
		for _, p := range pairs {
			if p[2] != tr {
				continue
			}
			if !header {
				header = true
				fmt.Fprintf(&b, "### %s — %s\n\n| scenario | mode |", tr, Traffics[tr].Describe)
				for _, key := range awareMetrics {
					fmt.Fprintf(&b, " %s off | on |", fieldTitle(key))
				}
				b.WriteString("\n|---|---|" + strings.Repeat("---|---|", len(awareMetrics)) + "\n")
			}
			off, on := m.awareDirs(p[0], p[1], p[2])
			fmt.Fprintf(&b, "| %s | %s |", Scenarios[p[0]].Title, p[1])
			so, eo := summary.Read(filepath.Join(off, "summary.json"))
			sn, en := summary.Read(filepath.Join(on, "summary.json"))
			for _, key := range awareMetrics {
				for _, side := range []struct {
					s   summary.Summary
					err error
				}{{so, eo}, {sn, en}} {
					if side.err != nil {
						b.WriteString(" failed |")
						continue
					}
					fmt.Fprintf(&b, " %s |", MeanCI(side.s, key))
				}
			}
			b.WriteString("\n")
		}
		if header {
			b.WriteString("\n")
		}
	}
	b.WriteString("Overlays: SCENARIO-MODE-TRAFFIC" + awareSuffix + "-{rate,seq,cwnd}.png (off and on, rep 1).\n\n")
	return b.String()
}

func fieldTitle(key string) string {
	for _, f := range summary.Fields {
		if f.Key == key {
			return f.Title
		}
	}
	return key
}

// overlayAware draws, for every off/on pair, rep 1's data rate, sequence numbers and the
// sender's cwnd (when sampled) off and on in one figure each (TCP-M6's figs. 12-14 compare the same way).
func overlayAware(m MatrixConfig) {
	for _, p := range m.awarePairs() {
		offDir, onDir := m.awareDirs(p[0], p[1], p[2])
		off, err1 := loadResult(filepath.Join(offDir, "rep-1", "result.json"))
		on, err2 := loadResult(filepath.Join(onDir, "rep-1", "result.json"))
		if err1 != nil || err2 != nil {
			continue
		}
		marks := plotMarks(off)
		marks.WindowStart, marks.WindowEnd = 0, 0 // the runs' windows differ
		title := fmt.Sprintf("%s, %s, %s: tcp-aware off vs on (rep 1)", Scenarios[p[0]].Title, p[1], p[2])
		base := filepath.Join(m.Out, p[0]+"-"+p[1]+"-"+p[2]+awareSuffix)
		rate := []plots.Series{{Label: "tcp-aware off", Points: off.Rate}, {Label: "tcp-aware on", Points: on.Rate}}
		seq := []plots.Series{{Label: "tcp-aware off", Points: off.Seq}, {Label: "tcp-aware on", Points: on.Seq}}
		_ = plots.Rate(base+"-rate.png", title, rate, marks)
		_ = plots.Seq(base+"-seq.png", title, off.SeqUnit, seq, marks)
		if len(off.Cwnd) > 0 || len(on.Cwnd) > 0 {
			cw := []plots.Series{{Label: "tcp-aware off", Points: off.Cwnd}, {Label: "tcp-aware on", Points: on.Cwnd}}
			_ = plots.Cwnd(base+"-cwnd.png", title, cw, marks)
		}
	}
}
