package lab

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"ilnp/lab/measure"
	"ilnp/lab/pcap"
	"ilnp/lab/summary"
)

// `ilnp-lab peers` (issue 26): ILNP beside the alternatives users pick today (MPTCP, a
// roaming WireGuard tunnel) and the lab's Mobile IPv6, through the same moves, traffic and
// measurements. Every cell is an ordinary `ilnp-lab run`; peers.json and peers.md are
// derived from their directories (PeerCells), so --report-only redoes them.

// The cells.
var (
	PeerScenarios = []string{"lan-lan", "lan-wan", "wan-wan"}
	PeerModes     = []string{"ilnp-soft", "ilnp-hard", "mipv6", "mptcp", "wireguard"}
	PeerTraffics  = []string{"tcp", "udp-hd"}
)

// PeersBaseline is the mode bulk throughput is compared with: plain IPv6 on the same path.
const PeersBaseline = "ipv6"

// PeersConfig is one `ilnp-lab peers`.
type PeersConfig struct {
	Out                        string
	Reps                       int
	Profile                    Profile
	Scenarios, Modes, Traffics []string
	// FailoverScenarios get multihomed runs too (`--multihome --fail r2-silent@T`, PeerFail)
	// for the modes that can be multihomed (MultihomeModes); their failover_ms fills the
	// cell's failover column.
	FailoverScenarios []string
	BinDir            string
	Progress          io.Writer
}

// Validate checks the names.
func (c PeersConfig) Validate() error {
	if c.Out == "" {
		return errors.New("--out is required")
	}
	if c.Reps < 1 {
		return errors.New("--reps must be at least 1")
	}
	for _, s := range c.Scenarios {
		if _, ok := Scenarios[s]; !ok {
			return fmt.Errorf("unknown scenario %q", s)
		}
	}
	for _, m := range c.Modes {
		if _, ok := Modes[m]; !ok {
			return fmt.Errorf("unknown mode %q (want some of %s)", m, strings.Join(ModeNames(), ", "))
		}
	}
	for _, t := range c.Traffics {
		if _, ok := Traffics[t]; !ok {
			return fmt.Errorf("unknown traffic %q", t)
		}
	}
	for _, s := range c.FailoverScenarios {
		if !slices.Contains(c.Scenarios, s) {
			return fmt.Errorf("failover scenario %q is not among the scenarios (%s)", s, strings.Join(c.Scenarios, ","))
		}
	}
	return nil
}

// PeerFailoverScenarios are the scenarios that get failover runs by default: one, to keep
// the whole set within an hour on the quick profile.
var PeerFailoverScenarios = []string{"lan-lan"}

// PeerFail is the failure of the failover runs: R1 silent towards R2 one second after the
// profile's enter time (4 s into the quick profile's 12-s flow).
func PeerFail(p Profile) Fail { return Fail{Kind: FailR2Silent, At: p.Enter + time.Second} }

// PeerFailoverPolicy is ilnpd's policy in ILNP's failover runs: under the default, newest,
// a second locator is a move in progress and the node is never multihomed.
const PeerFailoverPolicy = "preference"

// PeerFailoverDir is where one cell's failover runs go.
func PeerFailoverDir(out, scenario, mode, traffic string) string {
	return filepath.Join(out, "runs", "failover-"+scenario+"-"+mode+"-"+traffic)
}

// PeerFailoverCommand is the command line that produces one cell's failover runs.
func PeerFailoverCommand(c PeersConfig, scenario, mode, traffic string) string {
	policy := ""
	if NeedsILNP(mode) {
		policy = " --policy " + PeerFailoverPolicy
	}
	return fmt.Sprintf("ilnp-lab run --scenario %s --mode %s --traffic %s --profile %s --reps %d --multihome --fail %s%s --out %s",
		scenario, mode, traffic, c.Profile.Name, c.Reps, failArg(PeerFail(c.Profile)), policy, PeerFailoverDir(c.Out, scenario, mode, traffic))
}

// failArg is a failure as --fail reads it.
func failArg(f Fail) string { return fmt.Sprintf("%s@%gs", f.Kind, f.At.Seconds()) }

// hasFailover says whether a cell gets failover runs.
func hasFailover(c PeersConfig, scenario, mode, traffic string) bool {
	return slices.Contains(c.FailoverScenarios, scenario) && MultihomeModes[mode] && peerTrafficError(mode, traffic) == nil
}

// peerJob is one `ilnp-lab run` of the set.
type peerJob struct {
	scenario, mode, traffic string
	failover                bool
}

func (j peerJob) key() string {
	k := j.scenario + " " + j.mode + " " + j.traffic
	if j.failover {
		k = "failover " + k
	}
	return k
}

func (j peerJob) config(c PeersConfig) RunConfig {
	cfg := RunConfig{Scenario: j.scenario, Mode: j.mode, Traffic: j.traffic, Profile: c.Profile, Reps: c.Reps,
		Out: PeerRunDir(c.Out, j.scenario, j.mode, j.traffic), BinDir: c.BinDir, Progress: c.Progress}
	if j.failover {
		cfg.Out = PeerFailoverDir(c.Out, j.scenario, j.mode, j.traffic)
		cfg.Multihome, cfg.Fails = true, []Fail{PeerFail(c.Profile)}
		if NeedsILNP(j.mode) {
			cfg.Policy = PeerFailoverPolicy
		}
	}
	return cfg
}

// PeerRunDir is where one cell's runs go.
func PeerRunDir(out, scenario, mode, traffic string) string {
	return filepath.Join(out, "runs", scenario+"-"+mode+"-"+traffic)
}

// PeerCommand is the command line that produces one cell.
func PeerCommand(c PeersConfig, scenario, mode, traffic string) string {
	return fmt.Sprintf("ilnp-lab run --scenario %s --mode %s --traffic %s --profile %s --reps %d --out %s",
		scenario, mode, traffic, c.Profile.Name, c.Reps, PeerRunDir(c.Out, scenario, mode, traffic))
}

// peerJobs lists the runs: every cell a mode can carry, the IPv6 baseline's TCP run per
// scenario when TCP is measured, and the failover runs.
func peerJobs(c PeersConfig) []peerJob {
	var jobs []peerJob
	for _, s := range c.Scenarios {
		for _, t := range c.Traffics {
			for _, m := range c.Modes {
				if peerTrafficError(m, t) == nil {
					jobs = append(jobs, peerJob{s, m, t, false})
				}
			}
		}
		if slices.Contains(c.Traffics, "tcp") && !slices.Contains(c.Modes, PeersBaseline) {
			jobs = append(jobs, peerJob{s, PeersBaseline, "tcp", false})
		}
		for _, t := range c.Traffics {
			for _, m := range c.Modes {
				if hasFailover(c, s, m, t) {
					jobs = append(jobs, peerJob{s, m, t, true})
				}
			}
		}
	}
	return jobs
}

// RunPeers runs every cell (a failed cell is recorded and the rest go on) and writes
// peers.json and peers.md.
func RunPeers(ctx context.Context, c PeersConfig) error {
	if err := c.Validate(); err != nil {
		return err
	}
	failures := map[string]string{}
	for _, j := range peerJobs(c) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := Run(ctx, j.config(c)); err != nil {
			if ctx.Err() != nil {
				return err
			}
			failures[j.key()] = err.Error()
			if c.Progress != nil {
				fmt.Fprintf(c.Progress, "peers: %s failed: %v\n", j.key(), err)
			}
		}
	}
	return WritePeers(c, failures)
}

// Stat is a mean with its 95 % confidence half-width (t distribution; null with one value).
type Stat struct {
	Mean        *float64 `json:"mean"`
	HalfWidth95 *float64 `json:"half_width_95"`
}

// NewStat summarises the values (nil ones skipped).
func NewStat(xs []*float64) Stat {
	var v []float64
	for _, x := range xs {
		if x != nil && !math.IsNaN(*x) {
			v = append(v, *x)
		}
	}
	mean, half, ok := summary.MeanCI95(v)
	if !ok {
		return Stat{}
	}
	s := Stat{Mean: &mean}
	if len(v) >= 2 {
		s.HalfWidth95 = &half
	}
	return s
}

// PeerCell is one (scenario, mode, traffic) of peers.json.
type PeerCell struct {
	Scenario               string `json:"scenario"`
	Mode                   string `json:"mode"`
	Traffic                string `json:"traffic"`
	N                      int    `json:"n"`
	HandoffDelayMs         Stat   `json:"handoff_delay_ms"`
	InterruptionMs         Stat   `json:"interruption_ms"`
	UDPLost                Stat   `json:"udp_lost"`
	TCPRetransmissions     Stat   `json:"tcp_retransmissions"`
	TCPLost                Stat   `json:"tcp_lost"`
	TCPWindowGoodputBps    Stat   `json:"tcp_window_goodput_bps"`
	OverheadBytesPerPacket Stat   `json:"overhead_bytes_per_packet"`
	ThroughputVsIPv6       Stat   `json:"throughput_vs_ipv6"`
	// FailoverMs: the multihomed runs' failover_ms (`--multihome --fail r2-silent@T`, the
	// command in FailoverCommand), over FailoverN runs, of which FailoverNone saw no CN -> MN
	// data via L3 after the failure (no failover).
	FailoverMs      Stat   `json:"failover_ms"`
	FailoverN       int    `json:"failover_n"`
	FailoverNone    int    `json:"failover_none"`
	FailoverCommand string `json:"failover_command,omitempty"`
	// Survived is how many of the n runs kept the session through the move.
	Survived  int    `json:"session_survived"`
	Command   string `json:"command"`
	Keepalive string `json:"keepalive,omitempty"`
	Note      string `json:"note,omitempty"`
}

// peerRep is what one repetition contributes to a cell.
type peerRep struct {
	run      summary.Run
	overhead *float64
	preMove  *float64 // TCP goodput before the move, bytes/s (bulk throughput on L2)
}

func fptr[T int | int64](v *T) *float64 {
	if v == nil {
		return nil
	}
	f := float64(*v)
	return &f
}

// PeerCellFrom derives a cell from its repetitions and the baseline's mean bulk throughput
// (bytes/s, nil: unknown). Pure: the table tests feed it directly.
func PeerCellFrom(scenario, mode, traffic string, reps []peerRep, baseline *float64) PeerCell {
	c := PeerCell{Scenario: scenario, Mode: mode, Traffic: traffic, N: len(reps)}
	col := func(f func(peerRep) *float64) Stat {
		var xs []*float64
		for _, r := range reps {
			xs = append(xs, f(r))
		}
		return NewStat(xs)
	}
	c.HandoffDelayMs = col(func(r peerRep) *float64 { return r.run.HandoffDelayMs })
	c.InterruptionMs = col(func(r peerRep) *float64 { return r.run.InterruptionMs })
	c.UDPLost = col(func(r peerRep) *float64 { return fptr(r.run.UDPLost) })
	c.TCPRetransmissions = col(func(r peerRep) *float64 { return fptr(r.run.TCPRetransmissions) })
	c.TCPLost = col(func(r peerRep) *float64 { return fptr(r.run.TCPLost) })
	c.TCPWindowGoodputBps = col(func(r peerRep) *float64 { return r.run.TCPWindowGoodputBps })
	c.OverheadBytesPerPacket = col(func(r peerRep) *float64 { return r.overhead })
	if baseline != nil && *baseline > 0 {
		c.ThroughputVsIPv6 = col(func(r peerRep) *float64 {
			if r.preMove == nil {
				return nil
			}
			v := *r.preMove / *baseline
			return &v
		})
	}
	for _, r := range reps {
		if r.run.SessionSurvived != nil && *r.run.SessionSurvived {
			c.Survived++
		}
	}
	return c
}

// setFailover fills the failover column from the multihomed runs.
func (c *PeerCell) setFailover(reps []peerRep) {
	var xs []*float64
	for _, r := range reps {
		xs = append(xs, r.run.FailoverMs)
		if r.run.FailoverMs == nil {
			c.FailoverNone++
		}
	}
	c.FailoverMs, c.FailoverN = NewStat(xs), len(reps)
}

// fmtFailover is the failover column: the mean over the runs that failed over, and how many
// did not.
func fmtFailover(c PeerCell) string {
	switch {
	case c.FailoverN == 0:
		return "-"
	case c.FailoverNone == c.FailoverN:
		return fmt.Sprintf("none (%d/%d)", c.FailoverNone, c.FailoverN)
	case c.FailoverNone > 0:
		return fmt.Sprintf("%s (none in %d/%d)", fmtStat(c.FailoverMs, 1, 0), c.FailoverNone, c.FailoverN)
	}
	return fmtStat(c.FailoverMs, 1, 0)
}

// preMoveGoodput is the bytes/s the MN received per second from 1 s into the flow until the
// move (the capture's rate bins [1, enter)), nil when that span holds no whole second.
func preMoveGoodput(r measure.Result) *float64 {
	var sum float64
	n := 0
	for _, p := range r.Rate {
		if p.T >= 1 && p.T+1 <= r.Enter {
			sum += p.V
			n++
		}
	}
	if n == 0 {
		return nil
	}
	v := sum / float64(n)
	return &v
}

// loadPeerReps reads a cell's repetitions from its run directory.
func loadPeerReps(dir, mode string) ([]peerRep, error) {
	s, err := summary.Read(filepath.Join(dir, "summary.json"))
	if err != nil {
		return nil, err
	}
	var reps []peerRep
	for i, run := range s.Runs {
		rd := filepath.Join(dir, fmt.Sprintf("rep-%d", i+1))
		r := peerRep{run: run}
		if res, err := loadResult(filepath.Join(rd, "result.json")); err == nil && res.Run.TCPBytes != nil {
			r.preMove = preMoveGoodput(res)
		}
		if info, err := ReadPeerInfo(filepath.Join(rd, "peer.json")); err == nil {
			r.overhead = info.OverheadBytesPerPacket
		} else if v, ok := captureOverhead(rd); ok {
			r.overhead = &v
		}
		reps = append(reps, r)
	}
	return reps, nil
}

// captureOverhead is the mean number of bytes a CN -> MN data packet arriving at the MN
// carried beyond its IPv6 header and transport segment: extension headers (ILNP's nonce
// option, Mobile IPv6's type 2 routing header) and IPv6-in-IPv6 tunnel headers (Mobile
// IPv6 through the home agent), from mn-wire.pcap when the mode kept the captured packets
// there, else mn.pcap.
func captureOverhead(repDir string) (float64, bool) {
	path := filepath.Join(repDir, "mn-wire.pcap")
	if _, err := os.Stat(path); err != nil {
		path = filepath.Join(repDir, "mn.pcap")
	}
	cn, mn := nid64(CNNID), nid64(MNNID)
	var sum, n int
	err := eachPcapPacket(path, func(r *rawPacket) {
		if r.pkt.Dir == pcap.DirOutgoing {
			return
		}
		if extra, src, dst, ok := PacketOverhead(r.rec[r.ip:]); ok &&
			binary.BigEndian.Uint64(src[8:]) == cn && binary.BigEndian.Uint64(dst[8:]) == mn {
			sum += extra
			n++
		}
	})
	if err != nil || n == 0 {
		return 0, false
	}
	return float64(sum) / float64(n), true
}

// PacketOverhead walks an IPv6 packet (tunnels included) to its TCP or UDP segment and says
// how many bytes came before it beyond one fixed IPv6 header, with the innermost addresses.
// ok is false for anything but a TCP or UDP segment with payload, or a malformed packet.
func PacketOverhead(b []byte) (extra int, src, dst [16]byte, ok bool) {
	if len(b) < 40 || b[0]>>4 != 6 {
		return 0, src, dst, false
	}
	total := 40 + int(binary.BigEndian.Uint16(b[4:]))
	off := 0
	for depth := 0; depth < 4; depth++ {
		if len(b) < off+40 || b[off]>>4 != 6 {
			return 0, src, dst, false
		}
		copy(src[:], b[off+8:off+24])
		copy(dst[:], b[off+24:off+40])
		next := b[off+6]
		off += 40
		for hops := 0; next == 0 || next == 43 || next == 60; hops++ {
			if hops > 8 || len(b) < off+2 {
				return 0, src, dst, false
			}
			next = b[off]
			off += (int(b[off+1]) + 1) * 8
		}
		switch next {
		case 41: // IPv6 in IPv6
			continue
		case pcap.ProtoTCP:
			if len(b) < off+20 {
				return 0, src, dst, false
			}
			seg := total - off
			if seg <= int(b[off+12]>>4)*4 {
				return 0, src, dst, false // no payload
			}
			return off - 40, src, dst, true
		case pcap.ProtoUDP:
			if total-off <= 8 {
				return 0, src, dst, false
			}
			return off - 40, src, dst, true
		default:
			return 0, src, dst, false
		}
	}
	return 0, src, dst, false
}

// PeerCells reads every cell of c from its run directories; failures (by "scenario mode
// traffic") become the cell's note.
func PeerCells(c PeersConfig, failures map[string]string) []PeerCell {
	var cells []PeerCell
	for _, s := range c.Scenarios {
		var baseline *float64
		if reps, err := loadPeerReps(PeerRunDir(c.Out, s, PeersBaseline, "tcp"), PeersBaseline); err == nil {
			var xs []*float64
			for _, r := range reps {
				xs = append(xs, r.preMove)
			}
			baseline = NewStat(xs).Mean
		}
		for _, t := range c.Traffics {
			for _, m := range c.Modes {
				var cell PeerCell
				if err := peerTrafficError(m, t); err != nil {
					cell = PeerCell{Scenario: s, Mode: m, Traffic: t, Note: ErrMPTCPUDP.Error()}
				} else {
					reps, err := loadPeerReps(PeerRunDir(c.Out, s, m, t), m)
					cell = PeerCellFrom(s, m, t, reps, baseline)
					cell.Command = PeerCommand(c, s, m, t)
					if f, ok := failures[s+" "+m+" "+t]; ok {
						cell.Note = "failed: " + f
					} else if err != nil {
						cell.Note = "no runs: " + err.Error()
					}
					if Traffics[t].UDP {
						cell.ThroughputVsIPv6 = Stat{}
					}
				}
				if hasFailover(c, s, m, t) {
					cell.FailoverCommand = PeerFailoverCommand(c, s, m, t)
					reps, err := loadPeerReps(PeerFailoverDir(c.Out, s, m, t), m)
					cell.setFailover(reps)
					if f, ok := failures["failover "+s+" "+m+" "+t]; ok {
						cell.Note = strings.TrimPrefix(cell.Note+"; ", "; ") + "failover failed: " + f
					} else if err != nil && cell.Note == "" {
						cell.Note = "no failover runs: " + err.Error()
					}
				}
				if m == "wireguard" {
					cell.Keepalive = WGKeepaliveNote
				}
				cells = append(cells, cell)
			}
		}
	}
	return cells
}

// WritePeers writes peers.json and peers.md from the run directories.
func WritePeers(c PeersConfig, failures map[string]string) error {
	cells := PeerCells(c, failures)
	b, err := json.MarshalIndent(cells, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.Out, "peers.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Out, "peers.md"), []byte(PeersMarkdown(c, cells)), 0o644)
}

// fmtStat prints "mean ± half" with the given scale and decimals; "-" for no value.
func fmtStat(s Stat, scale float64, decimals int) string {
	if s.Mean == nil {
		return "-"
	}
	out := fmt.Sprintf("%.*f", decimals, *s.Mean*scale)
	if s.HalfWidth95 != nil {
		out += fmt.Sprintf(" ± %.*f", decimals, *s.HalfWidth95*scale)
	}
	return out
}

// PeersMarkdown is peers.md: the table (means ± 95 % half-widths, the command of every cell)
// and a paragraph per peer on where it beats ILNP and why.
func PeersMarkdown(c PeersConfig, cells []PeerCell) string {
	var b strings.Builder
	b.WriteString("# ILNP beside the peers users pick today (issue 26)\n\n")
	fmt.Fprintf(&b, "Profile `%s` (flow %v, MN's L3 link up at %v, L2 down at %v), access links as the lab's default (`wlan`, 30 Mbit/s), n = %d per cell.",
		c.Profile.Name, c.Profile.Duration, c.Profile.Enter, c.Profile.Leave, c.Reps)
	if c.Reps < 3 {
		fmt.Fprintf(&b, " **Reduced n: %d repetition(s) per cell, fewer than the issue's n >= 3; with n = 1 no interval can be given.**", c.Reps)
	}
	b.WriteString(" Cells: mean ± 95 % half-width (Student t) over the runs that had a value; `-` where the metric does not apply.\n\n")
	b.WriteString("Metrics: handoff delay is each mode's own signal to its first answer on the new path (ILNP: LU -> LU-ACK; MIPv6: BU -> BAck; MPTCP: the MN's ADD_ADDR for L3 -> the first CN packet at L3, the MP_JOIN SYN; WireGuard: the MN's first packet from L3 -> the first packet it receives at L3). Interruption: the longest gap in CN -> MN delivery. Overhead: bytes per CN -> MN data packet beyond plain IPv6 (ILNP's nonce option, MIPv6's tunnel or routing header, MPTCP's DSS option, WireGuard's outer IPv6 + UDP + header, tag and padding). Throughput vs IPv6: TCP goodput before the move over plain IPv6's on the same path (`ipv6` mode, same scenario).\n\n")
	if len(c.FailoverScenarios) > 0 {
		fmt.Fprintf(&b, "Failover: separate runs of the same cell with the MN multihomed (both links up all along, no move) and R1 silently dropping everything over R1-R2 from %v on (`--multihome --fail %s`; %s): the time from the failure to the first CN -> MN data packet via L3 (`failover_ms`, as in ILNP's multihomed runs; ILNP with `--policy %s`). `none (k/n)`: in k of n runs no data came via L3 after the failure. The peers' MN has L2 as its preferred uplink and L3 as the spare (%s). Scenarios with failover runs: %s; ilnp-hard and mipv6 have nothing to fail over to (`--multihome` refuses them).\n\n",
			PeerFail(c.Profile).At, failArg(PeerFail(c.Profile)), "the `failover_ms` column and `failover_command` in peers.json", PeerFailoverPolicy,
			"MPTCP: L3 a `signal backup` endpoint; WireGuard: source routing per uplink and the preferred default via R2", strings.Join(c.FailoverScenarios, ", "))
	}
	b.WriteString("| scenario | mode | traffic | n | survived | handoff delay (ms) | interruption (ms) | UDP lost | TCP retrans. | TCP lost | window goodput (Mbit/s) | overhead (B/pkt) | throughput vs IPv6 | failover (ms) | run |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var cmds []string
	for _, cell := range cells {
		ref := "-"
		if cell.Command != "" {
			cmds = append(cmds, cell.Command)
			ref = fmt.Sprintf("[%d](#cmd-%d)", len(cmds), len(cmds))
		}
		if cell.FailoverCommand != "" {
			cmds = append(cmds, cell.FailoverCommand)
			ref += fmt.Sprintf(", [%d](#cmd-%d)", len(cmds), len(cmds))
		}
		survived := fmt.Sprintf("%d/%d", cell.Survived, cell.N)
		if cell.N == 0 {
			survived = "-"
		}
		mode := cell.Mode
		switch {
		case strings.HasPrefix(cell.Note, "no runs"):
			mode += " (not run)"
		case strings.HasPrefix(cell.Note, "failed"), strings.HasPrefix(cell.Note, "failover failed"):
			mode += " (failed: peers.json has the error)"
		case strings.HasPrefix(cell.Note, "no failover runs"):
			mode += " (failover not run)"
		case cell.Note != "":
			mode += " (" + cell.Note + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			cell.Scenario, mode, cell.Traffic, cell.N, survived, fmtStat(cell.HandoffDelayMs, 1, 1), fmtStat(cell.InterruptionMs, 1, 0),
			fmtStat(cell.UDPLost, 1, 1), fmtStat(cell.TCPRetransmissions, 1, 1), fmtStat(cell.TCPLost, 1, 1),
			fmtStat(cell.TCPWindowGoodputBps, 1e-6, 2), fmtStat(cell.OverheadBytesPerPacket, 1, 1), fmtStat(cell.ThroughputVsIPv6, 1, 2), fmtFailover(cell), ref)
	}
	b.WriteString("\nCommands (each cell's runs, summary.json and captures are in its `--out`):\n\n")
	for i, cmd := range cmds {
		fmt.Fprintf(&b, "%d. <a id=\"cmd-%d\"></a>`%s`\n", i+1, i+1, cmd)
	}
	b.WriteString("\n" + WGKeepaliveNote + ".\n\n")
	for _, peer := range []string{"mptcp", "wireguard"} {
		if !slices.Contains(c.Modes, peer) {
			continue
		}
		b.WriteString(PeerParagraph(peer, cells) + "\n\n")
	}
	return b.String()
}

// peerWhy is the mechanism behind each metric a peer can win on.
var peerWhy = map[string]map[string]string{
	"mptcp": {
		"goodput":      "during the overlap MPTCP sends on both links at once (two subflows), where ILNP moves the session from one locator to the other",
		"interruption": "the L3 subflow is up before L2 goes (make-before-break at the transport), and data lost on L2 is reinjected on it",
		"handoff":      "its exchange (the ADD_ADDR, then the CN's MP_JOIN SYN) runs in the kernel at both ends, where ILNP's LU and LU-ACK pass through ilnpd in user space",
		"lost":         "segments stranded on the dead subflow are reinjected on the live one at the data level",
		"retrans":      "segments stranded on the dead subflow are reinjected on the live one at the data level",
		"failover":     "the backup subflow is open before the failure, and the kernel moves the data onto it once the L2 subflow is stale (retransmission timeouts without progress)",
	},
	"wireguard": {
		"handoff":      "roaming needs no signalling: the CN takes the MN's new endpoint from its next authenticated packet",
		"interruption": "roaming needs no signalling: the CN sends to L3 as soon as a packet of the MN's arrives from there",
		"lost":         "the CN switches on the MN's first packet from L3, with no exchange to wait for",
		"goodput":      "the tunnel carries the flow unchanged once the CN has the new endpoint",
		"retrans":      "the CN switches on the MN's first packet from L3, with no exchange to wait for",
	},
}

// PeerParagraph says where a peer beats ILNP (the better of ilnp-soft and ilnp-hard per
// scenario and traffic, by mean) and why, and where it loses.
func PeerParagraph(peer string, cells []PeerCell) string {
	find := func(s, m, t string) *PeerCell {
		for i := range cells {
			if cells[i].Scenario == s && cells[i].Mode == m && cells[i].Traffic == t {
				return &cells[i]
			}
		}
		return nil
	}
	type metric struct {
		key, name string
		stat      func(*PeerCell) Stat
		higher    bool
	}
	metrics := []metric{
		{"handoff", "handoff delay", func(c *PeerCell) Stat { return c.HandoffDelayMs }, false},
		{"interruption", "interruption", func(c *PeerCell) Stat { return c.InterruptionMs }, false},
		{"lost", "UDP lost", func(c *PeerCell) Stat { return c.UDPLost }, false},
		{"lost", "TCP lost segments", func(c *PeerCell) Stat { return c.TCPLost }, false},
		{"retrans", "TCP retransmissions", func(c *PeerCell) Stat { return c.TCPRetransmissions }, false},
		{"goodput", "window goodput", func(c *PeerCell) Stat { return c.TCPWindowGoodputBps }, true},
		{"failover", "failover", func(c *PeerCell) Stat { return c.FailoverMs }, false},
	}
	small := false // a cell with fewer than 3 runs: a difference may be noise
	var wins, losses []string
	why := map[string]bool{}
	seen := map[[2]string]bool{}
	for _, c := range cells {
		if c.Mode != peer || (c.N == 0 && c.FailoverN == 0) || seen[[2]string{c.Scenario, c.Traffic}] {
			continue
		}
		seen[[2]string{c.Scenario, c.Traffic}] = true
		if c.FailoverN > 0 && c.FailoverNone == c.FailoverN {
			// No failover at all: worse than any ILNP figure.
			if ic := find(c.Scenario, "ilnp-soft", c.Traffic); ic != nil && ic.FailoverMs.Mean != nil {
				losses = append(losses, fmt.Sprintf("%s %s failover (none in %d/%d runs vs ilnp-soft %.4g)",
					c.Scenario, c.Traffic, c.FailoverNone, c.FailoverN, *ic.FailoverMs.Mean))
			}
		}
		for _, m := range metrics {
			ps := m.stat(&c)
			pv := ps.Mean
			if pv == nil {
				continue
			}
			var best *float64
			var bestStat Stat
			bestMode := ""
			for _, im := range []string{"ilnp-soft", "ilnp-hard"} {
				ic := find(c.Scenario, im, c.Traffic)
				if ic == nil || ic.N == 0 {
					continue
				}
				if st := m.stat(ic); st.Mean != nil && (best == nil || (m.higher && *st.Mean > *best) || (!m.higher && *st.Mean < *best)) {
					best, bestStat, bestMode = st.Mean, st, im
					small = small || ic.N < 3
				}
			}
			if best == nil {
				continue
			}
			small = small || c.N < 3
			// Overlapping 95 % intervals are no difference.
			if ps.HalfWidth95 != nil && bestStat.HalfWidth95 != nil && math.Abs(*pv-*best) <= *ps.HalfWidth95+*bestStat.HalfWidth95 {
				continue
			}
			where := fmt.Sprintf("%s %s %s (%.4g vs %s %.4g)", c.Scenario, c.Traffic, m.name, *pv, bestMode, *best)
			switch {
			case (m.higher && *pv > *best) || (!m.higher && *pv < *best):
				wins = append(wins, where)
				why[m.key] = true
			case *pv != *best:
				losses = append(losses, where)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "**%s.** ", peer)
	if peer == "mptcp" {
		b.WriteString("MPTCP carries TCP only: its UDP cells have no figures. ")
	}
	if peer == "wireguard" {
		if slices.ContainsFunc(cells, func(c PeerCell) bool { return c.Mode == peer && c.FailoverN > 0 }) {
			b.WriteString("Multihomed, WireGuard has no path failure detection: it sends where the MN's routing sends, and the MN's preferred uplink, R2, stays reachable when the path beyond it goes silent, so nothing moves the tunnel to L3. ")
		}
		b.WriteString("WireGuard roams only when the MN sends: when a TCP receiver on the MN has nothing left to send once its old link is gone (its last ACK went out on it), the CN keeps sending to the old endpoint until the MN's persistent keepalive, 25 s after its last packet; UDP HD is bidirectional and roams with the MN's next datagram. ")
	}
	if len(wins) == 0 {
		b.WriteString("It beats the better ILNP mode on no measured metric in these runs.")
	} else {
		fmt.Fprintf(&b, "It beats the better ILNP mode on: %s. ", strings.Join(wins, "; "))
		var reasons []string
		for _, k := range []string{"goodput", "interruption", "handoff", "lost", "retrans", "failover"} {
			if why[k] {
				reasons = append(reasons, peerWhy[peer][k])
			}
		}
		reasons = slices.Compact(reasons)
		fmt.Fprintf(&b, "Why: %s.", strings.Join(reasons, "; "))
	}
	if len(losses) > 0 {
		fmt.Fprintf(&b, " ILNP is better on: %s.", strings.Join(losses, "; "))
	}
	if small {
		b.WriteString(" (Compared by mean; some cells have fewer than 3 runs, so a small difference may be noise.)")
	} else {
		b.WriteString(" (Compared by mean; differences whose 95 % intervals overlap are left out.)")
	}
	return b.String()
}
