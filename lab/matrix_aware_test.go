package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ilnp/lab/measure"
	"ilnp/lab/summary"
)

func writeAwareCell(t *testing.T, dir string, goodput, recovery []float64, rto []int) {
	t.Helper()
	var runs []summary.Run
	for i := range goodput {
		runs = append(runs, summary.Run{TCPWindowGoodputBps: &goodput[i], TCPRecoveryMs: &recovery[i], TCPRTOEvents: &rto[i]})
	}
	if err := os.MkdirAll(filepath.Join(dir, "rep-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := summary.New("x", "y", "tcp", runs).Write(filepath.Join(dir, "summary.json")); err != nil {
		t.Fatal(err)
	}
	writeJSON(filepath.Join(dir, "rep-1", "result.json"), measure.Result{SeqUnit: "byte",
		Rate: []measure.Point{{T: 0, V: 1e6}, {T: 1, V: 2e6}}, Seq: []measure.Point{{T: 0, V: 0}, {T: 1, V: 1e6}}})
}

// The tcp-aware axis: ILNP TCP cells run off (the usual directory) and on (beside it); UDP
// and non-ILNP cells once; the report's on/off table reads both sides and the overlays are
// drawn per pair.
func TestAwareAxis(t *testing.T) {
	m := MatrixConfig{Scenarios: []string{"wan-wan"}, Modes: []string{"ilnp-hard", "mipv6"},
		Traffics: []string{"udp-hd", "tcp", "tcp-r"}, TCPAwareAxis: true, Reps: 2, Profile: Profiles["quick"], Out: t.TempDir()}
	for _, c := range []struct {
		mo, tr string
		want   int
	}{{"ilnp-hard", "tcp", 2}, {"ilnp-hard", "tcp-r", 2}, {"ilnp-hard", "udp-hd", 1}, {"mipv6", "tcp", 1}} {
		if got := m.awareFor(c.mo, c.tr); len(got) != c.want || (c.want == 2 && (got[0] || !got[1])) {
			t.Errorf("%s %s axis %v, want %d settings (off first)", c.mo, c.tr, got, c.want)
		}
	}
	if d := m.awareDir("wan-wan", "ilnp-hard", "tcp", "", true); d != filepath.Join(m.Out, "wan-wan", "ilnp-hard", "tcp-tcpaware") {
		t.Errorf("on cell %s", d)
	}
	if d := m.awareDir("wan-wan", "ilnp-hard", "tcp", "", false); d != m.dir("wan-wan", "ilnp-hard", "tcp") {
		t.Errorf("off cell %s, want the usual %s", d, m.dir("wan-wan", "ilnp-hard", "tcp"))
	}
	writeAwareCell(t, m.awareDir("wan-wan", "ilnp-hard", "tcp", "", false), []float64{3.37e6, 4.92e6}, []float64{4550, 3250}, []int{0, 0})
	writeAwareCell(t, m.awareDir("wan-wan", "ilnp-hard", "tcp", "", true), []float64{13.02e6, 12.57e6}, []float64{310, 320}, []int{0, 0})
	out := AwareSection(m)
	for _, want := range []string{
		"### tcp — TCP CN -> MN",
		"| WAN to WAN | ilnp-hard | 4.145e+06 ± 9.847e+06 | 1.28e+07 ± 2.859e+06 | 3900 ± 8259 | 315 ± 63.53 | 0 ± 0 | 0 ± 0 | - | - | - | - |",
		"### tcp-r — TCP MN -> CN",
		"| WAN to WAN | ilnp-hard | failed | failed |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("section lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "mipv6") || strings.Contains(out, "udp-hd") {
		t.Errorf("section shows cells without an on side:\n%s", out)
	}
	overlayAware(m)
	for _, f := range []string{"wan-wan-ilnp-hard-tcp-tcpaware-rate.png", "wan-wan-ilnp-hard-tcp-tcpaware-seq.png"} {
		if st, err := os.Stat(filepath.Join(m.Out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not drawn: %v", f, err)
		}
	}
	if AwareSection(MatrixConfig{Scenarios: m.Scenarios, Modes: m.Modes, Traffics: m.Traffics, TCPAware: true}) != "" {
		t.Error("a matrix without the axis has an on/off section")
	}
}

// A run's repetitions overlay: cwnd.png only when the sender's window was sampled.
func TestOverlayPlotsCwnd(t *testing.T) {
	cfg := RunConfig{Scenario: "wan-wan", Mode: "ilnp-hard", Traffic: "tcp", Out: t.TempDir()}
	r := measure.Result{SeqUnit: "byte", Rate: []measure.Point{{T: 0, V: 1}, {T: 1, V: 2}}, Seq: []measure.Point{{T: 0, V: 0}, {T: 1, V: 5}}}
	if err := overlayPlots(cfg, []measure.Result{r}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cfg.Out, "cwnd.png")); err == nil {
		t.Error("cwnd.png drawn without samples")
	}
	r.Cwnd = []measure.Point{{T: 0.5, V: 10}, {T: 1, V: 280}}
	if err := overlayPlots(cfg, []measure.Result{r, r}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(cfg.Out, "cwnd.png")); err != nil || st.Size() == 0 {
		t.Errorf("cwnd.png not drawn: %v", err)
	}
}
