package node_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/ipv6"

	"ilnp/internal/encap"
	"ilnp/internal/nstest"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// The cross-family topology (issue 14): the integration topology's CN - R - MN, where the CN
// is dual stack (198.51.100.2 beside L1), R routes IPv4 and masquerades the MN's second
// access network, which is IPv4 only (10.0.0.0/24, no RAs: mn2 gets 10.0.0.2 "from DHCP",
// statically, when its link comes up). Both ends run ilnpd with ipv4-locators on.
//
//	CN cn0 ---- r-cn  R  r-mn1 ---- mn1 MN   2001:db8:2::/64 (radvd)
//	198.51.100.2/24      r-mn2 ---- mn2      10.0.0.0/24 behind R's NAT
var (
	cn4   = netip.MustParseAddr("198.51.100.2")
	natIP = netip.MustParseAddr("198.51.100.1")
)

// Each end declares the other an ilnpd peer: IPv4 locator entries go only to a correspondent
// that has shown it knows them (internal/dialect), and the MN is known to the CN by no IPv4
// locator before it moves.
const xfConf = "ipv4-locators on\nnat-keepalive 25s\npeer-dialect " + cnNIDText + " ilnpd\npeer-dialect " + mnNIDText + " ilnpd\n"

func newCrossFamilyNet(t *testing.T) *testNet {
	t.Helper()
	return newCrossFamilyNetConf(t, xfConf)
}

// newCrossFamilyNetConf is newCrossFamilyNet with conf as both daemons' extra configuration.
func newCrossFamilyNetConf(t *testing.T, conf string) *testNet {
	t.Helper()
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "radvd", "nft", "ethtool", "getent")
	n := &testNet{t: t, dir: t.TempDir(), bin: binaries(t), extraConf: map[string]string{"cn": conf, "mn": conf}}
	n.buildCore("xf", "net.ipv6.conf.default.autoconf=0")
	n.R.Run("sysctl", "-qw", "net.ipv4.ip_forward=1")
	n.R.Run("ip", "addr", "add", natIP.String()+"/24", "dev", "r-cn")
	n.R.Run("ip", "addr", "add", "10.0.0.1/24", "dev", "r-mn2")
	n.R.Run("ip", "-6", "addr", "flush", "dev", "r-mn2", "scope", "global")
	n.R.Run("nft", "add table ip nat")
	n.R.Run("nft", "add chain ip nat post { type nat hook postrouting priority 100 ; }")
	// UDP source ports moved into a range of their own, so the translation is visible.
	n.R.Run("nft", "add rule ip nat post oifname r-cn ip saddr 10.0.0.0/24 meta l4proto udp masquerade to :61000-61100")
	n.CN.Run("ip", "addr", "add", cn4.String()+"/24", "dev", "cn0")
	n.startRadvdOn(map[string]string{"r-mn1": "2001:db8:2::/64"})
	n.hostsFn = filepath.Join(n.dir, "hosts")
	// The CN is listed with its IPv4 locator too (hosts syntax IPv4[:port]|preference,NID).
	hosts := fmt.Sprintf("%s|10,%s cn\n%s|20,%s cn\n%s|10,%s mn\n", l1, cnNID, cn4, cnNID, l2, mnNID)
	writeFile(t, n.hostsFn, hosts)
	n.cn = n.startDaemon("cn", n.CN, cnNIDText, "soft", "cn0")
	n.mn = n.startDaemon("mn", n.MN, mnNIDText, "soft", "mn1", "mn2")
	cnL32, err := encap.L32(netip.AddrPortFrom(cn4, encap.DefaultPort))
	if err != nil {
		t.Fatal(err)
	}
	n.waitFor(20*time.Second, "MN locator L2 active", func() (bool, string) {
		rows, err := n.mn.locators()
		return err == nil && stateOf(rows, l2) == "active", fmt.Sprint(rows, err)
	})
	// The CN's static IPv6 locator ranks before its IPv4 one (same age, IPv6 first).
	n.waitFor(10*time.Second, "CN: L1 active, its IPv4 locator valid", func() (bool, string) {
		rows, err := n.cn.locators()
		return err == nil && stateOf(rows, l1) == "active" && stateOf(rows, cnL32) == "valid", fmt.Sprint(rows, err)
	})
	return n
}

// udpEcho is the MN's UDP server: it echoes every datagram from the session view address it
// came to, and records on which interface each arrived and when (CLOCK_MONOTONIC, the
// timeline's clock).
type udpEcho struct {
	mu       sync.Mutex
	arrivals []arrival
}

type arrival struct {
	seq     uint64
	ifindex int
	mono    int64
}

func (e *udpEcho) serve(conn net.PacketConn) {
	pc := ipv6.NewPacketConn(conn)
	if err := pc.SetControlMessage(ipv6.FlagInterface|ipv6.FlagDst, true); err != nil {
		return
	}
	buf := make([]byte, 2048)
	for {
		n, cm, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		at := timeline.Now()
		if n >= 8 && cm != nil {
			e.mu.Lock()
			e.arrivals = append(e.arrivals, arrival{seq: binary.BigEndian.Uint64(buf), ifindex: cm.IfIndex, mono: at})
			e.mu.Unlock()
			_, _ = pc.WriteTo(buf[:n], &ipv6.ControlMessage{Src: cm.Dst}, from)
		}
	}
}

// firstOn is the arrival time of the first datagram on ifindex after since (0: none).
func (e *udpEcho) firstOn(ifindex int, since int64) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, a := range e.arrivals {
		if a.ifindex == ifindex && a.mono > since {
			return a.mono
		}
	}
	return 0
}

// TestCrossFamilyHandover: a TCP stream and a UDP echo exchange from the CN to the MN keep
// running while the MN moves, make-before-break, from IPv6 to its IPv4-only network behind
// R's NAT and back to IPv6: the MN lists its IPv4 locator in its LU, the LU and its ACK cross
// the NAT encapsulated, the CN learns the NAT's endpoint from the nonce-verified LU and data,
// and no UDP datagram is lost. A forged encapsulated packet with a wrong nonce changes
// nothing. The handover duration the HIP seed measures (first LU sent to the first data packet
// received on the new locator) is logged for both moves.
//
// bbm: the same moves break-before-make (the old network goes before the new one comes):
// the sessions survive, and the datagrams in flight during the gap are lost (logged).
func TestCrossFamilyHandover(t *testing.T) {
	t.Run("mbb", func(t *testing.T) { testCrossFamily(t, false) })
	t.Run("bbm", func(t *testing.T) { testCrossFamily(t, true) })
}

func testCrossFamily(t *testing.T, bbm bool) {
	n := newCrossFamilyNet(t)
	mn1, mn2 := n.MN.Ifindex("mn1"), n.MN.Ifindex("mn2")
	flowsStart := timeline.Now()
	addr, err := resolve(n.CN, "mn") // registers the MN as a peer at the CN
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	ln := n.MN.Listen("tcp6", "[::]:5001")
	defer ln.Close()
	var tcpBytes atomic.Int64
	tcpErr := make(chan error, 2)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			tcpErr <- err
			return
		}
		defer c.Close()
		if err := nstest.ReadPattern(ctx, c, &tcpBytes); err != nil && ctx.Err() == nil {
			tcpErr <- fmt.Errorf("TCP receiver: %w", err)
		}
	}()
	tc := n.CN.Dial("tcp6", netip.AddrPortFrom(addr, 5001).String())
	defer tc.Close()
	go func() {
		if err := nstest.WritePattern(ctx, tc, 16<<10, 8*time.Millisecond); err != nil && ctx.Err() == nil {
			tcpErr <- fmt.Errorf("TCP sender: %w", err)
		}
	}()
	echo := &udpEcho{}
	srv := n.MN.ListenPacket("udp6", "[::]:5002")
	defer srv.Close()
	go echo.serve(srv)
	uc := n.CN.Dial("udp6", netip.AddrPortFrom(addr, 5002).String())
	defer uc.Close()
	var udpSent, udpEchoed atomic.Int64
	var sentMu sync.Mutex
	sentAt := map[uint64]int64{} // CLOCK_MONOTONIC send time by sequence number
	echoed := map[uint64]bool{}
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		msg := make([]byte, 1200)
		for ctx.Err() == nil {
			seq := uint64(udpSent.Add(1))
			binary.BigEndian.PutUint64(msg, seq)
			sentMu.Lock()
			sentAt[seq] = timeline.Now()
			sentMu.Unlock()
			if _, err := uc.Write(msg); err != nil {
				udpSent.Add(-1)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, err := uc.Read(buf)
			if err != nil {
				return
			}
			if n >= 8 {
				sentMu.Lock()
				echoed[binary.BigEndian.Uint64(buf)] = true
				sentMu.Unlock()
			}
			udpEchoed.Add(1)
		}
	}()
	progress := func(phase string) {
		t.Helper()
		tcp0, udp0 := tcpBytes.Load(), udpEchoed.Load()
		n.waitFor(10*time.Second, phase+": TCP and UDP progress", func() (bool, string) {
			select {
			case err := <-tcpErr:
				t.Fatalf("%s: %v", phase, err)
			default:
			}
			return tcpBytes.Load() > tcp0+1<<20 && udpEchoed.Load() > udp0+300,
				fmt.Sprintf("TCP %d bytes, UDP %d echoed", tcpBytes.Load()-tcp0, udpEchoed.Load()-udp0)
		})
		t.Logf("%s: TCP %d bytes, UDP %d sent / %d echoed", phase, tcpBytes.Load(), udpSent.Load(), udpEchoed.Load())
	}
	cnActive := func(what string, ok func(wire.L64) bool) wire.L64 {
		t.Helper()
		var got wire.L64
		n.waitFor(5*time.Second, "CN's session with the MN "+what, func() (bool, string) {
			s := n.cn.session(t, mnNID)
			l, err := wire.ParseL64(s.ActiveRemote)
			got = l
			return err == nil && ok(l), fmt.Sprintf("%+v", s)
		})
		return got
	}
	progress("IPv6")

	// To the IPv4 network behind the NAT (DHCP's work done by hand when the link comes up),
	// leaving IPv6 after (mbb) or before (bbm).
	leave6 := timeline.Now()
	if bbm {
		n.MN.Run("ip", "link", "set", "mn1", "down")
	}
	// The link first; a DHCP client gets its lease over it (four messages: the link works
	// before the address exists, here 200 ms), then installs address and router at once
	// (ilnpd holds the locator back until the router is there). Without the pause, on a
	// loaded machine the ARP for R sometimes went out before the new link carried frames
	// and was retried only a second later.
	n.MN.Run("ip", "link", "set", "mn2", "up")
	time.Sleep(200 * time.Millisecond)
	enter4 := timeline.Now()
	n.MN.Run("sh", "-c", "ip addr add 10.0.0.2/24 dev mn2 && ip route add default via 10.0.0.1 dev mn2")
	n.waitMNAck(t, enter4, 5*time.Second)
	nat := cnActive("on the NAT's endpoint", func(l wire.L64) bool {
		ep, ok := encap.Endpoint(l)
		return ok && ep.Addr() == natIP
	})
	t.Logf("the CN reaches the MN at %v (the NAT's endpoint)", nat)
	if !bbm {
		leave6 = timeline.Now()
		n.MN.Run("ip", "link", "set", "mn1", "down")
		n.waitMNAck(t, leave6, 5*time.Second)
	}
	progress("IPv4 behind the NAT")
	// ilnpctl shows the family of locators and sessions.
	if s := n.mn.session(t, cnNID); s.Family != "ipv4" || !strings.HasPrefix(s.ActiveLocal, "0000:") || !strings.HasPrefix(s.ActiveRemote, "0000:") {
		t.Errorf("MN's session on IPv4: family %q, active %s -> %s, want IPv4 locators", s.Family, s.ActiveLocal, s.ActiveRemote)
	}
	if s := n.cn.session(t, mnNID); s.Family != "ipv4" {
		t.Errorf("CN's session with the MN behind the NAT: family %q, want ipv4", s.Family)
	}
	if rows, err := n.mn.locators(); err != nil {
		t.Error(err)
	} else {
		mn4, _ := encap.L32(netip.MustParseAddrPort("10.0.0.2:49191"))
		for _, r := range rows {
			if want := encap.Family(mustL64(r.Locator)); r.Family != want || (mustL64(r.Locator) == mn4) != (want == "ipv4") {
				t.Errorf("MN locator %s: family %q, want %q", r.Locator, r.Family, want)
			}
		}
		if stateOf(rows, mn4) != "active" {
			t.Errorf("MN's IPv4 locator %v not active: %+v", mn4, rows)
		}
	}
	if !bbm {
		forgeEncapsulated(t, n, nat)
	}

	// Back to IPv6: mn1 up again (its RA makes L2 anew), the IPv4 network going after (mbb)
	// or before (bbm).
	leave4 := timeline.Now()
	if bbm {
		n.MN.Run("ip", "link", "set", "mn2", "down")
	}
	enter6 := timeline.Now()
	n.MN.Run("ip", "link", "set", "mn1", "up")
	if !bbm {
		n.waitMNAck(t, enter6, 5*time.Second)
	}
	// bbm: the CN applies the LU at once. R's neighbour entry for L2 is still INCOMPLETE
	// (the CN kept sending there until the LU from IPv4, and R resolves for 3 s with 1 s
	// between its solicitations), so the ACK and the data would wait at R for up to a second
	// if the MN did not announce L2 with an unsolicited NA when it formed (internal/locators,
	// announce.go). Should that NA be lost, the LU engine's timeout, adapted to this sub-ms
	// RTT, may give up first (lu_gave_up): tolerated here, the CN's switch is what counts.
	cnActive("on L2", func(l wire.L64) bool { return l == l2 })
	if !bbm {
		leave4 = timeline.Now()
		n.MN.Run("ip", "link", "set", "mn2", "down")
		n.waitMNAck(t, leave4, 5*time.Second)
	}
	progress("IPv6 again")
	if s := n.cn.session(t, mnNID); s.Family != "ipv6" {
		t.Errorf("CN's session with the MN back on IPv6: family %q", s.Family)
	}

	cancel()
	<-sendDone
	time.Sleep(200 * time.Millisecond) // the last echoes come back
	if lost := udpSent.Load() - udpEchoed.Load(); bbm {
		t.Logf("UDP: %d of %d datagrams lost across the break-before-make moves (echo exchange)", lost, udpSent.Load())
	} else if lost != 0 {
		t.Errorf("UDP: %d of %d datagrams lost across the make-before-break moves (echo exchange), want 0", lost, udpSent.Load())
		// Where: sent how long after which move, and lost on the way to the MN or back.
		arrived := map[uint64]bool{}
		echo.mu.Lock()
		for _, a := range echo.arrivals {
			arrived[a.seq] = true
		}
		echo.mu.Unlock()
		moves := []struct {
			name string
			at   int64
		}{{"enter IPv4", enter4}, {"leave IPv6", leave6}, {"enter IPv6", enter6}, {"leave IPv4", leave4}}
		sentMu.Lock()
		for seq := uint64(1); seq <= uint64(udpSent.Load()); seq++ {
			if echoed[seq] {
				continue
			}
			where := "on the way back"
			if !arrived[seq] {
				where = "on the way to the MN"
			}
			after := "before the moves"
			for _, m := range moves {
				if sentAt[seq] >= m.at {
					after = fmt.Sprintf("%.1f ms after %s", float64(sentAt[seq]-m.at)/1e6, m.name)
				}
			}
			t.Logf("UDP datagram %d lost %s, sent %s", seq, where, after)
		}
		sentMu.Unlock()
		for _, d := range []*daemon{n.mn, n.cn} {
			if evs, err := d.events(); err == nil {
				t.Logf("%s events since the flows began (IPv4 entered at +%.1f ms):\n%s", d.name, float64(enter4-flowsStart)/1e6, formatEvents(evs, flowsStart))
			}
		}
	}
	t.Logf("UDP: %d sent, %d echoed", udpSent.Load(), udpEchoed.Load())

	// Handover durations at the MN: its first LU after the move to the first datagram that
	// arrived on the new locator's interface.
	evs, err := n.mn.events()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		name    string
		since   int64
		ifindex int
	}{{"IPv6 -> IPv4 (NAT)", enter4, mn2}, {"IPv4 (NAT) -> IPv6", enter6, mn1}} {
		i := slices.IndexFunc(evs, func(e timeline.Event) bool { return e.Kind == timeline.LUSent && e.MonoNS > m.since })
		if i < 0 {
			t.Errorf("%s: no LU sent", m.name)
			continue
		}
		first := echo.firstOn(m.ifindex, evs[i].MonoNS)
		if first == 0 {
			t.Errorf("%s: no datagram on the new locator", m.name)
			continue
		}
		t.Logf("handover %s: %.2f ms from the first LU to the first datagram on the new locator (move to LU %.2f ms)",
			m.name, float64(first-evs[i].MonoNS)/1e6, float64(evs[i].MonoNS-m.since)/1e6)
	}

	for _, d := range []*daemon{n.cn, n.mn} {
		st, err := d.stats()
		if err != nil {
			t.Fatal(err)
		}
		bads := []string{"dp_encap_egress_too_big", "dp_encap_egress_errors", "dp_encap_egress_no_local_l32",
			"dp_encap_ingress_errors", "dp_encap_ingress_truncated", "dp_encap_ingress_bad_checksum", "lu_send_errors"}
		if !bbm {
			bads = append(bads, "lu_gave_up")
		} else if st["lu_gave_up"] != 0 {
			t.Logf("%s: lu_gave_up = %d (break-before-make back to IPv6, above)", d.name, st["lu_gave_up"])
		}
		for _, bad := range bads {
			if st[bad] != 0 {
				t.Errorf("%s: %s = %d", d.name, bad, st[bad])
				if bad == "lu_send_errors" {
					t.Logf("%s's log on sending LUs and ACKs:\n%s", d.name, grepFile(d.log, "send", "Locator Update"))
				}
			}
		}
		if st["dp_encap_egress_packets"] < 100 || st["dp_encap_ingress_decapsulated"] < 100 {
			t.Errorf("%s: %d packets encapsulated, %d decapsulated", d.name, st["dp_encap_egress_packets"], st["dp_encap_ingress_decapsulated"])
		}
		t.Logf("%s: %d packets encapsulated, %d decapsulated", d.name, st["dp_encap_egress_packets"], st["dp_encap_ingress_decapsulated"])
	}

	// The CN opened the session and the MN answered its challenge (the default opportunistic
	// mode then limits what the MN announces): the MN's IPv4 NAT endpoint was unverified
	// until it echoed a challenge sent through the encapsulation, and nothing was believed.
	// (The MN's private IPv4 address, which an LU from its IPv6 locator lists, stays
	// unverified: announced from elsewhere, it has no credit for a challenge.)
	st, err := n.cn.stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CN: challenges %d, echoes %d, unverified %d, verified %d, believed %d, challenge errors %d; datapath rerouted %d, dropped for credit %d",
		st["lv_challenges_sent"], st["lv_echoes"], st["lv_locators_unverified"], st["lv_locators_verified"], st["lv_locators_believed"],
		st["lv_challenge_errors"], st["dp_egress_unverified_rerouted"], st["dp_egress_unverified_credit"])
	if st["lv_locators_verified"] < 1 || st["lv_echoes"] != st["lv_challenges_sent"] ||
		st["lv_locators_believed"] != 0 || st["lv_challenge_errors"] != 0 || (!bbm && st["dp_egress_unverified_credit"] != 0) {
		t.Errorf("CN: %d verified, %d of %d challenges echoed, %d believed, %d challenge errors, %d dropped for credit: want the IPv4 endpoint challenged and verified (nothing dropped make-before-break)",
			st["lv_locators_verified"], st["lv_echoes"], st["lv_challenges_sent"], st["lv_locators_believed"], st["lv_challenge_errors"],
			st["dp_egress_unverified_credit"])
		t.Logf("CN's log on locator verification:\n%s", grepFile(n.cn.log, "locator verified", "locator unverified", "locator challenge"))
	}
}

// forgeEncapsulated sends, from R (the NAT's public address), three ILNP packets from the MN's
// NID with a wrong nonce inside UDP/IPv4 to the CN's encapsulation port, and checks that the
// CN dropped them as bad nonces and that its session with the MN is unchanged.
func forgeEncapsulated(t *testing.T, n *testNet, from wire.L64) {
	t.Helper()
	before := n.cn.session(t, mnNID)
	st, err := n.cn.stats()
	if err != nil {
		t.Fatal(err)
	}
	bad0 := st["dp_ingress_bad_nonce"]
	to, err := encap.L32(netip.AddrPortFrom(cn4, encap.DefaultPort))
	if err != nil {
		t.Fatal(err)
	}
	src, dst := wire.ILV{Locator: from, NID: mnNID}, wire.ILV{Locator: to, NID: cnNID}
	zero := func(v wire.ILV) netip.Addr { return wire.ILV{NID: v.NID}.Addr() } // RFC 6744 s.3 pseudo-header
	l4 := wire.AppendUDP(nil, zero(src), zero(dst), 5002, 40000, []byte("forged"))
	nonce, err := wire.NonceFromBytes([]byte{0xde, 0xad, 0xbe, 0xef})
	if err != nil {
		t.Fatal(err)
	}
	pkt := wire.AppendILNPPacket(nil, src, dst, nonce, wire.ProtoUDP, l4)
	if err := n.R.Do(func() error {
		c, err := net.ListenPacket("udp4", natIP.String()+":0")
		if err != nil {
			return err
		}
		defer c.Close()
		for i := 0; i < 3; i++ {
			if _, err := c.WriteTo(pkt, &net.UDPAddr{IP: cn4.AsSlice(), Port: encap.DefaultPort}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	n.waitFor(3*time.Second, "the CN dropping the forged packets as bad nonces", func() (bool, string) {
		st, err := n.cn.stats()
		return err == nil && st["dp_ingress_bad_nonce"] >= bad0+3, fmt.Sprint(st["dp_ingress_bad_nonce"], err)
	})
	after := n.cn.session(t, mnNID)
	if after.ActiveRemote != before.ActiveRemote || after.RemoteLocators != before.RemoteLocators {
		t.Fatalf("forged packets changed the CN's session: %s %s -> %s %s", before.ActiveRemote, before.RemoteLocators,
			after.ActiveRemote, after.RemoteLocators)
	}
}
