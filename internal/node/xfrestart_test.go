package node_test

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"ilnp/internal/encap"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// TestCrossFamilyRestartAdoptsIPv4: the MN runs on its IPv4 locator behind the NAT (active,
// L2 still valid on IPv6) when its ilnpd is stopped and started again. The new ilnpd adopts
// the pinned IPv4 locator, in its place in the policy's order, instead of dropping it and
// learning it again as the newest locator: its locators are as before, it neither removes
// nor adds one, the CN's session never leaves the NAT's endpoint, and the flows lose
// nothing (the adopted locators enter the ILCC together: one by one, L2 was active for a
// moment and the session's packets over IPv4 were dropped meanwhile).
func TestCrossFamilyRestartAdoptsIPv4(t *testing.T) {
	n := newCrossFamilyNet(t)
	f := n.startFlows(t)

	// Make-before-break to IPv4 behind the NAT; mn1 (L2) stays.
	n.MN.Run("ip", "link", "set", "mn2", "up")
	time.Sleep(200 * time.Millisecond)
	enter, enterSeq := timeline.Now(), f.udp.NextSeq()
	n.MN.Run("sh", "-c", "ip addr add 10.0.0.2/24 dev mn2 && ip route add default via 10.0.0.1 dev mn2")
	n.waitMNAck(t, enter, 5*time.Second)
	mn4, err := encap.L32(netip.MustParseAddrPort("10.0.0.2:49191"))
	if err != nil {
		t.Fatal(err)
	}
	var nat string
	n.waitFor(5*time.Second, "the MN on its IPv4 locator, the CN on the NAT's endpoint", func() (bool, string) {
		rows, err := n.mn.locators()
		s := n.cn.session(t, mnNID)
		l, perr := wire.ParseL64(s.ActiveRemote)
		ep, ok := encap.Endpoint(l)
		nat = s.ActiveRemote
		return err == nil && stateOf(rows, mn4) == "active" && stateOf(rows, l2) == "valid" && perr == nil && ok && ep.Addr() == natIP,
			fmt.Sprint(rows, err, s.ActiveRemote)
	})
	time.Sleep(300 * time.Millisecond)

	logBefore, err := os.ReadFile(n.mn.log)
	if err != nil {
		t.Fatal(err)
	}
	atMove, atRestart := enterSeq, f.udp.NextSeq()
	down := timeline.Now()
	n.killDaemon(t, n.mn, syscall.SIGTERM)
	n.mn = n.restart(t, n.mn)
	time.Sleep(time.Second) // what the restarted daemon does about its locators, it has done
	logAll, err := os.ReadFile(n.mn.log)
	if err != nil {
		t.Fatal(err)
	}
	log := string(logAll[len(logBefore):])
	if strings.Contains(log, "locator gone while ilnpd was down") {
		t.Errorf("the restarted ilnpd dropped a pinned locator:\n%s", grepLines(log, "locator gone"))
	}
	if rows, err := n.mn.locators(); err != nil || stateOf(rows, mn4) != "active" || stateOf(rows, l2) != "valid" {
		t.Errorf("MN's locators after the restart: %v (%v), want %v active and %v valid as before", rows, err, mn4, l2)
	}
	for _, d := range []*daemon{n.mn, n.cn} {
		evs, err := d.events()
		if err != nil {
			t.Fatal(err)
		}
		// The MN's adoption enters its locators as new, in their old order: what counts is
		// what happens after it.
		since := down
		for _, e := range evs {
			if d == n.mn && e.Kind == "adopted" && e.MonoNS > since {
				since = e.MonoNS
			}
		}
		if d == n.mn && since == down {
			t.Errorf("the MN's restarted ilnpd reported no adoption:\n%s", formatEvents(evs, down))
		}
		// The MN's own locators, and the CN's view of the MN; the CN's own locators are the
		// path monitor's business (issue 16), which may move them on a loaded machine.
		for _, e := range evs {
			moved := e.Kind == timeline.LocatorAdded || e.Kind == timeline.LocatorRemoved
			if d == n.mn {
				moved = moved || (e.Kind == timeline.ActiveLocator && e.Peer == "")
			} else {
				moved = e.Kind == timeline.ActiveLocator && e.Peer == mnNID.String()
			}
			if e.MonoNS > since && moved {
				t.Errorf("%s after the MN's restart: %s %s %s %s", d.name, e.Kind, e.Locator, e.Peer, e.Detail)
			}
		}
	}
	if s := n.cn.session(t, mnNID); s.ActiveRemote != nat {
		t.Errorf("the CN's session moved from the NAT's endpoint %s to %s", nat, s.ActiveRemote)
	}

	r := f.stop(t)
	missing := f.udp.Snapshot().Missing
	if len(missing) > 0 {
		t.Logf("UDP echoes missing: %v (sequence numbers; the move to IPv4 began at %d, the restart at %d)", missing, atMove, atRestart)
	}
	t.Logf("across the restart: TCP %d bytes written, %d received; UDP %d sent, %d lost, longest gap between echoes %v",
		r.written, r.received, r.udpSent, r.udpLost, r.maxGap.Round(time.Millisecond))
	if r.tcpErr != nil || r.received != r.written {
		t.Errorf("TCP stream across the restart: %d of %d bytes received, %v", r.received, r.written, r.tcpErr)
	}
	if r.udpLost != 0 {
		t.Errorf("%d of %d UDP echoes lost across the restart", r.udpLost, r.udpSent)
	}
}

// grepLines is the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
