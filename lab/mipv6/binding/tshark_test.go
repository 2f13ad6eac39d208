package binding

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/internal/pcapfile"
)

// TestTsharkDecodesHandoffSignalling captures what the machines send in a whole handoff with
// route optimisation (real tokens, keys and authenticators; the HoTI inside the reverse
// tunnel) and has Wireshark's dissectors decode it.
func TestTsharkDecodesHandoffSignalling(t *testing.T) {
	nstest.RequireTool(t, "tshark")
	s := newSim(t, 0)
	s.onDone = chainRO
	s.careOf = coa
	s.event("mn", Moved{CareOf: coa})
	s.run(t0.Add(5 * time.Second))
	if len(s.results["ro"]) != 1 || s.results["ro"][0].Err != nil {
		t.Fatalf("handoff did not complete: %+v", s.results)
	}

	file := filepath.Join(t.TempDir(), "handoff.pcap")
	if err := os.WriteFile(file, pcapfile.Bytes(pcapfile.LinkRaw, time.Microsecond, s.sent...), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("tshark", "-r", file, "-T", "fields", "-E", "separator=|", "-E", "occurrence=a",
		"-E", "aggregator=;", "-e", "ipv6.src", "-e", "ipv6.dst", "-e", "ipv6.nxt", "-e", "mip6.mhtype",
		"-e", "mip6.bu.h_flag", "-e", "mip6.ba.status", "-e", "mip6.bad.auth", "-e", "_ws.malformed").Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	t.Logf("tshark:\n%s", out)
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(l, "|")
		if len(f) != 8 || f[7] != "" {
			t.Fatalf("bad line %q", l)
		}
		desc := f[3]
		if strings.HasPrefix(f[2], "41;") {
			desc = "tunnel:" + desc // IPv6-in-IPv6, the MH inside
		}
		if f[6] != "" {
			desc += "+auth" // carries Binding Authorization Data
		}
		got = append(got, desc)
	}
	want := []string{"5", "6", "2", "tunnel:1", "4", "3", "5+auth", "6+auth"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("signalling %q, want %q", got, want)
	}
}
