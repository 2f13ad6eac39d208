// Package plots draws the thesis-style figures with gonum/plot: data rate at the MN over time
// (figs 4.8, 5.4-5.7) and sequence number over time (fig 4.9), per run and as overlays.
package plots

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"ilnp/lab/measure"
)

// Series is one labelled line.
type Series struct {
	Label  string
	Points []measure.Point
}

// Marks are the movement instants drawn as vertical lines (seconds; <0: none).
type Marks struct {
	Enter, Leave, Handoff float64
	WindowStart           float64
	WindowEnd             float64
}

func xys(pts []measure.Point, scale float64) plotter.XYs {
	out := make(plotter.XYs, len(pts))
	for i, p := range pts {
		out[i].X, out[i].Y = p.T, p.V*scale
	}
	return out
}

func vline(p *plot.Plot, x float64, ymax float64, c color.Color, dashed bool, label string) error {
	if x < 0 {
		return nil
	}
	l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: ymax}})
	if err != nil {
		return err
	}
	l.Color = c
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l)
	if label != "" {
		p.Legend.Add(label, l)
	}
	return nil
}

func maxY(series []Series, scale float64) float64 {
	m := 1.0
	for _, s := range series {
		for _, p := range s.Points {
			m = max(m, p.V*scale)
		}
	}
	return m
}

func marks(p *plot.Plot, m Marks, ymax float64) error {
	if m.WindowEnd > m.WindowStart {
		band, err := plotter.NewPolygon(plotter.XYs{{X: m.WindowStart, Y: 0}, {X: m.WindowEnd, Y: 0}, {X: m.WindowEnd, Y: ymax}, {X: m.WindowStart, Y: ymax}})
		if err != nil {
			return err
		}
		band.Color = color.NRGBA{255, 200, 80, 50}
		band.LineStyle.Width = 0
		p.Add(band)
		p.Legend.Add("5-s window", band)
	}
	if err := vline(p, m.Enter, ymax, color.RGBA{90, 90, 90, 255}, true, "enter L3"); err != nil {
		return err
	}
	if err := vline(p, m.Leave, ymax, color.RGBA{200, 0, 0, 255}, true, "leave L2"); err != nil {
		return err
	}
	return vline(p, m.Handoff, ymax, color.Black, false, "first LU")
}

func xrange(p *plot.Plot, series []Series) {
	xmax := 1.0
	for _, s := range series {
		for _, pt := range s.Points {
			xmax = max(xmax, pt.T)
		}
	}
	p.X.Min, p.X.Max = 0, xmax
}

// Rate draws data rate (bytes/s) at the MN over time.
func Rate(path, title string, series []Series, m Marks) error {
	return lines(path, title, "data rate at MN (bytes/s)", 1.5, series, m)
}

// lines draws each series as a line from 0 to 10 % above the largest value, with the marks.
func lines(path, title, ylabel string, width float64, series []Series, m Marks) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	ymax := maxY(series, 1) * 1.1
	if err := marks(p, m, ymax); err != nil {
		return err
	}
	for i, s := range series {
		l, err := plotter.NewLine(xys(s.Points, 1))
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(width)
		p.Add(l)
		p.Legend.Add(s.Label, l)
	}
	p.Y.Min, p.Y.Max = 0, ymax
	xrange(p, series)
	if err := p.Save(8*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// Seq draws sequence numbers received at the MN over time (unit: "datagram" or "byte").
func Seq(path, title, unit string, series []Series, m Marks) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	scale := 1.0
	switch unit {
	case "byte":
		p.Y.Label.Text = "TCP sequence number at MN (MB)"
		scale = 1e-6
	default:
		p.Y.Label.Text = "UDP sequence number at MN"
	}
	p.Legend.Top = true
	ymax := maxY(series, scale) * 1.05
	if err := marks(p, m, ymax); err != nil {
		return err
	}
	for i, s := range series {
		sc, err := plotter.NewScatter(xys(s.Points, scale))
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color = plotutil.Color(i)
		sc.GlyphStyle.Radius = vg.Points(1)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		p.Add(sc)
		p.Legend.Add(s.Label, sc)
	}
	p.Y.Min, p.Y.Max = 0, ymax
	xrange(p, series)
	if err := p.Save(8*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// Cwnd draws the TCP sender's congestion window (segments) over time.
func Cwnd(path, title string, series []Series, m Marks) error {
	return lines(path, title, "cwnd at the TCP sender (segments)", 1.2, series, m)
}
