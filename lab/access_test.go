package lab

import (
	"strings"
	"testing"
)

// --access-r2/--access-r3 shape one access link each; --access still sets both.
func TestAccessShapes(t *testing.T) {
	for _, tc := range []struct {
		access, r2, r3 string
		wantR2, wantR3 string
		text           string
	}{
		{"", "", "", "wlan", "wlan", "wlan"},
		{"lan", "", "", "lan", "lan", "lan"},
		{"", "wifi", "3g", "wifi", "3g", "wifi to R2 (L2), 3g to R3 (L3)"},
		{"lan", "", "3g", "lan", "3g", "lan to R2 (L2), 3g to R3 (L3)"},
	} {
		cfg := RunConfig{Access: tc.access, AccessR2: tc.r2, AccessR3: tc.r3}
		if got := cfg.accessText(); got != tc.text {
			t.Errorf("%+v: text %q, want %q", tc, got, tc.text)
		}
		topo := &Topology{Cfg: TopologyConfig{Scenario: Scenarios["lan-wan"], Access: cmpOr(tc.access, "wlan"), AccessR2: tc.r2, AccessR3: tc.r3}}
		shapes := map[string]string{}
		for _, l := range topo.emulatedLinks() {
			shapes[l.aIf] = l.shape
		}
		if shapes["r2-mn"] != tc.wantR2 || shapes["r3-mn"] != tc.wantR3 || shapes["r1-r3"] != "wan" || shapes["r1-r2"] != "lan" {
			t.Errorf("%+v: links %v, want r2-mn %s, r3-mn %s, r1-r2 lan, r1-r3 wan", tc, shapes, tc.wantR2, tc.wantR3)
		}
	}
	bad := RunConfig{AccessR3: "delay=fast"}
	if err := bad.validAccess(); err == nil || !strings.Contains(err.Error(), "--access-r3") {
		t.Errorf("bad --access-r3: %v, want an error naming the flag", err)
	}
}
