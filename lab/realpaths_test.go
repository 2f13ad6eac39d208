package lab

import (
	"os"
	"path/filepath"
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
