package bench

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latency records one-way delays in an HDR histogram: nanosecond values from
// 1 ns to a minute at three significant digits, so p99.9 of a million
// samples costs a fixed few hundred KiB and no sorting.
type Latency struct {
	h *hdrhistogram.Histogram
}

// NewLatency returns an empty histogram.
func NewLatency() *Latency {
	return &Latency{h: hdrhistogram.New(1, int64(time.Minute), 3)}
}

// Record adds one delay; values out of range are clamped, never dropped.
func (l *Latency) Record(d time.Duration) {
	v := int64(d)
	if v < 1 {
		v = 1
	}
	if v > l.h.HighestTrackableValue() {
		v = l.h.HighestTrackableValue()
	}
	l.h.RecordValue(v)
}

// Count is the number of delays recorded.
func (l *Latency) Count() int64 { return l.h.TotalCount() }

// Percentile is the delay at or below which p percent of the samples lie.
func (l *Latency) Percentile(p float64) time.Duration {
	return time.Duration(l.h.ValueAtPercentile(p))
}

// CDFPoint is one step of a latency distribution.
type CDFPoint struct {
	Percentile float64 `json:"percentile"`
	Micros     float64 `json:"us"`
}

// cdfPercentiles are where the distribution is sampled for the report and
// the chart: dense in the tail, where the interest is.
var cdfPercentiles = []float64{0, 1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 97, 98, 99, 99.5, 99.9, 99.95, 99.99, 100}

// CDF samples the distribution at fixed percentiles.
func (l *Latency) CDF() []CDFPoint {
	out := make([]CDFPoint, 0, len(cdfPercentiles))
	for _, p := range cdfPercentiles {
		v := l.h.ValueAtPercentile(p)
		if p == 0 {
			v = l.h.Min()
		}
		out = append(out, CDFPoint{Percentile: p, Micros: float64(v) / 1e3})
	}
	return out
}
