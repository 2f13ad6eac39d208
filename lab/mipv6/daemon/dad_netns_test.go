package daemon

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/lab/mipv6/datapath"
	"ilnp/lab/mipv6/mh"
)

// buildMip6d builds the daemon for a test.
func buildMip6d(t *testing.T) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || len(strings.TrimSpace(string(gomod))) == 0 {
		t.Fatalf("module root: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "mip6d")
	cmd := exec.Command("go", "build", "-o", bin, "./lab/mipv6/cmd/mip6d")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build mip6d: %v\n%s", err, out)
	}
	return bin
}

// dadPacket is one packet of the HA's capture, as tshark dissects it (mobility headers quoted
// in ICMP errors carry an icmpType).
type dadPacket struct {
	at                    float64
	icmpType, target, src string
	mhType, buSeq         string
	backStatus, backSeqnr string
}

// TestNetnsHomeAgentDAD runs mip6d as home agent and sends it Binding Updates from a care-of
// address. Its capture shows, for a new binding, DAD's Neighbor Solicitation for the home
// address (from ::) on the home link before the first BAck, which waits the DAD timeout; for
// the refresh that follows, no solicitation and an immediate BAck; for a home address that a
// node on the home link uses, its defending Neighbor Advertisement and a BAck with status 134.
func TestNetnsHomeAgentDAD(t *testing.T) {
	nstest.RequireTool(t, "tcpdump", "tshark")
	bin := buildMip6d(t)
	haNS, home, mn := nstest.New(t, "dadHA"), nstest.New(t, "dadHome"), nstest.New(t, "dadMN")
	for _, ns := range []*nstest.NS{haNS, home, mn} {
		ns.Run("sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	}
	haNS.Run("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	nstest.Link(t, haNS, "r2-mn", home, "h0")
	nstest.Link(t, haNS, "r2-r1", mn, "m3")
	defended := netip.MustParseAddr("2001:db8:2::99")
	haNS.Run("ip", "addr", "add", haAddr.String()+"/64", "dev", "r2-mn", "nodad")
	haNS.Run("ip", "addr", "add", "2001:db8:3::1/64", "dev", "r2-r1", "nodad")
	home.Run("ip", "addr", "add", defended.String()+"/64", "dev", "h0", "nodad")
	mn.Run("ip", "addr", "add", coa.String()+"/64", "dev", "m3", "nodad")
	mn.Run("ip", "-6", "route", "add", "default", "via", "2001:db8:3::1", "dev", "m3")

	dir := t.TempDir()
	pcap := filepath.Join(dir, "ha.pcap")
	// --immediate-mode: without it the last packets sit in an unfinished TPACKET_V3 block and are
	// lost when tcpdump ends.
	capt := haNS.Capture("any", pcap, "--immediate-mode", "ip6")
	var log nstest.SyncBuffer
	haNS.Start(func(c *exec.Cmd) { c.Stdout, c.Stderr = &log, &log }, bin, "-role", "ha", "-addr", haAddr.String(),
		"-home-prefix", homePrefix.String(), "-home-link", "r2-mn", "-ifaces", "r2-r1,r2-mn", "-events", filepath.Join(dir, "ha.jsonl"))
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(log.String(), ReadyLine); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("mip6d not ready: %s", log.String())
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mip6d:\n%s", log.String())
		}
	})

	var sender *datapath.Sender
	if err := mn.Do(func() (err error) { sender, err = datapath.NewSender(); return err }); err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	sendBU := func(home netip.Addr, seq uint16) {
		t.Helper()
		pkt, err := mh.AppendMessage(nil, mh.Envelope{Src: coa, Dst: haAddr, HomeAddress: home},
			&mh.BindingUpdate{Seq: seq, Ack: true, Home: true, Lifetime: 25})
		if err != nil {
			t.Fatal(err)
		}
		if err := sender.Send(pkt); err != nil {
			t.Fatal(err)
		}
	}
	sendBU(hoa, 10)
	time.Sleep(1500 * time.Millisecond) // DAD's second, and room for the BAck
	sendBU(hoa, 11)                     // refresh
	time.Sleep(300 * time.Millisecond)
	sendBU(defended, 1)
	time.Sleep(500 * time.Millisecond)
	capt.Stop()

	pkts := dissectDAD(t, pcap)
	find := func(what string, match func(p dadPacket) bool) []dadPacket {
		var out []dadPacket
		for _, p := range pkts {
			if match(p) {
				out = append(out, p)
			}
		}
		t.Logf("%s: %d", what, len(out))
		return out
	}
	nsFor := func(a netip.Addr) []dadPacket {
		return find("NS for "+a.String(), func(p dadPacket) bool { return p.icmpType == "135" && p.target == a.String() && p.src == "::" })
	}
	back := func(seq, status string) []dadPacket {
		return find("BAck "+seq+" status "+status, func(p dadPacket) bool {
			return p.icmpType == "" && p.mhType == "6" && p.backSeqnr == seq && p.backStatus == status
		})
	}
	bu := func(seq string) []dadPacket {
		return find("BU "+seq, func(p dadPacket) bool { return p.icmpType == "" && p.mhType == "5" && p.buSeq == seq })
	}
	ns, bu10, back10, bu11, back11 := nsFor(hoa), bu("10"), back("10", "0"), bu("11"), back("11", "0")
	if len(ns) != 1 || len(bu10) != 1 || len(back10) != 1 || len(bu11) != 1 || len(back11) != 1 {
		t.Fatalf("want one NS for the home address, one BU and one accepting BAck each for the new binding and the refresh; capture:\n%+v", pkts)
	}
	if !(bu10[0].at <= ns[0].at && ns[0].at < back10[0].at) {
		t.Errorf("new binding: BU at %.6f, NS at %.6f, BAck at %.6f: the NS must come between", bu10[0].at, ns[0].at, back10[0].at)
	}
	if d := back10[0].at - ns[0].at; d < 0.99 {
		t.Errorf("BAck %.3f s after the NS: DAD waits 1 s", d)
	}
	if ns[0].at > bu11[0].at {
		t.Errorf("a solicitation for the refresh")
	}
	nsD, na := nsFor(defended), find("NA for the used address", func(p dadPacket) bool { return p.icmpType == "136" && p.target == defended.String() })
	back134 := back("1", "134")
	if len(nsD) != 1 || len(na) == 0 || len(back134) != 1 {
		t.Fatalf("defended address: want its NS, the defence and a BAck with status 134; capture:\n%+v", pkts)
	}
	if !(nsD[0].at <= na[0].at && na[0].at <= back134[0].at) {
		t.Errorf("defended address: NS %.6f, NA %.6f, BAck %.6f out of order", nsD[0].at, na[0].at, back134[0].at)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "ha.jsonl"))
	for _, want := range []string{`"type":"dad_ns_sent"`, `"type":"na_received"`, `"detail":"failed"`, `"detail":"passed"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("HA timeline lacks %s:\n%s", want, b)
		}
	}
}

func dissectDAD(t *testing.T, file string) []dadPacket {
	t.Helper()
	fields := []string{"frame.time_epoch", "icmpv6.type", "icmpv6.nd.ns.target_address", "ipv6.src", "mip6.mhtype",
		"mip6.bu.seqnr", "mip6.ba.status", "mip6.ba.seqnr", "icmpv6.nd.na.target_address"}
	args := []string{"-r", file, "-T", "fields", "-E", "separator=|"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command("tshark", args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	var pkts []dadPacket
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) < len(fields) {
			continue
		}
		at, _ := strconv.ParseFloat(f[0], 64)
		p := dadPacket{at: at, icmpType: f[1], target: f[2], src: f[3], mhType: f[4], buSeq: f[5], backStatus: f[6], backSeqnr: f[7]}
		if p.icmpType == "136" {
			p.target = f[8]
		}
		pkts = append(pkts, p)
	}
	return pkts
}
