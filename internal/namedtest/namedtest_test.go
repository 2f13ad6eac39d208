package namedtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

// TestServesZoneWithILNPRecords starts named, reads a static NID/L64 name back with dig, and
// checks the restart path keeps the zone.
func TestServesZoneWithILNPRecords(t *testing.T) {
	ns := nstest.New(t, "named")
	t.Logf("AppArmor state for named: %s", AppArmorState())
	s := Start(t, ns, Options{Records: []string{
		"cn IN NID 10 0014:4fff:ff20:ee64",
		"cn IN L64 10 2001:0db8:0001:0000",
		"plain IN AAAA 2001:db8::1",
	}})
	out, err := s.Dig(nil, "+short", "cn."+s.Zone, "NID")
	if err != nil || !sameRecord(out, "10 0014:4fff:ff20:ee64") {
		t.Fatalf("dig NID: %q %v\n%s", out, err, s.Log())
	}
	out, err = s.Dig(nil, "+short", "cn."+s.Zone, "L64")
	if err != nil || !sameRecord(out, "10 2001:0db8:0001:0000") {
		t.Fatalf("dig L64: %q %v", out, err)
	}
	if out, _ := s.Dig(nil, "example.org.", "A"); !strings.Contains(out, "REFUSED") {
		t.Errorf("recursion/out-of-zone query not refused:\n%s", out)
	}
	// The key may update mn's NID/L64 (checked with BIND's own nsupdate), nothing else.
	nstest.RequireTool(t, "nsupdate")
	update := func(cmds string) (string, error) {
		path := filepath.Join(t.TempDir(), "cmds")
		script := fmt.Sprintf("server %s %d\nzone %s\n%s\nsend\n", s.Addr.Addr(), s.Addr.Port(), s.Zone, cmds)
		if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		return ns.Try("nsupdate", "-k", s.KeyFile, path)
	}
	if out, err := update("update add mn." + s.Zone + " 5 IN L64 10 2001:db8:7:0"); err != nil {
		t.Fatalf("nsupdate L64 for mn: %v %s", err, out)
	}
	if out, err := update("update add mn." + s.Zone + " 5 IN AAAA 2001:db8::7"); err == nil || !strings.Contains(out, "REFUSED") {
		t.Fatalf("nsupdate AAAA for mn was not refused: %v %s", err, out)
	}
	if out, err := update("update add cn." + s.Zone + " 5 IN L64 10 2001:db8:7:0"); err == nil || !strings.Contains(out, "REFUSED") {
		t.Fatalf("nsupdate of another name was not refused: %v %s", err, out)
	}
	s.Stop()
	if _, err := s.Dig(nil, "+short", s.Zone, "SOA"); err == nil {
		t.Fatal("named still answers after Stop")
	}
	s.Restart()
	if out, err := s.Dig(nil, "+short", "cn."+s.Zone, "L64"); err != nil || !sameRecord(out, "10 2001:0db8:0001:0000") {
		t.Fatalf("after restart dig L64: %q %v", out, err)
	}
	if out, err := s.Dig(nil, "+short", "mn."+s.Zone, "L64"); err != nil || !sameRecord(out, "10 2001:0db8:0007:0000") {
		t.Fatalf("update lost across restart (journal): %q %v", out, err)
	}
	if !strings.Contains(s.Log(), "running") {
		t.Errorf("named log lacks 'running':\n%s", s.Log())
	}
}

// sameRecord compares "PREF xxxx:xxxx:xxxx:xxxx" answers by value: BIND 9.18 prints NID and L64
// groups without leading zeros ("14:4fff:ff20:ee64"), which RFC 6742 s.2.1 does not show.
func sameRecord(got, want string) bool {
	g, w := strings.Fields(got), strings.Fields(want)
	if len(g) != 2 || len(w) != 2 || g[0] != w[0] {
		return false
	}
	a, err1 := wire.ParseL64(g[1])
	b, err2 := wire.ParseL64(w[1])
	return err1 == nil && err2 == nil && a == b
}
