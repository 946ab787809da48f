package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/espgw/espgw/internal/lab/bench"
)

// charts draws the bench and tunnel runs' figures, every run's paths in
// the same chart so that runs compare at a glance.
func (p *Page) charts() {
	var benches, tunnels []*Run
	for _, r := range p.Runs {
		switch {
		case r.Bench != nil:
			benches = append(benches, r)
		case r.Tunnels != nil:
			tunnels = append(tunnels, r)
		}
	}
	if len(benches) > 0 {
		p.Charts = append(p.Charts, zeroLossChart(benches), tcpChart(benches), latencyChart(benches), cpuChart(benches))
	}
	if len(tunnels) > 0 {
		p.Charts = append(p.Charts, tunnelChart(tunnels))
	}
}

// seriesName is a path's name in a chart, its run's label first when
// there are several runs.
func seriesName(runs []*Run, r *Run, name string) string {
	if len(runs) > 1 {
		return r.Label + ": " + name
	}
	return name
}

func nan(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = math.NaN()
	}
	return v
}

func zeroLossChart(runs []*Run) Chart {
	c := Chart{Title: "RFC 2544 zero-loss rate per frame size", XLabel: "frame size (bytes; IMIX: the mix)", YLabel: "zero-loss rate (kpkt/s, log)",
		Unit: "kpkt/s", LogY: true}
	for _, r := range runs {
		for _, res := range r.Bench.Results {
			for _, f := range res.Frames {
				if !slices.Contains(c.Categories, f.Mix) {
					c.Categories = append(c.Categories, f.Mix)
				}
			}
		}
	}
	for _, r := range runs {
		for _, res := range r.Bench.Results {
			s := Series{Name: seriesName(runs, r, res.Name), Values: nan(len(c.Categories)), Low: nan(len(c.Categories)), High: nan(len(c.Categories)),
				Dashed: res.Kind != bench.KindESP}
			for _, f := range res.Frames {
				i := slices.Index(c.Categories, f.Mix)
				s.Values[i] = f.ZeroLoss / 1e3
				if f.ZeroLossBound > f.ZeroLoss {
					s.Low[i], s.High[i] = f.ZeroLoss/1e3, f.ZeroLossBound/1e3
				}
			}
			c.Series = append(c.Series, s)
		}
	}
	return c
}

func tcpChart(runs []*Run) Chart {
	c := Chart{Title: "iperf3 TCP throughput per path (whiskers: the spread of repeated runs)", XLabel: "streams", YLabel: "throughput (Mbit/s, log)",
		Unit: "Mbit/s", LogY: true, Bars: true, Categories: []string{"TCP×1", "TCP×4"}}
	for _, r := range runs {
		for _, res := range r.Bench.Results {
			if res.TCP1 == 0 && res.TCP4 == 0 {
				continue
			}
			s := Series{Name: seriesName(runs, r, res.Name), Values: []float64{res.TCP1 / 1e6, res.TCP4 / 1e6}, Low: nan(2), High: nan(2)}
			for i, rs := range [][]float64{res.TCP1Runs, res.TCP4Runs} {
				if len(rs) > 1 {
					s.Low[i], s.High[i] = slices.Min(rs)/1e6, slices.Max(rs)/1e6
				}
			}
			c.Series = append(c.Series, s)
		}
	}
	return c
}

func latencyChart(runs []*Run) Chart {
	c := Chart{Title: "One-way latency percentiles at each load", XLabel: "percentile, at a load of a fraction of each path's own zero-loss rate",
		YLabel: "one-way latency (µs, log)", Unit: "µs", LogY: true, GroupSize: 3}
	var loads []float64
	for _, r := range runs {
		for _, res := range r.Bench.Results {
			for _, l := range res.Latency {
				if !slices.Contains(loads, l.Load) {
					loads = append(loads, l.Load)
				}
			}
		}
	}
	slices.Sort(loads)
	names := []string{"p50", "p99", "p99.9"}
	for _, l := range loads {
		c.Groups = append(c.Groups, fmt.Sprintf("%.0f%% load", l*100))
		c.Categories = append(c.Categories, names...)
	}
	for _, r := range runs {
		for _, res := range r.Bench.Results {
			if len(res.Latency) == 0 {
				continue
			}
			s := Series{Name: seriesName(runs, r, res.Name), Values: nan(len(c.Categories)), Dashed: res.Kind != bench.KindESP}
			for _, l := range res.Latency {
				i := slices.Index(loads, l.Load) * len(names)
				s.Values[i], s.Values[i+1], s.Values[i+2] = l.P50, l.P99, l.P999
			}
			c.Series = append(c.Series, s)
		}
	}
	return c
}

func cpuChart(runs []*Run) Chart {
	c := Chart{Title: "CPU per gateway over each path's whole run", XLabel: "gateway", YLabel: "CPU (% of one core)", Unit: "%", Bars: true}
	for _, r := range runs {
		for _, res := range r.Bench.Results {
			for _, g := range res.Gateways {
				if !slices.Contains(c.Categories, g.Name) {
					c.Categories = append(c.Categories, g.Name)
				}
			}
		}
	}
	for _, r := range runs {
		for _, res := range r.Bench.Results {
			if len(res.Gateways) == 0 {
				continue
			}
			s := Series{Name: seriesName(runs, r, res.Name), Values: nan(len(c.Categories))}
			for _, g := range res.Gateways {
				s.Values[slices.Index(c.Categories, g.Name)] = g.CPUPercent
			}
			c.Series = append(c.Series, s)
		}
	}
	return c
}

func tunnelChart(runs []*Run) Chart {
	c := Chart{Title: "Zero-loss rate of a load spread over every tunnel", XLabel: "tunnels", YLabel: "zero-loss rate (kpkt/s, log)", Unit: "kpkt/s", LogY: true}
	for _, r := range runs {
		for _, t := range r.Tunnels.Results {
			if n := fmt.Sprint(t.Tunnels); !slices.Contains(c.Categories, n) {
				c.Categories = append(c.Categories, n)
			}
		}
	}
	for _, r := range runs {
		s := Series{Name: seriesName(runs, r, fmt.Sprintf("%s on %s", r.Tunnels.Suite, r.Tunnels.Engine)), Values: nan(len(c.Categories)),
			Low: nan(len(c.Categories)), High: nan(len(c.Categories))}
		for _, t := range r.Tunnels.Results {
			i := slices.Index(c.Categories, fmt.Sprint(t.Tunnels))
			s.Values[i] = t.ZeroLoss / 1e3
			if t.ZeroLossBound > t.ZeroLoss {
				s.Low[i], s.High[i] = t.ZeroLoss/1e3, t.ZeroLossBound/1e3
			}
		}
		c.Series = append(c.Series, s)
	}
	return c
}
