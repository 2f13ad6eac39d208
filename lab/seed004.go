package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"ilnp/lab/cwnd"
	"ilnp/lab/measure"
	"ilnp/lab/pcap"
	"ilnp/lab/plots"
)

// Seed 004 (TCP-M6) figs. 12-16 in our terms, row seed004 of `ilnp-lab results`: one wan-wan
// hard handoff under TCP with ilnpd's mobility-aware TCP off and on (rep 1 of each), drawn as
// the seed draws them: received sequence numbers (12), the sender's RTO (13), its cwnd (14),
// the mobility overhead ratio (15) and the throughput (16) over time.

// seed004Aware are the two cells: tcp-aware off and on.
var seed004Aware = []bool{false, true}

func (c ResultsConfig) seed004Dir(aware bool) string {
	return filepath.Join(c.Out, "runs", "seed004-wan-wan-tcp", map[bool]string{false: "ilnp-hard-off", true: "ilnp-hard-on"}[aware])
}

func (c ResultsConfig) seed004Command(aware bool) string {
	return fmt.Sprintf("ilnp-lab run --scenario wan-wan --mode ilnp-hard --traffic tcp --tcp-aware %s --profile %s --reps %d --out %s",
		map[bool]string{false: "off", true: "on"}[aware], c.ProfileName, c.Reps, c.seed004Dir(aware))
}

func (c ResultsConfig) runSeed004(ctx context.Context, prof Profile) error {
	for _, aware := range seed004Aware {
		c.progress("%s", c.seed004Command(aware))
		_, err := Run(ctx, RunConfig{Scenario: "wan-wan", Mode: "ilnp-hard", Traffic: "tcp", TCPAware: aware, Profile: prof, Reps: c.Reps,
			Out: c.seed004Dir(aware), BinDir: c.BinDir, Progress: c.Progress})
		if errors.Is(err, context.Canceled) {
			return err
		}
		if err != nil {
			c.progress("  failed: %v", err)
		}
	}
	return nil
}

// OverheadRatio is fig. 15 in our terms: per second of the flow, the bytes ILNP adds on the
// CN's link (the 8-byte nonce option on each data packet, and every LU/LU-ACK whole) over
// all the IPv6 bytes there, in percent. Packet sizes are rebuilt from the capture: 40 bytes
// of IPv6 header, 8 of option when present, the transport header (TCP 32 with timestamps,
// UDP 8) and the payload; an LU counts 80 bytes (its size on the wire, README).
func OverheadRatio(cn []pcap.Packet, t0 float64, rel func(pcap.Packet) float64, secs int) []measure.Point {
	extra, total := make([]float64, secs), make([]float64, secs)
	for _, p := range cn {
		s := int(math.Floor(rel(p) - t0))
		if s < 0 || s >= secs {
			continue
		}
		var size, add float64
		switch {
		case p.LUOp != 0:
			size, add = 80, 80
		case p.Proto == pcap.ProtoTCP:
			size = 40 + 32 + float64(p.Payload)
		case p.Proto == pcap.ProtoUDP:
			size = 40 + 8 + float64(p.Payload)
		default:
			continue
		}
		if p.Nonce && p.LUOp == 0 {
			size += 8
			add += 8
		}
		extra[s] += add
		total[s] += size
	}
	var out []measure.Point
	for s := range secs {
		if total[s] > 0 {
			out = append(out, measure.Point{T: float64(s), V: 100 * extra[s] / total[s]})
		}
	}
	return out
}

// seed004Series reads rep 1 of a cell: result.json, the cwnd samples' RTO, the overhead.
func (c ResultsConfig) seed004Series(aware bool) (r measure.Result, rto, overhead []measure.Point, err error) {
	dir := filepath.Join(c.seed004Dir(aware), "rep-1")
	if r, err = loadResult(filepath.Join(dir, "result.json")); err != nil {
		return r, nil, nil, err
	}
	var meta RunMeta
	b, err := os.ReadFile(filepath.Join(dir, "run.json"))
	if err == nil {
		err = json.Unmarshal(b, &meta)
	}
	if err != nil {
		return r, nil, nil, fmt.Errorf("run.json: %w", err)
	}
	var samples []cwnd.Sample
	if b, err := os.ReadFile(filepath.Join(dir, "cwnd.json")); err == nil {
		_ = json.Unmarshal(b, &samples)
	}
	for _, s := range samples {
		if s.RTOus > 0 {
			rto = append(rto, measure.Point{T: float64(s.MonoNS-meta.T0MonoNS) / 1e9, V: float64(s.RTOus) / 1e3})
		}
	}
	if pk, err := readPcap(filepath.Join(dir, "cn.pcap")); err == nil {
		t0 := float64(meta.T0UnixNS) / 1e9
		overhead = OverheadRatio(pk, t0, func(p pcap.Packet) float64 { return float64(p.Time.UnixNano()) / 1e9 }, int(math.Ceil(meta.DurationS)))
	}
	return r, rto, overhead, nil
}

// DrawSeed004 writes fig-004-12.png ... fig-004-16.png and returns the files and a note per
// figure not drawn.
func (c ResultsConfig) DrawSeed004() (files []string, notes []string) {
	var seq, rto, cw, ov, rate []plots.Series
	var marks *plots.Marks
	unit := ""
	for _, aware := range seed004Aware {
		label := "tcp-aware " + map[bool]string{false: "off", true: "on"}[aware]
		r, rt, o, err := c.seed004Series(aware)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: %v", label, err))
			continue
		}
		if marks == nil {
			m := plotMarks(r)
			m.WindowStart, m.WindowEnd = 0, 0
			marks, unit = &m, r.SeqUnit
		}
		seq = append(seq, plots.Series{Label: label, Points: r.Seq})
		rto = append(rto, plots.Series{Label: label, Points: rt})
		cw = append(cw, plots.Series{Label: label, Points: r.Cwnd})
		ov = append(ov, plots.Series{Label: label, Points: o})
		rate = append(rate, plots.Series{Label: label, Points: r.Rate})
	}
	if marks == nil {
		return nil, notes
	}
	draw := func(id string, f func(path string) error) {
		name := "fig-004-" + id + ".png"
		if err := f(filepath.Join(c.Out, name)); err != nil {
			notes = append(notes, fmt.Sprintf("fig. %s: %v", id, err))
			return
		}
		files = append(files, name)
	}
	title := func(s string) string { return "Seed 004 fig. " + s + ", wan-wan hard handoff (rep 1)" }
	draw("12", func(p string) error { return plots.Seq(p, title("12: sequence numbers at the MN"), unit, seq, *marks) })
	draw("13", func(p string) error { return plots.Lines(p, title("13: the CN's RTO"), "RTO (ms)", rto, *marks) })
	draw("14", func(p string) error { return plots.Cwnd(p, title("14: the CN's cwnd"), cw, *marks) })
	draw("15", func(p string) error {
		return plots.Lines(p, title("15: ILNP overhead ratio at the CN"), "nonce option + LU bytes / IPv6 bytes (%)", ov, *marks)
	})
	draw("16", func(p string) error { return plots.Rate(p, title("16: throughput"), rate, *marks) })
	return files, notes
}

// Seed004Markdown is results.md's section.
func (c ResultsConfig) Seed004Markdown(files, notes []string) string {
	var b strings.Builder
	b.WriteString("## Seed 004 (TCP-M6) figs. 12-16 in our terms\n\n")
	b.WriteString("One wan-wan hard handoff under TCP, ilnpd's mobility-aware TCP off and on (rep 1 of each): sequence numbers " +
		"received (12), the CN's RTO from sock_diag every 20 ms (13), its cwnd (14), the ILNP overhead ratio on the CN's link " +
		"per second (15: the nonce option's 8 bytes per data packet and the LU/LU-ACKs, over all IPv6 bytes rebuilt from the " +
		"capture) and the throughput (16).\n\n")
	for _, f := range files {
		fmt.Fprintf(&b, "![%s](%s)\n\n", strings.TrimSuffix(f, ".png"), f)
	}
	for _, n := range notes {
		fmt.Fprintf(&b, "Not drawn: %s\n\n", n)
	}
	fmt.Fprintf(&b, "Rerun: `%s`, `%s`\n", c.seed004Command(false), c.seed004Command(true))
	return b.String()
}
