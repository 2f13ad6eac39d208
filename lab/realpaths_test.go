package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRealPathsFlags(t *testing.T) {
	for _, c := range []struct {
		arg  string
		link string
		mtu  int
		ok   bool
	}{
		{"r1-r3=1400", "r1-r3", 1400, true},
		{"r1-r2=1492", "r1-r2", 1492, true},
		{"r1-r3=1280", "r1-r3", 1280, true},
		{"r1-r3=1279", "", 0, false}, // below the IPv6 minimum
		{"r1-r3=1501", "", 0, false}, // the lab's links carry 1500
		{"r1-r4=1400", "", 0, false},
		{"r2-mn=1400", "", 0, false},
		{"r1-r3", "", 0, false},
		{"r1-r3=big", "", 0, false},
	} {
		link, mtu, err := ParsePathMTU(c.arg)
		if err == nil {
			err = RealPaths{MTU: map[string]int{link: mtu}}.Validate()
		}
		if (err == nil) != c.ok || (c.ok && (link != c.link || mtu != c.mtu)) {
			t.Errorf("--path-mtu %s: %s=%d, %v; want ok %v", c.arg, link, mtu, err, c.ok)
		}
	}
	if err := (RealPaths{DropExthdr: []string{"r1-r2", "r1-r3"}}).Validate(); err != nil {
		t.Errorf("--drop-exthdr r1-r2 r1-r3: %v", err)
	}
	if err := (RealPaths{DropExthdr: []string{"r1-cn"}}).Validate(); err == nil {
		t.Error("--drop-exthdr r1-cn accepted")
	}
}

func TestPMTUErrorsTranslated(t *testing.T) {
	dir := t.TempDir()
	if v := pmtuErrorsTranslated(dir); v != nil {
		t.Errorf("no stats: %d, want nil", *v)
	}
	write := func(node, text string) {
		if err := os.WriteFile(filepath.Join(dir, "ilnpctl-"+node+"-stats.json"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cn", `{"dp_ingress_ptb_translated": 3, "lu_sent": 2}`)
	write("mn", `{"error": "ilnpctl failed"}`)
	if v := pmtuErrorsTranslated(dir); v != nil {
		t.Errorf("MN's stats missing: %d, want nil", *v)
	}
	write("mn", `{"dp_ingress_ptb_translated": 4}`)
	if v := pmtuErrorsTranslated(dir); v == nil || *v != 7 {
		t.Errorf("3 + 4 translated: %v", v)
	}
}

// A move onto a path that drops Destination Options (R1 drops them on r1-r3, nftables `exthdr
// dst exists drop`), and a run whose both paths drop them: the MN's pair is found dropping the
// nonce header, runs ILNPv6 in UDP/IPv6, and the session survives with its interruption
// measured. Without encap6 the session was lost (README "On real paths"). The bound on the
// interruption is generous: a check takes 150 ms of silence, two echoes and 50 ms, the LU
// then one round trip; 3 s would be the LU's own retransmissions, not the detection.
func TestE2EDropExthdr(t *testing.T) {
	requireLab(t)
	bin := ilnpBinaries(t)
	for _, c := range []struct {
		mode, traffic string
		drop          []string
	}{
		{"ilnp-hard", "udp-hd", []string{"r1-r3"}},
		{"ilnp-soft", "udp-hd", []string{"r1-r3"}},
		{"ilnp-hard", "tcp", []string{"r1-r3"}},
		{"ilnp-soft", "tcp", []string{"r1-r3"}},
		{"ilnp-hard", "udp-hd", []string{"r1-r2", "r1-r3"}},
	} {
		t.Run(c.mode+"/"+c.traffic+"/"+strings.Join(c.drop, "+"), func(t *testing.T) {
			r, _ := runLabConfig(t, RunConfig{Scenario: "lan-lan", Mode: c.mode, Traffic: c.traffic, BinDir: bin,
				RealPaths: RealPaths{DropExthdr: c.drop}})
			if r.SessionSurvived == nil || !*r.SessionSurvived {
				t.Errorf("session lost: %s", describe(r))
			}
			if r.PathEncapsulated == nil || !*r.PathEncapsulated {
				t.Errorf("path_encapsulated %v, want true", r.PathEncapsulated)
			}
			if r.InterruptionMs == nil || *r.InterruptionMs > 3000 {
				t.Errorf("interruption %v ms, want measured and under 3 s", Fmt(r.Values()["interruption_ms"], "interruption_ms"))
			}
		})
	}
}

func TestPathEncapsulated(t *testing.T) {
	dir := t.TempDir()
	if v := pathEncapsulated(dir); v != nil {
		t.Errorf("no stats: %v, want nil", *v)
	}
	write := func(node, text string) {
		if err := os.WriteFile(filepath.Join(dir, "ilnpctl-"+node+"-stats.json"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cn", `{"dp_egress_encap6": 0}`)
	write("mn", `{"dp_egress_encap6": 0}`)
	if v := pathEncapsulated(dir); v == nil || *v {
		t.Errorf("none sent: %v, want false", v)
	}
	write("mn", `{"dp_egress_encap6": 12}`)
	if v := pathEncapsulated(dir); v == nil || !*v {
		t.Errorf("12 sent: %v, want true", v)
	}
}
