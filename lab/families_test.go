package lab

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ilnp/internal/config"
	"ilnp/internal/encap"
	"ilnp/internal/nstest"
	"ilnp/internal/wire"
	"ilnp/lab/pcap"
	"ilnp/lab/summary"
)

func TestParseFamilies(t *testing.T) {
	for _, c := range []struct {
		in            string
		want          Families
		ok            bool
		cross, l2, l3 bool
		move          string
	}{
		{"", FamiliesIPv6IPv6, true, false, false, false, "IPv6 to IPv6"},
		{"ipv6-ipv6", FamiliesIPv6IPv6, true, false, false, false, "IPv6 to IPv6"},
		{"ipv6-ipv4nat", FamiliesIPv6IPv4NAT, true, true, false, true, "IPv6 to IPv4"},
		{"ipv4nat-ipv6", FamiliesIPv4NATIPv6, true, true, true, false, "IPv4 to IPv6"},
		{"ipv4nat-ipv4nat", FamiliesIPv4NATIPv4NAT, true, true, true, true, "IPv4 to IPv4"},
		{"ipv4-ipv6", "", false, false, false, false, ""},
		{"IPV6-IPV6", "", false, false, false, false, ""},
		{"ipv6-ipv4nat,ipv4nat-ipv6", "", false, false, false, false, ""},
		{" ipv6-ipv6", "", false, false, false, false, ""},
	} {
		f, err := ParseFamilies(c.in)
		if (err == nil) != c.ok || f != c.want {
			t.Errorf("ParseFamilies(%q) = %q, %v; want %q, ok %v", c.in, f, err, c.want, c.ok)
			continue
		}
		if !c.ok {
			continue
		}
		if f.Cross() != c.cross || f.L2IPv4() != c.l2 || f.L3IPv4() != c.l3 || f.Move() != c.move {
			t.Errorf("%q: cross %v L2 IPv4 %v L3 IPv4 %v move %q; want %v %v %v %q", c.in, f.Cross(), f.L2IPv4(), f.L3IPv4(), f.Move(), c.cross, c.l2, c.l3, c.move)
		}
	}
}

// The plan per family: which access networks are IPv4, the MN's locator in each (an L32 of its
// own address on the encapsulation port, or the L64), and the hosts file and daemon
// configuration the product's own parsers accept.
func TestFamilyPlan(t *testing.T) {
	l32 := func(s string) wire.L64 {
		l, err := encap.L32(netip.MustParseAddrPort(s))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l64 := func(p netip.Prefix) wire.L64 { return wire.L64(beUint64(p.Addr().AsSlice())) }
	for _, c := range []struct {
		f          Families
		l2, l3     wire.L64
		hostsLines []string
	}{
		{FamiliesIPv6IPv4NAT, l64(L2), l32("10.0.3.2:49191"), []string{"2001:0db8:0002:0000|10,0214:4fff:fe20:ee64 mn", "10.0.3.2|20,0214:4fff:fe20:ee64 mn"}},
		{FamiliesIPv4NATIPv6, l32("10.0.2.2:49191"), l64(L3), []string{"10.0.2.2|10,0214:4fff:fe20:ee64 mn", "2001:0db8:0003:0000|20,0214:4fff:fe20:ee64 mn"}},
		{FamiliesIPv4NATIPv4NAT, l32("10.0.2.2:49191"), l32("10.0.3.2:49191"), []string{"10.0.2.2|10,0214:4fff:fe20:ee64 mn", "10.0.3.2|20,0214:4fff:fe20:ee64 mn"}},
	} {
		p := PlanFor(c.f)
		if got := p.L2.Locator(L2); got != c.l2 {
			t.Errorf("%s: L2 locator %v, want %v", c.f, got, c.l2)
		}
		if got := p.L3.Locator(L3); got != c.l3 {
			t.Errorf("%s: L3 locator %v, want %v", c.f, got, c.l3)
		}
		if p.L2.Outside == p.L3.Outside || p.L2.Net == p.L3.Net || p.L2.Metric == p.L3.Metric {
			t.Errorf("%s: the two access networks share a NAT, subnet or route metric: %+v %+v", c.f, p.L2, p.L3)
		}
		hosts := FamiliesHostsFile(c.f)
		_, err := wire.ParseHosts(strings.NewReader(hosts), "hosts")
		if err != nil {
			t.Fatalf("%s: hosts file rejected: %v\n%s", c.f, err, hosts)
		}
		// The CN is listed with its IPv4 locator too, after L1.
		for _, want := range append([]string{"2001:0db8:0001:0000|10,0214:4fff:fe20:cc01 cn", "198.51.100.2|20,0214:4fff:fe20:cc01 cn"}, c.hostsLines...) {
			if !strings.Contains(hosts, want+"\n") {
				t.Errorf("%s: hosts file lacks %q:\n%s", c.f, want, hosts)
			}
		}
		conf := DaemonConfig("mn", []string{IfMNR2, IfMNR3}, MNNID, "soft", "/s", "/e", "/h") + FamiliesDaemonConfig(c.f)
		if _, err := config.Parse(strings.NewReader(conf), "ilnpd-mn.conf"); err != nil || !strings.Contains(conf, "ipv4-locators on\n") {
			t.Errorf("%s: daemon config %v:\n%s", c.f, err, conf)
		}
	}
	if FamiliesDaemonConfig(FamiliesIPv6IPv6) != "" || FamiliesDaemonConfig("") != "" {
		t.Error("the default testbed's daemons get cross-family configuration")
	}
	mn, cn := captureFilters(FamiliesIPv6IPv6, "ip6 and not host ::1", "ip6")
	if mn != "ip6 and not host ::1" || cn != "ip6" {
		t.Errorf("default capture filters changed: %q %q", mn, cn)
	}
	mn, cn = captureFilters(FamiliesIPv6IPv4NAT, "ip6 and not host ::1", "ip6")
	if mn != "(ip6 and not host ::1) or udp port 49191" || cn != "(ip6) or udp port 49191" {
		t.Errorf("cross-family capture filters: %q %q", mn, cn)
	}
}

// Topology commands: the default adds nothing; an IPv4 access network gets a NAT in its router
// and no global IPv6 address there, an IPv6 one neither.
func TestFamiliesCommands(t *testing.T) {
	mk := func(f Families) []string {
		tp := &Topology{Cfg: TopologyConfig{Families: f}}
		var out []string
		for _, c := range tp.familiesCommands() {
			out = append(out, strings.Join(c.args, " "))
		}
		return out
	}
	if got := mk(FamiliesIPv6IPv6); len(got) != 0 {
		t.Errorf("default testbed gets IPv4 commands: %v", got)
	}
	all := strings.Join(mk(FamiliesIPv6IPv4NAT), "\n")
	for _, want := range []string{"oifname r3-r1 ip saddr 10.0.3.0/24 masquerade", "ip -6 addr flush dev r3-mn scope global", "ip addr add 10.0.3.1/24 dev r3-mn",
		"ip addr add 198.51.100.2/24 dev cn-r1"} {
		if !strings.Contains(all, want) {
			t.Errorf("ipv6-ipv4nat lacks %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "r2-mn") {
		t.Errorf("ipv6-ipv4nat touches the IPv6 access network:\n%s", all)
	}
	both := strings.Join(mk(FamiliesIPv4NATIPv4NAT), "\n")
	if strings.Count(both, "masquerade") != 2 || !strings.Contains(both, "oifname r2-r1 ip saddr 10.0.2.0/24 masquerade") {
		t.Errorf("ipv4nat-ipv4nat: want two NATs, R2's and R3's:\n%s", both)
	}
}

func TestFamiliesValidate(t *testing.T) {
	base := RunConfig{Scenario: "lan-lan", Mode: "ilnp-soft", Traffic: "udp-hd", Profile: Profiles["quick"], Reps: 1, Out: "x"}
	for _, c := range []struct {
		name string
		mod  func(*RunConfig)
		ok   bool
		why  string
	}{
		{"default", func(*RunConfig) {}, true, ""},
		{"explicit default with mipv6", func(c *RunConfig) { c.Families, c.Mode = FamiliesIPv6IPv6, "mipv6" }, true, ""},
		{"soft ipv6-ipv4nat", func(c *RunConfig) { c.Families = FamiliesIPv6IPv4NAT }, true, ""},
		{"hard ipv4nat-ipv4nat tcp", func(c *RunConfig) { c.Families, c.Mode, c.Traffic = FamiliesIPv4NATIPv4NAT, "ilnp-hard", "tcp" }, true, ""},
		{"mipv6", func(c *RunConfig) { c.Families, c.Mode = FamiliesIPv6IPv4NAT, "mipv6" }, false, "IPv4 care-of"},
		{"mipv6-ro", func(c *RunConfig) { c.Families, c.Mode = FamiliesIPv4NATIPv6, "mipv6-ro" }, false, "IPv4 care-of"},
		{"plain ipv6", func(c *RunConfig) { c.Families, c.Mode = FamiliesIPv6IPv4NAT, "ipv6" }, false, "plain IPv6"},
		{"unknown", func(c *RunConfig) { c.Families = "ipv4-ipv4" }, false, "unknown --families"},
		{"double jump", func(c *RunConfig) { c.Families, c.DoubleJump = FamiliesIPv6IPv4NAT, true }, false, "double-jump"},
		{"dns", func(c *RunConfig) { c.Families, c.Rendezvous = FamiliesIPv6IPv4NAT, RendezvousDNS }, false, "rendezvous dns"},
	} {
		cfg := base
		c.mod(&cfg)
		err := cfg.Validate()
		if _, known := Modes[cfg.Mode]; !known && strings.HasPrefix(cfg.Mode, "mipv6") {
			continue // a build without the MIPv6 baseline
		}
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), c.why)) {
			t.Errorf("%s: %v (want ok %v, reason with %q)", c.name, err, c.ok, c.why)
		}
	}
}

// HandoverMs from synthetic captures: the first LU (not an LU-ACK, not before the move) to the
// first CN -> MN data packet received on the new locator after it.
func TestHandoverMs(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	cn, mn := nid64(CNNID), nid64(MNNID)
	newLoc, err := encap.L32(netip.MustParseAddrPort("10.0.3.2:49191"))
	if err != nil {
		t.Fatal(err)
	}
	addr := func(l wire.L64, nid string) [16]byte {
		var a [16]byte
		for i := 0; i < 8; i++ {
			a[i] = byte(uint64(l) >> (56 - 8*i))
		}
		n := netip.MustParseAddr("::" + nid).As16()
		copy(a[8:], n[8:])
		return a
	}
	l2 := wire.L64(beUint64(L2.Addr().AsSlice()))
	cnL32, _ := encap.L32(netip.MustParseAddrPort("198.51.100.2:49191"))
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	lu := func(ms float64, op uint8, dir int) pcap.Packet {
		return pcap.Packet{Time: at(ms), Dir: dir, Src: addr(newLoc, MNNID), Dst: addr(cnL32, CNNID), Proto: pcap.ProtoICMPv6, ICMPType: 156, LUOp: op, Encap: true}
	}
	data := func(ms float64, dst wire.L64, proto uint8, dir int) pcap.Packet {
		return pcap.Packet{Time: at(ms), Dir: dir, Src: addr(cnL32, CNNID), Dst: addr(dst, MNNID), Proto: proto, Encap: encap.IsL32(dst)}
	}
	enter := at(3000)
	base := []pcap.Packet{
		lu(1000, 1, pcap.DirOutgoing),                          // an LU before the move
		data(2990, l2, pcap.ProtoUDP, pcap.DirIncoming),        // the old locator
		lu(3010, 2, pcap.DirOutgoing),                          // an LU-ACK the MN sent: not an LU
		lu(3020, 1, pcap.DirIncoming),                          // an LU the MN received
		lu(3040.5, 1, pcap.DirOutgoing),                        // the first LU after the move
		data(3041, l2, pcap.ProtoUDP, pcap.DirIncoming),        // still the old locator
		data(3042, newLoc, pcap.ProtoICMPv6, pcap.DirIncoming), // the LU-ACK: not data
		data(3043, newLoc, pcap.ProtoUDP, pcap.DirOutgoing),    // sent by the MN
	}
	// The default testbed: the new locator is L3's L64, nothing encapsulated.
	l3 := wire.L64(beUint64(L3.Addr().AsSlice()))
	native := []pcap.Packet{
		{Time: at(3100), Dir: pcap.DirOutgoing, Src: Addr(L3, MNNID).As16(), Dst: Addr(L1, CNNID).As16(), Proto: pcap.ProtoICMPv6, ICMPType: 156, LUOp: 1},
		{Time: at(3101.5), Dir: pcap.DirIncoming, Src: Addr(L1, CNNID).As16(), Dst: Addr(L3, MNNID).As16(), Proto: pcap.ProtoUDP},
	}
	if got := HandoverMs(native, mn, cn, l3, enter); got == nil || *got < 1.5-1e-6 || *got > 1.5+1e-6 {
		t.Errorf("IPv6 to IPv6: %v, want 1.5 ms", fmtPtr(got))
	}
	if got := HandoverMs(native, mn, cn, newLoc, enter); got != nil {
		t.Errorf("data on L3's L64 counted for the L32 locator: %v", *got)
	}
	for _, c := range []struct {
		name string
		pkts []pcap.Packet
		want float64 // < 0: nil
	}{
		{"udp on the new locator", append(append([]pcap.Packet{}, base...), data(3052.25, newLoc, pcap.ProtoUDP, pcap.DirIncoming)), 11.75},
		{"tcp counts too", append(append([]pcap.Packet{}, base...), data(3045, newLoc, pcap.ProtoTCP, pcap.DirIncoming)), 4.5},
		{"no data on the new locator", base, -1},
		{"no LU after the move", []pcap.Packet{lu(1000, 1, pcap.DirOutgoing), data(3052, newLoc, pcap.ProtoUDP, pcap.DirIncoming)}, -1},
		{"data before the LU does not count", []pcap.Packet{data(3001, newLoc, pcap.ProtoUDP, pcap.DirIncoming), lu(3040, 1, pcap.DirOutgoing),
			data(3060, newLoc, pcap.ProtoUDP, pcap.DirIncoming)}, 20},
	} {
		got := HandoverMs(c.pkts, mn, cn, newLoc, enter)
		switch {
		case c.want < 0 && got != nil:
			t.Errorf("%s: %v ms, want nil", c.name, *got)
		case c.want >= 0 && (got == nil || *got < c.want-1e-6 || *got > c.want+1e-6):
			t.Errorf("%s: %v, want %v ms", c.name, fmtPtr(got), c.want)
		}
	}
}

// The table beside HIP's names the direction, HIP's figure for it, the command, n and spread.
func TestFamiliesTable(t *testing.T) {
	v := func(x float64) *float64 { return &x }
	yes := true
	runs := []summary.Run{{HandoverMs: v(4), SessionSurvived: &yes}, {HandoverMs: v(6), SessionSurvived: &yes}, {SessionSurvived: &yes}}
	s := summary.New("lan-lan", "ilnp-hard", "udp-hd", runs)
	cfg := RunConfig{Scenario: "lan-lan", Mode: "ilnp-hard", Traffic: "udp-hd", Profile: Profiles["quick"], Reps: 3, Families: FamiliesIPv6IPv4NAT}
	out := FamiliesTable([]FamiliesCell{{Families: cfg.families(), Mode: cfg.Mode, Command: familiesCommand(cfg), Summary: s}})
	for _, want := range []string{"| IPv6 to IPv4 | BBM (hard) | udp-hd | 5.00 ± 12.71 | 4.00 - 6.00 | 2 of 3 |", "| 54 ± 11 |",
		"`ilnp-lab run --families ipv6-ipv4nat --scenario lan-lan --mode ilnp-hard --traffic udp-hd --profile quick --reps 3`"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// One cross-family move end to end (issue 14): the MN goes make-before-break from IPv6 (L2)
// to its IPv4-only network behind R3's NAT under udp-hd; the session survives, no datagram is
// lost, and handover_ms (first LU to the first data packet on the new locator) is measured.
func TestE2EFamiliesIPv6ToIPv4NATSoft(t *testing.T) {
	requireLab(t)
	nstest.RequireTool(t, "nft")
	r, meta := runLabConfig(t, RunConfig{Scenario: "lan-lan", Mode: "ilnp-soft", Traffic: "udp-hd",
		BinDir: ilnpBinaries(t), Families: FamiliesIPv6IPv4NAT})
	if r.SessionSurvived == nil || !*r.SessionSurvived {
		t.Errorf("session did not survive the move to IPv4 behind the NAT: %s", describe(r))
	}
	if r.UDPSent == nil || *r.UDPSent < 1000 || r.UDPLost == nil || *r.UDPLost != 0 {
		t.Errorf("UDP sent %s lost %s, want 0 lost in a soft move", Fmt(r.Values()["udp_sent"], "udp_sent"), Fmt(r.Values()["udp_lost"], "udp_lost"))
	}
	if r.HandoverMs == nil || *r.HandoverMs <= 0 || *r.HandoverMs > 1000 {
		t.Errorf("handover_ms %v, want in (0, 1000]", fmtPtr(r.HandoverMs))
	}
	if meta.Families != string(FamiliesIPv6IPv4NAT) || meta.LeaseAtS == nil {
		t.Errorf("run.json: families %q lease_at_s %v", meta.Families, meta.LeaseAtS)
	}
}

// `ilnp-lab families` checks every cell first, and its report has one row per cell with a
// summary and names the cells without one.
func TestFamiliesReport(t *testing.T) {
	out := t.TempDir()
	c := FamiliesConfig{Families: []Families{FamiliesIPv6IPv4NAT, FamiliesIPv4NATIPv4NAT}, Modes: []string{"ilnp-soft", "ilnp-hard"},
		Traffics: []string{"udp-hd"}, Scenario: "lan-lan", Profile: Profiles["quick"], Reps: 1, Out: out}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*FamiliesConfig){
		func(c *FamiliesConfig) { c.Modes = []string{"ipv6"} },
		func(c *FamiliesConfig) { c.Traffics = nil },
		func(c *FamiliesConfig) { c.Scenario = "lan-moon" },
	} {
		cc := c
		bad(&cc)
		if err := cc.Validate(); err == nil {
			t.Errorf("accepted %+v", cc)
		}
	}
	v, yes := 7.5, true
	s := summary.New("lan-lan", "ilnp-soft", "udp-hd", []summary.Run{{HandoverMs: &v, SessionSurvived: &yes}})
	cell := c.cellConfig(FamiliesIPv4NATIPv4NAT, "ilnp-soft", "udp-hd")
	if err := os.MkdirAll(cell.Out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(filepath.Join(cell.Out, "summary.json")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFamiliesReport(c, map[string]string{c.cellConfig(FamiliesIPv6IPv4NAT, "ilnp-hard", "udp-hd").Out: "iperf3 ended early"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	rep := string(b)
	for _, want := range []string{"| IPv4 to IPv4 | MBB (soft) | udp-hd | 7.50 | 7.50 - 7.50 | 1 of 1 |", "| 53 ± 12 |",
		"--families ipv4nat-ipv4nat --scenario lan-lan --mode ilnp-soft --traffic udp-hd --profile quick --reps 1 --out " + cell.Out,
		"ipv6-ipv4nat ilnp-hard udp-hd: no summary (iperf3 ended early)", "ipv6-ipv4nat ilnp-soft udp-hd: no summary ("} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
}
