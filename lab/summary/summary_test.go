package summary

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func f(v float64) *float64 { return &v }
func i(v int) *int         { return &v }
func b(v bool) *bool       { return &v }

func sample() Summary {
	by := int64(1000)
	return New("lan-lan", "ilnp-soft", "udp-hd", []Run{
		{RTTms: f(1), HandoffDelayMs: f(2), LUSent: i(1), UDPSent: i(100), UDPLost: i(0), UDPLostWindow: i(0),
			ThroughputWindowBps: f(2.3e6), OfferedBps: f(2.35e6), InterruptionMs: f(10), SessionSurvived: b(true)},
		{RTTms: f(2), HandoffDelayMs: f(3), LUSent: i(1), UDPSent: i(100), UDPLost: i(1), UDPLostWindow: i(1),
			ThroughputWindowBps: f(2.2e6), OfferedBps: f(2.35e6), InterruptionMs: f(20), SessionSurvived: b(true)},
		{RTTms: f(3), HandoffDelayMs: nil, LUSent: i(2), UDPSent: i(100), UDPLost: i(2), UDPLostWindow: i(2),
			ThroughputWindowBps: f(2.1e6), OfferedBps: f(2.35e6), InterruptionMs: f(30), TCPBytes: &by, SessionSurvived: b(false)},
	})
}

func TestMeanCI95(t *testing.T) {
	m, h, ok := MeanCI95([]float64{1, 2, 3})
	// sd 1, t(0.975, 2) = 4.303: half-width 4.303 / sqrt(3).
	if !ok || m != 2 || math.Abs(h-4.303/math.Sqrt(3)) > 1e-9 {
		t.Errorf("MeanCI95(1,2,3) = %v %v %v", m, h, ok)
	}
	if _, _, ok := MeanCI95(nil); ok {
		t.Error("empty input gave a mean")
	}
	if TQuantile975(9) != 2.262 || TQuantile975(1000) != 1.96 {
		t.Error("t table")
	}
}

func TestAggregates(t *testing.T) {
	s := sample()
	if s.Reps != 3 || *s.Mean.RTTms != 2 {
		t.Errorf("reps %d mean rtt %v", s.Reps, *s.Mean.RTTms)
	}
	// Two of three runs have a handoff delay: mean over those, a CI from two values.
	if *s.Mean.HandoffDelayMs != 2.5 || s.CI95.HandoffDelayMs == nil {
		t.Errorf("handoff mean %v ci %v", *s.Mean.HandoffDelayMs, s.CI95.HandoffDelayMs)
	}
	// One run has tcp_bytes: a mean, no CI. None has tcp_lost: null.
	if *s.Mean.TCPBytes != 1000 || s.CI95.TCPBytes != nil || s.Mean.TCPLost != nil {
		t.Errorf("tcp bytes %v/%v lost %v", s.Mean.TCPBytes, s.CI95.TCPBytes, s.Mean.TCPLost)
	}
	if math.Abs(*s.Mean.SessionSurvived-2.0/3) > 1e-12 {
		t.Errorf("survived fraction %v", *s.Mean.SessionSurvived)
	}
}

func TestWriteReadValidates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "summary.json")
	if err := sample().Write(path); err != nil {
		t.Fatal(err)
	}
	s, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Mode != "ilnp-soft" || len(s.Runs) != 3 || s.Runs[2].HandoffDelayMs != nil {
		t.Errorf("round trip: %+v", s)
	}
	raw, _ := os.ReadFile(path)
	if !strings.Contains(string(raw), `"handoff_delay_ms": null`) {
		t.Error("a field that does not apply must be written as null")
	}
	if strings.Contains(string(raw), `"congestion"`) {
		t.Error("a summary without a congestion control must not write the key")
	}
	tcp := sample()
	tcp.Congestion = "veno"
	if err := tcp.Write(path); err != nil {
		t.Fatal(err)
	}
	if s, err := Read(path); err != nil || s.Congestion != "veno" {
		t.Errorf("congestion round trip: %q, %v", s.Congestion, err)
	}
	// A tcp-aware run's summary (issue 15) must read back: the matrix report reads it.
	tcp.TCPAware = true
	if err := tcp.Write(path); err != nil {
		t.Fatal(err)
	}
	if s, err := Read(path); err != nil || !s.TCPAware {
		t.Errorf("tcp_aware round trip: %v, %v", s.TCPAware, err)
	}
}

// mutate decodes the sample, applies fn, and returns the JSON.
func mutate(t *testing.T, fn func(m map[string]any)) []byte {
	t.Helper()
	raw, _ := json.Marshal(sample())
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	fn(m)
	out, _ := json.Marshal(m)
	return out
}

func TestValidateRejects(t *testing.T) {
	run0 := func(m map[string]any) map[string]any { return m["runs"].([]any)[0].(map[string]any) }
	cases := map[string]func(m map[string]any){
		"missing top key":     func(m map[string]any) { delete(m, "ci95") },
		"extra top key":       func(m map[string]any) { m["profile"] = "quick" },
		"reps mismatch":       func(m map[string]any) { m["reps"] = 2 },
		"empty mode":          func(m map[string]any) { m["mode"] = "" },
		"missing run key":     func(m map[string]any) { delete(run0(m), "tcp_lost") },
		"extra run key":       func(m map[string]any) { run0(m)["jitter_ms"] = 1 },
		"string number":       func(m map[string]any) { run0(m)["rtt_ms"] = "1.0" },
		"number for boolean":  func(m map[string]any) { run0(m)["session_survived"] = 1 },
		"boolean in mean":     func(m map[string]any) { m["mean"].(map[string]any)["session_survived"] = true },
		"missing mean key":    func(m map[string]any) { delete(m["mean"].(map[string]any), "lu_sent") },
		"runs not array":      func(m map[string]any) { m["runs"] = map[string]any{} },
		"negative reps":       func(m map[string]any) { m["reps"] = -1 },
		"fractional reps":     func(m map[string]any) { m["reps"] = 1.5 },
		"ci95 not an object":  func(m map[string]any) { m["ci95"] = nil },
		"scenario not string": func(m map[string]any) { m["scenario"] = 4 },
		"empty congestion":    func(m map[string]any) { m["congestion"] = "" },
		"congestion a number": func(m map[string]any) { m["congestion"] = 1 },
		"recovery a string":   func(m map[string]any) { run0(m)["recovery_ms"] = "1" },
		"tcp_aware a string":  func(m map[string]any) { m["tcp_aware"] = "on" },
		"tcp_aware false":     func(m map[string]any) { m["tcp_aware"] = false }, // omitempty: absent when off
		"failover a string":   func(m map[string]any) { run0(m)["failover_ms"] = "12" },
		"handover a string":   func(m map[string]any) { run0(m)["handover_ms"] = "0.9" },
	}
	for name, fn := range cases {
		if err := Validate(mutate(t, fn)); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if err := Validate(mutate(t, func(map[string]any) {})); err != nil {
		t.Errorf("unchanged sample rejected: %v", err)
	}
	if err := Validate(mutate(t, func(m map[string]any) { m["congestion"] = "hybla" })); err != nil {
		t.Errorf("sample with a congestion control rejected: %v", err)
	}
	// Files written before recovery_ms existed (issue 13) stay readable.
	if err := Validate(mutate(t, func(m map[string]any) {
		delete(run0(m), "recovery_ms")
		delete(m["mean"].(map[string]any), "recovery_ms")
		delete(m["ci95"].(map[string]any), "recovery_ms")
	})); err != nil {
		t.Errorf("summary without recovery_ms rejected: %v", err)
	}
	if err := Validate(mutate(t, func(m map[string]any) { run0(m)["recovery_ms"] = 1091.5 })); err != nil {
		t.Errorf("summary with a recovery rejected: %v", err)
	}
	// A summary written before issue 16's fields (a matrix's older cells) still validates.
	if err := Validate(mutate(t, func(m map[string]any) {
		for _, k := range []string{"failover_ms", "aggregate_goodput_bps", "single_link_goodput_bps", "reordering_retransmissions"} {
			delete(run0(m), k)
			delete(m["mean"].(map[string]any), k)
			delete(m["ci95"].(map[string]any), k)
		}
	})); err != nil {
		t.Errorf("summary without issue 16's fields rejected: %v", err)
	}
	// Nor does one written before handover_ms (issue 14); with one it validates too.
	if err := Validate(mutate(t, func(m map[string]any) {
		delete(run0(m), "handover_ms")
		delete(m["mean"].(map[string]any), "handover_ms")
		delete(m["ci95"].(map[string]any), "handover_ms")
	})); err != nil {
		t.Errorf("summary without handover_ms rejected: %v", err)
	}
	if err := Validate(mutate(t, func(m map[string]any) { run0(m)["handover_ms"] = 1.25 })); err != nil {
		t.Errorf("summary with a handover rejected: %v", err)
	}
	// Issue 24's fields: absent in older files; a count and a boolean when present.
	if err := Validate(mutate(t, func(m map[string]any) {
		for _, k := range []string{"pmtu_errors_translated", "path_encapsulated"} {
			delete(run0(m), k)
			delete(m["mean"].(map[string]any), k)
			delete(m["ci95"].(map[string]any), k)
		}
	})); err != nil {
		t.Errorf("summary without the real-path fields rejected: %v", err)
	}
	if err := Validate(mutate(t, func(m map[string]any) {
		run0(m)["pmtu_errors_translated"] = 3
		run0(m)["path_encapsulated"] = false
	})); err != nil {
		t.Errorf("summary with the real-path fields rejected: %v", err)
	}
	if err := Validate(mutate(t, func(m map[string]any) { run0(m)["path_encapsulated"] = "no" })); err == nil {
		t.Error("path_encapsulated a string accepted")
	}
	if err := Validate([]byte(`{} {}`)); err == nil {
		t.Error("trailing data accepted")
	}
}

func FuzzValidate(fz *testing.F) {
	raw, _ := json.Marshal(sample())
	fz.Add(raw)
	fz.Add([]byte(`{"scenario":"a","mode":"b","traffic":"c","reps":0,"runs":[],"mean":{},"ci95":{}}`))
	fz.Fuzz(func(t *testing.T, data []byte) {
		if Validate(data) != nil {
			return
		}
		var s Summary
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatalf("valid summary does not decode: %v", err)
		}
		if len(s.Runs) != s.Reps {
			t.Fatalf("valid summary with %d runs, reps %d", len(s.Runs), s.Reps)
		}
	})
}
