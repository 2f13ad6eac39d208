package lab

// DNS rendezvous (issue 6) in the lab: a "dns" namespace attached to R1 runs a real BIND9
// named (configuration from internal/namedtest, written into the run directory) serving
// ilnp.test; the MN's ilnpd keeps mn.ilnp.test's NID and L64 records current with TSIG-signed
// RFC 2136 updates, the CN's ilnpd finds them (no hosts entry for the MN) and iperf3 on the CN
// reaches mn.ilnp.test by name. Each run measures how long the server lags behind the move.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"ilnp/internal/named"
	"ilnp/internal/timeline"
	"ilnp/lab/netns"
)

// Rendezvous is how the CN finds the MN.
const (
	RendezvousHosts = "hosts" // a shared ILNP hosts file with both of the MN's locators (thesis)
	RendezvousDNS   = "dns"   // real DNS: NID/L64 records kept current by the MN (issue 6)
	RendezvousNone  = "n/a"   // modes without ilnpd (plain IPv6, MIPv6) reach the MN by address
)

// RendezvousNames lists the choices of --rendezvous.
var RendezvousNames = []string{RendezvousHosts, RendezvousDNS}

// DefaultRendezvous is used by runs whose RunConfig.Rendezvous is empty (the CLI's
// --rendezvous sets it, so matrix and demo runs follow it too).
var DefaultRendezvous = RendezvousHosts

// The lab's DNS: zone, the MN's name, the server's link to R1.
const (
	DNSZone    = "ilnp.test."
	DNSMNName  = "mn.ilnp.test"
	DNSCNName  = "cn.ilnp.test" // published only in a double-jump testbed, where the CN moves
	IfDNS      = "dns-r1"
	IfR1DNS    = "r1-dns"
	dnsPollGap = 20 * time.Millisecond
)

var (
	DNSPrefix     = netip.MustParsePrefix("2001:db8:53::/64")
	DNSServerAddr = netip.MustParseAddr("2001:db8:53::53")
	dnsRouterAddr = netip.MustParseAddr("2001:db8:53::1")
)

// ValidRendezvous checks a --rendezvous value.
func ValidRendezvous(r string) error {
	if !slices.Contains(RendezvousNames, r) {
		return fmt.Errorf("unknown rendezvous %q (want one of %s)", r, strings.Join(RendezvousNames, ", "))
	}
	return nil
}

// effectiveRendezvous is what a run uses: DNS and hosts only matter where ilnpd runs.
func effectiveRendezvous(cfg RunConfig) string {
	if !NeedsILNP(cfg.Mode) {
		return RendezvousNone
	}
	return cmp.Or(cfg.Rendezvous, DefaultRendezvous, RendezvousHosts)
}

// DNSServer is the lab's running named.
type DNSServer struct {
	*named.Files
	Proc      *Proc
	removeDir bool // the directory is under /var/cache/bind (AppArmor) and ours to remove
}

// buildDNS makes the dns namespace on its own /64 off R1 and starts named in it. Build calls
// it; Close stops named with the other processes and removes the namespace.
func (t *Topology) buildDNS(ctx context.Context) error {
	ns, err := netns.New("ilab-" + t.ID + "-dns")
	if err != nil {
		return err
	}
	t.all = append(t.all, ns)
	t.DNS = ns
	for _, kv := range [][2]string{{"net.ipv6.conf.default.accept_dad", "0"}, {"net.ipv6.conf.all.accept_dad", "0"},
		{"net.ipv6.conf.default.accept_ra", "0"}} {
		if err := ns.Sysctl(kv[0], kv[1]); err != nil {
			return err
		}
	}
	if err := netns.Veth(t.R1, IfR1DNS, ns, IfDNS); err != nil {
		return err
	}
	for _, c := range []struct {
		ns   *netns.NS
		args []string
	}{
		{t.R1, []string{"ip", "addr", "add", dnsRouterAddr.String() + "/64", "dev", IfR1DNS}},
		{ns, []string{"ip", "addr", "add", DNSServerAddr.String() + "/64", "dev", IfDNS}},
		{ns, []string{"ip", "route", "add", "default", "via", dnsRouterAddr.String(), "dev", IfDNS}},
	} {
		if _, err := c.ns.Run(c.args...); err != nil {
			return err
		}
	}
	for _, tool := range []string{"named", "named-checkconf"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("--rendezvous dns needs BIND9 (%s): %w", tool, err)
		}
	}
	srv := &DNSServer{}
	dir := filepath.Join(t.Cfg.Dir, "named")
	if named.AppArmorState() == "enforce" {
		// Debian's enforced profile lets named write only under /var/cache/bind.
		if dir, err = os.MkdirTemp("/var/cache/bind", "ilnp-lab-"+t.ID+"-"); err != nil {
			return fmt.Errorf("AppArmor confines named and /var/cache/bind is not usable: %w", err)
		}
		srv.removeDir = true
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	t.Named = srv
	if srv.Files, err = named.Generate(dir, named.Options{Zone: DNSZone, Listen: DNSServerAddr,
		UpdateNames: t.dnsUpdateNames(), SOAMinimum: 1}); err != nil {
		return err
	}
	if out, err := exec.Command("named-checkconf", srv.Conf).CombinedOutput(); err != nil {
		return fmt.Errorf("named-checkconf %s: %w: %s", srv.Conf, err, out)
	}
	if srv.Proc, err = t.Start(ns, "named", srv.Command()...); err != nil {
		return err
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		if _, err := t.QueryDNS(DNSZone, dns.TypeSOA); err == nil {
			return nil
		}
		if done, werr := srv.Proc.Exited(); done || time.Now().After(deadline) {
			return fmt.Errorf("named did not answer for %s within 15 s (%v): %s", DNSZone, werr, tail(srv.Proc.LogPath, 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// closeDNS removes what named left outside the run directory.
func (t *Topology) closeDNS() error {
	if t.Named == nil || !t.Named.removeDir {
		return nil
	}
	return os.RemoveAll(t.Named.Dir)
}

// QueryDNS asks the lab's named directly (from inside its namespace: no stub, no cache).
func (t *Topology) QueryDNS(name string, qtype uint16) (*dns.Msg, error) {
	if t.DNS == nil {
		return nil, fmt.Errorf("the testbed has no DNS server (--rendezvous dns)")
	}
	var conn net.Conn
	if err := t.DNS.Do(func() (err error) {
		conn, err = net.DialUDP("udp6", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(DNSServerAddr, 53)))
		return err
	}); err != nil {
		return nil, err
	}
	c := &dns.Conn{Conn: conn}
	defer c.Close()
	return exchange(c, name, qtype)
}

func exchange(c *dns.Conn, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.RecursionDesired = false
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if err := c.WriteMsg(m); err != nil {
		return nil, err
	}
	r, err := c.ReadMsg()
	if err != nil {
		return nil, err
	}
	if r.Id != m.Id {
		return nil, fmt.Errorf("DNS answer for another query")
	}
	if r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError {
		return nil, fmt.Errorf("DNS %s", dns.RcodeToString[r.Rcode])
	}
	return r, nil
}

// l64Set is the locators of an answer's L64 records, sorted, in the lab's L64() form.
func l64Set(r *dns.Msg) []string {
	set := []string{}
	for _, rr := range r.Answer {
		if l, ok := rr.(*dns.L64); ok {
			set = append(set, fmt.Sprintf("%04x:%04x:%04x:%04x", uint16(l.Locator64>>48), uint16(l.Locator64>>32),
				uint16(l.Locator64>>16), uint16(l.Locator64)))
		}
	}
	slices.Sort(set)
	return set
}

// DNSDaemonConfig is DaemonConfig for DNS rendezvous: no hosts file; the MN publishes its NID
// and locators under mn.ilnp.test with the server's TSIG key, the CN's stub looks names up there.
func DNSDaemonConfig(node string, ifaces []string, nid, handoff, stateDir, events string, srv *DNSServer) string {
	text := fmt.Sprintf(`# written by ilnp-lab for one run (DNS rendezvous)
node %s
interfaces %s
nid %s
handoff %s
state-dir %s
events %s
dns-listen [::1]:53
log-level debug
`, node, strings.Join(ifaces, " "), NID64(nid), handoff, stateDir, events)
	server := srv.Addr.String()
	if node == "mn" {
		return text + DNSPublishConfig(DNSMNName, srv)
	}
	return text + fmt.Sprintf("dns-upstream %s\ndns-lookup-server %s\n", server, server)
}

// DNSPublishConfig is the ilnpd configuration that keeps name's NID and L64 records current
// on the lab's named.
func DNSPublishConfig(name string, srv *DNSServer) string {
	return fmt.Sprintf("dns-publish-name %s\ndns-publish-zone %s\ndns-publish-server %s\ndns-publish-key %s %s\ndns-publish-ttl 0s\n",
		name, strings.TrimSuffix(srv.Zone, "."), srv.Addr.String(), srv.KeyFile, strings.TrimSuffix(srv.KeyName, "."))
}

// dnsUpdateNames are the names the lab's key may update: the MN's, and in a double jump the
// CN's.
func (t *Topology) dnsUpdateNames() []string {
	names := []string{DNSMNName + "."}
	if t.Cfg.DoubleJump {
		names = append(names, DNSCNName+".")
	}
	return names
}

// dnsPoll asks named for the MN's L64 set every dnsPollGap while the flow runs and keeps each
// change: when the server (not the MN's view of it) showed which set.
type dnsPoll struct {
	stop    context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	changes []DNSChange
	errs    int
}

// DNSChange is one change of the L64 RRset as seen by polling the server.
type DNSChange struct {
	MonoNS int64    `json:"t_ns"`
	L64    []string `json:"l64"`
}

func (t *Topology) startDNSPoll(ctx context.Context) (*dnsPoll, error) {
	var conn net.Conn
	if err := t.DNS.Do(func() (err error) {
		conn, err = net.DialUDP("udp6", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(DNSServerAddr, 53)))
		return err
	}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &dnsPoll{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		c := &dns.Conn{Conn: conn}
		defer c.Close()
		var last []string
		for first := true; ctx.Err() == nil; first = false {
			at := timeline.Now()
			r, err := exchange(c, DNSMNName, dns.TypeL64)
			p.mu.Lock()
			if err != nil {
				p.errs++
			} else if set := l64Set(r); first || !slices.Equal(set, last) {
				p.changes = append(p.changes, DNSChange{MonoNS: at, L64: set})
				last = set
			}
			p.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(dnsPollGap):
			}
		}
	}()
	return p, nil
}

func (p *dnsPoll) finish() ([]DNSChange, int) {
	p.stop()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changes, p.errs
}

// DNSMeasure is a run's DNS rendezvous figures (rep-N/run.json "dns"). Times are from the
// lab bringing mn-r3 up (enter) or mn-r2 down (leave); nil when it did not happen.
type DNSMeasure struct {
	Server string `json:"server"`
	Name   string `json:"name"`
	// From the MN's timeline (dns_update_sent / dns_update_result).
	Updates   int `json:"updates"`    // exchanges the MN's publisher finished during the run
	UpdatesOK int `json:"updates_ok"` // of those, accepted (or already current)
	// EnterUpdateMs: to the first accepted update whose set holds L3; LeaveUpdateMs: to the
	// first accepted update whose set is {L3} only (the MN's update latency after the move);
	// LeaveExchangeMs is that update's own exchange (UPDATE sent to answer received).
	EnterUpdateMs   *float64 `json:"enter_update_ms"`
	LeaveUpdateMs   *float64 `json:"leave_update_ms"`
	LeaveExchangeMs *float64 `json:"leave_exchange_ms"`
	// From polling named every poll_interval_ms: when the server itself first answered a set
	// holding L3, and first answered {L3} only.
	PollIntervalMs float64  `json:"poll_interval_ms"`
	PollErrors     int      `json:"poll_errors"`
	VisibleEnterMs *float64 `json:"visible_enter_ms"`
	VisibleLeaveMs *float64 `json:"visible_leave_ms"`
	// The move to {L3} whatever the handoff: a hard handoff publishes {L3} on entering L3
	// (before the leave), a soft one on leaving L2. L3OnlyAfter names the lab action the first
	// accepted {L3}-only publish followed ("enter" or "leave"); the times are from it.
	L3OnlyAfter      string      `json:"l3_only_after,omitempty"`
	L3OnlyUpdateMs   *float64    `json:"l3_only_update_ms"`
	L3OnlyExchangeMs *float64    `json:"l3_only_exchange_ms"`
	L3OnlyVisibleMs  *float64    `json:"l3_only_visible_ms"`
	Changes          []DNSChange `json:"changes"`
	// FinalL64 is the server's L64 set for the MN after the flow.
	FinalL64 []string `json:"final_l64"`
}

// measureDNS reads the MN's timeline and the poll against the move's times (monotonic ns).
func measureDNS(mnEvents []timeline.Event, changes []DNSChange, pollErrs int, enterNS, leaveNS int64) *DNSMeasure {
	m := &DNSMeasure{Server: netip.AddrPortFrom(DNSServerAddr, 53).String(), Name: DNSMNName,
		PollIntervalMs: float64(dnsPollGap) / 1e6, PollErrors: pollErrs, Changes: changes}
	l3 := L64(L3)
	ms := func(from, to int64) *float64 { v := float64(to-from) / 1e6; return &v }
	holdsL3 := func(set []string) bool { return slices.Contains(set, l3) }
	onlyL3 := func(set []string) bool { return len(set) == 1 && set[0] == l3 }
	for _, e := range mnEvents {
		if e.Kind != timeline.DNSUpdateResult {
			continue
		}
		m.Updates++
		cause, set := parseUpdateDetail(e.Detail)
		if cause != "ok" {
			continue
		}
		m.UpdatesOK++
		if enterNS > 0 && m.EnterUpdateMs == nil && e.MonoNS >= enterNS && holdsL3(set) {
			m.EnterUpdateMs = ms(enterNS, e.MonoNS)
		}
		if enterNS > 0 && m.L3OnlyUpdateMs == nil && e.MonoNS >= enterNS && onlyL3(set) {
			m.L3OnlyAfter, m.L3OnlyUpdateMs = "enter", ms(enterNS, e.MonoNS)
			x := float64(e.Duration) / 1e6
			m.L3OnlyExchangeMs = &x
			if leaveNS > 0 && e.MonoNS >= leaveNS {
				m.L3OnlyAfter, m.L3OnlyUpdateMs = "leave", ms(leaveNS, e.MonoNS)
			}
		}
		if leaveNS > 0 && m.LeaveUpdateMs == nil && e.MonoNS >= leaveNS && onlyL3(set) {
			m.LeaveUpdateMs = ms(leaveNS, e.MonoNS)
			x := float64(e.Duration) / 1e6
			m.LeaveExchangeMs = &x
		}
	}
	for _, c := range changes {
		if enterNS > 0 && m.VisibleEnterMs == nil && c.MonoNS >= enterNS && holdsL3(c.L64) {
			m.VisibleEnterMs = ms(enterNS, c.MonoNS)
		}
		if leaveNS > 0 && m.VisibleLeaveMs == nil && c.MonoNS >= leaveNS && onlyL3(c.L64) {
			m.VisibleLeaveMs = ms(leaveNS, c.MonoNS)
		}
		if enterNS > 0 && m.L3OnlyVisibleMs == nil && c.MonoNS >= enterNS && onlyL3(c.L64) {
			from := enterNS
			if m.L3OnlyAfter == "leave" || (m.L3OnlyAfter == "" && leaveNS > 0 && c.MonoNS >= leaveNS) {
				from = leaveNS
			}
			m.L3OnlyVisibleMs = ms(from, c.MonoNS)
		}
	}
	return m
}

// parseUpdateDetail reads a dns_update_result detail: "CAUSE nid=N l64=LOC/PREF,LOC/PREF
// [read-first]" into the cause and the sorted locators.
func parseUpdateDetail(detail string) (string, []string) {
	f := strings.Fields(detail)
	if len(f) == 0 {
		return "", nil
	}
	set := []string{}
	for _, w := range f[1:] {
		list, ok := strings.CutPrefix(w, "l64=")
		if !ok {
			continue
		}
		for _, item := range strings.Split(list, ",") {
			loc, _, _ := strings.Cut(item, "/")
			if norm, ok := normalizeL64(loc); ok {
				set = append(set, norm)
			}
		}
	}
	slices.Sort(set)
	return f[0], set
}

// normalizeL64 writes "2001:db8:3:0" or "2001:0DB8:0003:0000" as L64() does.
func normalizeL64(s string) (string, bool) {
	g := strings.Split(s, ":")
	if len(g) != 4 {
		return "", false
	}
	var v [4]uint64
	for i, x := range g {
		n, err := strconv.ParseUint(x, 16, 16)
		if err != nil {
			return "", false
		}
		v[i] = n
	}
	return fmt.Sprintf("%04x:%04x:%04x:%04x", v[0], v[1], v[2], v[3]), true
}

// collectDNS finishes the poll, asks named for the final set and measures the run.
func (t *Topology) collectDNS(p *dnsPoll, mnEvents []timeline.Event, enterNS, leaveNS int64) *DNSMeasure {
	var changes []DNSChange
	errs := 0
	if p != nil {
		changes, errs = p.finish()
	}
	m := measureDNS(mnEvents, changes, errs, enterNS, leaveNS)
	if r, err := t.QueryDNS(DNSMNName, dns.TypeL64); err == nil {
		m.FinalL64 = l64Set(r)
	}
	return m
}

// DNSReport is the report.md section of a run with DNS rendezvous, read from rep-N/run.json.
func DNSReport(out string, reps int) string {
	var b strings.Builder
	b.WriteString("\n## DNS rendezvous\n\n")
	fmt.Fprintf(&b, "A real BIND9 named in namespace `dns` (on R1, %s) serves %s; the MN's ilnpd publishes "+
		"%s's NID and L64 records with TSIG-signed RFC 2136 updates (TTL 0), the CN's ilnpd resolves the "+
		"name there (no hosts file) and iperf3 connects to `%s`. Update latency after the move: from the "+
		"lab's action that made the MN's set {L3} (soft handoff: taking mn-r2 down; hard: bringing mn-r3 up) "+
		"to the MN's first accepted update publishing only L3 (MN timeline; \"its exchange\" is that "+
		"UPDATE's own round trip), and to named first answering {L3} (polled every %.0f ms).\n\n",
		netip.AddrPortFrom(DNSServerAddr, 53), DNSZone, DNSMNName, DNSMNName, float64(dnsPollGap)/1e6)
	b.WriteString("| rep | updates (ok) | enter -> L3 published | {L3} published | its exchange | named answers {L3} | final L64 |\n|---|---|---|---|---|---|---|\n")
	f := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f ms", *v)
	}
	for rep := 1; rep <= reps; rep++ {
		var meta RunMeta
		raw, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("rep-%d", rep), "run.json"))
		if err != nil || json.Unmarshal(raw, &meta) != nil || meta.DNS == nil {
			fmt.Fprintf(&b, "| %d | - | - | - | - | - | - |\n", rep)
			continue
		}
		d := meta.DNS
		after := ""
		if d.L3OnlyAfter != "" {
			after = " after " + d.L3OnlyAfter
		}
		fmt.Fprintf(&b, "| %d | %d (%d) | %s | %s%s | %s | %s%s | %s |\n", rep, d.Updates, d.UpdatesOK, f(d.EnterUpdateMs),
			f(d.L3OnlyUpdateMs), after, f(d.L3OnlyExchangeMs), f(d.L3OnlyVisibleMs), after, strings.Join(d.FinalL64, " "))
	}
	return b.String()
}
