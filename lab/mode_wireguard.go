package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"ilnp/lab/measure"
	"ilnp/lab/netns"
	"ilnp/lab/pcap"
)

// Mode wireguard (issue 26): a roaming WireGuard tunnel as a user sets it up today, beside
// ILNP in the same testbed. wireguard-go (this kernel has no WireGuard module; TUN is built
// in) runs in the MN and the CN; iperf3 uses the tunnel's inner addresses (WGPrefix, with
// the nodes' identifiers as interface IDs, so the measurement tells CN and MN apart as in
// every mode). The MN's peer entry names the CN's endpoint; the CN's has none and learns the
// MN's from its first authenticated packet, and again whenever one arrives from another
// address: WireGuard's own roaming, no reconfiguration when the MN moves. The MN, the
// roaming client, has a persistent keepalive of WGKeepalive (the value WireGuard's own
// documentation suggests for a peer that must stay reachable); the CN, a server, has none.
// The MN's outer source follows its routing: it keeps L2 while that link is up and moves to
// L3 when L2 goes.

// WGPrefix is the tunnel's inner network.
var WGPrefix = netip.MustParsePrefix("fd00:2626::/64")

// WireGuard ports and the MN's persistent keepalive.
const (
	WGPortCN    = 51820
	WGPortMN    = 51821
	WGKeepalive = 25 // seconds
)

func init() {
	Modes["wireguard"] = func(o ModeOptions) Mode { return &wgMode{opt: o} }
}

type wgMode struct {
	opt      ModeOptions
	ifaces   []string
	timeline string
	cnCap    *Proc // the CN's tunnel interface (the lab captures the CN's link only)
	cnInner  string
	mnIface  string
	cnPub    string // the MN's peer
}

// WGKeepaliveNote says where a persistent keepalive runs (peer.json, peers.md).
var WGKeepaliveNote = fmt.Sprintf("MN: PersistentKeepalive %d s (a roaming client's usual setting); CN: none", WGKeepalive)

func (*wgMode) Name() string { return "wireguard" }
func (*wgMode) Describe() string {
	return "WireGuard (wireguard-go on TUN at the MN and the CN), iperf3 over the tunnel's inner addresses; the CN learns the MN's new endpoint by roaming; " + WGKeepaliveNote
}

// WGInner is a node's inner address.
func WGInner(nid string) netip.Addr { return Addr(WGPrefix, nid) }

func (*wgMode) Target(*Topology) string       { return WGInner(MNNID).String() }
func (m *wgMode) Timelines() (string, string) { return m.timeline, "" }

// AdjustResult: the handoff signal is the MN's first packet from L3, not an LU.
func (*wgMode) AdjustResult(r *measure.Result) { r.Run.LUSent = nil }

// WireGuardCheck says why this machine cannot run mode wireguard, or nil.
func WireGuardCheck() error {
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("mode wireguard: no /dev/net/tun (the kernel needs CONFIG_TUN): %w", err)
	}
	for _, bin := range []string{"wireguard-go", "wg"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("mode wireguard needs %s (Debian packages wireguard-go and wireguard-tools; scripts/deps.sh installs them): %w", bin, err)
		}
	}
	return nil
}

func wgKeys() (priv, pub string, err error) {
	out, err := exec.Command("wg", "genkey").Output()
	if err != nil {
		return "", "", fmt.Errorf("wg genkey: %w", err)
	}
	priv = strings.TrimSpace(string(out))
	cmd := exec.Command("wg", "pubkey")
	cmd.Stdin = strings.NewReader(priv + "\n")
	if out, err = cmd.Output(); err != nil {
		return "", "", fmt.Errorf("wg pubkey: %w", err)
	}
	return priv, strings.TrimSpace(string(out)), nil
}

func (m *wgMode) Setup(ctx context.Context, t *Topology) error {
	if err := WireGuardCheck(); err != nil {
		return err
	}
	dir, err := filepath.Abs(m.opt.Dir)
	if err != nil {
		return err
	}
	type node struct {
		ns         *netns.NS
		name, nid  string
		iface      string
		port       int
		priv, pub  string
		keyFile    string
		peerConfig func(peerPub string) []string
	}
	cn := &node{ns: t.CN, name: "cn", nid: CNNID, iface: "wg" + t.ID + "c", port: WGPortCN}
	mn := &node{ns: t.MN, name: "mn", nid: MNNID, iface: "wg" + t.ID + "m", port: WGPortMN}
	cn.peerConfig = func(pub string) []string { // no endpoint: learned by roaming
		return []string{"peer", pub, "allowed-ips", WGInner(MNNID).String() + "/128"}
	}
	mn.peerConfig = func(pub string) []string {
		c := []string{"peer", pub, "allowed-ips", WGInner(CNNID).String() + "/128",
			"endpoint", netip.AddrPortFrom(netip.MustParseAddr(t.CNAddrText), WGPortCN).String()}
		if m.opt.Multihome {
			// Set once both uplinks are routed (MultihomeUp): wireguard-go sends a keepalive
			// when the device comes up with one, and would start from L3, the only link up.
			return c
		}
		return append(c, "persistent-keepalive", strconv.Itoa(WGKeepalive))
	}
	m.mnIface = mn.iface
	for _, n := range []*node{cn, mn} {
		if n.priv, n.pub, err = wgKeys(); err != nil {
			return err
		}
		n.keyFile = filepath.Join(dir, "wg-"+n.name+".key")
		if err := os.WriteFile(n.keyFile, []byte(n.priv+"\n"), 0o600); err != nil {
			return err
		}
		// -f: stay in the foreground, a child the lab stops (its UAPI socket is
		// /var/run/wireguard/IFACE.sock, hence the run's ID in the name).
		p, err := t.Start(n.ns, "wireguard-go-"+n.name, "wireguard-go", "-f", n.iface)
		if err != nil {
			return err
		}
		m.ifaces = append(m.ifaces, n.iface)
		sock := "/var/run/wireguard/" + n.iface + ".sock"
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat(sock); err == nil {
				break
			}
			if done, err := p.Exited(); done || time.Now().After(deadline) {
				return fmt.Errorf("wireguard-go in %s: no %s (exited %v, %v): %s", n.ns.Name, sock, done, err, p.Log())
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	m.cnPub = cn.pub
	for _, pair := range [][2]*node{{cn, mn}, {mn, cn}} {
		n, peer := pair[0], pair[1]
		args := append([]string{"wg", "set", n.iface, "private-key", n.keyFile, "listen-port", strconv.Itoa(n.port)}, n.peerConfig(peer.pub)...)
		for _, a := range [][]string{args,
			{"ip", "addr", "add", WGInner(n.nid).String() + "/64", "dev", n.iface, "nodad"},
			{"ip", "link", "set", n.iface, "up"}} {
			if out, err := n.ns.Run(a...); err != nil {
				return fmt.Errorf("mode wireguard in %s: %s: %w: %s", n.ns.Name, strings.Join(a, " "), err, out)
			}
		}
	}
	// The lab captures at the CN on its link: the applications' packets are on the tunnel
	// (captured on "any", which the measurement reads, less WireGuard's own packets).
	m.cnInner = filepath.Join(dir, "cn-inner.pcap")
	if m.cnCap, err = t.Start(t.CN, "tcpdump-cn-wg", "tcpdump", "-i", "any", "-n", "-U", "--immediate-mode", "-s", "200",
		"-Z", "root", "-w", m.cnInner, fmt.Sprintf("ip6 and not host ::1 and not udp port %d and not udp port %d", WGPortCN, WGPortMN)); err != nil {
		return err
	}
	if err := waitLog(ctx, m.cnCap, "listening on", 5*time.Second); err != nil {
		return err
	}
	if m.opt.Multihome {
		return nil // the MN speaks first once both uplinks are up (MultihomeUp)
	}
	return m.handshake(ctx, t)
}

// MultihomeUp routes the multihomed MN's uplinks (preferUplinkR2), then gives the MN its
// keepalive and lets it speak first: from L2, through the preferred uplink.
func (m *wgMode) MultihomeUp(ctx context.Context, t *Topology) error {
	if err := preferUplinkR2(ctx, t); err != nil {
		return err
	}
	args := []string{"wg", "set", m.mnIface, "peer", m.cnPub, "persistent-keepalive", strconv.Itoa(WGKeepalive)}
	if out, err := t.MN.Run(args...); err != nil {
		return fmt.Errorf("mode wireguard: %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return m.handshake(ctx, t)
}

// FailoverPackets: the WireGuard data messages the CN sent to the MN, as captured on the
// MN's links (mn-wire.pcap: the measured capture holds the inner packets, whose addresses
// name no access network); keepalives and handshakes are left out.
func (m *wgMode) FailoverPackets(dir string, _ []pcap.Packet) ([]pcap.Packet, error) {
	_, _, mnWire, _ := peerPaths(dir)
	var out []pcap.Packet
	err := eachPcapPacket(mnWire, func(r *rawPacket) {
		if wgOuter(&r.pkt) && r.pkt.Payload > 32 && len(r.rec) > r.ip+48 && r.rec[r.ip+48] == 4 {
			out = append(out, r.pkt)
		}
	})
	return out, err
}

// handshake has the MN reach the CN's inner address (the CN has no endpoint for it until
// the MN speaks).
func (m *wgMode) handshake(ctx context.Context, t *Topology) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pr, err := t.Ping(t.MN, WGInner(CNNID).String(), 1, 0, time.Second)
		if err == nil && len(pr.RTTs) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			show, _ := t.MN.Run("wg", "show", m.mnIface)
			return fmt.Errorf("mode wireguard: the MN does not reach the CN's inner address %s: %v; wg show: %s", WGInner(CNNID), err, show)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (m *wgMode) Teardown(t *Topology) error {
	if m.cnCap != nil {
		m.cnCap.Stop(2 * time.Second)
	}
	for _, p := range t.procsNamed("wireguard-go-") {
		p.Stop(3 * time.Second)
	}
	for _, i := range m.ifaces {
		_ = os.Remove("/var/run/wireguard/" + i + ".sock")
	}
	return nil
}

// wgOuter says whether a captured packet is WireGuard's own (outer) UDP.
func wgOuter(p *pcap.Packet) bool {
	if p.Proto != pcap.ProtoUDP {
		return false
	}
	for _, port := range []uint16{p.SrcPort, p.DstPort} {
		if port == WGPortCN || port == WGPortMN {
			return true
		}
	}
	return false
}

// Collect leaves in mn.pcap and cn.pcap the packets the applications sent and received (the
// tunnel's inner packets; mn-wire.pcap and cn-wire.pcap keep what was captured), writes the
// handoff (the MN's first WireGuard packet from its L3 address to the first WireGuard packet
// the MN receives there) as the MN's timeline, and the tunnel's overhead.
func (m *wgMode) Collect(t *Topology, dir string) {
	info := PeerInfo{Mode: m.Name(), Keepalive: WGKeepaliveNote,
		HandoffFrom: "the MN's first WireGuard packet from its L3 address (the CN learns the new endpoint from it)",
		HandoffTo:   "the first WireGuard packet the MN receives at its L3 address",
		OverheadHow: "mean IPv6 length of the CN -> MN WireGuard data messages at the MN minus the mean length of the inner CN -> MN packets they carried (outer IPv6 + UDP + WireGuard header, tag and padding)",
	}
	if m.opt.Multihome {
		info.Keepalive = WGKeepaliveNote + " (set once both uplinks were up)"
		info.Notes = append(info.Notes, "multihomed: WireGuard has no path failure detection: it sends where the MN's routing sends; "+UplinkPreferenceNote)
	}
	defer func() { writeJSON(filepath.Join(dir, "peer.json"), info) }()
	mn, cn, mnWire, cnWire := peerPaths(dir)
	if m.cnCap != nil {
		m.cnCap.Stop(3 * time.Second)
	}
	if err := os.Rename(mn, mnWire); err != nil {
		info.Notes = append(info.Notes, err.Error())
		return
	}
	if _, err := filterPcapFile(mnWire, mn, func(r *rawPacket) bool { return !wgOuter(&r.pkt) }); err != nil {
		info.Notes = append(info.Notes, err.Error())
		_ = os.Rename(mnWire, mn)
	}
	// The CN's: its tunnel interface's capture (from before the flow: the measurement takes
	// the flow's packets by their iperf3 ports and times).
	if err := os.Rename(cn, cnWire); err != nil {
		info.Notes = append(info.Notes, err.Error())
	} else if err := os.Rename(m.cnInner, cn); err != nil {
		info.Notes = append(info.Notes, err.Error())
		_ = os.Rename(cnWire, cn)
	}
	l3 := Addr(L3, MNNID).As16()
	cnNID, mnNID := nid64(CNNID), nid64(MNNID)
	var from, to time.Time
	var outer, inner, nOuter, nInner int
	if err := eachPcapPacket(mnWire, func(r *rawPacket) {
		p := &r.pkt
		toMN := p.SrcNID() == cnNID && p.DstNID() == mnNID
		switch {
		case wgOuter(p):
			if from.IsZero() && p.Dir == pcap.DirOutgoing && in64(p.Src, l3) && p.SrcPort == WGPortMN {
				from = p.Time
			}
			if !from.IsZero() && to.IsZero() && p.Dir != pcap.DirOutgoing && in64(p.Dst, l3) && p.DstPort == WGPortMN {
				to = p.Time
			}
			// Transport data (type 4) with a payload: a keepalive is 32 bytes of UDP payload.
			if toMN && p.Dir != pcap.DirOutgoing && p.Payload > 32 && len(r.rec) > r.ip+48 && r.rec[r.ip+48] == 4 {
				outer += r.ipLen()
				nOuter++
			}
		case toMN && p.Dir != pcap.DirOutgoing:
			// Every inner packet the CN sent through the tunnel (iperf3's control connection
			// and pure ACKs too: the data messages above carry them all).
			inner += r.ipLen()
			nInner++
		}
	}); err != nil {
		info.Notes = append(info.Notes, err.Error())
	}
	if nOuter > 0 && nInner > 0 {
		v := float64(outer)/float64(nOuter) - float64(inner)/float64(nInner)
		info.OverheadBytesPerPacket, info.OverheadPackets = &v, nOuter
	}
	if from.IsZero() {
		info.Notes = append(info.Notes, "the MN sent no WireGuard packet from its L3 address")
		return
	}
	m.timeline = filepath.Join(dir, "mn-events-peer.jsonl")
	if err := peerTimeline(m.timeline, from, to, "WireGuard: the MN's first packet from "+Addr(L3, MNNID).String(), "WireGuard: the first packet to L3"); err != nil {
		info.Notes = append(info.Notes, err.Error())
		m.timeline = ""
	}
}
