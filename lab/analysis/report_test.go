package analysis

import (
	"bytes"
	"encoding/csv"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out") // Write must create it
	if err := Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"success_probability.png", "success_retransmissions.png",
		"fig6_13_packets_vs_mns.png", "fig6_13_packets_vs_cns.png", "fig6_14_bytes_vs_mns.png", "fig6_14_bytes_vs_cns.png"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r := img.Bounds(); r.Dx() < 300 || r.Dy() < 200 {
			t.Errorf("%s: %v too small", name, r)
		}
	}
	csvRows := map[string]int{
		"success.csv":     1 + 3*4*16,  // protocols x attempts {1,2,3,7} x grid
		"delay.csv":       1 + 8*16,    // Tables 6.5-6.12
		"retry_delay.csv": 1 + 4*3*4,   // scenarios x timers x loss
		"overhead.csv":    1 + 100*100, // Figs. 6.13-6.14 grid
	}
	for name, want := range csvRows {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(rows) != want {
			t.Errorf("%s: %d rows, want %d", name, len(rows), want)
		}
	}
	// delay.csv puts every computed cell beside its printed one; they agree
	// (the soft-handoff "0*" differs only by the footnote mark).
	f, _ := os.Open(filepath.Join(dir, "delay.csv"))
	rows, _ := csv.NewReader(f).ReadAll()
	f.Close()
	for _, r := range rows[1:] {
		if strings.TrimSuffix(r[6], "*") != r[5] {
			t.Errorf("delay.csv row %v: computed and printed differ", r)
		}
	}

	md, err := os.ReadFile(filepath.Join(dir, "analysis.md"))
	if err != nil {
		t.Fatal(err)
	}
	report := string(md)
	for _, want := range []string{
		"### Table 6.1.", "### Table 6.2.", "### Table 6.3.", "### Table 6.4.",
		"### Table 6.5.", "### Table 6.6.", "### Table 6.7.", "### Table 6.8.",
		"### Table 6.9.", "### Table 6.10.", "### Table 6.11.", "### Table 6.12.",
		"| 1% | 0.96 | 0.94 | 0.88 | 0.79 |",                               // 6.2 (A) first row
		"| 1% | 0.87 [printed 0.86] | 0.80 | 0.62 | 0.41 [printed 0.40] |", // 6.2 (B) with errata
		"| 10% | 0.98 | 0.96 | 0.90 | 0.81 |",                              // 6.2 (C) last row
		"| No loss | 1005 | 1024 | 7 | 7 |",                                // 6.5
		"| LU or BU loss | 2502.5 | 2502.5 | 1004.5 | 0* |",                // 6.6
		"| Any of RO+ packets loss | N/A | 3204 | N/A | N/A |",             // 6.11
		"| 100 | 100 | 200 | 20400 | 60200 | 5980400 | 20000 | 1720000 | 1360000 |",
		"## Errata",
		"fig6_13_packets_vs_mns.png",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("analysis.md lacks %q", want)
		}
	}
	// Outside the two Table 6.2 errata no computed cell disagrees with print.
	if n := strings.Count(report, "[printed "); n != 2 {
		t.Errorf("%d cells marked as differing from print, want 2", n)
	}
}

func TestWriteRejectsBadOptions(t *testing.T) {
	opt := DefaultOptions()
	opt.MaxNodes = 0
	if err := WriteWith(t.TempDir(), opt); err == nil || !strings.Contains(err.Error(), "MaxNodes") {
		t.Errorf("MaxNodes 0: err %v", err)
	}
	opt = DefaultOptions()
	opt.Attempts = []int{1, 0}
	if err := WriteWith(t.TempDir(), opt); err == nil || !strings.Contains(err.Error(), "attempts") {
		t.Errorf("attempts 0: err %v", err)
	}
	// A file where the directory should be is reported, not ignored.
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(file); err == nil {
		t.Error("Write into a regular file succeeded")
	}
}
