package node_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"ilnp/internal/bpffs"
	"ilnp/internal/datapath"
	"ilnp/internal/nstest"
	"ilnp/internal/paths"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// The issue's bound: a pair that stops delivering is dead, and its flows delivered on another
// pair, within 1 RTT + 100 ms of its last delivery. The RTT here is well under a millisecond
// (rttHere). Every check below measures with the protocol's own clocks (the datapath's
// timestamps in the daemon's verdict, the kernel's receive timestamps of the UDP echoes, TCP's
// own retransmission-timeout counters), not with when the test's goroutines got to run, and
// subtracts what the test's own sender adds (a late send delays the first echo after the switch
// by as much).
const (
	issueBound = 100 * time.Millisecond
	rttHere    = time.Millisecond
	// lateLU: the MN's LU to the CN (one hop each way, the CN's daemon applying it) after the
	// MN's verdict, for the CN's switch counted from the failure.
	lateLU = 10 * time.Millisecond
)

// udpProbeFlow sends a numbered datagram every 5 ms and records when each echo came back
// (the kernel's receive timestamp) and when each datagram left.
type udpProbeFlow struct {
	mu   sync.Mutex
	got  []time.Time // kernel arrival of every echo, in order
	sent []time.Time // every send (after the write returned)
	n    atomic.Int64
}

const udpPeriod = 5 * time.Millisecond

func (f *udpProbeFlow) run(ctx context.Context, conn *net.UDPConn) {
	raw, err := conn.SyscallConn()
	if err == nil {
		_ = raw.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) })
	}
	go func() {
		buf, oob := make([]byte, 64), make([]byte, 128)
		for {
			_, oobn, _, _, err := conn.ReadMsgUDP(buf, oob)
			if err != nil {
				return
			}
			at := time.Now()
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, m := range msgs {
					if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
						at = time.Unix(int64(binary.NativeEndian.Uint64(m.Data)), int64(binary.NativeEndian.Uint64(m.Data[8:])))
					}
				}
			}
			f.mu.Lock()
			f.got = append(f.got, at)
			f.mu.Unlock()
		}
	}()
	tick := time.NewTicker(udpPeriod)
	defer tick.Stop()
	msg := make([]byte, 64)
	for ctx.Err() == nil {
		binary.BigEndian.PutUint64(msg, uint64(f.n.Add(1)))
		_, _ = conn.Write(msg)
		f.mu.Lock()
		f.sent = append(f.sent, time.Now())
		f.mu.Unlock()
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// gapAround returns the longest time without an echo between from and to, and the last echo
// before it (the last delivery on the failed path) and the first after it.
func (f *udpProbeFlow) gapAround(from, to time.Time) (gap time.Duration, last, first time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 1; i < len(f.got); i++ {
		a, b := f.got[i-1], f.got[i]
		if b.Before(from) || a.After(to) {
			continue
		}
		if d := b.Sub(a); d > gap {
			gap, last, first = d, a, b
		}
	}
	return gap, last, first
}

// sendLate is how much longer than its period the sender's longest pause between from and to
// was (the test's own delay, not the failover's).
func (f *udpProbeFlow) sendLate(from, to time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var late time.Duration
	for i := 1; i < len(f.sent); i++ {
		if f.sent[i].Before(from) || f.sent[i-1].After(to) {
			continue
		}
		late = max(late, f.sent[i].Sub(f.sent[i-1])-udpPeriod)
	}
	return late
}

func (f *udpProbeFlow) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.got)
}

// pathEvents returns the daemon's path_state events that end in state to.
func pathEvents(t *testing.T, d *daemon, to string) []timeline.Event {
	t.Helper()
	evs, err := d.events()
	if err != nil {
		t.Fatal(err)
	}
	var out []timeline.Event
	for _, e := range evs {
		if e.Kind == paths.EventKind && strings.HasSuffix(e.Detail, "-> "+to) {
			out = append(out, e)
		}
	}
	return out
}

// TestSilentPathFailover: a multihomed MN (both access links up, two locators, the preference
// policy: under the thesis's newest policy a second locator is a move in progress and the CN
// is not told of the other one until it is needed) with a TCP and a UDP flow to the CN; the router stops forwarding anything to or from the MN's active link
// without any link going down (the RAs keep coming). Both ends declare the pair dead within
// RTT + 100 ms of its last delivery, the flows move to the other locator (the MN's LU tells the
// CN), and the pair comes back when the router forwards again.
func TestSilentPathFailover(t *testing.T) {
	nstest.RequireTool(t, "nft")
	// The CN with mobility-aware TCP: the MN's LU after a failover still lists the failed
	// locator (demoted), and the CN must not keep its packets on it (tcpaware.RemotePins).
	n := newTestNetConf(t, "soft", map[string]string{"mn": "policy preference\n", "cn": "tcp-aware on\n"})
	n.MN.Run("ip", "link", "set", "mn2", "up")
	n.waitFor(15*time.Second, "MN multihomed: L3 active, L2 valid", func() (bool, string) {
		rows, err := n.mn.locators()
		return err == nil && stateOf(rows, l3) == "active" && stateOf(rows, l2) == "valid", fmt.Sprint(rows, err)
	})

	// The MN resolves the CN (its datapath then knows it as an ILNP peer) and opens the
	// session: dialled by address alone, the first SYN would go out as plain IPv6 and the
	// CN's nonce-carrying answer open the session from the CN's side, which can learn the
	// MN's nonce only from L2 (the locator it sent to; bpf: only the initiator's own choice
	// vouches for it) while the MN answers from its active L3.
	cnAddr, err := resolve(n.MN, "cn")
	if err != nil || cnAddr != ilv(l1, cnNID) {
		t.Fatalf("resolve cn on the MN: %v %v", cnAddr, err)
	}
	ln := n.CN.Listen("tcp", fmt.Sprintf("[%s]:5201", cnAddr))
	defer ln.Close()
	udpSrv := n.CN.ListenPacket("udp", fmt.Sprintf("[%s]:5202", cnAddr))
	defer udpSrv.Close()
	go nstest.EchoUDP(udpSrv)
	sink := n.CN.Listen("tcp", fmt.Sprintf("[%s]:5203", cnAddr)) // the multipath flows
	defer sink.Close()
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	var received atomic.Int64
	readErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			readErr <- err
			return
		}
		defer c.Close()
		readErr <- nstest.ReadPattern(context.Background(), c, &received)
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tcp := n.MN.Dial("tcp", fmt.Sprintf("[%s]:5201", cnAddr))
	defer tcp.Close()
	writeErr := make(chan error, 1)
	go func() { writeErr <- nstest.WritePattern(ctx, tcp, 4096, time.Millisecond) }() // ~32 Mbit/s
	// The UDP socket uses the TCP connection's address: one session view for both flows.
	var udp *net.UDPConn
	if err := n.MN.Do(func() error {
		var err error
		d := net.Dialer{LocalAddr: &net.UDPAddr{IP: tcp.LocalAddr().(*net.TCPAddr).IP}}
		c, err := d.Dial("udp", fmt.Sprintf("[%s]:5202", cnAddr))
		if err == nil {
			udp = c.(*net.UDPConn)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	t.Logf("TCP %v -> %v, UDP %v -> %v", tcp.LocalAddr(), tcp.RemoteAddr(), udp.LocalAddr(), udp.RemoteAddr())
	var flow udpProbeFlow
	go flow.run(ctx, udp)

	n.waitFor(10*time.Second, "both flows on L3", func() (bool, string) {
		// The CN's daemon learns of the session from its datapath's event a moment after the
		// first packets: until then there is none to look at.
		rows, err := n.cn.sessions()
		var s sessionRow
		for _, r := range rows {
			if r.PeerNID == mnNID.String() {
				s = r
			}
		}
		return err == nil && flow.count() > 100 && received.Load() > 1<<20 && s.ActiveRemote == l3.String(),
			fmt.Sprintf("%+v %v echoes=%d bytes=%d", s, err, flow.count(), received.Load())
	})
	time.Sleep(500 * time.Millisecond)
	tcpBefore := tcpInfo(t, tcp)

	// The silent failure: R drops everything forwarded to or from the MN's second link.
	// One nft command, so that both directions fail at once; the failure is stamped before it
	// (its bounds below are then conservative by the command's run time).
	n.R.Run("nft", "add table inet ilnpfail")
	n.R.Run("nft", "add chain inet ilnpfail silent { type filter hook forward priority 0 ; policy accept ; }")
	failed, failedMono := time.Now(), timeline.Now()
	n.R.Run("nft", "add rule inet ilnpfail silent iifname r-mn2 drop ; add rule inet ilnpfail silent oifname r-mn2 drop")
	bytesAtFail := received.Load()
	var tcpResumed time.Time
	for deadline := failed.Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if received.Load() > bytesAtFail {
			tcpResumed = time.Now()
			break
		}
	}
	time.Sleep(1500 * time.Millisecond)
	tcpAfter := tcpInfo(t, tcp)

	t.Run("no false failure before", func(t *testing.T) {
		for _, d := range []*daemon{n.mn, n.cn} {
			for _, e := range pathEvents(t, d, "dead") {
				if e.MonoNS < failedMono {
					t.Errorf("%s: pair declared dead before the failure: %s", d.name, e.Detail)
				}
			}
		}
	})
	t.Run("MN moved to L2", func(t *testing.T) {
		rows, err := n.mn.locators()
		if err != nil || stateOf(rows, l2) != "active" {
			t.Fatalf("MN locators after the silent failure: %+v %v, want L2 active", rows, err)
		}
		if s := n.cn.session(t, mnNID); s.ActiveRemote != l2.String() {
			t.Fatalf("CN still sends to %s, want %s", s.ActiveRemote, l2)
		}
	})
	var figures []string
	var mnLate time.Duration
	t.Run("MN declared the pair dead in time", func(t *testing.T) {
		var l3dead *timeline.Event
		dead := pathEvents(t, n.mn, "dead")
		for i := range dead {
			if dead[i].MonoNS >= failedMono && strings.Contains(dead[i].Detail, l3.String()) {
				l3dead = &dead[i]
				break
			}
		}
		if l3dead == nil {
			t.Fatalf("no path_state dead event for a pair with %s: %+v", l3, dead)
		}
		since, late := time.Duration(l3dead.Duration), time.Duration(l3dead.Late)
		mnLate = late
		figures = append(figures, fmt.Sprintf("MN: dead %v after the last delivery (its polls %v late), %v after the failure (%s)",
			since.Round(time.Millisecond), late.Round(time.Millisecond), time.Duration(l3dead.MonoNS-failedMono).Round(time.Millisecond), l3dead.Detail))
		// The verdict's own clock: now minus the datapath's time of the pair's last receipt,
		// less what the host added by running the daemon's polls late (CI runs other packages'
		// tests beside this one: 124 ms once, 71-72 ms alone). A poll a second late would say
		// nothing about the rule: that fails too.
		if late < 0 || late > time.Second {
			t.Errorf("MN: the verdict's polls ran %v late", late)
		}
		if bound := issueBound + rttHere; since <= 0 || since-late > bound {
			t.Errorf("MN: pair declared dead %v after its last delivery (polls %v late), want within %v", since, late, bound)
		}
	})
	t.Run("CN moved to L2 in time", func(t *testing.T) {
		// By its own verdict on the pair or by the MN's LU, whichever comes first.
		evs, err := n.cn.events()
		if err != nil {
			t.Fatal(err)
		}
		var moved *timeline.Event
		for i, e := range evs {
			if e.Kind == timeline.ActiveLocator && e.MonoNS >= failedMono && e.Locator == l2.String() {
				moved = &evs[i]
				break
			}
		}
		if moved == nil {
			t.Fatalf("CN never made %s its destination after the failure", l2)
		}
		after := time.Duration(moved.MonoNS - failedMono)
		figures = append(figures, fmt.Sprintf("CN: sends to L2 %v after the failure", after.Round(time.Millisecond)))
		// Counted from just before the nft command (the failure takes effect later, and the
		// last delivery may follow it): conservative.
		// The MN's verdict, late by its polls' lateness, sends the LU.
		if bound := issueBound + rttHere + lateLU + mnLate; after > bound {
			t.Errorf("CN switched %v after the failure, want within %v (the MN's polls %v late)", after, bound, mnLate)
		}
	})
	t.Run("CN did not pin the failed locator", func(t *testing.T) {
		stats, err := n.cn.stats()
		if err != nil {
			t.Fatal(err)
		}
		if stats["tcpaware_remote_pins"] != 0 {
			t.Errorf("CN kept its packets on the failed locator for a probe's time (tcpaware_remote_pins %d)", stats["tcpaware_remote_pins"])
		}
	})
	t.Run("UDP flow switched within the bound", func(t *testing.T) {
		// The gap the failure opened: one that begins by the detection bound (a later one is
		// a scheduling stall on a loaded machine, not the failover).
		gap, last, first := flow.gapAround(failed.Add(-50*time.Millisecond), failed.Add(issueBound))
		late := flow.sendLate(last.Add(-udpPeriod), first)
		figures = append(figures, fmt.Sprintf("UDP: no echo for %v (kernel receive times; last %v after the failure, next %v after; the sender was up to %v late)",
			gap.Round(time.Millisecond), last.Sub(failed).Round(time.Millisecond), first.Sub(failed).Round(time.Millisecond), late.Round(time.Millisecond)))
		// From the last echo on the failed pair to the first on the other: the issue's
		// bound, plus one send period (the first datagram after the switch leaves up to one
		// period later) and however late the test's sender was beyond it.
		if bound := issueBound + rttHere + udpPeriod + late; gap > bound {
			t.Errorf("UDP echoes stopped for %v around the failure, want at most %v", gap, bound)
		}
		if after := flow.count(); after < 100 {
			t.Errorf("only %d echoes in all", after)
		}
	})
	t.Run("TCP flow survived", func(t *testing.T) {
		if tcpResumed.IsZero() {
			t.Fatalf("no TCP byte arrived within 5 s of the failure (%d before)", bytesAtFail)
		}
		rtos := tcpAfter.Total_rto - tcpBefore.Total_rto
		figures = append(figures, fmt.Sprintf("TCP: first new byte %v after the failure; the sender took %d retransmission timeouts (RTO %v before the failure), %v in RTO recovery",
			tcpResumed.Sub(failed).Round(time.Millisecond), rtos, time.Duration(tcpBefore.Rto)*time.Microsecond,
			time.Duration(tcpAfter.Total_rto_time-tcpBefore.Total_rto_time)*time.Millisecond))
		// TCP's own record: the flow had moved before its first retransmission timeout
		// (at least 200 ms after the last ACK) fired, so that one retransmission was
		// delivered and acknowledged; a second timeout (backed off, twice as long) would
		// mean the switch came after the first.
		if rtos > 1 {
			t.Errorf("TCP sender took %d retransmission timeouts across the failover, want at most 1", rtos)
		}
		if d := tcpResumed.Sub(failed); d > 2*time.Second {
			t.Errorf("TCP stalled %v", d)
		}
		before := received.Load()
		time.Sleep(300 * time.Millisecond)
		if received.Load() <= before {
			t.Errorf("TCP not flowing after the failover")
		}
	})

	// Restore: the probes (once a second per pair) find the pair again and the preference
	// policy (equal preferences: the newest first) brings the MN back to L3.
	n.R.Run("nft", "delete table inet ilnpfail")
	restored := time.Now()
	n.waitFor(5*time.Second, "MN back on L3", func() (bool, string) {
		rows, err := n.mn.locators()
		return err == nil && stateOf(rows, l3) == "active", fmt.Sprint(rows, err)
	})
	figures = append(figures, fmt.Sprintf("restore: back on L3 after %v", time.Since(restored).Round(time.Millisecond)))
	t.Run("flows after recovery", func(t *testing.T) {
		c0, b0 := flow.count(), received.Load()
		time.Sleep(500 * time.Millisecond)
		if flow.count() < c0+50 || received.Load() <= b0 {
			t.Errorf("after recovery: %d echoes, %d bytes in 500 ms", flow.count()-c0, received.Load()-b0)
		}
		if alive := pathEvents(t, n.mn, "alive"); len(alive) == 0 {
			t.Errorf("no path_state alive event on the MN")
		}
	})
	t.Run("ilnpctl show paths", func(t *testing.T) {
		var rows []paths.View
		time.Sleep(1100 * time.Millisecond) // flows are counted once a second
		if err := n.mn.showJSON("paths", &rows); err != nil {
			t.Fatal(err)
		}
		byPair := map[string]paths.View{}
		for _, r := range rows {
			if r.Peer == cnNID.String() {
				byPair[r.Local+"->"+r.Remote] = r
			}
		}
		act, idle := byPair[l3.String()+"->"+l1.String()], byPair[l2.String()+"->"+l1.String()]
		if len(byPair) != 2 || act.State != paths.Alive || idle.State != paths.Alive {
			t.Fatalf("MN paths to the CN: %+v, want L3->L1 and L2->L1 alive", rows)
		}
		if act.TxBytes < 1<<20 || act.RxBytes == 0 || act.RTTMs == nil || act.LastProofMsAgo == nil || *act.LastProofMsAgo > 100 {
			t.Errorf("active pair: %+v", act)
		}
		if act.Flows != 2 || idle.Flows != 0 {
			t.Errorf("flows: active pair %d (want 2: the TCP and the UDP socket), other %d (want 0)", act.Flows, idle.Flows)
		}
		if idle.TxBytes == 0 || idle.RxBytes == 0 {
			t.Errorf("the pair used during the failure shows no traffic: %+v", idle)
		}
		if out, err := n.mn.ctl("show", "paths"); err != nil || !strings.Contains(out, "alive") {
			t.Errorf("ilnpctl show paths: %v\n%s", err, out)
		}
	})
	t.Run("ilnpctl set policy", func(t *testing.T) {
		if out, err := n.mn.ctl("set", "policy", "bogus"); err == nil {
			t.Errorf("set policy bogus accepted: %s", out)
		}
		if out, err := n.mn.ctl("set", "policy", "quality"); err != nil {
			t.Fatalf("set policy quality: %v %s", err, out)
		}
		n.waitFor(3*time.Second, "policy event", func() (bool, string) {
			evs, err := n.mn.events()
			return err == nil && hasEvent(evs, timeline.HandoffMode, "policy preference -> quality"), fmt.Sprint(err)
		})
		out, err := n.mn.ctl("show", "config")
		if err != nil || !strings.Contains(out, "quality") {
			t.Errorf("show config after set policy: %v\n%s", err, out)
		}
	})
	t.Run("multipath spreads flows", func(t *testing.T) {
		for _, d := range []*daemon{n.mn, n.cn} { // both ends, as a flow's two directions
			if out, err := d.ctl("set", "policy", "multipath"); err != nil {
				t.Fatalf("%s: set policy multipath: %v %s", d.name, err, out)
			}
		}
		// A poll of each daemon writes the spread (its session flagged multipath): until both
		// have, every new flow takes the active pair. Waited for rather than slept on (a fixed
		// 500 ms failed once under load: all flows on one pair). Flows already running may
		// move to their pair once (a one-time reordering), so retransmissions are counted from
		// after a moment more.
		spreadAt := func(d *daemon, local, remote wire.NID) bool {
			dp, err := datapath.OpenPinned(bpffs.Locate(filepath.Join(d.state, "bpf"), d.state))
			if err != nil {
				t.Fatalf("%s: open pinned datapath: %v", d.name, err)
			}
			defer dp.Close()
			s, err := dp.GetSession(local, remote)
			return err == nil && s.Flags&datapath.SessionMultipath != 0
		}
		n.waitFor(10*time.Second, "both ends spreading", func() (bool, string) {
			mn, cn := spreadAt(n.mn, mnNID, cnNID), spreadAt(n.cn, cnNID, mnNID)
			return mn && cn, fmt.Sprintf("multipath flag: MN %v, CN %v", mn, cn)
		})
		time.Sleep(200 * time.Millisecond)
		rxOf := map[string]uint64{}
		tx := func() map[string]uint64 {
			var rows []paths.View
			if err := n.mn.showJSON("paths", &rows); err != nil {
				t.Fatal(err)
			}
			out := map[string]uint64{}
			for _, r := range rows {
				out[r.Local] = r.TxBytes
				rxOf[r.Local] = r.RxBytes
			}
			return out
		}
		before := tx()
		rxBefore := maps.Clone(rxOf)
		mctx, mcancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var retrans, reord atomic.Uint64
		const flows = 16
		for range flows {
			var c net.Conn
			if err := n.MN.Do(func() error { // from the session's view address, as the first flow
				var err error
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: tcp.LocalAddr().(*net.TCPAddr).IP}}
				c, err = d.Dial("tcp", fmt.Sprintf("[%s]:5203", cnAddr))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = nstest.WritePattern(mctx, c, 4096, 10*time.Millisecond)
				info := tcpInfo(t, c)
				retrans.Add(uint64(info.Total_retrans))
				reord.Add(uint64(info.Reord_seen))
			}()
		}
		time.Sleep(1500 * time.Millisecond)
		after := tx()
		mcancel()
		wg.Wait()
		for _, loc := range []string{l2.String(), l3.String()} {
			// The flow hash is the same at both ends: every flow's ACKs come back on the
			// pair its data left on (ACKs are about 2-4 % of the data's bytes; a pair whose
			// flows were answered on the other one would get only probes, under 0.1 %).
			if sent, got := after[loc]-before[loc], rxOf[loc]-rxBefore[loc]; got < sent/200 {
				t.Errorf("multipath: %d bytes sent from %s, only %d received on its pair: the flows' two directions took different pairs", sent, loc, got)
			}
			// Each flow sends 400 kB/s (4 KiB every 10 ms), ~600 kB in the 1.5 s; the hash
			// puts k of the flows on a pair, and a run with k = 1 (of 8 flows, as this test had
			// before) sent 630,106 bytes from the pair with one. So: at least one flow's
			// worth each: 0 or 16 flows on a pair in 2/65,536 of runs (with 8 flows it was
			// 2/256, and a run in CI under load put all 8 on one pair).
			if got := after[loc] - before[loc]; got < 256<<10 {
				t.Errorf("multipath: %d bytes sent from %s in 1.5 s of %d flows, want at least one flow's worth (256 KiB) on each pair", got, loc, flows)
			}
		}
		figures = append(figures, fmt.Sprintf("multipath: %d flows, 1.5 s: %d bytes from L2, %d from L3; reordering seen %d times, %d segments retransmitted (TLP included)", flows,
			after[l2.String()]-before[l2.String()], after[l3.String()]-before[l3.String()], reord.Load(), retrans.Load()))
		// tcpi_reord_seen counts the reorderings the sender detected: a flow split over two
		// pairs would show them (and retransmit for them).
		if r := reord.Load(); r != 0 {
			t.Errorf("multipath: the %d flows saw reordering %d times (a flow must stay on one pair)", flows, r)
		}
	})
	cancel()
	if err := <-writeErr; err != nil {
		t.Errorf("TCP writer: %v", err)
	}
	tcp.Close()
	select {
	case err := <-readErr:
		if err != nil {
			t.Errorf("TCP reader: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("TCP reader did not end")
	}
	for _, f := range figures {
		t.Log(f)
	}
	if t.Failed() {
		for _, d := range []*daemon{n.mn, n.cn} {
			evs, _ := d.events()
			for _, e := range evs {
				if e.Kind == paths.EventKind || e.Kind == timeline.ActiveLocator || e.Kind == timeline.LUSent || e.Kind == timeline.LocatorState {
					t.Logf("%s %d %s %s %s %s %dus", d.name, e.MonoNS/1e6, e.Kind, e.Locator, e.Peer, e.Detail, e.Duration/1000)
				}
			}
		}
	}
}

// tcpInfo is the connection's TCP_INFO.
func tcpInfo(t *testing.T, c net.Conn) unix.TCPInfo {
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Error(err)
		return unix.TCPInfo{}
	}
	var info *unix.TCPInfo
	var ierr error
	if err := raw.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil || ierr != nil || info == nil {
		t.Error(err, ierr)
		return unix.TCPInfo{}
	}
	return *info
}
