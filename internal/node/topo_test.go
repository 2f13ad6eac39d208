package node_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"ilnp/internal/config"
	"ilnp/internal/nstest"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// The integration topology: one router R between the CN's wired network, the MN's two access
// networks (radvd on both) and a third host X that plays the attacker.
//
//	CN cn0 ---- r-cn  R  r-mn1 ---- mn1 MN
//	2001:db8:1::/64    r-mn2 ---- mn2
//	                   r-x   ---- x0  X   2001:db8:4::/64
const (
	cnNIDText = "0214:4fff:fe20:cc01"
	mnNIDText = "0214:4fff:fe20:ee64"
)

var (
	l1 = mustL64("2001:db8:1::") // CN's network, static
	l2 = mustL64("2001:db8:2::") // MN's first access network (mn1)
	l3 = mustL64("2001:db8:3::") // MN's second access network (mn2)
	l4 = mustL64("2001:db8:4::") // X's network

	cnNID = mustNID(cnNIDText)
	mnNID = mustNID(mnNIDText)

	// mnPlain is an ordinary IPv6 address of the MN (not its NID): traffic to it is not ILNP.
	mnPlain = netip.MustParseAddr("2001:db8:2::99")
	xAddr   = netip.MustParseAddr("2001:db8:4::2")
)

func mustL64(s string) wire.L64 {
	l, err := wire.ParseL64(s)
	if err != nil {
		panic(err)
	}
	return l
}

func mustNID(s string) wire.NID {
	n, err := wire.ParseNID(s)
	if err != nil {
		panic(err)
	}
	return n
}

func ilv(l wire.L64, n wire.NID) netip.Addr { return wire.ILV{Locator: l, NID: n}.Addr() }

// Binaries are built once per test process into binDir (removed by TestMain).
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "ilnpd-integration-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "./cmd/ilnpd", "./cmd/ilnpctl")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ilnpd ilnpctl: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// proc is a process running in a namespace. Only its own goroutine calls Wait (a second,
// concurrent Wait on an exec.Cmd blocks for ever); the test's cleanup stops it with SIGTERM and
// then SIGKILL, so daemons get to shut down cleanly.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func startProc(t *testing.T, ns *nstest.NS, out io.Writer, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command("ip", append([]string{"netns", "exec", ns.Name}, args...)...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s in %s: %v", strings.Join(args, " "), ns.Name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { _ = p.stop(5 * time.Second) })
	return p
}

// wait waits up to limit for the process to end and returns its exit error; ok is false when it
// is still running.
func (p *proc) wait(limit time.Duration) (err error, ok bool) {
	select {
	case <-p.done:
		return p.err, true
	case <-time.After(limit):
		return nil, false
	}
}

// stop sends SIGTERM, and SIGKILL after limit; it returns the exit error (nil for status 0).
func (p *proc) stop(limit time.Duration) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err, ok := p.wait(limit); ok {
		return err
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s: still running %v after SIGTERM, killed", strings.Join(p.cmd.Args, " "), limit)
}

// testNet is one built topology with ilnpd running on the CN and the MN.
type testNet struct {
	t                 *testing.T
	dir, bin          string
	CN, R, MN, X      *nstest.NS
	cn, mn            *daemon
	radvd             *proc
	radvdLog, hostsFn string
	captures          []*capture
	// extraConf is appended to a daemon's configuration, by daemon name ("cn", "mn").
	extraConf map[string]string
	// logShown: the daemon logs whose tail a failing test has printed (a restarted daemon
	// appends to its predecessor's, and the tail is printed once).
	logShown map[string]bool
}

// daemon is one running ilnpd.
type daemon struct {
	net         *testNet
	name        string
	ns          *nstest.NS
	sock        string
	log         string
	proc        *proc
	state, conf string
}

// newTestNet builds the topology, starts radvd and both daemons (handoff mode from the
// configuration) and returns once the MN has its first locator and the CN resolves "mn".
func newTestNet(t *testing.T, handoff string) *testNet {
	t.Helper()
	return newTestNetConf(t, handoff, nil)
}

// newTestNetConf is newTestNet with extra configuration lines per daemon name.
func newTestNetConf(t *testing.T, handoff string, extra map[string]string) *testNet {
	t.Helper()
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "radvd", "iperf3", "tcpdump", "tshark", "ethtool", "ss", "getent")
	n := &testNet{t: t, dir: t.TempDir(), bin: binaries(t), extraConf: extra}
	// autoconf=0: the MN's kernel must not form SLAAC addresses of its own on mn1 before
	// ilnpd starts (ilnpd turns it off, but an address formed earlier stays and a UDP server
	// may answer from it, outside ILNP: iperf3's UDP handshake then hangs).
	n.buildCore("it", "net.ipv6.conf.default.autoconf=0")
	n.X = nstest.New(t, "itx")
	n.X.Run("sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	nstest.Link(t, n.R, "r-x", n.X, "x0")
	n.X.Run("ethtool", "-K", "x0", "tso", "off")
	n.R.Run("ip", "addr", "add", "2001:db8:4::1/64", "dev", "r-x")
	n.X.Run("ip", "addr", "add", xAddr.String()+"/64", "dev", "x0")
	n.X.Run("ip", "route", "add", "default", "via", "2001:db8:4::1", "dev", "x0")
	// A plain IPv6 address on the MN beside its ILNP locator (another interface identifier).
	// Deprecated (preferred_lft 0) so that the kernel never picks it as the source of the
	// session's packets; it still receives, and replies to what is sent to it.
	n.MN.Run("ip", "addr", "add", mnPlain.String()+"/64", "dev", "mn1", "nodad", "preferred_lft", "0")

	n.startRadvd()

	// One hosts file for both: the MN is reached by name through the stub resolver.
	n.hostsFn = filepath.Join(n.dir, "hosts")
	hosts := fmt.Sprintf("%s|10,%s cn\n%s|10,%s mn\n", l1, cnNID, l2, mnNID)
	if _, err := wire.ParseHosts(strings.NewReader(hosts), n.hostsFn); err != nil {
		t.Fatalf("test wrote a bad hosts file: %v", err)
	}
	writeFile(t, n.hostsFn, hosts)

	if keep := os.Getenv("ILNP_IT_KEEP"); keep != "" {
		// Debugging: full captures on R, and the run's directory copied to $ILNP_IT_KEEP.
		for _, ifname := range []string{"r-cn", "r-mn1", "r-mn2"} {
			n.capture(ifname, "ip6")
		}
		t.Cleanup(func() {
			for _, c := range n.captures {
				c.Stop()
			}
			dst := filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"))
			_ = os.RemoveAll(dst)
			if out, err := exec.Command("cp", "-a", n.dir, dst).CombinedOutput(); err != nil {
				t.Logf("keep %s: %v %s", dst, err, out)
			}
		})
	}
	n.cn = n.startDaemon("cn", n.CN, cnNIDText, handoff, "cn0")
	n.mn = n.startDaemon("mn", n.MN, mnNIDText, handoff, "mn1", "mn2")

	// Ready: the MN has [L2:NID] as its active locator, the CN has its static one, and the
	// CN's stub resolver answers for "mn".
	n.waitFor(20*time.Second, "MN locator L2 active", func() (bool, string) {
		rows, err := n.mn.locators()
		return err == nil && stateOf(rows, l2) == "active", fmt.Sprint(rows, err)
	})
	n.waitFor(10*time.Second, "CN static locator L1 active", func() (bool, string) {
		rows, err := n.cn.locators()
		return err == nil && stateOf(rows, l1) == "active", fmt.Sprint(rows, err)
	})
	want := ilv(l2, mnNID).String()
	n.waitFor(10*time.Second, "CN resolves mn", func() (bool, string) {
		out, err := n.CN.Try("getent", "ahostsv6", "mn")
		return err == nil && strings.Contains(out, want), out
	})
	return n
}

// buildCore creates the namespaces every variant has, prefix+"cn", "r" and "mn": CN - R on L1
// and R - MN twice (mn1 on L2, mn2 on L3, down: the MN starts in its first network), with
// forwarding on R, static addresses on CN and R, DAD off where addresses are static, and the
// MN accepting RAs with optimistic DAD (as a real mobile host would; ilnpd asks for optimistic
// addresses). mnSysctls are added to the MN's. Sysctls go in before the links exist, so
// "default" reaches every interface.
func (n *testNet) buildCore(prefix string, mnSysctls ...string) {
	t := n.t
	t.Helper()
	n.CN = nstest.New(t, prefix+"cn")
	n.R = nstest.New(t, prefix+"r")
	n.MN = nstest.New(t, prefix+"mn")
	for _, ns := range []*nstest.NS{n.CN, n.R} {
		ns.Run("sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	}
	n.CN.Run("sysctl", "-qw", "net.ipv6.conf.default.accept_ra=0")
	n.R.Run("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1", "net.ipv6.conf.default.forwarding=1")
	n.MN.Run(append([]string{"sysctl", "-qw", "net.ipv6.conf.default.accept_ra=1",
		"net.ipv6.conf.default.optimistic_dad=1", "net.ipv6.conf.default.use_optimistic=1"}, mnSysctls...)...)
	nstest.Link(t, n.CN, "cn0", n.R, "r-cn")
	nstest.Link(t, n.R, "r-mn1", n.MN, "mn1")
	nstest.Link(t, n.R, "r-mn2", n.MN, "mn2")
	// The host side sends ILNP packets with the nonce option: TSO off there, or the router's
	// ip6_forward drops some super-packets (platform.md, router GSO bug).
	for _, h := range []struct {
		ns *nstest.NS
		If string
	}{{n.CN, "cn0"}, {n.MN, "mn1"}, {n.MN, "mn2"}} {
		h.ns.Run("ethtool", "-K", h.If, "tso", "off")
	}
	n.CN.Run("ip", "addr", "add", ilv(l1, cnNID).String()+"/64", "dev", "cn0", "nodad")
	n.CN.Run("ip", "route", "add", "default", "via", "2001:db8:1::1", "dev", "cn0")
	n.R.Run("ip", "addr", "add", "2001:db8:1::1/64", "dev", "r-cn")
	n.R.Run("ip", "addr", "add", "2001:db8:2::1/64", "dev", "r-mn1")
	n.R.Run("ip", "addr", "add", "2001:db8:3::1/64", "dev", "r-mn2")
	n.MN.Run("ip", "link", "set", "mn2", "down")
}

func writeFile(t *testing.T, name, text string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startRadvd runs one real radvd on R for both of the MN's networks, with fast RAs (sub-3-s
// intervals need AdvIntervalOpt, platform.md).
func (n *testNet) startRadvd() {
	n.t.Helper()
	n.startRadvdOn(map[string]string{"r-mn1": "2001:db8:2::/64", "r-mn2": "2001:db8:3::/64"})
}

// startRadvdOn runs radvd on R for the given interfaces, each with its prefix.
func (n *testNet) startRadvdOn(prefixes map[string]string) {
	n.t.Helper()
	var b strings.Builder
	names := make([]string, 0, len(prefixes))
	for ifname := range prefixes {
		names = append(names, ifname)
	}
	sort.Strings(names)
	for _, r := range names {
		r := struct{ ifname, prefix string }{r, prefixes[r]}
		fmt.Fprintf(&b, `interface %s {
	AdvSendAdvert on;
	AdvIntervalOpt on;
	MinRtrAdvInterval 0.5;
	MaxRtrAdvInterval 1;
	AdvDefaultLifetime 9;
	prefix %s {
		AdvOnLink on;
		AdvAutonomous on;
		AdvValidLifetime 60;
		AdvPreferredLifetime 30;
	};
};
`, r.ifname, r.prefix)
	}
	conf := filepath.Join(n.dir, "radvd.conf")
	writeFile(n.t, conf, b.String())
	n.radvdLog = filepath.Join(n.dir, "radvd.log")
	logf, err := os.Create(n.radvdLog)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { logf.Close() })
	n.radvd = startProc(n.t, n.R, logf, "radvd", "-n", "-m", "stderr", "-C", conf, "-p", filepath.Join(n.dir, "radvd.pid"))
}

// startDaemon writes a configuration (checked with the product's parser and with `ilnpd
// -check`), points the namespace's resolv.conf at the stub resolver and starts ilnpd.
func (n *testNet) startDaemon(name string, ns *nstest.NS, nid, handoff string, ifaces ...string) *daemon {
	t := n.t
	t.Helper()
	state := n.stateDir(name)
	conf := n.writeConfig(name, fmt.Sprintf(`# integration test %s
node %s
interfaces %s
nid %s
handoff %s
state-dir %s
events %s
hosts %s
dns-listen [::1]:53
log-level debug
%s`, t.Name(), name, strings.Join(ifaces, " "), nid, handoff, state,
		filepath.Join(n.dir, name+"-events.jsonl"), n.hostsFn, n.extraConf[name]))
	if out, err := exec.Command(n.ilnpd(), "-check", "-config", conf).CombinedOutput(); err != nil {
		t.Fatalf("ilnpd -check %s: %v: %s", conf, err, out)
	}
	return n.runDaemon(name, ns, state, conf)
}

func (n *testNet) ilnpd() string { return filepath.Join(n.bin, "ilnpd") }

// stateDir creates the daemon's state directory. The daemon runs under `ip netns exec`, in a
// private mount namespace: it mounts its bpffs there and leaves a holder so that a restarted
// ilnpd finds its pins (internal/bpffs); the restart tests depend on that.
func (n *testNet) stateDir(name string) string {
	n.t.Helper()
	state := filepath.Join(n.dir, name+"-state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		n.t.Fatal(err)
	}
	return state
}

// writeConfig checks text with the product's parser and writes it as the daemon's
// configuration file.
func (n *testNet) writeConfig(name, text string) string {
	n.t.Helper()
	conf := filepath.Join(n.dir, name+".conf")
	if _, err := config.Parse(strings.NewReader(text), conf); err != nil {
		n.t.Fatalf("test wrote a bad config: %v", err)
	}
	writeFile(n.t, conf, text)
	return conf
}

// runDaemon points the namespace's resolv.conf at the stub resolver, starts ilnpd with conf
// and returns once its control socket (in state) is there, at most 15 s. The daemon's log tail
// is shown if the test fails.
func (n *testNet) runDaemon(name string, ns *nstest.NS, state, conf string) *daemon {
	t := n.t
	t.Helper()
	writeResolvConf(t, ns)
	d := &daemon{net: n, name: name, ns: ns, sock: filepath.Join(state, "ctl.sock"),
		log: filepath.Join(n.dir, name+"-ilnpd.log"), state: state, conf: conf}
	logf, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644) // a restart appends
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	t.Cleanup(func() {
		if t.Failed() && !n.logShown[d.log] {
			if n.logShown == nil {
				n.logShown = map[string]bool{}
			}
			n.logShown[d.log] = true
			t.Logf("--- %s ilnpd log (tail) ---\n%s", name, tailFile(d.log, 40))
		}
	})
	// Registered after the log dump, so it runs before it: the log is complete.
	d.proc = startProc(t, ns, logf, n.ilnpd(), "-config", conf)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(d.sock); err == nil {
			return d
		}
		if err, done := d.proc.wait(50 * time.Millisecond); done {
			t.Fatalf("ilnpd %s exited at start (%v):\n%s", name, err, tailFile(d.log, 40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("ilnpd %s: no control socket after 15 s:\n%s", name, tailFile(d.log, 40))
		}
	}
}

// writeResolvConf makes applications in ns use the stub resolver on [::1]:53 (`ip netns exec`
// bind-mounts /etc/netns/NS/resolv.conf over /etc/resolv.conf) and removes it afterwards.
func writeResolvConf(t *testing.T, ns *nstest.NS) {
	dir := filepath.Join("/etc/netns", ns.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
		_ = os.Remove("/etc/netns") // only when empty: others may use it
	})
	writeFile(t, filepath.Join(dir, "resolv.conf"), "nameserver ::1\n")
}

// stop ends the daemon with SIGTERM (SIGKILL after limit) and returns its exit error.
func (d *daemon) stop(limit time.Duration) error { return d.proc.stop(limit) }

func (n *testNet) waitFor(limit time.Duration, what string, cond func() (bool, string)) {
	n.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("timed out after %v waiting for %s; last state: %s", limit, what, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ctl runs ilnpctl against the daemon.
func (d *daemon) ctl(args ...string) (string, error) {
	return d.ns.Try(append([]string{filepath.Join(d.net.bin, "ilnpctl"), "-s", d.sock}, args...)...)
}

// showJSON runs `ilnpctl -j show WHAT` and decodes it into v.
func (d *daemon) showJSON(what string, v any) error {
	out, err := d.ctl("-j", "show", what)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("ilnpctl -j show %s: not the expected JSON: %w\n%s", what, err, out)
	}
	return nil
}

type locatorRow struct {
	Iface     string `json:"iface"`
	Locator   string `json:"locator"`
	Family    string `json:"family"`
	Address   string `json:"address"`
	State     string `json:"state"`
	Router    string `json:"router"`
	ValidSecs int64  `json:"valid_s"`
}

type sessionRow struct {
	PeerNID        string  `json:"peer_nid"`
	SessionLocal   string  `json:"session_local"`
	SessionRemote  string  `json:"session_remote"`
	ActiveLocal    string  `json:"active_local"`
	ActiveRemote   string  `json:"active_remote"`
	Family         string  `json:"family"`
	Mode           string  `json:"mode"`
	Encap6         string  `json:"encap6"`
	RemoteLocators string  `json:"remote_locators"`
	LocalNonce     string  `json:"local_nonce"`
	RemoteNonce    string  `json:"remote_nonce"`
	TxPackets      uint64  `json:"tx_packets"`
	RxPackets      uint64  `json:"rx_packets"`
	IdleS          float64 `json:"idle_s"`
	SRTTMs         float64 `json:"lu_srtt_ms"`
}

type peerRow struct {
	Name string   `json:"name"`
	NID  string   `json:"nid"`
	ILVs []string `json:"ilvs"`
}

func (d *daemon) locators() ([]locatorRow, error) {
	var rows []locatorRow
	return rows, d.showJSON("locators", &rows)
}

func (d *daemon) sessions() ([]sessionRow, error) {
	var rows []sessionRow
	return rows, d.showJSON("sessions", &rows)
}

func (d *daemon) stats() (map[string]uint64, error) {
	var m map[string]uint64
	return m, d.showJSON("stats", &m)
}

// session returns the daemon's session with peer, failing the test when there is none.
func (d *daemon) session(t *testing.T, peer wire.NID) sessionRow {
	t.Helper()
	rows, err := d.sessions()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.PeerNID == peer.String() {
			return r
		}
	}
	t.Fatalf("%s has no session with %s: %+v", d.name, peer, rows)
	return sessionRow{}
}

func (d *daemon) events() ([]timeline.Event, error) {
	out, err := d.ctl("-j", "events")
	if err != nil {
		return nil, err
	}
	var evs []timeline.Event
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var e timeline.Event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("ilnpctl -j events: line %q: %w", line, err)
		}
		evs = append(evs, e)
	}
	return evs, sc.Err()
}

func stateOf(rows []locatorRow, l wire.L64) string {
	for _, r := range rows {
		if r.Locator == l.String() {
			return r.State
		}
	}
	return ""
}

func tailFile(path string, lines int) string {
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

// grepFile is the lines of path that contain any of subs.
func grepFile(path string, subs ...string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, s := range subs {
			if strings.Contains(l, s) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// capture is tcpdump on one of R's interfaces.
type capture struct{ *nstest.Capture }

// captureLUs captures Locator Updates only (ICMPv6 type 156, directly after the IPv6 header
// or after an 8-byte Destination Options header), so the capture stays small while bulk flows
// run.
func (n *testNet) captureLUs(ifname string) *capture {
	return n.capture(ifname, "(ip6[6] == 60 and ip6[40] == 58 and ip6[48] == 156) or (ip6[6] == 58 and ip6[40] == 156)")
}

// capture runs tcpdump on one of R's interfaces with a filter.
func (n *testNet) capture(ifname, filter string) *capture {
	n.t.Helper()
	file := filepath.Join(n.dir, ifname+"-"+strconv.Itoa(len(n.captures))+".pcap")
	c := &capture{n.R.Capture(ifname, file, "-s", "256", "-Z", "root", filter)}
	n.captures = append(n.captures, c)
	return c
}

// luPacket is one Locator Update as tshark decodes it.
type luPacket struct {
	Src, Dst, Nonce, Locators, ChecksumStatus string
}

// packets stops tcpdump and decodes the capture with tshark.
func (c *capture) packets(t *testing.T) []luPacket {
	t.Helper()
	c.Stop()
	out, err := exec.Command("tshark", "-r", c.File, "-Y", "icmpv6.type == 156", "-T", "fields",
		"-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=;",
		"-e", "ipv6.src", "-e", "ipv6.dst", "-e", "ipv6.opt.ilnp_nonce",
		"-e", "icmpv6.ilnp.nb_locator", "-e", "icmpv6.checksum.status").Output()
	if err != nil {
		t.Fatalf("tshark -r %s: %v", c.File, err)
	}
	var pkts []luPacket
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) != 5 {
			t.Fatalf("tshark line %q: want 5 fields", line)
		}
		pkts = append(pkts, luPacket{Src: f[0], Dst: f[1], Nonce: f[2], Locators: f[3], ChecksumStatus: f[4]})
	}
	return pkts
}

// sendRaw sends a whole IPv6 packet (header included) from inside ns: a raw socket with
// IPPROTO_RAW writes the header as given, so the source can be any address.
func sendRaw(ns *nstest.NS, pkt []byte) error {
	hdr, err := wire.ParseIPv6Header(pkt)
	if err != nil {
		return err
	}
	return ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			return fmt.Errorf("raw socket: %w", err)
		}
		defer unix.Close(fd)
		if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet6{Addr: hdr.Dst.As16()}); err != nil {
			return fmt.Errorf("send raw packet to %s: %w", hdr.Dst, err)
		}
		return nil
	})
}

// iperfServer runs `iperf3 -s -1 -J` on the MN and returns the path of its JSON report.
func (n *testNet) iperfServer(port int) (*exec.Cmd, string) {
	n.t.Helper()
	file := filepath.Join(n.dir, fmt.Sprintf("iperf-server-%d.json", port))
	cmd := n.MN.Start(nil, "iperf3", "-s", "-1", "-J", "-p", fmt.Sprint(port), "--logfile", file)
	n.waitFor(5*time.Second, fmt.Sprintf("iperf3 server on port %d", port), func() (bool, string) {
		out, _ := n.MN.Try("ss", "-Hltn", fmt.Sprintf("sport = :%d", port))
		return strings.Contains(out, fmt.Sprintf(":%d", port)), out
	})
	return cmd, file
}

// serverReport reads the report of an iperf3 server started by iperfServer once it has
// written it: a `-1` server writes its JSON and exits a moment after its client does, so the
// file is read after the server's exit (at most 10 s, then it is killed), never on the
// client's.
func (n *testNet) serverReport(srv *exec.Cmd, file string) iperfReport {
	n.t.Helper()
	exited := make(chan struct{})
	go func() {
		_ = srv.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = srv.Process.Kill()
		<-exited
	}
	return readIperf(n.t, file)
}

// iperfClient starts `iperf3 -c TARGET` on the CN; Wait it (once, from the test goroutine:
// nstest's cleanup Waits too, after the test), then read the JSON file.
func (n *testNet) iperfClient(target string, port int, args ...string) (*exec.Cmd, string) {
	n.t.Helper()
	file := filepath.Join(n.dir, fmt.Sprintf("iperf-client-%d.json", port))
	full := append([]string{"iperf3", "-c", target, "-p", fmt.Sprint(port), "-J", "--logfile", file,
		"--connect-timeout", "5000"}, args...)
	return n.CN.Start(nil, full...), file
}

// ping sends count ICMPv6 echo requests from inside ns to dst, one every interval, and returns
// the round-trip times of the replies (the machine has no ping binary; this is enough).
func ping(ns *nstest.NS, dst netip.Addr, count int, interval, timeout time.Duration) ([]time.Duration, error) {
	var conn *icmp.PacketConn
	if err := ns.Do(func() (err error) {
		conn, err = icmp.ListenPacket("ip6:ipv6-icmp", "::")
		return err
	}); err != nil {
		return nil, fmt.Errorf("ICMPv6 socket in %s: %w", ns.Name, err)
	}
	defer conn.Close()
	var f ipv6.ICMPFilter
	f.SetAll(true)
	f.Accept(ipv6.ICMPTypeEchoReply)
	if err := conn.IPv6PacketConn().SetICMPFilter(&f); err != nil {
		return nil, err
	}
	id := os.Getpid() & 0xffff
	sent := map[int]time.Time{}
	var rtts []time.Duration
	buf := make([]byte, 1500)
	for seq := 1; seq <= count; seq++ {
		msg := icmp.Message{Type: ipv6.ICMPTypeEchoRequest, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("ilnp-integration")}}
		b, err := msg.Marshal(nil) // the kernel computes ICMPv6 checksums on raw sockets
		if err != nil {
			return nil, err
		}
		sent[seq] = time.Now()
		if _, err := conn.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return rtts, fmt.Errorf("echo to %s: %w", dst, err)
		}
		wait := interval
		if seq == count {
			wait = timeout
		}
		deadline := time.Now().Add(wait)
		for len(rtts) < seq {
			_ = conn.SetReadDeadline(deadline)
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				break // timeout: go on with the next echo
			}
			m, err := icmp.ParseMessage(58, buf[:n])
			if err != nil {
				continue
			}
			if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id && !sent[e.Seq].IsZero() {
				rtts = append(rtts, time.Since(sent[e.Seq]))
				delete(sent, e.Seq)
			}
		}
		if seq < count {
			time.Sleep(time.Until(deadline)) // pace the echoes
		}
	}
	if len(rtts) < count {
		return rtts, fmt.Errorf("ping %s from %s: %d of %d replies", dst, ns.Name, len(rtts), count)
	}
	return rtts, nil
}

// resolve asks the namespace's resolver (the stub, through resolv.conf) for name's AAAA.
func resolve(ns *nstest.NS, name string) (netip.Addr, error) {
	out, err := ns.Try("getent", "ahostsv6", name)
	if err != nil {
		return netip.Addr{}, err
	}
	f := strings.Fields(out)
	if len(f) == 0 {
		return netip.Addr{}, fmt.Errorf("getent ahostsv6 %s: no answer", name)
	}
	return netip.ParseAddr(f[0])
}
