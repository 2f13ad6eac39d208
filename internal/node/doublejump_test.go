package node_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ilnp/internal/namedtest"
	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

// The double jump (issue 13, thesis ch. 3 and 7): both ends move at once. Topology, one
// router R with radvd on all four access networks, named in D:
//
//	CN cn1 ---- r-cn1  R  r-mn1 ---- mn1 MN     CN: L21 then L22; MN: L2 then L3
//	   cn2 ---- r-cn2     r-mn2 ---- mn2
//	D  d0  ---- r-dns                           named, both names updatable
//
// Both publish their NID/L64 records; the CN opens the TCP session to the MN by name (so the
// CN knows the name to re-resolve). Soft: both enter their new network at the same instant
// (the crossing LUs reach the old locators, which still receive) and leave the old one later.
// Hard: both leave the old network and enter the new one at the same instant: each LU goes to
// a locator already gone, and the session survives only because the CN re-resolves the MN
// through DNS after its first LU timeout.
var (
	l21        = mustL64("2001:db8:21::")
	l22        = mustL64("2001:db8:22::")
	djCNName   = "cn.ilnp.test."
	djFlowSecs = 10
	djMoveAt   = 3 * time.Second
	djLeaveAt  = 5 * time.Second // soft only
)

func newDoubleJumpNet(t *testing.T, handoff string) *rdvNet {
	t.Helper()
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "radvd", "iperf3", "ethtool", "ss", "getent", "named")
	n := &rdvNet{testNet: &testNet{t: t, dir: t.TempDir(), bin: binaries(t)}}
	n.CN = nstest.New(t, "djcn")
	n.R = nstest.New(t, "djr")
	n.MN = nstest.New(t, "djmn")
	n.D = nstest.New(t, "djd")
	n.R.Run("sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0",
		"net.ipv6.conf.all.forwarding=1", "net.ipv6.conf.default.forwarding=1")
	n.D.Run("sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0",
		"net.ipv6.conf.default.accept_ra=0")
	for _, ns := range []*nstest.NS{n.CN, n.MN} {
		ns.Run("sysctl", "-qw", "net.ipv6.conf.default.accept_ra=1", "net.ipv6.conf.default.autoconf=0",
			"net.ipv6.conf.default.optimistic_dad=1", "net.ipv6.conf.default.use_optimistic=1")
	}
	links := []struct {
		host         *nstest.NS
		hostIf, rtIf string
		prefix       string
	}{
		{n.CN, "cn1", "r-cn1", "2001:db8:21::"}, {n.CN, "cn2", "r-cn2", "2001:db8:22::"},
		{n.MN, "mn1", "r-mn1", "2001:db8:2::"}, {n.MN, "mn2", "r-mn2", "2001:db8:3::"},
	}
	var radvd strings.Builder
	for _, l := range links {
		nstest.Link(t, l.host, l.hostIf, n.R, l.rtIf)
		l.host.Run("ethtool", "-K", l.hostIf, "tso", "off")
		n.R.Run("ip", "addr", "add", l.prefix+"1/64", "dev", l.rtIf)
		fmt.Fprintf(&radvd, `interface %s {
	AdvSendAdvert on;
	AdvIntervalOpt on;
	MinRtrAdvInterval 0.5;
	MaxRtrAdvInterval 1;
	AdvDefaultLifetime 9;
	prefix %s/64 {
		AdvOnLink on;
		AdvAutonomous on;
		AdvValidLifetime 60;
		AdvPreferredLifetime 30;
	};
};
`, l.rtIf, l.prefix)
	}
	n.CN.Run("ip", "link", "set", "cn2", "down")
	n.MN.Run("ip", "link", "set", "mn2", "down")
	nstest.Link(t, n.R, "r-dns", n.D, "d0")
	n.R.Run("ip", "addr", "add", "2001:db8:53::1/64", "dev", "r-dns")
	n.D.Run("ip", "addr", "add", rdvServer.String()+"/64", "dev", "d0", "nodad")
	n.D.Run("ip", "route", "add", "default", "via", "2001:db8:53::1", "dev", "d0")
	n.named = namedtest.Start(t, n.D, namedtest.Options{
		Zone: rdvZone, Listen: rdvServer, UpdateNames: []string{rdvName, djCNName}, SOAMinimum: 1,
	})
	conf := filepath.Join(n.dir, "radvd.conf")
	writeFile(t, conf, radvd.String())
	logf, err := os.Create(filepath.Join(n.dir, "radvd.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	n.radvd = startProc(t, n.R, logf, "radvd", "-n", "-m", "stderr", "-C", conf, "-p", filepath.Join(n.dir, "radvd.pid"))

	server := netip.AddrPortFrom(rdvServer, 53).String()
	daemonConf := func(name string) string {
		return fmt.Sprintf(`handoff %s
dns-listen [::1]:53
dns-upstream %s
dns-publish-name %s
dns-publish-zone %s
dns-publish-server %s
dns-publish-key %s
dns-publish-ttl 0s
`, handoff, server, name, rdvZone, server, n.named.KeyFile)
	}
	n.mn = n.startRdvDaemon("mn", n.MN, mnNIDText, daemonConf(rdvName), "mn1", "mn2")
	n.cn = n.startRdvDaemon("cn", n.CN, cnNIDText, daemonConf(djCNName), "cn1", "cn2")
	for _, w := range []struct {
		d   *daemon
		loc wire.L64
	}{{n.mn, l2}, {n.cn, l21}} {
		n.waitFor(20*time.Second, fmt.Sprintf("%s locator %v active", w.d.name, w.loc), func() (bool, string) {
			rows, err := w.d.locators()
			return err == nil && stateOf(rows, w.loc) == "active", fmt.Sprint(rows, err)
		})
	}
	if _, err := n.waitL64s(10*time.Second, l2); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDoubleJump(t *testing.T) {
	for _, mode := range []string{"soft", "hard"} {
		t.Run(mode, func(t *testing.T) { testDoubleJump(t, mode) })
	}
}

func testDoubleJump(t *testing.T, mode string) {
	n := newDoubleJumpNet(t, mode)
	mnName := strings.TrimSuffix(rdvName, ".")
	n.waitFor(10*time.Second, "CN resolves mn through DNS", func() (bool, string) {
		addr, err := resolve(n.CN, mnName)
		return err == nil && addr == ilv(l2, mnNID), fmt.Sprint(addr, err)
	})
	srv, srvFile := n.iperfServer(5201)
	cli, cliFile := n.iperfClient(mnName, 5201, "-t", fmt.Sprint(djFlowSecs), "-b", "10M", "-C", "cubic")
	start := time.Now()

	// The jump: both ends change locators at the same instant (well within one RTT).
	sleepUntil(start.Add(djMoveAt))
	var wg sync.WaitGroup
	for _, h := range []struct {
		ns       *nstest.NS
		old, new string
	}{{n.MN, "mn1", "mn2"}, {n.CN, "cn1", "cn2"}} {
		wg.Go(func() {
			if mode == "hard" {
				h.ns.Run("ip", "link", "set", h.old, "down")
			}
			h.ns.Run("ip", "link", "set", h.new, "up")
		})
	}
	wg.Wait()
	if mode == "soft" {
		sleepUntil(start.Add(djLeaveAt))
		n.MN.Run("ip", "link", "set", "mn1", "down")
		n.CN.Run("ip", "link", "set", "cn1", "down")
	}

	var stalled atomic.Bool
	kill := time.AfterFunc(time.Until(start.Add(time.Duration(djFlowSecs)*time.Second+15*time.Second)), func() {
		stalled.Store(true)
		_ = cli.Process.Kill()
		_ = srv.Process.Kill()
	})
	cliErr := cli.Wait()
	_ = srv.Wait()
	kill.Stop()
	if stalled.Load() {
		t.Fatalf("iperf3 stalled after the double jump:\n%s", tailFile(cliFile, 20))
	}
	if cliErr != nil {
		t.Errorf("iperf3 TCP client: %v\n%s", cliErr, tailFile(cliFile, 20))
	}
	rep := readIperf(t, srvFile)
	// Evidence that the session survived: bytes in the intervals after both moves are over
	// (soft: after leaving the old networks), and in the last full interval.
	after := djMoveAt.Seconds()
	if mode == "soft" {
		after = djLeaveAt.Seconds()
	}
	var bytes, last uint64
	firstAfter := -1.0
	for _, iv := range rep.Intervals {
		s := iv.Sum
		if s.Start >= after && s.End-s.Start >= 0.1 {
			bytes += s.Bytes
			last = s.Bytes
			if s.Bytes > 0 && firstAfter < 0 {
				firstAfter = s.Start
			}
		}
	}
	if bytes == 0 || last == 0 {
		t.Errorf("TCP: %d bytes received after %.1f s, last interval %d bytes: the session died", bytes, after, last)
	}
	for _, d := range []*daemon{n.mn, n.cn} {
		rows, err := d.sessions()
		if err != nil || len(rows) != 1 {
			t.Errorf("%s sessions %+v (%v)", d.name, rows, err)
			continue
		}
		want := l22.String()
		if d == n.cn {
			want = l3.String()
		}
		if rows[0].ActiveRemote != want {
			t.Errorf("%s: session's active remote %s, want the peer's new locator %s", d.name, rows[0].ActiveRemote, want)
		}
	}
	st, err := n.cn.stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MEASURED %s double jump: TCP %d bytes after %.1f s, first non-empty interval from %.1f s (move at %v); CN reresolve lookups=%d changed=%d lu_gave_up=%d",
		mode, bytes, after, firstAfter, djMoveAt, st["reresolve_lookups"], st["reresolve_changed"], st["lu_gave_up"])
	if mode == "hard" && st["reresolve_changed"] < 1 {
		t.Errorf("hard double jump survived without the CN re-resolving the MN (reresolve_changed=%d): the test did not test it", st["reresolve_changed"])
	}
}
