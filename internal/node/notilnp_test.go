package node_test

import (
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/internal/timeline"
)

// TestPeerNotILNP: the CN's hosts file says "mn" is an ILNP node, but the MN is a plain Linux
// host without ilnpd. Its kernel answers the SYN's nonce option (type 0x8B: discard and send
// Parameter Problem) with Parameter Problem code 2; the CN's datapath finds its own nonce in the
// quoted SYN and sends plain IPv6 from then on, so the connection opens with the kernel's
// retransmitted SYN, carries data both ways, and `ilnpctl show sessions` says ipv6-fallback.
func TestPeerNotILNP(t *testing.T) {
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "ethtool", "getent")
	n := &testNet{t: t, dir: t.TempDir(), bin: binaries(t)}
	n.buildCore("np")
	mnAddr := ilv(l2, mnNID)
	n.MN.Run("ip", "addr", "add", mnAddr.String()+"/64", "dev", "mn1", "nodad")
	n.MN.Run("ip", "route", "add", "default", "via", "2001:db8:2::1", "dev", "mn1")
	n.hostsFn = filepath.Join(n.dir, "hosts")
	writeFile(t, n.hostsFn, fmt.Sprintf("%s|10,%s cn\n%s|10,%s mn\n", l1, cnNID, l2, mnNID))
	n.cn = n.startDaemon("cn", n.CN, cnNIDText, "soft", "cn0")
	n.waitFor(10*time.Second, "CN resolves mn", func() (bool, string) {
		out, err := n.CN.Try("getent", "ahostsv6", "mn")
		return err == nil && strings.Contains(out, mnAddr.String()), out
	})

	ln := n.MN.Listen("tcp6", "[::]:5001")
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	start := time.Now()
	c := n.CN.Dial("tcp6", netip.AddrPortFrom(mnAddr, 5001).String())
	defer c.Close()
	took := time.Since(start)
	// The first SYN is lost to the error; the kernel resends it after its 1 s initial RTO.
	if took > 4*time.Second {
		t.Errorf("connected after %v", took)
	}
	msg := []byte(strings.Repeat("not ILNP ", 1000))
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, len(msg))
	if _, err := io.ReadFull(c, back); err != nil || string(back) != string(msg) {
		t.Fatalf("echo: %v", err)
	}

	row := n.cn.session(t, mnNID)
	if row.Mode != "ipv6-fallback" {
		t.Errorf("CN's session with the plain MN: mode %q, want ipv6-fallback (%+v)", row.Mode, row)
	}
	stats, err := n.cn.stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats["dp_ingress_param_problems"] == 0 || stats["dp_egress_fallback_ipv6"] == 0 {
		t.Errorf("dp_ingress_param_problems %d, dp_egress_fallback_ipv6 %d: want both > 0",
			stats["dp_ingress_param_problems"], stats["dp_egress_fallback_ipv6"])
	}
	evs, err := n.cn.events()
	if err != nil {
		t.Fatal(err)
	}
	if !hasEvent(evs, timeline.ParameterProblem, "plain IPv6") {
		t.Errorf("no parameter-problem event:\n%s", formatEvents(evs, 0))
	}
}
