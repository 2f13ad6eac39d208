package lab

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"ilnp/lab/measure"
	"ilnp/lab/pcap"
	"ilnp/lab/summary"
)

func TestParseFail(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Fail
		ok   bool
	}{
		{"r2-silent@4s", Fail{FailR2Silent, 4 * time.Second}, true},
		{"r2-restore@2500ms", Fail{FailR2Restore, 2500 * time.Millisecond}, true},
		{"r2-silent@3.5", Fail{FailR2Silent, 3500 * time.Millisecond}, true},
		{"r2-silent", Fail{}, false},
		{"r3-silent@4s", Fail{}, false},
		{"r2-silent@-1s", Fail{}, false},
		{"r2-silent@0", Fail{}, false},
		{"r2-silent@NaN", Fail{}, false},
		{"r2-silent@Inf", Fail{}, false},
		{"r2-silent@2h", Fail{}, false},
	} {
		got, err := ParseFail(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParseFail(%q) = %v, %v", c.in, got, err)
		}
	}
	d := 10 * time.Second
	for _, c := range []struct {
		name  string
		fails []Fail
		ok    bool
	}{
		{"none", nil, true},
		{"silent", []Fail{{FailR2Silent, 4 * time.Second}}, true},
		{"silent then restore", []Fail{{FailR2Restore, 6 * time.Second}, {FailR2Silent, 4 * time.Second}}, true},
		{"restore alone", []Fail{{FailR2Restore, 6 * time.Second}}, false},
		{"restore first", []Fail{{FailR2Silent, 6 * time.Second}, {FailR2Restore, 4 * time.Second}}, false},
		{"twice", []Fail{{FailR2Silent, 4 * time.Second}, {FailR2Silent, 5 * time.Second}}, false},
		{"after the flow", []Fail{{FailR2Silent, 10 * time.Second}}, false},
	} {
		if err := validFails(c.fails, d); (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// FailoverMs takes the first CN -> MN data packet addressed to L3 at or after the failure:
// not one before it, not a probe, not one the MN sent, not one of a flow that was not on L2;
// from the last delivery via L2 when that came after the failure's stamp.
func TestFailoverMs(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	cn, mn := nid64(CNNID), nid64(MNNID)
	pkt := func(ms int, dst netip.Prefix, proto uint8, dir int) pcap.Packet {
		return pcap.Packet{Time: t0.Add(time.Duration(ms) * time.Millisecond), Dir: dir,
			Src: Addr(L1, CNNID).As16(), Dst: Addr(dst, MNNID).As16(), Proto: proto}
	}
	other := pkt(2120, L3, pcap.ProtoUDP, pcap.DirIncoming) // a flow that was on L3 all along
	other.SrcPort = 7
	pkts := []pcap.Packet{
		pkt(1000, L3, pcap.ProtoUDP, pcap.DirIncoming), // before the failure
		pkt(1900, L3, pcap.ProtoTCP, pcap.DirIncoming), // before the failure
		pkt(1950, L2, pcap.ProtoTCP, pcap.DirIncoming),
		pkt(2000, L2, pcap.ProtoUDP, pcap.DirIncoming), // the failed path
		other,
		pkt(2100, L3, 58, pcap.DirIncoming), // a probe
		pkt(2150, L3, pcap.ProtoUDP, pcap.DirOutgoing), // not received
		pkt(2180, L3, pcap.ProtoTCP, pcap.DirIncoming),
		pkt(2300, L3, pcap.ProtoUDP, pcap.DirIncoming),
	}
	got := FailoverMs(pkts, t0, cn, mn, 2.0)
	if got == nil || *got < 179.9 || *got > 180.1 {
		t.Fatalf("failover %v, want 180 ms", got)
	}
	if got := FailoverMs(pkts[:7], t0, cn, mn, 2.0); got != nil {
		t.Fatalf("no data via L3 after the failure: %v, want nil", *got)
	}
	// A delivery via L2 after the stamp (the nft command had not taken effect yet): the
	// failure came after it.
	late := slices.Insert(slices.Clone(pkts), 5, pkt(2050, L2, pcap.ProtoUDP, pcap.DirIncoming))
	if got := FailoverMs(late, t0, cn, mn, 2.0); got == nil || *got < 129.9 || *got > 130.1 {
		t.Fatalf("failover with a late delivery via L2 %v, want 130 ms", got)
	}
}

// PathRates bins CN -> MN data per locator pair and second; other traffic is left out.
func TestPathRates(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	pkt := func(ms int, dst netip.Prefix, proto uint8, payload int) pcap.Packet {
		return pcap.Packet{Time: t0.Add(time.Duration(ms) * time.Millisecond), Dir: pcap.DirIncoming,
			Src: Addr(L1, CNNID).As16(), Dst: Addr(dst, MNNID).As16(), Proto: proto, Payload: payload}
	}
	mnToCN := pkt(100, L2, pcap.ProtoUDP, 999)
	mnToCN.Src, mnToCN.Dst = mnToCN.Dst, mnToCN.Src
	series := PathRates([]pcap.Packet{
		pkt(100, L2, pcap.ProtoUDP, 1000), pkt(900, L2, pcap.ProtoTCP, 500), pkt(1500, L3, pcap.ProtoUDP, 200),
		pkt(1600, L3, 58, 64), mnToCN, pkt(3500, L2, pcap.ProtoUDP, 7), // after the 3-s flow
	}, t0, nid64(CNNID), nid64(MNNID), 3*time.Second)
	if len(series) != 2 || series[0].Label != "2001:0db8:0001:0000 -> 2001:0db8:0002:0000" ||
		series[1].Label != "2001:0db8:0001:0000 -> 2001:0db8:0003:0000" {
		t.Fatalf("series %+v", series)
	}
	want := [][]float64{{1500, 0, 0}, {0, 200, 0}}
	for i, s := range series {
		if len(s.Points) != 3 {
			t.Fatalf("%s: %d points, want 3", s.Label, len(s.Points))
		}
		for j, p := range s.Points {
			if p.V != want[i][j] || p.T != float64(j)+0.5 {
				t.Errorf("%s second %d: %+v, want %v", s.Label, j, p, want[i][j])
			}
		}
	}
}

// The lab part of issue 16 end to end: a multihomed MN (both links up all along) under the
// preference policy, UDP both ways, R1 silently dropping everything over R1-R2 from 3 s on.
// failover_ms is a number within a sane bound, the flow survived (data still arrives after
// the failure, now via L3), no link went down, and summary.json keeps the contract.
func TestMultihomeSilentFailure(t *testing.T) {
	requireLab(t)
	bin := ilnpBinaries(t)
	out := t.TempDir()
	explainFailure(t, out)
	prof := Profile{"test", 7 * time.Second, 2 * time.Second, 5 * time.Second, 300 * time.Millisecond, 600 * time.Millisecond}
	s, err := Run(context.Background(), RunConfig{Scenario: "lan-lan", Mode: "ilnp-soft", Traffic: "udp-hd",
		Profile: prof, Reps: 1, Out: out, BinDir: bin, Multihome: true, Policy: "preference",
		Fails: []Fail{{FailR2Silent, 3 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	meta := leftovers(t, out)
	if _, err := summary.Read(filepath.Join(out, "summary.json")); err != nil {
		t.Fatalf("summary.json breaks the contract: %v", err)
	}
	r := s.Runs[0]
	t.Logf("multihomed, r2-silent@3s: %s", describe(r))
	if !meta.Multihome || meta.Policy != "preference" || len(meta.FailedAtS) != 1 {
		t.Errorf("run.json: %+v", meta)
	}
	if _, err := os.Stat(filepath.Join(out, "rep-1", "paths.png")); err != nil {
		t.Errorf("per-path plot: %v", err)
	}
	// Detection (RTT + 100 ms, the suspect probe first for a flow the peer answers little),
	// the switch and the poll, on a loaded machine: well under a second.
	if r.FailoverMs == nil || *r.FailoverMs <= 0 || *r.FailoverMs > 1000 {
		t.Errorf("failover_ms %v, want within (0, 1000]", fmtPtr(r.FailoverMs))
	}
	if r.SessionSurvived == nil || !*r.SessionSurvived {
		t.Errorf("session_survived %v", r.SessionSurvived)
	}
	// Delivery went on after the failure: the capture's CN -> MN data via L3 continues to
	// the flow's end.
	res := readResult(t, filepath.Join(out, "rep-1", "result.json"))
	for _, p := range res.Rate {
		if p.T >= 4 && p.T < 6 && p.V < 0.5*2350e3/8 {
			t.Errorf("rate at %v s (after the failure) %v B/s, want at least half of udp-hd's: %+v", p.T, p.V, res.Rate)
		}
	}
	// No link went down: both of the MN's access links are still up after the run's
	// failure (the lab's own events say what it did).
	b, err := os.ReadFile(filepath.Join(out, "rep-1", "lab-events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"lab_enter"`) || strings.Contains(string(b), `"lab_leave"`) {
		t.Errorf("a multihomed run moved the MN: %s", b)
	}
}

func fmtPtr(p *float64) any {
	if p == nil {
		return "null"
	}
	return *p
}

func readResult(t *testing.T, path string) measure.Result {
	t.Helper()
	r, err := loadResult(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// FuzzParseFail: any --fail text is rejected or read back to a failure of a known kind within
// the bounds, never a panic.
func FuzzParseFail(f *testing.F) {
	for _, s := range []string{"r2-silent@4s", "r2-restore@2.5", "r2-silent@", "@", "r2-silent@1e309", "r2-silent@-0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fl, err := ParseFail(s)
		if err != nil {
			return
		}
		if (fl.Kind != FailR2Silent && fl.Kind != FailR2Restore) || fl.At <= 0 || fl.At > time.Hour {
			t.Fatalf("ParseFail(%q) = %+v", s, fl)
		}
	})
}

// --multihome and --fail are checked with the rest of the run's configuration.
func TestMultihomeValidate(t *testing.T) {
	base := RunConfig{Scenario: "lan-lan", Mode: "ilnp-soft", Traffic: "udp-hd", Profile: Profiles["quick"], Reps: 1, Out: "x"}
	for _, c := range []struct {
		name string
		mod  func(*RunConfig)
		ok   bool
	}{
		{"plain", func(*RunConfig) {}, true},
		{"multihome, failure, policy", func(c *RunConfig) {
			c.Multihome, c.Policy, c.Fails = true, "quality", []Fail{{FailR2Silent, 4 * time.Second}}
		}, true},
		{"failure without multihome", func(c *RunConfig) { c.Fails = []Fail{{FailR2Silent, 4 * time.Second}} }, false},
		{"multihome in hard mode", func(c *RunConfig) { c.Multihome, c.Mode = true, "ilnp-hard" }, false},
		{"multihome with ipv6", func(c *RunConfig) { c.Multihome, c.Mode = true, "ipv6" }, false},
		{"multihome with mipv6", func(c *RunConfig) { c.Multihome, c.Mode = true, "mipv6" }, false},
		{"multihome with mptcp, tcp", func(c *RunConfig) {
			c.Multihome, c.Mode, c.Traffic, c.Fails = true, "mptcp", "tcp", []Fail{{FailR2Silent, 4 * time.Second}}
		}, true},
		{"multihome with mptcp, udp", func(c *RunConfig) { c.Multihome, c.Mode = true, "mptcp" }, false},
		{"multihome with wireguard", func(c *RunConfig) {
			c.Multihome, c.Mode, c.Fails = true, "wireguard", []Fail{{FailR2Silent, 4 * time.Second}}
		}, true},
		{"policy with mptcp", func(c *RunConfig) { c.Multihome, c.Mode, c.Traffic, c.Policy = true, "mptcp", "tcp", "quality" }, false},
		{"policy with ipv6", func(c *RunConfig) { c.Mode, c.Policy = "ipv6", "quality" }, false},
		{"unknown policy", func(c *RunConfig) { c.Policy = "fastest" }, false},
		{"failure after the flow", func(c *RunConfig) {
			c.Multihome, c.Fails = true, []Fail{{FailR2Silent, 13 * time.Second}}
		}, false},
		{"tcp-8", func(c *RunConfig) { c.Traffic = "tcp-8" }, true},
		{"multihome with double jump", func(c *RunConfig) { c.Multihome, c.DoubleJump = true, true }, false},
	} {
		cfg := base
		c.mod(&cfg)
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if args := strings.Join(Traffics["tcp-8"].ClientArgs("mn", 12*time.Second, "f"), " "); !strings.Contains(args, "-P 8") {
		t.Errorf("tcp-8 client: %s", args)
	}
}
