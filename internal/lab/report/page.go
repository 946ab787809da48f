package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/bench"
	"github.com/espgw/espgw/internal/lab/figures"
	"github.com/espgw/espgw/internal/lab/scenario"
)

//go:embed page.html.tmpl
var pageTemplate string

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"num":     figures.Number,
	"raw":     raw,
	"mbps":    func(bps float64) string { return figures.Number(bps / 1e6) },
	"kpps":    func(pps float64) string { return figures.Number(pps / 1e3) },
	"mib":     func(b uint64) string { return figures.Number(float64(b) / (1 << 20)) },
	"pct":     func(f float64) string { return figures.Number(f*100) + "%" },
	"secs":    func(d time.Duration) string { return figures.Number(d.Seconds()) + " s" },
	"count":   func(n uint64) string { return fmt.Sprint(n) },
	"drops":   dropReasons,
	"lost":    func(sent, recv uint64) uint64 { return sent - min(sent, recv) },
	"join":    strings.Join,
	"spread":  spreadText,
	"ratio":   func(f float64) string { return figures.Number(f) + "×" },
	"isnan":   math.IsNaN,
	"balance": func(b scenario.Balance) bool { return b.In == b.Out },
}).Parse(pageTemplate))

// Page is what the template draws.
type Page struct {
	Title     string
	Generated string
	Runs      []*Run
	Machines  []MachineRow
	Warnings  []string
	Verdicts  []Verdict
	Compared  []Comparison
	Charts    []Chart
}

// MachineRow is one property of every run's machine.
type MachineRow struct {
	Name   string
	Values []string
}

// Verdict is one line of the page's summary.
type Verdict struct {
	Run  string
	Text string
	Pass bool
}

// Comparison is one kind of run side by side: its runs and their figures
// in sections.
type Comparison struct {
	Kind     string
	Runs     []*Run
	Sections []Section
	Changes  []Flagged
}

// Section is figures under one heading.
type Section struct {
	Name    string
	Figures []FigureRow
}

// FigureRow is a figure with each run's cell.
type FigureRow struct {
	Figure
	Cells []Cell
}

// Cell is one run's value of a figure, its ratio to the first run and
// what the comparison made of it.
type Cell struct {
	Run    string
	Value  Value
	Ratio  float64
	Change Change
	Class  string
}

// Flagged is a regression or an improvement, for the summary.
type Flagged struct {
	Run    string
	Figure string
	Change Change
	Ratio  float64
}

// Write renders the runs as one HTML page.
func Write(w io.Writer, runs []*Run, generated time.Time) error {
	if len(runs) == 0 {
		return fmt.Errorf("report: no runs to show")
	}
	p := Page{Title: title(runs), Generated: generated.UTC().Format(time.RFC3339), Runs: runs}
	p.machines()
	p.verdicts()
	p.compare()
	p.charts()
	if err := page.Execute(w, p); err != nil {
		return fmt.Errorf("report: render: %w", err)
	}
	return nil
}

func title(runs []*Run) string {
	var kinds []string
	for _, r := range runs {
		if !slices.Contains(kinds, r.Kind) {
			kinds = append(kinds, r.Kind)
		}
	}
	t := "espgw " + strings.Join(kinds, ", ") + " report"
	if len(runs) > 1 {
		t += fmt.Sprintf(": %d runs compared", len(runs))
	}
	return t
}

func (p *Page) machines() {
	rows := []MachineRow{{Name: "file"}, {Name: "kind"}, {Name: "started"}, {Name: "command"}, {Name: "host"}, {Name: "kernel"},
		{Name: "CPU model"}, {Name: "CPUs"}, {Name: "engine"}, {Name: "load average"}, {Name: "espgw version"}, {Name: "Go"}}
	first := p.Runs[0].Machine()
	for _, r := range p.Runs {
		m := r.Machine()
		started, command := "", ""
		switch {
		case r.Bench != nil:
			started, command = r.Bench.Started.UTC().Format(time.RFC3339), r.Bench.Command
		case r.Tunnels != nil:
			started, command = r.Tunnels.Started.UTC().Format(time.RFC3339), r.Tunnels.Command
		case r.IKE != nil:
			started, command = r.IKE.Started.UTC().Format(time.RFC3339), r.IKE.Command
		}
		cpus := ""
		if m.CPUs > 0 {
			cpus = fmt.Sprint(m.CPUs)
		}
		for i, v := range []string{r.File, r.Kind, started, command, m.Host, m.Kernel, m.CPU, cpus, strings.Join(engines(r), ", "), m.LoadAvg, m.Version, m.Go} {
			rows[i].Values = append(rows[i].Values, cmpOr(v, "–"))
		}
		switch {
		case m.Host == "":
			p.Warnings = append(p.Warnings, fmt.Sprintf("run %s (%s) does not record its machine: it cannot be told whether it is comparable", r.Label, r.File))
		case r != p.Runs[0] && first.Host != "" && !m.SameMachine(first):
			p.Warnings = append(p.Warnings, fmt.Sprintf("run %s (%s) ran on another machine than run A (%s, %s, %d CPUs against %s, %s, %d CPUs): differences may be the machines'",
				r.Label, r.File, m.Host, m.CPU, m.CPUs, first.Host, first.CPU, first.CPUs))
		}
	}
	p.Machines = rows
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// engines are the offload engines a run used.
func engines(r *Run) []string {
	var out []string
	add := func(e string) {
		if e != "" && !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	switch {
	case r.Bench != nil:
		for _, x := range r.Bench.Results {
			add(x.Engine)
		}
	case r.Tunnels != nil:
		add(r.Tunnels.Engine)
	case r.Scenario != nil:
		for _, x := range r.Scenario.Results {
			for _, g := range x.Gateways {
				add(g.Engine.Name)
			}
		}
	case r.Demo != nil:
		add(r.Demo.Engine)
	}
	return out
}

func (p *Page) verdicts() {
	for _, r := range p.Runs {
		v := func(text string, pass bool) {
			p.Verdicts = append(p.Verdicts, Verdict{Run: r.Label, Text: text, Pass: pass})
		}
		switch {
		case r.Bench != nil:
			if r.Bench.Partial {
				v("partial: the run was interrupted", false)
			}
			for _, t := range r.Bench.Targets {
				m, want := figures.Number(t.Measured)+"×", "≥ "+figures.Number(t.Want)+"×"
				if t.Unit == "us" {
					m, want = figures.Number(t.Measured)+" µs", "≤ "+figures.Number(t.Want)+" µs"
				}
				v(fmt.Sprintf("%s: %s — %s, want %s", t.Path, t.Target, m, want), t.Pass)
			}
			for _, pr := range r.Bench.Problems {
				v(pr, false)
			}
			if len(r.Bench.Targets) == 0 && len(r.Bench.Problems) == 0 && !r.Bench.Partial {
				v(fmt.Sprintf("%d paths measured, none failed (no targets apply without a baseline)", len(r.Bench.Results)), true)
			}
		case r.Tunnels != nil:
			for _, pr := range r.Tunnels.Problems {
				v(pr, false)
			}
			if r.Tunnels.Partial {
				v("partial: the run was interrupted", false)
			}
			if len(r.Tunnels.Problems) == 0 && !r.Tunnels.Partial {
				v(fmt.Sprintf("%d tunnel counts measured, none failed", len(r.Tunnels.Results)), true)
			}
		case r.IKE != nil:
			for _, pr := range r.IKE.Problems {
				v(pr, false)
			}
			if r.IKE.Partial {
				v("partial: the run was interrupted", false)
			}
			if len(r.IKE.Problems) == 0 && !r.IKE.Partial {
				v(fmt.Sprintf("%d initiator/responder pairs measured, every tunnel established and rekeyed", len(r.IKE.Results)), true)
			}
		case r.Scenario != nil:
			for _, s := range r.Scenario.Results {
				text := s.Name + ": PASS"
				if !s.Pass {
					text = s.Name + ": FAIL"
					if s.Error != "" {
						text += " — " + s.Error
					}
				}
				v(text, s.Pass)
			}
		case r.Demo != nil:
			if r.Demo.OK() {
				v("everything sent came out, tshark decrypted every ESP packet with a good ICV", true)
			}
			for _, pr := range r.Demo.Problems {
				v(pr, false)
			}
		}
	}
}

// compare puts the runs of each kind side by side.
func (p *Page) compare() {
	byKind := map[string][]*Run{}
	var kinds []string
	for _, r := range p.Runs {
		if byKind[r.Kind] == nil {
			kinds = append(kinds, r.Kind)
		}
		byKind[r.Kind] = append(byKind[r.Kind], r)
	}
	for _, k := range kinds {
		runs := byKind[k]
		if len(runs) < 2 || k == KindDemo {
			continue
		}
		var figs []Figure
		switch k {
		case KindBench:
			var reps []*bench.Report
			for _, r := range runs {
				reps = append(reps, r.Bench)
			}
			figs = BenchFigures(reps)
		case KindTunnels:
			var reps []*bench.TunnelReport
			for _, r := range runs {
				reps = append(reps, r.Tunnels)
			}
			figs = TunnelFigures(reps)
		case KindIKE:
			var reps []*bench.IKEReport
			for _, r := range runs {
				reps = append(reps, r.IKE)
			}
			figs = IKEFigures(reps)
		case KindScenario:
			var reps [][]*scenario.Result
			for _, r := range runs {
				reps = append(reps, r.Scenario.Results)
			}
			figs = ScenarioFigures(reps)
		}
		p.Compared = append(p.Compared, comparison(k, runs, figs))
	}
}

func comparison(kind string, runs []*Run, figs []Figure) Comparison {
	c := Comparison{Kind: kind, Runs: runs}
	for _, f := range figs {
		if len(c.Sections) == 0 || c.Sections[len(c.Sections)-1].Name != f.Section {
			c.Sections = append(c.Sections, Section{Name: f.Section})
		}
		row := FigureRow{Figure: f}
		for i, r := range runs {
			ch := f.Judge(i)
			cell := Cell{Run: r.Label, Value: f.Values[i], Ratio: f.Ratio(i), Change: ch, Class: strings.ReplaceAll(string(ch), " ", "-")}
			if ch == Regression || ch == Improvement {
				c.Changes = append(c.Changes, Flagged{Run: r.Label, Figure: f.Row + ", " + f.Measure, Change: ch, Ratio: cell.Ratio})
			}
			row.Cells = append(row.Cells, cell)
		}
		s := &c.Sections[len(c.Sections)-1]
		s.Figures = append(s.Figures, row)
	}
	return c
}

// spreadText is a value's recorded spread, for its cell.
func spreadText(v Value) string {
	if !v.Spread || (v.Lo == v.V && v.Hi == v.V) {
		return ""
	}
	if math.IsInf(v.Hi, 1) {
		return "≥ " + figures.Number(v.Lo) + ", the probe's limit"
	}
	return figures.Number(v.Lo) + " … " + figures.Number(v.Hi)
}

// dropReasons are a gateway's drops, its own and its SAs', by reason.
func dropReasons(g gateway.Stats) map[string]uint64 {
	out := maps.Clone(g.Drops)
	if out == nil {
		out = map[string]uint64{}
	}
	for _, s := range g.SAs {
		for k, n := range s.Drops {
			out[k] += n
		}
	}
	return out
}
