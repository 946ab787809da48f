package figures

import (
	"math"
	"slices"
	"testing"
)

func TestNumber(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {1, "1"}, {2.5, "2.5"}, {25.345, "25.3"}, {0.05, "0.05"}, {0.001234, "0.00123"},
		{512, "512"}, {999.6, "1k"}, {1000, "1k"}, {1234, "1.23k"}, {10000, "10k"}, {123456, "123k"},
		{3.4e6, "3.4M"}, {1.06e10, "10.6G"}, {-42.42, "-42.4"}, {math.NaN(), "–"}, {math.Inf(1), "–"},
	} {
		if got := Number(c.v); got != c.want {
			t.Errorf("Number(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}

func TestLogTicksLabelEveryDecade(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		labels []string
	}{
		{10, 1000, []string{"10", "20", "50", "100", "200", "500", "1k"}},
		{100, 1000, []string{"100", "200", "500", "1k"}},
		{1, 1e6, []string{"1", "10", "100", "1k", "10k", "100k", "1M"}},
	} {
		var got []string
		for _, tk := range LogTicks(c.lo, c.hi) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if !slices.Equal(got, c.labels) {
			t.Errorf("LogTicks(%v, %v) labels %q, want %q", c.lo, c.hi, got, c.labels)
		}
	}
}
