package lab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ilnp/lab/summary"
)

// Every figure names its command, its n and its interval; MIPv6 delays say where they come
// from; success rates carry the Wilson interval.
func TestResultsMarkdown(t *testing.T) {
	d1, d2, rtt := 1004.0, 1006.0, 0.9
	s := summary.Summary{Runs: []summary.Run{{HandoffDelayMs: &d1, RTTms: &rtt}, {HandoffDelayMs: &d2, RTTms: &rtt}}}
	cells := []ResultsCell{
		runCell("lan-lan handoff delay (UDP HD)", "mipv6", "ilnp-lab run A", s, "handoff_delay_ms", nil, 0),
		runCell("lan-lan handoff delay (UDP HD)", "ilnp-soft", "ilnp-lab run B", summary.Summary{Runs: []summary.Run{{HandoffDelayMs: &rtt}}}, "handoff_delay_ms", nil, 0),
		successCell("mipv6", "ilnp-lab signalling C", SignallingResults{Success: []SuccessRow{{Mode: "mipv6", Loss: 0.1, Exchanges: 40, FirstTry: 26, Rate: 0.65, CILow: 0.495, CIHigh: 0.779}}}, nil),
	}
	cfg := ResultsConfig{ProfileName: "thesis", Reps: 2, Handoffs: 40, Modes: []string{"ilnp-soft", "mipv6"}, Rows: ResultsRows}
	md := ResultsMarkdown(cfg, cells)
	for _, want := range []string{
		"| lan-lan handoff delay (UDP HD) | 0.90 (n=1) [1] | 1005 ± 12.7 (n=2) [2] | ILNP ~RTT, MIPv6 ~1 s + RTT |",
		"| handoff success at 10 % loss, first try |  | 0.65 [0.49, 0.78] (n=40) [3] |",
		"1. `ilnp-lab run B`", "2. `ilnp-lab run A`", "3. `ilnp-lab signalling C`",
		"mipv6: HA DAD 1s + 1 RTT (BU/BAck), RTT 0.9 ms, + T_HA 0s", "Narrowed table: modes ilnp-soft, mipv6",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	if c := runCell("x", "mipv6", "cmd", summary.Summary{}, "handoff_delay_ms", os.ErrNotExist, 0); c.Error == "" || !strings.HasPrefix(formatCell(c), "failed: ") {
		t.Errorf("a failed run: %+v", c)
	}
}

func TestResultsRejectsBadConfig(t *testing.T) {
	for _, c := range []ResultsConfig{
		{Out: t.TempDir(), ProfileName: "nope", Reps: 1, Handoffs: 1},
		{Out: t.TempDir(), ProfileName: "quick", Reps: 0, Handoffs: 1},
		{Out: t.TempDir(), ProfileName: "quick", Reps: 1, Handoffs: 1, Modes: []string{"ipv6"}},
		{Out: t.TempDir(), ProfileName: "quick", Reps: 1, Handoffs: 1, Rows: []string{"wan-udp"}},
		{ProfileName: "quick", Reps: 1, Handoffs: 1},
	} {
		if err := Results(context.Background(), c); err == nil {
			t.Errorf("%+v accepted", c)
		}
		if c.Out != "" {
			if _, err := os.Stat(filepath.Join(c.Out, "results.md")); err == nil {
				t.Errorf("%+v wrote results.md", c)
			}
		}
	}
}
