package lab

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/lab/pcap"
	"ilnp/lab/summary"
)

// runPeer does one test-profile repetition of a peer mode on lan-lan and returns its run,
// its peer.json and the repetition's directory.
func runPeer(t *testing.T, mode, traffic string) (summary.Run, PeerInfo, string) {
	t.Helper()
	requireLab(t)
	switch mode {
	case "mptcp":
		nstest.RequireTool(t, "mptcpize", MPTCPd)
	case "wireguard":
		nstest.RequireTool(t, "wireguard-go", "wg")
	}
	out := t.TempDir()
	rep := filepath.Join(out, "rep-1")
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, f := range []string{"run.json", "result.json", "peer.json", "mptcpd-mn.log", "wireguard-go-mn.log", "wireguard-go-cn.log", "iperf3-client.log"} {
			if b, err := os.ReadFile(filepath.Join(rep, f)); err == nil {
				t.Logf("%s:\n%s", f, b)
			}
		}
	})
	s, err := Run(context.Background(), RunConfig{Scenario: "lan-lan", Mode: mode, Traffic: traffic, Profile: testProfile, Reps: 1, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := summary.Read(filepath.Join(out, "summary.json")); err != nil {
		t.Fatalf("summary.json breaks the contract: %v", err)
	}
	leftovers(t, out)
	info, err := ReadPeerInfo(filepath.Join(rep, "peer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return s.Runs[0], info, rep
}

// deliveredOnL3 counts CN -> MN data packets the MN's capture saw arriving at its L3
// address (as captured, before the mode's rewriting).
func deliveredOnL3(t *testing.T, path string) int {
	t.Helper()
	l3 := Addr(L3, MNNID).As16()
	n := 0
	if err := eachPcapPacket(path, func(r *rawPacket) {
		if r.pkt.Dir != pcap.DirOutgoing && r.pkt.Dst == l3 && r.pkt.Payload > 100 {
			n++
		}
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func checkFilled(t *testing.T, r summary.Run, udp bool) {
	t.Helper()
	if r.SessionSurvived == nil || !*r.SessionSurvived {
		t.Errorf("session did not survive the move: %v", r.SessionSurvived)
	}
	if r.HandoffDelayMs == nil || *r.HandoffDelayMs <= 0 || *r.HandoffDelayMs > 2000 {
		t.Errorf("handoff_delay_ms %v, want (0, 2000]", r.HandoffDelayMs)
	}
	// Generous: the move costs these modes at most a few hundred ms on lan-lan.
	if r.InterruptionMs == nil || *r.InterruptionMs > 3000 {
		t.Errorf("interruption_ms %v, want <= 3000", r.InterruptionMs)
	}
	if r.LUSent != nil {
		t.Errorf("lu_sent %d in a mode without LUs", *r.LUSent)
	}
	if udp {
		if r.UDPLost == nil || r.UDPSent == nil || *r.UDPSent < 100 || *r.UDPLost > *r.UDPSent/4 {
			t.Errorf("udp_sent %v udp_lost %v: want a flow with at most a quarter lost", r.UDPSent, r.UDPLost)
		}
		return
	}
	if r.TCPRetransmissions == nil || r.TCPLost == nil || r.TCPWindowGoodputBps == nil || *r.TCPWindowGoodputBps <= 1e6 {
		t.Errorf("tcp_retransmissions %v tcp_lost %v tcp_window_goodput_bps %v: want all filled, goodput > 1 Mbit/s",
			r.TCPRetransmissions, r.TCPLost, r.TCPWindowGoodputBps)
	}
}

// TestModeMPTCPMove: a TCP flow through mptcpize survives the move on a subflow the CN
// opened to the MN's announced L3 address, measured by data sequence number (about 25 s).
func TestModeMPTCPMove(t *testing.T) {
	r, info, rep := runPeer(t, "mptcp", "tcp")
	checkFilled(t, r, false)
	if n := deliveredOnL3(t, filepath.Join(rep, "mn-wire.pcap")); n < 100 {
		t.Errorf("%d CN -> MN segments arrived at L3: the L3 subflow carried nothing", n)
	}
	// DSS: at least a 4-byte header + 4-byte DSN + 4-byte SSN + length, padded.
	if v := info.OverheadBytesPerPacket; v == nil || *v < 8 || *v > 40 {
		t.Errorf("MPTCP option overhead %v bytes per segment, want [8, 40]", v)
	}
}

// TestModeWireGuardMove: bidirectional UDP over wireguard-go survives the move, the CN
// learning the MN's L3 endpoint by roaming (about 25 s).
func TestModeWireGuardMove(t *testing.T) {
	r, info, rep := runPeer(t, "wireguard", "udp-hd")
	checkFilled(t, r, true)
	if n := deliveredOnL3(t, filepath.Join(rep, "mn-wire.pcap")); n < 100 {
		t.Errorf("%d WireGuard packets from the CN arrived at L3: the CN did not roam", n)
	}
	// Outer IPv6 40 + UDP 8 + header 16 + tag 16, plus up to 15 bytes of padding.
	if v := info.OverheadBytesPerPacket; v == nil || *v < 80 || *v > 96 {
		t.Errorf("WireGuard overhead %v bytes per packet, want [80, 96]", v)
	}
	if info.Keepalive != WGKeepaliveNote {
		t.Errorf("peer.json keepalive %q", info.Keepalive)
	}
}

// TestModeMPTCPFailover: a multihomed MN (both links up, L2 the preferred uplink, L3 an MPTCP
// `signal backup` endpoint) under a TCP flow through mptcpize; R1 silently drops everything
// over R1-R2 from 3 s on. The flow went via L2 before the failure, fails over to the backup
// subflow via L3, and failover_ms (the field ILNP's multihomed runs fill) is a number within a
// generous bound (about 20 s).
func TestModeMPTCPFailover(t *testing.T) {
	requireLab(t)
	nstest.RequireTool(t, "mptcpize", MPTCPd)
	// The backup subflow exists only once the CN has acted on the MN's ADD_ADDR for L3, which
	// crosses L2 after the flow began; a run in which not one packet had crossed L3 before the
	// failure has no backup to fail over to and measures nothing: it is run again, once.
	for attempt := 1; ; attempt++ {
		if mptcpFailoverRun(t, attempt == 2) || attempt == 2 {
			return
		}
		t.Logf("attempt %d: no packet via L3 before the failure (the backup subflow was not set up yet): run again", attempt)
	}
}

// mptcpFailoverRun runs one multihomed MPTCP run with R1-R2 silent from 3 s and checks it; it
// returns false, without failing, when no packet crossed L3 before the failure and last is
// not set.
func mptcpFailoverRun(t *testing.T, last bool) bool {
	out := t.TempDir()
	explainFailure(t, out)
	// 12 s after the failure: two clean-clone CI runs saw no failover within the 4 s a 7-s flow
	// left (MPTCP marks a subflow stale after some RTOs, which back off).
	prof := Profile{"test", 15 * time.Second, 2 * time.Second, 5 * time.Second, 300 * time.Millisecond, 600 * time.Millisecond}
	s, err := Run(context.Background(), RunConfig{Scenario: "lan-lan", Mode: "mptcp", Traffic: "tcp", Profile: prof, Reps: 1,
		Out: out, Multihome: true, Fails: []Fail{{FailR2Silent, 3 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	meta := leftovers(t, out)
	if _, err := summary.Read(filepath.Join(out, "summary.json")); err != nil {
		t.Fatalf("summary.json breaks the contract: %v", err)
	}
	r := s.Runs[0]
	t.Logf("mptcp multihomed, r2-silent@3s: %s", describe(r))
	if !meta.Multihome || len(meta.FailedAtS) != 1 {
		t.Fatalf("run.json: %+v", meta)
	}
	mn, err := readPcap(filepath.Join(out, "rep-1", "mn-wire.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, meta.T0UnixNS)
	failed := meta.FailedAtS[0]
	var beforeL2, beforeL3, afterL3, anyL3Before int
	for _, p := range mn {
		if p.Proto != pcap.ProtoTCP {
			continue
		}
		at := p.Time.Sub(t0).Seconds()
		if at < failed && (in64(p.Dst, L3.Addr().As16()) || in64(p.Src, L3.Addr().As16())) {
			anyL3Before++
		}
		if p.Dir == pcap.DirOutgoing || p.Payload < 1000 {
			continue
		}
		switch {
		case at < failed && in64(p.Dst, L2.Addr().As16()):
			beforeL2++
		case at < failed && in64(p.Dst, L3.Addr().As16()):
			beforeL3++
		case at > failed+1 && in64(p.Dst, L3.Addr().As16()):
			afterL3++
		}
	}
	if anyL3Before == 0 && !last {
		return false
	}
	// L3 is the backup: before the failure it carries (almost) nothing.
	if beforeL2 < 1000 || beforeL3 > beforeL2/20 {
		t.Errorf("before the failure %d full segments via L2, %d via L3: want the flow on L2, the preferred uplink", beforeL2, beforeL3)
	}
	if r.FailoverMs == nil && afterL3 == 0 {
		// Not understood yet: in about one run in three on a loaded machine (3 of 9 this stop,
		// clean-clone CI included) the kernel's MPTCP never moved the flow to the backup subflow
		// it had set up, and the connection stalled until the run ended. The lab counts such a
		// run as "no failover" (peers.json failover_none), which is what this checks here.
		if anyL3Before == 0 {
			t.Errorf("no packet via L3 before the failure in two runs: the backup endpoint was never used")
		}
		t.Logf("no failover in this run: %d packets via L3 before the failure, none with data after it (failover_ms null, as the lab reports it)", anyL3Before)
		return true
	}
	// MPTCP marks the L2 subflow stale after some retransmission timeouts and sends on the
	// backup: 0.3 s measured here idle; the bound leaves room for RTOs backed off on a loaded
	// machine.
	if r.FailoverMs == nil || *r.FailoverMs <= 0 || *r.FailoverMs > 10000 {
		t.Errorf("failover_ms %v, want within (0, 10000]", fmtPtr(r.FailoverMs))
	}
	if afterL3 < 500 {
		t.Errorf("%d full segments via L3 from 1 s after the failure (%d packets via L3 before it): the backup subflow did not carry the flow", afterL3, anyL3Before)
	}
	return true
}
