package lab

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"ilnp/lab/pcap"
	"ilnp/lab/summary"
)

func TestRecovery(t *testing.T) {
	mnNID, cnNID := nid64(MNNID), nid64(CNNID)
	move := time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return move.Add(time.Duration(ms) * time.Millisecond) }
	pkt := func(ms int, dir int, proto uint8, src, dst netip.Addr) pcap.Packet {
		return pcap.Packet{Time: at(ms), Dir: dir, Proto: proto, Src: src.As16(), Dst: dst.As16(), UDPSeq: -1}
	}
	cnOld, cnNew := Addr(L4, CNNID), Addr(L5, CNNID)
	mnOld, mnNew := Addr(L2, MNNID), Addr(L3, MNNID)
	in, out := pcap.DirIncoming, pcap.DirOutgoing
	for _, c := range []struct {
		name   string
		mn, cn []pcap.Packet
		want   float64 // < 0: nil
	}{
		{name: "later direction decides",
			mn: []pcap.Packet{pkt(40, in, pcap.ProtoTCP, cnNew, mnNew)},
			cn: []pcap.Packet{pkt(70, in, pcap.ProtoTCP, mnNew, cnNew)}, want: 70},
		{name: "old locators, signalling, sent copies and packets before the move do not count",
			mn: []pcap.Packet{
				pkt(-5, in, pcap.ProtoUDP, cnNew, mnNew),                           // before the later move
				pkt(10, in, pcap.ProtoTCP, cnOld, mnNew),                           // from the CN's old locator
				pkt(20, in, pcap.ProtoICMPv6, cnNew, mnNew),                        // an LU
				pkt(30, out, pcap.ProtoTCP, cnNew, mnNew),                          // leaving (impossible, but not an arrival)
				pkt(50, in, pcap.ProtoTCP, Addr(L5, "0214:4fff:fe20:0001"), mnNew), // another node
				pkt(1200, in, pcap.ProtoUDP, cnNew, mnNew),                         // the delivery
				pkt(1100, in, pcap.ProtoTCP, cnNew, Addr(L2, MNNID)),               // to the MN's old locator
			},
			cn: []pcap.Packet{pkt(900, in, pcap.ProtoUDP, mnNew, cnNew), pkt(800, in, pcap.ProtoUDP, mnOld, cnNew)}, want: 1200},
		{name: "interleaved capture: the earliest counts",
			mn: []pcap.Packet{pkt(300, in, pcap.ProtoTCP, cnNew, mnNew), pkt(200, in, pcap.ProtoTCP, cnNew, mnNew)},
			cn: []pcap.Packet{pkt(100, in, pcap.ProtoTCP, mnNew, cnNew)}, want: 200},
		{name: "one direction never recovered",
			mn: []pcap.Packet{pkt(40, in, pcap.ProtoTCP, cnNew, mnNew)},
			cn: []pcap.Packet{pkt(70, in, pcap.ProtoTCP, mnNew, cnOld)}, want: -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Recovery(c.mn, c.cn, mnNID, cnNID, L3, L5, move)
			switch {
			case c.want < 0 && got != nil:
				t.Fatalf("recovery %v ms, want none", *got)
			case c.want >= 0 && (got == nil || *got != c.want):
				t.Fatalf("recovery %v, want %v ms", got, c.want)
			}
		})
	}
}

// MIPv6's recovery: a flow packet from the peer arriving on the new care-of address, through
// the home agent's tunnel (the wire shows HA -> CoA, the decapsulated capture the inner HoA ->
// HoA) or route-optimised (CoA -> CoA on both).
func TestCareOfRecovery(t *testing.T) {
	mnNID, cnNID := nid64(MNNID), nid64(CNNID)
	move := time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return move.Add(time.Duration(ms) * time.Millisecond) }
	type rec struct{ wire, flow pcap.Packet }
	hdr := func(ms, dir int, proto uint8, src, dst netip.Addr) pcap.Packet {
		return pcap.Packet{Time: at(ms), Dir: dir, Proto: proto, Src: src.As16(), Dst: dst.As16(), UDPSeq: -1}
	}
	// tunnelled: outer from -> to (proto 41), inner src -> dst.
	tunnelled := func(ms, dir int, from, to, src, dst netip.Addr) rec {
		return rec{hdr(ms, dir, 41, from, to), hdr(ms, dir, pcap.ProtoUDP, src, dst)}
	}
	direct := func(ms, dir int, proto uint8, src, dst netip.Addr) rec {
		p := hdr(ms, dir, proto, src, dst)
		return rec{p, p}
	}
	haMN, haCN := netip.MustParseAddr(HomeAgentAddr), netip.MustParseAddr(CNHomeAgentAddr)
	hoaMN, hoaCN := HomeAddress(), CNHomeAddress()
	coaMN, coaCN := Addr(L3, MNNID), Addr(L5, CNNID)
	in, out := pcap.DirIncoming, pcap.DirOutgoing
	split := func(rs []rec) (wire, flow []pcap.Packet) {
		for _, r := range rs {
			wire, flow = append(wire, r.wire), append(flow, r.flow)
		}
		return wire, flow
	}
	for _, c := range []struct {
		name   string
		mn, cn []rec
		want   float64 // < 0: nil
	}{
		{name: "bidirectional tunnelling: the later direction decides",
			mn: []rec{tunnelled(1040, in, haMN, coaMN, hoaCN, hoaMN)},
			cn: []rec{tunnelled(1070, in, haCN, coaCN, hoaMN, hoaCN)}, want: 1070},
		{name: "signalling, own packets, other nodes, the home address and packets before the move do not count",
			mn: []rec{
				tunnelled(-5, in, haMN, coaMN, hoaCN, hoaMN),                           // before the later move
				direct(10, in, 135, haMN, coaMN),                                       // a BAck
				tunnelled(20, out, coaMN, haMN, hoaMN, hoaCN),                          // the MN's own, reverse-tunnelled
				tunnelled(30, in, haMN, coaMN, Addr(L5, "0214:4fff:fe20:0001"), hoaMN), // another node
				direct(40, in, pcap.ProtoUDP, hoaCN, hoaMN),                            // on the home address
				tunnelled(1200, in, haMN, coaMN, hoaCN, hoaMN),                         // the delivery
			},
			cn: []rec{tunnelled(900, in, haCN, coaCN, hoaMN, hoaCN)}, want: 1200},
		{name: "route-optimised deliveries count too",
			mn: []rec{direct(1500, in, pcap.ProtoTCP, coaCN, coaMN)},
			cn: []rec{tunnelled(1100, in, haCN, coaCN, hoaMN, hoaCN)}, want: 1500},
		{name: "one direction never recovered",
			mn: []rec{tunnelled(1040, in, haMN, coaMN, hoaCN, hoaMN)},
			cn: []rec{direct(1100, out, pcap.ProtoUDP, coaCN, coaMN)}, want: -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			mnWire, mnFlow := split(c.mn)
			cnWire, cnFlow := split(c.cn)
			got, err := CareOfRecovery(mnWire, mnFlow, cnWire, cnFlow, mnNID, cnNID, L3, L5, move)
			switch {
			case err != nil:
				t.Fatal(err)
			case c.want < 0 && got != nil:
				t.Fatalf("recovery %v ms, want none", *got)
			case c.want >= 0 && (got == nil || *got != c.want):
				t.Fatalf("recovery %v, want %v ms", got, c.want)
			}
		})
	}
	// Captures that do not pair up record for record are refused, not measured.
	w, f := split([]rec{tunnelled(1040, in, haMN, coaMN, hoaCN, hoaMN)})
	if _, err := CareOfRecovery(w, nil, w, f, mnNID, cnNID, L3, L5, move); err == nil {
		t.Error("a decapsulated capture with fewer packets was accepted")
	}
	shifted := append([]pcap.Packet(nil), f...)
	shifted[0].Time = shifted[0].Time.Add(time.Millisecond)
	if _, err := CareOfRecovery(w, f, w, shifted, mnNID, cnNID, L3, L5, move); err == nil {
		t.Error("captures with different time stamps were accepted")
	}
}

func TestDoubleJumpConfig(t *testing.T) {
	cfg := RunConfig{Scenario: "lan-lan", Traffic: "udp-hd", Profile: testProfile, Reps: 1, Out: t.TempDir(), DoubleJump: true}
	for _, mode := range ModeNames() {
		cfg.Mode = mode
		err := cfg.Validate()
		if DoubleJumpModes[mode] != (err == nil) {
			t.Errorf("--double-jump --mode %s: %v", mode, err)
		}
		if strings.HasPrefix(mode, "mipv6") && err != nil {
			t.Errorf("--double-jump --mode %s refused: the CN has a home agent of its own now: %v", mode, err)
		}
		if err != nil && !strings.Contains(err.Error(), "not tried") {
			t.Errorf("--double-jump --mode %s: the error does not say why: %v", mode, err)
		}
	}
	moves := []Move{{At: time.Unix(10, 5e6)}, {At: time.Unix(10, 0)}}
	if d := movesApart(moves); d == nil || *d != 5 || !laterMove(moves).Equal(time.Unix(10, 5e6)) {
		t.Errorf("moves apart %v, later %v", d, laterMove(moves))
	}
	if movesApart(moves[:1]) != nil {
		t.Error("one move has no spread")
	}
}

// The run report has a recovery row only for a double jump, with the run's value.
func TestRunReportRecoveryRow(t *testing.T) {
	v := 1048.7
	s := summary.New("lan-lan", "ilnp-hard", "udp-hd", []summary.Run{{RecoveryMs: &v}})
	for _, dj := range []bool{false, true} {
		cfg := RunConfig{Scenario: "lan-lan", Mode: "ilnp-hard", Traffic: "udp-hd", Profile: testProfile, Reps: 1, DoubleJump: dj}
		report := RunReport(cfg, s, nil)
		row := strings.Contains(report, "| Double-jump recovery | 1048.7 ms | 1048.7 ms |")
		if row != dj || strings.Contains(report, "Double jump: the CN moves too") != dj {
			t.Errorf("double jump %v: recovery row %v in\n%s", dj, row, report)
		}
	}
}
