package lab

// The double jump (issue 13, thesis ch. 3 and 7): both ends move at once. With
// TopologyConfig.DoubleJump the CN loses its fixed link to R1 and gets two access networks of
// its own, like the MN's:
//
//	            2001:db8:14::/64   L4 2001:db8:4::/64
//	  R1 ─────────────────── R4 ═══(wire)═══ cn-r4 ┐
//	     ─────────────────── R5 ═══(wire)═══ cn-r5 ┘ CN
//	            2001:db8:15::/64   L5 2001:db8:5::/64
//
// R4 and R5 run radvd; the CN takes its addresses by SLAAC with the token of its identifier
// and starts in L4 only. The CN's access links go through the emulator with the MN's access
// shape; R1-R4 and R1-R5 are plain LAN veths. `run --double-jump` brings cn-r5 up together
// with mn-r3 at --enter and takes cn-r4 down together with mn-r2 at --leave (moveTogether).

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"ilnp/lab/netns"
	"ilnp/lab/pcap"
)

// The CN's access networks in a double-jump testbed.
var (
	L4 = netip.MustParsePrefix("2001:db8:4::/64") // R4's site, where the CN starts
	L5 = netip.MustParsePrefix("2001:db8:5::/64") // R5's site, where the CN moves to
)

// The CN's interfaces in a double-jump testbed.
const (
	IfCNR4 = "cn-r4"
	IfCNR5 = "cn-r5"
)

// CNIfaces are the CN's interfaces (the ones ilnpd runs on).
func (t *Topology) CNIfaces() []string {
	if t.Cfg.DoubleJump {
		return []string{IfCNR4, IfCNR5}
	}
	return []string{IfCN}
}

func (t *Topology) cnAccessLinks() []emulated {
	return []emulated{
		{t.R4, "r4-cn", t.CN, IfCNR4, "r4cna", "r4cnb", t.Cfg.Access},
		{t.R5, "r5-cn", t.CN, IfCNR5, "r5cna", "r5cnb", t.Cfg.Access},
	}
}

// wireCNRouters links R1 to R4 and R5 and returns the ends made (for the offload settings).
func (t *Topology) wireCNRouters() (map[*netns.NS][]string, error) {
	ends := map[*netns.NS][]string{}
	for _, l := range []struct {
		r         *netns.NS
		rIf, r1If string
	}{{t.R4, "r4-r1", "r1-r4"}, {t.R5, "r5-r1", "r1-r5"}} {
		if err := netns.Veth(t.R1, l.r1If, l.r, l.rIf); err != nil {
			return nil, err
		}
		ends[t.R1] = append(ends[t.R1], l.r1If)
		ends[l.r] = append(ends[l.r], l.rIf)
	}
	return ends, nil
}

// cnTokens gives the CN its identifier on both interfaces and starts it in L4 only.
func (t *Topology) cnTokens() error {
	for _, ifname := range []string{IfCNR4, IfCNR5} {
		if _, err := t.CN.Run("ip", "token", "set", "::"+CNNID, "dev", ifname); err != nil {
			return err
		}
	}
	_, err := t.CN.Run("ip", "link", "set", IfCNR5, "down")
	return err
}

type nsCmd struct {
	ns   *netns.NS
	args []string
}

func (t *Topology) cnRouterAddresses() []nsCmd {
	return []nsCmd{
		{t.R1, []string{"ip", "addr", "add", "2001:db8:14::1/64", "dev", "r1-r4"}},
		{t.R1, []string{"ip", "addr", "add", "2001:db8:15::1/64", "dev", "r1-r5"}},
		{t.R1, []string{"ip", "route", "add", L4.String(), "via", "2001:db8:14::4", "dev", "r1-r4"}},
		{t.R1, []string{"ip", "route", "add", L5.String(), "via", "2001:db8:15::5", "dev", "r1-r5"}},
		{t.R4, []string{"ip", "addr", "add", "2001:db8:14::4/64", "dev", "r4-r1"}},
		{t.R4, []string{"ip", "addr", "add", "2001:db8:4::1/64", "dev", "r4-cn"}},
		{t.R4, []string{"ip", "route", "add", "default", "via", "2001:db8:14::1", "dev", "r4-r1"}},
		{t.R5, []string{"ip", "addr", "add", "2001:db8:15::5/64", "dev", "r5-r1"}},
		{t.R5, []string{"ip", "addr", "add", "2001:db8:5::1/64", "dev", "r5-cn"}},
		{t.R5, []string{"ip", "route", "add", "default", "via", "2001:db8:15::1", "dev", "r5-r1"}},
	}
}

func (t *Topology) startCNRadvd() error {
	if err := t.runRadvd(t.R4, "r4", "r4-cn", L4); err != nil {
		return err
	}
	return t.runRadvd(t.R5, "r5", "r5-cn", L5)
}

// Move is one link change the lab made, stamped when `ip link set` returned.
type Move struct {
	Node, Iface, State string
	At                 time.Time
}

// moveTogether makes the link changes and returns when each one was done. A single change
// (the MN's own move) runs `ip link set` as the lab always did. Several (a double jump: the CN
// and the MN move within one RTT of each other) are prepared first, a netlink handle in each
// namespace with its link looked up, and then made at once, one goroutine each, by one
// RTM_NEWLINK each: forking ip for each would put tens of ms between them on a busy machine.
func moveTogether(changes []linkChange) ([]Move, error) {
	if len(changes) == 1 {
		c := changes[0]
		if _, err := c.ns.Run("ip", "link", "set", c.iface, c.state); err != nil {
			return nil, err
		}
		return []Move{{Node: c.node, Iface: c.iface, State: c.state, At: time.Now()}}, nil
	}
	type prepared struct {
		h    *netlink.Handle
		link netlink.Link
	}
	ready := make([]prepared, len(changes))
	defer func() {
		for _, p := range ready {
			if p.h != nil {
				p.h.Close()
			}
		}
	}()
	for i, c := range changes {
		nsh, err := vnetns.GetFromName(c.ns.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: open netns %s: %w", c.node, c.ns.Name, err)
		}
		h, err := netlink.NewHandleAt(nsh)
		nsh.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: netlink in %s: %w", c.node, c.ns.Name, err)
		}
		ready[i].h = h
		if ready[i].link, err = h.LinkByName(c.iface); err != nil {
			return nil, fmt.Errorf("%s: link %s: %w", c.node, c.iface, err)
		}
	}
	moves := make([]Move, len(changes))
	errs := make([]error, len(changes))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range changes {
		wg.Go(func() {
			<-start
			if c.state == "up" {
				errs[i] = ready[i].h.LinkSetUp(ready[i].link)
			} else {
				errs[i] = ready[i].h.LinkSetDown(ready[i].link)
			}
			moves[i] = Move{Node: c.node, Iface: c.iface, State: c.state, At: time.Now()}
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return moves, fmt.Errorf("%s: link %s %s: %w", changes[i].node, changes[i].iface, changes[i].state, err)
		}
	}
	return moves, nil
}

type linkChange struct {
	node, iface, state string
	ns                 *netns.NS
}

// enterChanges and leaveChanges are the lab's moves at --enter and --leave: the MN's, and in
// a double jump the CN's beside it.
func (t *Topology) enterChanges() []linkChange {
	c := []linkChange{{"mn", IfMNR3, "up", t.MN}}
	if t.Cfg.DoubleJump {
		c = append(c, linkChange{"cn", IfCNR5, "up", t.CN})
	}
	return c
}

func (t *Topology) leaveChanges() []linkChange {
	c := []linkChange{{"mn", IfMNR2, "down", t.MN}}
	if t.Cfg.DoubleJump {
		c = append(c, linkChange{"cn", IfCNR4, "down", t.CN})
	}
	return c
}

// Recovery is recovery_ms of a double jump: from the later of the two moves to the first
// delivery on both new locators, i.e. the later of the first flow packet (TCP or UDP, so not
// the LU signalling) from the CN's new locator to the MN's new locator that the MN's capture
// saw arriving, and the first one the other way that the CN's capture saw arriving. nil when
// either never came.
func Recovery(mn, cn []pcap.Packet, mnNID, cnNID uint64, mnNew, cnNew netip.Prefix, laterMove time.Time) *float64 {
	first := func(pkts []pcap.Packet, srcNID, dstNID uint64, src, dst netip.Prefix) (at time.Time, ok bool) {
		for i := range pkts {
			p := &pkts[i]
			if p.Dir == pcap.DirOutgoing || p.Time.Before(laterMove) ||
				(p.Proto != pcap.ProtoTCP && p.Proto != pcap.ProtoUDP) ||
				p.SrcNID() != srcNID || p.DstNID() != dstNID ||
				!src.Contains(netip.AddrFrom16(p.Src)) || !dst.Contains(netip.AddrFrom16(p.Dst)) {
				continue
			}
			if !ok || p.Time.Before(at) { // a cooked capture of several interfaces may interleave
				at, ok = p.Time, true
			}
		}
		return at, ok
	}
	toMN, ok1 := first(mn, cnNID, mnNID, cnNew, mnNew)
	toCN, ok2 := first(cn, mnNID, cnNID, mnNew, cnNew)
	if !ok1 || !ok2 {
		return nil
	}
	last := toMN
	if toCN.After(last) {
		last = toCN
	}
	ms := float64(last.Sub(laterMove)) / float64(time.Millisecond)
	return &ms
}

// MoveMeta is one Move in run.json.
type MoveMeta struct {
	Node  string  `json:"node"`
	Iface string  `json:"iface"`
	State string  `json:"state"`
	AtS   float64 `json:"at_s"` // seconds since the flow started
}

func (m *RunMeta) recordMoves(moves []Move, t0 time.Time) {
	if !m.DoubleJump {
		return
	}
	for _, mv := range moves {
		m.Moves = append(m.Moves, MoveMeta{Node: mv.Node, Iface: mv.Iface, State: mv.State, AtS: mv.At.Sub(t0).Seconds()})
	}
}

// laterMove is when the last of the moves was done (zero without moves).
func laterMove(moves []Move) time.Time {
	var last time.Time
	for _, m := range moves {
		if m.At.After(last) {
			last = m.At
		}
	}
	return last
}

// movesApart is the spread of the moves in ms (nil with fewer than two).
func movesApart(moves []Move) *float64 {
	if len(moves) < 2 {
		return nil
	}
	first := moves[0].At
	for _, m := range moves {
		if m.At.Before(first) {
			first = m.At
		}
	}
	ms := float64(laterMove(moves).Sub(first)) / float64(time.Millisecond)
	return &ms
}

// DoubleJumpModes are the modes `run --double-jump` takes: the ILNP ones and the MIPv6
// baselines, whose CN is then a mobile node with L4 its home network and R4 its home agent
// (lab/mode_mipv6.go). Plain IPv6 is left out until a run has shown what its CN does with two
// RA-configured interfaces.
var DoubleJumpModes = map[string]bool{"ilnp-soft": true, "ilnp-hard": true, "mipv6": true, "mipv6-ro": true}

// CareOfRecovery is recovery_ms of a MIPv6 double jump, where the nodes move when their home
// links go (--leave: RFC 6275 s.11.5.5, at home while the home prefix is advertised): from
// the later of the two moves to the first flow packet (TCP or UDP) from the peer that arrived
// on each node's new care-of address, the MN's in mnNew and the CN's in cnNew, whichever way
// it came (through the home agent's tunnel or route-optimised). wire and flow are a node's
// capture as taken and with tunnelled packets shown as their inner packets
// (DecapsulatePcap): record for record the same packets, wire giving where a packet arrived,
// flow whose it is. Nothing checks the sender's new care-of address as Recovery checks the
// new locator: once both home links are down, whatever either node sends leaves from its
// care-of address, and a packet sent from the home link before the move cannot arrive on a
// care-of address (nothing is bound to it then). nil when either never came; an error when
// wire and flow do not pair up.
func CareOfRecovery(mnWire, mnFlow, cnWire, cnFlow []pcap.Packet, mnNID, cnNID uint64, mnNew, cnNew netip.Prefix, laterMove time.Time) (*float64, error) {
	first := func(node string, wire, flow []pcap.Packet, srcNID, dstNID uint64, dst netip.Prefix) (at time.Time, ok bool, err error) {
		if len(wire) != len(flow) {
			return at, false, fmt.Errorf("%s: %d packets as captured, %d decapsulated", node, len(wire), len(flow))
		}
		for i := range wire {
			w, f := &wire[i], &flow[i]
			if !w.Time.Equal(f.Time) {
				return at, false, fmt.Errorf("%s: packet %d stamped %v as captured, %v decapsulated", node, i, w.Time, f.Time)
			}
			if w.Dir == pcap.DirOutgoing || w.Time.Before(laterMove) ||
				(f.Proto != pcap.ProtoTCP && f.Proto != pcap.ProtoUDP) ||
				f.SrcNID() != srcNID || f.DstNID() != dstNID || !dst.Contains(netip.AddrFrom16(w.Dst)) {
				continue
			}
			if !ok || w.Time.Before(at) {
				at, ok = w.Time, true
			}
		}
		return at, ok, nil
	}
	toMN, ok1, err := first("mn", mnWire, mnFlow, cnNID, mnNID, mnNew)
	if err != nil {
		return nil, err
	}
	toCN, ok2, err := first("cn", cnWire, cnFlow, mnNID, cnNID, cnNew)
	if err != nil || !ok1 || !ok2 {
		return nil, err
	}
	ms := float64(max(toMN.Sub(laterMove), toCN.Sub(laterMove))) / float64(time.Millisecond)
	return &ms, nil
}

// doubleJumpRecovery is a run's recovery_ms, with a note when there is none: ILNP nodes move
// at --enter (Recovery), the MIPv6 baselines at --leave (CareOfRecovery on the wire captures
// mipv6Mode.Collect kept). It also returns the moves measured from.
func doubleJumpRecovery(mode Mode, dir string, mn, cn []pcap.Packet, mnNID, cnNID uint64, enter, leave []Move) (*float64, []Move, string) {
	if _, ok := mode.(*mipv6Mode); !ok {
		if r := Recovery(mn, cn, mnNID, cnNID, L3, L5, laterMove(enter)); r != nil {
			return r, enter, ""
		}
		return nil, enter, "double jump: no flow packet between the new locators (L5 <-> L3) in both directions"
	}
	var wire [2][]pcap.Packet
	for i, node := range []string{"mn", "cn"} {
		pkts, err := readPcap(filepath.Join(dir, node+"-wire.pcap"))
		if err != nil {
			return nil, leave, "double jump: " + err.Error()
		}
		wire[i] = pkts
	}
	r, err := CareOfRecovery(wire[0], mn, wire[1], cn, mnNID, cnNID, L3, L5, laterMove(leave))
	switch {
	case err != nil:
		return nil, leave, "double jump: " + err.Error()
	case r == nil:
		return nil, leave, "double jump: no flow packet from the peer on the new care-of addresses (L3, L5) in both directions after the moves at --leave"
	}
	return r, leave, ""
}

func doubleJumpModeNames() []string {
	names := make([]string, 0, len(DoubleJumpModes))
	for n := range DoubleJumpModes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
