// Package bench measures espgw tunnels under load beside plain routing and
// wireguard-go.
//
// It measures espgw tunnels under load, RFC 2544 style, side by side with
// plain routing (the ceiling) and a wireguard-go tunnel, all on the standard
// topology hostA — gw1 — wan — gw2 — hostB and in one run, so the ratios
// between them are what a reader can trust on a busy machine.
//
// For each path it measures iperf3 TCP with 1 and 4 streams; UDP at each frame
// size (and IMIX) offered as fast as the probe goes; the zero-loss rate per
// frame size by binary search, and the partial-drop rate (loss ≤ 0.1%); one-way
// latency percentiles (an HDR histogram) at 10, 50 and 90% of the zero-loss
// rate; CPU time and memory of each gateway process and the offload engine's
// queue counters. The load generator is Probe: a paced UDP sender in hostA and
// a receiver in hostB, both sockets of this process, stamping each datagram
// with a trial id, a sequence number and a send time.
//
// RunTunnels measures tunnel scale (espgw bench --tunnels) and RunIKE IKEv2
// tunnel setup and rekey, espgw beside strongSwan's charon (--ike-tunnels).
//
// Every load is bounded in time; a cancelled context ends the run between
// steps with the results so far (Report.Partial).
package bench

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/runinfo"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// Options choose what a bench run measures. Zero values take the defaults
// noted.
type Options struct {
	Binary     string   // espgw executable for the gateways (default: this one)
	Prefix     string   // namespace prefix (default "bench")
	Suites     []string // as testbed.ParseSuite reads them (default aes-gcm-16, chacha20-poly1305)
	Engines    []string // offload engines (default cpu)
	Encaps     []sa.Encap
	OuterV6    bool
	NoOffloads bool // TUN vnet-hdr offloads off in the gateways
	// WanIO are the gateways' wan-io settings to measure raw ESP with, a
	// path each (default socket; xdp or auto put it on AF_XDP, in generic
	// mode on the WAN veths; xdp-native on AF_XDP with the program attached
	// natively, xdp-mode native).
	WanIO []string
	// Nice, when not 0, runs every tunnel's processes — the espgw gateways
	// and the wireguard-go baseline alike — at this nice(1) value, as a
	// data plane is often run above bulk work.
	Nice int

	// Baselines besides plain routing, which is always measured: "wireguard-go".
	Baselines     []string
	WireguardDir  string // cache folder for the wireguard-go build
	SkipPlain     bool   // leave plain routing out (tests)
	TCPDuration   time.Duration
	TCPRuns       int           // iperf3 runs per TCP measure, the median kept (default 1)
	TrialDuration time.Duration // one UDP trial (default 1s)
	Iterations    int           // most trials of the zero-loss search per frame size, repeats included (default 8)
	Retries       int           // repeats of a lossy trial before its rate counts as lossy (Searcher.Retries; default none)
	PartialIters  int           // most extra trials for the partial-drop rate (default 3)
	PartialLoss   float64       // partial-drop threshold (default 0.001)
	Frames        []Mix         // default: 64 … 1400 and IMIX
	LatencyFrame  int           // frame size of the latency loads (default 512)
	LatencyLoads  []float64     // fractions of the zero-loss rate (default 0.1, 0.5, 0.9)
	LatencyTime   time.Duration // one latency load (default 2s)

	// ProfileDir, when set, has every espgw gateway serve Go's profiler
	// and takes a CPU profile of each during the first single-stream TCP
	// run and during the first frame size's search, written there as
	// PATH-gwN-tcp1.pprof and PATH-gwN-udpFRAME.pprof. Profiling costs
	// the gateways some CPU: a run with it measures the profile, not the
	// rates.
	ProfileDir string

	// Progress is told of every step: what is running, steps done, steps in all.
	Progress func(what string, done, total int)
	Log      *slog.Logger
}

func (o *Options) defaults() {
	o.Prefix = cmp.Or(o.Prefix, "bench")
	if len(o.Suites) == 0 {
		o.Suites = []string{"aes-gcm-16", "chacha20-poly1305"}
	}
	if len(o.Engines) == 0 {
		o.Engines = []string{"cpu"}
	}
	if len(o.Encaps) == 0 {
		o.Encaps = []sa.Encap{sa.EncapNone}
	}
	o.TCPRuns = cmp.Or(o.TCPRuns, 1)
	o.TCPDuration = cmp.Or(o.TCPDuration, 3*time.Second)
	o.TrialDuration = cmp.Or(o.TrialDuration, time.Second)
	o.Iterations = cmp.Or(o.Iterations, 8)
	o.PartialIters = cmp.Or(o.PartialIters, 3)
	o.PartialLoss = cmp.Or(o.PartialLoss, 0.001)
	if len(o.Frames) == 0 {
		o.Frames, _ = ParseMixes("all")
	}
	o.LatencyFrame = cmp.Or(o.LatencyFrame, 512)
	if len(o.LatencyLoads) == 0 {
		o.LatencyLoads = []float64{0.1, 0.5, 0.9}
	}
	o.LatencyTime = cmp.Or(o.LatencyTime, 2*time.Second)
	if o.Progress == nil {
		o.Progress = func(string, int, int) {}
	}
	o.Log = cmp.Or(o.Log, slog.New(slog.DiscardHandler))
}

// Kinds of path measured.
const (
	KindPlain     = "plain"
	KindWireguard = "wireguard-go"
	KindESP       = "espgw"
)

// Result is everything measured on one path.
type Result struct {
	Name     string  `json:"name"`
	Kind     string  `json:"kind"`
	Suite    string  `json:"suite,omitempty"`
	Engine   string  `json:"engine,omitempty"`
	Encap    string  `json:"encap,omitempty"`
	TCP1     float64 `json:"tcp1_bps"`
	TCP4     float64 `json:"tcp4_bps"`
	TCP1Retr int     `json:"tcp1_retransmits"`
	TCP4Retr int     `json:"tcp4_retransmits"`
	// TCP1Runs and TCP4Runs are every iperf3 run's rate when there were
	// several (Options.TCPRuns); TCP1 and TCP4 are their medians.
	TCP1Runs []float64 `json:"tcp1_runs_bps,omitempty"`
	TCP4Runs []float64 `json:"tcp4_runs_bps,omitempty"`
	WanIO    string    `json:"wan_io,omitempty"`
	// Iperf64 is iperf3's UDP at 64-byte frames on this path (plain
	// routing only): the reference the probe's own top rate is held to.
	Iperf64  *IperfUDP       `json:"iperf3_udp64,omitempty"`
	Frames   []FrameResult   `json:"frames"`
	Latency  []LatencyResult `json:"latency"`
	Gateways []Usage         `json:"gateways,omitempty"`
	Elapsed  time.Duration   `json:"elapsed_ns"`
	Error    string          `json:"error,omitempty"`
}

// FrameResult is one frame size (or IMIX) on one path. Rates are packets
// per second; Mbps converts with the mix's mean frame size.
type FrameResult struct {
	Mix       string  `json:"mix"`
	MeanFrame float64 `json:"mean_frame"`
	// The as-fast-as-possible trial: what the probe offered and what came out.
	Offered   float64 `json:"offered_pps"`
	Delivered float64 `json:"delivered_pps"`
	// ZeroLoss is the RFC 2544 throughput; Partial the highest rate seen
	// with loss at or below the partial-drop threshold.
	ZeroLoss float64 `json:"zero_loss_pps"`
	Partial  float64 `json:"partial_drop_pps"`
	// ZeroLossBound is the lowest rate the search saw lose packets above
	// ZeroLoss: the path's zero-loss rate lies between the two, the
	// spread a comparison of runs allows. It equals ZeroLoss when no trial
	// lost packets (GeneratorLimited).
	ZeroLossBound float64 `json:"zero_loss_bound_pps"`
	// GeneratorLimited: the probe's top rate passed with no loss, so the path
	// may go faster than measured.
	GeneratorLimited bool `json:"generator_limited"`
	// Limit says what bounded the rates: "path" when the full-speed trial
	// lost packets (the probe offered more than the path carried), "probe"
	// when it did not (GeneratorLimited).
	Limit  string    `json:"limit"`
	Trials []Attempt `json:"trials"`
}

// IperfUDP is iperf3's UDP on a path beside the probe's: what iperf3's
// client sent and what arrived, and what the probe sent at full speed, in
// packets per second (the best of runs taken in turn).
type IperfUDP struct {
	Sent     float64 `json:"sent_pps"`
	Received float64 `json:"received_pps"`
	Probe    float64 `json:"probe_sent_pps"`
}

// Mbps is rate (packets/s) in megabits of frames per second.
func (f FrameResult) Mbps(rate float64) float64 { return rate * f.MeanFrame * 8 / 1e6 }

// LatencyResult is one latency load.
type LatencyResult struct {
	Load     float64    `json:"load"` // fraction of the zero-loss rate
	Rate     float64    `json:"rate_pps"`
	Frame    int        `json:"frame"`
	Sent     uint64     `json:"sent"`
	Received uint64     `json:"received"`
	P50      float64    `json:"p50_us"`
	P99      float64    `json:"p99_us"`
	P999     float64    `json:"p999_us"`
	CDF      []CDFPoint `json:"cdf"`
}

// Usage is one gateway process over a path's whole measurement.
type Usage struct {
	Name       string  `json:"name"`
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUPercent float64 `json:"cpu_percent"` // of one core, over the path's run
	RSS        uint64  `json:"rss_bytes"`
	HWM        uint64  `json:"rss_peak_bytes"`
	// Engine queue counters (espgw only).
	Engine     string `json:"engine,omitempty"`
	MaxQueue   uint64 `json:"engine_max_queue"`
	QueueFull  uint64 `json:"engine_queue_full"`
	MaxBatch   uint64 `json:"engine_max_batch"`
	QueueDepth uint64 `json:"engine_queue_depth"`
	// Drops are the packets the gateway dropped over the whole path, by
	// reason, its own and its SAs' together (espgw only). Losses in the
	// kernel — a full TUN queue, a full socket buffer — are not in them.
	Drops map[string]uint64 `json:"drops,omitempty"`
}

// Frame returns the result for mix name, or nil.
func (r *Result) Frame(name string) *FrameResult {
	if i := slices.IndexFunc(r.Frames, func(f FrameResult) bool { return f.Mix == name }); i >= 0 {
		return &r.Frames[i]
	}
	return nil
}

// LatencyAt returns the latency load nearest to load, or nil.
func (r *Result) LatencyAt(load float64) *LatencyResult {
	if i := slices.IndexFunc(r.Latency, func(l LatencyResult) bool { return math.Abs(l.Load-load) < 0.001 }); i >= 0 {
		return &r.Latency[i]
	}
	return nil
}

// Report is a bench run.
type Report struct {
	Started  time.Time     `json:"started"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Command  string        `json:"command,omitempty"`
	LoadAvg  string        `json:"loadavg,omitempty"`     // /proc/loadavg at the start: how busy the machine was
	LoadEnd  string        `json:"loadavg_end,omitempty"` // /proc/loadavg at the end
	Nice     int           `json:"nice,omitempty"`        // nice(1) value of every tunnel's processes (Options.Nice)
	Retries  int           `json:"retries,omitempty"`     // repeats of a lossy trial (Options.Retries)
	Results  []*Result     `json:"results"`
	Ratios   []Ratio       `json:"ratios"`
	Targets  []TargetCheck `json:"targets"`
	Partial  bool          `json:"partial"`
	Problems []string      `json:"problems,omitempty"`
	// Machine is where the run ran, and which espgw build.
	Machine runinfo.Machine `json:"machine"`
}

// Check refuses, clearly, to run where the bench cannot.
func Check(o Options) error {
	for _, b := range o.Baselines {
		if b != KindWireguard {
			return fmt.Errorf("baseline %q: the only baseline besides plain routing is %s", b, KindWireguard)
		}
	}
	for _, s := range o.Suites {
		if _, _, err := testbed.ParseSuite(s); err != nil {
			return err
		}
	}
	if err := netns.CheckPrerequisites(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	tools := []string{"iperf3"}
	if len(o.Baselines) > 0 { // wireguard-go, the only one
		tools = append(tools, "wg")
	}
	var missing []string
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("bench needs %s on PATH (apt-get install -y iperf3 wireguard-tools)", strings.Join(missing, ", "))
	}
	return nil
}

// WanIOXDPNative is the bench's wan-io for raw ESP over AF_XDP with the
// program attached natively (the gateways' wan-io xdp, xdp-mode native).
const WanIOXDPNative = "xdp-native"

// pathSpec is one path to measure.
type pathSpec struct {
	kind                 string
	suite, engine, encap string
	enc                  sa.Encap
	outerV6              bool
	wanIO                string
}

func (p pathSpec) name() string {
	if p.kind != KindESP {
		return p.kind
	}
	n := fmt.Sprintf("espgw %s %s %s", p.suite, p.engine, p.encap)
	if p.wanIO != "" && p.wanIO != "socket" && p.enc == sa.EncapNone {
		n += " " + p.wanIO
	}
	if p.outerV6 {
		n += " ipv6-outer"
	}
	return n
}

// Run measures every path the options ask for and returns the report. A
// cancelled ctx ends it early with what was measured (Report.Partial); the
// error is for runs that could not start.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	if err := Check(o); err != nil {
		return nil, err
	}
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return nil, fmt.Errorf("bench: the profile folder: %w", err)
		}
	}
	var specs []pathSpec
	if !o.SkipPlain {
		specs = append(specs, pathSpec{kind: KindPlain})
	}
	wgBin := ""
	for _, b := range o.Baselines {
		if b == KindWireguard {
			o.Progress("building wireguard-go", 0, 0)
			bin, err := BuildWireguard(ctx, o.WireguardDir)
			if err != nil {
				return nil, err
			}
			wgBin = bin
			specs = append(specs, pathSpec{kind: KindWireguard})
		}
	}
	for _, s := range o.Suites {
		suite, bits, err := testbed.ParseSuite(s)
		if err != nil {
			return nil, err
		}
		for _, e := range o.Engines {
			for _, enc := range o.Encaps {
				ios := o.WanIO
				if enc != sa.EncapNone || len(ios) == 0 {
					ios = []string{"socket"} // UDP-encapsulated ESP always uses its socket
				}
				for _, io := range ios {
					specs = append(specs, pathSpec{kind: KindESP, suite: testbed.SuiteName(suite, bits), engine: e, encap: enc.String(), enc: enc, outerV6: o.OuterV6, wanIO: io})
				}
			}
		}
	}
	rep := &Report{Started: time.Now(), Machine: runinfo.Describe()}
	rep.LoadAvg = rep.Machine.LoadAvg
	rep.Nice, rep.Retries = o.Nice, o.Retries
	m := &meter{o: o, total: len(specs) * o.stepsPerPath()}
	for _, spec := range specs {
		if ctx.Err() != nil {
			break
		}
		res := m.path(ctx, spec, wgBin)
		rep.Results = append(rep.Results, res)
		if res.Error != "" && ctx.Err() == nil {
			rep.Problems = append(rep.Problems, res.Name+": "+res.Error)
		}
	}
	rep.Partial = ctx.Err() != nil
	rep.Elapsed = time.Since(rep.Started)
	rep.LoadEnd = runinfo.LoadAvg()
	rep.Ratios, rep.Targets = Compare(rep.Results, o.LatencyFrame)
	return rep, nil
}

func (o *Options) stepsPerPath() int {
	return 2 + len(o.measuredFrames())*(1+o.Iterations+o.PartialIters) + len(o.LatencyLoads)
}

// measuredFrames are the frames asked for and, if it is not among them, the
// latency frame, whose zero-loss rate the latency loads need.
func (o *Options) measuredFrames() []Mix {
	for _, f := range o.Frames {
		if !f.IsIMIX() && f.Frames[0] == o.LatencyFrame {
			return o.Frames
		}
	}
	return append(o.Frames[:len(o.Frames):len(o.Frames)], Single(o.LatencyFrame))
}

// meter runs the measurements and keeps the progress count.
type meter struct {
	o           Options
	done, total int
}

func (m *meter) step(what string, n int) {
	m.done = min(m.done+max(n, 0), m.total)
	m.o.Progress(what, m.done, m.total)
}

// path sets one path up, measures it and tears it down.
func (m *meter) path(ctx context.Context, spec pathSpec, wgBin string) *Result {
	res := &Result{Name: spec.name(), Kind: spec.kind, Suite: spec.suite, Engine: spec.engine, Encap: spec.encap}
	if spec.kind == KindESP && spec.enc == sa.EncapNone {
		res.WanIO = spec.wanIO
	}
	start, doneBefore := time.Now(), m.done
	defer func() {
		res.Elapsed = time.Since(start)
		// Steps a search skipped or an error cut short still count as done.
		m.step(res.Name+": done", doneBefore+m.o.stepsPerPath()-m.done)
	}()
	m.step(res.Name+": setting up", 0)
	p, err := m.setUp(ctx, spec, wgBin)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer p.close()
	if err := m.measure(ctx, p, res); err != nil {
		res.Error = err.Error()
		if ctx.Err() != nil {
			res.Error = "interrupted (" + res.Error + ")"
		}
	}
	return res
}

// process is a gateway process to account CPU and memory for.
type process struct {
	name string
	pid  int
}

// path is a built path: the topology, the processes that forward across it
// (none for plain routing), how to read their engine counters (espgw only)
// and how to tear it all down.
type path struct {
	topo  *netns.Topology
	procs []process
	stats func(context.Context) []gateway.Stats
	// profile, when set (Options.ProfileDir, espgw only), starts a CPU
	// profile of every gateway over d, written with what in the names;
	// the returned func waits for them.
	profile func(ctx context.Context, what string, d time.Duration) (wait func())
	close   func()
}

// setUp builds the path: the topology and whatever forwards across it.
func (m *meter) setUp(ctx context.Context, spec pathSpec, wgBin string) (*path, error) {
	o := m.o
	switch spec.kind {
	case KindPlain:
		topo, err := netns.NewTopology(o.Prefix, netns.TopologyOptions{PlainRouting: true, Log: o.Log})
		if err != nil {
			return nil, err
		}
		return &path{topo: topo, close: func() { topo.Close() }}, nil
	case KindWireguard:
		topo, err := netns.NewTopology(o.Prefix, netns.TopologyOptions{Log: o.Log})
		if err != nil {
			return nil, err
		}
		w, err := startWireguard(ctx, wgBin, topo, o.Nice)
		if err != nil {
			topo.Close()
			return nil, err
		}
		p := &path{topo: topo, close: func() { w.Close(); topo.Close() }}
		for i, pid := range w.PIDs() {
			p.procs = append(p.procs, process{fmt.Sprintf("gw%d", i+1), pid})
		}
		return p, nil
	}
	suite, bits, err := testbed.ParseSuite(spec.suite)
	if err != nil {
		return nil, err
	}
	wanIO, xdpMode := spec.wanIO, ""
	if wanIO == WanIOXDPNative {
		wanIO, xdpMode = "xdp", "native"
	}
	bed, err := testbed.Start(ctx, testbed.Options{Binary: o.Binary, Nice: o.Nice, Prefix: o.Prefix, Suite: suite, AESBits: bits,
		Encap: spec.enc, OuterV6: o.OuterV6, NoOffloads: o.NoOffloads, Engine: [2]string{spec.engine, spec.engine}, WanIO: wanIO, XDPMode: xdpMode, Pprof: o.ProfileDir != "", Log: o.Log})
	if err != nil {
		return nil, err
	}
	p := &path{topo: bed.Topo, close: func() { bed.Close() }}
	for _, g := range bed.GW {
		p.procs = append(p.procs, process{g.Name, g.PID()})
	}
	if o.ProfileDir != "" {
		p.profile = func(ctx context.Context, what string, d time.Duration) func() {
			var wg sync.WaitGroup
			for i := range bed.GW {
				wg.Add(1)
				go func() {
					defer wg.Done()
					file := filepath.Join(o.ProfileDir, fmt.Sprintf("%s-gw%d-%s.pprof", testbed.FileName(spec.name()), i+1, what))
					if err := bed.Profile(ctx, i, d, file); err != nil {
						o.Log.Warn("profile a gateway", "gateway", bed.GW[i].Name, "err", err)
					}
				}()
			}
			return wg.Wait
		}
	}
	p.stats = func(ctx context.Context) []gateway.Stats {
		var out []gateway.Stats
		for i := range bed.GW {
			st, err := bed.Stats(ctx, i)
			if err != nil {
				o.Log.Warn("read gateway stats", "gateway", bed.GW[i].Name, "err", err)
			}
			out = append(out, st)
		}
		return out
	}
	return p, nil
}

// measure runs every load across topo from hostA to hostB.
func (m *meter) measure(ctx context.Context, p *path, res *Result) error {
	o, topo, procs := m.o, p.topo, p.procs
	start := time.Now()
	cpu0 := make([]time.Duration, len(procs))
	for i, proc := range procs {
		cpu0[i], _ = cpuTime(proc.pid)
	}
	defer func() { res.Gateways = usage(ctx, procs, cpu0, time.Since(start), p.stats) }()

	dst := topo.Addr.HostB4.Addr()
	// With several runs, 1 and 4 streams take turns, so both see the
	// machine's load of the same seconds.
	var runs [2][]float64
	var retr [2]int
	for run := range o.TCPRuns {
		for k, streams := range []int{1, 4} {
			what := fmt.Sprintf("%s: TCP, %d stream(s)", res.Name, streams)
			if o.TCPRuns > 1 {
				what += fmt.Sprintf(", run %d of %d", run+1, o.TCPRuns)
			}
			m.step(what, 0)
			wait := func() {}
			if p.profile != nil && run == 0 && streams == 1 {
				wait = p.profile(ctx, "tcp1", o.TCPDuration-time.Second/2)
			}
			r, err := testbed.Iperf3(ctx, topo.HostB, topo.HostA, dst, testbed.IperfOptions{Duration: o.TCPDuration, Streams: streams})
			wait()
			if err != nil {
				return fmt.Errorf("TCP with %d streams: %w", streams, err)
			}
			runs[k] = append(runs[k], r.BitsPerSecond)
			retr[k] += r.Retransmits
			if run == o.TCPRuns-1 {
				m.step(what, 1)
			}
		}
	}
	res.TCP1, res.TCP4 = median(runs[0]), median(runs[1])
	res.TCP1Retr, res.TCP4Retr = retr[0], retr[1]
	if o.TCPRuns > 1 {
		res.TCP1Runs, res.TCP4Runs = runs[0], runs[1]
	}

	probe, err := NewProbe(topo.HostA, topo.HostB, dst)
	if err != nil {
		return err
	}
	defer probe.Close()
	if res.Kind == KindPlain {
		if err := m.probeAgainstIperf(ctx, probe, topo, res); err != nil {
			return err
		}
	}
	// A path that carries nothing would search down to zero slowly: check
	// first, with a small load.
	if r, err := probe.Run(ctx, Single(512), 1000, 200*time.Millisecond, false); err != nil {
		return err
	} else if r.Received == 0 {
		return fmt.Errorf("no probe of %d sent from hostA reached hostB", r.Sent)
	}

	latencyMix := Single(o.LatencyFrame)
	for k, mix := range o.measuredFrames() {
		wait := func() {}
		if p.profile != nil && k == 0 {
			wait = p.profile(ctx, "udp"+mix.Name, 8*o.TrialDuration)
		}
		fr, err := m.frame(ctx, probe, res.Name, mix)
		wait()
		res.Frames = append(res.Frames, fr)
		if err != nil {
			return fmt.Errorf("frame %s: %w", mix.Name, err)
		}
	}
	zl := res.Frame(latencyMix.Name).ZeroLoss
	if zl == 0 {
		return fmt.Errorf("no zero-loss rate at %d bytes: cannot load for latency", o.LatencyFrame)
	}
	for _, load := range o.LatencyLoads {
		what := fmt.Sprintf("%s: latency at %.0f%% (%.0f pkt/s)", res.Name, load*100, load*zl)
		m.step(what, 0)
		r, err := probe.Run(ctx, latencyMix, load*zl, o.LatencyTime, true)
		if err != nil {
			return fmt.Errorf("latency at %.0f%%: %w", load*100, err)
		}
		lr := LatencyResult{Load: load, Rate: load * zl, Frame: o.LatencyFrame, Sent: r.Sent, Received: r.Received}
		if r.Latency.Count() > 0 {
			lr.P50 = float64(r.Latency.Percentile(50)) / 1e3
			lr.P99 = float64(r.Latency.Percentile(99)) / 1e3
			lr.P999 = float64(r.Latency.Percentile(99.9)) / 1e3
			lr.CDF = r.Latency.CDF()
		}
		res.Latency = append(res.Latency, lr)
		m.step(what, 1)
	}
	return nil
}

// probeAgainstIperf holds the probe's top rate at 64-byte frames to
// iperf3's UDP (18-byte datagrams, -b 0) on the same path: twice each, in
// turn, so both see the machine's load of the same few seconds, keeping the
// best of each.
func (m *meter) probeAgainstIperf(ctx context.Context, probe *Probe, topo *netns.Topology, res *Result) error {
	o := m.o
	d := max(o.TrialDuration, time.Second) // iperf3 -t counts whole seconds
	best := &IperfUDP{}
	for range 2 {
		m.step(res.Name+": iperf3 UDP at 64 bytes", 0)
		r, err := testbed.Iperf3(ctx, topo.HostB, topo.HostA, topo.Addr.HostB4.Addr(), testbed.IperfOptions{Duration: d, UDP: true, Bitrate: "0", Length: 64 - ethOverhead - ipv4UDPHdr})
		if err != nil {
			return fmt.Errorf("iperf3 UDP at 64 bytes: %w", err)
		}
		if sent := float64(r.Packets) / d.Seconds(); sent > best.Sent {
			best.Sent, best.Received = sent, float64(r.Packets-r.LostPackets)/d.Seconds()
		}
		m.step(res.Name+": the probe's top rate at 64 bytes", 0)
		pr, err := probe.Run(ctx, Single(64), 0, d, false)
		if err != nil {
			return fmt.Errorf("probe at 64 bytes: %w", err)
		}
		best.Probe = max(best.Probe, pr.SentRate())
	}
	res.Iperf64 = best
	return nil
}

// frame measures one mix: as fast as possible, then the zero-loss and the
// partial-drop rate by binary search.
func (m *meter) frame(ctx context.Context, probe *Probe, name string, mix Mix) (FrameResult, error) {
	o := m.o
	fr := FrameResult{Mix: mix.Name, MeanFrame: mix.MeanFrame()}
	what := fmt.Sprintf("%s: UDP %s, full speed", name, mix.Name)
	m.step(what, 0)
	r, err := probe.Run(ctx, mix, 0, o.TrialDuration, false)
	if err != nil {
		return fr, err
	}
	fr.Offered, fr.Delivered = r.SentRate(), float64(r.Received)/r.Elapsed.Seconds()
	m.step(what, 1)
	s := probeSearch(probe, mix, r, o.TrialDuration, o.Iterations, o.Retries)
	trials, run := 0, s.Trial
	s.Trial = func(ctx context.Context, rate float64) (float64, error) {
		trials++
		what := fmt.Sprintf("%s: UDP %s, trial at %.0f pkt/s", name, mix.Name, rate)
		m.step(what, 0)
		loss, err := run(ctx, rate)
		if err == nil {
			m.step(what, 1)
		}
		return loss, err
	}
	fr.ZeroLoss, err = s.Find(ctx, 0)
	fr.Trials = s.History
	if err != nil {
		return fr, err
	}
	m.step(what, o.Iterations-trials) // the search may end early
	trials = 0
	s.Iterations = o.PartialIters
	fr.Partial, err = s.Find(ctx, o.PartialLoss)
	fr.Trials = s.History
	// The partial-drop search may have repeated a lossy trial into a pass
	// above the zero-loss rate: that rate carried the load without loss.
	lo, hi := s.bracket(0)
	fr.ZeroLoss = max(fr.ZeroLoss, lo)
	fr.ZeroLossBound = max(hi, fr.ZeroLoss)
	m.step(what, o.PartialIters-trials)
	fr.GeneratorLimited = r.Loss() == 0
	fr.Limit = "path"
	if fr.GeneratorLimited {
		fr.Limit = "probe"
	}
	return fr, err
}

// usage reads CPU and memory of each process and the engines' counters.
func usage(ctx context.Context, procs []process, cpu0 []time.Duration, wall time.Duration, stats func(context.Context) []gateway.Stats) []Usage {
	var out []Usage
	var st []gateway.Stats
	if stats != nil && ctx.Err() == nil {
		st = stats(ctx)
	}
	for i, p := range procs {
		u := Usage{Name: p.name}
		if c, err := cpuTime(p.pid); err == nil {
			u.CPUSeconds = (c - cpu0[i]).Seconds()
			u.CPUPercent = 100 * u.CPUSeconds / wall.Seconds()
		}
		u.RSS, u.HWM, _ = memory(p.pid)
		if i < len(st) {
			e := st[i].Engine
			u.Engine, u.MaxQueue, u.QueueFull, u.MaxBatch, u.QueueDepth = e.Name, e.MaxQueue, e.QueueFull, e.MaxBatch, e.QueueDepth
			u.Drops = map[string]uint64{}
			for r, n := range st[i].Drops {
				u.Drops[r] += n
			}
			for _, s := range st[i].SAs {
				for r, n := range s.Drops {
					u.Drops[r] += n
				}
			}
		}
		out = append(out, u)
	}
	return out
}

// median is the middle of xs (the mean of the middle two for an even
// count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
