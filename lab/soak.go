package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"ilnp/internal/bpffs"
	"ilnp/internal/datapath"
	"ilnp/internal/nstest"
	"ilnp/internal/timeline"
	"ilnp/lab/netns"
)

// The soak (issue 12): many moves L2 <-> L3 under a live TCP byte stream and a UDP echo flow,
// alternating soft and hard handoff, with the MN daemon's resources sampled before and after.
// Nothing may break and nothing may grow.

// SoakConfig is one `ilnp-lab soak`.
type SoakConfig struct {
	Out    string
	BinDir string
	Moves  int
	// SwitchEvery: the MN's handoff mode alternates soft / hard every this many moves
	// (default 10).
	SwitchEvery int
	// Warmup moves run before the start figures are taken (default min(5, Moves/10), plus
	// one if needed so that start and end are sampled on the same network): the daemon's heap
	// and the kernel's tables reach their working size in the first moves.
	Warmup   int
	Progress io.Writer
}

// SoakResult is DIR/soak.json (the contract of issue 12: exactly these fields).
type SoakResult struct {
	Moves           int   `json:"moves"`
	Acked           int   `json:"acked"`
	SessionsBroken  int   `json:"sessions_broken"`
	UDPLost         int64 `json:"udp_lost"`
	RSSStartKB      int64 `json:"rss_start_kb"`
	RSSEndKB        int64 `json:"rss_end_kb"`
	FDsStart        int   `json:"fds_start"`
	FDsEnd          int   `json:"fds_end"`
	MapEntriesStart int   `json:"map_entries_start"`
	MapEntriesEnd   int   `json:"map_entries_end"`
}

// SoakResources is one sample of the MN's ilnpd and namespace.
type SoakResources struct {
	RSSKB      int64 `json:"rss_kb"`
	FDs        int   `json:"fds"`
	Goroutines int   `json:"goroutines"`
	MapEntries int   `json:"map_entries"`
	Routes     int   `json:"routes"`
	Addresses  int   `json:"addresses"`
}

func (r SoakResources) String() string {
	return fmt.Sprintf("rss=%d KB fds=%d goroutines=%d map_entries=%d routes=%d addresses=%d",
		r.RSSKB, r.FDs, r.Goroutines, r.MapEntries, r.Routes, r.Addresses)
}

// SoakReport is the whole outcome: the contract's figures and the rest (DIR/soak-detail.json).
type SoakReport struct {
	Result      SoakResult    `json:"result"`
	Start       SoakResources `json:"start"`
	End         SoakResources `json:"end"`
	WarmupMoves int           `json:"warmup_moves"`
	SoftMoves   int           `json:"soft_moves"`
	HardMoves   int           `json:"hard_moves"`
	TCPWritten  int64         `json:"tcp_written"`
	TCPReceived int64         `json:"tcp_received"`
	TCPError    string        `json:"tcp_error,omitempty"`
	UDPSent     int64         `json:"udp_sent"`
	// UDPLostSoft and UDPLostHard split udp_lost by the handoff mode of the move during
	// which the datagram was sent.
	UDPLostSoft int64   `json:"udp_lost_soft"`
	UDPLostHard int64   `json:"udp_lost_hard"`
	MaxUDPGapMs float64 `json:"max_udp_gap_ms"`
	// MaxUDPGapEndNS is when the longest gap ended (the timelines' monotonic clock).
	MaxUDPGapEndNS int64    `json:"max_udp_gap_end_ns"`
	Unacked        []string `json:"unacked,omitempty"`
	// UnackedAtNS is when each unacknowledged move's link change was made (same clock), so
	// the timelines can be read around it.
	UnackedAtNS  []int64 `json:"unacked_at_ns,omitempty"`
	DurationSecs float64 `json:"duration_s"`
	// Drops are the CN's and the MN's non-zero drop and error counters at the end (ilnpctl show
	// stats; "cn:" or "mn:" before the name): where lost datagrams went.
	Drops map[string]uint64 `json:"drops,omitempty"`
}

func (c SoakConfig) progress(format string, a ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "soak: "+format+"\n", a...)
	}
}

// Soak builds the lan-lan testbed with ilnpd on CN and MN, runs the flows and the moves, and
// writes DIR/soak.json and DIR/soak-detail.json.
func Soak(ctx context.Context, cfg SoakConfig) (rep SoakReport, err error) {
	if cfg.Out == "" || cfg.BinDir == "" {
		return rep, errors.New("soak: --out and the ilnpd binaries are required")
	}
	if cfg.Moves < 1 {
		return rep, fmt.Errorf("soak: --moves %d: want at least 1", cfg.Moves)
	}
	if cfg.SwitchEvery <= 0 {
		cfg.SwitchEvery = 10
	}
	if cfg.Warmup <= 0 {
		cfg.Warmup = min(5, cfg.Moves/10)
	}
	// Start and end are sampled on the same network: the MN keeps one more identity address
	// (and its routes) on lo while away from the network its sessions started in.
	if (cfg.Moves-cfg.Warmup)%2 != 0 {
		cfg.Warmup++
	}
	dir, err := filepath.Abs(cfg.Out)
	if err != nil {
		return rep, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return rep, err
	}
	began := time.Now()
	prof := Profiles["quick"]
	topo, err := Build(ctx, TopologyConfig{Scenario: Scenarios["lan-lan"], Access: "lan", RAMin: prof.RAMin, RAMax: prof.RAMax, Dir: dir})
	if err != nil {
		_ = unmountUnder(dir)
		return rep, fmt.Errorf("soak: testbed: %w", err)
	}
	mode := Modes["ilnp-soft"](ModeOptions{BinDir: cfg.BinDir, Dir: dir})
	defer func() { err = errors.Join(err, mode.Teardown(topo), topo.Close()) }()
	if err := mode.Setup(ctx, topo); err != nil {
		return rep, err
	}
	mnEv, _ := mode.Timelines()
	mnSock := filepath.Join(dir, "mn-state", "ctl.sock")
	ctl := func(args ...string) (string, error) {
		return topo.MN.Run(append([]string{filepath.Join(cfg.BinDir, "ilnpctl"), "-s", mnSock}, args...)...)
	}
	f, err := startSoakFlows(topo)
	if err != nil {
		return rep, err
	}
	defer f.close()

	events := &eventTail{path: mnEv}
	ifs := [2]string{IfMNR2, IfMNR3}
	at, handoff := 0, "soft"
	res := &rep.Result
	sample := func() (SoakResources, error) { return sampleSoak(topo, dir, ctl) }
	const ackLimit = 10 * time.Second
	for i := 0; i < cfg.Moves; i++ {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if i == cfg.Warmup {
			if rep.Start, err = sample(); err != nil {
				return rep, err
			}
			cfg.progress("start (after %d warm-up moves): %s", cfg.Warmup, rep.Start)
		}
		want := "soft"
		if (i/cfg.SwitchEvery)%2 == 1 {
			want = "hard"
		}
		if want != handoff {
			if out, err := ctl("set", "handoff", want); err != nil {
				return rep, fmt.Errorf("soak: set handoff %s: %v %s", want, err, out)
			}
			handoff = want
		}
		f.markPhase(handoff == "hard")
		if handoff == "soft" {
			rep.SoftMoves++
		} else {
			rep.HardMoves++
		}
		next := 1 - at
		ok := true
		since := timeline.Now()
		if _, err := topo.MN.Run("ip", "link", "set", ifs[next], "up"); err != nil {
			return rep, err
		}
		if !events.waitAck(ctx, since, ackLimit) {
			ok = false
			rep.Unacked = append(rep.Unacked, fmt.Sprintf("move %d (%s): entering %s", i+1, handoff, ifs[next]))
			rep.UnackedAtNS = append(rep.UnackedAtNS, since)
		}
		time.Sleep(100 * time.Millisecond)
		since = timeline.Now()
		if _, err := topo.MN.Run("ip", "link", "set", ifs[at], "down"); err != nil {
			return rep, err
		}
		// Soft: the old locator was advertised as valid, its loss is news for the CN. Hard:
		// the LU on entering listed the new locator alone.
		if handoff == "soft" && !events.waitAck(ctx, since, ackLimit) {
			ok = false
			rep.Unacked = append(rep.Unacked, fmt.Sprintf("move %d (%s): leaving %s", i+1, handoff, ifs[at]))
			rep.UnackedAtNS = append(rep.UnackedAtNS, since)
		}
		at = next
		res.Moves++
		if ok {
			res.Acked++
		}
		if (i+1)%25 == 0 || i+1 == cfg.Moves {
			cfg.progress("%d/%d moves, %d acknowledged, TCP %d bytes, UDP %d of %d echoed", i+1, cfg.Moves, res.Acked,
				f.received.Load(), f.udp.Got(), f.udp.Snapshot().Sent)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if rep.End, err = sample(); err != nil {
		return rep, err
	}
	if cfg.Warmup >= cfg.Moves {
		rep.Start = rep.End
	}
	cfg.progress("end: %s", rep.End)
	rep.Drops = soakDrops(topo, dir, cfg.BinDir)
	fr := f.stop()
	rep.WarmupMoves = cfg.Warmup
	rep.TCPWritten, rep.TCPReceived, rep.UDPSent = fr.written, fr.received, fr.udpSent
	rep.MaxUDPGapMs, rep.MaxUDPGapEndNS = float64(fr.maxGap)/1e6, fr.gapEnd
	if fr.tcpErr != nil || fr.received != fr.written {
		res.SessionsBroken++
		rep.TCPError = fmt.Sprintf("%d of %d bytes received: %v", fr.received, fr.written, fr.tcpErr)
	}
	if !fr.udpAliveAtEnd {
		res.SessionsBroken++
	}
	res.UDPLost = fr.udpSent - fr.udpGot
	rep.UDPLostSoft, rep.UDPLostHard = fr.lostSoft, fr.lostHard
	res.RSSStartKB, res.RSSEndKB = rep.Start.RSSKB, rep.End.RSSKB
	res.FDsStart, res.FDsEnd = rep.Start.FDs, rep.End.FDs
	res.MapEntriesStart, res.MapEntriesEnd = rep.Start.MapEntries, rep.End.MapEntries
	rep.DurationSecs = time.Since(began).Seconds()
	if err := writeSoakJSON(filepath.Join(dir, "soak.json"), rep.Result); err != nil {
		return rep, err
	}
	return rep, writeSoakJSON(filepath.Join(dir, "soak-detail.json"), rep)
}

func writeSoakJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// sampleSoak reads the MN's ilnpd (RSS, open files, goroutines), its pinned tables and the
// MN namespace's routes and addresses.
func sampleSoak(topo *Topology, dir string, ctl func(...string) (string, error)) (SoakResources, error) {
	var r SoakResources
	procs := topo.procsNamed("ilnpd-mn")
	if len(procs) == 0 {
		return r, errors.New("soak: the MN's ilnpd is not running")
	}
	pid := procs[len(procs)-1].Cmd.Process.Pid // `ip netns exec` execs ilnpd in its place
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return r, fmt.Errorf("soak: ilnpd status: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			r.RSSKB, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return r, fmt.Errorf("soak: ilnpd fds: %w", err)
	}
	r.FDs = len(fds)
	out, err := ctl("-j", "show", "stats")
	if err != nil {
		return r, fmt.Errorf("soak: ilnpctl show stats: %v %s", err, out)
	}
	var stats map[string]uint64
	if err := json.Unmarshal([]byte(out), &stats); err != nil {
		return r, fmt.Errorf("soak: ilnpctl show stats: %w", err)
	}
	r.Goroutines = int(stats["goroutines"])
	// The MN's ilnpd runs under `ip netns exec`: its bpffs lives in its own mount namespace,
	// kept by a holder for the next daemon (internal/bpffs), and read here through it.
	mnState := filepath.Join(dir, "mn-state")
	dp, err := datapath.OpenPinned(bpffs.Locate(filepath.Join(mnState, "bpf"), mnState))
	if err != nil {
		return r, fmt.Errorf("soak: %w", err)
	}
	entries, err := dp.Entries()
	_ = dp.Close()
	if err != nil {
		return r, fmt.Errorf("soak: %w", err)
	}
	for _, n := range entries {
		r.MapEntries += n
	}
	count := func(args ...string) (int, error) {
		out, err := topo.MN.Run(args...)
		if err != nil {
			return 0, fmt.Errorf("soak: %s: %w", strings.Join(args, " "), err)
		}
		return len(strings.Split(strings.TrimSpace(out), "\n")), nil
	}
	if r.Routes, err = count("ip", "-6", "route", "show", "table", "all"); err != nil {
		return r, err
	}
	if r.Addresses, err = count("ip", "-6", "-o", "addr", "show"); err != nil {
		return r, err
	}
	return r, nil
}

// eventTail reads the MN's timeline file as it grows.
type eventTail struct {
	path   string
	offset int64
	acks   []int64 // monotonic times of acknowledged LUs
}

func (e *eventTail) read() {
	fh, err := os.Open(e.path)
	if err != nil {
		return
	}
	defer fh.Close()
	if _, err := fh.Seek(e.offset, io.SeekStart); err != nil {
		return
	}
	r := bufio.NewReader(fh)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return // a partial line is read again next time
		}
		e.offset += int64(len(line))
		var ev timeline.Event
		if json.Unmarshal(line, &ev) == nil && ev.Kind == timeline.LUAckReceived && strings.Contains(ev.Detail, "outcome=acked") {
			e.acks = append(e.acks, ev.MonoNS)
		}
	}
}

// waitAck waits up to limit for an acknowledged LU after since.
func (e *eventTail) waitAck(ctx context.Context, since int64, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		e.read()
		if len(e.acks) > 0 && e.acks[len(e.acks)-1] > since {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// soakFlows are a TCP byte stream CN -> MN (the nstest pattern, checked byte by byte) and a
// UDP echo flow CN -> MN -> CN, one datagram every soakUDPEvery, by the name "mn".
type soakFlows struct {
	cancel   context.CancelFunc
	tcp      net.Conn
	ln       net.Listener
	echo     net.PacketConn
	udp      *nstest.EchoProbe
	written  atomic.Int64
	received atomic.Int64
	readErr  chan error
	writeErr chan error
	mu       sync.Mutex
	phases   []soakPhase // from which sequence number on the moves were hard or soft
}

const soakUDPEvery = 5 * time.Millisecond

type soakPhase struct {
	from uint64
	hard bool
}

// markPhase records that datagrams sent from now on belong to a soft or a hard move.
func (f *soakFlows) markPhase(hard bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.phases); n > 0 && f.phases[n-1].hard == hard {
		return
	}
	f.phases = append(f.phases, soakPhase{from: f.udp.NextSeq(), hard: hard})
}

type soakFlowResult struct {
	written, received  int64
	tcpErr             error
	udpSent, udpGot    int64
	maxGap             time.Duration
	gapEnd             int64
	udpAliveAtEnd      bool
	lostSoft, lostHard int64
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	k, err := c.w.Write(p)
	c.n.Add(int64(k))
	return k, err
}

func startSoakFlows(topo *Topology) (*soakFlows, error) {
	out, err := topo.CN.Run("getent", "ahostsv6", "mn")
	fields := strings.Fields(out)
	if err != nil || len(fields) == 0 {
		return nil, fmt.Errorf("soak: resolve mn on the CN: %v %s", err, out)
	}
	ip := net.ParseIP(fields[0])
	if ip == nil {
		return nil, fmt.Errorf("soak: resolve mn: %q is no address", fields[0])
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &soakFlows{cancel: cancel, readErr: make(chan error, 1), writeErr: make(chan error, 1)}
	fail := func(err error) (*soakFlows, error) {
		f.close()
		return nil, fmt.Errorf("soak: flows: %w", err)
	}
	if err := topo.MN.Do(func() (err error) {
		if f.ln, err = net.Listen("tcp", "[::]:7000"); err != nil {
			return err
		}
		// Bound to the session-view address (kept on lo across moves).
		f.echo, err = net.ListenPacket("udp", net.JoinHostPort(ip.String(), "7001"))
		return err
	}); err != nil {
		return fail(err)
	}
	go func() {
		c, err := f.ln.Accept()
		if err != nil {
			f.readErr <- err
			return
		}
		defer c.Close()
		f.readErr <- nstest.ReadPattern(ctx, c, &f.received)
	}()
	go nstest.EchoUDP(f.echo)
	var udp net.PacketConn
	if err := topo.CN.Do(func() (err error) {
		if f.tcp, err = net.DialTimeout("tcp", net.JoinHostPort(ip.String(), "7000"), 5*time.Second); err != nil {
			return err
		}
		udp, err = net.ListenPacket("udp", "[::]:0")
		return err
	}); err != nil {
		return fail(err)
	}
	go func() {
		f.writeErr <- nstest.WritePattern(ctx, countingWriter{f.tcp, &f.written}, 1000, 2*time.Millisecond)
	}()
	f.udp = nstest.StartEchoProbe(udp, &net.UDPAddr{IP: ip, Port: 7001}, soakUDPEvery)
	deadline := time.Now().Add(5 * time.Second)
	for f.received.Load() < 10_000 || f.udp.Got() < 20 {
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("not running after 5 s: TCP %d bytes, UDP %d echoes", f.received.Load(), f.udp.Got()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return f, nil
}

// stop ends the flows: the TCP sender stops and half-closes and the receiver must have read
// every byte written; UDP echoes have a second to come back.
func (f *soakFlows) stop() soakFlowResult {
	var r soakFlowResult
	r.udpAliveAtEnd = time.Since(f.udp.Snapshot().LastRx) < time.Second
	f.cancel()
	r.tcpErr = nstest.EndPattern(f.tcp, f.writeErr, f.readErr, 10*time.Second)
	u := f.udp.Stop(time.Second)
	f.close()
	r.written, r.received = f.written.Load(), f.received.Load()
	r.udpSent, r.udpGot = u.Sent, u.Got
	r.maxGap = u.MaxGap
	if !u.MaxGapEnd.IsZero() {
		r.gapEnd = timeline.Now() - int64(time.Since(u.MaxGapEnd))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, seq := range u.Missing {
		hard := false
		for _, p := range f.phases {
			if seq >= p.from {
				hard = p.hard
			}
		}
		if hard {
			r.lostHard++
		} else {
			r.lostSoft++
		}
	}
	return r
}

func (f *soakFlows) close() {
	f.cancel()
	for _, c := range []io.Closer{f.tcp, f.ln, f.echo} {
		if c != nil {
			_ = c.Close()
		}
	}
	if f.udp != nil {
		f.udp.Stop(0)
	}
}

// SoakExcerpt returns the CN's and the MN's timeline events between from and to (the
// timelines' monotonic clock), merged in time order, at most limit lines: what a failed soak
// shows about where an LU, its ACK or the flow disappeared.
func SoakExcerpt(dir string, from, to int64, limit int) string {
	type line struct {
		t    int64
		text string
	}
	var lines []line
	for _, node := range []string{"cn", "mn"} {
		fh, err := os.Open(filepath.Join(dir, node+"-events.jsonl"))
		if err != nil {
			lines = append(lines, line{from, fmt.Sprintf("%s: %v", node, err)})
			continue
		}
		events, err := timeline.Read(fh)
		_ = fh.Close()
		if err != nil {
			lines = append(lines, line{from, fmt.Sprintf("%s: %v", node, err)})
		}
		for _, ev := range events {
			if ev.MonoNS < from || ev.MonoNS > to {
				continue
			}
			b, _ := json.Marshal(ev)
			lines = append(lines, line{ev.MonoNS, fmt.Sprintf("%+9.1f ms %s", float64(ev.MonoNS-from)/1e6, b)})
		}
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].t < lines[j].t })
	var b strings.Builder
	for i, l := range lines {
		if i == limit {
			fmt.Fprintf(&b, "... %d more\n", len(lines)-limit)
			break
		}
		b.WriteString(l.text + "\n")
	}
	return b.String()
}

// soakDrops reads both daemons' counters of dropped or refused packets (best effort: a daemon
// that does not answer adds nothing).
func soakDrops(topo *Topology, dir, binDir string) map[string]uint64 {
	out := map[string]uint64{}
	for _, n := range []struct {
		name string
		ns   *netns.NS
	}{{"cn", topo.CN}, {"mn", topo.MN}} {
		text, err := n.ns.Run(filepath.Join(binDir, "ilnpctl"), "-s", filepath.Join(dir, n.name+"-state", "ctl.sock"), "-j", "show", "stats")
		if err != nil {
			continue
		}
		var stats map[string]uint64
		if json.Unmarshal([]byte(text), &stats) != nil {
			continue
		}
		for k, v := range stats {
			if v != 0 && (strings.Contains(k, "unverified") || strings.Contains(k, "nonce") && !strings.Contains(k, "inserted") && !strings.Contains(k, "stripped") ||
				strings.Contains(k, "error") || strings.Contains(k, "drop") || strings.Contains(k, "rejected") || strings.Contains(k, "withheld") ||
				strings.Contains(k, "replayed") || strings.Contains(k, "unknown_locator") || strings.Contains(k, "invalid_local")) {
				out[n.name+":"+k] = v
			}
		}
	}
	return out
}
