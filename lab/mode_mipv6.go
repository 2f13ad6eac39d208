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
// in R2, the MN and (mipv6-ro) the CN; nothing of it runs in the other modes.

// MIPv6HAProcessing is T_HA, an explicit extra delay at the home agent between a Binding
// Update and its binding + BAck, on top of the home agent's own work (default 0). The second
// the thesis measured for UMIP is not this: it is the home agent's DAD of the home address
// before the first BAck of a new binding (RFC 6275 s.10.3.1, binding.DefaultDADTimeout),
// which mip6d always does. ilnp-lab sets T_HA from --mipv6-tha; reports say which was used.
var MIPv6HAProcessing time.Duration

// HomeAgentAddr is R2's address on the home link L2.
const HomeAgentAddr = "2001:db8:2::1"

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
	r1cap              *Proc
	collected, stopped bool
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
	bin, err := m.mip6d()
	if err != nil {
		return err
	}
	hoa, cn := HomeAddress().String(), Addr(L1, CNNID).String()
	steps := []struct {
		ns   *netns.NS
		args []string
	}{
		// Sockets bound to the home address survive the home link going down (package doc of
		// lab/mipv6/datapath).
		{t.MN, []string{"ip", "addr", "add", hoa + "/128", "dev", "lo", "nodad"}},
		// At home the home link's router is the default; R3's takes over when it goes.
		{t.MN, []string{"sysctl", "-qw", "net.ipv6.conf." + IfMNR3 + ".ra_defrtr_metric=2048"}},
		// Room for the tunnel's 40 bytes (or the RH2's 24) on 1500-byte links: the CN sends
		// at most 1460, TCP segments both ways stay below it (advmss).
		{t.CN, []string{"ip", "-6", "route", "replace", "default", "via", "2001:db8:1::1", "dev", IfCN, "mtu", "1460", "advmss", "1400"}},
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
	if m.ro {
		m.cnEv = filepath.Join(dir, "cn-events.jsonl")
		if err := start(t.CN, "mip6d-cn", "-role", "cn", "-node", "cn", "-addr", cn, "-ifaces", IfCN,
			"-events", m.cnEv); err != nil {
			return err
		}
		mnArgs = append(mnArgs, "-cn", cn)
	}
	if err := start(t.MN, "mip6d-mn", mnArgs...); err != nil {
		return err
	}
	// The R1-R3 link shows what the thesis argues about: the tunnel from the HA, or the
	// route-optimised packets.
	p, err := t.Start(t.R1, "tcpdump-r1r3", "tcpdump", "-i", "r1-r3", "-n", "-U", "--immediate-mode", "-s", "200",
		"-Z", "root", "-w", filepath.Join(dir, "r1-r3.pcap"), "ip6")
	if err != nil {
		return err
	}
	m.r1cap = p
	return waitLog(ctx, p, "listening on", 5*time.Second)
}

// Collect stops the R1-R3 capture, rewrites the MN's capture so that tunnelled packets count
// as what the MN received (mn-wire.pcap keeps the original; UMIP's ip6tnl interface showed
// the same), and for mipv6-ro hands the measurement a timeline where the handoff ends with
// the CN's BAck.
func (m *mipv6Mode) Collect(t *Topology, dir string) {
	if m.r1cap != nil {
		m.r1cap.Stop(3 * time.Second)
	}
	var notes []string
	mn, wire := filepath.Join(dir, "mn.pcap"), filepath.Join(dir, "mn-wire.pcap")
	if err := os.Rename(mn, wire); err == nil {
		n, err := DecapsulatePcapFile(wire, mn)
		if err != nil {
			notes = append(notes, "mn.pcap: "+err.Error())
			_ = os.Rename(wire, mn)
		} else {
			notes = append(notes, fmt.Sprintf("mn.pcap: %d tunnelled packets shown as their inner packets (mn-wire.pcap as captured)", n))
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
	})
	m.collected = true
}

func (m *mipv6Mode) Teardown(t *Topology) error {
	if m.r1cap != nil {
		m.r1cap.Stop(2 * time.Second)
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
