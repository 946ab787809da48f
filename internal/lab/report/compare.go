package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/espgw/espgw/internal/lab/bench"
	"github.com/espgw/espgw/internal/lab/scenario"
)

// Better says which way a figure improves.
type Better int

// Directions of a figure.
const (
	Neither Better = iota // a count, not judged
	Higher
	Lower
)

// Figure is one measure across the runs compared, the first run the
// reference.
type Figure struct {
	Key     string // stable, for the page's data attributes
	Section string
	Row     string
	Measure string
	Unit    string
	Better  Better
	Values  []Value // one per run; Has false where the run lacks it
}

// Value is one run's figure and the spread that run recorded around it.
type Value struct {
	Has    bool
	V      float64
	Spread bool    // Lo and Hi were recorded (repeats, the search's bracket)
	Lo, Hi float64 // Hi may be +Inf: the run only bounded it from below
	Text   string  // shown instead of the number (a verdict)
}

// Change is what a comparison makes of a figure in one run against the
// first.
type Change string

// Changes.
const (
	Regression  Change = "regression"
	Improvement Change = "improvement"
	Within      Change = "within spread"
	Unjudged    Change = "no spread recorded"
	NoChange    Change = ""
)

// Judge compares run i's value of f with the first run's: a regression
// or an improvement only when the two spreads do not overlap.
func (f Figure) Judge(i int) Change {
	if i == 0 || i >= len(f.Values) || !f.Values[0].Has || !f.Values[i].Has {
		return NoChange
	}
	a, b := f.Values[0], f.Values[i]
	if a.Text != "" || b.Text != "" {
		switch {
		case a.Text == b.Text:
			return NoChange
		case a.Text == "PASS":
			return Regression
		case b.Text == "PASS":
			return Improvement
		}
		return NoChange
	}
	if f.Better == Neither {
		return NoChange
	}
	if !a.Spread || !b.Spread {
		return Unjudged
	}
	up, down := b.Lo > a.Hi, b.Hi < a.Lo
	switch {
	case up && f.Better == Higher, down && f.Better == Lower:
		return Improvement
	case down && f.Better == Higher, up && f.Better == Lower:
		return Regression
	}
	return Within
}

// Ratio is run i's value over the first run's (NaN where either is
// missing or the first is 0).
func (f Figure) Ratio(i int) float64 {
	if i >= len(f.Values) || !f.Values[0].Has || !f.Values[i].Has || f.Values[0].V == 0 || f.Values[0].Text != "" {
		return math.NaN()
	}
	return f.Values[i].V / f.Values[0].V
}

// figureSet collects figures in the order they are first met.
type figureSet struct {
	runs  int
	order []string
	by    map[string]*Figure
}

func newFigureSet(runs int) *figureSet { return &figureSet{runs: runs, by: map[string]*Figure{}} }

func (s *figureSet) put(run int, section, row, measure, unit string, better Better, v Value) {
	key := section + "|" + row + "|" + measure
	f := s.by[key]
	if f == nil {
		f = &Figure{Key: key, Section: section, Row: row, Measure: measure, Unit: unit, Better: better, Values: make([]Value, s.runs)}
		s.by[key] = f
		s.order = append(s.order, key)
	}
	v.Has = true
	f.Values[run] = v
}

// list is the figures grouped by section, sections and figures in the
// order first met.
func (s *figureSet) list() []Figure {
	out := make([]Figure, 0, len(s.order))
	var sections []string
	for _, k := range s.order {
		out = append(out, *s.by[k])
		if !slices.Contains(sections, s.by[k].Section) {
			sections = append(sections, s.by[k].Section)
		}
	}
	slices.SortStableFunc(out, func(a, b Figure) int {
		return slices.Index(sections, a.Section) - slices.Index(sections, b.Section)
	})
	return out
}

// exact is a figure with no spread recorded.
func exact(v float64) Value { return Value{V: v} }

// ranged is a figure with the spread its repeats recorded; one repeat
// records none.
func ranged(v float64, runs []float64, scale float64) Value {
	if len(runs) < 2 {
		return exact(v)
	}
	lo, hi := slices.Min(runs)/scale, slices.Max(runs)/scale
	return Value{V: v, Spread: true, Lo: lo, Hi: hi}
}

// zeroLoss is a zero-loss rate between its rate and the search's bound
// (unbounded above when the probe, not the path, was the limit).
func zeroLoss(rate, bound float64, probeLimited bool) Value {
	v := Value{V: rate / 1e3, Spread: bound > 0 || probeLimited, Lo: rate / 1e3, Hi: bound / 1e3}
	if probeLimited {
		v.Hi = math.Inf(1)
	}
	return v
}

// pathRows names each run's bench paths for the comparison: by name when
// every run has that path, else by kind and order (two engines' runs have
// different names for the same place in the run), then shown as every
// run's name for it.
func pathRows(runs []*bench.Report) [][]string {
	keys := make([][]string, len(runs))
	names := map[string][]string{}
	defer func() {
		for _, ks := range keys {
			for j, k := range ks {
				ks[j] = strings.Join(names[k], " | ")
			}
		}
	}()
	for i, rep := range runs {
		count := map[string]int{}
		for _, r := range rep.Results {
			everywhere := true
			for _, o := range runs {
				if !slices.ContainsFunc(o.Results, func(x *bench.Result) bool { return x.Name == r.Name }) {
					everywhere = false
				}
			}
			count[r.Kind]++
			k := r.Name
			if !everywhere {
				k = fmt.Sprintf("%s path %d", r.Kind, count[r.Kind])
			}
			keys[i] = append(keys[i], k)
			if !slices.Contains(names[k], r.Name) {
				names[k] = append(names[k], r.Name)
			}
		}
	}
	return keys
}

// BenchFigures are the figures of bench runs, side by side.
func BenchFigures(runs []*bench.Report) []Figure {
	s := newFigureSet(len(runs))
	keys := pathRows(runs)
	for i, rep := range runs {
		for j, r := range rep.Results {
			if r.Error != "" {
				continue
			}
			row := keys[i][j]
			if r.TCP1 > 0 {
				s.put(i, "TCP throughput", row, "TCP×1", "Mbit/s", Higher, ranged(r.TCP1/1e6, r.TCP1Runs, 1e6))
			}
			if r.TCP4 > 0 {
				s.put(i, "TCP throughput", row, "TCP×4", "Mbit/s", Higher, ranged(r.TCP4/1e6, r.TCP4Runs, 1e6))
			}
			for _, f := range r.Frames {
				s.put(i, "Zero-loss rate", row, f.Mix+" B", "kpkt/s", Higher, zeroLoss(f.ZeroLoss, f.ZeroLossBound, f.GeneratorLimited))
			}
			for _, l := range r.Latency {
				load := fmt.Sprintf("%.0f%% load", l.Load*100)
				s.put(i, "Latency", row, load+" p50", "µs", Lower, exact(l.P50))
				s.put(i, "Latency", row, load+" p99", "µs", Lower, exact(l.P99))
				s.put(i, "Latency", row, load+" p99.9", "µs", Lower, exact(l.P999))
			}
			for _, g := range r.Gateways {
				s.put(i, "CPU and memory", row, g.Name+" CPU", "% of a core", Lower, exact(g.CPUPercent))
				s.put(i, "CPU and memory", row, g.Name+" peak RSS", "MiB", Lower, exact(float64(g.HWM)/(1<<20)))
				if r.Kind == bench.KindESP {
					s.put(i, "Engine queue", row, g.Name+" max queue", "ops", Neither, exact(float64(g.MaxQueue)))
					s.put(i, "Engine queue", row, g.Name+" queue full", "times", Neither, exact(float64(g.QueueFull)))
				}
			}
		}
	}
	return s.list()
}

// TunnelFigures are the figures of tunnel-scale runs, a row per count.
func TunnelFigures(runs []*bench.TunnelReport) []Figure {
	s := newFigureSet(len(runs))
	for i, rep := range runs {
		for _, r := range rep.Results {
			if r.Error != "" {
				continue
			}
			row := fmt.Sprintf("%d tunnels", r.Tunnels)
			zl := zeroLoss(r.ZeroLoss, r.ZeroLossBound, false)
			zl.Spread = r.ZeroLossBound > 0
			s.put(i, "Tunnel scale", row, "zero-loss", "kpkt/s", Higher, zl)
			s.put(i, "Tunnel scale", row, "TCP×1", "Mbit/s", Higher, exact(r.TCP1/1e6))
			s.put(i, "Tunnel scale", row, "gw1 start", "s", Lower, exact(r.LoadSeconds))
			s.put(i, "Tunnel scale", row, "gw1 RSS", "MiB", Lower, exact(float64(r.RSS)/(1<<20)))
			s.put(i, "Tunnel scale", row, "lost in add/del", "packets", Lower, exact(float64(r.AddDelLost)))
			s.put(i, "Tunnel scale", row, "lost in rekey", "packets", Lower, exact(float64(r.RekeyLost)))
			s.put(i, "Tunnel scale", row, "control SA adds", "per s", Higher, exact(r.ControlAddsPerSec))
		}
	}
	return s.list()
}

// IKEFigures are the figures of IKE tunnel-setup runs, a row per
// initiator and responder pair, and the ratios of each run.
func IKEFigures(runs []*bench.IKEReport) []Figure {
	s := newFigureSet(len(runs))
	for i, rep := range runs {
		for _, r := range rep.Results {
			if r.Error != "" {
				continue
			}
			row := r.Initiator + " → " + r.Responder
			s.put(i, "IKE tunnel setup", row, "setup", "tunnels/s", Higher, exact(r.PerSec))
			s.put(i, "IKE tunnel setup", row, "time to all", "s", Lower, exact(r.Seconds))
			if r.RekeysPerSec > 0 {
				s.put(i, "IKE tunnel setup", row, "CHILD_SA rekey", "rekeys/s", Higher, exact(r.RekeysPerSec))
			}
			if r.HeapPerTunnel > 0 {
				s.put(i, "IKE tunnel setup", row, "heap per tunnel", "B", Lower, exact(r.HeapPerTunnel))
			}
		}
		for _, x := range rep.Ratios {
			s.put(i, "IKE ratios (same run)", x.Of+" over "+x.Over, x.Measure, "×", Higher, exact(x.Value))
		}
	}
	return s.list()
}

// ScenarioFigures are scenario verdicts and expectation values across
// runs: a scenario that passed in the first run and fails in another is a
// regression.
func ScenarioFigures(runs [][]*scenario.Result) []Figure {
	s := newFigureSet(len(runs))
	for i, rs := range runs {
		for _, r := range rs {
			verdict := "FAIL"
			if r.Pass {
				verdict = "PASS"
			}
			s.put(i, "Scenarios", r.Name, "verdict", "", Neither, Value{Text: verdict})
			for _, v := range r.Verdicts {
				s.put(i, "Scenarios", r.Name, strings.TrimSpace(v.Metric+" "+v.Expr), "", Neither, exact(v.Got))
			}
		}
	}
	return s.list()
}
