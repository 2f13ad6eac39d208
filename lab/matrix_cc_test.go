package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ilnp/lab/cc"
	"ilnp/lab/summary"
)

func TestRunConfigCongestion(t *testing.T) {
	base := RunConfig{Scenario: "lan-lan", Mode: "ilnp-soft", Traffic: "tcp", Profile: Profiles["quick"], Reps: 1, Out: "x"}
	if err := base.Validate(); err != nil || base.congestion() != "cubic" {
		t.Fatalf("default: %v, congestion %q (want the traffic's cubic)", err, base.congestion())
	}
	for _, c := range []struct {
		traffic, congestion string
		ok                  bool
	}{
		{"tcp", "hybla", true}, {"tcp", "veno", true}, {"tcp", "bbr", true},
		{"tcp", "reno", false}, {"tcp", "hybla ", false}, {"udp-hd", "hybla", false},
	} {
		cfg := base
		cfg.Traffic, cfg.Congestion = c.traffic, c.congestion
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("%s with --congestion %q: %v", c.traffic, c.congestion, err)
		}
	}
	udp := base
	udp.Traffic = "udp-voip"
	if udp.congestion() != "" {
		t.Errorf("UDP run has congestion control %q", udp.congestion())
	}
	tr := Traffics["tcp"]
	tr.Congestion = "veno"
	if args := strings.Join(tr.ClientArgs("x", 12e9, "l"), " "); !strings.HasSuffix(args, "-C veno") {
		t.Errorf("iperf3 client: %s", args)
	}
}

func writeCell(t *testing.T, dir string, bytes []int64, retrans, lost []int) {
	t.Helper()
	var runs []summary.Run
	for i := range bytes {
		runs = append(runs, summary.Run{TCPBytes: &bytes[i], TCPRetransmissions: &retrans[i], TCPLost: &lost[i]})
	}
	s := summary.New("x", "y", "tcp", runs)
	s.Congestion = filepath.Base(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(filepath.Join(dir, "summary.json")); err != nil {
		t.Fatal(err)
	}
}

func TestVariantsSection(t *testing.T) {
	m := MatrixConfig{Scenarios: []string{"lan-lan", "wan-wan"}, Modes: []string{"ilnp-soft", "mipv6"},
		Traffics: []string{"udp-voip", "tcp"}, Congestions: []string{"hybla", "cubic", "veno"}, Reps: 2,
		Profile: Profiles["quick"], Out: t.TempDir()}
	if err := m.validCongestions(); err != nil {
		t.Fatal(err)
	}
	if got := m.congestionsFor("udp-voip"); len(got) != 1 || got[0] != "" {
		t.Errorf("UDP has a congestion axis: %q", got)
	}
	if d := m.dir("lan-lan", "mipv6", "tcp"); d != filepath.Join(m.Out, "lan-lan", "mipv6", "tcp-cubic") {
		t.Errorf("tables read %s, want the cubic cell", d)
	}
	if d := m.dir("lan-lan", "mipv6", "udp-voip"); d != filepath.Join(m.Out, "lan-lan", "mipv6", "udp-voip") {
		t.Errorf("UDP cell moved to %s", d)
	}
	// Hybla sends most on wan-wan only, Veno least everywhere and retransmits less; ilnp-soft
	// loses nothing with cubic, 3 segments with veno.
	for _, sc := range m.Scenarios {
		for _, mo := range m.Modes {
			lost := map[bool][]int{true: {0, 0}, false: {200, 220}}[mo == "ilnp-soft"]
			writeCell(t, m.cellDir(sc, mo, "tcp", "cubic"), []int64{10e6, 12e6}, []int{100, 120}, lost)
			hb := []int64{9e6, 9e6}
			if sc == "wan-wan" {
				hb = []int64{15e6, 16e6}
			}
			writeCell(t, m.cellDir(sc, mo, "tcp", "hybla"), hb, []int{100, 120}, lost)
			vl := []int{lost[0] + 3, lost[1] + 3}
			writeCell(t, m.cellDir(sc, mo, "tcp", "veno"), []int64{5e6, 6e6}, []int{50, 60}, vl)
		}
	}
	_ = os.MkdirAll(filepath.Join(m.cellDir("wan-wan", "mipv6", "tcp", "hybla"), "rep-1"), 0o755)
	writeJSON(filepath.Join(m.cellDir("wan-wan", "mipv6", "tcp", "hybla"), "rep-1", "cc.json"), CongestionRecord{
		Congestion: "hybla", Counters: map[string]uint64{"acks": 500, "losses": 3, "max_cwnd": 240, "last_rho_16ths": 128},
		Replay: cc.Replay{Steps: 1024, Acks: 1000, Grew: 300}})

	out := VariantsSection(m)
	for _, want := range []string{
		"| WAN to WAN | mipv6 | 15.50 MB ± 6.35 | 11.00 MB ± 12.71 | 5.50 MB ± 6.35 |",
		"Hybla sent more than CUBIC in 2 of 4 cells; on WAN-to-LAN and WAN-to-WAN in 2 of 2 cells",
		"Veno sent the least of the variants in 4 of 4 cells",
		"Veno retransmitted less than CUBIC in 4 of 4 cells",
		"Veno lost fewer than CUBIC in 0 of 4 cells",
		"hybla at most 0.0, cubic at most 0.0, veno at most 3.0",
		"| hybla | WAN to WAN | mipv6 | 1 | 500 | 3 | 240 | 8.00 | 1024 (300 grew) | 0 |",
		"The tcp tables above show the tcp-cubic cells",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("variants section lacks %q:\n%s", want, out)
		}
	}
	writeVariantPlots(m)
	for _, f := range []string{"cc-tcp_bytes.png", "cc-tcp_retransmissions.png", "cc-tcp_lost.png"} {
		if st, err := os.Stat(filepath.Join(m.Out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not drawn: %v", f, err)
		}
	}

	for _, bad := range []MatrixConfig{
		{Traffics: []string{"udp-hd"}, Congestions: []string{"hybla"}},
		{Traffics: []string{"tcp"}, Congestions: []string{"hybla", "hybla"}},
	} {
		if err := bad.validCongestions(); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
	if VariantsSection(MatrixConfig{}) != "" {
		t.Error("a matrix without --congestions gained a variants section")
	}
}
