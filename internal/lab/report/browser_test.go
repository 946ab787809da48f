package report

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/espgw/espgw/internal/lab/figures"
)

// browser starts Debian's chromium, headless, with a fresh profile and
// nothing it would fetch by itself.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("the page's browser test needs Debian's chromium on PATH (apt-get install -y chromium; scripts/packages.txt lists it)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true), chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	tctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTime(); cancel(); cancelAlloc() })
	if err := chromedp.Do(tctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return tctx
}

// artefacts is where the screenshots go: $ESPGW_ARTIFACTS, or the test's
// own folder.
func artefacts(t *testing.T) string {
	dir := os.Getenv("ESPGW_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// seen is what the browser found on a page.
type seen struct {
	Charts   []box             `json:"charts"`
	Figures  map[string]figure `json:"figures"`
	Changes  map[string]string `json:"changes"` // data-key|run → change
	Warnings int               `json:"warnings"`
	Width    float64           `json:"width"`
}

type box struct {
	Title  string  `json:"title"`
	W      float64 `json:"w"`
	H      float64 `json:"h"`
	Marks  int     `json:"marks"` // points and bars drawn with a non-empty box
	NoData bool    `json:"nodata"`
}

type figure struct {
	Value string `json:"value"`
	Text  string `json:"text"`
}

const inspect = `(() => {
  const out = {charts: [], figures: {}, changes: {}, warnings: document.querySelectorAll('[data-warning]').length,
    width: document.documentElement.scrollWidth};
  for (const svg of document.querySelectorAll('svg.chart')) {
    const r = svg.getBoundingClientRect();
    let marks = 0;
    for (const m of svg.querySelectorAll('.mark')) { const b = m.getBoundingClientRect(); if (b.width > 0 && b.height > 0) marks++; }
    out.charts.push({title: svg.getAttribute('aria-label'), w: r.width, h: r.height, marks: marks, nodata: !!svg.querySelector('.nodata')});
  }
  for (const e of document.querySelectorAll('[data-fig]')) {
    out.figures[e.dataset.fig] = {value: e.dataset.value, text: e.firstChild ? e.firstChild.textContent.trim() : ''};
  }
  for (const e of document.querySelectorAll('[data-change]')) { out.changes[e.dataset.key + '|' + e.dataset.run] = e.dataset.change; }
  return out;
})()`

// open renders runs into a page, loads it in the browser, keeps a
// screenshot of it as name.png and returns what the page shows. Any
// console error or exception fails the test.
func open(t *testing.T, ctx context.Context, name string, runs []*Run) seen {
	t.Helper()
	file := filepath.Join(t.TempDir(), name+".html")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(f, runs, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	tab, cancel := chromedp.NewContext(ctx)
	defer cancel()
	var mu sync.Mutex
	var problems []string
	err = chromedp.Listen(tab, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				problems = append(problems, fmt.Sprintf("console %s", ev.Type))
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+ev.ExceptionDetails.Text)
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError || ev.Entry.Level == log.EntryLevelWarning {
				problems = append(problems, fmt.Sprintf("%s: %s (%s)", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	if err != nil {
		t.Fatalf("%s: listen to the tab: %v", name, err)
	}
	if err := chromedp.Do(tab, chromedp.Navigate("file://"+file), chromedp.WaitReady("body")); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	s, err := chromedp.Run(tab, chromedp.Evaluate[seen](inspect))
	if err != nil {
		t.Fatalf("%s: inspect the page: %v", name, err)
	}
	shot, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("%s: screenshot: %v", name, err)
	}
	dir := artefacts(t)
	if err := os.WriteFile(filepath.Join(dir, name+".png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: screenshot %s", name, filepath.Join(dir, name+".png"))
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("%s: the browser reported %q", name, problems)
	}
	return s
}

// checkCharts wants every chart drawn, with marks unless it says it has
// no data.
func checkCharts(t *testing.T, name string, s seen, want int) {
	t.Helper()
	if len(s.Charts) != want {
		t.Errorf("%s: %d charts, want %d", name, len(s.Charts), want)
	}
	for _, c := range s.Charts {
		if c.W < 100 || c.H < 100 || c.Marks == 0 && !c.NoData {
			t.Errorf("%s: chart %q drawn %v×%v with %d marks", name, c.Title, c.W, c.H, c.Marks)
		}
		if c.NoData {
			t.Errorf("%s: chart %q has no data, though its runs have", name, c.Title)
		}
	}
}

// jsonBench is the part of a bench report the test reads itself, apart
// from the package's types.
type jsonBench struct {
	Results []struct {
		Name   string  `json:"name"`
		TCP1   float64 `json:"tcp1_bps"`
		TCP4   float64 `json:"tcp4_bps"`
		Frames []struct {
			Mix      string  `json:"mix"`
			ZeroLoss float64 `json:"zero_loss_pps"`
		} `json:"frames"`
		Latency []struct {
			Load float64 `json:"load"`
			P50  float64 `json:"p50_us"`
			P99  float64 `json:"p99_us"`
		} `json:"latency"`
		Gateways []struct {
			Name string  `json:"name"`
			CPU  float64 `json:"cpu_percent"`
		} `json:"gateways"`
	} `json:"results"`
}

// checkFigures wants every figure of the JSON file in the page under run
// label, exact in its data and as Number shows it.
func checkFigures(t *testing.T, s seen, label, file string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var j jsonBench
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	n := 0
	want := func(key string, v, scale float64) {
		n++
		got, ok := s.Figures[label+"|"+key]
		if !ok {
			t.Errorf("%s: figure %s is not on the page", file, key)
			return
		}
		if pv, err := strconv.ParseFloat(got.Value, 64); err != nil || pv != v {
			t.Errorf("%s: figure %s is %q in the page, %v in the JSON", file, key, got.Value, v)
		}
		if got.Text != figures.Number(v/scale) {
			t.Errorf("%s: figure %s reads %q, want %q", file, key, got.Text, figures.Number(v/scale))
		}
	}
	for _, r := range j.Results {
		want(r.Name+"|tcp1", r.TCP1, 1e6)
		want(r.Name+"|tcp4", r.TCP4, 1e6)
		for _, f := range r.Frames {
			want(r.Name+"|zl-"+f.Mix, f.ZeroLoss, 1e3)
		}
		for _, l := range r.Latency {
			pct := figures.Number(l.Load*100) + "%"
			want(r.Name+"|p50-"+pct, l.P50, 1)
			want(r.Name+"|p99-"+pct, l.P99, 1)
		}
		for _, g := range r.Gateways {
			want(r.Name+"|cpu-"+g.Name, g.CPU, 1)
		}
	}
	if n < 10 {
		t.Errorf("%s: only %d figures checked", file, n)
	}
}

func TestPagesInBrowser(t *testing.T) {
	ctx := browser(t)

	one := open(t, ctx, "bench", load(t, "bench-cpu.json"))
	checkCharts(t, "bench", one, 4)
	checkFigures(t, one, "A", "bench-cpu.json")
	if one.Width > 1300 {
		t.Errorf("bench: the page is %v px wide in a 1280 px window", one.Width)
	}

	all := load(t, "bench-cpu.json", "bench-aesni.json", "tunnels.json", "scenarios.json", "demo.json")
	cmp := open(t, ctx, "compare", all)
	checkCharts(t, "compare", cmp, 5)
	checkFigures(t, cmp, "A", "bench-cpu.json")
	checkFigures(t, cmp, "B", "bench-aesni.json")
	if cmp.Warnings != 0 {
		t.Errorf("compare: %d warnings, for runs of one machine", cmp.Warnings)
	}

	a := load(t, "bench-cpu.json")[0]
	same := open(t, ctx, "equal-pair", []*Run{a, load(t, "bench-cpu.json")[0]})
	for k, c := range same.Changes {
		if c == string(Regression) || c == string(Improvement) {
			t.Errorf("equal pair: %s flagged %s", k, c)
		}
	}
	if len(same.Changes) == 0 {
		t.Error("equal pair: no comparison cells on the page")
	}

	p := planted(t, a)
	var esp string
	for _, r := range p.Bench.Results {
		if r.Kind == "espgw" {
			esp = r.Name
			break
		}
	}
	p.Bench.Machine.Host = "another-host"
	bad := open(t, ctx, "planted-regression", []*Run{a, p})
	for _, m := range []string{"TCP×1", "64 B", "512 B", "1400 B", "imix B"} {
		key := "%s|" + esp + "|" + m + "|B"
		section := "TCP throughput"
		if m != "TCP×1" {
			section = "Zero-loss rate"
		}
		if got := bad.Changes[fmt.Sprintf(key, section)]; got != string(Regression) {
			t.Errorf("planted regression: %s on %s shows %q, want %q", m, esp, got, Regression)
		}
	}
	if got := bad.Changes["TCP throughput|"+esp+"|TCP×4|B"]; got == string(Regression) || got == string(Improvement) {
		t.Errorf("planted regression: TCP×4, left as it was, flagged %s", got)
	}
	if bad.Warnings != 1 {
		t.Errorf("runs of two machines: %d warnings, want 1", bad.Warnings)
	}

	scen := open(t, ctx, "scenarios", load(t, "scenarios.json", "demo.json"))
	if len(scen.Charts) != 0 {
		t.Errorf("scenarios: %d charts, want none", len(scen.Charts))
	}
	if !strings.HasPrefix(esp, "espgw") {
		t.Fatalf("no espgw path in the fixture: %q", esp)
	}
}
