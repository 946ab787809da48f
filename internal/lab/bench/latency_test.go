package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestLatencyPercentilesMatchExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	l := NewLatency()
	var exact []time.Duration
	for range 200_000 {
		// A long tail: exponential around 50 µs, 1% spikes up to 20 ms.
		d := time.Duration(rng.ExpFloat64() * 50e3)
		if rng.IntN(100) == 0 {
			d += time.Duration(rng.IntN(20e6))
		}
		exact = append(exact, d)
		l.Record(d)
	}
	slices.Sort(exact)
	if l.Count() != int64(len(exact)) {
		t.Fatalf("count %d, want %d", l.Count(), len(exact))
	}
	for _, p := range []float64{50, 90, 99, 99.9} {
		want := exact[int(math.Ceil(p/100*float64(len(exact))))-1]
		got := l.Percentile(p)
		if rel := math.Abs(float64(got-want)) / float64(want); rel > 0.002 {
			t.Errorf("p%g = %v, exact %v (off by %.3f%%, HDR promises 0.1%%)", p, got, want, rel*100)
		}
	}
	cdf := l.CDF()
	for i := 1; i < len(cdf); i++ {
		if cdf[i].Micros < cdf[i-1].Micros || cdf[i].Percentile <= cdf[i-1].Percentile {
			t.Fatalf("CDF not increasing at %d: %+v then %+v", i, cdf[i-1], cdf[i])
		}
	}
	if first, last := cdf[0].Micros, cdf[len(cdf)-1].Micros; math.Abs(first-float64(exact[0])/1e3) > 0.01*first+0.01 ||
		math.Abs(last-float64(exact[len(exact)-1])/1e3) > 0.001*last {
		t.Errorf("CDF spans %g…%g µs, samples span %v…%v", first, last, exact[0], exact[len(exact)-1])
	}
}

func TestLatencyClampsOutOfRange(t *testing.T) {
	l := NewLatency()
	l.Record(-5) // a clock step: counted, as the smallest delay
	l.Record(2 * time.Hour)
	if l.Count() != 2 {
		t.Fatalf("count %d, want 2: out-of-range delays must be counted, not dropped", l.Count())
	}
	if got := l.Percentile(100); got < 59*time.Second {
		t.Errorf("max %v, want clamped to about a minute", got)
	}
}
