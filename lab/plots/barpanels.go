package plots

import (
	"fmt"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// refMarks draws a series' reference values as black diamonds on the right edge of its bars.
func refMarks(ref []float64, j int, span, w float64) (*plotter.Scatter, error) {
	var pts plotter.XYs
	for i, v := range ref {
		if math.IsNaN(v) {
			continue
		}
		x0 := float64(i) - span/2 + float64(j)*w
		pts = append(pts, plotter.XY{X: x0 + w*0.85, Y: v})
	}
	if len(pts) == 0 {
		return nil, nil
	}
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, err
	}
	sc.GlyphStyle.Shape = draw.PyramidGlyph{}
	sc.GlyphStyle.Color = color.Black
	sc.GlyphStyle.Radius = vg.Points(3.5)
	return sc, nil
}

// BarPanel is one chart of a multi-panel figure (the thesis's (a), (b) sub-figures).
type BarPanel struct {
	Title, YLabel string
	Groups        []string
	Series        []BarSeries
}

// GroupedBarPanels draws panels side by side into one PNG.
func GroupedBarPanels(path string, panels []BarPanel) error {
	if len(panels) == 0 {
		return fmt.Errorf("bar panels %s: nothing to draw", path)
	}
	row := make([]*plot.Plot, len(panels))
	width := 0.0
	for i, pn := range panels {
		p, err := barPlot(path, pn.Title, pn.YLabel, pn.Groups, pn.Series)
		if err != nil {
			return err
		}
		row[i] = p
		width += max(5, 0.9*float64(len(pn.Groups))+1.5)
	}
	img := vgimg.New(vg.Length(width)*vg.Inch, 4.5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
	for i, p := range row {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// Lines draws each series as a line over time with the run's marks (a Rate or Cwnd plot of
// any quantity).
func Lines(path, title, ylabel string, series []Series, m Marks) error {
	return lines(path, title, ylabel, 1.2, series, m)
}
