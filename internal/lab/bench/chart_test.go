package bench

import (
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
)

// syntheticReport is a report shaped like a real run, with made-up numbers:
// the charts' input, not a measurement.
func syntheticReport() *Report {
	rep := &Report{}
	for i, kind := range []string{KindPlain, KindWireguard, KindESP, KindESP} {
		r := &Result{Name: kind, Kind: kind}
		if kind == KindESP {
			r.Name = []string{"", "", "espgw aes-gcm-16-128 cpu none", "espgw aes-cbc-128+hmac-sha1-96 cpu none"}[i]
		}
		scale := []float64{8, 1, 1.6, 1.1}[i]
		mixes, _ := ParseMixes("all")
		for _, m := range mixes {
			pps := scale * 30_000 * 1500 / (m.MeanFrame() + 500)
			r.Frames = append(r.Frames, FrameResult{Mix: m.Name, MeanFrame: m.MeanFrame(), ZeroLoss: pps, Delivered: pps * 1.2})
		}
		for j, load := range []float64{0.1, 0.5, 0.9} {
			l := NewLatency()
			for k := range 10_000 {
				l.Record(time.Duration(float64(20+10*i+20*j) * (1 + float64(k%100)/100) * (1 + float64(k%1000/999)*20) * 1e3))
			}
			r.Latency = append(r.Latency, LatencyResult{Load: load, CDF: l.CDF()})
		}
		rep.Results = append(rep.Results, r)
	}
	return rep
}

func TestWriteChartsDrawsReadablePNGs(t *testing.T) {
	dir := t.TempDir()
	files, err := WriteCharts(filepath.Join(dir, "charts"), syntheticReport())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("wrote %v, want three charts", files)
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(fh)
		fh.Close()
		if err != nil {
			t.Fatalf("%s is not a PNG: %v", f, err)
		}
		if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 200 {
			t.Errorf("%s is %v, too small to read", f, b)
		}
		if colours(img) < 4 {
			t.Errorf("%s has %d colours: blank, or lines missing", f, colours(img))
		}
	}
	if os.Getenv("BENCH_KEEP_CHARTS") != "" {
		t.Logf("charts in %s", dir)
	}
}

func TestWriteChartsSurvivesEmptyAndZeroResults(t *testing.T) {
	rep := &Report{Results: []*Result{{Name: "plain", Kind: KindPlain, Frames: []FrameResult{{Mix: "64", MeanFrame: 64}}}}}
	if _, err := WriteCharts(t.TempDir(), rep); err != nil {
		t.Fatalf("charts of a run with no rates: %v", err)
	}
}

func colours(img image.Image) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r >> 12, g >> 12, bl >> 12, a >> 12}] = true
		}
	}
	return len(seen)
}

func TestChartAxesLabelEveryDecade(t *testing.T) {
	rep := syntheticReport()
	for _, c := range []struct {
		name  string
		build func() (*plot.Plot, error)
		axis  func(*plot.Plot) *plot.Axis
	}{
		{"packets", func() (*plot.Plot, error) {
			p, err := frameChart(rep, "kpkt/s", func(f FrameResult) float64 { return f.ZeroLoss / 1e3 })
			return p.plot, err
		}, func(p *plot.Plot) *plot.Axis { return &p.Y }},
		{"latency", func() (*plot.Plot, error) {
			ps, err := latencyChart(rep)
			if err != nil {
				return nil, err
			}
			return ps[1].plot, nil
		}, func(p *plot.Plot) *plot.Axis { return &p.X }},
	} {
		p, err := c.build()
		if err != nil {
			t.Fatal(err)
		}
		a := c.axis(p)
		var labels []string
		for _, tk := range a.Tick.Marker.Ticks(a.Min, a.Max) {
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		lo, hi := math.Log10(a.Min), math.Log10(a.Max)
		if lo != math.Trunc(lo) || hi != math.Trunc(hi) {
			t.Errorf("%s: axis %v…%v does not end on decades", c.name, a.Min, a.Max)
		}
		if len(labels) < int(hi-lo)+1 {
			t.Errorf("%s: labels %q over %v…%v, want every decade labelled", c.name, labels, a.Min, a.Max)
		}
		for _, l := range labels {
			if strings.ContainsAny(l, "e+") {
				t.Errorf("%s: label %q in exponent form", c.name, l)
			}
		}
	}
	got := func(lo, hi float64) (labels []string) {
		for _, tk := range (decadeTicks{}).Ticks(lo, hi) {
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		return labels
	}
	if l := got(10, 1000); !slices.Equal(l, []string{"10", "20", "50", "100", "200", "500", "1k"}) {
		t.Errorf("ticks over 10…1000: %q", l)
	}
	if l := got(1, 1e5); !slices.Equal(l, []string{"1", "10", "100", "1k", "10k", "100k"}) {
		t.Errorf("ticks over 1…1e5: %q", l)
	}
}
