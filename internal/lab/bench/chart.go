package bench

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/espgw/espgw/internal/lab/figures"
)

// Chart file names WriteCharts writes.
const (
	ChartThroughput = "throughput.png"
	ChartPackets    = "packets.png"
	ChartLatency    = "latency-cdf.png"
)

// WriteCharts draws the report into dir: zero-loss throughput (Mbit/s and
// kpkt/s) against frame size per path, and the latency CDF per path and load.
// It returns the files written.
func WriteCharts(dir string, rep *Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("charts: %w", err)
	}
	var files []string
	for _, c := range []struct {
		file, y string
		value   func(FrameResult) float64
	}{
		{ChartThroughput, "zero-loss throughput (Mbit/s of frames, log)", func(f FrameResult) float64 { return f.Mbps(f.ZeroLoss) }},
		{ChartPackets, "zero-loss rate (kpkt/s, log)", func(f FrameResult) float64 { return f.ZeroLoss / 1e3 }},
	} {
		p, err := frameChart(rep, c.y, c.value)
		if err != nil {
			return files, err
		}
		path := filepath.Join(dir, c.file)
		if err := savePanels([]panel{p}, 11*vg.Centimeter, path); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	plots, err := latencyChart(rep)
	if err != nil {
		return files, err
	}
	path := filepath.Join(dir, ChartLatency)
	if err := savePanels(plots, 10*vg.Centimeter, path); err != nil {
		return files, err
	}
	return append(files, path), nil
}

// panel is a plot and its legend, drawn to the plot's right, outside
// the data.
type panel struct {
	plot   *plot.Plot
	legend plot.Legend
}

const legendWidth = 10 * vg.Centimeter

// savePanels draws panels stacked in one PNG, each height tall.
func savePanels(panels []panel, height vg.Length, path string) error {
	w, h := 18*vg.Centimeter+legendWidth, height*vg.Length(len(panels))
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadY: vg.Centimeter / 2, PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4,
		PadLeft: vg.Centimeter / 4, PadRight: vg.Centimeter / 4}
	for i, p := range panels {
		c := tiles.At(dc, 0, i)
		p.plot.Draw(draw.Crop(c, 0, -legendWidth, 0, 0))
		l := p.legend
		l.Top, l.Left = true, true
		l.TextStyle.Font.Size = vg.Points(10)
		l.YOffs = -p.plot.Title.TextStyle.Height(p.plot.Title.Text) - vg.Centimeter/4
		l.Draw(draw.Crop(c, c.Size().X-legendWidth+vg.Centimeter/2, 0, 0, 0))
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("chart %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	return nil
}

// style gives each path a colour of its own, and the baselines grey and black.
func style(i int, r *Result) color.Color {
	switch r.Kind {
	case KindPlain:
		return color.Gray{Y: 0x60}
	case KindWireguard:
		return color.Black
	}
	return plotutil.Color(i)
}

// decadeTicks labels every decade of a log axis, and the 2× and 5×
// lines over a short range, numbers as espgw's pages write them.
type decadeTicks struct{}

func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for _, t := range figures.LogTicks(math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))) {
		if t.Value >= lo*0.999 && t.Value <= hi*1.001 {
			ts = append(ts, plot.Tick{Value: t.Value, Label: t.Label})
		}
	}
	return ts
}

// toDecades widens a log axis to whole decades, so that each is labelled.
func toDecades(a *plot.Axis) {
	a.Min = math.Pow(10, math.Floor(math.Log10(a.Min)))
	a.Max = math.Pow(10, math.Ceil(math.Log10(a.Max)))
}

func frameChart(rep *Report, ylabel string, value func(FrameResult) float64) (panel, error) {
	p := plot.New()
	legend := plot.NewLegend()
	p.Title.Text = "RFC 2544 zero-loss rate against frame size"
	p.X.Label.Text = "frame size (bytes)"
	p.Y.Label.Text = ylabel
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = decadeTicks{}
	p.X.Tick.Marker = plot.ConstantTicks(frameTicks(rep))
	p.Add(plotter.NewGrid())
	var imixAt plotter.XYs
	drawn := false
	for i, r := range rep.Results {
		var pts plotter.XYs
		var imix plotter.XYs
		for _, f := range r.Frames {
			v := value(f)
			if v <= 0 {
				continue // a log axis has no zero
			}
			if f.Mix == IMIX().Name {
				imix = append(imix, plotter.XY{X: f.MeanFrame, Y: v})
				continue
			}
			pts = append(pts, plotter.XY{X: f.MeanFrame, Y: v})
		}
		if len(pts) == 0 {
			continue
		}
		slices.SortStableFunc(pts, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		drawn = true
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return panel{}, fmt.Errorf("chart line for %s: %w", r.Name, err)
		}
		c := style(i, r)
		l.Color, s.Color = c, c
		l.Width = vg.Points(1.5)
		s.Shape = draw.CircleGlyph{}
		p.Add(l, s)
		legend.Add(r.Name, l, s)
		if len(imix) > 0 {
			m, err := plotter.NewScatter(imix)
			if err != nil {
				return panel{}, err
			}
			m.Color, m.Shape, m.Radius = c, draw.BoxGlyph{}, vg.Points(5)
			p.Add(m)
			imixAt = append(imixAt, imix...)
		}
	}
	if !drawn {
		noData(p, &p.Y)
		return panel{p, legend}, nil
	}
	toDecades(&p.Y)
	if len(imixAt) > 0 {
		// Each path's IMIX rate is a square of its colour, named once on
		// the chart, above the highest, and in the legend.
		top := slices.MaxFunc(imixAt, func(a, b plotter.XY) int { return cmp.Compare(a.Y, b.Y) })
		lb, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: top.X, Y: top.Y * 1.15}}, Labels: []string{"IMIX"}})
		if err != nil {
			return panel{}, err
		}
		p.Add(lb)
		m, _ := plotter.NewScatter(plotter.XYs{{X: 0, Y: 1}})
		m.Shape, m.Radius, m.Color = draw.BoxGlyph{}, vg.Points(5), color.Black
		legend.Add("IMIX (squares, at the mix's mean size)", m)
	}
	return panel{p, legend}, nil
}

func frameTicks(rep *Report) []plot.Tick {
	seen := map[float64]bool{}
	var ticks []plot.Tick
	for _, r := range rep.Results {
		for _, f := range r.Frames {
			if f.Mix != IMIX().Name && !seen[f.MeanFrame] {
				seen[f.MeanFrame] = true
				ticks = append(ticks, plot.Tick{Value: f.MeanFrame, Label: f.Mix})
			}
		}
	}
	return ticks
}

// latencyChart is the one-way latency CDF, one panel per load (a fraction
// of each path's own zero-loss rate) and a line per path: x the delay on a
// log axis, y the fraction of packets at or below it.
func latencyChart(rep *Report) ([]panel, error) {
	var loads []float64
	for _, r := range rep.Results {
		for _, l := range r.Latency {
			if !slices.Contains(loads, l.Load) {
				loads = append(loads, l.Load)
			}
		}
	}
	slices.Sort(loads)
	if len(loads) == 0 {
		p := plot.New()
		p.Title.Text = "One-way latency CDF under load"
		noData(p, &p.X)
		return []panel{{p, plot.NewLegend()}}, nil
	}
	var plots []panel
	for _, load := range loads {
		p := plot.New()
		legend := plot.NewLegend()
		p.Title.Text = fmt.Sprintf("One-way latency CDF at %.0f%% of the zero-loss rate", load*100)
		p.X.Label.Text = "latency (µs, log)"
		p.Y.Label.Text = "fraction of packets"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = decadeTicks{}
		p.Y.Min, p.Y.Max = 0, 1
		p.Add(plotter.NewGrid())
		drawn := false
		for i, r := range rep.Results {
			l := r.LatencyAt(load)
			if l == nil {
				continue
			}
			var pts plotter.XYs
			for _, c := range l.CDF {
				if c.Micros > 0 && !math.IsInf(c.Micros, 0) {
					pts = append(pts, plotter.XY{X: c.Micros, Y: c.Percentile / 100})
				}
			}
			if len(pts) < 2 {
				continue
			}
			line, err := plotter.NewLine(pts)
			if err != nil {
				return nil, fmt.Errorf("latency line for %s: %w", r.Name, err)
			}
			line.Color = style(i, r)
			line.Width = vg.Points(1.5)
			p.Add(line)
			legend.Add(fmt.Sprintf("%s (p99 %s µs)", r.Name, figures.Number(l.P99)), line)
			drawn = true
		}
		if !drawn {
			noData(p, &p.X)
		} else {
			toDecades(&p.X)
		}
		plots = append(plots, panel{p, legend})
	}
	return plots, nil
}

// noData makes an empty chart drawable (a log axis over no data has no
// range) and says why it is empty.
func noData(p *plot.Plot, axis *plot.Axis) {
	axis.Scale = plot.LinearScale{}
	axis.Tick.Marker = plot.DefaultTicks{}
	p.Title.Text += " — no data"
}
