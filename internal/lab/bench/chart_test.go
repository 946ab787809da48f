package bench

import (
	"image"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"
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
