package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/strongswan"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// TestMain removes the espgw command the tests built.
func TestMain(m *testing.M) { labtest.Main(m) }

// shortOptions is a real bench cut to seconds: one espgw configuration
// beside plain routing, two frame sizes, few and short trials.
func shortOptions(bin, prefix string) Options {
	frames, _ := ParseMixes("64,imix")
	return Options{Binary: bin, Prefix: prefix, Suites: []string{"aes-gcm-16"}, Engines: []string{"cpu"},
		TCPDuration: time.Second, TrialDuration: 300 * time.Millisecond, Iterations: 4, PartialIters: 1,
		Frames: frames, LatencyFrame: 512, LatencyLoads: []float64{0.1, 0.5}, LatencyTime: 500 * time.Millisecond}
}

func requireBench(t *testing.T, o Options) {
	t.Helper()
	if err := Check(o); err != nil {
		t.Fatalf("this test runs a real bench in network namespaces and cannot here: %v", err)
	}
}

func noLeftovers(t *testing.T, prefix string) {
	t.Helper()
	left, err := netns.List(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		netns.RemoveLeftovers(prefix)
		t.Errorf("namespaces left behind: %v", left)
	}
}

func TestShortRealBench(t *testing.T) {
	o := shortOptions(labtest.Espgw(t), "bnt")
	requireBench(t, o)
	o.TCPRuns, o.Retries, o.ProfileDir = 2, 1, t.TempDir()
	var steps, last int
	o.Progress = func(_ string, done, total int) {
		steps++
		if done < last || (total > 0 && done > total) {
			t.Errorf("progress went %d → %d of %d", last, done, total)
		}
		last = done
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { noLeftovers(t, "bnt") })
	if rep.Partial || len(rep.Problems) > 0 {
		t.Fatalf("partial %v, problems %v", rep.Partial, rep.Problems)
	}
	if len(rep.Results) != 2 || rep.Results[0].Kind != KindPlain || rep.Results[1].Kind != KindESP {
		t.Fatalf("results %v, want plain then espgw", rep.Results)
	}
	for _, r := range rep.Results {
		if r.TCP1 <= 0 || r.TCP4 <= 0 {
			t.Errorf("%s: TCP %g / %g bit/s", r.Name, r.TCP1, r.TCP4)
		}
		if len(r.TCP1Runs) != 2 || len(r.TCP4Runs) != 2 || r.TCP1 != median(r.TCP1Runs) {
			t.Errorf("%s: TCP×1 %g of runs %v, TCP×4 runs %v: want the median of two runs each", r.Name, r.TCP1, r.TCP1Runs, r.TCP4Runs)
		}
		for _, f := range r.Frames {
			if f.ZeroLoss <= 0 || f.Partial < f.ZeroLoss || f.Offered <= 0 || len(f.Trials) == 0 {
				t.Errorf("%s %s: offered %g zero-loss %g partial %g after %d trials", r.Name, f.Mix, f.Offered, f.ZeroLoss, f.Partial, len(f.Trials))
			}
			// A lossy trial is repeated before its rate counts as lossy,
			// so the zero-loss rate is one at which some trial lost nothing.
			passed := false
			for _, a := range f.Trials {
				passed = passed || a.Rate == f.ZeroLoss && a.Loss == 0
			}
			if !passed {
				t.Errorf("%s %s: no trial at the zero-loss rate %g lost nothing: %+v", r.Name, f.Mix, f.ZeroLoss, f.Trials)
			}
		}
		if len(r.Latency) != 2 {
			t.Fatalf("%s: %d latency loads, want 2", r.Name, len(r.Latency))
		}
		for _, l := range r.Latency {
			if l.Received == 0 || !(0 < l.P50 && l.P50 <= l.P99 && l.P99 <= l.P999) || len(l.CDF) == 0 {
				t.Errorf("%s at %.0f%%: received %d, p50 %g p99 %g p99.9 %g", r.Name, l.Load*100, l.Received, l.P50, l.P99, l.P999)
			}
		}
	}
	esp := rep.Results[1]
	if len(esp.Gateways) != 2 {
		t.Fatalf("espgw gateways accounted: %+v", esp.Gateways)
	}
	for _, g := range esp.Gateways {
		if g.CPUSeconds <= 0 || g.HWM == 0 || g.Engine != "cpu" {
			t.Errorf("gateway %s: cpu %gs peak RSS %d engine %q", g.Name, g.CPUSeconds, g.HWM, g.Engine)
		}
	}
	if len(rep.Ratios) == 0 || len(rep.Targets) != 1 {
		t.Errorf("ratios %v, targets %v: want ratios to plain and the latency target", rep.Ratios, rep.Targets)
	}
	if steps == 0 || last != len(rep.Results)*o.stepsPerPath() {
		t.Errorf("progress ended at %d of %d after %d calls", last, len(rep.Results)*o.stepsPerPath(), steps)
	}
	// Profiles of both gateways, during TCP and the first frame's search.
	for _, what := range []string{"tcp1", "udp64"} {
		for _, gw := range []string{"gw1", "gw2"} {
			file := filepath.Join(o.ProfileDir, testbed.FileName(esp.Name)+"-"+gw+"-"+what+".pprof")
			if fi, err := os.Stat(file); err != nil || fi.Size() == 0 {
				t.Errorf("profile %s: %v", file, err)
			}
		}
	}
	dir := t.TempDir()
	if _, err := WriteCharts(dir, rep); err != nil {
		t.Error(err)
	}
	rep.Print(os.Stdout)
}

func TestBenchInterruptedGivesPartialResultsAndCleansUp(t *testing.T) {
	o := shortOptions(labtest.Espgw(t), "bnc")
	requireBench(t, o)
	o.TCPDuration = 2 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	// Interrupt in plain routing's UDP searches, after its TCP runs.
	time.AfterFunc(5*time.Second, cancel)
	start := time.Now()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("took %v to stop after the interrupt at 5s", took)
	}
	if !rep.Partial || len(rep.Results) != 1 {
		t.Fatalf("partial %v with %d results, want a partial report of plain routing", rep.Partial, len(rep.Results))
	}
	if r := rep.Results[0]; r.TCP1 <= 0 {
		t.Errorf("the TCP result measured before the interrupt is lost: %+v", r)
	}
	noLeftovers(t, "bnc")
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %g, want %g", tc.in, got, tc.want)
		}
	}
}

// TestIKETunnels sets up a few tunnels for real for every pair of
// initiator and responder among espgw and charon, in namespaces, and
// rekeys each CHILD_SA of the espgw initiator; then an espgw gateway
// pair negotiates its own tunnels and rekeys them under load.
func TestIKETunnels(t *testing.T) {
	o := IKEOptions{Prefix: "bik", Tunnels: 3, Parallel: 2, GatewayTunnels: 3, Binary: labtest.Espgw(t), Timeout: 2 * time.Minute}
	if err := CheckIKE(o); err != nil {
		t.Fatalf("this test sets up IKE tunnels in network namespaces and cannot here: %v", err)
	}
	defer noLeftovers(t, o.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := RunIKE(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	rep.Print(&out)
	t.Log("\n" + out.String())
	if len(rep.Problems) > 0 || rep.Partial {
		t.Fatalf("problems: %v (partial %v)", rep.Problems, rep.Partial)
	}
	sides := 1
	if strongswan.CheckInstalled() == nil {
		sides = 2
	}
	if len(rep.Results) != sides*sides {
		t.Fatalf("%d pairs measured, want %d", len(rep.Results), sides*sides)
	}
	for _, r := range rep.Results {
		if r.Established != o.Tunnels || r.Failed != 0 || r.PerSec <= 0 {
			t.Errorf("%s → %s: %d established, %d failed, %.1f/s; want %d, 0, > 0", r.Initiator, r.Responder, r.Established, r.Failed, r.PerSec, o.Tunnels)
		}
		if r.Initiator == SideEspgw && (r.Rekeys != o.Tunnels || r.RekeysPerSec <= 0) {
			t.Errorf("%s → %s: %d CHILD_SAs rekeyed, %.1f/s; want %d", r.Initiator, r.Responder, r.Rekeys, r.RekeysPerSec, o.Tunnels)
		}
	}
	if want := map[int]int{1: 0, 2: 5}[sides]; len(rep.Ratios) < want {
		t.Errorf("%d ratios, want %d: %+v", len(rep.Ratios), want, rep.Ratios)
	}
	if g := rep.Gateways; g == nil || g.Rekeys < uint64(o.GatewayTunnels) || g.RekeySent == 0 || g.RekeyLost != 0 || g.UpSeconds <= 0 || g.TrafficSeconds < g.UpSeconds {
		t.Errorf("gateway pair: %+v; want every tunnel up, carrying traffic and rekeyed with 0 lost", g)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back IKEReport
	if err := json.Unmarshal(b, &back); err != nil || back.IKETunnels != o.Tunnels || len(back.Results) != len(rep.Results) {
		t.Errorf("JSON round trip: %v, %+v", err, back)
	}
}

// TestIKEGatewayRekeyUnderLoad has the espgw gateway pair negotiate
// enough tunnels (1000) that its IKE daemon's work shows, then rekey
// every CHILD_SA under traffic: not a packet of the load may be lost (a
// policy gap, an outbound switch before the peer's inbound SA, a TUN not
// read in time), none dropped for want of an inbound SA. The few
// no-policy drops of each gateway are the kernel's own packets into its
// TUN at start, outside the load.
func TestIKEGatewayRekeyUnderLoad(t *testing.T) {
	o := IKEOptions{Prefix: "bikr", Tunnels: 1, Parallel: 1, Sides: []string{SideEspgw}, GatewayTunnels: 1000,
		Binary: labtest.Espgw(t), Timeout: 4 * time.Minute}
	if err := CheckIKE(o); err != nil {
		t.Fatalf("this test sets up IKE tunnels in network namespaces and cannot here: %v", err)
	}
	defer noLeftovers(t, o.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := RunIKE(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	g := rep.Gateways
	if g == nil {
		t.Fatalf("no gateway pair measured: %v", rep.Problems)
	}
	t.Logf("%d tunnels: %d rekeys in %.1f s, %d of %d lost; drops gw1 %v, gw2 %v; the kernels' loss counters: %v",
		g.Tunnels, g.Rekeys, g.RekeySeconds, g.RekeyLost, g.RekeySent, g.Counts[0].Drops, g.Counts[1].Drops, g.KernelLosses)
	if g.Rekeys < uint64(o.GatewayTunnels) || g.RekeySent == 0 || g.RekeyLost != 0 || g.Error != "" {
		t.Errorf("%d of %d CHILD_SAs rekeyed, %d of %d packets lost (%s); want every one rekeyed, 0 lost",
			g.Rekeys, o.GatewayTunnels, g.RekeyLost, g.RekeySent, g.Error)
	}
	for i, c := range g.Counts {
		if n := c.Drops["unknown-spi"]; n > 0 {
			t.Errorf("gw%d dropped %d packets as unknown-spi", i+1, n)
		}
	}
}

// warnings picks a gateway log's warning and error lines, at most n.
func TestWarnings(t *testing.T) {
	log := "time=1 level=INFO msg=a\ntime=2 level=WARN msg=b\ntime=3 level=ERROR msg=c\ntime=4 level=WARN msg=d"
	for _, c := range []struct {
		n    int
		want string
	}{
		{0, ""},
		{2, "time=2 level=WARN msg=b\ntime=3 level=ERROR msg=c"},
		{9, "time=2 level=WARN msg=b\ntime=3 level=ERROR msg=c\ntime=4 level=WARN msg=d"},
	} {
		if got := warnings(log, c.n); got != c.want {
			t.Errorf("warnings(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

// The gateway pair's configurations parse, and gw1's CHILD_SAs live far
// past their rekeys, so a rekey the load delays is never an expiry.
func TestGatewayConfigLifetimes(t *testing.T) {
	t.Setenv("ESPGW_BENCH_PSK", ikeSecret)
	rekey, spread := 40*time.Second, 8*time.Second
	for i := range 2 {
		text := gatewayConfig(netns.StandardAddresses(), i, 3, "aes128-sha256-x25519", "aes128gcm16", rekey, spread, false)
		cfg, err := gateway.ParseConfig("gw.yaml", []byte(text), nil)
		if err != nil {
			t.Fatalf("gw%d: %v\n%s", i+1, err, text)
		}
		for _, c := range cfg.IKE.Connections {
			ch := c.Children[0]
			if i == 0 && (ch.RekeyTime != rekey || ch.LifeTime < 2*rekey) {
				t.Errorf("gw1 %s: rekey_time %v, life_time %v; want %v and at least twice that", c.Name, ch.RekeyTime, ch.LifeTime, rekey)
			}
		}
	}
}
