package named

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"ilnp/internal/nstest"
)

// TestGenerateStaysInItsDirectory checks the generated configuration is valid for this named
// and names no file outside its own directory (the machine's /etc/bind is never used).
func TestGenerateStaysInItsDirectory(t *testing.T) {
	nstest.RequireTool(t, "named-checkconf", "named-checkzone")
	dir := t.TempDir()
	f, err := Generate(dir, Options{Zone: "Example.Test", Records: []string{"mn IN NID 10 1:2:3:4"}})
	if err != nil {
		t.Fatal(err)
	}
	if f.Zone != "example.test." || f.KeyName != "mn-key.example.test." || f.Addr.String() != "[::1]:53" {
		t.Errorf("files %+v", f)
	}
	if out, err := exec.Command("named-checkconf", f.Conf).CombinedOutput(); err != nil {
		t.Fatalf("named-checkconf: %v: %s", err, out)
	}
	if out, err := exec.Command("named-checkzone", f.Zone, f.ZoneFile).CombinedOutput(); err != nil {
		t.Fatalf("named-checkzone: %v: %s", err, out)
	}
	conf, err := os.ReadFile(f.Conf)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`"(/[^"]*)"`).FindAllStringSubmatch(string(conf), -1) {
		if m[1] != "/dev/null" && !strings.HasPrefix(m[1], dir+"/") && m[1] != dir {
			t.Errorf("config names %s, outside %s", m[1], dir)
		}
	}
	if !strings.Contains(string(conf), "grant mn-key.example.test. name mn.example.test. NID L64 L32;") {
		t.Errorf("update-policy missing:\n%s", conf)
	}
	if _, err := Generate("relative", Options{}); err == nil {
		t.Error("relative directory accepted")
	}
}

func TestNamedProfileMode(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/sbin/named (enforce)\nman_filter (enforce)\n": "enforce",
		"tcpdump (enforce)\nnamed (complain)\n":             "complain",
		"tcpdump (enforce)\n":                               "unconfined",
		"":                                                  "unconfined",
	} {
		if got := namedProfileMode(in); got != want {
			t.Errorf("namedProfileMode(%q) = %q, want %q", in, got, want)
		}
	}
}
