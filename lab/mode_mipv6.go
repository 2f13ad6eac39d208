package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/binding"
	"ilnp/lab/mipv6/daemon"
	"ilnp/lab/netns"
)

// The Mobile IPv6 baseline (RFC 6275, issue 7): modes mipv6 (home registration, bidirectional
// tunnel through the HA) and mipv6-ro (plus route optimisation with the CN). R2 is the home
// agent on its MN-side link, so L2 is the home network and the MN's L2 address is its home
// address; iperf3 on the CN reaches the MN at that address. mip6d (lab/mipv6/cmd/mip6d) runs
// in R2, the MN and (mipv6-ro) the CN; nothing of it runs in the other modes. With
// --double-jump the CN is a mobile node too: L4 its home network, R4 its home agent, its L4
// address its home address (iperf3 runs from it); with RO each node route-optimises with the
// other and answers the other as its correspondent (mip6d -correspondent).

// MIPv6HAProcessing is T_HA, an explicit extra delay at the home agent between a Binding
// Update and its binding + BAck, on top of the home agent's own work (default 0). The second
// the thesis measured for UMIP is not this: it is the home agent's DAD of the home address
// before the first BAck of a new binding (RFC 6275 s.10.3.1, binding.DefaultDADTimeout),
// which mip6d always does. ilnp-lab sets T_HA from --mipv6-tha; reports say which was used.
var MIPv6HAProcessing time.Duration

// HomeAgentAddr is R2's address on the home link L2.
const HomeAgentAddr = "2001:db8:2::1"

// CNHomeAgentAddr is R4's address on the CN's home link L4: in a double jump (lab/doublejump.go)
// the CN is a mobile node too, L4 its home network and R4 its home agent.
const CNHomeAgentAddr = "2001:db8:4::1"

func init() {
	Modes["mipv6"] = func(o ModeOptions) Mode { return &mipv6Mode{opt: o, tha: MIPv6HAProcessing} }
	Modes["mipv6-ro"] = func(o ModeOptions) Mode { return &mipv6Mode{ro: true, opt: o, tha: MIPv6HAProcessing} }
}

type mipv6Mode struct {
	ro                 bool
	tha                time.Duration
	opt                ModeOptions
	dir                string
	mnEv, cnEv, haEv   string
	measured           string
	r1caps             []*Proc
	doubleJump         bool
	collected, stopped bool
	// freshHomeTest: the MN's mip6d runs the home test at every move away (-fresh-home-test).
	freshHomeTest bool
}

func (m *mipv6Mode) Name() string {
	if m.ro {
		return "mipv6-ro"
	}
	return "mipv6"
}

// THADescription says which home agent processing time a run used.
// (DAD always runs: it is named too, since it is where a new binding's delay comes from.)
func THADescription(tha time.Duration) string {
	dad := fmt.Sprintf("HA DAD of the home address %v before the first BAck of a new binding (RFC 6275 s.10.3.1, UMIP's timeout)", binding.DefaultDADTimeout)
	if tha == 0 {
		return dad + "; T_HA 0 (no extra delay)"
	}
	return fmt.Sprintf("%s; T_HA %v added on top at the HA", dad, tha)
}

func (m *mipv6Mode) Describe() string {
	what := "Mobile IPv6 (RFC 6275) baseline without route optimisation: HA on R2 (home link L2), traffic to the MN's home address through the HA's tunnel"
	if m.ro {
		what = "Mobile IPv6 (RFC 6275) baseline with route optimisation: HA on R2 (home link L2), return routability and a BU to the CN after the home registration, then type 2 RH / Home Address option (handoff delay runs to the CN's BAck)"
	}
	return what + "; " + THADescription(m.tha)
}

// HomeAddress is the MN's home address (its SLAAC address in L2).
func HomeAddress() netip.Addr { return Addr(L2, MNNID) }

// CNHomeAddress is the CN's home address in a double jump (its SLAAC address in L4).
func CNHomeAddress() netip.Addr { return Addr(L4, CNNID) }

func (m *mipv6Mode) Target(*Topology) string { return HomeAddress().String() }

func (m *mipv6Mode) Timelines() (string, string) {
	if m.measured != "" {
		return m.measured, m.cnEv
	}
	return m.mnEv, m.cnEv
}

// BuildMip6d builds lab/mipv6/cmd/mip6d from the module at root into dir.
func BuildMip6d(root, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "mip6d"), "./lab/mipv6/cmd/mip6d")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build mip6d: %w\n%s", err, out)
	}
	return nil
}

// mip6d finds the daemon in the binaries directory, or builds it there (without one: into
// bin/ next to the repetitions, so that later repetitions find it).
func (m *mipv6Mode) mip6d() (string, error) {
	dir := m.opt.BinDir
	if dir == "" {
		dir = filepath.Join(filepath.Dir(m.dir), "bin")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "mip6d")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", fmt.Errorf("mode %s needs mip6d in %s or the source to build it: %w", m.Name(), dir, err)
	}
	return bin, BuildMip6d(root, dir)
}

func (m *mipv6Mode) Setup(ctx context.Context, t *Topology) error {
	dir, err := filepath.Abs(m.opt.Dir)
	if err != nil {
		return err
	}
	m.dir = dir
	m.doubleJump = t.Cfg.DoubleJump
	bin, err := m.mip6d()
	if err != nil {
		return err
	}
	hoa, cn := HomeAddress().String(), Addr(L1, CNNID).String()
	if m.doubleJump {
		cn = CNHomeAddress().String()
	}
	steps := []nsCmd{
		// Sockets bound to the home address survive the home link going down (package doc of
		// lab/mipv6/datapath).
		{t.MN, []string{"ip", "addr", "add", hoa + "/128", "dev", "lo", "nodad"}},
		// At home the home link's router is the default; R3's takes over when it goes.
		{t.MN, []string{"sysctl", "-qw", "net.ipv6.conf." + IfMNR3 + ".ra_defrtr_metric=2048"}},
	}
	if m.doubleJump {
		// The CN is a mobile node too (home link L4, R4 its home agent): the same for it.
		// Room for the tunnel's 40 bytes (or with RO the HAO's and RH2's 24 each) in its IPv6
		// MTU, which its routes from the RAs take; the device MTU stays 1500 for the grown
		// packets.
		steps = append(steps,
			nsCmd{t.CN, []string{"ip", "addr", "add", cn + "/128", "dev", "lo", "nodad"}},
			nsCmd{t.CN, []string{"sysctl", "-qw", "net.ipv6.conf." + IfCNR5 + ".ra_defrtr_metric=2048"}},
			nsCmd{t.CN, []string{"sysctl", "-qw", "net.ipv6.conf." + IfCNR4 + ".mtu=1452"}},
			nsCmd{t.CN, []string{"sysctl", "-qw", "net.ipv6.conf." + IfCNR5 + ".mtu=1452"}})
	} else {
		// Room for the tunnel's 40 bytes (or the RH2's 24) on 1500-byte links: the CN sends
		// at most 1460, TCP segments both ways stay below it (advmss).
		steps = append(steps, nsCmd{t.CN, []string{"ip", "-6", "route", "replace", "default", "via", "2001:db8:1::1", "dev", IfCN, "mtu", "1460", "advmss", "1400"}})
	}
	for _, s := range steps {
		if _, err := s.ns.Run(s.args...); err != nil {
			return err
		}
	}
	m.haEv, m.mnEv = filepath.Join(dir, "ha-events.jsonl"), filepath.Join(dir, "mn-events.jsonl")
	start := func(ns *netns.NS, name string, args ...string) error {
		p, err := t.Start(ns, name, append([]string{bin}, args...)...)
		if err != nil {
			return err
		}
		return waitLog(ctx, p, daemon.ReadyLine, 15*time.Second)
	}
	if err := start(t.R2, "mip6d-ha", "-role", "ha", "-node", "ha", "-addr", HomeAgentAddr,
		"-home-prefix", L2.String(), "-home-link", "r2-mn", "-ifaces", "r2-r1,r2-mn",
		"-t-ha", m.tha.String(), "-events", m.haEv); err != nil {
		return err
	}
	mnArgs := []string{"-role", "mn", "-node", "mn", "-hoa", hoa, "-ha", HomeAgentAddr, "-home-prefix", L2.String(),
		"-ifaces", IfMNR2 + "," + IfMNR3, "-events", m.mnEv}
	m.cnEv = filepath.Join(dir, "cn-events.jsonl")
	switch {
	case m.doubleJump:
		if err := start(t.R4, "mip6d-ha-cn", "-role", "ha", "-node", "ha-cn", "-addr", CNHomeAgentAddr,
			"-home-prefix", L4.String(), "-home-link", "r4-cn", "-ifaces", "r4-r1,r4-cn",
			"-t-ha", m.tha.String(), "-events", filepath.Join(dir, "ha-cn-events.jsonl")); err != nil {
			return err
		}
		cnArgs := []string{"-role", "mn", "-node", "cn", "-hoa", cn, "-ha", CNHomeAgentAddr, "-home-prefix", L4.String(),
			"-ifaces", IfCNR4 + "," + IfCNR5, "-events", m.cnEv}
		if m.ro {
			// Each is the other's correspondent: return routability and BUs to the other's
			// home address, through the other's home agent.
			cnArgs = append(cnArgs, "-cn", hoa, "-correspondent")
			mnArgs = append(mnArgs, "-cn", cn, "-correspondent")
		}
		if err := start(t.CN, "mip6d-cn", cnArgs...); err != nil {
			return err
		}
	case m.ro:
		if err := start(t.CN, "mip6d-cn", "-role", "cn", "-node", "cn", "-addr", cn, "-ifaces", IfCN,
			"-events", m.cnEv); err != nil {
			return err
		}
		mnArgs = append(mnArgs, "-cn", cn)
		if m.freshHomeTest {
			mnArgs = append(mnArgs, "-fresh-home-test")
		}
	default:
		m.cnEv = ""
	}
	if err := start(t.MN, "mip6d-mn", mnArgs...); err != nil {
		return err
	}
	// The R1-R3 link shows what the thesis argues about: the tunnel from the HA, or the
	// route-optimised packets; in a double jump R1-R5 shows the CN's side.
	links := []struct{ name, ifname string }{{"tcpdump-r1r3", "r1-r3"}}
	if m.doubleJump {
		links = append(links, struct{ name, ifname string }{"tcpdump-r1r5", "r1-r5"})
	}
	for _, l := range links {
		p, err := t.Start(t.R1, l.name, "tcpdump", "-i", l.ifname, "-n", "-U", "--immediate-mode", "-s", "200",
			"-Z", "root", "-w", filepath.Join(dir, l.ifname+".pcap"), "ip6")
		if err != nil {
			return err
		}
		m.r1caps = append(m.r1caps, p)
		if err := waitLog(ctx, p, "listening on", 5*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// Collect stops the R1-R3 capture, rewrites the MN's capture so that tunnelled packets count
// as what the MN received (mn-wire.pcap keeps the original; UMIP's ip6tnl interface showed
// the same), and for mipv6-ro hands the measurement a timeline where the handoff ends with
// the CN's BAck.
func (m *mipv6Mode) Collect(t *Topology, dir string) {
	for _, p := range m.r1caps {
		p.Stop(3 * time.Second)
	}
	var notes []string
	nodes := []string{"mn"}
	if m.doubleJump {
		nodes = append(nodes, "cn") // the CN tunnels too
	}
	for _, node := range nodes {
		capture, wire := filepath.Join(dir, node+".pcap"), filepath.Join(dir, node+"-wire.pcap")
		if err := os.Rename(capture, wire); err == nil {
			n, err := DecapsulatePcapFile(wire, capture)
			if err != nil {
				notes = append(notes, node+".pcap: "+err.Error())
				_ = os.Rename(wire, capture)
			} else {
				notes = append(notes, fmt.Sprintf("%s.pcap: %d tunnelled packets shown as their inner packets (%s-wire.pcap as captured)", node, n, node))
			}
		}
	}
	if m.ro && m.mnEv != "" {
		m.measured = filepath.Join(dir, "mn-events-handoff.jsonl")
		if err := handoffToCorrespondent(m.mnEv, m.measured, netip.MustParseAddr(HomeAgentAddr)); err != nil {
			notes = append(notes, "handoff timeline: "+err.Error())
			m.measured = ""
		}
	}
	writeJSON(filepath.Join(dir, "mipv6.json"), map[string]any{
		"mode": m.Name(), "route_optimisation": m.ro, "t_ha_ms": float64(m.tha) / 1e6, "t_ha": THADescription(m.tha),
		"dad_timeout_ms": float64(binding.DefaultDADTimeout) / 1e6,
		"home_agent":     HomeAgentAddr, "home_address": HomeAddress().String(), "notes": notes,
		"double_jump": m.doubleJump, "cn_home_agent": cnHomeAgent(m.doubleJump), "cn_home_address": cnHomeAddress(m.doubleJump),
	})
	m.collected = true
}

func cnHomeAgent(doubleJump bool) string {
	if doubleJump {
		return CNHomeAgentAddr
	}
	return ""
}

func cnHomeAddress(doubleJump bool) string {
	if doubleJump {
		return CNHomeAddress().String()
	}
	return ""
}

func (m *mipv6Mode) Teardown(t *Topology) error {
	for _, p := range m.r1caps {
		p.Stop(2 * time.Second)
	}
	for _, p := range t.procsNamed("mip6d-") {
		p.Stop(3 * time.Second)
	}
	return nil
}

// handoffToCorrespondent copies the MN's timeline for the handoff measurement of mipv6-ro:
// the home agent's BAck becomes "home_back_received", so the handoff runs from the first BU
// to the correspondent's BAck (RO complete), as issue 7 defines it.
func handoffToCorrespondent(in, out string, ha netip.Addr) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	evs, err := timeline.Read(f)
	f.Close()
	if err != nil {
		return err
	}
	var b strings.Builder
	w := timeline.NewWriter(&b)
	for _, e := range evs {
		if e.Kind == timeline.BAckReceived && e.Peer == ha.String() {
			e.Kind = "home_back_received"
		}
		w.Emit(e)
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

// DecapsulatePcapFile writes in's packets to out with every IPv6-in-IPv6 packet replaced by
// its inner packet (same time stamp and link header), and says how many it changed.
func DecapsulatePcapFile(in, out string) (int, error) {
	data, err := os.ReadFile(in)
	if err != nil {
		return 0, err
	}
	res, n, err := DecapsulatePcap(data)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", in, err)
	}
	return n, os.WriteFile(out, res, 0o644)
}

// Link types with the offset of the IPv6 header and of the EtherType.
var linkHeaders = map[uint32]struct{ ip, etherType int }{
	1:   {14, 12}, // Ethernet
	113: {16, 14}, // Linux cooked (SLL)
	276: {20, 0},  // Linux cooked v2 (SLL2), tcpdump -i any
}

// DecapsulatePcap is DecapsulatePcapFile on a whole capture in memory (classic pcap, either
// byte order, µs or ns stamps). A truncated last record is an error; nothing is lost: the
// input is left as it is.
func DecapsulatePcap(data []byte) ([]byte, int, error) {
	if len(data) < 24 {
		return nil, 0, errors.New("pcap: no file header")
	}
	var bo binary.ByteOrder
	switch {
	case binary.LittleEndian.Uint32(data) == 0xa1b2c3d4 || binary.LittleEndian.Uint32(data) == 0xa1b23c4d:
		bo = binary.LittleEndian
	case binary.BigEndian.Uint32(data) == 0xa1b2c3d4 || binary.BigEndian.Uint32(data) == 0xa1b23c4d:
		bo = binary.BigEndian
	default:
		return nil, 0, fmt.Errorf("pcap: magic %#x", binary.LittleEndian.Uint32(data))
	}
	lh, ok := linkHeaders[bo.Uint32(data[20:])&0x0fffffff]
	if !ok {
		return nil, 0, fmt.Errorf("pcap: link type %d not handled", bo.Uint32(data[20:]))
	}
	out := append(make([]byte, 0, len(data)), data[:24]...)
	n := 0
	for off := 24; off < len(data); {
		if len(data)-off < 16 {
			return nil, 0, fmt.Errorf("pcap: truncated record header at byte %d", off)
		}
		hdr := data[off : off+16]
		incl, orig := bo.Uint32(hdr[8:]), bo.Uint32(hdr[12:])
		if uint64(incl) > uint64(len(data)-off-16) {
			return nil, 0, fmt.Errorf("pcap: record at byte %d says %d bytes, %d left", off, incl, len(data)-off-16)
		}
		rec := data[off+16 : off+16+int(incl)]
		off += 16 + int(incl)
		ip := lh.ip
		tunnelled := len(rec) >= ip+80 && binary.BigEndian.Uint16(rec[lh.etherType:]) == 0x86dd &&
			rec[ip]>>4 == 6 && rec[ip+6] == 41 && rec[ip+40]>>4 == 6 && orig >= uint32(ip+80)
		if !tunnelled {
			out = append(out, hdr...)
			out = append(out, rec...)
			continue
		}
		var nh [16]byte
		copy(nh[:], hdr)
		bo.PutUint32(nh[8:], incl-40)
		bo.PutUint32(nh[12:], orig-40)
		out = append(out, nh[:]...)
		out = append(out, rec[:ip]...)
		out = append(out, rec[ip+40:]...)
		n++
	}
	return out, n, nil
}
