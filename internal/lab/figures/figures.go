// Package figures formats the numbers of espgw's results one way for
// every page and chart.
package figures

import (
	"math"
	"strconv"
	"strings"
)

// Number formats a figure the same way everywhere on the page: three
// significant digits, with k, M and G for thousands, millions and
// billions (1, 25.3, 512, 1.2k, 10k, 3.4M).
func Number(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	if v != 0 {
		p := math.Pow(10, math.Floor(math.Log10(math.Abs(v)))-2)
		v = math.Round(v/p) * p // three significant digits, before the suffix is chosen
	}
	a := math.Abs(v)
	suffix := ""
	switch {
	case a >= 1e9:
		v, suffix = v/1e9, "G"
	case a >= 1e6:
		v, suffix = v/1e6, "M"
	case a >= 1e3:
		v, suffix = v/1e3, "k"
	}
	return trimFloat(v) + suffix
}

// trimFloat is v to three significant digits, no trailing zeros, no
// exponent.
func trimFloat(v float64) string {
	if v == 0 {
		return "0"
	}
	digits := 3 - int(math.Floor(math.Log10(math.Abs(v)))) - 1
	if digits < 0 {
		p := math.Pow(10, float64(-digits))
		return strconv.FormatFloat(math.Round(v/p)*p, 'f', 0, 64)
	}
	s := strconv.FormatFloat(v, 'f', digits, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// Tick is one line of a log axis: its value, its label ("" for none)
// and whether it is a decade.
type Tick struct {
	Value float64
	Label string
	Major bool
}

// LogTicks labels every decade from lo to hi, and the 2× and 5× lines
// within a range of three decades or fewer.
func LogTicks(lo, hi float64) []Tick {
	var ts []Tick
	decades := math.Round(math.Log10(hi / lo))
	for d := lo; d <= hi*1.0001; d *= 10 {
		ts = append(ts, Tick{Value: d, Label: Number(d), Major: true})
		if d*10 > hi*1.0001 {
			break
		}
		for _, m := range []float64{2, 5} {
			lbl := ""
			if decades <= 3 {
				lbl = Number(d * m)
			}
			ts = append(ts, Tick{Value: d * m, Label: lbl})
		}
	}
	return ts
}
