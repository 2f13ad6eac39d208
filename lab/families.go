package lab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"ilnp/internal/encap"
	"ilnp/internal/wire"
	"ilnp/lab/netns"
	"ilnp/lab/pcap"
	"ilnp/lab/summary"
)

// Cross-family testbeds (issue 14, `run --families F`): which address family each of the MN's
// access networks has. An IPv4 access network is IPv4 only (no radvd, no global IPv6 address
// on its router's interface) and sits behind a NAT (nftables masquerade in its router, R2 or
// R3); R1-R2-R3 route IPv4 as well as IPv6 and the CN is dual stack:
//
//	CN  cn-r1 198.51.100.2/24 (+ L1)    R1 r1-cn 198.51.100.1
//	R1  r1-r2 192.0.2.1/24    -- R2 r2-r1 192.0.2.2    (R2's NAT address)
//	R1  r1-r3 203.0.113.1/24  -- R3 r3-r1 203.0.113.3  (R3's NAT address)
//	L2 as IPv4: 10.0.2.0/24, R2 10.0.2.1, MN mn-r2 10.0.2.2
//	L3 as IPv4: 10.0.3.0/24, R3 10.0.3.1, MN mn-r3 10.0.3.2
//
// Addresses are static: the lab does a DHCPv4 client's work when the MN's link comes up
// (address and default route at once, as a client installs its lease), because no DHCPv4
// server is installed here and the figure measured starts at the MN's first LU, after the
// address exists, so how the address came does not enter it.
type Families string

// The families the contract names; the first is today's testbed.
const (
	FamiliesIPv6IPv6       Families = "ipv6-ipv6"
	FamiliesIPv6IPv4NAT    Families = "ipv6-ipv4nat"
	FamiliesIPv4NATIPv6    Families = "ipv4nat-ipv6"
	FamiliesIPv4NATIPv4NAT Families = "ipv4nat-ipv4nat"
)

// FamilyNames in contract order.
var FamilyNames = []string{string(FamiliesIPv6IPv6), string(FamiliesIPv6IPv4NAT), string(FamiliesIPv4NATIPv6), string(FamiliesIPv4NATIPv4NAT)}

// ParseFamilies checks a --families value; empty is the default, ipv6-ipv6.
func ParseFamilies(s string) (Families, error) {
	if s == "" {
		return FamiliesIPv6IPv6, nil
	}
	if !slices.Contains(FamilyNames, s) {
		return "", fmt.Errorf("unknown --families %q (want one of %s)", s, strings.Join(FamilyNames, ", "))
	}
	return Families(s), nil
}

// Cross says whether the testbed has an IPv4 access network (anything but the default).
func (f Families) Cross() bool { return f != "" && f != FamiliesIPv6IPv6 }

// L2IPv4 and L3IPv4 say which access networks are IPv4 behind a NAT.
func (f Families) L2IPv4() bool { return strings.HasPrefix(string(f), "ipv4nat-") }

// L3IPv4 says whether the network the MN moves to is IPv4 behind a NAT.
func (f Families) L3IPv4() bool { return strings.HasSuffix(string(f), "-ipv4nat") }

// Move names the family change, as HIP's tables do ("IPv6 to IPv4").
func (f Families) Move() string {
	name := func(v4 bool) string {
		if v4 {
			return "IPv4"
		}
		return "IPv6"
	}
	return name(f.L2IPv4()) + " to " + name(f.L3IPv4())
}

// FamiliesModes are the modes that can run a cross-family testbed, with why the others cannot.
var FamiliesModes = map[string]bool{"ilnp-soft": true, "ilnp-hard": true}

func familiesRefusal(mode string) string {
	switch {
	case strings.HasPrefix(mode, "mipv6"):
		return "MIPv6 (RFC 6275) binds an IPv6 care-of address to an IPv6 home address; the lab's mip6d has no IPv4 care-of addresses (DSMIPv6, RFC 5555) and no NAT traversal"
	case mode == "ipv6":
		return "plain IPv6 has no way to reach an IPv4-only network, and with an IPv4 start the CN cannot even open its session"
	}
	return "not an ILNP mode"
}

// AccessPlan is one access network's addressing.
type AccessPlan struct {
	IPv4           bool
	Net            netip.Prefix // IPv4 subnet (IPv4 only)
	Router, Host   netip.Addr   // the router's and the MN's IPv4 addresses
	Outside        netip.Addr   // the NAT's address towards R1
	RouterIf, MNIf string
	UplinkIf       string // the router's interface towards R1 (NAT'd)
	Metric         int    // the MN's default route metric (two IPv4 networks at once)
}

// FamilyPlan is the IPv4 side of a cross-family testbed.
type FamilyPlan struct {
	CN4, R1CN4 netip.Addr
	R1R2, R1R3 netip.Addr // R1's addresses towards R2 and R3
	L2, L3     AccessPlan
}

// PlanFor returns the addressing of a testbed.
func PlanFor(f Families) FamilyPlan {
	return FamilyPlan{
		CN4: netip.MustParseAddr("198.51.100.2"), R1CN4: netip.MustParseAddr("198.51.100.1"),
		R1R2: netip.MustParseAddr("192.0.2.1"), R1R3: netip.MustParseAddr("203.0.113.1"),
		L2: AccessPlan{IPv4: f.L2IPv4(), Net: netip.MustParsePrefix("10.0.2.0/24"), Router: netip.MustParseAddr("10.0.2.1"),
			Host: netip.MustParseAddr("10.0.2.2"), Outside: netip.MustParseAddr("192.0.2.2"),
			RouterIf: "r2-mn", MNIf: IfMNR2, UplinkIf: "r2-r1", Metric: 100},
		L3: AccessPlan{IPv4: f.L3IPv4(), Net: netip.MustParsePrefix("10.0.3.0/24"), Router: netip.MustParseAddr("10.0.3.1"),
			Host: netip.MustParseAddr("10.0.3.2"), Outside: netip.MustParseAddr("203.0.113.3"),
			RouterIf: "r3-mn", MNIf: IfMNR3, UplinkIf: "r3-r1", Metric: 200},
	}
}

// Locator is the access network's locator for the MN: its L64, or its own IPv4 address on the
// encapsulation port as an L32 (what its timeline and its captured packets show; the CN sees
// the NAT's endpoint instead).
func (a AccessPlan) Locator(prefix netip.Prefix) wire.L64 {
	if a.IPv4 {
		l, err := encap.L32(netip.AddrPortFrom(a.Host, encap.DefaultPort))
		if err != nil {
			panic(err) // constant addresses above
		}
		return l
	}
	b := prefix.Addr().As16()
	var v uint64
	for _, x := range b[:8] {
		v = v<<8 | uint64(x)
	}
	return wire.L64(v)
}

// hostsLocator writes a locator as the hosts file takes it (L64, or IPv4[:port]).
func hostsLocator(a AccessPlan, prefix netip.Prefix) string {
	if a.IPv4 {
		return a.Host.String()
	}
	return L64(prefix)
}

// FamiliesHostsFile is HostsFile for a cross-family testbed: the CN with its IPv4 locator too
// (preference 20, after L1), the MN with its locator in each access network (its own IPv4
// address where that network is IPv4: what a host behind a NAT knows of itself; the CN cannot
// reach it there until the MN has opened the session, see ilnpMode.Setup).
func FamiliesHostsFile(f Families) string {
	p := PlanFor(f)
	return fmt.Sprintf("%s|10,%s cn\n%s|20,%s cn\n%s|10,%s mn\n%s|20,%s mn\n",
		L64(L1), NID64(CNNID), p.CN4, NID64(CNNID),
		hostsLocator(p.L2, L2), NID64(MNNID), hostsLocator(p.L3, L3), NID64(MNNID))
}

// FamiliesDaemonConfig is what a cross-family testbed adds to both daemons' configuration.
func FamiliesDaemonConfig(f Families) string {
	if !f.Cross() {
		return ""
	}
	return "ipv4-locators on\n"
}

// familiesCommands are the IPv4 addresses, routes and NATs of a cross-family testbed (none for
// the default).
func (t *Topology) familiesCommands() []nsCmd {
	f := t.Cfg.Families
	if !f.Cross() {
		return nil
	}
	p := PlanFor(f)
	cmds := []nsCmd{
		{t.CN, []string{"ip", "addr", "add", p.CN4.String() + "/24", "dev", IfCN}},
		{t.CN, []string{"ip", "route", "add", "default", "via", p.R1CN4.String(), "dev", IfCN}},
		{t.R1, []string{"ip", "addr", "add", p.R1CN4.String() + "/24", "dev", "r1-cn"}},
		{t.R1, []string{"ip", "addr", "add", p.R1R2.String() + "/24", "dev", "r1-r2"}},
		{t.R1, []string{"ip", "addr", "add", p.R1R3.String() + "/24", "dev", "r1-r3"}},
		{t.R2, []string{"ip", "addr", "add", p.L2.Outside.String() + "/24", "dev", "r2-r1"}},
		{t.R2, []string{"ip", "route", "add", "default", "via", p.R1R2.String(), "dev", "r2-r1"}},
		{t.R3, []string{"ip", "addr", "add", p.L3.Outside.String() + "/24", "dev", "r3-r1"}},
		{t.R3, []string{"ip", "route", "add", "default", "via", p.R1R3.String(), "dev", "r3-r1"}},
	}
	for _, a := range []struct {
		r  *netns.NS
		ap AccessPlan
	}{{t.R2, p.L2}, {t.R3, p.L3}} {
		if !a.ap.IPv4 {
			continue
		}
		bits := a.ap.Net.Bits()
		cmds = append(cmds,
			// IPv4 only: the router keeps its link-local address but no global IPv6 one.
			nsCmd{a.r, []string{"ip", "-6", "addr", "flush", "dev", a.ap.RouterIf, "scope", "global"}},
			nsCmd{a.r, []string{"ip", "addr", "add", fmt.Sprintf("%s/%d", a.ap.Router, bits), "dev", a.ap.RouterIf}},
			nsCmd{a.r, []string{"nft", "add table ip ilnplab_nat"}},
			nsCmd{a.r, []string{"nft", "add chain ip ilnplab_nat post { type nat hook postrouting priority 100 ; }"}},
			nsCmd{a.r, []string{"nft", fmt.Sprintf("add rule ip ilnplab_nat post oifname %s ip saddr %s masquerade", a.ap.UplinkIf, a.ap.Net)}},
		)
	}
	return cmds
}

// lease4Commands install the MN's IPv4 address and default route on an IPv4 access network,
// at once, as a DHCPv4 client installs its lease.
func (t *Topology) lease4Commands(a AccessPlan) []string {
	return []string{"sh", "-c", fmt.Sprintf("ip addr add %s/%d dev %s && ip route add default via %s dev %s metric %d",
		a.Host, a.Net.Bits(), a.MNIf, a.Router, a.MNIf, a.Metric)}
}

// leasePause stands for the DHCPv4 exchange between the MN's link coming up and its lease
// (four messages; the daemon's own cross-family test uses the same 200 ms: with none, on a
// loaded machine the first ARP sometimes left before the new link carried frames).
const leasePause = 200 * time.Millisecond

// enterIPv4 gives the MN its L3 lease after the link came up (a no-op unless L3 is IPv4).
func (t *Topology) enterIPv4() error {
	if !t.Cfg.Families.L3IPv4() {
		return nil
	}
	time.Sleep(leasePause)
	_, err := t.MN.Run(t.lease4Commands(PlanFor(t.Cfg.Families).L3)...)
	return err
}

// rttTarget is the CN's address the MN pings for the RTT via L2 (final false) or L3: its IPv4
// address across an IPv4 access network (the same path, unencapsulated).
func (t *Topology) rttTarget(final bool) string {
	f := t.Cfg.Families
	if (final && f.L3IPv4()) || (!final && f.L2IPv4()) {
		return PlanFor(f).CN4.String()
	}
	if final {
		return t.CNFinalAddrText
	}
	return t.CNAddrText
}

// captureFilters are the tcpdump filters at the MN and the CN: IPv6, plus encapsulated
// ILNPv6 on a cross-family testbed.
func captureFilters(f Families, mn, cn string) (string, string) {
	if !f.Cross() {
		return mn, cn
	}
	port := fmt.Sprintf("udp port %d", encap.DefaultPort)
	return "(" + mn + ") or " + port, "(" + cn + ") or " + port
}

// HandoverMs is the HIP seed's handover duration (its s.IV: from the MN sending its first
// UPDATE with the new locator to the MN receiving the first ESP packet on the new address),
// ILNP's way: from the first Locator Update the MN sent at or after enter (its capture, ICMPv6
// type 156 with Operation 1 from the MN's identifier, encapsulated or not; not an LU-ACK) to the first CN -> MN data packet
// (UDP or TCP, not LUs or keepalives) the MN's capture saw arriving for newLoc after that LU.
// Both stamps come from the same capture. Nil when either never came.
func HandoverMs(mn []pcap.Packet, mnNID, cnNID uint64, newLoc wire.L64, enter time.Time) *float64 {
	var luAt time.Time
	found := false
	for i := range mn {
		p := &mn[i]
		if p.Dir == pcap.DirOutgoing && p.Proto == pcap.ProtoICMPv6 && p.ICMPType == 156 && p.LUOp == 1 &&
			p.SrcNID() == mnNID && !p.Time.Before(enter) {
			luAt, found = p.Time, true
			break
		}
	}
	if !found {
		return nil
	}
	for i := range mn {
		p := &mn[i]
		if p.Dir == pcap.DirOutgoing || p.SrcNID() != cnNID || p.DstNID() != mnNID ||
			(p.Proto != pcap.ProtoUDP && p.Proto != pcap.ProtoTCP) || wire.L64(beUint64(p.Dst[:8])) != newLoc {
			continue
		}
		if !p.Time.Before(luAt) {
			ms := float64(p.Time.Sub(luAt)) / 1e6
			return &ms
		}
	}
	return nil
}

func beUint64(b []byte) uint64 {
	var v uint64
	for _, x := range b[:8] {
		v = v<<8 | uint64(x)
	}
	return v
}

// hipRows are the seed's Tables I and II (003, s.IV: mean ± standard deviation, 0.484 ms RTT,
// one Gigabit router, HIPL 1.0.3).
var hipRows = map[string]map[string]string{
	"IPv4 to IPv4": {"ilnp-soft": "53 ± 12", "ilnp-hard": "41 ± 12"},
	"IPv6 to IPv6": {"ilnp-soft": "56 ± 6", "ilnp-hard": "40 ± 6"},
	"IPv4 to IPv6": {"ilnp-soft": "56 ± 6", "ilnp-hard": "56 ± 8"},
	"IPv6 to IPv4": {"ilnp-soft": "53 ± 16", "ilnp-hard": "54 ± 11"},
}

// FamiliesCell is one run's figures for the table beside HIP's.
type FamiliesCell struct {
	Families Families
	Mode     string
	Command  string
	Summary  summary.Summary
}

// handoverName is HIP's name for an ILNP handoff mode.
func handoverName(mode string) string {
	if mode == "ilnp-hard" {
		return "BBM (hard)"
	}
	return "MBB (soft)"
}

// FamiliesTable is the markdown table of handover durations beside HIP's Tables I and II: one
// row per cell, each naming its command, repetitions and spread (mean ± 95 % half-width,
// min-max), and HIP's figure for the same direction and kind.
func FamiliesTable(cells []FamiliesCell) string {
	var b strings.Builder
	b.WriteString("| direction | handover | traffic | handover_ms mean ± ci95 | min - max | n | UDP lost | survived | HIP (Tables I/II, mean ± sd) | command |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range cells {
		var xs []float64
		for _, r := range c.Summary.Runs {
			if r.HandoverMs != nil {
				xs = append(xs, *r.HandoverMs)
			}
		}
		spread := "-"
		if len(xs) > 0 {
			spread = fmt.Sprintf("%.2f - %.2f", slices.Min(xs), slices.Max(xs))
		}
		mean := "-"
		if m := c.Summary.Mean.HandoverMs; m != nil {
			mean = fmt.Sprintf("%.2f", *m)
			if ci := c.Summary.CI95.HandoverMs; ci != nil {
				mean += fmt.Sprintf(" ± %.2f", *ci)
			}
		}
		hip := hipRows[c.Families.Move()][c.Mode]
		if hip == "" {
			hip = "-"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d of %d | %s | %s | %s | `%s` |\n", c.Families.Move(), handoverName(c.Mode),
			c.Summary.Traffic, mean, spread, len(xs), c.Summary.Reps, MeanCI(c.Summary, "udp_lost"), MeanCI(c.Summary, "session_survived"), hip, c.Command)
	}
	b.WriteString("\nhandover_ms: the MN's first LU after entering L3 to the first CN -> MN data packet it received on its " +
		"L3 locator (both in the MN's capture), the seed's \"first UPDATE with LOCATOR sent to first ESP packet received on the " +
		"new address\" at the MN. HIP measured over one Gigabit router (RTT 0.48 ms) without a NAT; MBB is ILNP's soft " +
		"handoff (both links up from --enter to --leave), BBM its hard one (the old locator aged on entering L3).\n")
	return b.String()
}

// familiesCommand is the command line of a run for the table.
func familiesCommand(cfg RunConfig) string {
	return fmt.Sprintf("ilnp-lab run --families %s --scenario %s --mode %s --traffic %s --profile %s --reps %d",
		cfg.families(), cfg.Scenario, cfg.Mode, cfg.Traffic, cfg.Profile.Name, cfg.Reps)
}

// families is the run's testbed family (the default when none was given).
func (c *RunConfig) families() Families {
	if c.Families == "" {
		return FamiliesIPv6IPv6
	}
	return c.Families
}

// validFamilies checks --families against the other options.
func (c *RunConfig) validFamilies() error {
	f, err := ParseFamilies(string(c.Families))
	if err != nil {
		return err
	}
	if !f.Cross() {
		return nil
	}
	if !FamiliesModes[c.Mode] {
		return fmt.Errorf("--families %s: mode %s cannot cross address families (%s); cross-family modes: ilnp-soft, ilnp-hard", f, c.Mode, familiesRefusal(c.Mode))
	}
	if c.DoubleJump || c.Multihome {
		return fmt.Errorf("--families %s: not with --double-jump or --multihome (not built)", f)
	}
	if cmp := c.Rendezvous; cmp == RendezvousDNS || (cmp == "" && DefaultRendezvous == RendezvousDNS) {
		return fmt.Errorf("--families %s: --rendezvous dns is not built for cross-family testbeds (the lab's named is on IPv6 only and the MN does not publish L32s); use hosts", f)
	}
	return nil
}

// startFamiliesRadvd runs radvd only on the IPv6 access networks of a cross-family testbed.
func (t *Topology) startFamiliesRadvd() error {
	p := PlanFor(t.Cfg.Families)
	if !p.L2.IPv4 {
		if err := t.runRadvd(t.R2, "r2", p.L2.RouterIf, L2); err != nil {
			return err
		}
	}
	if !p.L3.IPv4 {
		return t.runRadvd(t.R3, "r3", p.L3.RouterIf, L3)
	}
	return nil
}

// familiesWarm are the IPv4 neighbours to resolve before the experiment (warmNeighbours):
// R1 and the NATs both ways, and the CN's router.
func (t *Topology) familiesWarm() []struct {
	from *netns.NS
	to   string
} {
	if !t.Cfg.Families.Cross() {
		return nil
	}
	p := PlanFor(t.Cfg.Families)
	return []struct {
		from *netns.NS
		to   string
	}{{t.R1, p.L2.Outside.String()}, {t.R1, p.L3.Outside.String()}, {t.R2, p.R1R2.String()}, {t.R3, p.R1R3.String()},
		{t.CN, p.R1CN4.String()}}
}

// openFromBehindNAT: an MN that starts behind a NAT cannot be reached until it has sent
// through it, so the MN opens the session first, as a host behind a NAT does: it resolves the
// CN through its ilnpd (which registers the CN as a peer, IPv4 locator included) and pings the
// CN's identifier address until a reply comes back; the CN learns the NAT's endpoint from
// those nonce-verified packets (issue 14: the CN reaches the MN as long as the session lives).
func (t *Topology) openFromBehindNAT(ctx context.Context, deadline time.Time) error {
	var last string
	for {
		out, err := t.MN.Run("getent", "ahostsv6", "cn")
		if err == nil {
			if f := strings.Fields(out); len(f) > 0 {
				r, perr := t.Ping(t.MN, f[0], 1, 0, 500*time.Millisecond)
				if perr == nil && len(r.RTTs) == 1 {
					return nil
				}
				last = fmt.Sprintf("ping %s: %v", f[0], perr)
			}
		} else {
			last = fmt.Sprintf("getent ahostsv6 cn: %v %s", err, out)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the MN behind the NAT could not open its session with the CN: %s", last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
