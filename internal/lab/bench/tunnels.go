package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"text/tabwriter"
	"time"

	"github.com/espgw/espgw/internal/control"
	"github.com/espgw/espgw/internal/lab/runinfo"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// TunnelOptions choose a tunnel-scale bench (espgw bench --tunnels): one
// espgw path per tunnel count, measured the same way, the first count the
// reference of the ratios.
type TunnelOptions struct {
	Binary string
	Prefix string
	Suite  string // default aes-gcm-16
	Engine string // default cpu
	Encap  sa.Encap
	Counts []int // tunnel counts, e.g. 1, 100, 1000, 10000
	// Frame is the frame size of the zero-loss search and the
	// reconfiguration loads (default 512).
	Frame         int
	TCPDuration   time.Duration // default 3s
	TrialDuration time.Duration // one UDP trial (default 1s)
	Iterations    int           // most trials of the zero-loss search (default 8)
	Retries       int           // repeats of a lossy trial before its rate counts as lossy (Searcher.Retries)
	// ReconfigTime is the length of the load during which a tunnel is
	// added and removed, or one rekeyed (default 2s).
	ReconfigTime time.Duration
	// ControlAdds is how many SAs the control-socket rate is measured with
	// (default 5000).
	ControlAdds int
	Nice        int
	Progress    func(what string, done, total int)
}

// TunnelResult is one tunnel count's measurements.
type TunnelResult struct {
	Tunnels int `json:"tunnels"`
	SAs     int `json:"sas"` // per gateway
	// LoadSeconds is gw1's start with every SA: from its launch until it
	// answered, the SA file read and loaded, sockets and TUN made.
	LoadSeconds float64 `json:"load_seconds"`
	// LoadCPUSeconds is the CPU gw1 spent on that start: on a machine
	// others share, what loading costs, where the wall time says how busy
	// the machine was.
	LoadCPUSeconds float64 `json:"load_cpu_seconds"`
	// RSS is gw1's resident memory once started (as the gateway reports
	// ready), RSSPerSA its growth per SA over the first count's gateway (0
	// for the first count); RSSAfter is gw1's RSS after the loads, with
	// the garbage collector's slack (up to the live heap again).
	RSS      uint64  `json:"rss_bytes"`
	RSSPerSA float64 `json:"rss_per_sa_bytes,omitempty"`
	RSSAfter uint64  `json:"rss_after_loads_bytes"`
	TCP1     float64 `json:"tcp1_bps"`
	// ZeroLoss is the RFC 2544 zero-loss rate of the Frame-byte load
	// spread round-robin over every tunnel, packets per second; Ratio is
	// it over the first count's.
	ZeroLoss float64 `json:"zero_loss_pps"`
	Ratio    float64 `json:"ratio_to_first"`
	// ZeroLossBound is the lowest rate the search saw lose packets above
	// ZeroLoss (ZeroLoss itself when none did): the search's spread.
	ZeroLossBound float64 `json:"zero_loss_bound_pps"`
	// At half the zero-loss rate, for ReconfigTime: packets sent and lost
	// while one tunnel was added and then removed next to the live ones,
	// and while one live tunnel was rekeyed (make-before-break).
	AddDelSent uint64 `json:"add_del_sent"`
	AddDelLost uint64 `json:"add_del_lost"`
	RekeySent  uint64 `json:"rekey_sent"`
	RekeyLost  uint64 `json:"rekey_lost"`
	// ControlAddsPerSec is SAs added per second through gw1's control
	// socket, one SA per request, pipelined on one connection.
	ControlAddsPerSec float64 `json:"control_adds_per_sec"`
	Error             string  `json:"error,omitempty"`
}

// TunnelReport is a tunnel-scale bench run.
type TunnelReport struct {
	Started  time.Time       `json:"started"`
	Elapsed  time.Duration   `json:"elapsed_ns"`
	Command  string          `json:"command,omitempty"`
	LoadAvg  string          `json:"loadavg,omitempty"`
	Suite    string          `json:"suite"`
	Engine   string          `json:"engine"`
	Frame    int             `json:"frame"`
	Results  []*TunnelResult `json:"results"`
	Partial  bool            `json:"partial"`
	Problems []string        `json:"problems,omitempty"`
	Machine  runinfo.Machine `json:"machine"`
}

func (o *TunnelOptions) defaults() {
	o.Prefix = cmp.Or(o.Prefix, "bench")
	o.Suite = cmp.Or(o.Suite, "aes-gcm-16")
	o.Engine = cmp.Or(o.Engine, "cpu")
	o.Frame = cmp.Or(o.Frame, 512)
	o.TCPDuration = cmp.Or(o.TCPDuration, 3*time.Second)
	o.TrialDuration = cmp.Or(o.TrialDuration, time.Second)
	o.Iterations = cmp.Or(o.Iterations, 8)
	o.ReconfigTime = cmp.Or(o.ReconfigTime, 2*time.Second)
	o.ControlAdds = cmp.Or(o.ControlAdds, 5000)
	if o.Progress == nil {
		o.Progress = func(string, int, int) {}
	}
}

// RunTunnels measures each tunnel count in turn.
func RunTunnels(ctx context.Context, o TunnelOptions) (*TunnelReport, error) {
	o.defaults()
	if len(o.Counts) == 0 {
		return nil, errors.New("tunnels bench: no tunnel counts")
	}
	for _, n := range o.Counts {
		if n < 1 || n > testbed.MaxTunnels {
			return nil, fmt.Errorf("tunnels bench: %d tunnels: want 1..%d", n, testbed.MaxTunnels)
		}
	}
	if _, _, err := testbed.ParseSuite(o.Suite); err != nil {
		return nil, err
	}
	rep := &TunnelReport{Started: time.Now(), Suite: o.Suite, Engine: o.Engine, Frame: o.Frame, Machine: runinfo.Describe()}
	rep.LoadAvg = rep.Machine.LoadAvg
	steps := 7
	for i, n := range o.Counts {
		if ctx.Err() != nil {
			break
		}
		res := &TunnelResult{Tunnels: n, SAs: 2 * n}
		if err := o.measure(ctx, res, func(what string, k int) {
			o.Progress(fmt.Sprintf("%d tunnels: %s", n, what), i*steps+k, len(o.Counts)*steps)
		}); err != nil {
			res.Error = err.Error()
			if ctx.Err() == nil {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%d tunnels: %v", n, err))
			}
		}
		rep.Results = append(rep.Results, res)
	}
	if len(rep.Results) > 0 {
		first := rep.Results[0]
		for _, r := range rep.Results {
			if first.ZeroLoss > 0 {
				r.Ratio = r.ZeroLoss / first.ZeroLoss
			}
			if r != first && r.SAs > first.SAs && first.RSS > 0 && r.RSS > 0 {
				r.RSSPerSA = (float64(r.RSS) - float64(first.RSS)) / float64(r.SAs-first.SAs)
			}
		}
	}
	rep.Partial = ctx.Err() != nil
	rep.Elapsed = time.Since(rep.Started)
	return rep, nil
}

// measure builds a bed of res.Tunnels tunnels and runs every load on it.
func (o *TunnelOptions) measure(ctx context.Context, res *TunnelResult, step func(string, int)) error {
	suite, bits, _ := testbed.ParseSuite(o.Suite)
	step("starting the gateways", 0)
	bed, err := testbed.Start(ctx, testbed.Options{Binary: o.Binary, Nice: o.Nice, Prefix: o.Prefix, Suite: suite, AESBits: bits,
		Encap: o.Encap, Engine: [2]string{o.Engine, o.Engine}, Tunnels: res.Tunnels})
	if err != nil {
		return err
	}
	defer bed.Close()
	res.LoadSeconds = bed.GW[0].StartTook.Seconds()
	if c, err := cpuTime(bed.GW[0].PID()); err == nil {
		res.LoadCPUSeconds = c.Seconds()
	}
	res.RSS, _, _ = memory(bed.GW[0].PID())
	topo := bed.Topo

	step("TCP", 1)
	r, err := testbed.Iperf3(ctx, topo.HostB, topo.HostA, topo.Addr.HostB4.Addr(), testbed.IperfOptions{Duration: o.TCPDuration})
	if err != nil {
		return fmt.Errorf("TCP: %w", err)
	}
	res.TCP1 = r.BitsPerSecond

	tunnels := bed.Tunnels
	if len(tunnels) == 0 {
		t := &testbed.Tunnel{Index: 0, Out: bed.SAs[0], Back: bed.SAs[1], HostA: topo.Addr.HostA4.Addr(), HostB: topo.Addr.HostB4.Addr()}
		tunnels = []*testbed.Tunnel{t}
	}
	targets := make([]Target, len(tunnels))
	for i, t := range tunnels {
		targets[i] = Target{Src: t.HostA, Dst: t.HostB}
	}
	if len(tunnels) == 1 {
		// One tunnel still carries many flows: one flow alone is held to
		// one CPU by the kernel's flow hashing, and would make the
		// reference slow for a reason that is not the tunnel's. Tunnel
		// 0's policy takes any source, so hostA sends from 64 of its own.
		targets = targets[:0]
		for k := range 64 {
			src := netip.AddrFrom4([4]byte{10, 127, 255, byte(k + 1)})
			targets = append(targets, Target{Src: src, Dst: tunnels[0].HostB})
		}
	}
	probe, err := NewSpreadProbe(topo.HostA, topo.HostB, targets)
	if err != nil {
		return err
	}
	defer probe.Close()
	mix := Single(o.Frame)
	// Every tunnel's first packet, outside the measured trials.
	if w, err := probe.Run(ctx, mix, 20000, time.Duration(len(targets)/20000+1)*time.Second, false); err != nil {
		return err
	} else if w.Received == 0 {
		return fmt.Errorf("no probe of %d sent from hostA reached hostB", w.Sent)
	}

	step("zero-loss search", 2)
	full, err := probe.Run(ctx, mix, 0, o.TrialDuration, false)
	if err != nil {
		return err
	}
	s := probeSearch(probe, mix, full, o.TrialDuration, o.Iterations, o.Retries)
	if res.ZeroLoss, err = s.Find(ctx, 0); err != nil {
		return fmt.Errorf("zero-loss search: %w", err)
	}
	_, hi := s.bracket(0)
	res.ZeroLossBound = max(hi, res.ZeroLoss)
	res.RSSAfter, _, _ = memory(bed.GW[0].PID())
	if res.ZeroLoss == 0 {
		return errors.New("no zero-loss rate: cannot load for the reconfiguration trials")
	}
	half := res.ZeroLoss / 2

	step("add and remove a tunnel under load", 3)
	extra, err := bed.NewTunnel(len(tunnels), 0)
	if err != nil {
		return err
	}
	res.AddDelSent, res.AddDelLost, err = o.during(ctx, probe, mix, half, func() error {
		if err := bed.AddTunnels(extra); err != nil {
			return err
		}
		time.Sleep(o.ReconfigTime / 3)
		return bed.DelTunnels(extra)
	})
	if err != nil {
		return fmt.Errorf("add/remove under load: %w", err)
	}

	step("rekey under load", 4)
	old := tunnels[len(tunnels)/2]
	next, err := bed.NewTunnel(old.Index, 1)
	if err != nil {
		return err
	}
	res.RekeySent, res.RekeyLost, err = o.during(ctx, probe, mix, half, func() error {
		return bed.RekeyTunnel(old, next, o.ReconfigTime/4)
	})
	if err != nil {
		return fmt.Errorf("rekey under load: %w", err)
	}

	step("control-socket adds", 5)
	if res.ControlAddsPerSec, err = o.controlAdds(bed); err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	step("done", 6)
	return nil
}

// during offers a load for ReconfigTime and runs change a third of the way
// in; it returns what was sent and lost.
func (o *TunnelOptions) during(ctx context.Context, probe *Probe, mix Mix, rate float64, change func() error) (sent, lost uint64, err error) {
	errc := make(chan error, 1)
	go func() {
		time.Sleep(o.ReconfigTime / 3)
		errc <- change()
	}()
	r, err := probe.Run(ctx, mix, rate, o.ReconfigTime, false)
	if cerr := <-errc; err == nil {
		err = cerr
	}
	return r.Sent, r.Sent - min(r.Received, r.Sent), err
}

// controlAdds adds ControlAdds inbound SAs to gw1, one per request,
// pipelined over one connection, then deletes them in one request.
func (o *TunnelOptions) controlAdds(bed *testbed.Bed) (float64, error) {
	gw1, _ := bed.Outer()
	c, err := control.Dial(bed.ControlSocket(0))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	suite, bits, _ := testbed.ParseSuite(o.Suite)
	reqs := make([]control.Request, o.ControlAdds)
	del := control.Request{Op: "sa.del"}
	for i := range reqs {
		enc, auth, err := sa.RandomKeys(suite, bits)
		if err != nil {
			return 0, err
		}
		src := netip.AddrFrom4([4]byte{10, 250, byte(i >> 8), byte(i)})
		s := &sa.SA{SPI: 0x7e000000 + uint32(i), Src: src, Dst: gw1, Suite: suite, EncKey: enc, AuthKey: auth, ReplayWindow: 64}
		raw, err := control.SAEntries(s)
		if err != nil {
			return 0, err
		}
		reqs[i] = control.Request{Op: "sa.add", SA: raw}
		del.IDs = append(del.IDs, control.SAID{SPI: fmt.Sprintf("%#x", s.SPI), Dst: gw1.String()})
	}
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		for range reqs {
			r, err := c.Receive()
			if err == nil && !r.OK {
				err = errors.New(r.Error)
			}
			if err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i := range reqs {
		if err := c.Send(reqs[i]); err != nil {
			return 0, err
		}
		if i%64 == 63 {
			if err := c.Flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := c.Flush(); err != nil {
		return 0, err
	}
	if err := <-errc; err != nil {
		return 0, err
	}
	rate := float64(len(reqs)) / time.Since(start).Seconds()
	if _, err := c.Do(del); err != nil {
		return rate, fmt.Errorf("delete the SAs added: %w", err)
	}
	return rate, nil
}

// Print writes the report as a table, the ratios to the first count beside.
func (r *TunnelReport) Print(w io.Writer) {
	fmt.Fprintf(w, "espgw bench --tunnels: %s on %s, %d-byte frames; load average at start %s\n", r.Suite, r.Engine, r.Frame, r.LoadAvg)
	if r.Machine.Host != "" {
		fmt.Fprintf(w, "machine: %s\n", r.Machine)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tunnels\tSAs\tload s\tload CPU s\tRSS MiB\tB/SA\tTCP Mbit/s\tzero-loss pkt/s\t× first\tadd/del lost/sent\trekey lost/sent\tcontrol adds/s\t")
	for _, x := range r.Results {
		if x.Error != "" {
			fmt.Fprintf(tw, "%d\t%d\t\t\t\t\t\t\t\t\t\t\t%s\n", x.Tunnels, x.SAs, x.Error)
			continue
		}
		per := "-"
		if x.RSSPerSA != 0 {
			per = fmt.Sprintf("%.0f", x.RSSPerSA)
		}
		fmt.Fprintf(tw, "%d\t%d\t%.2f\t%.2f\t%.1f\t%s\t%.0f\t%.0f\t%.2f\t%d/%d\t%d/%d\t%.0f\t\n", x.Tunnels, x.SAs, x.LoadSeconds, x.LoadCPUSeconds,
			float64(x.RSS)/(1<<20), per, x.TCP1/1e6, x.ZeroLoss, x.Ratio, x.AddDelLost, x.AddDelSent, x.RekeyLost, x.RekeySent, x.ControlAddsPerSec)
	}
	tw.Flush()
	for _, p := range r.Problems {
		fmt.Fprintln(w, "problem:", p)
	}
}
