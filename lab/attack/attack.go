// Package attack runs forged-packet attacks against the lab's ILNP hosts while a live TCP flow
// runs between them (`ilnp-lab attack`), and measures on the victims what got through: the
// ILCC's state and counters, the datapath's drop counters, the kernel's, and the flow.
package attack

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
	"ilnp/internal/wire"
	"ilnp/lab"
	"ilnp/lab/netns"
)

// Result is one line of attack.json (the contract of `ilnp-lab attack`): null where a figure
// does not apply.
type Result struct {
	Attack                  string `json:"attack"`
	Sent                    *int   `json:"sent"`
	Accepted                *int   `json:"accepted"`
	FlowSurvived            *bool  `json:"flow_survived"`
	UnverifiedBytesSent     *int64 `json:"unverified_bytes_sent"`
	UnverifiedBytesReceived *int64 `json:"unverified_bytes_received"`

	// For the report: where the attacker stood, how acceptance was measured, and the victim
	// counters that must account for every packet sent.
	From     string   `json:"-"`
	Measured string   `json:"-"`
	Counters []string `json:"-"`
	Counted  uint64   `json:"-"`
	Expected uint64   `json:"-"` // what Counted must reach: Sent unless the attack says otherwise
}

// Config is one `ilnp-lab attack` run.
type Config struct {
	Out    string
	BinDir string // ilnpd and ilnpctl
	Count  int    // forged packets over all attacks (default 10000)
	Rate   int    // packets per second each attack sends (default 1000)
	// PingFlood is how long ping-flood-fill sends at Rate, on top of Count (default
	// DefaultPingFlood).
	PingFlood time.Duration
	Log       io.Writer
}

// Attack names, in the order they run.
var Names = []string{
	"lu-no-nonce-offlink", "lu-wrong-nonce-offlink", "lu-no-nonce-onlink", "lu-wrong-nonce-onlink",
	"lu-ack-forged", "lu-during-nonce-learning", "data-random-nonce", "tcp-rst-random-nonce",
	"data-no-nonce", "tcp-rst-no-nonce",
	"session-table-flood", "lu-unknown-session", "lu-replay",
	"embryo-squat", "ping-flood-fill",
}

// DefaultPingFlood is ping-flood-fill's length in `ilnp-lab attack` (issue 23: after 120 s of
// spoofed pings at the default rate a newcomer still gets a session).
const DefaultPingFlood = 120 * time.Second

// Ports and addresses of the attack lab.
const (
	flowPort = 5001 // the live TCP flow, CN -> MN
	sinkPort = 7009 // a UDP socket on the CN that counts forged datagrams delivered to it
	ghostNID = "0214:4fff:fe20:0999"
)

var (
	atkPrefix   = "2001:db8:66::"    // the off-link attacker's network, behind R1
	ghostPrefix = "2001:db8:77::/64" // where the ghost peer would be (R1 drops it)
	badLocator  = mustL64("2001:db8:bad::")
)

func mustL64(s string) wire.L64 {
	l, err := wire.ParseL64(s)
	if err != nil {
		panic(err)
	}
	return l
}

// Run builds the lab (lan-lan, LAN access links), starts ilnpd on the CN and the MN and a TCP
// flow from the CN to the MN, runs every attack, and writes OUT/attack.json and OUT/report.md.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	dir, err := filepath.Abs(cfg.Out)
	if err != nil {
		return nil, err
	}
	l, err := start(ctx, cfg, filepath.Join(dir, "lab"))
	if err != nil {
		return nil, err
	}
	defer l.close()
	results, err := l.attacks(ctx)
	if err != nil {
		return nil, err
	}
	r, err := l.redirection(ctx)
	if err != nil {
		return nil, fmt.Errorf("attack %s: %w", Redirection, err)
	}
	fmt.Fprintf(l.cfg.Log, "attack %-26s sent %5d accepted %d flow survived %v; bytes CN -> announced locator %d, from it %d\n",
		Redirection, *r.Sent, *r.Accepted, *r.FlowSurvived, *r.UnverifiedBytesSent, *r.UnverifiedBytesReceived)
	results = append(results, r)
	r, err = l.redirectionIPv4(ctx)
	if err != nil {
		return nil, fmt.Errorf("attack %s: %w", RedirectionIPv4, err)
	}
	fmt.Fprintf(l.cfg.Log, "attack %-26s sent %5d accepted %d flow survived %v; bytes CN -> announced IPv4 endpoint %d, from it %d\n",
		RedirectionIPv4, *r.Sent, *r.Accepted, *r.FlowSurvived, *r.UnverifiedBytesSent, *r.UnverifiedBytesReceived)
	results = append(results, r)
	if err := Write(dir, results, l.cfg); err != nil {
		return nil, err
	}
	return results, nil
}

// start builds the lab in labDir with the daemons, the attackers, the sink and the flow.
func start(ctx context.Context, cfg Config, labDir string) (*labRun, error) {
	if cfg.Count <= 0 {
		cfg.Count = 10000
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 1000
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.PingFlood <= 0 {
		cfg.PingFlood = DefaultPingFlood
	}
	if cfg.Count < len(Names)-1 { // ping-flood-fill sends on top, for PingFlood
		return nil, fmt.Errorf("--count %d: at least one packet per attack (%d)", cfg.Count, len(Names)-1)
	}
	if err := os.MkdirAll(labDir, 0o755); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Log, "attack: building the lab in %s\n", labDir)
	top, err := lab.Build(ctx, lab.TopologyConfig{Scenario: lab.Scenarios["lan-lan"], Access: "lan", Dir: labDir,
		RAMin: 200 * time.Millisecond, RAMax: 500 * time.Millisecond})
	if err != nil {
		return nil, fmt.Errorf("attack lab: %w", err)
	}
	l := &labRun{cfg: cfg, dir: labDir, t: top}
	if err := l.setup(ctx); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// Write saves attack.json and report.md into dir.
func Write(dir string, results []Result, cfg Config) error {
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "attack.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write attack.json: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(Report(results, cfg)), 0o644)
}

// Report is report.md: a table of the attacks and what each figure means.
func Report(results []Result, cfg Config) string {
	var b strings.Builder
	total, acc, counted := 0, 0, uint64(0)
	var forged, insider []Result
	for _, r := range results {
		if r.UnverifiedBytesSent != nil {
			insider = append(insider, r)
			continue
		}
		forged = append(forged, r)
		total += deref(r.Sent)
		acc += deref(r.Accepted)
		counted += r.Counted
	}
	fmt.Fprintf(&b, "# Forged-packet attacks on the ILNP lab\n\n")
	fmt.Fprintf(&b, "Command: `ilnp-lab attack --out DIR --count %d --rate %d` (one run). Topology: CN - R1 - {R2, R3} - MN, lan-lan, "+
		"ilnpd on the CN and the MN, a paced TCP flow CN -> MN running throughout. The attackers: `atk` behind R1 (off-link, "+
		"spoofing the MN's or the CN's address) and `atkc` on a second veth of the CN that is not an ILNP interface (on-link).\n\n",
		cfg.Count, cfg.Rate)
	fmt.Fprintf(&b, "Forged packets (no valid nonce): %d sent, %d accepted, %d counted by the victims' drop counters.\n\n", total, acc, counted)
	b.WriteString("| attack | attacker | sent | accepted (measured as) | victim counter(s) | counted | flow survived |\n|---|---|---:|---|---|---:|---|\n")
	for _, r := range forged {
		fmt.Fprintf(&b, "| %s | %s | %d | %d (%s) | %s | %d | %s |\n", r.Attack, r.From, deref(r.Sent), deref(r.Accepted),
			r.Measured, strings.Join(r.Counters, " + "), r.Counted, survivedText(r.FlowSurvived))
	}
	b.WriteString(`
- *sent* is counted by the attacker (packets its raw socket took); *accepted* is measured on the victim, never
  derived from *sent*; *counted* is the delta of the victim's drop counters over the attack, which must equal *sent*.
- *flow survived*: the TCP connection CN -> MN saw no error on either end and the MN received bytes during and
  after the attack.
- ` + "`unverified_bytes_sent/received`" + ` are null for these: they are about locator verification.
`)
	for _, r := range insider {
		bound := "within"
		if *r.UnverifiedBytesSent > 3**r.UnverifiedBytesReceived {
			bound = "BEYOND"
		}
		fmt.Fprintf(&b, "\n## %s: the attack locator verification is for\n\n"+
			"%s sent %d LU announcing the attacker's own locator (its network's prefix, or its IPv4 endpoint) as the MN's only locator; the CN applied %d (%s). "+
			"Over the next 2 s R1 forwarded %d bytes from the CN towards that unverified locator and %d bytes from it: "+
			"%s locator verification's bound of 3x; the flow survived: %s. See README, Security, \"Locator verification\".\n",
			r.Attack, r.From, deref(r.Sent), deref(r.Accepted), r.Measured, *r.UnverifiedBytesSent, *r.UnverifiedBytesReceived,
			bound, survivedText(r.FlowSurvived))
	}
	return b.String()
}

func survivedText(p *bool) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprint(*p)
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// labRun is the state of one attack run.
type labRun struct {
	cfg      Config
	dir      string
	t        *lab.Topology
	atk      *netns.NS // off-link, behind R1
	atkc     *netns.NS // on a non-ILNP veth of the CN
	cnSock   string
	mnSock   string
	flow     *flow
	sink     *sink
	cnAddr   wire.ILV
	mnAddr   wire.ILV
	ghost    wire.ILV
	extraNSs []*netns.NS
}

func (l *labRun) close() {
	if l.flow != nil {
		l.flow.stop()
	}
	if l.sink != nil {
		l.sink.close()
	}
	for _, ns := range l.extraNSs {
		_ = ns.Delete()
	}
	for _, ns := range []*netns.NS{l.t.CN, l.t.MN} {
		_ = os.RemoveAll(netns.EtcDir(ns.Name))
	}
	_ = os.Remove("/etc/netns") // only if empty
	_ = l.t.Close()
}

func (l *labRun) setup(ctx context.Context) error {
	var err error
	if l.cnAddr, err = wire.ILVFromAddr(lab.Addr(lab.L1, lab.CNNID)); err != nil {
		return err
	}
	if l.mnAddr, err = wire.ILVFromAddr(lab.Addr(lab.L2, lab.MNNID)); err != nil {
		return err
	}
	gp := netip.MustParsePrefix(ghostPrefix)
	if l.ghost, err = wire.ILVFromAddr(lab.Addr(gp, ghostNID)); err != nil {
		return err
	}
	if err := l.attackers(); err != nil {
		return err
	}
	if err := l.ipv4Wiring(); err != nil {
		return err
	}
	if err := l.daemons(ctx); err != nil {
		return err
	}
	if l.sink, err = newSink(l.t.CN, sinkPort); err != nil {
		return err
	}
	if l.flow, err = startFlow(l.t.CN, l.t.MN, l.mnAddr.Addr(), flowPort); err != nil {
		return err
	}
	// The connection is up before the CN's daemon has recorded the session its first packet
	// opened (tens of ms on a loaded machine): the attacks read that session.
	deadline := time.Now().Add(5 * time.Second)
	for {
		rows, err := l.sessions(l.t.CN, l.cnSock)
		if _, ok := sessionOf(rows, l.mnAddr.NID.String()); err == nil && ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the CN recorded no session with the MN within 5 s of the flow's start (%v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// attackers adds atk behind R1 and atkc on a second veth of the CN.
func (l *labRun) attackers() error {
	t := l.t
	mk := func(role string) (*netns.NS, error) {
		ns, err := netns.New("ilab-" + t.ID + "-" + role)
		if err != nil {
			return nil, err
		}
		l.extraNSs = append(l.extraNSs, ns)
		for _, k := range []string{"net.ipv6.conf.default.accept_dad", "net.ipv6.conf.all.accept_dad", "net.ipv6.conf.default.accept_ra"} {
			if err := ns.Sysctl(k, "0"); err != nil {
				return nil, err
			}
		}
		return ns, nil
	}
	var err error
	if l.atk, err = mk("atk"); err != nil {
		return err
	}
	if l.atkc, err = mk("atkc"); err != nil {
		return err
	}
	if err := netns.Veth(t.R1, "r1-atk", l.atk, "atk-r1"); err != nil {
		return err
	}
	if err := netns.Veth(t.CN, "cn-atk", l.atkc, "atkc-cn"); err != nil {
		return err
	}
	cnMAC, err := t.CN.Run("cat", "/sys/class/net/cn-atk/address")
	if err != nil {
		return err
	}
	cmds := []struct {
		ns   *netns.NS
		args []string
	}{
		{t.R1, []string{"ip", "addr", "add", atkPrefix + "1/64", "dev", "r1-atk"}},
		{t.R1, []string{"ip", "-6", "route", "add", "blackhole", ghostPrefix}},
		{l.atk, []string{"ip", "addr", "add", atkPrefix + "2/64", "dev", "atk-r1"}},
		{l.atk, []string{"ip", "-6", "route", "add", "default", "via", atkPrefix + "1", "dev", "atk-r1"}},
		{l.atkc, []string{"ip", "-6", "route", "add", lab.L1.String(), "dev", "atkc-cn"}},
		{l.atkc, []string{"ip", "-6", "neigh", "replace", l.cnAddr.Addr().String(), "lladdr", strings.TrimSpace(cnMAC),
			"dev", "atkc-cn", "nud", "permanent"}},
	}
	for _, c := range cmds {
		if _, err := c.ns.Run(c.args...); err != nil {
			return fmt.Errorf("attacker wiring: %w", err)
		}
	}
	// The off-link attacker's packets must cross R1 (its neighbour entries warm).
	if r, err := t.Ping(l.atk, l.cnAddr.Addr().String(), 1, 0, 2*time.Second); err != nil || len(r.RTTs) != 1 {
		return fmt.Errorf("attacker behind R1 cannot reach the CN: %v", err)
	}
	return nil
}

// daemons starts ilnpd on the CN and the MN (soft handoff) with the lab's hosts file plus a
// ghost peer the CN will open a session to that never answers.
func (l *labRun) daemons(ctx context.Context) error {
	t := l.t
	ilnpd := filepath.Join(l.cfg.BinDir, "ilnpd")
	if _, err := os.Stat(ilnpd); err != nil {
		return fmt.Errorf("attack needs ilnpd: %w", err)
	}
	hosts := filepath.Join(l.dir, "hosts")
	text := lab.HostsFile() + fmt.Sprintf("%s|10,%s ghost\n", lab.L64(netip.MustParsePrefix(ghostPrefix)), lab.NID64(ghostNID))
	if _, err := wire.ParseHosts(strings.NewReader(text), hosts); err != nil {
		return fmt.Errorf("attack wrote a bad hosts file: %w", err)
	}
	if err := os.WriteFile(hosts, []byte(text), 0o644); err != nil {
		return err
	}
	for _, n := range []struct {
		ns     *netns.NS
		name   string
		ifaces []string
		nid    string
		sock   *string
	}{
		{t.CN, "cn", []string{lab.IfCN}, lab.CNNID, &l.cnSock},
		{t.MN, "mn", []string{lab.IfMNR2, lab.IfMNR3}, lab.MNNID, &l.mnSock},
	} {
		state := filepath.Join(l.dir, n.name+"-state")
		if err := os.MkdirAll(state, 0o755); err != nil {
			return err
		}
		conf := filepath.Join(l.dir, "ilnpd-"+n.name+".conf")
		text := lab.DaemonConfig(n.name, n.ifaces, n.nid, "soft", state, filepath.Join(l.dir, n.name+"-events.jsonl"), hosts)
		if n.ns == t.CN {
			text += "ipv4-locators on\n" // redirection-ipv4-credit's victim is an IPv4 endpoint
		}
		if _, err := config.Parse(strings.NewReader(text), conf); err != nil {
			return fmt.Errorf("attack wrote a bad ilnpd config: %w", err)
		}
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return err
		}
		if err := n.ns.WriteEtc("resolv.conf", "nameserver ::1\n"); err != nil {
			return err
		}
		if _, err := t.Start(n.ns, "ilnpd-"+n.name, ilnpd, "-config", conf); err != nil {
			return err
		}
		*n.sock = filepath.Join(state, "ctl.sock")
	}
	// Ready when both daemons answer on their control sockets (the datapath is attached before
	// that: a SYN with the nonce option earlier draws a Parameter Problem) and the CN resolves
	// both peers (which also tells its datapath they speak ILNP).
	deadline := time.Now().Add(15 * time.Second)
	for _, d := range []struct {
		ns   *netns.NS
		sock string
	}{{t.CN, l.cnSock}, {t.MN, l.mnSock}} {
		for {
			if _, err := l.stats(d.ns, d.sock); err == nil {
				break
			} else if time.Now().After(deadline) {
				return fmt.Errorf("ilnpd in %s does not answer on %s within 15 s: %w", d.ns.Name, d.sock, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	// The MN has its L2 locator in use (before that its datapath drops what comes to it).
	for {
		out, err := t.MN.Run(filepath.Join(l.cfg.BinDir, "ilnpctl"), "-s", l.mnSock, "-j", "show", "locators")
		if err == nil && (strings.Contains(out, lab.L64(lab.L2)) || strings.Contains(out, "2001:db8:2::")) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the MN's ilnpd has no L2 locator within 15 s: %v %s", err, out)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, name := range []string{"mn", "ghost"} {
		for {
			out, err := t.CN.Run("getent", "ahostsv6", name)
			if err == nil && strings.Contains(out, "2001:db8:") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the CN does not resolve %s: %v %s", name, err, out)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// ctl runs ilnpctl -j show WHAT on a victim and decodes it.
func (l *labRun) show(ns *netns.NS, sock, what string, v any) error {
	out, err := ns.Run(filepath.Join(l.cfg.BinDir, "ilnpctl"), "-s", sock, "-j", "show", what)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("ilnpctl show %s: %w", what, err)
	}
	return nil
}

func (l *labRun) stats(ns *netns.NS, sock string) (map[string]uint64, error) {
	var m map[string]uint64
	return m, l.show(ns, sock, "stats", &m)
}

type sessionRow struct {
	PeerNID        string `json:"peer_nid"`
	ActiveRemote   string `json:"active_remote"`
	RemoteLocators string `json:"remote_locators"`
	RemoteNonce    string `json:"remote_nonce"`
}

func (l *labRun) sessions(ns *netns.NS, sock string) ([]sessionRow, error) {
	var rows []sessionRow
	return rows, l.show(ns, sock, "sessions", &rows)
}

func sessionOf(rows []sessionRow, nid string) (sessionRow, bool) {
	for _, r := range rows {
		if r.PeerNID == nid {
			return r, true
		}
	}
	return sessionRow{}, false
}
