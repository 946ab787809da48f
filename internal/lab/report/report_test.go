package report

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/bench"
	"github.com/espgw/espgw/internal/lab/scenario"
)

func TestChartSVG(t *testing.T) {
	for _, c := range []struct {
		name  string
		chart Chart
		want  []string
		not   []string
	}{
		{"no data", Chart{Title: "t", LogY: true, Categories: []string{"64"}, Series: []Series{{Name: "s", Values: []float64{0}}}},
			[]string{"no data"}, []string{"<circle"}},
		{"log line", Chart{Title: "t", LogY: true, Unit: "kpkt/s", Categories: []string{"64", "512"},
			Series: []Series{{Name: "espgw", Values: []float64{55, 240}}}},
			[]string{`<title>espgw, 64: 55 kpkt/s</title>`, `<title>espgw, 512: 240 kpkt/s</title>`, `>10</text>`, `>100</text>`, `>1k</text>`, "<polyline"},
			[]string{"no data", "e+"}},
		{"bars with whiskers", Chart{Title: "t", Bars: true, Unit: "Mbit/s", Categories: []string{"TCP×1"},
			Series: []Series{{Name: "a", Values: []float64{480}, Low: []float64{360}, High: []float64{581}}}},
			[]string{`<rect class="mark"`, `(runs 360 … 581)`, `class="whisker"`}, []string{"<polyline"}},
		{"groups break lines", Chart{Title: "t", GroupSize: 2, Groups: []string{"10% load", "50% load"}, Categories: []string{"p50", "p99", "p50", "p99"},
			Series: []Series{{Name: "a", Values: []float64{1, 2, 3, 4}}}},
			[]string{">10% load</text>", "<title>a, 50% load p99: 4</title>"}, nil},
	} {
		svg := string(c.chart.SVG())
		for _, w := range c.want {
			if !strings.Contains(svg, w) {
				t.Errorf("%s: the SVG lacks %q:\n%s", c.name, w, svg)
			}
		}
		for _, w := range c.not {
			if strings.Contains(svg, w) {
				t.Errorf("%s: the SVG has %q", c.name, w)
			}
		}
		if c.name == "groups break lines" && strings.Count(svg, "<polyline") != 2 {
			t.Errorf("%s: %d lines, want one per group", c.name, strings.Count(svg, "<polyline"))
		}
	}
}

func TestJudge(t *testing.T) {
	r := func(v, lo, hi float64) Value { return Value{Has: true, V: v, Spread: true, Lo: lo, Hi: hi} }
	for _, c := range []struct {
		name   string
		better Better
		a, b   Value
		want   Change
	}{
		{"overlapping spreads", Higher, r(100, 90, 110), r(95, 85, 105), Within},
		{"lower beyond the spread", Higher, r(100, 90, 110), r(50, 45, 55), Regression},
		{"higher beyond the spread", Higher, r(100, 90, 110), r(150, 140, 160), Improvement},
		{"latency down is better", Lower, r(100, 90, 110), r(50, 45, 55), Improvement},
		{"latency up is worse", Lower, r(100, 90, 110), r(150, 140, 160), Regression},
		{"no spread in one run", Higher, r(100, 90, 110), Value{Has: true, V: 10}, Unjudged},
		{"equal", Higher, r(100, 90, 110), r(100, 90, 110), Within},
		{"probe-limited reference, then loss below it", Higher, r(100, 100, math.Inf(1)), r(50, 50, 60), Regression},
		{"probe-limited both", Higher, r(100, 100, math.Inf(1)), r(150, 150, math.Inf(1)), Within},
		{"a count is not judged", Neither, r(1, 1, 1), r(9, 9, 9), NoChange},
		{"missing in the later run", Higher, r(1, 1, 1), Value{}, NoChange},
		{"scenario failed", Neither, Value{Has: true, Text: "PASS"}, Value{Has: true, Text: "FAIL"}, Regression},
		{"scenario fixed", Neither, Value{Has: true, Text: "FAIL"}, Value{Has: true, Text: "PASS"}, Improvement},
		{"scenario passes in both", Neither, Value{Has: true, Text: "PASS"}, Value{Has: true, Text: "PASS"}, NoChange},
	} {
		f := Figure{Better: c.better, Values: []Value{c.a, c.b}}
		if got := f.Judge(1); got != c.want {
			t.Errorf("%s: Judge = %q, want %q", c.name, got, c.want)
		}
	}
}

func load(t *testing.T, files ...string) []*Run {
	t.Helper()
	var paths []string
	for _, f := range files {
		paths = append(paths, filepath.Join("testdata", f))
	}
	runs, err := Load(paths...)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

func TestParseKinds(t *testing.T) {
	for _, c := range []struct{ file, kind string }{
		{"bench-cpu.json", KindBench}, {"tunnels.json", KindTunnels}, {"ike.json", KindIKE}, {"scenarios.json", KindScenario},
	} {
		if r := load(t, c.file)[0]; r.Kind != c.kind {
			t.Errorf("%s: kind %s, want %s", c.file, r.Kind, c.kind)
		}
	}
	for _, c := range []struct{ in, want string }{
		{`[1]`, "not a JSON object"},
		{`{"x": 1}`, `no "results"`},
		{`{"results": 3}`, "not a list of objects"},
		{`{"results": [{"x": 1}]}`, "neither bench paths"},
		{`{"results": [{"verdicts": 7}]}`, "as a scenario report"},
	} {
		if _, err := Parse([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s) = %v, want an error saying %q", c.in, err, c.want)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("a missing file: %v, want an error naming it", err)
	}
}

// planted is run's first espgw path made worse: TCP halved in every
// repeat, every zero-loss rate and its bound halved.
func planted(t *testing.T, r *Run) *Run {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", r.File))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	c.File, c.Label = "planted-"+r.File, "B"
	for _, res := range c.Bench.Results {
		if res.Kind != bench.KindESP {
			continue
		}
		res.TCP1 /= 2
		for i := range res.TCP1Runs {
			res.TCP1Runs[i] /= 2
		}
		for i := range res.Frames {
			res.Frames[i].ZeroLoss /= 2
			res.Frames[i].ZeroLossBound /= 2
		}
		break
	}
	return c
}

func TestComparisonFlagsOnlyChangesBeyondSpread(t *testing.T) {
	a := load(t, "bench-cpu.json")[0]
	same := load(t, "bench-cpu.json", "bench-cpu.json")
	p := Page{Runs: same}
	p.compare()
	if len(p.Compared) != 1 || len(p.Compared[0].Changes) != 0 {
		t.Fatalf("a run against itself: %+v, want one comparison with no change", p.Compared)
	}
	p = Page{Runs: []*Run{a, planted(t, a)}}
	p.compare()
	var got []string
	for _, c := range p.Compared[0].Changes {
		got = append(got, c.Figure+" "+string(c.Change))
	}
	for _, want := range []string{"TCP×1 regression", "64 B regression", "512 B regression", "1400 B regression", "imix B regression"} {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasSuffix(g, want) && strings.HasPrefix(g, "espgw") }) {
			t.Errorf("planted regression %q not flagged; flagged: %q", want, got)
		}
	}
	for _, g := range got {
		if !strings.HasPrefix(g, "espgw") || strings.Contains(g, "TCP×4") {
			t.Errorf("flagged %q, which was not changed", g)
		}
	}
}

func TestWriteShowsEveryKind(t *testing.T) {
	runs := load(t, "bench-cpu.json", "bench-aesni.json", "tunnels.json", "ike.json", "ike-b.json", "scenarios.json")
	var b bytes.Buffer
	if err := Write(&b, runs, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		"Verdicts", "Runs and machines", "bench runs side by side", "RFC 2544 zero-loss rate per frame size",
		"iperf3 TCP throughput per path", "One-way latency percentiles", "CPU per gateway", "Zero-loss rate of a load spread over every tunnel",
		"max queue", "conservation", "drops by reason", runs[0].Bench.Machine.CPU, runs[0].Bench.Machine.Kernel,
		"IKE tunnel setup: 20 tunnels per pair", "charon → espgw", "espgw responder ÷ charon responder", "ike runs side by side",
		"initiator/responder pairs measured",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script") {
		t.Error("the page has a script: it should need none")
	}
	if strings.Contains(page, "http://") && !strings.Contains(page, `xmlns="http://www.w3.org/2000/svg"`) || strings.Contains(page, "https://") {
		t.Error("the page links outside itself")
	}
	if err := Write(&b, nil, time.Now()); err == nil {
		t.Error("Write with no runs: no error")
	}
}

func TestWarnsOfOtherMachines(t *testing.T) {
	runs := load(t, "bench-cpu.json", "bench-aesni.json")
	p := Page{Runs: runs}
	p.machines()
	if len(p.Warnings) != 0 {
		t.Fatalf("one machine: warnings %q", p.Warnings)
	}
	runs[1].Bench.Machine.Host = "elsewhere"
	p = Page{Runs: runs}
	p.machines()
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "another machine") {
		t.Fatalf("two machines: warnings %q, want one", p.Warnings)
	}
}

func TestScenarioComparison(t *testing.T) {
	runs := load(t, "scenarios.json", "scenarios.json")
	broken := *runs[1].Scenario.Results[0]
	broken.Pass = false
	broken.Verdicts = slices.Clone(broken.Verdicts)
	broken.Verdicts[0].Got++
	runs[1].Scenario.Results = append([]*scenario.Result{&broken}, runs[1].Scenario.Results[1:]...)
	p := Page{Runs: runs}
	p.compare()
	if len(p.Compared) != 1 {
		t.Fatalf("%d comparisons, want 1", len(p.Compared))
	}
	changes := p.Compared[0].Changes
	if len(changes) != 1 || changes[0].Change != Regression || !strings.HasPrefix(changes[0].Figure, broken.Name+", verdict") {
		t.Fatalf("a scenario that passed, then failed: changes %+v, want one regression of its verdict", changes)
	}
}
