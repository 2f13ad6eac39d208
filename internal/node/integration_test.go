package node_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// Flow timing: the MN enters its second network at enterAt, leaves the first at leaveAt; the
// flows run flowSecs.
const (
	flowSecs = 12
	enterAt  = 3 * time.Second
	leaveAt  = 6 * time.Second
)

// TestSoftHandoff runs the whole story in soft mode: an unmodified iperf3 TCP flow and a
// bidirectional UDP flow, opened by name from the CN, survive the MN entering a second network
// and leaving the first, with no UDP datagram lost; the LU and its ACK are on the wire with the
// session's nonces; plain IPv6 between the same hosts keeps working; a forged LU changes nothing;
// ilnpctl reports it all.
func TestSoftHandoff(t *testing.T) {
	n := newTestNet(t, "soft")
	t.Run("ilnpctl before traffic", func(t *testing.T) { checkCtlIdle(t, n) })
	// Mobility-aware TCP (issue 15) on at both ends: the soft switch holds or drains the TCP flow.
	for _, d := range []*daemon{n.mn, n.cn} {
		if out, err := d.ctl("set", "tcp-aware", "on"); err != nil {
			t.Fatalf("ilnpctl set tcp-aware on (%s): %v %s", d.name, err, out)
		}
	}
	cap := n.captureLUs("r-cn")
	res := n.runMove(t, "soft", true)
	t.Run("tcp-aware drain before the switch", func(t *testing.T) { checkTCPDrain(t, n, res) })

	t.Run("flows survive", func(t *testing.T) { res.checkSurvived(t) })
	t.Run("no UDP loss", func(t *testing.T) {
		if res.udpFwd.Packets < 1000 || res.udpRev.Packets < 1000 {
			t.Errorf("UDP counted %d (CN->MN) and %d (MN->CN) datagrams; a 2 Mbit/s flow of %d s sends ~%d each way",
				res.udpFwd.Packets, res.udpRev.Packets, flowSecs, 2_000_000/8/1300*flowSecs)
		}
		if res.udpFwd.LostPackets != 0 || res.udpRev.LostPackets != 0 {
			t.Errorf("soft handoff lost UDP datagrams: CN->MN %d of %d, MN->CN %d of %d (iperf3's count); %s",
				res.udpFwd.LostPackets, res.udpFwd.Packets, res.udpRev.LostPackets, res.udpRev.Packets, res.udpLossWhere())
		}
	})
	t.Run("old locator valid until gone", func(t *testing.T) {
		if res.l2StateAfterEnter != "valid" || res.l3StateAfterEnter != "active" {
			t.Errorf("soft: after entering L3, MN locators L2=%q L3=%q, want valid and active",
				res.l2StateAfterEnter, res.l3StateAfterEnter)
		}
	})
	t.Run("plain IPv6", func(t *testing.T) {
		if res.plainErr != nil {
			t.Error(res.plainErr)
		}
	})
	var lus []luPacket
	t.Run("LU and ACK on the wire", func(t *testing.T) {
		lus = cap.packets(t)
		checkLUsOnWire(t, n, lus)
	})
	t.Run("forged LU", func(t *testing.T) { checkForgedLU(t, n) })
	t.Run("ilnpctl after move", func(t *testing.T) { checkCtlAfter(t, n) })
	t.Run("new connection after the move joins the session", func(t *testing.T) { checkNewConnJoins(t, n) })
	t.Run("set handoff at run time", func(t *testing.T) { checkSetHandoff(t, n) })
	n.logFigures(t, res)
	t.Run("clean shutdown", func(t *testing.T) { checkShutdown(t, n) })
}

// TestHardHandoff switches the MN to hard handoff at run time and moves it under the same flows:
// the old locator is aged at once, and the flows survive (bytes keep arriving after the move).
func TestHardHandoff(t *testing.T) {
	n := newTestNet(t, "soft")
	if out, err := n.mn.ctl("set", "handoff", "hard"); err != nil {
		t.Fatalf("ilnpctl set handoff hard: %v %s", err, out)
	}
	n.waitFor(5*time.Second, "handoff_mode hard event", func() (bool, string) {
		evs, err := n.mn.events()
		return err == nil && hasEvent(evs, timeline.HandoffMode, "hard"), fmt.Sprint(err)
	})
	// Mobility-aware TCP (issue 15) on at both ends: the move must reach the flows' sockets.
	for _, d := range []*daemon{n.mn, n.cn} {
		if out, err := d.ctl("set", "tcp-aware", "on"); err != nil {
			t.Fatalf("ilnpctl set tcp-aware on (%s): %v %s", d.name, err, out)
		}
	}
	res := n.runMove(t, "hard", false)
	t.Run("flows survive", func(t *testing.T) { res.checkSurvived(t) })
	t.Run("tcp-aware signal reached the sockets", func(t *testing.T) { checkTCPAware(t, res) })
	t.Run("old locator aged at once", func(t *testing.T) {
		if res.l2StateAfterEnter != "aged" || res.l3StateAfterEnter != "active" {
			t.Errorf("hard: after entering L3, MN locators L2=%q L3=%q, want aged and active",
				res.l2StateAfterEnter, res.l3StateAfterEnter)
		}
	})
	n.logFigures(t, res)
}

// A router that stops advertising (killed: no last RA with Router Lifetime 0) takes its
// locator with it once its Router Lifetime runs out (9 s here, RFC 4861 s.6.3.4), although
// the prefix's valid lifetime (60 s) has not.
func TestRouterLifetimeExpiry(t *testing.T) {
	n := newTestNet(t, "soft")
	if err := n.radvd.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	n.waitFor(15*time.Second, "MN drops L2 after the router's lifetime", func() (bool, string) {
		rows, err := n.mn.locators()
		return err == nil && stateOf(rows, l2) == "", fmt.Sprint(rows, err)
	})
	if gone := time.Since(killed); gone < 7*time.Second {
		t.Fatalf("L2 removed %v after the last RAs, before a 9 s Router Lifetime could run out", gone)
	}
	evs, err := n.mn.events()
	if err != nil || !hasEvent(evs, timeline.LocatorRemoved, "router lifetime expired") {
		t.Fatalf("no locator_removed event for the router lifetime (%v):\n%s", err, formatEvents(evs, 0))
	}
}

// iperfSum is one "sum" object of iperf3's JSON.
type iperfSum struct {
	Start       float64 `json:"start"`
	End         float64 `json:"end"`
	Bytes       uint64  `json:"bytes"`
	Packets     int64   `json:"packets"`
	LostPackets int64   `json:"lost_packets"`
	Retransmits int64   `json:"retransmits"`
	Sender      bool    `json:"sender"`
}

type iperfReport struct {
	Intervals []struct {
		Sum             iperfSum  `json:"sum"`
		SumBidirReverse *iperfSum `json:"sum_bidir_reverse"`
	} `json:"intervals"`
	End struct {
		SumSent                 *iperfSum `json:"sum_sent"`
		SumReceived             *iperfSum `json:"sum_received"`
		SumReceivedBidirReverse *iperfSum `json:"sum_received_bidir_reverse"`
	} `json:"end"`
	Error string `json:"error"`
}

func readIperf(t *testing.T, file string) iperfReport {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("iperf3 report: %v", err)
	}
	var r iperfReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("iperf3 report %s: %v\n%s", file, err, b)
	}
	if r.Error != "" {
		t.Errorf("iperf3 %s: %s", file, r.Error)
	}
	return r
}

// moveResult is what one run of the flows across a move measured.
type moveResult struct {
	enterMono, leaveMono int64
	// Seconds into the flows (iperf3's interval clock, started with the client).
	leaveS float64

	tcpServer, udpServer, udpClient iperfReport
	tcpClientErr, udpClientErr      error
	udpFwd, udpRev                  iperfSum // received CN->MN (server) and MN->CN (client)

	l2StateAfterEnter, l3StateAfterEnter string
	plainErr                             error
	pingRTT                              string
	mnEvents, cnEvents                   []timeline.Event
	drops                                []string // non-zero drop and error counters after the flows
	softnetDrops                         uint64   // packets the kernel's input backlogs dropped meanwhile (all namespaces)
}

// softnetDropped sums the kernel's per-CPU input backlog drops (/proc/net/softnet_stat's second
// column): packets a starved CPU could not take in, whichever namespace they were for.
func softnetDropped(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		t.Errorf("softnet_stat: %v", err)
		return 0
	}
	var sum uint64
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			v, _ := strconv.ParseUint(f[1], 16, 64)
			sum += v
		}
	}
	return sum
}

// udpLossWhere says, for a failure's message, in which of iperf3's one-second intervals each
// direction lost its datagrams, beside the moves' times and the kernel's backlog drops: loss
// away from the moves, with backlog drops, is the machine's, not the handoff's.
func (r *moveResult) udpLossWhere() string {
	where := func(rep iperfReport, reverse bool) string {
		var parts []string
		for _, iv := range rep.Intervals {
			s := &iv.Sum
			if reverse {
				s = iv.SumBidirReverse
			}
			if s != nil && s.LostPackets != 0 {
				parts = append(parts, fmt.Sprintf("%d in [%.1f, %.1f) s", s.LostPackets, s.Start, s.End))
			}
		}
		return strings.Join(parts, ", ")
	}
	return fmt.Sprintf("lost CN->MN: %s; MN->CN: %s (enter at %.1f s, leave at %.1f s); kernel input backlog drops meanwhile: %d",
		where(r.udpServer, false), where(r.udpClient, true), enterAt.Seconds(), r.leaveS, r.softnetDrops)
}

// checkNewConnJoins: after the MN moved from L2 to L3, a new TCP connection it opens to the CN's
// session view (unbound, the kernel picks the source) belongs to the ILNP session: the peer
// route's source hint is the MN's session view [L2:NID], so the CN accepts it from there (the
// datapath translated it and the wire carried L3). Without the hint the kernel picks [L3:NID]
// on mn2, the datapath passes that pair as plain IPv6 and the CN sees [L3:NID].
func checkNewConnJoins(t *testing.T, n *testNet) {
	ln := n.CN.Listen("tcp6", "[::]:7011")
	defer ln.Close()
	accepted := make(chan net.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c.RemoteAddr()
		c.Close()
	}()
	c := n.MN.Dial("tcp6", netip.AddrPortFrom(ilv(l1, cnNID), 7011).String())
	defer c.Close()
	var from net.Addr
	select {
	case from = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("the CN accepted no connection within 5 s")
	}
	want := ilv(l2, mnNID)
	if ap, err := netip.ParseAddrPort(fmt.Sprint(from)); err != nil || ap.Addr() != want {
		t.Errorf("the CN accepted the MN's new connection from %v (MN's local address %v), want the MN's session view %v",
			from, c.LocalAddr(), want)
	}
}

// runMove runs the flows, moves the MN (enter L3, leave L2) and collects the results. soft also
// checks plain IPv6 during the overlap.
func (n *testNet) runMove(t *testing.T, mode string, plain bool) *moveResult {
	t.Helper()
	res := &moveResult{}
	// RTT through the ILNP session, by name, before the flows load the path.
	if addr, err := resolve(n.CN, "mn"); err != nil {
		t.Errorf("resolve mn: %v", err)
	} else if rtts, err := ping(n.CN, addr, 5, 200*time.Millisecond, 2*time.Second); err != nil {
		t.Errorf("ping mn (%s, ILNP) before the move: %v", addr, err)
	} else {
		res.pingRTT = rttSummary(rtts)
	}

	tcpSrv, tcpSrvFile := n.iperfServer(5201)
	udpSrv, udpSrvFile := n.iperfServer(5202)
	softnet0 := softnetDropped(t)
	secs := strconv.Itoa(flowSecs)
	start := time.Now()
	// TCP paced to 20 Mbit/s: the machine is shared and full-rate flows reorder on a move
	// (platform.md); the flow is still an unmodified iperf3 connecting by name.
	tcpCli, tcpCliFile := n.iperfClient("mn", 5201, "-t", secs, "-b", "20M", "-C", "cubic")
	udpCli, udpCliFile := n.iperfClient("mn", 5202, "-t", secs, "-u", "-b", "2M", "-l", "1300", "--bidir")

	if plain {
		// Plain IPv6 beside the running ILNP session, before the move (its address is on mn1).
		time.Sleep(300 * time.Millisecond)
		res.plainErr = n.checkPlainIPv6()
		// The move follows the check: at enterAt, or at once when the check (~2 s: a ping and
		// a 1-s iperf3) ran past it on a loaded machine (3.2 s in a CI run beside a busy
		// loop). Only a check that leaves the move less than 2 s before leaveAt spoils it.
		if took := time.Since(start); took > leaveAt-2*time.Second {
			t.Errorf("plain IPv6 check took until %.1f s into the flows, too close to leaving L2 at %v", took.Seconds(), leaveAt)
		} else if took > enterAt {
			t.Logf("plain IPv6 check took until %.1f s into the flows: the move follows it", took.Seconds())
		}
	}
	sleepUntil(start.Add(enterAt))
	res.enterMono = timeline.Now()
	n.MN.Run("ip", "link", "set", "mn2", "up")
	ack := n.waitMNAck(t, res.enterMono, 5*time.Second)
	if ack != nil && ack.Attempt != 1 {
		// Nothing in this testbed loses packets: a retransmission means the LU or its ACK was
		// dropped on the way (e.g. the new locator not yet reachable at the MN). Unless the
		// MN's own kernel was not yet delivering to the new address when the daemon gave up
		// waiting for it (it says so in its log, and resends as designed): seen once in a CI
		// run beside a busy loop.
		if n.mn.logSays(addressNotReceivable) {
			t.Logf("LU on entering L3 acknowledged at attempt %d: the MN's kernel was slow to deliver to L3 (%q in its log)", ack.Attempt, addressNotReceivable)
		} else {
			t.Errorf("LU on entering L3 acknowledged at attempt %d, want 1 (lossless testbed)", ack.Attempt)
		}
	}
	if ack != nil {
		rows, err := n.mn.locators()
		if err != nil {
			t.Error(err)
		}
		res.l2StateAfterEnter, res.l3StateAfterEnter = stateOf(rows, l2), stateOf(rows, l3)
		n.waitFor(3*time.Second, "CN's session active on L3", func() (bool, string) {
			s, err := n.cn.sessions()
			for _, r := range s {
				if r.PeerNID == mnNID.String() && r.ActiveRemote == l3.String() {
					return true, ""
				}
			}
			return false, fmt.Sprint(s, err)
		})
	}
	sleepUntil(start.Add(leaveAt))
	res.leaveMono = timeline.Now()
	res.leaveS = time.Since(start).Seconds()
	n.MN.Run("ip", "link", "set", "mn1", "down")
	if mode == "soft" {
		// Soft: L2 was still advertised as valid, so losing it is news for the CN. Hard: the
		// LU on entering L3 listed L3 alone, and there is nothing to tell.
		n.waitMNAck(t, res.leaveMono, 5*time.Second)
	}

	// Wait from this goroutine only (a concurrent second Wait on a Cmd never returns); a
	// stalled flow is killed at the limit.
	var stalled atomic.Bool
	kill := time.AfterFunc(time.Until(start.Add(flowSecs*time.Second+15*time.Second)), func() {
		stalled.Store(true)
		_ = tcpCli.Process.Kill()
		_ = udpCli.Process.Kill()
		_ = tcpSrv.Process.Kill()
		_ = udpSrv.Process.Kill()
	})
	res.tcpClientErr = tcpCli.Wait()
	res.udpClientErr = udpCli.Wait()
	_ = tcpSrv.Wait()
	_ = udpSrv.Wait()
	kill.Stop()
	if stalled.Load() {
		t.Fatalf("iperf3 did not finish within %d s of the move (flows stalled?)\nTCP client: %s\nUDP client: %s",
			flowSecs+15, tailFile(tcpCliFile, 20), tailFile(udpCliFile, 20))
	}
	res.softnetDrops = softnetDropped(t) - softnet0
	res.tcpServer = readIperf(t, tcpSrvFile)
	res.udpServer = readIperf(t, udpSrvFile)
	res.udpClient = readIperf(t, udpCliFile)
	readIperf(t, tcpCliFile)
	if s := res.udpServer.End.SumReceived; s != nil {
		res.udpFwd = *s
	}
	if s := res.udpClient.End.SumReceivedBidirReverse; s != nil {
		res.udpRev = *s
	}
	var err error
	for _, d := range []*daemon{n.mn, n.cn} {
		stats, err := d.stats()
		if err != nil {
			t.Error(err)
			continue
		}
		var drops []string
		for _, c := range []string{"dp_ingress_unknown_locator", "dp_ingress_invalid_local_locator", "dp_ingress_bad_nonce",
			"dp_ingress_missing_nonce", "dp_ingress_malformed", "dp_ingress_errors", "dp_egress_errors", "dp_egress_malformed",
			"lu_send_errors", "lu_gave_up"} {
			if stats[c] != 0 {
				drops = append(drops, fmt.Sprintf("%s=%d", c, stats[c]))
			}
		}
		res.drops = append(res.drops, d.name+": "+strings.Join(drops, " "))
	}
	if res.mnEvents, err = n.mn.events(); err != nil {
		t.Error(err)
	}
	if res.cnEvents, err = n.cn.events(); err != nil {
		t.Error(err)
	}
	return res
}

// checkSurvived: both iperf3 clients succeeded, and data was received in every direction after
// the MN left its first network (a dead session leaves the later intervals empty).
func (r *moveResult) checkSurvived(t *testing.T) {
	if r.tcpClientErr != nil {
		t.Errorf("iperf3 TCP client: %v", r.tcpClientErr)
	}
	if r.udpClientErr != nil {
		t.Errorf("iperf3 UDP client: %v", r.udpClientErr)
	}
	after := func(name string, sums []iperfSum) {
		var bytes uint64
		var last iperfSum
		for _, s := range sums {
			// iperf3 may end with a zero-length interval (e.g. 12.0-12.0 s): no evidence
			// either way.
			if s.Start >= r.leaveS+0.5 && s.End-s.Start >= 0.1 {
				bytes += s.Bytes
				last = s
			}
		}
		if bytes == 0 || last.Bytes == 0 {
			t.Errorf("%s: %d bytes received after leaving L2 at %.1f s (last interval %.1f-%.1f s: %d bytes)",
				name, bytes, r.leaveS, last.Start, last.End, last.Bytes)
		} else {
			t.Logf("%s: %d bytes received after leaving L2 (%.1f s)", name, bytes, r.leaveS)
		}
	}
	var tcp, fwd, rev []iperfSum
	for _, iv := range r.tcpServer.Intervals {
		tcp = append(tcp, iv.Sum)
	}
	for _, iv := range r.udpServer.Intervals {
		fwd = append(fwd, iv.Sum)
	}
	for _, iv := range r.udpClient.Intervals {
		if iv.SumBidirReverse != nil {
			rev = append(rev, *iv.SumBidirReverse)
		}
	}
	after("TCP CN->MN", tcp)
	after("UDP CN->MN", fwd)
	after("UDP MN->CN", rev)
}

// waitMNAck waits for the MN's first LU-ACK (outcome acked) after since and returns it.
func (n *testNet) waitMNAck(t *testing.T, since int64, limit time.Duration) *timeline.Event {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		evs, err := n.mn.events()
		if err == nil {
			for i := range evs {
				e := evs[i]
				if e.Kind == timeline.LUAckReceived && e.MonoNS > since && strings.Contains(e.Detail, "outcome=acked") {
					return &e
				}
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("no LU-ACK at the MN within %v (err %v); MN events since:\n%s", limit, err, formatEvents(evs, since))
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkPlainIPv6: while the ILNP session runs, ordinary IPv6 between the same two hosts (to an
// MN address that is not one of its I-LVs) works, in ICMPv6 and TCP, and the CN's datapath
// passes it untouched.
func (n *testNet) checkPlainIPv6() error {
	before, err := n.cn.stats()
	if err != nil {
		return err
	}
	if _, err := ping(n.CN, mnPlain, 3, 200*time.Millisecond, 2*time.Second); err != nil {
		return fmt.Errorf("plain IPv6 ping during the ILNP session: %w", err)
	}
	srv, srvFile := n.iperfServer(5203)
	if out, err := n.CN.Try("iperf3", "-c", mnPlain.String(), "-p", "5203", "-t", "1", "-b", "5M", "-J"); err != nil {
		return fmt.Errorf("plain IPv6 iperf3 to %s during the ILNP session: %w\n%s", mnPlain, err, out)
	}
	_ = srv.Wait()
	var r iperfReport
	if b, err := os.ReadFile(srvFile); err != nil || json.Unmarshal(b, &r) != nil || r.End.SumReceived == nil ||
		r.End.SumReceived.Bytes == 0 {
		return fmt.Errorf("plain IPv6 iperf3 server received nothing: %v %s", err, tailFile(srvFile, 10))
	}
	after, err := n.cn.stats()
	if err != nil {
		return err
	}
	if after["dp_egress_pass_ipv6"] <= before["dp_egress_pass_ipv6"] {
		return fmt.Errorf("plain IPv6 worked but the CN's datapath did not count it as passed IPv6 (%d -> %d)",
			before["dp_egress_pass_ipv6"], after["dp_egress_pass_ipv6"])
	}
	return nil
}

// checkLUsOnWire: the capture at R (CN side) holds the MN's LU from its new locator and the CN's
// ACK, both with a nonce option carrying the sender's session nonce and a good checksum.
func checkLUsOnWire(t *testing.T, n *testNet, lus []luPacket) {
	mnSess := n.mn.session(t, cnNID)
	cnSess := n.cn.session(t, mnNID)
	cn := ilv(l1, cnNID).String()
	mnL3 := ilv(l3, mnNID).String()
	var luSeen, ackSeen bool
	for _, p := range lus {
		t.Logf("on the wire at R: %s -> %s nonce=%s locators=%s checksum=%s", p.Src, p.Dst, p.Nonce, p.Locators, p.ChecksumStatus)
		if p.ChecksumStatus != "1" {
			t.Errorf("LU %s -> %s: ICMPv6 checksum status %q, want good (1)", p.Src, p.Dst, p.ChecksumStatus)
		}
		switch {
		case p.Src == mnL3 && p.Dst == cn:
			luSeen = true
			if p.Nonce != mnSess.LocalNonce {
				t.Errorf("LU from the MN carries nonce %q, want the MN's session nonce %q", p.Nonce, mnSess.LocalNonce)
			}
			if !strings.Contains(p.Locators, fmt.Sprintf("0x%016x", uint64(l3))) {
				t.Errorf("LU from the MN lists %q, want L3 among them", p.Locators)
			}
		case p.Src == cn && p.Dst == mnL3:
			ackSeen = true
			if p.Nonce != cnSess.LocalNonce {
				t.Errorf("LU-ACK from the CN carries nonce %q, want the CN's session nonce %q", p.Nonce, cnSess.LocalNonce)
			}
		}
	}
	// The CN's timeline records each LU it received once.
	fromMN := 0
	for _, p := range lus {
		if p.Dst == cn && strings.HasSuffix(p.Src, ":214:4fff:fe20:ee64") {
			fromMN++
		}
	}
	evs, err := n.cn.events()
	if err != nil {
		t.Fatal(err)
	}
	received := 0
	for _, e := range evs {
		if e.Kind == timeline.LUReceived && e.Peer == mnNID.String() {
			received++
		}
	}
	if received != fromMN {
		t.Errorf("CN timeline has %d lu_received events for the MN, the wire %d LUs from it", received, fromMN)
	}
	if !luSeen || !ackSeen {
		t.Errorf("capture at R: LU from %s seen %v, ACK to it seen %v (%d LU packets)", mnL3, luSeen, ackSeen, len(lus))
	}
}

// checkForgedLU: a third host sends the CN an LU claiming to be the MN (its NID, X's locator),
// once with a wrong nonce and once with none. The CN's session does not move and both are
// counted as dropped by the datapath.
func checkForgedLU(t *testing.T, n *testNet) {
	before := n.cn.session(t, mnNID)
	stats0, err := n.cn.stats()
	if err != nil {
		t.Fatal(err)
	}
	src := wire.ILV{Locator: l4, NID: mnNID}
	dst := wire.ILV{Locator: l1, NID: cnNID}
	lu := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{{Locator: l4, Preference: 0, Lifetime: 600}}}
	msg, err := lu.Marshal(src.Addr(), dst.Addr())
	if err != nil {
		t.Fatal(err)
	}
	var nonce wire.Nonce
	for nonce.IsZero() || nonce.String() == before.RemoteNonce {
		if nonce, err = wire.RandomNonce(4); err != nil {
			t.Fatal(err)
		}
	}
	wrong := wire.AppendILNPPacket(nil, src, dst, nonce, wire.ProtoICMPv6, msg)
	if err := sendRaw(n.X, wrong); err != nil {
		t.Fatal(err)
	}
	n.waitFor(3*time.Second, "CN counts the wrong nonce", func() (bool, string) {
		s, err := n.cn.stats()
		return err == nil && s["dp_ingress_bad_nonce"] == stats0["dp_ingress_bad_nonce"]+1, fmt.Sprint(s, err)
	})
	none := wire.IPv6Header{PayloadLen: uint16(len(msg)), NextHeader: wire.ProtoICMPv6, HopLimit: 64,
		Src: src.Addr(), Dst: dst.Addr()}.Append(nil)
	none = append(none, msg...)
	if err := sendRaw(n.X, none); err != nil {
		t.Fatal(err)
	}
	n.waitFor(3*time.Second, "CN counts the missing nonce", func() (bool, string) {
		s, err := n.cn.stats()
		return err == nil && s["dp_ingress_missing_nonce"] == stats0["dp_ingress_missing_nonce"]+1, fmt.Sprint(s, err)
	})
	time.Sleep(200 * time.Millisecond) // give a (wrongly) accepted LU time to take effect
	after := n.cn.session(t, mnNID)
	if after.ActiveRemote != before.ActiveRemote || after.RemoteLocators != before.RemoteLocators ||
		after.RemoteNonce != before.RemoteNonce {
		t.Errorf("forged LU changed the CN's session:\nbefore %+v\nafter  %+v", before, after)
	}
	stats1, err := n.cn.stats()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"lu_received", "lu_ack_sent"} {
		if stats1[c] != stats0[c] {
			t.Errorf("forged LU reached the daemon: %s %d -> %d", c, stats0[c], stats1[c])
		}
	}
	evs, err := n.cn.events()
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for _, e := range evs {
		if e.Kind == timeline.BadNonce && e.Peer == mnNID.String() {
			bad++
		}
	}
	if bad < 2 {
		t.Errorf("CN timeline has %d bad_nonce events for the MN, want 2 (wrong and missing nonce)", bad)
	}
}

// checkCtlIdle: every `show` parses as the documented JSON before any session exists.
func checkCtlIdle(t *testing.T, n *testNet) {
	for _, d := range []*daemon{n.cn, n.mn} {
		locs, err := d.locators()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range locs {
			if l.Iface == "" || l.Address == "" || l.State == "" {
				t.Errorf("%s: locator row with empty fields: %+v", d.name, l)
			}
		}
		if _, err := d.sessions(); err != nil {
			t.Error(err)
		}
		var peers []peerRow
		if err := d.showJSON("peers", &peers); err != nil {
			t.Error(err)
		}
		stats, err := d.stats()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{"dp_ingress_bad_nonce", "dp_ingress_missing_nonce", "dp_egress_nonce_inserted", "dp_sessions_created"} {
			if _, ok := stats[c]; !ok {
				t.Errorf("%s: show stats has no %s: %v", d.name, c, stats)
			}
		}
	}
	mnLocs, _ := n.mn.locators()
	if len(mnLocs) != 1 || mnLocs[0].Iface != "mn1" || mnLocs[0].Address != ilv(l2, mnNID).String() ||
		!strings.HasPrefix(mnLocs[0].Router, "fe80::") || mnLocs[0].ValidSecs <= 0 {
		t.Errorf("MN locators before the move: %+v, want one active L2 on mn1 via R's link-local", mnLocs)
	}
	cnLocs, _ := n.cn.locators()
	if len(cnLocs) != 1 || cnLocs[0].Iface != "cn0" || cnLocs[0].Address != ilv(l1, cnNID).String() {
		t.Errorf("CN locators: %+v, want its static L1 on cn0", cnLocs)
	}
	// getent during readiness registered "mn" at the CN.
	var peers []peerRow
	if err := n.cn.showJSON("peers", &peers); err != nil {
		t.Fatal(err)
	}
	if len(peers) != 1 || peers[0].Name != "mn" || peers[0].NID != mnNID.String() || len(peers[0].ILVs) == 0 ||
		!strings.HasPrefix(peers[0].ILVs[0], ilv(l2, mnNID).String()) {
		t.Errorf("CN peers: %+v, want mn with [L2:NID] (registered by the stub resolver)", peers)
	}
}

// checkCtlAfter: after the move the MN has only L3, and both ends agree on the session.
func checkCtlAfter(t *testing.T, n *testNet) {
	rows, err := n.mn.locators()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Locator != l3.String() || rows[0].State != "active" || rows[0].Iface != "mn2" {
		t.Errorf("MN locators after leaving L2: %+v, want only L3 active on mn2", rows)
	}
	mnS, cnS := n.mn.session(t, cnNID), n.cn.session(t, mnNID)
	if cnS.ActiveRemote != l3.String() || !strings.Contains(cnS.RemoteLocators, l3.String()) ||
		strings.Contains(cnS.RemoteLocators, l2.String()+"(active)") {
		t.Errorf("CN session after the move: %+v, want active remote L3", cnS)
	}
	if mnS.ActiveLocal != l3.String() || mnS.ActiveRemote != l1.String() {
		t.Errorf("MN session after the move: %+v, want active local L3, remote L1", mnS)
	}
	if mnS.SessionLocal != ilv(l2, mnNID).String() && mnS.SessionLocal != l2.String() {
		t.Logf("MN session view local %q (the application still sees its first address)", mnS.SessionLocal)
	}
	if mnS.LocalNonce == "" || mnS.LocalNonce != cnS.RemoteNonce || cnS.LocalNonce != mnS.RemoteNonce {
		t.Errorf("nonces disagree: MN local %q remote %q, CN local %q remote %q",
			mnS.LocalNonce, mnS.RemoteNonce, cnS.LocalNonce, cnS.RemoteNonce)
	}
	if mnS.TxPackets == 0 || mnS.RxPackets == 0 || cnS.TxPackets == 0 || cnS.RxPackets == 0 {
		t.Errorf("session packet counters: MN tx %d rx %d, CN tx %d rx %d", mnS.TxPackets, mnS.RxPackets, cnS.TxPackets, cnS.RxPackets)
	}
	if mnS.SRTTMs <= 0 {
		t.Errorf("MN session has no LU RTT estimate after two acknowledged LUs: %+v", mnS)
	}
	stats, err := n.mn.stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats["lu_sent"] < 2 || stats["lu_ack_acked"] < 2 {
		t.Errorf("MN stats after two moves: lu_sent %d lu_ack_acked %d, want >= 2", stats["lu_sent"], stats["lu_ack_acked"])
	}
	// The table form works too.
	if out, err := n.mn.ctl("show", "sessions"); err != nil || !strings.Contains(out, cnNID.String()) {
		t.Errorf("ilnpctl show sessions (table): %v\n%s", err, out)
	}
}

// checkSetHandoff: `ilnpctl set handoff` changes the mode at run time and says so in events;
// a bad mode is refused.
func checkSetHandoff(t *testing.T, n *testNet) {
	since := timeline.Now()
	for _, mode := range []string{"hard", "soft"} {
		if out, err := n.mn.ctl("set", "handoff", mode); err != nil {
			t.Fatalf("set handoff %s: %v %s", mode, err, out)
		}
	}
	evs, err := n.mn.events()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		if e.Kind == timeline.HandoffMode && e.MonoNS > since {
			got = append(got, e.Detail)
		}
	}
	// One event per change, saying what changed.
	if strings.Join(got, ",") != "soft -> hard,hard -> soft" {
		t.Errorf("handoff_mode events after set hard, set soft: %q, want [\"soft -> hard\" \"hard -> soft\"]", got)
	}
	if out, err := n.mn.ctl("set", "handoff", "sideways"); err == nil {
		t.Errorf("set handoff sideways accepted: %s", out)
	}
}

// checkShutdown: SIGTERM ends both daemons with status 0 and leaves what the sessions need
// (identity addresses on lo, the pinned datapath); `ilnpd -flush` then removes all of it.
func checkShutdown(t *testing.T, n *testNet) {
	for _, d := range []*daemon{n.mn, n.cn} {
		if err := d.stop(10 * time.Second); err != nil {
			t.Errorf("ilnpd %s: %v\n%s", d.name, err, tailFile(d.log, 20))
		}
		if out := d.ns.Run("ip", "-6", "addr", "show", "dev", "lo", "scope", "global"); strings.TrimSpace(out) == "" {
			t.Errorf("ilnpd %s: SIGTERM removed the identity addresses on lo", d.name)
		}
		if out := d.ns.Run("ip", "-6", "route", "show", "proto", "static"); strings.TrimSpace(out) == "" {
			t.Errorf("ilnpd %s: SIGTERM removed the peer routes", d.name)
		}
		d.checkFlush(t)
		// The state file listed them; -flush deletes them (in batches: internal/routewrite).
		if out := d.ns.Run("ip", "-6", "route", "show", "proto", "static"); strings.TrimSpace(out) != "" {
			t.Errorf("ilnpd %s: peer routes left after -flush:\n%s", d.name, out)
		}
	}
}

// logFigures prints the handoff delays (LU sent -> LU-ACK received, MN timeline) and the RTT.
func (n *testNet) logFigures(t *testing.T, r *moveResult) {
	t.Logf("RTT CN->MN through the ILNP session (ping by name): %s", r.pingRTT)
	for _, m := range []struct {
		name  string
		since int64
	}{{"enter L3", r.enterMono}, {"leave L2", r.leaveMono}} {
		var ra, added, sent, acked *timeline.Event
		for i := range r.mnEvents {
			e := &r.mnEvents[i]
			if e.MonoNS <= m.since {
				continue
			}
			switch {
			case e.Kind == timeline.RASeen && ra == nil && m.name == "enter L3" && e.Iface == "mn2":
				ra = e
			case (e.Kind == timeline.LocatorAdded || e.Kind == timeline.ActiveLocator) && added == nil && m.name == "enter L3":
				added = e
			case e.Kind == timeline.LUSent && sent == nil:
				sent = e
			case e.Kind == timeline.LUAckReceived && acked == nil && sent != nil && strings.Contains(e.Detail, "outcome=acked"):
				acked = e
			}
		}
		ms := func(e *timeline.Event) string {
			if e == nil {
				return "-"
			}
			return fmt.Sprintf("%.2f ms", float64(e.MonoNS-m.since)/1e6)
		}
		line := fmt.Sprintf("MN %s (times from the link change): RA seen %s, locator %s, LU sent %s, LU-ACK %s",
			m.name, ms(ra), ms(added), ms(sent), ms(acked))
		if sent != nil && acked != nil {
			line += fmt.Sprintf("; handoff delay LU sent -> ACK %.2f ms (attempt %d, engine says %.2f ms; %s)",
				float64(acked.MonoNS-sent.MonoNS)/1e6, acked.Attempt, float64(acked.Duration)/1e6, acked.Detail)
			// lu_ack_received carries the kernel's arrival stamp (SO_TIMESTAMPNS): after the
			// LU left, and no later than the engine saw the ACK in user space (its Duration runs
			// from just before the send); 1 ms covers the realtime -> monotonic conversion.
			if d := acked.MonoNS - sent.MonoNS; d <= 0 || d > acked.Duration+int64(time.Millisecond) {
				t.Errorf("%s: LU-ACK arrival stamp %d ns after the LU, engine's elapsed %d ns: not a kernel arrival stamp",
					m.name, d, acked.Duration)
			}
		}
		t.Log(line)
	}
	t.Logf("drop/error counters after the flows: %s", strings.Join(r.drops, "; "))
	if t.Failed() || os.Getenv("ILNP_IT_KEEP") != "" {
		t.Logf("MN timeline from entering L3:\n%s", formatEvents(r.mnEvents, r.enterMono))
		t.Logf("CN timeline from the MN entering L3:\n%s", formatEvents(r.cnEvents, r.enterMono))
	}
	t.Logf("UDP datagrams: CN->MN %d received, %d lost; MN->CN %d received, %d lost",
		r.udpFwd.Packets, r.udpFwd.LostPackets, r.udpRev.Packets, r.udpRev.LostPackets)
	if s := r.tcpServer.End.SumReceived; s != nil {
		var retr int64
		if c := r.tcpServer.End.SumSent; c != nil {
			retr = c.Retransmits
		}
		t.Logf("TCP: %d bytes received by the MN (%d retransmissions reported)", s.Bytes, retr)
	}
}

func rttSummary(rtts []time.Duration) string {
	if len(rtts) == 0 {
		return "no replies"
	}
	s := slices.Clone(rtts)
	slices.Sort(s)
	var sum time.Duration
	for _, r := range s {
		sum += r
	}
	return fmt.Sprintf("%d echoes, min/avg/max %.3f/%.3f/%.3f ms", len(s),
		float64(s[0])/1e6, float64(sum)/float64(len(s))/1e6, float64(s[len(s)-1])/1e6)
}

func hasEvent(evs []timeline.Event, kind timeline.Kind, detail string) bool {
	for _, e := range evs {
		if e.Kind == kind && strings.Contains(e.Detail, detail) {
			return true
		}
	}
	return false
}

func formatEvents(evs []timeline.Event, since int64) string {
	var b strings.Builder
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].MonoNS < evs[j].MonoNS })
	for _, e := range evs {
		if e.MonoNS > since {
			fmt.Fprintf(&b, "%+.3fms %s iface=%s loc=%s peer=%s att=%d %s\n", float64(e.MonoNS-since)/1e6,
				e.Kind, e.Iface, e.Locator, e.Peer, e.Attempt, e.Detail)
		}
	}
	return b.String()
}

func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// checkTCPDrain: in a soft handoff the MN held its packets on the old locator with the move's
// start (its drain, onto a faster path, comes with the LU-ACK) and the CN asked for a drain of
// its sockets of the MN before its datapath switched (when it applied the LU). Whether a socket had data in flight to hold back then depends on the
// moment (the flow is paced, on LAN paths), but no drain may end by its deadline: the old path
// works, so what was in flight on it is acknowledged.
func checkTCPDrain(t *testing.T, n *testNet, r *moveResult) {
	for _, c := range []struct {
		name string
		evs  []timeline.Event
		want string
	}{{"mn", r.mnEvents, " moving"}, {"cn", r.cnEvents, " drain="}} {
		found := false
		for _, e := range c.evs {
			if e.Kind == "tcp_aware" && e.MonoNS >= r.enterMono && strings.Contains(e.Detail, c.want) &&
				!strings.Contains(e.Detail, "sockets=0") {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no tcp_aware event with %q matching a socket after entering L3:\n%s", c.name, c.want,
				formatEvents(c.evs, r.enterMono))
		}
	}
	// The MN held its packets on the old locator until the LU-ACK (its drain, if the new path
	// proved faster, came with the move's end).
	mnStats, err := n.mn.stats()
	if err != nil {
		t.Fatal(err)
	}
	if mnStats["tcpaware_pins"] == 0 {
		t.Errorf("MN: the soft switch was not held on the old locator (tcpaware_pins 0)")
	}
	stats, err := n.cn.stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats["tcpaware_drain_expired"] != 0 {
		t.Errorf("CN: %d of %d drains ended by their deadline, want them acknowledged", stats["tcpaware_drain_expired"], stats["tcpaware_drains"])
	}
	// The CN kept its packets on the MN's old locator until its probe of the new pair came
	// back (the MN's flows were delivering on the old path when the LU came).
	if stats["tcpaware_remote_pins"] == 0 {
		t.Errorf("CN: the correspondent's soft switch was not held on its old locator (tcpaware_remote_pins 0, not fresh %d)",
			stats["tcpaware_remote_pins_not_fresh"])
	}
	answered := false
	for _, e := range r.cnEvents {
		if e.Kind == "tcp_aware" && e.MonoNS >= r.enterMono && strings.Contains(e.Detail, "remote pin") {
			t.Logf("CN %+.1f ms: %s", float64(e.MonoNS-r.enterMono)/1e6, e.Detail)
			answered = answered || strings.Contains(e.Detail, "remote pin released: answered")
		}
	}
	if !answered {
		t.Errorf("CN: no remote pin released by its probe's answer after entering L3:\n%s", formatEvents(r.cnEvents, r.enterMono))
	}
}

// checkTCPAware: the MN signalled the move's start and end (LU-ACK) to its sockets of the CN,
// the CN the move's end (LU) to its sockets of the MN; each run matched at least one socket
// (the iperf3 flows) and no setsockopt failed.
func checkTCPAware(t *testing.T, r *moveResult) {
	for _, c := range []struct {
		name   string
		evs    []timeline.Event
		phases []string
	}{{"mn", r.mnEvents, []string{" moving", " settled"}}, {"cn", r.cnEvents, []string{" settled"}}} {
		for _, phase := range c.phases {
			found := false
			for _, e := range c.evs {
				if e.Kind == "tcp_aware" && e.MonoNS >= r.enterMono && strings.Contains(e.Detail, phase) &&
					!strings.Contains(e.Detail, "sockets=0") {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no tcp_aware%s event matching a socket after the move:\n%s", c.name, phase,
					formatEvents(c.evs, r.enterMono))
			}
		}
	}
}

// addressNotReceivable is what ilnpd logs when the kernel does not deliver to a new locator's
// address within its wait (node.go, addLocatorAddress).
const addressNotReceivable = "locator address not yet receivable"

// logSays reports whether the daemon's log holds text.
func (d *daemon) logSays(text string) bool {
	b, err := os.ReadFile(d.log)
	return err == nil && strings.Contains(string(b), text)
}
