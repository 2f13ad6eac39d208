package lab

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"ilnp/lab/measure"
	"ilnp/lab/netns"
	"ilnp/lab/pcap"
)

// Mode mptcp (issue 26): Linux Multipath TCP as a user sets it up today, beside ILNP in the
// same testbed. Both hosts have MPTCP on and the kernel path manager; iperf3 runs through
// `mptcpize run` (Debian's mptcpize) at both ends. The MN runs mptcpd (Debian's mptcpd,
// plugin addr_adv), which makes every address the MN gets an MPTCP endpoint with the flag
// `signal`: when the MN enters L3, its new address is announced (ADD_ADDR) on the flow's
// subflow via L2 and the CN, the client, opens a subflow to it (MP_JOIN); both links carry
// subflows while they overlap, and when L2 goes the L3 subflow carries on. The MN is the
// iperf3 server, so the announcement is the only way: the kernel path manager opens `subflow`
// endpoints from the client side only (measured: an MN endpoint `subflow` opened nothing).
// MPTCP carries TCP only: UDP traffic is refused with ErrMPTCPUDP.

// MPTCPd is where Debian's mptcpd installs the daemon.
var MPTCPd = "/usr/libexec/mptcpd"

func init() {
	Modes["mptcp"] = func(o ModeOptions) Mode { return &mptcpMode{opt: o} }
}

type mptcpMode struct {
	opt      ModeOptions
	timeline string
	// retrans, lost: the data-level counts of the merged flow (dataLevelTCP), which replace
	// Compute's: its "below the highest sequence sent" reads segments that two subflows sent
	// out of data-sequence order as retransmissions.
	retrans, lost *int
}

func (*mptcpMode) Name() string { return "mptcp" }
func (*mptcpMode) Describe() string {
	return "Multipath TCP (Linux, kernel path manager; mptcpd on the MN announces each address as a signal endpoint, the CN opens a subflow to it; iperf3 via mptcpize run)"
}
func (*mptcpMode) Target(t *Topology) string { return t.MNInitialAddr }
func (m *mptcpMode) Timelines() (string, string) {
	return m.timeline, ""
}
func (*mptcpMode) WrapApp(args []string) []string {
	return append([]string{"mptcpize", "run"}, args...)
}

// AdjustResult: the handoff signal is the MN's ADD_ADDR, not an LU; retransmissions and
// losses are counted by data sequence number.
func (m *mptcpMode) AdjustResult(r *measure.Result) {
	r.Run.LUSent = nil
	if m.retrans != nil && r.Run.TCPRetransmissions != nil {
		r.Run.TCPRetransmissions, r.Run.TCPLost = m.retrans, m.lost
	}
}

// MPTCPCheck says why this machine cannot run mode mptcp in a namespace, or nil.
func MPTCPCheck(ns *netns.NS) error {
	v, err := nsSysctl(ns, "net.mptcp.enabled")
	if err != nil {
		return fmt.Errorf("mode mptcp: the kernel has no MPTCP (sysctl net.mptcp.enabled: %v %s): it needs CONFIG_MPTCP and CONFIG_MPTCP_IPV6", err, v)
	}
	if _, err := nsSysctl(ns, "net.mptcp.pm_type"); err != nil {
		return fmt.Errorf("mode mptcp: the kernel has no net.mptcp.pm_type (kernel >= 6.0 chooses the path manager there): %w", err)
	}
	for _, bin := range []string{"mptcpize", MPTCPd} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("mode mptcp needs %s (Debian packages mptcpize and mptcpd; scripts/deps.sh installs them): %w", bin, err)
		}
	}
	return nil
}

func (m *mptcpMode) Setup(ctx context.Context, t *Topology) error {
	for _, ns := range []*netns.NS{t.CN, t.MN} {
		if err := MPTCPCheck(ns); err != nil {
			return err
		}
		for _, args := range [][]string{
			{"sysctl", "-qw", "net.mptcp.enabled=1"},
			{"sysctl", "-qw", "net.mptcp.pm_type=0"}, // the kernel path manager
			// Room for the announced address and its subflow on both connections (iperf3's
			// control and data).
			{"ip", "mptcp", "limits", "set", "subflows", "8", "add_addr_accepted", "8"},
		} {
			if out, err := ns.Run(args...); err != nil {
				return fmt.Errorf("mode mptcp in %s: %s: %w: %s", ns.Name, strings.Join(args, " "), err, out)
			}
		}
	}
	if m.opt.Multihome {
		// Both links up all along (the MN starts in L3 alone): L3 is the spare uplink, an
		// endpoint `signal backup`, announced to the CN, which joins a subflow to it that the
		// MN's SYN/ACK marks backup (RFC 8684 s.3.3, the B bit); the flow is opened to the MN's
		// L2 address, the preferred uplink. No mptcpd: it gives every address the same flags.
		args := []string{"ip", "mptcp", "endpoint", "add", Addr(L3, MNNID).String(), "dev", IfMNR3, "signal", "backup"}
		if out, err := t.MN.Run(args...); err != nil {
			return fmt.Errorf("mode mptcp, multihomed: %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	p, err := t.Start(t.MN, "mptcpd-mn", MPTCPd, "--path-manager=addr_adv", "--addr-flags=signal",
		"--notify-flags=existing,skip_link_local,skip_loopback", "--log=stderr")
	if err != nil {
		return err
	}
	// Ready when mptcpd has made the MN's L2 address an endpoint.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := t.MN.Run("ip", "mptcp", "endpoint", "show")
		if strings.Contains(out, t.MNInitialAddr) {
			return nil
		}
		if done, err := p.Exited(); done || time.Now().After(deadline) {
			return fmt.Errorf("mptcpd made no endpoint for %s (exited %v, %v): endpoints %q, log: %s", t.MNInitialAddr, done, err, out, p.Log())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// MultihomeUp: the MN's uplinks as a multihomed MPTCP user routes them (preferUplinkR2).
func (m *mptcpMode) MultihomeUp(ctx context.Context, t *Topology) error {
	return preferUplinkR2(ctx, t)
}

// FailoverPackets: the merged flow's CN -> MN segments that carried data (not the backup
// subflow's pure ACKs).
func (m *mptcpMode) FailoverPackets(_ string, mn []pcap.Packet) ([]pcap.Packet, error) {
	var out []pcap.Packet
	for _, p := range mn {
		if p.Proto != pcap.ProtoTCP || p.Payload > 0 {
			out = append(out, p)
		}
	}
	return out, nil
}

func (m *mptcpMode) Teardown(t *Topology) error {
	for _, p := range t.procsNamed("mptcpd-") {
		p.Stop(3 * time.Second)
	}
	return nil
}

// Collect makes the captures measurable: the flow's subflows become one TCP flow numbered by
// MPTCP's data sequence numbers (mptcpMerge; mn-wire.pcap and cn-wire.pcap keep them as
// captured), writes the handoff (the MN's ADD_ADDR for its L3 address to the first packet
// of the connection arriving on it) as the MN's timeline, and the option overhead.
func (m *mptcpMode) Collect(t *Topology, dir string) {
	info := PeerInfo{Mode: m.Name(),
		HandoffFrom: "the MN's first ADD_ADDR announcing its L3 address (sent on the L2 subflow)",
		HandoffTo:   "the first CN -> MN packet arriving at the MN's L3 address (the CN's MP_JOIN SYN)",
		OverheadHow: "mean TCP header bytes of the flow's CN -> MN data segments beyond plain Linux TCP's 32 (20 + timestamps): the MPTCP options (DSS)",
	}
	if m.opt.Multihome {
		info.Notes = append(info.Notes, "multihomed: L3 a `signal backup` endpoint, no mptcpd; "+UplinkPreferenceNote)
	}
	defer func() { writeJSON(filepath.Join(dir, "peer.json"), info) }()
	mn, cn, mnWire, cnWire := peerPaths(dir)
	for _, p := range [][2]string{{mn, mnWire}, {cn, cnWire}} {
		if err := os.Rename(p[0], p[1]); err != nil {
			info.Notes = append(info.Notes, err.Error())
			return
		}
	}
	l3 := Addr(L3, MNNID).As16()
	mg := newMPTCPMerge(nid64(CNNID), nid64(MNNID))
	var from, to time.Time
	for _, f := range []string{cnWire, mnWire} {
		if err := eachPcapPacket(f, mg.learn); err != nil {
			info.Notes = append(info.Notes, err.Error())
		}
	}
	// The handoff, at the MN.
	if err := eachPcapPacket(mnWire, func(r *rawPacket) {
		p := &r.pkt
		if from.IsZero() && p.Dir == pcap.DirOutgoing && mg.toCN(p) {
			if o := parseMPTCPOptions(r.tcpHeader()); o.addAddr && !o.addAddrEcho && in64(o.addr, l3) {
				from = p.Time
			}
		}
		if !from.IsZero() && to.IsZero() && p.Dir != pcap.DirOutgoing && mg.toMN(p) && p.Dst == l3 && p.Proto == pcap.ProtoTCP {
			to = p.Time
		}
	}); err != nil {
		info.Notes = append(info.Notes, err.Error())
	}
	bytes, hdrBytes, segs := map[uint32]int{}, map[uint32]int{}, map[uint32]int{}
	if err := eachPcapPacket(cnWire, func(r *rawPacket) {
		p := &r.pkt
		c, ok := mg.conn[mg.key(p)]
		if !ok || !mg.toMN(p) || p.Proto != pcap.ProtoTCP || p.Payload == 0 {
			return
		}
		bytes[c] += p.Payload
		if h := r.tcpHeader(); h != nil {
			hdrBytes[c] += len(h) - 32
			segs[c]++
		}
	}); err != nil {
		info.Notes = append(info.Notes, err.Error())
	}
	conn := dataConn(bytes)
	if segs[conn] > 0 {
		v := float64(hdrBytes[conn]) / float64(segs[conn])
		info.OverheadBytesPerPacket, info.OverheadPackets = &v, segs[conn]
	}
	for _, p := range [][2]string{{mnWire, mn}, {cnWire, cn}} {
		if _, err := filterPcapFile(p[0], p[1], mg.rewrite); err != nil {
			info.Notes = append(info.Notes, err.Error())
			_ = os.Rename(p[0], p[1])
		}
	}
	if cnPkts, err := readPcap(cn); err == nil {
		if mnPkts, err := readPcap(mn); err == nil {
			rt, lost := dataLevelTCP(cnPkts, mnPkts, nid64(CNNID), nid64(MNNID))
			m.retrans, m.lost = &rt, &lost
		}
	}
	if mg.unmapped > 0 {
		info.Notes = append(info.Notes, fmt.Sprintf("%d data segments had no DSS mapping the merge could find: left out of the merged flow", mg.unmapped))
	}
	info.Notes = append(info.Notes, fmt.Sprintf("data connection: %d subflows merged by data sequence number", mg.subflows(conn)))
	if from.IsZero() {
		info.Notes = append(info.Notes, "no ADD_ADDR for the MN's L3 address seen at the MN")
		return
	}
	m.timeline = filepath.Join(dir, "mn-events-peer.jsonl")
	if err := peerTimeline(m.timeline, from, to, "MPTCP ADD_ADDR for "+Addr(L3, MNNID).String(), "first CN -> MN packet on L3"); err != nil {
		info.Notes = append(info.Notes, err.Error())
		m.timeline = ""
	}
}

// mptcpOptions is what the lab reads of a segment's MPTCP options (RFC 8684 s.3).
type mptcpOptions struct {
	capable      bool
	keys         [][8]byte // MP_CAPABLE: the sender's key, then (third ACK) the receiver's
	join         bool
	token        uint32 // MP_JOIN SYN: the receiver's token
	mapping      bool   // DSS with a mapping
	dsn, ssn     uint32 // low 32 bits of the data sequence number; relative subflow sequence
	dataLen      uint16
	addAddr      bool
	addAddrEcho  bool
	addr         [16]byte
	optionsBytes int
}

// parseMPTCPOptions reads the MPTCP options (kind 30) of a TCP header; malformed ones are
// skipped.
func parseMPTCPOptions(h []byte) mptcpOptions {
	var o mptcpOptions
	if len(h) <= 20 {
		return o
	}
	opts := h[20:]
	for i := 0; i < len(opts); {
		kind := opts[i]
		if kind == 0 {
			break
		}
		if kind == 1 {
			i++
			continue
		}
		if i+1 >= len(opts) {
			break
		}
		n := int(opts[i+1])
		if n < 2 || i+n > len(opts) {
			break
		}
		if kind == 30 && n >= 3 {
			o.optionsBytes += n
			parseMPTCPOption(opts[i:i+n], &o)
		}
		i += n
	}
	return o
}

func parseMPTCPOption(b []byte, o *mptcpOptions) {
	switch b[2] >> 4 {
	case 0: // MP_CAPABLE
		o.capable = true
		for k := 4; k+8 <= len(b) && k <= 12; k += 8 {
			o.keys = append(o.keys, [8]byte(b[k:k+8]))
		}
	case 1: // MP_JOIN
		if len(b) == 12 {
			o.join, o.token = true, binary.BigEndian.Uint32(b[4:])
		}
	case 2: // DSS
		if len(b) < 4 {
			return
		}
		flags, i := b[3], 4
		if flags&0x01 != 0 { // data ACK
			i += 4
			if flags&0x02 != 0 {
				i += 4
			}
		}
		if flags&0x04 == 0 { // no mapping
			return
		}
		dl := 4
		if flags&0x08 != 0 {
			dl = 8
		}
		if len(b) < i+dl+6 {
			return
		}
		o.mapping = true
		o.dsn = binary.BigEndian.Uint32(b[i+dl-4:])
		o.ssn = binary.BigEndian.Uint32(b[i+dl:])
		o.dataLen = binary.BigEndian.Uint16(b[i+dl+4:])
	case 3: // ADD_ADDR
		o.addAddr, o.addAddrEcho = true, b[2]&0x01 != 0
		if len(b) >= 20 && len(b) != 8 && len(b) != 10 && len(b) != 16 && len(b) != 18 { // IPv6
			copy(o.addr[:], b[4:20])
		}
	}
}

// mptcpToken is a key's token: the most significant 32 bits of its SHA-256 (RFC 8684 s.3.2).
func mptcpToken(key [8]byte) uint32 {
	h := sha256.Sum256(key[:])
	return binary.BigEndian.Uint32(h[:4])
}

// subflowKey is a subflow oriented CN -> MN.
type subflowKey struct {
	cn, mn         [16]byte
	cnPort, mnPort uint16
}

type dssMapping struct{ dsn, ssn, n uint32 }

// mptcpMerge turns an MPTCP connection's subflows into one TCP flow for measure.Compute: its
// CN -> MN segments get the first subflow's ports and, as sequence number, the data sequence
// number of their first byte; SYN flags are cleared (the flow starts at its first data byte).
// Compute then counts retransmissions and losses at the data level (a segment sent again on
// another subflow is a retransmission) and the MN's deliveries over every path.
type mptcpMerge struct {
	cnNID, mnNID uint64
	conn         map[subflowKey]uint32 // subflow -> connection (the MN's token)
	initial      map[uint32]subflowKey // connection -> its MP_CAPABLE subflow
	isn          map[subflowKey]uint32 // the CN's initial sequence number on the subflow
	maps         map[subflowKey][]dssMapping
	unmapped     int
}

func newMPTCPMerge(cnNID, mnNID uint64) *mptcpMerge {
	return &mptcpMerge{cnNID: cnNID, mnNID: mnNID, conn: map[subflowKey]uint32{}, initial: map[uint32]subflowKey{},
		isn: map[subflowKey]uint32{}, maps: map[subflowKey][]dssMapping{}}
}

func (g *mptcpMerge) toMN(p *pcap.Packet) bool { return p.SrcNID() == g.cnNID && p.DstNID() == g.mnNID }
func (g *mptcpMerge) toCN(p *pcap.Packet) bool { return p.SrcNID() == g.mnNID && p.DstNID() == g.cnNID }

func (g *mptcpMerge) key(p *pcap.Packet) subflowKey {
	if g.toMN(p) {
		return subflowKey{p.Src, p.Dst, p.SrcPort, p.DstPort}
	}
	return subflowKey{p.Dst, p.Src, p.DstPort, p.SrcPort}
}

// learn reads one packet of either capture: which subflow belongs to which connection, and
// the CN's initial sequence numbers.
func (g *mptcpMerge) learn(r *rawPacket) {
	p := &r.pkt
	if p.Proto != pcap.ProtoTCP || !(g.toMN(p) || g.toCN(p)) {
		return
	}
	o := parseMPTCPOptions(r.tcpHeader())
	k := g.key(p)
	syn := p.TCPFlags&pcap.SYN != 0
	switch {
	case o.capable && g.toCN(p) && syn && len(o.keys) == 1: // SYN/ACK: the MN's key
		g.setConn(k, mptcpToken(o.keys[0]), true)
	case o.capable && g.toMN(p) && !syn && len(o.keys) == 2: // third ACK: the MN's key second
		g.setConn(k, mptcpToken(o.keys[1]), true)
	case o.join && g.toMN(p) && syn:
		g.setConn(k, o.token, false)
	}
	if syn && g.toMN(p) {
		g.isn[k] = p.TCPSeq
	}
}

func (g *mptcpMerge) setConn(k subflowKey, token uint32, initial bool) {
	g.conn[k] = token
	if initial {
		g.initial[token] = k
	}
}

// dataConn is the connection that carried the most CN -> MN payload (iperf3's data
// connection; its control connection is MPTCP too), given the payload per connection.
func dataConn(bytes map[uint32]int) uint32 {
	var best uint32
	most := -1
	for c, n := range bytes {
		if n > most || (n == most && c < best) {
			best, most = c, n
		}
	}
	return best
}

func (g *mptcpMerge) subflows(conn uint32) int {
	n := 0
	for _, c := range g.conn {
		if c == conn {
			n++
		}
	}
	return n
}

// rewrite is filterPcap's function for the merged capture.
func (g *mptcpMerge) rewrite(r *rawPacket) bool {
	p := &r.pkt
	if p.Proto != pcap.ProtoTCP || !g.toMN(p) {
		return true
	}
	k := g.key(p)
	token, ok := g.conn[k]
	if !ok {
		return true
	}
	first, ok := g.initial[token]
	h := r.tcpHeader()
	if !ok || h == nil {
		return true
	}
	if p.Payload > 0 {
		isn, ok := g.isn[k]
		if !ok {
			g.unmapped++
			return false
		}
		rel := p.TCPSeq - isn
		if o := parseMPTCPOptions(h); o.mapping && o.dataLen > 0 {
			g.addMapping(k, dssMapping{dsn: o.dsn, ssn: o.ssn, n: uint32(o.dataLen)})
		}
		mp, ok := g.mappingFor(k, rel)
		if !ok {
			g.unmapped++
			return false
		}
		binary.BigEndian.PutUint32(h[4:], mp.dsn+(rel-mp.ssn))
	}
	binary.BigEndian.PutUint16(h[0:], first.cnPort)
	binary.BigEndian.PutUint16(h[2:], first.mnPort)
	h[13] &^= pcap.SYN
	return true
}

func (g *mptcpMerge) addMapping(k subflowKey, m dssMapping) {
	ms := g.maps[k]
	if n := len(ms); n > 0 && ms[n-1] == m {
		return
	}
	g.maps[k] = append(ms, m)
}

// mappingFor finds the latest mapping of the subflow that covers rel.
func (g *mptcpMerge) mappingFor(k subflowKey, rel uint32) (dssMapping, bool) {
	ms := g.maps[k]
	for i := len(ms) - 1; i >= 0 && i >= len(ms)-4096; i-- {
		if rel-ms[i].ssn < ms[i].n {
			return ms[i], true
		}
	}
	return dssMapping{}, false
}

// dataLevelTCP counts the merged flow's retransmissions (a CN -> MN segment starting at a
// data sequence number sent before, on any subflow) and losses (of those, copies the MN's
// capture did not see arrive, at most one per retransmission), in the flow that carried the
// most bytes.
func dataLevelTCP(cn, mn []pcap.Packet, cnNID, mnNID uint64) (retrans, lost int) {
	type key struct{ sp, dp uint16 }
	toMN := func(p *pcap.Packet) bool {
		return p.Proto == pcap.ProtoTCP && p.Payload > 0 && p.SrcNID() == cnNID && p.DstNID() == mnNID
	}
	vol := map[key]int{}
	for i := range cn {
		if p := &cn[i]; toMN(p) {
			vol[key{p.SrcPort, p.DstPort}] += p.Payload
		}
	}
	var data key
	best := -1
	for k, v := range vol {
		if v > best || (v == best && (k.sp < data.sp || (k.sp == data.sp && k.dp < data.dp))) {
			data, best = k, v
		}
	}
	sends, again := map[uint32]int{}, map[uint32]int{}
	for i := range cn {
		p := &cn[i]
		if !toMN(p) || (key{p.SrcPort, p.DstPort}) != data {
			continue
		}
		if sends[p.TCPSeq] > 0 {
			retrans++
			again[p.TCPSeq]++
		}
		sends[p.TCPSeq]++
	}
	recvs := map[uint32]int{}
	for i := range mn {
		p := &mn[i]
		if toMN(p) && p.Dir != pcap.DirOutgoing && (key{p.SrcPort, p.DstPort}) == data {
			recvs[p.TCPSeq]++
		}
	}
	for seq, n := range again {
		if d := sends[seq] - recvs[seq]; d > 0 {
			lost += min(d, n)
		}
	}
	return retrans, lost
}
