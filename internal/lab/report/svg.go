package report

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"

	"github.com/espgw/espgw/internal/lab/figures"
)

// Chart is one figure drawn as inline SVG: points or bars per series over
// named categories on the x axis, a linear or logarithmic y axis, the
// legend to the right of the plot.
type Chart struct {
	Title      string
	XLabel     string
	YLabel     string // with its unit
	Unit       string // after each value in the hover text
	LogY       bool
	Bars       bool // bars grouped per category, else lines with markers
	Categories []string
	// Groups, when set, label runs of GroupSize categories under the
	// category labels; lines do not join points across groups.
	Groups    []string
	GroupSize int
	Series    []Series
}

// Series is one line (or one bar per category) of a chart.
type Series struct {
	Name   string
	Values []float64 // one per category; NaN or (on a log axis) ≤ 0 for none
	// Low and High, when set, are each value's spread (whiskers).
	Low, High []float64
	Dashed    bool
}

const (
	chartW, chartH          = 880, 340
	padLeft, padTop         = 72, 34
	padBottom, legendWidth  = 66, 330
	plotW, plotH            = chartW - padLeft - legendWidth, chartH - padTop - padBottom
	legendX                 = padLeft + plotW + 18
	legendLine, legendChars = 18, 46
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

func seriesColor(i int) string { return palette[i%len(palette)] }

// SVG draws c. A chart with no value to draw says so in its plot area.
func (c Chart) SVG() template.HTML {
	var b strings.Builder
	h := max(chartH, padTop+16+len(c.Series)*legendLine)
	fmt.Fprintf(&b, `<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`,
		chartW, h, chartW, h, esc(c.Title))
	fmt.Fprintf(&b, `<text class="title" x="%d" y="20">%s</text>`, padLeft, esc(c.Title))
	lo, hi, ok := c.yRange()
	if !ok || len(c.Categories) == 0 {
		fmt.Fprintf(&b, `<rect class="frame" x="%d" y="%d" width="%d" height="%d"/>`, padLeft, padTop, plotW, plotH)
		fmt.Fprintf(&b, `<text class="nodata" x="%d" y="%d">no data</text></svg>`, padLeft+plotW/2, padTop+plotH/2)
		return template.HTML(b.String())
	}
	ticks := linearTicks(lo, hi)
	y := func(v float64) float64 { return padTop + plotH - (v-lo)/(hi-lo)*plotH }
	if c.LogY {
		ticks = figures.LogTicks(lo, hi)
		y = func(v float64) float64 {
			return padTop + plotH - (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotH
		}
	}
	for _, t := range ticks {
		ty := y(t.Value)
		cls := "grid"
		if !t.Major {
			cls = "grid minor"
		}
		fmt.Fprintf(&b, `<line class="%s" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, cls, padLeft, padLeft+plotW, ty, ty)
		if t.Label != "" {
			fmt.Fprintf(&b, `<text class="ytick" x="%d" y="%.1f">%s</text>`, padLeft-6, ty+4, esc(t.Label))
		}
	}
	fmt.Fprintf(&b, `<rect class="frame" x="%d" y="%d" width="%d" height="%d"/>`, padLeft, padTop, plotW, plotH)
	n := len(c.Categories)
	slot := float64(plotW) / float64(n)
	x := func(i int) float64 { return padLeft + slot*(float64(i)+0.5) }
	for i, cat := range c.Categories {
		fmt.Fprintf(&b, `<text class="xtick" x="%.1f" y="%d">%s</text>`, x(i), padTop+plotH+16, esc(cat))
	}
	for g, name := range c.Groups {
		if c.GroupSize <= 0 {
			break
		}
		mid := padLeft + slot*float64(g*c.GroupSize) + slot*float64(c.GroupSize)/2
		fmt.Fprintf(&b, `<text class="xtick group" x="%.1f" y="%d">%s</text>`, mid, padTop+plotH+32, esc(name))
		if g > 0 {
			gx := padLeft + slot*float64(g*c.GroupSize)
			fmt.Fprintf(&b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%d" y2="%d"/>`, gx, gx, padTop, padTop+plotH+36)
		}
	}
	fmt.Fprintf(&b, `<text class="xlabel" x="%d" y="%d">%s</text>`, padLeft+plotW/2, chartH-8, esc(c.XLabel))
	fmt.Fprintf(&b, `<text class="ylabel" transform="translate(14 %d) rotate(-90)">%s</text>`, padTop+plotH/2, esc(c.YLabel))
	base := y(lo)
	barW := slot * 0.8 / float64(max(1, len(c.Series)))
	for si, s := range c.Series {
		col := seriesColor(si)
		fmt.Fprintf(&b, `<g class="series" data-series="%s">`, esc(s.Name))
		var path []string
		line := func() {
			if len(path) > 1 {
				dash := ""
				if s.Dashed {
					dash = ` stroke-dasharray="6 4"`
				}
				fmt.Fprintf(&b, `<polyline class="line" points="%s" stroke="%s"%s/>`, strings.Join(path, " "), col, dash)
			}
			path = path[:0]
		}
		for i, v := range s.Values {
			if c.GroupSize > 0 && i > 0 && i%c.GroupSize == 0 {
				line()
			}
			if !c.drawable(v) || i >= n {
				continue
			}
			hover := fmt.Sprintf("%s, %s: %s%s", s.Name, c.category(i), figures.Number(v), unitSuffix(c.Unit))
			if s.Low != nil && s.High != nil && c.drawable(s.Low[i]) && c.drawable(s.High[i]) && s.High[i] > s.Low[i] {
				hover += fmt.Sprintf(" (runs %s … %s)", figures.Number(s.Low[i]), figures.Number(s.High[i]))
			}
			cx := x(i)
			if c.Bars {
				cx = padLeft + slot*float64(i) + slot*0.1 + barW*(float64(si)+0.5)
				top := y(v)
				fmt.Fprintf(&b, `<rect class="mark" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" data-value="%s"><title>%s</title></rect>`,
					cx-barW/2, top, barW, max(base-top, 1), col, raw(v), esc(hover))
			} else {
				path = append(path, fmt.Sprintf("%.1f,%.1f", cx, y(v)))
				fmt.Fprintf(&b, `<circle class="mark" cx="%.1f" cy="%.1f" r="4" fill="%s" data-value="%s"><title>%s</title></circle>`,
					cx, y(v), col, raw(v), esc(hover))
			}
			if s.Low != nil && s.High != nil && c.drawable(s.Low[i]) && c.drawable(s.High[i]) && s.High[i] > s.Low[i] {
				fmt.Fprintf(&b, `<line class="whisker" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s"/>`, cx, cx, y(s.Low[i]), y(s.High[i]), col)
			}
		}
		line()
		b.WriteString(`</g>`)
	}
	// The legend, outside the plot.
	fmt.Fprintf(&b, `<g class="legend">`)
	for si, s := range c.Series {
		ly := padTop + 8 + si*legendLine
		if c.Bars {
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="10" fill="%s"/>`, legendX, ly-5, seriesColor(si))
		} else {
			dash := ""
			if s.Dashed {
				dash = ` stroke-dasharray="6 4"`
			}
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/><circle cx="%d" cy="%d" r="4" fill="%s"/>`,
				legendX, legendX+18, ly, ly, seriesColor(si), dash, legendX+9, ly, seriesColor(si))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d"><title>%s</title>%s</text>`, legendX+24, ly+4, esc(s.Name), esc(shorten(s.Name, legendChars)))
	}
	b.WriteString(`</g></svg>`)
	return template.HTML(b.String())
}

// category is category i's full name, its group's first.
func (c Chart) category(i int) string {
	if c.GroupSize > 0 && i/c.GroupSize < len(c.Groups) {
		return c.Groups[i/c.GroupSize] + " " + c.Categories[i]
	}
	return c.Categories[i]
}

func (c Chart) drawable(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && (!c.LogY || v > 0)
}

// yRange is the y axis: from 0 (linear) or the decade below the lowest
// value (log) to a little above the highest.
func (c Chart) yRange() (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for i, v := range s.Values {
			vals := []float64{v}
			if s.Low != nil && s.High != nil && i < len(s.Low) {
				vals = append(vals, s.Low[i], s.High[i])
			}
			for _, v := range vals {
				if c.drawable(v) {
					lo, hi = min(lo, v), max(hi, v)
				}
			}
		}
	}
	if math.IsInf(lo, 0) {
		return 0, 0, false
	}
	if c.LogY {
		lo = math.Pow(10, math.Floor(math.Log10(lo)))
		hi = math.Pow(10, math.Ceil(math.Log10(hi)+1e-9))
		return lo, hi, true
	}
	lo = min(lo, 0)
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 5)
	return lo, math.Ceil(hi*1.05/step) * step, true
}

func linearTicks(lo, hi float64) []figures.Tick {
	step := niceStep((hi - lo) / 5)
	var ts []figures.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step/1e6; v += step {
		ts = append(ts, figures.Tick{Value: v, Label: figures.Number(v), Major: true})
	}
	return ts
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// raw is v exactly, for the page's data attributes.
func raw(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func unitSuffix(u string) string {
	if u == "" || u == "%" || u == "×" {
		return u
	}
	return " " + u
}

func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func esc(s string) string { return template.HTMLEscapeString(s) }
