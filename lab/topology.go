// Package lab is the thesis testbed (ch. 3.4, 4.3, 5.2) in network namespaces: CN - R1 -
// {R2, R3} - MN, plain IPv6 routers with radvd on R2 and R3, emulated links, an MN that moves
// from L2 to L3 while unmodified iperf3 runs, and the measurement of each run.
package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"ilnp/lab/linkemu"
	"ilnp/lab/netns"
	"ilnp/lab/ping"
	"ilnp/lab/window"
)

// Identifiers (the NID half of every address): the MN's is the thesis's example.
const (
	MNNID = "0214:4fff:fe20:ee64"
	CNNID = "0214:4fff:fe20:cc01"
)

// Locators (RFC 6742 form) and the prefixes they stand for.
var (
	L1 = netip.MustParsePrefix("2001:db8:1::/64") // CN's site
	L2 = netip.MustParsePrefix("2001:db8:2::/64") // R2's site, where the MN starts
	L3 = netip.MustParsePrefix("2001:db8:3::/64") // R3's site, where the MN moves to
)

// Addr joins a /64 prefix and an identifier.
func Addr(prefix netip.Prefix, nid string) netip.Addr {
	p := prefix.Addr().As16()
	n := netip.MustParseAddr("::" + nid).As16()
	copy(p[8:], n[8:])
	return netip.AddrFrom16(p)
}

// L64 writes a prefix's locator as four groups of four hex digits (RFC 6742).
func L64(prefix netip.Prefix) string {
	b := prefix.Addr().As16()
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7])
}

// NID64 writes an identifier as four groups of four hex digits.
func NID64(nid string) string {
	b := netip.MustParseAddr("::" + nid).As16()
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15])
}

// Scenario says which R1-router links carry the WAN delay (thesis 4.3).
type Scenario struct {
	Name       string
	R2Link     string // profile of the R1-R2 link (the MN's starting network)
	R3Link     string // profile of the R1-R3 link (where it moves)
	Title      string
	Definition string
}

// Scenarios are the four handoff scenarios of thesis 4.3 / 5.2.
var Scenarios = map[string]Scenario{
	"lan-lan": {"lan-lan", "lan", "lan", "LAN to LAN", "no added delay"},
	"lan-wan": {"lan-wan", "lan", "wan", "LAN to WAN", "+100 ms each way between R1 and R3"},
	"wan-lan": {"wan-lan", "wan", "lan", "WAN to LAN", "+100 ms each way between R1 and R2"},
	"wan-wan": {"wan-wan", "wan", "wan", "WAN to WAN", "+100 ms each way between R1 and R2 and between R1 and R3"},
}

// ScenarioNames in thesis order.
var ScenarioNames = []string{"lan-lan", "lan-wan", "wan-lan", "wan-wan"}

// TopologyConfig shapes one testbed.
type TopologyConfig struct {
	Scenario Scenario
	Access   string        // shape of the MN's two access links (default wlan)
	RAMin    time.Duration // radvd MinRtrAdvInterval
	RAMax    time.Duration // radvd MaxRtrAdvInterval
	Dir      string        // run directory: configs, logs, captures
	// EmulatorExe is a binary that runs linkemu.Main when linkemu.EnvVar is set (default:
	// this executable).
	EmulatorExe string
	Log         *slog.Logger
	// Rendezvous "dns" adds the dns namespace on R1 running named (lab/dns.go).
	Rendezvous string
	// DoubleJump gives the CN two access networks of its own, L4 behind R4 and L5 behind R5
	// (radvd on both), instead of its fixed link to R1: the CN can move too (lab/doublejump.go).
	DoubleJump bool
	// Families is the address family of the MN's access networks (lab/families.go; empty:
	// ipv6-ipv6, today's testbed).
	Families Families
	// AccessR2 and AccessR3 shape one access link each (empty: Access), e.g. thesis 3.3's
	// WiFi on R2 and 3G on R3.
	AccessR2, AccessR3 string
}

// Topology is a built testbed. Close tears all of it down and may be called more than once.
type Topology struct {
	Cfg                       TopologyConfig
	ID                        string
	CN, R1, R2, R3, MN, Wire  *netns.NS
	R4, R5                    *netns.NS  // only with DoubleJump: the CN's access routers
	DNS                       *netns.NS  // only with Rendezvous "dns"
	Named                     *DNSServer // only with Rendezvous "dns"
	all                       []*netns.NS
	emu                       *Proc
	window                    *window.Clamp // iperf3's TCP window (lab/window.go)
	mu                        sync.Mutex
	procs                     []*Proc
	closed                    bool
	MNInitialAddr, CNAddrText string
	// CNFinalAddrText is the CN's address after the flow: CNAddrText, or with DoubleJump its
	// address in L5.
	CNFinalAddrText string
}

// Interface names. The MN's are the thesis's two WLAN cards.
const (
	IfCN   = "cn-r1"
	IfMNR2 = "mn-r2"
	IfMNR3 = "mn-r3"
)

// Build creates the namespaces, links, addresses, routes, emulators and radvd, and waits
// until the MN has its L2 address and reaches the CN. On error everything made is removed.
func Build(ctx context.Context, cfg TopologyConfig) (t *Topology, err error) {
	if cfg.Access == "" {
		cfg.Access = "wlan"
	}
	if cfg.RAMin == 0 {
		cfg.RAMin, cfg.RAMax = time.Second, 2*time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	t = &Topology{Cfg: cfg, ID: netns.Suffix(6)}
	defer func() {
		if err != nil {
			t.Close()
			t = nil
		}
	}()
	mk := func(role string) (*netns.NS, error) {
		ns, err := netns.New("ilab-" + t.ID + "-" + role)
		if err != nil {
			return nil, err
		}
		t.all = append(t.all, ns)
		return ns, nil
	}
	for _, p := range []struct {
		ns   **netns.NS
		role string
	}{{&t.CN, "cn"}, {&t.R1, "r1"}, {&t.R2, "r2"}, {&t.R3, "r3"}, {&t.MN, "mn"}, {&t.Wire, "wire"}} {
		if *p.ns, err = mk(p.role); err != nil {
			return t, err
		}
	}
	if cfg.DoubleJump {
		if t.R4, err = mk("r4"); err != nil {
			return t, err
		}
		if t.R5, err = mk("r5"); err != nil {
			return t, err
		}
	}
	if err := t.sysctls(); err != nil {
		return t, err
	}
	if err := t.wire(); err != nil {
		return t, err
	}
	if err := t.addresses(); err != nil {
		return t, err
	}
	if err := t.startEmulators(); err != nil {
		return t, err
	}
	if !cfg.Families.Cross() {
		if err := t.startRadvd("r2-mn", "r3-mn"); err != nil {
			return t, err
		}
	} else if err := t.startFamiliesRadvd(); err != nil {
		return t, err
	}
	if cfg.DoubleJump {
		if err := t.startCNRadvd(); err != nil {
			return t, err
		}
	}
	if cfg.Rendezvous == RendezvousDNS {
		if err := t.buildDNS(ctx); err != nil {
			return t, err
		}
	}
	t.MNInitialAddr = Addr(L2, MNNID).String()
	t.CNAddrText = Addr(L1, CNNID).String()
	t.CNFinalAddrText = t.CNAddrText
	if cfg.DoubleJump {
		t.CNAddrText, t.CNFinalAddrText = Addr(L4, CNNID).String(), Addr(L5, CNNID).String()
		if err := t.waitAddress(ctx, t.CN, IfCNR4, Addr(L4, CNNID), 15*time.Second); err != nil {
			return t, err
		}
	}
	if cfg.Families.L2IPv4() {
		if _, err := t.MN.Run(t.lease4Commands(PlanFor(cfg.Families).L2)...); err != nil {
			return t, err
		}
	} else if err := t.waitAddress(ctx, t.MN, IfMNR2, Addr(L2, MNNID), 15*time.Second); err != nil {
		return t, err
	}
	if err := t.waitReachable(ctx, 15*time.Second); err != nil {
		return t, err
	}
	return t, t.warmNeighbours()
}

// warmNeighbours resolves the routers' neighbours on the R1-R2 and R1-R3 links before any
// experiment: otherwise the first packet towards the new network (the LU) waits for neighbour
// discovery across the emulated WAN, one extra RTT that the thesis's testbed did not have.
// Entries then go STALE but stay usable without delay.
func (t *Topology) warmNeighbours() error {
	var pings []struct {
		from *netns.NS
		to   string
	}
	for _, p := range []struct {
		from *netns.NS
		to   string
	}{{t.R1, "2001:db8:12::2"}, {t.R1, "2001:db8:13::3"}, {t.R2, "2001:db8:12::1"}, {t.R3, "2001:db8:13::1"}} {
		pings = append(pings, struct {
			from *netns.NS
			to   string
		}{p.from, p.to})
	}
	pings = append(pings, t.familiesWarm()...)
	for _, p := range pings {
		// A link emulating loss (chapter 6's success runs: up to 20 % each way) loses single
		// echoes: try again before calling the neighbour unreachable.
		reached := false
		for try := 0; try < warmAttempts && !reached; try++ {
			r, err := t.Ping(p.from, p.to, 1, 0, 2*time.Second)
			if err != nil {
				return err
			}
			reached = len(r.RTTs) > 0
		}
		if !reached {
			return fmt.Errorf("%s cannot reach %s (%d echoes)", p.from.Name, p.to, warmAttempts)
		}
	}
	return nil
}

// warmAttempts: echoes per neighbour; at 20 % loss each way all ten are lost with p < 1e-4.
const warmAttempts = 10

// setSysctls sets key/value pairs of sysctls in ns and returns every failure.
func setSysctls(ns *netns.NS, kv ...string) error {
	var errs []error
	for i := 0; i+1 < len(kv); i += 2 {
		errs = append(errs, ns.Sysctl(kv[i], kv[i+1]))
	}
	return errors.Join(errs...)
}

func (t *Topology) sysctls() error {
	var errs []error
	set := func(ns *netns.NS, kv ...string) { errs = append(errs, setSysctls(ns, kv...)) }
	for _, ns := range t.all {
		// Set before any interface exists so "default" reaches them all. No DAD: the lab
		// cannot have duplicates, and the thesis's 2 s DAD wait is not what is measured.
		set(ns, "net.ipv6.conf.default.accept_dad", "0", "net.ipv6.conf.all.accept_dad", "0")
	}
	for _, r := range []*netns.NS{t.R1, t.R2, t.R3, t.R4, t.R5} {
		if r != nil {
			set(r, "net.ipv6.conf.all.forwarding", "1", "net.ipv6.conf.default.forwarding", "1")
			if t.Cfg.Families.Cross() {
				set(r, "net.ipv4.ip_forward", "1")
			}
		}
	}
	if t.Cfg.DoubleJump {
		set(t.CN, "net.ipv6.conf.default.accept_ra", "1", "net.ipv6.conf.default.autoconf", "1",
			"net.ipv6.conf.default.router_solicitation_interval", "1")
	} else {
		set(t.CN, "net.ipv6.conf.default.accept_ra", "0")
	}
	set(t.MN, "net.ipv6.conf.default.accept_ra", "1", "net.ipv6.conf.default.autoconf", "1",
		"net.ipv6.conf.default.router_solicitation_interval", "1")
	// The wire namespace only carries frames: no addresses, no ND, no MLD of its own.
	set(t.Wire, "net.ipv6.conf.default.disable_ipv6", "1", "net.ipv6.conf.all.disable_ipv6", "1")
	return errors.Join(errs...)
}

// emulated is a link through the wire namespace.
type emulated struct {
	a      *netns.NS
	aIf    string
	b      *netns.NS
	bIf    string
	wa, wb string
	shape  string
}

func (t *Topology) emulatedLinks() []emulated {
	sc := t.Cfg.Scenario
	links := []emulated{
		{t.R1, "r1-r2", t.R2, "r2-r1", "r1r2a", "r1r2b", sc.R2Link},
		{t.R1, "r1-r3", t.R3, "r3-r1", "r1r3a", "r1r3b", sc.R3Link},
		{t.R2, "r2-mn", t.MN, IfMNR2, "r2mna", "r2mnb", cmpOr(t.Cfg.AccessR2, t.Cfg.Access)},
		{t.R3, "r3-mn", t.MN, IfMNR3, "r3mna", "r3mnb", cmpOr(t.Cfg.AccessR3, t.Cfg.Access)},
	}
	if t.Cfg.DoubleJump {
		links = append(links, t.cnAccessLinks()...)
	}
	return links
}

func (t *Topology) wire() error {
	var ends map[*netns.NS][]string
	if t.Cfg.DoubleJump {
		var err error
		if ends, err = t.wireCNRouters(); err != nil {
			return err
		}
	} else {
		if err := netns.Veth(t.CN, IfCN, t.R1, "r1-cn"); err != nil {
			return err
		}
		ends = map[*netns.NS][]string{t.CN: {IfCN}, t.R1: {"r1-cn"}}
	}
	for _, l := range t.emulatedLinks() {
		if err := netns.Veth(l.a, l.aIf, t.Wire, l.wa); err != nil {
			return err
		}
		if err := netns.Veth(l.b, l.bIf, t.Wire, l.wb); err != nil {
			return err
		}
		ends[l.a] = append(ends[l.a], l.aIf)
		ends[l.b] = append(ends[l.b], l.bIf)
		ends[t.Wire] = append(ends[t.Wire], l.wa, l.wb)
	}
	// The emulator reads whole frames: no offloads anywhere (platform.md), as the thesis
	// also had TSO/GSO off (5.1.1).
	for ns, ifs := range ends {
		for _, ifname := range ifs {
			if _, err := ns.Run("ethtool", "-K", ifname, "tso", "off", "gso", "off", "gro", "off", "tx", "off"); err != nil {
				return err
			}
		}
	}
	// The same identifier on both of the MN's interfaces (SLAAC with a token).
	for _, ifname := range []string{IfMNR2, IfMNR3} {
		if _, err := t.MN.Run("ip", "token", "set", "::"+MNNID, "dev", ifname); err != nil {
			return err
		}
	}
	if t.Cfg.DoubleJump {
		if err := t.cnTokens(); err != nil {
			return err
		}
	}
	// The MN starts in L2 only.
	_, err := t.MN.Run("ip", "link", "set", IfMNR3, "down")
	return err
}

func (t *Topology) addresses() error {
	cmds := []nsCmd{
		{t.R1, []string{"ip", "addr", "add", "2001:db8:12::1/64", "dev", "r1-r2"}},
		{t.R1, []string{"ip", "addr", "add", "2001:db8:13::1/64", "dev", "r1-r3"}},
		{t.R1, []string{"ip", "route", "add", L2.String(), "via", "2001:db8:12::2", "dev", "r1-r2"}},
		{t.R1, []string{"ip", "route", "add", L3.String(), "via", "2001:db8:13::3", "dev", "r1-r3"}},
		{t.R2, []string{"ip", "addr", "add", "2001:db8:12::2/64", "dev", "r2-r1"}},
		{t.R2, []string{"ip", "addr", "add", "2001:db8:2::1/64", "dev", "r2-mn"}},
		{t.R2, []string{"ip", "route", "add", "default", "via", "2001:db8:12::1", "dev", "r2-r1"}},
		{t.R3, []string{"ip", "addr", "add", "2001:db8:13::3/64", "dev", "r3-r1"}},
		{t.R3, []string{"ip", "addr", "add", "2001:db8:3::1/64", "dev", "r3-mn"}},
		{t.R3, []string{"ip", "route", "add", "default", "via", "2001:db8:13::1", "dev", "r3-r1"}},
	}
	if t.Cfg.DoubleJump {
		cmds = append(cmds, t.cnRouterAddresses()...)
	} else {
		cmds = append(cmds, []nsCmd{
			{t.CN, []string{"ip", "addr", "add", Addr(L1, CNNID).String() + "/64", "dev", IfCN}},
			{t.CN, []string{"ip", "route", "add", "default", "via", "2001:db8:1::1", "dev", IfCN}},
			{t.R1, []string{"ip", "addr", "add", "2001:db8:1::1/64", "dev", "r1-cn"}},
		}...)
	}
	cmds = append(cmds, t.familiesCommands()...)
	for _, c := range cmds {
		if _, err := c.ns.Run(c.args...); err != nil {
			return err
		}
	}
	return nil
}

// startEmulators runs one emulator process in the wire namespace for all four links: this
// executable again, with linkemu.EnvVar set (cmd/ilnp-lab and the tests call
// linkemu.RunIfRequested first thing).
func (t *Topology) startEmulators() error {
	exe := t.Cfg.EmulatorExe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return err
		}
	}
	args := []string{exe}
	for _, l := range t.emulatedLinks() {
		if _, err := linkemu.ParseShape(l.shape); err != nil {
			return err
		}
		args = append(args, l.wa+","+l.wb+","+l.shape)
	}
	p, err := t.StartEnv(t.Wire, "linkemu", []string{linkemu.EnvVar + "=1"}, args...)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(p.Log(), linkemu.ReadyLine); {
		if done, werr := p.Exited(); done || time.Now().After(deadline) {
			return fmt.Errorf("link emulator did not start (%v): %s", werr, p.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.emu = p
	return nil
}

// startRadvd runs radvd on R2 (L2 on r2If) and R3 (L3 on r3If) with the configured intervals.
func (t *Topology) startRadvd(r2If, r3If string) error {
	if err := t.runRadvd(t.R2, "r2", r2If, L2); err != nil {
		return err
	}
	return t.runRadvd(t.R3, "r3", r3If, L3)
}

// runRadvd runs radvd in ns advertising prefix on ifname with the configured intervals.
func (t *Topology) runRadvd(ns *netns.NS, name, ifname string, prefix netip.Prefix) error {
	conf := filepath.Join(t.Cfg.Dir, "radvd-"+name+".conf")
	// AdvIntervalOpt allows sub-3-s intervals (platform.md); lifetimes cover a few missed RAs.
	text := fmt.Sprintf(`interface %s {
	AdvSendAdvert on;
	AdvIntervalOpt on;
	MinRtrAdvInterval %g;
	MaxRtrAdvInterval %g;
	AdvDefaultLifetime %d;
	prefix %s {
		AdvOnLink on;
		AdvAutonomous on;
		AdvRouterAddr on;
		AdvValidLifetime 60;
		AdvPreferredLifetime 30;
	};
};
`, ifname, t.Cfg.RAMin.Seconds(), t.Cfg.RAMax.Seconds(), max(9, int(3*t.Cfg.RAMax.Seconds())), prefix)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return err
	}
	_, err := t.Start(ns, "radvd-"+name, "radvd", "-n", "-m", "stderr", "-C", conf,
		"-p", filepath.Join(t.Cfg.Dir, "radvd-"+name+".pid"))
	return err
}

func (t *Topology) waitAddress(ctx context.Context, ns *netns.NS, ifname string, want netip.Addr, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		out, _ := ns.Run("ip", "-6", "addr", "show", "dev", ifname)
		if strings.Contains(out, want.String()+"/") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not get %s on %s within %v:\n%s", ns.Name, want, ifname, limit, out)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (t *Topology) waitReachable(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		r, err := t.Ping(t.MN, t.rttTarget(false), 1, 0, time.Second)
		if err == nil && len(r.RTTs) == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MN cannot reach the CN (%s) within %v: %v", t.rttTarget(false), limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Ping sends count ICMPv6 echoes from inside ns (ICMP echoes when dst is an IPv4 address).
func (t *Topology) Ping(ns *netns.NS, dst string, count int, interval, timeout time.Duration) (ping.Result, error) {
	var c *ping.Conn
	listen := ping.Listen
	if a, err := netip.ParseAddr(dst); err == nil && a.Is4() {
		listen = ping.Listen4
	}
	if err := ns.Do(func() (err error) { c, err = listen(); return err }); err != nil {
		return ping.Result{}, err
	}
	defer c.Close()
	return c.Ping(dst, count, interval, timeout)
}

// Close stops every process (reverse start order), the emulators, and removes namespaces,
// /etc/netns entries and mounts under the run directory. Safe to call twice.
func (t *Topology) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	procs := t.procs
	t.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop(2 * time.Second)
	}
	for _, ns := range t.all {
		if err := ns.Delete(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, unmountUnder(t.Cfg.Dir), t.closeDNS(), t.window.Close())
	return errors.Join(errs...)
}

// unmountUnder removes mounts (a daemon's bpffs, say) left below dir in this mount namespace.
func unmountUnder(dir string) error {
	if dir == "" {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return err
	}
	var targets []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[1] == abs || strings.HasPrefix(f[1], abs+"/")) {
			targets = append(targets, f[1])
		}
	}
	var errs []error
	for i := len(targets) - 1; i >= 0; i-- {
		if err := unmount(targets[i]); err != nil {
			errs = append(errs, fmt.Errorf("umount %s: %w", targets[i], err))
		}
	}
	return errors.Join(errs...)
}
