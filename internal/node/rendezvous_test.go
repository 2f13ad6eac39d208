package node_test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"ilnp/internal/encap"
	"ilnp/internal/namedtest"
	"ilnp/internal/nstest"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// DNS rendezvous (issue 6) with a real BIND9 named in its own namespace D attached to the
// router, serving ilnp.test with a TSIG key that may update mn.ilnp.test:
//
//	CN cn0 ---- r-cn  R  r-mn1 ---- mn1 MN      (radvd on r-mn1 and r-mn2)
//	                     r-mn2 ---- mn2
//	D  d0  ---- r-dns                           named on [2001:db8:53::53]:53
//	CR cr0 ---- r-cr                            a second correspondent (optional)
//
// The MN publishes its NID and locators; the correspondents' stub resolvers find them (no
// hosts entry for the MN), and find plain IPv6 names (www.ilnp.test, an AAAA only) too.
const (
	rdvZone     = "ilnp.test."
	rdvName     = "mn.ilnp.test."
	rdvWWWName  = "www.ilnp.test"
	rdvIperfNew = 5202 // the new connection opened by name after the move
	rdvIperfOld = 5201 // the session running through the move
	rdvIperfCR  = 5203 // a second connection from CR, after the move, while its session is open
)

var (
	l5        = mustL64("2001:db8:5::") // CR's network, static
	crNIDText = "0214:4fff:fe20:cc02"
	crNID     = mustNID(crNIDText)
	rdvServer = netip.MustParseAddr("2001:db8:53::53")
	// plain IPv6 host behind www.ilnp.test (an address of D, not an ILNP node)
	rdvWWW = netip.MustParseAddr("2001:db8:53::80")
)

type rdvNet struct {
	*testNet
	D     *nstest.NS
	named *namedtest.Server
	CR    *nstest.NS // nil unless asked for
	cr    *daemon
}

// rdvOptions vary the topology.
type rdvOptions struct {
	keyText  string // the TSIG key file the MN gets; the server's own key when empty
	cnHosts  string // the CN's hosts file; none when empty
	cnLookup string // the CN's dns-lookup-server; none (dns-upstream is used) when empty
	withCR   bool   // add the second correspondent CR (DNS only, like the CN)
	mnIPv4   bool   // ipv4-locators on at the MN (issue 14)
}

// newRdvNet builds the topology, named and the daemons.
func newRdvNet(t *testing.T, opt rdvOptions) *rdvNet {
	keyText, cnHosts, withCR := opt.keyText, opt.cnHosts, opt.withCR
	t.Helper()
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "radvd", "iperf3", "tcpdump", "tshark", "ethtool", "getent", "named", "dig")
	n := &rdvNet{testNet: &testNet{t: t, dir: t.TempDir(), bin: binaries(t)}}
	n.buildCore("rv")
	n.D = nstest.New(t, "rvd")
	n.D.Run("sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0",
		"net.ipv6.conf.default.accept_ra=0")
	nstest.Link(t, n.R, "r-dns", n.D, "d0")
	n.R.Run("ip", "addr", "add", "2001:db8:53::1/64", "dev", "r-dns")
	n.D.Run("ip", "addr", "add", rdvServer.String()+"/64", "dev", "d0", "nodad")
	n.D.Run("ip", "addr", "add", rdvWWW.String()+"/64", "dev", "d0", "nodad")
	n.D.Run("ip", "route", "add", "default", "via", "2001:db8:53::1", "dev", "d0")
	if withCR {
		n.CR = nstest.New(t, "rvcr")
		n.CR.Run("sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0",
			"net.ipv6.conf.default.accept_ra=0")
		nstest.Link(t, n.CR, "cr0", n.R, "r-cr")
		n.CR.Run("ethtool", "-K", "cr0", "tso", "off")
		n.CR.Run("ip", "addr", "add", ilv(l5, crNID).String()+"/64", "dev", "cr0", "nodad")
		n.CR.Run("ip", "route", "add", "default", "via", "2001:db8:5::1", "dev", "cr0")
		n.R.Run("ip", "addr", "add", "2001:db8:5::1/64", "dev", "r-cr")
	}

	n.named = namedtest.Start(t, n.D, namedtest.Options{
		Zone:        rdvZone,
		Listen:      rdvServer,
		UpdateNames: []string{rdvName},
		Records:     []string{"www IN AAAA " + rdvWWW.String()},
		SOAMinimum:  1, // a negative answer for mn (before it publishes) is cached 1 s at most
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- named log (tail) ---\n%s", lastLines(n.named.Log(), 30))
		}
	})
	n.startRadvd()

	keyFile := n.named.KeyFile
	if keyText != "" {
		keyFile = filepath.Join(n.dir, "mn.key")
		writeFile(t, keyFile, keyText)
	}
	server := netip.AddrPortFrom(rdvServer, 53).String()
	mnConf := fmt.Sprintf(`dns-listen [::1]:53
dns-publish-name %s
dns-publish-zone %s
dns-publish-server %s
dns-publish-key %s
dns-publish-ttl 0s
`, rdvName, rdvZone, server, keyFile)
	if opt.mnIPv4 {
		mnConf += "ipv4-locators on\n"
	}
	n.mn = n.startRdvDaemon("mn", n.MN, mnNIDText, mnConf, "mn1", "mn2")
	cnConf := fmt.Sprintf("dns-listen [::1]:53\ndns-upstream %s\n", server)
	if opt.cnLookup != "" {
		cnConf += "dns-lookup-server " + opt.cnLookup + "\n"
	}
	if cnHosts != "" {
		hosts := filepath.Join(n.dir, "cn-hosts")
		if _, err := wire.ParseHosts(strings.NewReader(cnHosts), hosts); err != nil {
			t.Fatalf("test wrote a bad hosts file: %v", err)
		}
		writeFile(t, hosts, cnHosts)
		cnConf += "hosts " + hosts + "\n"
	}
	n.cn = n.startRdvDaemon("cn", n.CN, cnNIDText, cnConf, "cn0")
	if withCR {
		n.cr = n.startRdvDaemon("cr", n.CR, crNIDText, fmt.Sprintf("dns-listen [::1]:53\ndns-upstream %s\n", server), "cr0")
	}
	n.waitFor(20*time.Second, "MN locator L2 active", func() (bool, string) {
		rows, err := n.mn.locators()
		return err == nil && stateOf(rows, l2) == "active", fmt.Sprint(rows, err)
	})
	n.waitFor(10*time.Second, "CN static locator L1 active", func() (bool, string) {
		rows, err := n.cn.locators()
		return err == nil && stateOf(rows, l1) == "active", fmt.Sprint(rows, err)
	})
	return n
}

// startRdvDaemon is startDaemon with the DNS keys instead of the shared hosts file, and no
// `ilnpd -check`. Its cleanup gives ilnpd 10 s to stop and logs an exit error.
func (n *rdvNet) startRdvDaemon(name string, ns *nstest.NS, nid, extra string, ifaces ...string) *daemon {
	t := n.t
	t.Helper()
	state := n.stateDir(name)
	conf := n.writeConfig(name, fmt.Sprintf(`# rendezvous test %s
node %s
interfaces %s
nid %s
state-dir %s
events %s
log-level debug
%s`, t.Name(), name, strings.Join(ifaces, " "), nid, state, filepath.Join(n.dir, name+"-events.jsonl"), extra))
	d := n.runDaemon(name, ns, state, conf)
	// Registered last, so it runs before runDaemon's own stop (5 s) and log dump.
	t.Cleanup(func() {
		if err := d.stop(10 * time.Second); err != nil && !strings.Contains(err.Error(), "signal") {
			t.Logf("ilnpd %s: %v", name, err)
		}
	})
	return d
}

// answer asks named (from inside D, no stub or cache in between) for the MN's RRset of type
// qtype.
func (n *rdvNet) answer(qtype uint16) ([]dns.RR, error) {
	var rrs []dns.RR
	err := n.D.Do(func() error {
		m := new(dns.Msg)
		m.SetQuestion(rdvName, qtype)
		m.RecursionDesired = false
		c := &dns.Client{Timeout: time.Second}
		r, _, err := c.Exchange(m, netip.AddrPortFrom(rdvServer, 53).String())
		if err != nil {
			return err
		}
		rrs = r.Answer
		return nil
	})
	return rrs, err
}

// l64s is the MN's L64 RRset on the server, sorted.
func (n *rdvNet) l64s() ([]wire.L64, error) {
	rrs, err := n.answer(dns.TypeL64)
	var out []wire.L64
	for _, rr := range rrs {
		if l, ok := rr.(*dns.L64); ok {
			out = append(out, wire.L64(l.Locator64))
		}
	}
	slices.Sort(out)
	return out, err
}

// l32s is the MN's L32 RRset on the server, as "PREF ADDRESS" strings, sorted.
func (n *rdvNet) l32s() ([]string, error) {
	rrs, err := n.answer(dns.TypeL32)
	var out []string
	for _, rr := range rrs {
		if l, ok := rr.(*dns.L32); ok {
			out = append(out, fmt.Sprintf("%d %s", l.Preference, l.Locator32))
		}
	}
	slices.Sort(out)
	return out, err
}

// waitL64s polls named until the L64 set is exactly want and returns when it first was.
func (n *rdvNet) waitL64s(limit time.Duration, want ...wire.L64) (time.Time, error) {
	slices.Sort(want)
	deadline := time.Now().Add(limit)
	var last []wire.L64
	var err error
	for time.Now().Before(deadline) {
		last, err = n.l64s()
		if err == nil && slices.Equal(last, want) {
			return time.Now(), nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("L64 set on the server is %v (err %v) after %v, want %v", last, err, limit, want)
}

func (n *rdvNet) dig(args ...string) string {
	n.t.Helper()
	out, err := n.named.Dig(nil, args...)
	if err != nil {
		n.t.Fatalf("dig %v: %v", args, err)
	}
	return out
}

// TestDNSRendezvous: the MN's records appear on start and follow a move; the CN opens a new TCP
// connection by name after the move and reaches the MN on its new locator over ILNP; a session
// CR opened by name before the move keeps working through it (Locator Updates); a name without
// NID records is plain IPv6.
//
// With ipv4-locators on at the MN (issue 14), an IPv4 address it gets is published as an L32
// record and removed with the address.
func TestDNSRendezvous(t *testing.T) {
	n := newRdvNet(t, rdvOptions{withCR: true, mnIPv4: true})

	// Records on start.
	if _, err := n.waitL64s(10*time.Second, l2); err != nil {
		t.Fatal(err)
	}
	out := n.dig("+noall", "+answer", rdvName, "NID")
	out += n.dig("+noall", "+answer", rdvName, "L64")
	t.Logf("dig NID/L64 %s @%s after ilnpd started on the MN:\n%s", rdvName, rdvServer, out)
	// dig prints the RFC 6742 fields without leading zeros.
	if !strings.Contains(out, "0\tIN\tNID\t10 214:4fff:fe20:ee64") || !strings.Contains(out, "0\tIN\tL64\t0 2001:db8:2:0") {
		t.Fatalf("dig does not show NID 10 %s and L64 0 2001:db8:2:0, TTL 0:\n%s", mnNIDText, out)
	}

	t.Run("plain IPv6 name", func(t *testing.T) {
		addr, err := resolve(n.CN, rdvWWWName)
		if err != nil || addr != rdvWWW {
			t.Fatalf("CN resolves %s to %v (%v), want the AAAA %v passed through", rdvWWWName, addr, err, rdvWWW)
		}
		srv := n.D.Start(nil, "iperf3", "-s", "-1", "-B", rdvWWW.String(), "-p", "5300")
		n.waitFor(5*time.Second, "iperf3 on www", func() (bool, string) {
			out, _ := n.D.Try("ss", "-Hltn", "sport = :5300")
			return strings.Contains(out, ":5300"), out
		})
		if out, err := n.CN.Try("iperf3", "-c", rdvWWWName, "-p", "5300", "-t", "1", "-b", "10M",
			"--connect-timeout", "3000"); err != nil {
			t.Fatalf("iperf3 to %s (plain IPv6): %v\n%s", rdvWWWName, err, out)
		}
		_ = srv.Wait()
		if rows, err := n.cn.sessions(); err != nil || len(rows) != 0 {
			t.Errorf("CN has ILNP sessions after a plain IPv6 flow: %+v %v", rows, err)
		}
		if st, err := n.cn.stats(); err != nil || st["dns_forwarded"] < 1 || st["dns_ilnp_answers"] != 0 ||
			st["dns_ilnp_lookup_failures"] != 0 {
			t.Errorf("CN stub counters %v (%v): want the AAAA forwarded, no ILNP answer, no failed lookup", st, err)
		}
	})

	// A session running through the move: CR, by name (found through DNS).
	if addr, err := resolve(n.CR, strings.TrimSuffix(rdvName, ".")); err != nil || addr != ilv(l2, mnNID) {
		t.Fatalf("CR resolves %s to %v (%v), want %v", rdvName, addr, err, ilv(l2, mnNID))
	}
	oldSrv, oldServer := n.iperfServer(rdvIperfOld)
	oldClient := n.CR.Start(nil, "iperf3", "-c", strings.TrimSuffix(rdvName, "."), "-p", fmt.Sprint(rdvIperfOld),
		"-t", "9", "-b", "20M", "--connect-timeout", "5000")
	start := time.Now()
	capNew := n.capture("r-mn2", fmt.Sprintf(
		"(ip6[6] == 60 and ip6[40] == 6 and (ip6[48:2] == %[1]d or ip6[50:2] == %[1]d)) or tcp port %[1]d", rdvIperfNew))

	// The move: enter L3 (new RA), then leave L2.
	sleepUntil(start.Add(2 * time.Second))
	enter := time.Now()
	n.MN.Run("ip", "link", "set", "mn2", "up")
	inBoth, err := n.waitL64s(10*time.Second, l2, l3)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("entering L3: L64 set {L2, L3} on the server %v after mn2 came up (RS/RA, address, update)",
		inBoth.Sub(enter).Round(time.Millisecond))
	sleepUntil(start.Add(4 * time.Second))
	leave := time.Now()
	n.MN.Run("ip", "link", "set", "mn1", "down")
	onlyNew, err := n.waitL64s(5*time.Second, l3)
	if err != nil {
		t.Fatal(err)
	}
	latency := onlyNew.Sub(leave)
	t.Logf("MEASURED: leaving L2 (mn1 down) -> server's L64 set is {L3} only: %v", latency.Round(100*time.Microsecond))
	out = n.dig("+noall", "+answer", rdvName, "NID") + n.dig("+noall", "+answer", rdvName, "L64")
	t.Logf("dig NID/L64 %s after the move:\n%s", rdvName, out)
	if strings.Contains(out, "2001:db8:2:0") || !strings.Contains(out, "L64\t0 2001:db8:3:0") {
		t.Errorf("after the move dig still shows L2 or not L3:\n%s", out)
	}
	// Bound: the update leaves as soon as the link-down event is handled and named commits it
	// at once; 1 s leaves room for a loaded 2-core machine.
	if latency > time.Second {
		t.Errorf("L64 set followed the move after %v, want < 1 s", latency)
	}

	t.Run("new connection by name reaches the new locator over ILNP", func(t *testing.T) {
		addr, err := resolve(n.CN, strings.TrimSuffix(rdvName, "."))
		if err != nil || addr != ilv(l3, mnNID) {
			t.Fatalf("after the move CN resolves %s to %v (%v), want %v", rdvName, addr, err, ilv(l3, mnNID))
		}
		srv, srvFile := n.iperfServer(rdvIperfNew)
		cl, _ := n.iperfClient(strings.TrimSuffix(rdvName, "."), rdvIperfNew, "-t", "2", "-b", "10M")
		if err := cl.Wait(); err != nil {
			t.Fatalf("iperf3 -c %s (new connection after the move): %v", rdvName, err)
		}
		rep := n.serverReport(srv, srvFile)
		if rep.End.SumReceived == nil || rep.End.SumReceived.Bytes < 1_000_000 {
			t.Errorf("new connection: server received %+v, want > 1 MB of a 2 s 10 Mbit/s flow", rep.End.SumReceived)
		}
		capNew.Stop()
		pkts := rdvPackets(t, capNew.File, rdvIperfNew)
		toMN, withNonce := 0, 0
		for _, p := range pkts {
			if p.dst == ilv(l3, mnNID).String() {
				toMN++
			}
			if p.nonce != "" {
				withNonce++
			}
			if p.dst == ilv(l2, mnNID).String() || p.src == ilv(l2, mnNID).String() {
				t.Errorf("packet of the new connection uses the old locator: %+v", p)
				break
			}
		}
		if toMN == 0 || withNonce != len(pkts) {
			if keep := os.Getenv("RDV_KEEP"); keep != "" {
				_ = exec.Command("cp", "-a", n.dir, keep).Run()
			}
			evs, _ := n.cn.events()
			t.Logf("CN events:\n%s", formatEvents(evs, 0))
			t.Errorf("on r-mn2: %d packets of port %d, %d to %s, %d with the ILNP nonce option; want all with a nonce",
				len(pkts), rdvIperfNew, toMN, ilv(l3, mnNID), withNonce)
		}
		if s := n.cn.session(t, mnNID); s.SessionRemote != ilv(l3, mnNID).String() || s.RemoteNonce == "" {
			t.Errorf("CN's session with the MN: view %s (want %s), remote nonce %q", s.SessionRemote, ilv(l3, mnNID), s.RemoteNonce)
		}
		t.Logf("new connection: %d packets on r-mn2, all with ipv6.opt.ilnp_nonce, CN -> %s", len(pkts), ilv(l3, mnNID))
	})

	// CR already has a session with the MN: a new connection by name joins it (the stub
	// answers the session's view) and the datapath carries it to L3 with the session's nonces.
	t.Run("new connection from a correspondent with a session joins it", func(t *testing.T) {
		addr, err := resolve(n.CR, strings.TrimSuffix(rdvName, "."))
		if err != nil || addr != ilv(l2, mnNID) {
			t.Fatalf("CR (session open) resolves %s to %v (%v), want its session's view %v", rdvName, addr, err, ilv(l2, mnNID))
		}
		c := n.capture("r-mn2", fmt.Sprintf(
			"(ip6[6] == 60 and ip6[40] == 6 and (ip6[48:2] == %[1]d or ip6[50:2] == %[1]d)) or tcp port %[1]d", rdvIperfCR))
		srv, srvFile := n.iperfServer(rdvIperfCR)
		if out, err := n.CR.Try("iperf3", "-c", strings.TrimSuffix(rdvName, "."), "-p", fmt.Sprint(rdvIperfCR),
			"-t", "2", "-b", "10M", "--connect-timeout", "3000"); err != nil {
			t.Fatalf("iperf3 from CR after the move: %v\n%s", err, out)
		}
		if rep := n.serverReport(srv, srvFile); rep.End.SumReceived == nil || rep.End.SumReceived.Bytes < 1_000_000 {
			t.Errorf("CR's new connection: server received %+v, want > 1 MB", rep.End.SumReceived)
		}
		c.Stop()
		pkts := rdvPackets(t, c.File, rdvIperfCR)
		bad := 0
		for _, p := range pkts {
			if p.nonce == "" || (p.dst != ilv(l3, mnNID).String() && p.src != ilv(l3, mnNID).String()) {
				bad++
			}
		}
		if len(pkts) == 0 || bad != 0 {
			t.Errorf("on r-mn2: %d packets of port %d, %d without the nonce or not to/from %s", len(pkts), rdvIperfCR, bad, ilv(l3, mnNID))
		}
		t.Logf("CR's second connection: %d packets on r-mn2, all ILNP (nonce) to/from %s", len(pkts), ilv(l3, mnNID))
	})

	t.Run("running session survives the move", func(t *testing.T) {
		if err := oldClient.Wait(); err != nil {
			t.Fatalf("iperf3 client of the running session (CR): %v", err)
		}
		rep := n.serverReport(oldSrv, oldServer)
		leftS := leave.Sub(start).Seconds()
		var after uint64
		for _, iv := range rep.Intervals {
			if iv.Sum.Start >= leftS+1 {
				after += iv.Sum.Bytes
			}
		}
		if after < 1_000_000 {
			t.Errorf("running session: %d bytes received from 1 s after leaving L2 on, want > 1 MB", after)
		}
		if s := n.cr.session(t, mnNID); s.ActiveRemote != l3.String() || s.SessionRemote != ilv(l2, mnNID).String() {
			t.Errorf("CR's session: active remote %s (want L3 %s, learned by LU), session view %s (want the L2 address)",
				s.ActiveRemote, l3, s.SessionRemote)
		}
	})

	t.Run("stats", func(t *testing.T) {
		st, err := n.mn.stats()
		if err != nil {
			t.Fatal(err)
		}
		// start {L2}, entering {L3, L2}, leaving {L3}: at least three updates applied. A
		// transient timeout (retried) can happen on a loaded machine; any other cause is a bug.
		transient := st["dns_update_errors_timeout"] + st["dns_update_errors_unreachable"]
		if st["dns_updates_ok"] < 3 || st["dns_update_errors"] != transient || st["dns_publishes"] < 3 {
			t.Errorf("MN stats: updates ok %d, errors %d (%d transient), publishes %d; want >= 3, only transient, >= 3",
				st["dns_updates_ok"], st["dns_update_errors"], transient, st["dns_publishes"])
		}
		if transient > 0 {
			t.Logf("MN: %d transient DNS exchange failures, retried", transient)
		}
		evs, err := n.mn.events()
		if err != nil {
			t.Fatal(err)
		}
		final := "ok nid=" + mnNIDText + " l64=2001:0db8:0003:0000/0"
		found := false
		for _, e := range evs {
			if e.Kind == timeline.DNSUpdateResult && strings.HasPrefix(e.Detail, final) {
				found = true
				t.Logf("MN timeline: the update to {L3} took %v (one UPDATE exchange with named)",
					time.Duration(e.Duration).Round(10*time.Microsecond))
			}
		}
		if !found {
			t.Errorf("no dns_update_result %q event:\n%s", final, formatEvents(evs, 0))
		}
	})

	t.Run("IPv4 locator published as an L32 record", func(t *testing.T) {
		if got, err := n.l32s(); err != nil || len(got) != 0 {
			t.Fatalf("L32 records before the MN had an IPv4 address: %v (%v)", got, err)
		}
		// A private address first (a DHCP client's work: address and router at once; ilnpd
		// waits for the route): a locator, but not published (behind a NAT, it would send
		// correspondents elsewhere to another host). Then a public one beside it: published,
		// alone, though the private one was in the locator set first.
		n.MN.Run("sh", "-c", "ip addr add 10.9.0.2/24 dev mn2 && ip route add default via 10.9.0.1 dev mn2")
		private, err := encap.L32(netip.MustParseAddrPort("10.9.0.2:49191"))
		if err != nil {
			t.Fatal(err)
		}
		n.waitFor(5*time.Second, "the private IPv4 address a locator of the MN", func() (bool, string) {
			rows, err := n.mn.locators()
			st := stateOf(rows, private)
			return err == nil && (st == "active" || st == "valid"), fmt.Sprint(rows, err)
		})
		n.MN.Run("ip", "addr", "add", "192.0.2.2/24", "dev", "mn2")
		var got []string
		n.waitFor(5*time.Second, "an L32 record for 192.0.2.2, none for 10.9.0.2", func() (bool, string) {
			got, err = n.l32s()
			return err == nil && len(got) == 1 && strings.HasSuffix(got[0], " 192.0.2.2"), fmt.Sprint(got, err)
		})
		t.Logf("L32 RRset with the IPv4 locator: %v; dig:\n%s", got, n.dig("+noall", "+answer", rdvName, "L32"))
		n.MN.Run("ip", "addr", "del", "192.0.2.2/24", "dev", "mn2")
		n.waitFor(5*time.Second, "the L32 record gone with the address", func() (bool, string) {
			got, err = n.l32s()
			return err == nil && len(got) == 0, fmt.Sprint(got, err)
		})
		if _, err := n.waitL64s(5*time.Second, l3); err != nil {
			t.Error(err)
		}
		n.MN.Run("sh", "-c", "ip route del default via 10.9.0.1 dev mn2 && ip addr del 10.9.0.2/24 dev mn2")
	})

	// Shutdown keeps the records: a restarting MN stays reachable by name.
	if err := n.mn.stop(10 * time.Second); err != nil {
		t.Fatalf("MN ilnpd stop: %v", err)
	}
	if got, err := n.l64s(); err != nil || !slices.Equal(got, []wire.L64{l3}) {
		t.Errorf("after the MN's ilnpd stopped the L64 set is %v (%v), want {L3} kept", got, err)
	}
}

// TestDNSRendezvousWrongKey: the MN holds a key with the right name and a wrong secret. The
// server refuses every update (BADSIG); ilnpd logs the cause, counts it, tries again on the
// next locator change, and the session with the CN (found through its hosts file) keeps
// working across a move. The CN's NID/L64 lookups go to a server that is not there: a name
// then falls back to plain IPv6 (the AAAA through dns-upstream), counted.
func TestDNSRendezvousWrongKey(t *testing.T) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("key %q {\n\talgorithm hmac-sha256;\n\tsecret %q;\n};\n",
		"mn-key."+rdvZone, base64.StdEncoding.EncodeToString(secret))
	hosts := fmt.Sprintf("%s|10,%s mn\n", l2, mnNID)
	// The CN asks a lookup server that does not exist for NID/L64 records: those lookups fail
	// and names fall back to plain IPv6 through dns-upstream.
	n := newRdvNet(t, rdvOptions{keyText: key, cnHosts: hosts, cnLookup: "[2001:db8:53::54]:53"})

	n.waitFor(10*time.Second, "a refused update counted", func() (bool, string) {
		st, err := n.mn.stats()
		return err == nil && st["dns_update_errors_tsig-badsig"] >= 1, fmt.Sprint(st, err)
	})
	// Plain IPv6 fallback when the NID/L64 lookup fails.
	if addr, err := resolve(n.CN, rdvWWWName); err != nil || addr != rdvWWW {
		t.Errorf("with the lookup server down, CN resolves %s to %v (%v), want the AAAA %v", rdvWWWName, addr, err, rdvWWW)
	}
	if st, err := n.cn.stats(); err != nil || st["dns_ilnp_lookup_failures"] < 1 || st["dns_forwarded"] < 1 {
		t.Errorf("CN stub counters %v (%v): want >= 1 failed NID/L64 lookup and the AAAA forwarded", st, err)
	}

	srv, srvFile := n.iperfServer(rdvIperfOld)
	cl, _ := n.iperfClient("mn", rdvIperfOld, "-t", "5", "-b", "20M")
	start := time.Now()
	sleepUntil(start.Add(time.Second))
	n.MN.Run("ip", "link", "set", "mn2", "up")
	n.waitFor(10*time.Second, "MN locator L3 active", func() (bool, string) {
		rows, err := n.mn.locators()
		return err == nil && stateOf(rows, l3) == "active", fmt.Sprint(rows, err)
	})
	n.MN.Run("ip", "link", "set", "mn1", "down")
	leftS := time.Since(start).Seconds()
	if err := cl.Wait(); err != nil {
		t.Fatalf("iperf3 across the move with publishing refused: %v", err)
	}
	rep := n.serverReport(srv, srvFile)
	var after uint64
	for _, iv := range rep.Intervals {
		if iv.Sum.Start >= leftS+1 {
			after += iv.Sum.Bytes
		}
	}
	if after < 500_000 {
		t.Errorf("session: %d bytes received from 1 s after the move on, want > 0.5 MB", after)
	}

	st, err := n.mn.stats()
	if err != nil {
		t.Fatal(err)
	}
	// Refused on start and again for the locator changes of the move; never applied. An update
	// the server answered late is retried, not refused (a CI run beside a busy loop saw the
	// first one time out): timeouts are allowed, any other error is not.
	if st["dns_update_errors_tsig-badsig"] < 2 || st["dns_updates_ok"] != 0 ||
		st["dns_update_errors"] != st["dns_update_errors_tsig-badsig"]+st["dns_update_errors_timeout"] {
		t.Errorf("MN stats: %v; want >= 2 tsig-badsig errors, no other but timeouts, none ok", st)
	}
	if got, err := n.l64s(); err != nil || len(got) != 0 {
		t.Errorf("L64 set on the server %v (%v), want none: every update was refused", got, err)
	}
	log, _ := os.ReadFile(n.mn.log)
	if !strings.Contains(string(log), "DNS update refused") || !strings.Contains(string(log), "tsig-badsig") {
		t.Errorf("MN log does not name the cause (tsig-badsig):\n%s", tailFile(n.mn.log, 30))
	}
	t.Logf("wrong key: %d updates refused (tsig-badsig), session carried %d bytes after the move",
		st["dns_update_errors_tsig-badsig"], after)
}

type rdvPacket struct{ src, dst, nonce string }

// rdvPackets decodes a capture with tshark: the packets of TCP port port, with the ILNP nonce
// option's value when present.
func rdvPackets(t *testing.T, file string, port int) []rdvPacket {
	t.Helper()
	out, err := exec.Command("tshark", "-r", file, "-Y", fmt.Sprintf("tcp.port == %d", port), "-T", "fields",
		"-E", "separator=|", "-e", "ipv6.src", "-e", "ipv6.dst", "-e", "ipv6.opt.ilnp_nonce").Output()
	if err != nil {
		t.Fatalf("tshark -r %s: %v", file, err)
	}
	var pkts []rdvPacket
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 3 {
			continue
		}
		pkts = append(pkts, rdvPacket{f[0], f[1], f[2]})
	}
	return pkts
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
