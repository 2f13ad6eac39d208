// Package scalesess is `ilnp-lab scale` (issue 28): the stack at scale with real ILNP packets.
// A correspondent (the lab's CN, ilnpd built from this tree) holds N sessions opened by N
// correspondents, each an I-LV with a nonce of its own, that one namespace behind R1 plays with
// forged packets (lab/attack) on a raw socket and reads back on an AF_PACKET socket. Measured:
// the datapath's kernel time per packet at N sessions, kernel map bytes and daemon RSS per
// session, a mass move at the CN (LUs from distinct sessions at a rate, LU -> LU-ACK, a flow
// beside it), the fan-out of one move at the MN to M correspondents, and a restart of the CN's
// daemon with N sessions. (lab/scale.go is another thing: the thesis's N x M signalling.)
package scalesess

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"ilnp/internal/config"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
	"ilnp/lab"
	"ilnp/lab/netns"
)

// Result is scale.json (the contract of `ilnp-lab scale`).
type Result struct {
	Sessions              int     `json:"sessions"`
	EgressNsPerPkt        float64 `json:"egress_ns_per_pkt"`
	IngressNsPerPkt       float64 `json:"ingress_ns_per_pkt"`
	KernelBytesPerSession float64 `json:"kernel_bytes_per_session"`
	DaemonBytesPerSession float64 `json:"daemon_bytes_per_session"`
	LURate                int     `json:"lu_rate"`
	LUsSent               int     `json:"lus_sent"`
	LUsAcked              int     `json:"lus_acked"`
	LUAckP50Ms            float64 `json:"lu_ack_p50_ms"`
	LUAckP99Ms            float64 `json:"lu_ack_p99_ms"`
	BystanderLost         int     `json:"bystander_lost"`
	FanoutCorrespondents  int     `json:"fanout_correspondents"`
	FanoutMs              float64 `json:"fanout_ms"`
	AdoptMs               float64 `json:"adopt_ms"`

	// For scale.md and the test: what the figures above rest on.
	Notes Notes `json:"-"`
}

// Notes are the details behind Result.
type Notes struct {
	Opened, TableSize                           int
	OpenSeconds                                 float64
	EgressPkts, IngressPkts                     uint64
	KernelMapBytes, RSSBefore, RSSAfter         int64
	LUSeconds, LUAckMaxMs                       float64
	BystanderSent                               int
	FanoutOpened, FanoutLUs, FanoutAcked        int
	FanoutRetransmits, FanoutSendErrors         int
	RestartBefore, RestartAdopted, RestartAfter int
	LUAckSentByCN                               uint64
	EventsLost, Recovered, LUReceivedByCN       uint64
}

// Config is one run.
type Config struct {
	Out            string
	BinDir         string        // ilnpd and ilnpctl
	Sessions       int           // the CN's correspondents (default 100,000)
	LURate         int           // LUs per second in the mass move (default 10,000)
	LUDuration     time.Duration // how long the mass move lasts (default 10 s)
	Correspondents int           // the MN's correspondents in the fan-out (default 1,000)
	OpenRate       int           // sessions opened per second (default 5,000)
	// ProfileDir, if set, is where the daemons serve their Go profiles and the run saves the
	// CN's CPU profile of the mass move, its heap with the sessions and the MN's CPU profile
	// of the fan-out (profile.go). A short path: it holds Unix sockets.
	ProfileDir string
	// MemoryLimit, if set, is the CN's memory-limit (ilnpd.conf(5)).
	MemoryLimit string
	// EventRingSize, if set, is the CN's event-ring-size (ilnpd.conf(5)).
	EventRingSize string
	Log           io.Writer
}

// Addresses of the correspondents' namespace (behind R1) and the prefixes they live in.
var (
	peerLink = netip.MustParsePrefix("2001:db8:60::/64")
	prefixA  = netip.MustParsePrefix("2001:db8:61::/64") // the CN's correspondents before the move
	prefixB  = netip.MustParsePrefix("2001:db8:62::/64") // ... and after
	prefixC  = netip.MustParsePrefix("2001:db8:63::/64") // the MN's correspondents
)

const echoPort = 7

// Run builds the lab, runs every part and writes OUT/scale.json and OUT/scale.md.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = defaults(cfg)
	if cfg.Sessions+1 > maxTable {
		return Result{}, fmt.Errorf("%d sessions and the bystander do not fit in the largest session table (%d)", cfg.Sessions, maxTable)
	}
	dir, err := filepath.Abs(cfg.Out)
	if err != nil {
		return Result{}, err
	}
	if cfg.ProfileDir != "" {
		if cfg.ProfileDir, err = filepath.Abs(cfg.ProfileDir); err != nil {
			return Result{}, err
		}
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return Result{}, err
		}
	}
	s, err := start(ctx, cfg, filepath.Join(dir, "lab"))
	if err != nil {
		return Result{}, err
	}
	defer s.close()
	res, err := s.run(ctx)
	if err != nil {
		return res, err
	}
	return res, Write(dir, res, cfg)
}

func defaults(cfg Config) Config {
	if cfg.Sessions <= 0 {
		cfg.Sessions = 100_000
	}
	if cfg.LURate <= 0 {
		cfg.LURate = 10_000
	}
	if cfg.LUDuration <= 0 {
		cfg.LUDuration = 10 * time.Second
	}
	if cfg.Correspondents <= 0 {
		cfg.Correspondents = 1000
	}
	if cfg.OpenRate <= 0 {
		cfg.OpenRate = 5000
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	return cfg
}

// maxTable is session-table-size's upper bound (ilnpd.conf(5)).
const maxTable = 1 << 20

// TableSize is the session-table-size the CN runs with for n sessions: room for them, the
// bystander and some slack, within the bound (a million sessions: ilnpd.conf(5) SIZING).
func TableSize(n int) int { return min(maxTable, max(256, n+n/16+256)) }

// EmbryoTableSize is the embryo-table-size with it, as ilnpd.conf(5) SIZING has a user set
// it: what a flood needs, no more than the session table.
func EmbryoTableSize(n int) int { return min(TableSize(n), 65536) }

// run does the parts in order.
func (s *scaleRun) run(ctx context.Context) (Result, error) {
	r := Result{Sessions: s.cfg.Sessions, LURate: s.cfg.LURate, FanoutCorrespondents: s.cfg.Correspondents}
	r.Notes.TableSize = TableSize(s.cfg.Sessions)
	var err error
	if r.Notes.RSSBefore, err = rss(s.cnProc.Cmd.Process.Pid); err != nil {
		return r, err
	}
	if err := s.openCN(ctx, &r); err != nil {
		return r, fmt.Errorf("opening %d sessions at the CN: %w", s.cfg.Sessions, err)
	}
	if err := s.memory(&r); err != nil {
		return r, fmt.Errorf("memory: %w", err)
	}
	if err := s.perPacket(ctx, &r); err != nil {
		return r, fmt.Errorf("datapath per packet: %w", err)
	}
	if err := s.massMove(ctx, &r); err != nil {
		return r, fmt.Errorf("mass move: %w", err)
	}
	if err := s.fanout(ctx, &r); err != nil {
		return r, fmt.Errorf("fan-out: %w", err)
	}
	if err := s.restart(ctx, &r); err != nil {
		return r, fmt.Errorf("restart: %w", err)
	}
	return r, nil
}

// Write saves scale.json and scale.md into dir.
func Write(dir string, r Result, cfg Config) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "scale.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write scale.json: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "scale.md"), []byte(Report(r, defaults(cfg))), 0o644)
}

// Report is scale.md: the figures of scale.json as a table, and what each rests on.
func Report(r Result, cfg Config) string {
	var b strings.Builder
	n := r.Notes
	memLimit := ""
	if cfg.MemoryLimit != "" {
		memLimit = ", memory-limit " + cfg.MemoryLimit
	}
	if cfg.EventRingSize != "" {
		memLimit += ", event-ring-size " + cfg.EventRingSize
	}
	fmt.Fprintf(&b, "# ILNP at scale\n\nCommand: `ilnp-lab scale --out DIR --sessions %d --lu-rate %d --correspondents %d` "+
		"(one run; mass move %s). Topology: lan-lan lab, ilnpd on the CN and the MN, the correspondents in one namespace "+
		"behind R1 (forged ILNP packets from a raw socket, read back on an AF_PACKET socket, a nonce per session).\n\n",
		cfg.Sessions, cfg.LURate, cfg.Correspondents, cfg.LUDuration)
	b.WriteString("| field | value |\n|---|---:|\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	row("sessions", r.Sessions)
	row("egress_ns_per_pkt", fmt.Sprintf("%.0f", r.EgressNsPerPkt))
	row("ingress_ns_per_pkt", fmt.Sprintf("%.0f", r.IngressNsPerPkt))
	row("kernel_bytes_per_session", fmt.Sprintf("%.0f", r.KernelBytesPerSession))
	row("daemon_bytes_per_session", fmt.Sprintf("%.0f", r.DaemonBytesPerSession))
	row("lu_rate", r.LURate)
	row("lus_sent", r.LUsSent)
	row("lus_acked", r.LUsAcked)
	row("lu_ack_p50_ms", fmt.Sprintf("%.2f", r.LUAckP50Ms))
	row("lu_ack_p99_ms", fmt.Sprintf("%.2f", r.LUAckP99Ms))
	row("bystander_lost", r.BystanderLost)
	row("fanout_correspondents", r.FanoutCorrespondents)
	row("fanout_ms", fmt.Sprintf("%.1f", r.FanoutMs))
	row("adopt_ms", fmt.Sprintf("%.1f", r.AdoptMs))
	fmt.Fprintf(&b, `
- *sessions*: %d of %d opened at the CN in %.1f s (a UDP datagram to its echo service from each correspondent, the echo,
  a second datagram), session-table-size %d, embryo-table-size %d, new-sessions-per-second 0 (no bound), log-level info%s; the CN's datapath
  lost %d events (dp_events_lost) meanwhile and its daemon recovered %d sessions from its table (sessions_reconciled).
- *egress/ingress_ns_per_pkt*: kernel run time per run of the CN's TCX programs on cn-r1 (BPF_ENABLE_STATS), while every
  correspondent sends one datagram to the echo service and gets the echo (%d egress, %d ingress runs). Each datagram
  finds its session cold (up to 20,000 others between two of one session's packets): ingress includes the cache and TLB
  misses of the session and locator-pair lookups, which grow once the maps outgrow the CPU caches; the echo finds them
  warm. BenchmarkDatapath measures one warm session.
- *kernel_bytes_per_session*: memlock of every BPF map ilnpd holds (%d bytes, sized by session-table-size) / sessions;
  *daemon_bytes_per_session*: ilnpd's VmRSS with the sessions (%d) minus before them (%d) / sessions.
  For 1 M sessions: %.0f MB of maps + %.0f MB of daemon growth (linear extrapolation).
- *lus_sent*: LUs from distinct sessions, each from the session's new locator with its nonce, at lu_rate for %.1f s;
  *lus_acked*: LU-ACKs the correspondents received (the CN counted %d lu_received, %d lu_ack_sent); LU -> LU-ACK measured at the
  correspondents' socket (LAN both ways through R1), max %.2f ms.
- *bystander_lost*: of %d UDP datagrams the MN sent to the CN's echo service at 1 per ms during the move (1 s before
  and after too), those whose echo never came back.
- *fanout_ms*: the MN's correspondents (%d opened), the MN's L3 interface comes up: from L3 becoming the MN's active locator to its
  last lu_ack_received on its timeline; %d LUs, %d acknowledged, %d retransmissions, %d send errors.
- *adopt_ms*: the CN's ilnpd SIGTERMed with %d sessions and started again: from the start to its "adopted" event
  (%d sessions adopted, %d in its ILCC afterwards).
`, n.Opened, r.Sessions, n.OpenSeconds, n.TableSize, EmbryoTableSize(r.Sessions), memLimit, n.EventsLost, n.Recovered, n.EgressPkts, n.IngressPkts, n.KernelMapBytes, n.RSSAfter, n.RSSBefore,
		r.KernelBytesPerSession, r.DaemonBytesPerSession, // bytes per session x 1e6 / 1e6 bytes per MB
		n.LUSeconds, n.LUReceivedByCN, n.LUAckSentByCN, n.LUAckMaxMs,
		n.BystanderSent, n.FanoutOpened, n.FanoutLUs, n.FanoutAcked, n.FanoutRetransmits, n.FanoutSendErrors,
		n.RestartBefore, n.RestartAdopted, n.RestartAfter)
	return b.String()
}

// scaleRun is the state of one run.
type scaleRun struct {
	cfg            Config
	dir            string
	t              *lab.Topology
	pns            *netns.NS
	peers          *peers
	cn, mn         *group
	cnSock, mnSock string
	cnConf         string
	cnEvents       string
	mnEvents       string
	cnProc         *lab.Proc
	cnAddr, mnAddr wire.ILV
	echoes         []*echoServer
}

func (s *scaleRun) close() {
	if s.peers != nil {
		s.peers.close()
	}
	for _, e := range s.echoes {
		e.close()
	}
	if s.t != nil {
		for _, ns := range []*netns.NS{s.t.CN, s.t.MN} {
			_ = os.RemoveAll(netns.EtcDir(ns.Name))
		}
	}
	_ = os.Remove("/etc/netns") // only if empty
	if s.pns != nil {
		_ = s.pns.Delete()
	}
	if s.t != nil {
		_ = s.t.Close()
	}
}

// start builds the lab in labDir with the daemons, the echo services and the correspondents.
func start(ctx context.Context, cfg Config, labDir string) (*scaleRun, error) {
	if err := os.MkdirAll(labDir, 0o755); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Log, "scale: building the lab in %s\n", labDir)
	top, err := lab.Build(ctx, lab.TopologyConfig{Scenario: lab.Scenarios["lan-lan"], Access: "lan", Dir: labDir,
		RAMin: 200 * time.Millisecond, RAMax: 500 * time.Millisecond})
	if err != nil {
		return nil, fmt.Errorf("scale lab: %w", err)
	}
	s := &scaleRun{cfg: cfg, dir: labDir, t: top}
	if err := s.setup(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *scaleRun) setup(ctx context.Context) error {
	var err error
	if s.cnAddr, err = wire.ILVFromAddr(lab.Addr(lab.L1, lab.CNNID)); err != nil {
		return err
	}
	if s.mnAddr, err = wire.ILVFromAddr(lab.Addr(lab.L2, lab.MNNID)); err != nil {
		return err
	}
	if s.cn, err = newGroup(cnPeerBase, s.cfg.Sessions); err != nil {
		return err
	}
	if s.mn, err = newGroup(mnPeerBase, s.cfg.Correspondents); err != nil {
		return err
	}
	if err := s.peerNamespace(); err != nil {
		return err
	}
	if err := s.daemons(ctx); err != nil {
		return err
	}
	for _, ns := range []*netns.NS{s.t.CN, s.t.MN} {
		e, err := newEchoServer(ns, echoPort)
		if err != nil {
			return err
		}
		s.echoes = append(s.echoes, e)
	}
	s.peers, err = openPeers(s.pns, "pr-r1", s.cn, s.mn)
	return err
}

// peerNamespace adds the correspondents' namespace behind R1; R1 routes their prefixes to it.
func (s *scaleRun) peerNamespace() error {
	t := s.t
	ns, err := netns.New("ilab-" + t.ID + "-peers")
	if err != nil {
		return err
	}
	s.pns = ns
	for _, k := range []string{"net.ipv6.conf.default.accept_dad", "net.ipv6.conf.all.accept_dad", "net.ipv6.conf.default.accept_ra"} {
		if err := ns.Sysctl(k, "0"); err != nil {
			return err
		}
	}
	if err := netns.Veth(t.R1, "r1-pr", ns, "pr-r1"); err != nil {
		return err
	}
	r1 := peerLink.Addr().Next()
	pr := r1.Next()
	cmds := []struct {
		ns   *netns.NS
		args []string
	}{
		{t.R1, []string{"ip", "addr", "add", r1.String() + "/64", "dev", "r1-pr"}},
		{ns, []string{"ip", "addr", "add", pr.String() + "/64", "dev", "pr-r1"}},
		{ns, []string{"ip", "-6", "route", "add", "default", "via", r1.String(), "dev", "pr-r1"}},
		// The neighbour tables hold the other end only, whatever the number of correspondents.
		{t.R1, []string{"ip", "-6", "neigh", "replace", pr.String(), "lladdr", "", "dev", "r1-pr", "nud", "permanent"}},
	}
	mac, err := ns.Run("cat", "/sys/class/net/pr-r1/address")
	if err != nil {
		return err
	}
	cmds[3].args[6] = strings.TrimSpace(mac)
	for _, p := range []netip.Prefix{prefixA, prefixB, prefixC} {
		cmds = append(cmds, struct {
			ns   *netns.NS
			args []string
		}{t.R1, []string{"ip", "-6", "route", "add", p.String(), "via", pr.String(), "dev", "r1-pr"}})
	}
	for _, c := range cmds {
		if _, err := c.ns.Run(c.args...); err != nil {
			return fmt.Errorf("correspondents' wiring: %w", err)
		}
	}
	if r, err := t.Ping(ns, s.cnAddr.Addr().String(), 1, 0, 2*time.Second); err != nil || len(r.RTTs) != 1 {
		return fmt.Errorf("the correspondents' namespace cannot reach the CN: %v", err)
	}
	return nil
}

// daemons starts ilnpd on the CN and the MN (soft handoff), configured for the table size.
func (s *scaleRun) daemons(ctx context.Context) error {
	t := s.t
	ilnpd := filepath.Join(s.cfg.BinDir, "ilnpd")
	if _, err := os.Stat(ilnpd); err != nil {
		return fmt.Errorf("scale needs ilnpd: %w", err)
	}
	hosts := filepath.Join(s.dir, "hosts")
	if err := os.WriteFile(hosts, []byte(lab.HostsFile()), 0o644); err != nil {
		return err
	}
	for _, n := range []struct {
		ns       *netns.NS
		name     string
		ifaces   []string
		nid      string
		sock     *string
		events   *string
		sessions int
	}{
		{t.CN, "cn", []string{lab.IfCN}, lab.CNNID, &s.cnSock, &s.cnEvents, s.cfg.Sessions},
		{t.MN, "mn", []string{lab.IfMNR2, lab.IfMNR3}, lab.MNNID, &s.mnSock, &s.mnEvents, s.cfg.Correspondents},
	} {
		state := filepath.Join(s.dir, n.name+"-state")
		if err := os.MkdirAll(state, 0o755); err != nil {
			return err
		}
		*n.events = filepath.Join(s.dir, n.name+"-events.jsonl")
		conf := filepath.Join(s.dir, "ilnpd-"+n.name+".conf")
		text := strings.Replace(lab.DaemonConfig(n.name, n.ifaces, n.nid, "soft", state, *n.events, hosts),
			"log-level debug", "log-level info", 1) +
			fmt.Sprintf("session-table-size %d\nembryo-table-size %d\nnew-sessions-per-second 0\n", TableSize(n.sessions), EmbryoTableSize(n.sessions))
		if n.name == "cn" && s.cfg.MemoryLimit != "" {
			text += "memory-limit " + s.cfg.MemoryLimit + "\n"
		}
		if n.name == "cn" && s.cfg.EventRingSize != "" {
			text += "event-ring-size " + s.cfg.EventRingSize + "\n"
		}
		if _, err := config.Parse(strings.NewReader(text), conf); err != nil {
			return fmt.Errorf("scale wrote a bad ilnpd config: %w", err)
		}
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return err
		}
		if err := n.ns.WriteEtc("resolv.conf", "nameserver ::1\n"); err != nil {
			return err
		}
		args := []string{ilnpd, "-config", conf}
		if sock := s.pprofSocket(n.name); sock != "" {
			args = append(args, "-pprof", sock)
		}
		p, err := t.Start(n.ns, "ilnpd-"+n.name, args...)
		if err != nil {
			return err
		}
		if n.name == "cn" {
			s.cnProc, s.cnConf = p, conf
		}
		*n.sock = filepath.Join(state, "ctl.sock")
	}
	if err := s.waitReady(ctx, t.CN, s.cnSock, 20*time.Second); err != nil {
		return err
	}
	if err := s.waitReady(ctx, t.MN, s.mnSock, 20*time.Second); err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, err := t.MN.Run(filepath.Join(s.cfg.BinDir, "ilnpctl"), "-s", s.mnSock, "-j", "show", "locators")
		if err == nil && strings.Contains(out, lab.L64(lab.L2)) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the MN's ilnpd has no L2 locator within 15 s: %v %s", err, out)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	// The MN resolves the CN by name: its datapath then knows the CN speaks ILNP.
	for {
		out, err := t.MN.Run("getent", "ahostsv6", "cn")
		if err == nil && strings.Contains(out, "2001:db8:1:") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the MN does not resolve cn: %v %s", err, out)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

func (s *scaleRun) waitReady(ctx context.Context, ns *netns.NS, sock string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if _, err := s.stats(ns, sock); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("ilnpd in %s does not answer on %s within %s: %w", ns.Name, sock, limit, err)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (s *scaleRun) show(ns *netns.NS, sock, what string, v any) error {
	cmd := ns.Command(filepath.Join(s.cfg.BinDir, "ilnpctl"), "-s", sock, "-j", "show", what)
	cmd.SysProcAttr = nil
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("ilnpctl show %s in %s: %w", what, ns.Name, err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("ilnpctl show %s: %w", what, err)
	}
	return nil
}

func (s *scaleRun) stats(ns *netns.NS, sock string) (map[string]uint64, error) {
	var m map[string]uint64
	return m, s.show(ns, sock, "stats", &m)
}

// peerSessions returns which of g's correspondents ns's ILCC has a session with.
func (s *scaleRun) peerSessions(ns *netns.NS, sock string, g *group) (map[int]bool, error) {
	var rows []struct {
		PeerNID string `json:"peer_nid"`
	}
	if err := s.show(ns, sock, "sessions", &rows); err != nil {
		return nil, err
	}
	have := map[int]bool{}
	for _, r := range rows {
		n, err := wire.ParseNID(r.PeerNID)
		if err != nil {
			continue
		}
		if i := g.index(n); i >= 0 {
			have[i] = true
		}
	}
	return have, nil
}

// monoNow is CLOCK_MONOTONIC, the timeline's clock.
func monoNow() int64 { return timeline.Now() }
