package plots

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestGroupedBarPanels(t *testing.T) {
	path := filepath.Join(t.TempDir(), "panels.png")
	groups := []string{"LAN to LAN", "WAN to WAN"}
	series := []BarSeries{
		{Label: "ilnp-soft", Values: []float64{5, 202}, CI: []float64{1, 3}, Ref: []float64{7, 202}},
		{Label: "mipv6", Values: []float64{1004, 1403}, CI: []float64{math.NaN(), 9}, Ref: []float64{1005, math.NaN()}},
	}
	if err := GroupedBarPanels(path, []BarPanel{{"(a)", "ms", groups, series}, {"(b)", "ms", groups, series}}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// Two panels side by side: wider than one chart.
	if b := img.Bounds(); b.Dx() < 2*b.Dy() {
		t.Errorf("image %v: want two panels side by side", b)
	}
	series[0].Ref = []float64{1}
	if err := GroupedBarPanels(path, []BarPanel{{"(a)", "ms", groups, series}}); err == nil {
		t.Error("a reference series of the wrong length was accepted")
	}
	if err := GroupedBarPanels(path, nil); err == nil {
		t.Error("no panels was accepted")
	}
}
