package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"ilnp/internal/config"
	"ilnp/internal/wire"
	"ilnp/lab/netns"
)

// Mode is how the end hosts do mobility: plain IPv6, ILNP (soft or hard handoff), and later
// a Mobile IPv6 baseline. The lab calls Setup once the testbed is up and the MN is in L2,
// runs the traffic against Target, and calls Teardown before the topology goes away.
type Mode interface {
	Name() string
	Describe() string
	Setup(ctx context.Context, t *Topology) error
	// Target is how the CN's iperf3 client names the MN (a name its resolver answers, or an
	// address), and RTTTarget the address the MN pings the CN at.
	Target(t *Topology) string
	// Timelines are the event files the mode's daemons wrote (MN first), "" when none.
	Timelines() (mn, cn string)
	// Collect saves the mode's state (e.g. `ilnpctl -j show ...`) into dir before teardown.
	Collect(t *Topology, dir string)
	Teardown(t *Topology) error
}

// ModeOptions is what modes may need from the run.
type ModeOptions struct {
	BinDir string // where ilnpd and ilnpctl were built
	Dir    string // the run's directory
	// Rendezvous is how the CN finds the MN: "hosts" (default) or "dns" (lab/dns.go).
	Rendezvous string
	// TCPAware turns on ilnpd's mobility-aware TCP (tcp-aware on).
	TCPAware bool
	// Policy is ilnpd's handoff policy on both nodes (empty: the default, newest).
	Policy string
	// Multihome: the MN keeps both access links up and does not move (lab/multihome.go).
	Multihome bool
}

// Modes maps mode names to constructors. A MIPv6 baseline registers here.
var Modes = map[string]func(ModeOptions) Mode{
	"ipv6":      func(o ModeOptions) Mode { return &ipv6Mode{} },
	"ilnp-soft": func(o ModeOptions) Mode { return &ilnpMode{handoff: "soft", opt: o} },
	"ilnp-hard": func(o ModeOptions) Mode { return &ilnpMode{handoff: "hard", opt: o} },
}

// ModeNames lists registered modes in a stable order.
func ModeNames() []string {
	var names []string
	for n := range Modes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NeedsILNP says whether a mode runs the product's binaries.
func NeedsILNP(mode string) bool { return strings.HasPrefix(mode, "ilnp") }

// ipv6Mode is the control: no mobility support, so sessions bound to the L2 address break
// when the MN leaves L2.
type ipv6Mode struct{}

func (*ipv6Mode) Name() string { return "ipv6" }
func (*ipv6Mode) Describe() string {
	return "plain IPv6 (no mobility support): the session is bound to the MN's L2 address"
}
func (*ipv6Mode) Setup(context.Context, *Topology) error { return nil }
func (*ipv6Mode) Target(t *Topology) string              { return t.MNInitialAddr }
func (*ipv6Mode) Timelines() (string, string)            { return "", "" }
func (*ipv6Mode) Collect(*Topology, string)              {}
func (*ipv6Mode) Teardown(*Topology) error               { return nil }

// ilnpMode runs ilnpd on the CN and the MN; iperf3 reaches the MN by name through the CN's
// stub resolver.
type ilnpMode struct {
	handoff string
	opt     ModeOptions
	mnConf  string
	cnConf  string
	mnState string
	cnState string
	mnEv    string
	cnEv    string
	// tmpStates are state directories made outside the run's directory because its path left
	// no room for the control socket's (stateDir); Teardown removes them.
	tmpStates []string
}

// maxSocketPath is the longest path a Unix socket address holds (sun_path, 108 bytes with its
// terminating NUL).
const maxSocketPath = 107

// stateDir is node's ilnpd state directory: in the run's directory when the control socket
// inside it (ctl.sock) has a path a Unix socket can bind, otherwise a short one under the
// system's temporary directory (a run under a long --out, or a test's deep temporary
// directory: bind fails with EINVAL past 107 bytes).
func (m *ilnpMode) stateDir(dir, node string) (string, error) {
	d := filepath.Join(dir, node+"-state")
	if len(filepath.Join(d, "ctl.sock")) <= maxSocketPath {
		return d, os.MkdirAll(d, 0o755)
	}
	d, err := os.MkdirTemp("", "ilnp-lab-"+node+"-")
	if err != nil {
		return "", fmt.Errorf("state directory for %s: %w", node, err)
	}
	m.tmpStates = append(m.tmpStates, d)
	return d, nil
}

func (m *ilnpMode) Name() string { return "ilnp-" + m.handoff }
func (m *ilnpMode) Describe() string {
	return "ILNPv6, " + m.handoff + " handoff: ilnpd on CN and MN, iperf3 resolves the MN by name"
}
func (m *ilnpMode) Target(*Topology) string {
	if m.opt.Rendezvous == RendezvousDNS {
		return DNSMNName
	}
	return "mn"
}
func (m *ilnpMode) Timelines() (string, string) { return m.mnEv, m.cnEv }

// HostsFile is the ILNP hosts file both daemons read (thesis format, one line per I-LV:
// "L64|preference,NID name"). The MN's L2 is preferred; L3 is where it moves.
func HostsFile() string {
	return fmt.Sprintf("%s|10,%s cn\n%s|10,%s mn\n%s|20,%s mn\n",
		L64(L1), NID64(CNNID), L64(L2), NID64(MNNID), L64(L3), NID64(MNNID))
}

// DoubleJumpHostsFile is HostsFile for a double-jump testbed: the CN is in L4 (preferred) or
// L5, the thesis's static rendezvous for two mobile nodes.
func DoubleJumpHostsFile() string {
	return fmt.Sprintf("%s|10,%s cn\n%s|20,%s cn\n%s|10,%s mn\n%s|20,%s mn\n",
		L64(L4), NID64(CNNID), L64(L5), NID64(CNNID), L64(L2), NID64(MNNID), L64(L3), NID64(MNNID))
}

// DaemonConfig writes one ilnpd configuration.
func DaemonConfig(node string, ifaces []string, nid, handoff, stateDir, events, hosts string) string {
	return fmt.Sprintf(`# written by ilnp-lab for one run
node %s
interfaces %s
nid %s
handoff %s
state-dir %s
events %s
hosts %s
dns-listen [::1]:53
log-level debug
`, node, strings.Join(ifaces, " "), NID64(nid), handoff, stateDir, events, hosts)
}

func (m *ilnpMode) Setup(ctx context.Context, t *Topology) error {
	dir, err := filepath.Abs(m.opt.Dir)
	if err != nil {
		return err
	}
	ilnpd := filepath.Join(m.opt.BinDir, "ilnpd")
	if _, err := os.Stat(ilnpd); err != nil {
		return fmt.Errorf("mode %s needs ilnpd: %w", m.Name(), err)
	}
	hosts := filepath.Join(dir, "hosts")
	hostsText := HostsFile()
	if t.Cfg.DoubleJump {
		hostsText = DoubleJumpHostsFile()
	}
	if t.Cfg.Families.Cross() {
		hostsText = FamiliesHostsFile(t.Cfg.Families)
	}
	if _, err := wire.ParseHosts(strings.NewReader(hostsText), hosts); err != nil {
		return fmt.Errorf("lab wrote a bad hosts file: %w", err)
	}
	if err := os.WriteFile(hosts, []byte(hostsText), 0o644); err != nil {
		return err
	}
	nodes := []struct {
		ns     *netns.NS
		name   string
		ifaces []string
		nid    string
		conf   *string
		state  *string
		events *string
	}{
		{t.CN, "cn", t.CNIfaces(), CNNID, &m.cnConf, &m.cnState, &m.cnEv},
		{t.MN, "mn", []string{IfMNR2, IfMNR3}, MNNID, &m.mnConf, &m.mnState, &m.mnEv},
	}
	for _, n := range nodes {
		state, err := m.stateDir(dir, n.name)
		if err != nil {
			return err
		}
		*n.state = state
		*n.events = filepath.Join(dir, n.name+"-events.jsonl")
		*n.conf = filepath.Join(dir, "ilnpd-"+n.name+".conf")
		text := DaemonConfig(n.name, n.ifaces, n.nid, m.handoff, *n.state, *n.events, hosts)
		if m.opt.Rendezvous == RendezvousDNS {
			if t.Named == nil {
				return fmt.Errorf("mode %s: DNS rendezvous without the lab's named", m.Name())
			}
			text = DNSDaemonConfig(n.name, n.ifaces, n.nid, m.handoff, *n.state, *n.events, t.Named)
			if t.Cfg.DoubleJump && n.name == "cn" {
				text += DNSPublishConfig(DNSCNName, t.Named) // the CN moves too: it keeps its records current
			}
		}
		if m.opt.TCPAware {
			text += "tcp-aware on\n"
		}
		text += FamiliesDaemonConfig(t.Cfg.Families)
		if m.opt.Policy != "" {
			text += "policy " + m.opt.Policy + "\n"
		}
		// The lab's file must be one the daemon accepts: check with the product's parser.
		if _, err := config.Parse(strings.NewReader(text), *n.conf); err != nil {
			return fmt.Errorf("lab wrote a bad ilnpd config: %w", err)
		}
		if err := os.WriteFile(*n.conf, []byte(text), 0o644); err != nil {
			return err
		}
		// Applications in the namespace resolve through the stub resolver.
		if err := n.ns.WriteEtc("resolv.conf", "nameserver ::1\n"); err != nil {
			return err
		}
		if _, err := t.Start(n.ns, "ilnpd-"+n.name, ilnpd, "-config", *n.conf); err != nil {
			return err
		}
	}
	// Ready when both control sockets exist and the CN resolves the MN's name (behind a NAT,
	// once the MN has opened the session).
	deadline := time.Now().Add(15 * time.Second)
	for _, n := range nodes {
		sock := filepath.Join(*n.state, "ctl.sock")
		for {
			if _, err := os.Stat(sock); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("ilnpd on %s: no control socket %s after 15 s; log:\n%s", n.name, sock, tail(filepath.Join(dir, "ilnpd-"+n.name+".log"), 20))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	for {
		out, err := t.CN.Run("getent", "ahostsv6", m.Target(t))
		if err == nil && strings.Contains(out, NID64short(MNNID)) {
			if t.Cfg.Families.L2IPv4() {
				return t.openFromBehindNAT(ctx, deadline)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the CN's resolver does not answer AAAA for %s: %v %s", m.Target(t), err, out)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// NID64short is the identifier as an address formats it ("214:4fff:fe20:ee64").
func NID64short(nid string) string {
	return strings.TrimPrefix(netip.MustParseAddr("::"+nid).String(), "::")
}

func (m *ilnpMode) Collect(t *Topology, dir string) {
	ctl := filepath.Join(m.opt.BinDir, "ilnpctl")
	for _, n := range []struct {
		ns    *netns.NS
		name  string
		state string
	}{{t.CN, "cn", m.cnState}, {t.MN, "mn", m.mnState}} {
		for _, what := range []string{"sessions", "locators", "stats"} {
			out, err := n.ns.Run(ctl, "-s", filepath.Join(n.state, "ctl.sock"), "-j", "show", what)
			if err != nil {
				out = fmt.Sprintf("{\"error\": %q}\n", err.Error())
			}
			_ = os.WriteFile(filepath.Join(dir, "ilnpctl-"+n.name+"-"+what+".json"), []byte(out), 0o644)
		}
	}
}

// SetPolicy switches both daemons' handoff policy (`ilnpctl set policy`).
func (m *ilnpMode) SetPolicy(t *Topology, policy string) error {
	ctl := filepath.Join(m.opt.BinDir, "ilnpctl")
	for _, n := range []struct {
		ns    *netns.NS
		state string
	}{{t.CN, m.cnState}, {t.MN, m.mnState}} {
		if out, err := n.ns.Run(ctl, "-s", filepath.Join(n.state, "ctl.sock"), "set", "policy", policy); err != nil {
			return fmt.Errorf("ilnpctl set policy %s in %s: %w: %s", policy, n.ns.Name, err, out)
		}
	}
	return nil
}

func (m *ilnpMode) Teardown(t *Topology) error {
	for _, p := range t.procsNamed("ilnpd-") {
		p.Stop(3 * time.Second)
	}
	var firstErr error
	for _, ns := range []*netns.NS{t.CN, t.MN} {
		if err := os.RemoveAll(netns.EtcDir(ns.Name)); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	for _, d := range m.tmpStates {
		if err := os.RemoveAll(d); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	m.tmpStates = nil
	_ = os.Remove("/etc/netns") // only if empty
	return firstErr
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// BuildBinaries builds ilnpd and ilnpctl from the module at root into dir.
func BuildBinaries(root, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/ilnpd", "./cmd/ilnpctl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ilnpd ilnpctl: %w\n%s", err, out)
	}
	return nil
}

// ModuleRoot finds the directory of the ilnp module from the working directory upwards.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "module ilnp") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside the ilnp module (no go.mod with 'module ilnp' above the working directory)")
		}
		dir = parent
	}
}
