// Package chart draws the benchmarks' figures as SVG with gonum.org/v1/plot: measures against a parameter as
// lines, and measures per category as grouped bars. The SVG names its fonts rather than embedding them, which
// keeps the files a few kilobytes.
package chart

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Chart is a figure that draws itself as SVG.
type Chart interface {
	WriteSVG(w io.Writer) error
}

// WriteFile draws c into the file at path.
func WriteFile(path string, c Chart) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(c.WriteSVG(f), f.Close())
}

// Series is one line of a Lines chart: Y[i] at X[i].
type Series struct {
	Name string
	X, Y []float64
	// Color is the line's index in the palette, so that series of one subject (a p50 and its p99) share one.
	Color int
	// Style tells the measures of one subject apart: Solid for the main one.
	Style Style
}

// Style is a line's pattern.
type Style int

// The line patterns: a subject's main measure is Solid, the others beside it, such as its p50 beside its p99,
// one of the rest.
const (
	Solid Style = iota
	Dashed
	Dotted
	DashDot
)

// dashes are each Style's dash pattern, in points.
var dashes = map[Style][]float64{Dashed: {5, 3}, Dotted: {1.5, 2.5}, DashDot: {6, 2.5, 1.5, 2.5}}

// Lines plots series against one numeric axis, both axes from zero, each point marked and its X value ticked.
type Lines struct {
	Title, X, Y string
	Series      []Series
	// LogY draws Y on a logarithmic scale, from the power of ten at or below the smallest value: for values that
	// span decades, such as latencies with and without a backlog. Every Y value must then be positive.
	LogY bool
}

// WriteSVG draws the chart.
func (l Lines) WriteSVG(w io.Writer) error {
	p := newPlot(l.Title, l.Y)
	p.X.Label.Text = l.X
	p.X.Min = 0
	var ticks []plot.Tick
	for _, s := range l.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("chart: series %q has %d X and %d Y values", s.Name, len(s.X), len(s.Y))
		}
		xys := make(plotter.XYs, len(s.X))
		for i := range s.X {
			xys[i] = plotter.XY{X: s.X[i], Y: s.Y[i]}
			ticks = append(ticks, plot.Tick{Value: s.X[i], Label: strconv.FormatFloat(s.X[i], 'f', -1, 64)})
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("chart: series %q: %w", s.Name, err)
		}
		line.Color = plotutil.Color(s.Color)
		line.Width = vg.Points(1.5)
		for _, d := range dashes[s.Style] {
			line.Dashes = append(line.Dashes, vg.Points(d))
		}
		points.Color = line.Color
		points.Shape = plotutil.Shape(s.Color)
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
	}
	// The measured sizes are the ticks, and room past the last keeps its label inside the picture.
	slices.SortFunc(ticks, func(a, b plot.Tick) int { return cmp.Compare(a.Value, b.Value) })
	p.X.Tick.Marker = plot.ConstantTicks(slices.CompactFunc(ticks, func(a, b plot.Tick) bool { return a.Value == b.Value }))
	p.X.Max *= 1.05
	if l.LogY {
		p.Y.Min = math.Inf(1)
		for _, s := range l.Series {
			for _, y := range s.Y {
				if y <= 0 {
					return fmt.Errorf("chart: series %q has %g on a logarithmic axis", s.Name, y)
				}
				p.Y.Min = min(p.Y.Min, y)
			}
		}
		p.Y.Min = math.Pow(10, math.Floor(math.Log10(p.Y.Min)))
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	} else {
		p.Y.Max *= 1.05
	}
	return writeBeside(p, 16*vg.Centimeter, 10*vg.Centimeter, w)
}

// Bars draws, for each group, one bar per series side by side.
type Bars struct {
	Title, Y string
	Groups   []string
	Series   []BarSeries
}

// BarSeries is one bar in every group of a Bars chart.
type BarSeries struct {
	Name string
	// Values has one value per group, in Bars.Groups order.
	Values []float64
}

// WriteSVG draws the chart.
func (b Bars) WriteSVG(w io.Writer) error {
	p := newPlot(b.Title, b.Y)
	width := vg.Points(48 / float64(max(len(b.Series), 1)))
	for i, s := range b.Series {
		if len(s.Values) != len(b.Groups) {
			return fmt.Errorf("chart: series %q has %d values for %d groups", s.Name, len(s.Values), len(b.Groups))
		}
		bars, err := plotter.NewBarChart(plotter.Values(s.Values), width)
		if err != nil {
			return fmt.Errorf("chart: series %q: %w", s.Name, err)
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(i)-float64(len(b.Series)-1)/2)
		p.Add(bars)
		p.Legend.Add(s.Name, bars)
	}
	p.NominalX(b.Groups...)
	return write(p, len(b.Series), 20*vg.Centimeter, 10*vg.Centimeter, w)
}

// newPlot starts a plot with a title, a Y label, a grid and a Y axis that starts at zero, so that bars and lines
// compare by length.
func newPlot(title, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = y
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.ThumbnailWidth = vg.Points(24)
	return p
}

// writeBeside draws p as SVG, plotWidth wide, and its legend to the right of it, as wide as its entries: a line
// chart has many (a series per member count and measure), and room for them over the lines would leave the data a
// corner of the plot.
func writeBeside(p *plot.Plot, plotWidth, height vg.Length, w io.Writer) error {
	legend := p.Legend
	p.Legend = plot.NewLegend()
	// Thumbnails first, then the names, left-aligned: a viewer whose font is wider than the one measured here
	// runs them past their end, not over the thumbnails; a quarter more room takes that.
	legend.Left = true
	gap := vg.Points(8)
	legendWidth := legend.Rectangle(draw.New(vgsvg.New(plotWidth, height))).Size().X*1.25 + 2*gap
	c := vgsvg.New(plotWidth+legendWidth, height)
	dc := draw.New(c)
	p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	legend.Draw(draw.Crop(dc, plotWidth+gap, -gap, gap, -gap))
	_, err := c.WriteTo(w)
	return err
}

// write draws p as SVG, with room above the highest value for the legend's entries.
func write(p *plot.Plot, entries int, width, height vg.Length, w io.Writer) error {
	p.Y.Max *= 1.1 + 0.07*float64(entries)
	to, err := p.WriterTo(width, height, "svg")
	if err != nil {
		return err
	}
	_, err = to.WriteTo(w)
	return err
}
