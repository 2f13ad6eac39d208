package plots

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestGroupedBars(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bars.png")
	groups := []string{"lan-lan\nilnp-soft", "wan-wan\nmipv6"}
	series := []BarSeries{
		{Label: "cubic", Values: []float64{10, 4}, CI: []float64{1, math.NaN()}},
		{Label: "hybla", Values: []float64{math.NaN(), 5}, CI: []float64{0, 0.5}},
	}
	if err := GroupedBars(path, "t", "MB", groups, series); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() < 1000 {
		t.Fatalf("no image written: %v", err)
	}
	series[1].Values = []float64{1}
	if err := GroupedBars(path, "t", "MB", groups, series); err == nil {
		t.Fatal("a series with too few values was accepted")
	}
	if err := GroupedBars(path, "t", "MB", nil, nil); err == nil {
		t.Fatal("an empty chart was accepted")
	}
}
