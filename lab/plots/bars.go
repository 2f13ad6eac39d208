package plots

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// BarSeries is one bar per group (NaN: no value) with a 95 % half-width each (NaN or 0:
// none drawn), as the seed's grouped bar charts with error bars.
type BarSeries struct {
	Label      string
	Values, CI []float64
	// Ref, when set, is a reference value per group (NaN: none), drawn as a black marker
	// beside the series' bar (the thesis's value next to ours).
	Ref []float64
}

type errPoints struct {
	xys  plotter.XYs
	errs plotter.YErrors
}

func (e errPoints) Len() int                        { return len(e.xys) }
func (e errPoints) XY(i int) (float64, float64)     { return e.xys[i].X, e.xys[i].Y }
func (e errPoints) YError(i int) (float64, float64) { return e.errs[i].Low, e.errs[i].High }
func (e *errPoints) add(x, y, half float64) {
	e.xys = append(e.xys, plotter.XY{X: x, Y: y})
	e.errs = append(e.errs, struct{ Low, High float64 }{half, half})
}

// GroupedBars draws one cluster of bars per group (x axis labelled by groups), one colour per
// series, with 95 % error bars.
func GroupedBars(path, title, ylabel string, groups []string, series []BarSeries) error {
	p, err := barPlot(path, title, ylabel, groups, series)
	if err != nil {
		return err
	}
	width := max(6, 0.9*float64(len(groups))+2)
	return p.Save(vg.Length(width)*vg.Inch, 4.5*vg.Inch, path)
}

// barPlot builds GroupedBars' plot (path only names it in errors).
func barPlot(path, title, ylabel string, groups []string, series []BarSeries) (*plot.Plot, error) {
	if len(groups) == 0 || len(series) == 0 {
		return nil, fmt.Errorf("grouped bars %s: nothing to draw", path)
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	const span = 0.8
	w := span / float64(len(series))
	ymax := 0.0
	var refLegend *plotter.Scatter // the legend's "thesis" entry, after the series
	for j, s := range series {
		if len(s.Values) != len(groups) || (s.CI != nil && len(s.CI) != len(groups)) || (s.Ref != nil && len(s.Ref) != len(groups)) {
			return nil, fmt.Errorf("grouped bars %s: series %s has %d values for %d groups", path, s.Label, len(s.Values), len(groups))
		}
		var eb errPoints
		var legend *plotter.Polygon
		for i, v := range s.Values {
			if math.IsNaN(v) {
				continue
			}
			x0 := float64(i) - span/2 + float64(j)*w
			bar, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: 0}, {X: x0 + w, Y: 0}, {X: x0 + w, Y: v}, {X: x0, Y: v}})
			if err != nil {
				return nil, err
			}
			bar.Color = plotutil.Color(j)
			bar.LineStyle.Width = vg.Points(0.5)
			bar.LineStyle.Color = color.Black
			p.Add(bar)
			legend = bar
			ymax = max(ymax, v)
			if s.CI != nil && !math.IsNaN(s.CI[i]) && s.CI[i] > 0 {
				eb.add(x0+w/2, v, s.CI[i])
				ymax = max(ymax, v+s.CI[i])
			}
		}
		if legend != nil {
			p.Legend.Add(s.Label, legend)
		}
		if eb.Len() > 0 {
			e, err := plotter.NewYErrorBars(eb)
			if err != nil {
				return nil, err
			}
			p.Add(e)
		}
		if r, err := refMarks(s.Ref, j, span, w); err != nil {
			return nil, err
		} else if r != nil {
			p.Add(r)
			for _, v := range s.Ref {
				if !math.IsNaN(v) {
					ymax = max(ymax, v)
				}
			}
			if refLegend == nil {
				refLegend = r
			}
		}
	}
	if refLegend != nil {
		p.Legend.Add("thesis", refLegend)
	}
	p.NominalX(groups...)
	p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
	p.Y.Min, p.Y.Max = 0, max(ymax*1.15, 1)
	return p, nil
}
