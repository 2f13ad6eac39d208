package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/analysis"
	"ilnp/lab/netns"
	"ilnp/lab/pcap"
)

// Signalling overhead at scale (thesis §6.4, eqs. 49-52): N mobile nodes and M correspondents
// in namespaces, every CN with an ILNP session to every MN, one simultaneous handoff of all
// MNs, and the LUs / LU-ACKs counted from a capture on the core router R1.
//
//	CN1..CNm ─ br-cn(R1) ─ R2 ─ br-mn ─ mn-r2 of MN1..MNn      (L2, where the MNs start)
//	                     └ R3 ─ br-mn ─ mn-r3 of MN1..MNn      (L3, where they all move)
//
// No link emulation (LAN delays): the experiment counts packets, it does not time them.

// ScaleConfig is one N x M topology.
type ScaleConfig struct {
	MNs, CNs int
	BinDir   string
	Dir      string
	Log      io.Writer // progress (nil: none)
}

// ScaleRow is one measured N x M handoff beside eqs. 49-52.
type ScaleRow struct {
	MNs        int    `json:"mns"`
	CNs        int    `json:"cns"`
	Namespaces string `json:"namespaces"` // glob of the run's namespace names
	Sessions   int    `json:"sessions"`   // session_new events at the MNs before the move
	// Counted in the capture on R1's CN-side bridge (each packet crosses it once).
	LUPackets    int `json:"lu_packets"`
	LUAckPackets int `json:"lu_ack_packets"`
	LUBytes      int `json:"lu_bytes"` // IP layer (IPv6 header and up)
	LUAckBytes   int `json:"lu_ack_bytes"`
	// From the MNs' timelines: LUs sent (all attempts) and exchanges acked.
	LUSentTimeline  int `json:"lu_sent_timeline"`
	Retransmissions int `json:"retransmissions"` // lu_sent with attempt > 1
	Acked           int `json:"acked"`
	// Eqs. 49-52 with our measured mean sizes and with the thesis's 86/86 bytes.
	FormulaPackets     int `json:"formula_packets"`
	FormulaBytesOurs   int `json:"formula_bytes_ours"`
	FormulaBytesThesis int `json:"formula_bytes_thesis"`
	// MIPv6 for the same N x M with the thesis's sizes (eqs. 41-48), for reading beside.
	MIPv6NoROPackets int     `json:"mipv6_noro_packets"`
	MIPv6ROPackets   int     `json:"mipv6_ro_packets"`
	SetupSeconds     float64 `json:"setup_s"`
	HandoffSeconds   float64 `json:"handoff_s"` // move until every exchange was acked
	Error            string  `json:"error,omitempty"`
}

// ScaleMNNID and ScaleCNNID are the identifiers of MN k and CN j (1-based).
func ScaleMNNID(k int) string { return fmt.Sprintf("0214:4fff:fe21:%04x", k) }

// ScaleCNNID is CN j's identifier.
func ScaleCNNID(j int) string { return fmt.Sprintf("0214:4fff:fe22:%04x", j) }

// ScaleHostsFile names cn1..cnM (on L1) and mn1..mnN (L2 preferred, L3).
func ScaleHostsFile(mns, cns int) string {
	var b strings.Builder
	for j := 1; j <= cns; j++ {
		fmt.Fprintf(&b, "%s|10,%s cn%d\n", L64(L1), NID64(ScaleCNNID(j)), j)
	}
	for k := 1; k <= mns; k++ {
		fmt.Fprintf(&b, "%s|10,%s mn%d\n%s|20,%s mn%d\n", L64(L2), NID64(ScaleMNNID(k)), k, L64(L3), NID64(ScaleMNNID(k)), k)
	}
	return b.String()
}

// MeasureScale builds the N x M testbed, opens every CN-MN session, moves all MNs into L3
// at once and counts the signalling on R1.
func MeasureScale(ctx context.Context, cfg ScaleConfig) (row ScaleRow, err error) {
	row.MNs, row.CNs = cfg.MNs, cfg.CNs
	thesis := analysis.ThesisILNPSizes()
	row.FormulaPackets = analysis.ILNPv6Overhead(cfg.MNs, cfg.CNs, thesis).Packets
	row.FormulaBytesThesis = analysis.ILNPv6Overhead(cfg.MNs, cfg.CNs, thesis).Bytes
	row.MIPv6NoROPackets = analysis.MIPv6NoROOverhead(cfg.MNs, analysis.ThesisMIPv6Sizes()).Packets
	row.MIPv6ROPackets = analysis.MIPv6ROOverhead(cfg.MNs, cfg.CNs, analysis.ThesisMIPv6Sizes()).Packets
	if cfg.MNs < 1 || cfg.CNs < 1 || cfg.MNs > 200 || cfg.CNs > 200 {
		return row, fmt.Errorf("scale: MNs and CNs must be in [1, 200], got %d x %d", cfg.MNs, cfg.CNs)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return row, err
	}
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return row, err
	}
	ilnpd := filepath.Join(cfg.BinDir, "ilnpd")
	if _, err := os.Stat(ilnpd); err != nil {
		return row, fmt.Errorf("scale needs ilnpd: %w", err)
	}
	logf := func(format string, a ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "scale %dx%d: "+format+"\n", append([]any{cfg.MNs, cfg.CNs}, a...)...)
		}
	}
	start := time.Now()
	// RAs every 0.5-1 s, as the thesis topology's quick profile.
	t := &Topology{Cfg: TopologyConfig{Dir: dir, RAMin: 500 * time.Millisecond, RAMax: time.Second}, ID: netns.Suffix(6)}
	row.Namespaces = "isc-" + t.ID + "-*"
	defer func() {
		for _, ns := range t.all {
			_ = os.RemoveAll(netns.EtcDir(ns.Name))
		}
		_ = os.Remove("/etc/netns") // only if empty
		err = errors.Join(err, t.Close())
	}()
	mk := func(role string) (*netns.NS, error) {
		ns, err := netns.New("isc-" + t.ID + "-" + role)
		if err != nil {
			return nil, err
		}
		t.all = append(t.all, ns)
		return ns, nil
	}
	if t.R1, err = mk("r1"); err != nil {
		return row, err
	}
	if t.R2, err = mk("r2"); err != nil {
		return row, err
	}
	if t.R3, err = mk("r3"); err != nil {
		return row, err
	}
	mns := make([]*netns.NS, cfg.MNs)
	cns := make([]*netns.NS, cfg.CNs)
	for k := range mns {
		if mns[k], err = mk(fmt.Sprintf("mn%d", k+1)); err != nil {
			return row, err
		}
	}
	for j := range cns {
		if cns[j], err = mk(fmt.Sprintf("cn%d", j+1)); err != nil {
			return row, err
		}
	}
	logf("%d namespaces", len(t.all))
	if err := scaleWire(t, mns, cns); err != nil {
		return row, err
	}
	if err := t.startRadvd("br-mn", "br-mn"); err != nil {
		return row, err
	}
	for k, ns := range mns {
		if err := t.waitAddress(ctx, ns, IfMNR2, Addr(L2, ScaleMNNID(k+1)), 20*time.Second); err != nil {
			return row, err
		}
	}
	// Daemons.
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte(ScaleHostsFile(cfg.MNs, cfg.CNs)), 0o644); err != nil {
		return row, err
	}
	type node struct {
		ns     *netns.NS
		name   string
		state  string
		events string
	}
	var nodes []node
	for j, ns := range cns {
		nodes = append(nodes, node{ns: ns, name: fmt.Sprintf("cn%d", j+1)})
	}
	for k, ns := range mns {
		nodes = append(nodes, node{ns: ns, name: fmt.Sprintf("mn%d", k+1)})
	}
	for i := range nodes {
		n := &nodes[i]
		n.state = filepath.Join(dir, n.name+"-state")
		n.events = filepath.Join(dir, n.name+"-events.jsonl")
		if err := os.MkdirAll(n.state, 0o755); err != nil {
			return row, err
		}
		ifaces, nid := []string{IfCN}, ""
		if strings.HasPrefix(n.name, "mn") {
			ifaces = []string{IfMNR2, IfMNR3}
			var k int
			fmt.Sscanf(n.name, "mn%d", &k)
			nid = ScaleMNNID(k)
		} else {
			var j int
			fmt.Sscanf(n.name, "cn%d", &j)
			nid = ScaleCNNID(j)
		}
		conf := filepath.Join(dir, "ilnpd-"+n.name+".conf")
		text := strings.Replace(DaemonConfig(n.name, ifaces, nid, "soft", n.state, n.events, hosts), "log-level debug", "log-level info", 1)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return row, err
		}
		if err := n.ns.WriteEtc("resolv.conf", "nameserver ::1\n"); err != nil {
			return row, err
		}
		if _, err := t.Start(n.ns, "ilnpd-"+n.name, ilnpd, "-config", conf); err != nil {
			return row, err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		for {
			if _, err := os.Stat(filepath.Join(n.state, "ctl.sock")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return row, fmt.Errorf("ilnpd %s: no control socket after 30 s: %s", n.name, tail(filepath.Join(dir, "ilnpd-"+n.name+".log"), 10))
			}
			if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
				return row, err
			}
		}
	}
	logf("%d daemons up after %v", len(nodes), time.Since(start).Round(time.Millisecond))
	// Sessions: every CN pings every MN by name (its stub resolver answers with the MN's
	// I-LV, the datapath opens the session on the first packet). CNs in parallel.
	var wg sync.WaitGroup
	errs := make([]error, len(cns))
	for j, ns := range cns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 1; k <= cfg.MNs; k++ {
				name := fmt.Sprintf("mn%d", k)
				var last error
				for try := 0; try < 5; try++ {
					if last = pingByName(t, ns, name); last == nil {
						break
					}
					time.Sleep(300 * time.Millisecond)
				}
				if last != nil {
					errs[j] = fmt.Errorf("cn%d cannot ping %s: %w", j+1, name, last)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return row, err
	}
	mnEvents := func(k int) []timeline.Event {
		ev, _ := readTimeline(filepath.Join(dir, fmt.Sprintf("mn%d-events.jsonl", k)))
		return ev
	}
	for k := 1; k <= cfg.MNs; k++ {
		// The datapath's and the ILCC's session_new both name the peer: count peers.
		peers := map[string]bool{}
		for _, e := range mnEvents(k) {
			if e.Kind == timeline.SessionNew {
				peers[e.Peer] = true
			}
		}
		row.Sessions += len(peers)
	}
	if row.Sessions != cfg.MNs*cfg.CNs {
		return row, fmt.Errorf("%d sessions at the MNs, want %d", row.Sessions, cfg.MNs*cfg.CNs)
	}
	row.SetupSeconds = time.Since(start).Seconds()
	logf("%d sessions after %.1f s", row.Sessions, row.SetupSeconds)

	// Capture on R1's CN-side bridge: every LU to a CN and every LU-ACK from one crosses it
	// once.
	pcapPath := filepath.Join(dir, "r1.pcap")
	capture, err := t.Start(t.R1, "tcpdump-r1", "tcpdump", "-i", "br-cn", "-n", "-U", "--immediate-mode", "-s", "256",
		"-Z", "root", "-w", pcapPath, "ip6")
	if err != nil {
		return row, err
	}
	if err := waitLog(ctx, capture, "listening on", 5*time.Second); err != nil {
		return row, err
	}
	// One simultaneous handoff: every MN's interface to R3 comes up at once.
	moveAt := timeline.Now()
	moved := time.Now()
	for _, ns := range mns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = ns.Run("ip", "link", "set", IfMNR3, "up")
		}()
	}
	wg.Wait()
	// Until every MN has an acknowledged exchange with every CN.
	deadline = time.Now().Add(30 * time.Second)
	for {
		acked, sent, again := 0, 0, 0
		for k := 1; k <= cfg.MNs; k++ {
			for _, e := range mnEvents(k) {
				if e.MonoNS < moveAt {
					continue
				}
				switch {
				case e.Kind == timeline.LUSent:
					sent++
					if e.Attempt > 1 {
						again++
					}
				case e.Kind == timeline.LUAckReceived && strings.Contains(e.Detail, "outcome=acked"):
					acked++
				}
			}
		}
		row.Acked, row.LUSentTimeline, row.Retransmissions = acked, sent, again
		if acked >= cfg.MNs*cfg.CNs {
			break
		}
		if time.Now().After(deadline) {
			break
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return row, err
		}
	}
	row.HandoffSeconds = time.Since(moved).Seconds()
	// Late retransmissions would still count: give them a moment, then stop the capture.
	_ = sleepCtx(ctx, time.Second)
	capture.Stop(3 * time.Second)
	mnSet := map[uint64]bool{}
	for k := 1; k <= cfg.MNs; k++ {
		mnSet[nid64(ScaleMNNID(k))] = true
	}
	c, err := CountLUs(pcapPath, mnSet)
	if err != nil {
		return row, err
	}
	row.LUPackets, row.LUAckPackets, row.LUBytes, row.LUAckBytes = c.LU, c.Ack, c.LUBytes, c.AckBytes
	if c.LU > 0 && c.Ack > 0 {
		ours := analysis.ILNPSizes{LU: (c.LUBytes + c.LU/2) / c.LU, LUAck: (c.AckBytes + c.Ack/2) / c.Ack}
		row.FormulaBytesOurs = analysis.ILNPv6Overhead(cfg.MNs, cfg.CNs, ours).Bytes
	}
	if row.Acked < cfg.MNs*cfg.CNs {
		return row, fmt.Errorf("only %d of %d LU exchanges acknowledged within 30 s", row.Acked, cfg.MNs*cfg.CNs)
	}
	logf("LU %d (%d B), LU-ACK %d (%d B), formula %d packets", c.LU, c.LUBytes, c.Ack, c.AckBytes, row.FormulaPackets)
	return row, nil
}

// pingByName resolves name through the namespace's stub resolver (getent, as an application
// would) and pings the answer twice.
func pingByName(t *Topology, ns *netns.NS, name string) error {
	out, err := ns.Run("getent", "ahostsv6", name)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", name, err)
	}
	f := strings.Fields(out)
	if len(f) == 0 {
		return fmt.Errorf("resolve %s: empty answer", name)
	}
	r, err := t.Ping(ns, f[0], 2, 200*time.Millisecond, 2*time.Second)
	if err != nil {
		return err
	}
	if len(r.RTTs) == 0 {
		return fmt.Errorf("no echo reply from %s (%s)", name, f[0])
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func scaleWire(t *Topology, mns, cns []*netns.NS) error {
	var errs []error
	set := func(ns *netns.NS, kv ...string) { errs = append(errs, setSysctls(ns, kv...)) }
	for _, ns := range t.all {
		set(ns, "net.ipv6.conf.default.accept_dad", "0", "net.ipv6.conf.all.accept_dad", "0")
	}
	for _, r := range []*netns.NS{t.R1, t.R2, t.R3} {
		set(r, "net.ipv6.conf.all.forwarding", "1", "net.ipv6.conf.default.forwarding", "1")
	}
	for _, ns := range cns {
		set(ns, "net.ipv6.conf.default.accept_ra", "0")
	}
	for _, ns := range mns {
		set(ns, "net.ipv6.conf.default.accept_ra", "1", "net.ipv6.conf.default.autoconf", "1",
			"net.ipv6.conf.default.router_solicitation_interval", "1")
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	type cmd struct {
		ns   *netns.NS
		args []string
	}
	var cmds []cmd
	bridge := func(ns *netns.NS, name, addr string) {
		cmds = append(cmds,
			cmd{ns, []string{"ip", "link", "add", name, "type", "bridge", "mcast_snooping", "0"}},
			cmd{ns, []string{"ip", "addr", "add", addr, "dev", name}},
			cmd{ns, []string{"ip", "link", "set", name, "up"}})
	}
	bridge(t.R1, "br-cn", "2001:db8:1::1/64")
	bridge(t.R2, "br-mn", "2001:db8:2::1/64")
	bridge(t.R3, "br-mn", "2001:db8:3::1/64")
	for _, c := range cmds {
		if _, err := c.ns.Run(c.args...); err != nil {
			return err
		}
	}
	cmds = nil
	if err := netns.Veth(t.R1, "r1-r2", t.R2, "r2-r1"); err != nil {
		return err
	}
	if err := netns.Veth(t.R1, "r1-r3", t.R3, "r3-r1"); err != nil {
		return err
	}
	for j, ns := range cns {
		port := fmt.Sprintf("c%d", j+1)
		if err := netns.Veth(ns, IfCN, t.R1, port); err != nil {
			return err
		}
		cmds = append(cmds, cmd{t.R1, []string{"ip", "link", "set", port, "master", "br-cn"}},
			cmd{ns, []string{"ip", "addr", "add", Addr(L1, ScaleCNNID(j+1)).String() + "/64", "dev", IfCN}},
			cmd{ns, []string{"ip", "route", "add", "default", "via", "2001:db8:1::1", "dev", IfCN}})
	}
	for k, ns := range mns {
		for _, r := range []struct {
			router *netns.NS
			ifname string
		}{{t.R2, IfMNR2}, {t.R3, IfMNR3}} {
			port := fmt.Sprintf("m%d", k+1)
			if err := netns.Veth(ns, r.ifname, r.router, port); err != nil {
				return err
			}
			cmds = append(cmds, cmd{r.router, []string{"ip", "link", "set", port, "master", "br-mn"}},
				cmd{ns, []string{"ip", "token", "set", "::" + ScaleMNNID(k+1), "dev", r.ifname}})
		}
		cmds = append(cmds, cmd{ns, []string{"ip", "link", "set", IfMNR3, "down"}})
	}
	cmds = append(cmds,
		cmd{t.R1, []string{"ip", "addr", "add", "2001:db8:12::1/64", "dev", "r1-r2"}},
		cmd{t.R1, []string{"ip", "addr", "add", "2001:db8:13::1/64", "dev", "r1-r3"}},
		cmd{t.R1, []string{"ip", "route", "add", L2.String(), "via", "2001:db8:12::2", "dev", "r1-r2"}},
		cmd{t.R1, []string{"ip", "route", "add", L3.String(), "via", "2001:db8:13::3", "dev", "r1-r3"}},
		cmd{t.R2, []string{"ip", "addr", "add", "2001:db8:12::2/64", "dev", "r2-r1"}},
		cmd{t.R2, []string{"ip", "route", "add", "default", "via", "2001:db8:12::1", "dev", "r2-r1"}},
		cmd{t.R3, []string{"ip", "addr", "add", "2001:db8:13::3/64", "dev", "r3-r1"}},
		cmd{t.R3, []string{"ip", "route", "add", "default", "via", "2001:db8:13::1", "dev", "r3-r1"}})
	for _, c := range cmds {
		if _, err := c.ns.Run(c.args...); err != nil {
			return err
		}
	}
	return nil
}

// LUCount is what CountLUs found.
type LUCount struct {
	LU, Ack           int
	LUBytes, AckBytes int // IP layer
	Other             int // type 156 from a node that is neither (should be 0)
}

// CountLUs counts ICMPv6 type 156 packets in a capture: from an MN (identifier in mns) it is
// an LU, otherwise an LU-ACK (only the MNs move; CNs only acknowledge). Bytes are the IPv6
// packet's length (40 + payload length).
func CountLUs(path string, mns map[uint64]bool) (LUCount, error) {
	var c LUCount
	f, err := os.Open(path)
	if err != nil {
		return c, err
	}
	defer f.Close()
	r, err := pcap.NewReader(f)
	if err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		if err != nil {
			return c, fmt.Errorf("%s: %w", path, err)
		}
		isLU, size, ok := ClassifyLU(r.LinkType, rec, mns)
		switch {
		case !ok:
		case isLU:
			c.LU++
			c.LUBytes += size
		default:
			c.Ack++
			c.AckBytes += size
		}
	}
}

// ClassifyLU says whether a captured frame is an ILNP Locator Update (ICMPv6 156, after any
// extension headers) and, if so, whether it comes from an MN, and its IPv6 length.
func ClassifyLU(linkType uint32, rec pcap.Record, mns map[uint64]bool) (fromMN bool, ipLen int, ok bool) {
	p, ok := pcap.Decode(linkType, rec)
	if !ok || p.Malformed || p.Proto != pcap.ProtoICMPv6 || p.ICMPType != 156 {
		return false, 0, false
	}
	off := map[uint32]int{pcap.LinkEthernet: 14, pcap.LinkSLL: 16, pcap.LinkSLL2: 20}[linkType]
	if linkType == pcap.LinkEthernet && len(rec.Data) >= 14 && binary.BigEndian.Uint16(rec.Data[12:]) == 0x8100 {
		off = 18
	}
	if len(rec.Data) < off+6 {
		return false, 0, false
	}
	ipLen = 40 + int(binary.BigEndian.Uint16(rec.Data[off+4:]))
	return mns[p.SrcNID()], ipLen, true
}
