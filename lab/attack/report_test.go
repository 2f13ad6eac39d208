package attack

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Write keeps the attack.json contract: exactly the six keys, null where a figure does not
// apply; report.md totals only the forged packets and describes the insider redirection apart.
func TestWriteContract(t *testing.T) {
	i := func(v int) *int { return &v }
	b := func(v bool) *bool { return &v }
	n := func(v int64) *int64 { return &v }
	results := []Result{
		{Attack: "data-random-nonce", Sent: i(10), Accepted: i(0), FlowSurvived: b(true), Counted: 10,
			Counters: []string{"CN dp_ingress_bad_nonce"}},
		{Attack: "lu-no-nonce-onlink", Sent: i(5), Accepted: i(1), FlowSurvived: b(false), Counted: 4},
		{Attack: Redirection, Sent: i(1), Accepted: i(1), FlowSurvived: b(false), UnverifiedBytesSent: n(900), UnverifiedBytesReceived: n(0)},
	}
	dir := t.TempDir()
	if err := Write(dir, results, Config{Count: 15, Rate: 100}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "attack.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(raw, &rows); err != nil {
		t.Fatal(err)
	}
	want := []string{"attack", "sent", "accepted", "flow_survived", "unverified_bytes_sent", "unverified_bytes_received"}
	for k, r := range rows {
		if len(r) != len(want) {
			t.Errorf("row %d: keys %v, want %v", k, r, want)
		}
		for _, key := range want {
			if _, ok := r[key]; !ok {
				t.Errorf("row %d lacks %q", k, key)
			}
		}
	}
	if rows[0]["unverified_bytes_sent"] != nil || rows[2]["unverified_bytes_sent"] != float64(900) {
		t.Errorf("unverified bytes: %v, %v", rows[0]["unverified_bytes_sent"], rows[2]["unverified_bytes_sent"])
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"15 sent, 1 accepted, 14 counted",
		"| data-random-nonce |", "| 10 | true |",
		"| lu-no-nonce-onlink |", "| 4 | false |",
		"## " + Redirection, "900 bytes",
	} {
		if !strings.Contains(string(md), s) {
			t.Errorf("report.md lacks %q:\n%s", s, md)
		}
	}
}
