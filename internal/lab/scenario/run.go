package scenario

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/internal/lab/wanrelay"
	"github.com/espgw/espgw/internal/secret"
	"github.com/espgw/espgw/sa"
)

// Options tune a run.
type Options struct {
	// Binary is the espgw executable the gateways run (default: this one).
	Binary string
	// Prefix starts the namespace names (default "sc").
	Prefix string
	// Captures, if set, is a directory that receives, per scenario, the
	// WAN capture (wan.pcap, both directions, as the relay forwarded
	// them), the inner captures on hostA's and hostB's interfaces
	// (hostA.pcap, hostB.pcap) and Wireshark's esp_sa file with the keys.
	Captures string
	// Kernel is the Linux kernel guest that linux-xfrm scenarios share
	// (NewKernelPeer; the caller closes it). Nil: each linux-xfrm scenario
	// boots its own.
	Kernel *KernelPeer
	// Progress, if set, receives a line per phase.
	Progress io.Writer
	Log      *slog.Logger
}

// Verdict is one checked expectation.
type Verdict struct {
	Metric string  `json:"metric"`
	Expr   string  `json:"expr"`
	Got    float64 `json:"got"`
	Want   float64 `json:"want"`
	Pass   bool    `json:"pass"`
	Line   int     `json:"line"`
}

// Balance is one packet-conservation equation: In must equal Out; the
// difference is unaccounted.
type Balance struct {
	Where string `json:"where"`
	In    int64  `json:"in"`
	Out   int64  `json:"out"`
	Terms string `json:"terms"`
}

// Result is what running one scenario gave.
type Result struct {
	Name     string            `json:"name"`
	File     string            `json:"file"`
	Peer     string            `json:"peer"`
	Matrix   map[string]string `json:"matrix,omitempty"`
	Pass     bool              `json:"pass"`
	Error    string            `json:"error,omitempty"`
	Seconds  float64           `json:"seconds"`
	Verdicts []Verdict         `json:"verdicts"`
	Steps    []StepResult      `json:"steps"`
	// Actions are what the traffic-time actions did, in order.
	Actions  []ActionResult `json:"actions,omitempty"`
	Metrics  Metrics        `json:"metrics"`
	Balances []Balance      `json:"conservation"`
	// Kernel are the error-like SNMP counters that moved during the
	// traffic, per namespace: where packets went that nothing else counted.
	Kernel   map[string]map[string]uint64 `json:"kernel,omitempty"`
	Gateways [2]gateway.Stats             `json:"gateways"`
	// KernelXfrm and KernelDevices are what the kernel peer's
	// /proc/net/xfrm_stat and interface counters moved by (linux-xfrm).
	KernelXfrm    map[string]uint64 `json:"kernel_xfrm_stat,omitempty"`
	KernelDevices map[string]uint64 `json:"kernel_devices,omitempty"`
	// KernelBoots is how many times the shared kernel guest had booted
	// when this scenario ran (1 when one boot served every linux-xfrm
	// scenario of the run).
	KernelBoots int `json:"kernel_boots,omitempty"`
	// ExternalCounters is what the external device's counters command
	// printed before and after the traffic.
	ExternalCounters []string `json:"external_counters,omitempty"`
	// ExternalSPIs are, with external.ike, the CHILD_SA gw1 negotiated with
	// the device as each snapshot found it: its SPIs out/in.
	ExternalSPIs []string `json:"external_spis,omitempty"`
	// Hint is, for a failed run against an external device, what its
	// counters show and what that usually means.
	Hint     string            `json:"hint,omitempty"`
	WAN      wanrelay.Counters `json:"wan"`
	Captures string            `json:"captures,omitempty"`
}

// runAll runs scs one after another until ctx ends.
func runAll(ctx context.Context, scs []*Scenario, opts Options) ([]*Result, error) {
	var out []*Result
	for _, s := range scs {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		out = append(out, Run(ctx, s, opts))
	}
	return out, nil
}

// BundledFiles lists the scenario files in fsys's top directory.
func BundledFiles(fsys fs.FS) ([]string, error) {
	return fs.Glob(fsys, "*.yaml")
}

// RunBundled loads name (e.g. "engines.yaml") from fsys — the bundled
// scenarios, github.com/espgw/espgw/scenarios.Bundled — and runs every
// scenario in it (one per matrix combination). A malformed file is an
// error; a failed expectation is a Result with Pass false.
func RunBundled(ctx context.Context, fsys fs.FS, name string, opts Options) ([]*Result, error) {
	scs, err := LoadFS(fsys, name)
	if err != nil {
		return nil, err
	}
	return runAll(ctx, scs, opts)
}

type runner struct {
	s        *Scenario
	opts     Options
	bed      *testbed.Bed
	relay    *testbed.Relay
	kernel   *kernelGW2   // gw2 when the peer is linux-xfrm
	external *externalGW2 // gw2 when the peer is external
	log      *slog.Logger
	// tunnels are the tunnels in force, as the actions change them.
	tunnels *tunnelSet
	// ike is the IKE negotiation of the tunnel (sa.ike), nil without.
	ike *ikeRun
	// restarted are each gateway's counts just before each of its
	// restarts; base sums them for the snapshots, with the counts of the
	// TUN devices the dead processes had.
	restarted [2][]gateway.Stats
	base      struct {
		gw         [2]*gateway.Stats
		tun, tunRx [2]uint64
	}
	// windows are when each step ran.
	windows []stepWindow
	// natGen counts the NAT's rebindings (topology.nat).
	natGen int
}

func (o Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// Run runs one scenario and judges it. Everything it builds (namespaces,
// gateways, relay, capture processes) is gone when it returns, also when
// ctx is cancelled.
func Run(ctx context.Context, s *Scenario, opts Options) *Result {
	opts.Prefix = cmp.Or(opts.Prefix, "sc")
	opts.Log = cmp.Or(opts.Log, slog.New(slog.DiscardHandler))
	res := &Result{Name: s.Name, File: s.File, Peer: s.Peer, Matrix: s.Matrix}
	if s.Peer == PeerLinuxXFRM && opts.Kernel == nil {
		opts.Kernel = NewKernelPeer(opts.Prefix+"k", opts.Log)
		defer opts.Kernel.Close()
	}
	start := time.Now()
	if s.Peer == PeerLinuxXFRM {
		// The guest boots (once per KernelPeer) outside the scenario's
		// timeout, which bounds the scenario, not a slow machine's boot; a
		// failed boot is reported by the scenario.
		opts.Kernel.mu.Lock()
		if opts.Kernel.peer == nil && opts.Kernel.err == nil {
			opts.progress("%s: booting the kernel guest (once for the run)", s.Name)
		}
		opts.Kernel.get(ctx)
		opts.Kernel.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	r := &runner{s: s, opts: opts, log: opts.Log}
	err := r.run(ctx, res)
	res.Seconds = time.Since(start).Seconds()
	if err != nil {
		res.Error = err.Error()
	}
	res.Pass = err == nil && len(res.Verdicts) > 0
	for _, v := range res.Verdicts {
		res.Pass = res.Pass && v.Pass
	}
	return res
}

func (r *runner) run(ctx context.Context, res *Result) (err error) {
	s := r.s
	tunnel := s.SA.Suite + " " + s.SA.Mode
	if s.SA.IKE != nil {
		tunnel = "IKEv2 " + s.SA.IKE.Proposals + ", ESP " + s.SA.IKE.ESPProposals
	}
	r.opts.progress("%s: building the test bed (%s %s, engines %s/%s)", s.Name, tunnel, s.Topology.Outer, s.Engines.GW1, s.Engines.GW2)
	offloads := s.offloads()
	var addrs *netns.Addresses
	customize := r.customize
	if s.Peer == PeerExternal {
		if r.external, err = newExternalGW2(s.External); err != nil {
			return err
		}
		defer r.external.removeFiles()
		addrs, customize = s.External.addresses(), r.externalSAs
	}
	prepare := quietMLD
	if s.Topology.NAT {
		prepare = func(t *netns.Topology) error {
			if err := quietMLD(t); err != nil {
				return err
			}
			return startNAT(t)
		}
	}
	var ikeSections [2]string
	if s.SA.IKE != nil {
		if r.ike, err = newIKERun(r.opts.Prefix); err != nil {
			return err
		}
		defer r.ike.remove()
		ikeSections = r.ikeSections()
	}
	r.bed, err = testbed.Start(ctx, testbed.Options{Addresses: addrs, IKE: ikeSections,
		Binary: r.opts.Binary, Prefix: r.opts.Prefix, Suite: s.SA.suite, AESBits: s.SA.aesBits, Mode: s.SA.mode,
		Encap: s.SA.encap, OuterV6: s.Topology.Outer == "ipv6", ESN: s.SA.ESN, ReplayWindow: s.SA.ReplayWindow,
		InitialSeq: s.SA.InitialSeq, Engine: [2]string{s.Engines.GW1, s.Engines.GW2}, NoOffloads: !offloads,
		Hard: s.SA.Lifetimes.Hard.sa(), Tunnels: s.Topology.Tunnels, Prepare: prepare, Customize: customize, WANMTU: s.Topology.WANMTU, TUNMTU: s.Topology.TUNMTU, Log: r.log,
	})
	if err != nil {
		return fmt.Errorf("start the test bed: %w", err)
	}
	defer func() {
		if cerr := r.bed.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("tear down the test bed: %w", cerr)
		}
	}()
	r.tunnels = newTunnelSet(r.bed)
	if r.ike != nil {
		// Before the relay bridges the WAN: the wan namespace routes the
		// IKE exchange between the gateways meanwhile.
		took, err := r.waitIKE(ctx, 30*time.Second)
		if err != nil {
			return err
		}
		r.opts.progress("%s: CHILD_SA negotiated with IKEv2 in %v", s.Name, took.Round(time.Millisecond))
	}
	capDir := ""
	if r.opts.Captures != "" {
		capDir = filepath.Join(r.opts.Captures, testbed.FileName(s.Name))
		if err := os.MkdirAll(capDir, 0o755); err != nil {
			return fmt.Errorf("captures: %w", err)
		}
		res.Captures = capDir
		if r.ike != nil {
			// gw1 writes the tables of every SA it negotiates; they are
			// copied when the run is over, rekeys and all.
			defer func() {
				if cerr := r.copyIKETables(capDir); cerr != nil && err == nil {
					err = cerr
				}
			}()
		} else if err := r.writeEspSA(capDir); err != nil {
			return err
		}
	}
	rc := wanrelay.Config{Logger: r.log, AToB: impair.DefaultConfig(), BToA: impair.DefaultConfig()}
	rc.BToA.Seed = 2
	if c := s.Impair.GW1ToGW2; c != nil {
		rc.AToB = *c
	}
	if c := s.Impair.GW2ToGW1; c != nil {
		rc.BToA = *c
	}
	if capDir != "" {
		rc.Pcap = filepath.Join(capDir, "wan.pcap")
	}
	if !s.Topology.NAT {
		if r.relay, err = r.bed.StartRelay(rc); err != nil {
			return fmt.Errorf("start the WAN relay: %w", err)
		}
		defer func() {
			if cerr := r.relay.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("stop the WAN relay: %w", cerr)
			}
		}()
	}
	if s.Peer == PeerExternal {
		r.opts.progress("%s: the external device as gw2 (%s, %s)", s.Name, s.External.WAN.Interface, s.External.LAN.Interface)
		defer func() {
			if cerr := r.external.detach(); cerr != nil && err == nil {
				err = cerr
			}
		}()
		if err := r.attachExternal(ctx); err != nil {
			return err
		}
		if e := s.External; e.Setup != "" {
			r.opts.progress("%s: external.setup (SPIs %#x out, %#x in)", s.Name, r.external.out.SPI, r.external.in.SPI)
			if e.Reset != "" {
				defer func() {
					if cerr := r.external.hook(context.WithoutCancel(ctx), "reset", e.Reset); cerr != nil && err == nil {
						err = cerr
					}
				}()
			}
			if err := r.external.hook(ctx, "setup", e.Setup); err != nil {
				return err
			}
		} else if e.Reset != "" {
			defer func() {
				if cerr := r.external.hook(context.WithoutCancel(ctx), "reset", e.Reset); cerr != nil && err == nil {
					err = cerr
				}
			}()
		}
	}
	if s.Peer == PeerExternal && s.External.IKE != nil {
		defer func() {
			if cerr := r.endExternalIKE(); cerr != nil && err == nil {
				err = cerr
			}
		}()
		if err := r.negotiateExternal(ctx, capDir); err != nil {
			return err
		}
	}
	if s.Peer == PeerLinuxXFRM {
		r.opts.progress("%s: the Linux kernel's ESP as gw2", s.Name)
		defer func() {
			if cerr := r.detachKernel(); cerr != nil && err == nil {
				err = cerr
			}
		}()
		if err := r.attachKernel(ctx); err != nil {
			return err
		}
	}
	if err := r.warmUp(ctx); err != nil {
		return err
	}
	if err := r.setupPhantoms(); err != nil {
		return err
	}
	if capDir != "" {
		for _, h := range []string{"hostA", "hostB"} {
			c, err := testbed.StartTcpdump(r.host(h).ns, "eth0", filepath.Join(capDir, h+".pcap"), "ip or ip6", 0)
			if err != nil {
				return fmt.Errorf("inner capture on %s: %w", h, err)
			}
			defer c.Stop()
		}
	}
	before, err := r.stableSnapshot(ctx)
	if err != nil {
		return err
	}
	res.Steps = r.traffic(ctx)
	r.settle()
	if ctx.Err() != nil {
		return fmt.Errorf("scenario stopped: %w", context.Cause(ctx))
	}
	after, err := r.stableSnapshot(ctx)
	if err != nil {
		return err
	}
	d := after.minus(before)
	if r.external != nil && r.external.rekeyed() {
		// The device's counters of the CHILD_SA before a rekey went with
		// it: its counts compare nothing.
		d.GW[1] = gateway.Stats{}
	}
	res.Gateways, res.WAN = d.GW, d.WAN
	for i, n := range []string{"hostA", "gw1", "gw2", "hostB"} {
		if moved := mapMinus(after.SNMP[i], before.SNMP[i]); len(moved) > 0 {
			if res.Kernel == nil {
				res.Kernel = map[string]map[string]uint64{}
			}
			res.Kernel[n] = moved
		}
	}
	res.Metrics, res.Balances = r.metrics(d, res.Steps)
	r.tunnelMetrics(res.Metrics, d.GW[1])
	r.ikeMetrics(res.Metrics, before, after, res.Steps, r.windows)
	r.externalIKE(res.Metrics, before.GW[0], after.GW[0])
	if r.external != nil {
		res.ExternalSPIs = r.external.spis
	}
	res.Actions = r.tunnels.results
	if r.external != nil && r.s.External.Counters != "" {
		res.ExternalCounters = []string{before.ExternalCounters, after.ExternalCounters}
	}
	if r.kernel != nil {
		res.KernelXfrm, res.KernelDevices, res.KernelBoots = d.KernelXfrm, d.KernelDevices, r.kernel.k.Boots
	}
	for _, e := range s.Expect {
		got, want, pass := e.check.eval(res.Metrics)
		res.Verdicts = append(res.Verdicts, Verdict{Metric: e.Metric, Expr: e.Expr, Got: got, Want: want, Pass: pass, Line: e.Line})
	}
	if r.external != nil {
		for _, v := range res.Verdicts {
			if !v.Pass {
				res.Hint = r.external.hint(res.Metrics, len(d.GW[1].SAs) > 0)
				break
			}
		}
	}
	var stepErrs []string
	for _, st := range res.Steps {
		if st.Error != "" {
			stepErrs = append(stepErrs, fmt.Sprintf("step %s: %s", st.Name, st.Error))
		}
	}
	if len(stepErrs) > 0 {
		return errors.New(strings.Join(stepErrs, "; "))
	}
	return nil
}

// customize writes given keys and soft lifetimes into the SA file. (In
// transport mode the gateways route what they send each other into their
// TUN devices themselves, and pick the SA by peer.)
func (r *runner) customize(cfg *sa.Config) error {
	spec := r.s.SA
	for i, s := range cfg.SAs {
		s.Soft = spec.Lifetimes.Soft.sa()
		if err := spec.header(s); err != nil {
			return err
		}
		if len(spec.Keys.Given) == 2 { // read and checked at parse
			s.EncKey, s.AuthKey = spec.keys[i][0], spec.keys[i][1]
		}
		if err := s.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// quietMLD makes the kernel send its unsolicited MLD reports for a new
// TUN device at once rather than over the next second or two. The reports
// (from ::, to ff02::16) enter the TUN and the gateway seals them like any
// other packet: sent in the middle of a scenario they would cross the
// tunnel uncounted by the traffic steps.
func quietMLD(t *netns.Topology) error {
	for _, ns := range []*netns.Namespace{t.GW1, t.GW2} {
		if err := ns.Sysctl(map[string]string{
			"net/ipv6/conf/default/mldv1_unsolicited_report_interval": "1",
			"net/ipv6/conf/default/mldv2_unsolicited_report_interval": "1",
		}); err != nil {
			return err
		}
	}
	return nil
}

// warmUp resolves every neighbour the traffic needs without touching the
// tunnel (hosts to their gateways, gateways to each other over the bare
// WAN, which the relay passes unimpaired), so no scenario counts a packet
// that waited for ARP or neighbour discovery.
func (r *runner) warmUp(ctx context.Context) error {
	t := r.bed.Topo
	a := t.Addr
	gw1, gw2 := r.bed.Outer()
	pings := []struct {
		host host
		dsts []string
	}{
		{host{ns: t.HostA}, []string{a.GW1LAN4.Addr().String(), a.GW1LAN6.Addr().String()}},
		{host{ns: t.HostB}, []string{a.GW2LAN4.Addr().String(), a.GW2LAN6.Addr().String()}},
		{host{ns: t.GW1}, []string{gw2.String()}},
		{host{ns: t.GW2}, []string{gw1.String()}},
	}
	if r.external != nil {
		// The device may not answer pings; the pings still resolve the
		// neighbours, which is what the warm-up is for.
		for _, p := range []struct {
			ns  *netns.Namespace
			dst netip.Addr
		}{{t.GW1, gw2}, {t.HostB, a.GW2LAN4.Addr()}} {
			p.ns.Command(ctx, "ping", "-n", "-q", "-c", "1", "-W", "2", p.dst.String()).Run()
		}
		pings = pings[:1]
	}
	if r.kernel != nil {
		pings = pings[:3]
		if err := r.kernel.ping(ctx, gw1); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for _, p := range pings {
		for _, d := range p.dsts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Until one reply, for up to 5 s: a new address may still be
				// tentative (duplicate address detection) on a loaded machine.
				out, err := p.host.ns.Command(ctx, "ping", "-n", "-q", "-c", "1", "-i", "0.2", "-w", "5", d).CombinedOutput()
				if err != nil {
					errs <- fmt.Errorf("warm-up ping from %s to %s: %w: %s", p.host.ns.Short(), d, err, out)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// settle waits until the relay holds nothing and the counters rest.
func (r *runner) settle() {
	maxHold := 200 * time.Millisecond
	for _, c := range []*impair.Config{r.s.Impair.GW1ToGW2, r.s.Impair.GW2ToGW1} {
		if c != nil {
			if d := c.Replay.After + c.Reorder.MaxHold + c.Delay.Time + c.Delay.Jitter; d > maxHold {
				maxHold = d
			}
		}
	}
	if r.relay == nil { // a NAT router: nothing held but the kernel's queues
		time.Sleep(300 * time.Millisecond)
		return
	}
	r.relay.Settle(150*time.Millisecond, maxHold+3*time.Second)
	time.Sleep(100 * time.Millisecond) // the receiving gateway's last batch
}

func (r *runner) traffic(ctx context.Context) []StepResult {
	done := make(chan struct{})
	if len(r.s.Traffic.Actions) > 0 {
		actx, stop := context.WithCancel(ctx)
		go func() {
			defer close(done)
			r.runActions(actx, time.Now())
		}()
		defer func() {
			<-done // the actions run to their end: their times are in the file
			stop()
		}()
	} else {
		close(done)
	}
	if r.ike != nil {
		sctx, stop := context.WithCancel(ctx)
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			r.sample(sctx, 200*time.Millisecond)
		}()
		defer func() {
			stop()
			<-sampled
		}()
		// The sampler's first look names the CHILD_SAs already in force.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			r.ike.mu.Lock()
			n := len(r.ike.first)
			r.ike.mu.Unlock()
			if n > 0 {
				break
			}
		}
	}
	steps := r.s.Traffic.Steps
	out := make([]StepResult, len(steps))
	r.windows = make([]stepWindow, len(steps))
	run := func(i int) {
		if steps[i].AfterActions {
			select {
			case <-done:
			case <-ctx.Done():
			}
		}
		r.windows[i].start = time.Now()
		out[i] = r.runStep(ctx, &steps[i])
		r.windows[i].end = time.Now()
	}
	if !r.s.Traffic.Together {
		for i := range steps {
			r.opts.progress("%s: step %s (%s)", r.s.Name, steps[i].Name, steps[i].kind())
			run(i)
		}
		return out
	}
	r.opts.progress("%s: %d steps together", r.s.Name, len(steps))
	var wg sync.WaitGroup
	for i := range steps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(i)
		}()
	}
	wg.Wait()
	return out
}

// snapshot is every counter at one moment.
type snapshot struct {
	GW  [2]gateway.Stats  `json:"gw"`
	WAN wanrelay.Counters `json:"wan"`
	// TUNDrops are the packets each gateway's kernel dropped because the
	// TUN device's queue was full (the gateway did not read them in time):
	// they never reached the gateway, so it cannot count them itself.
	TUNDrops [2]uint64 `json:"tun_drops"`
	// RcvbufDrops are the UDP datagrams each host's kernel dropped for a
	// full socket receive buffer (hostA, hostB).
	RcvbufDrops [2]uint64 `json:"udp_rcvbuf_drops"`
	// KernelDrops are the packets the kernel dropped on the namespaces'
	// links — received or sent, counted per device: a full per-CPU
	// backlog on a busy machine drops packets a gateway wrote into its
	// TUN device or a veth passed on. Order: hostA, gw1, gw2, hostB. (The
	// TUN's full transmit queue is TUNDrops.)
	KernelDrops [4]uint64 `json:"kernel_drops"`
	// SNMP are the error-like IP, ICMP, UDP and TCP counters of each
	// namespace (hostA, gw1, gw2, hostB), for diagnosis.
	SNMP [4]map[string]uint64 `json:"snmp"`
	// KernelXfrm and KernelDevices are the kernel peer's
	// /proc/net/xfrm_stat and interface counters (linux-xfrm only).
	KernelXfrm    map[string]uint64 `json:"kernel_xfrm_stat,omitempty"`
	KernelDevices map[string]uint64 `json:"kernel_devices,omitempty"`
	// ExternalCounters is what the external device's counters command
	// printed.
	ExternalCounters string `json:"external_counters,omitempty"`
	// tunRx are the packets each gateway's TUN device dropped on
	// receive (a part of KernelDrops).
	tunRx [2]uint64
}

// snapshot is every counter now, with a restarted gateway's counts of
// its earlier lives added.
func (r *runner) snapshot(ctx context.Context) (snapshot, error) {
	s, err := r.rawSnapshot(ctx)
	if err != nil {
		return s, err
	}
	for i := range s.GW {
		if b := r.base.gw[i]; b != nil {
			s.GW[i] = statsPlus(*b, s.GW[i])
		}
		s.TUNDrops[i] += r.base.tun[i]
		s.KernelDrops[1+i] += r.base.tunRx[i]
	}
	return s, nil
}

// rawSnapshot is every counter as the processes and the kernel have it.
func (r *runner) rawSnapshot(ctx context.Context) (snapshot, error) {
	var s snapshot
	for i := range s.GW {
		if i == 1 && r.external != nil {
			st, out, err := r.external.stats(ctx)
			if err != nil {
				return s, err
			}
			s.GW[i], s.ExternalCounters = st, out
			continue
		}
		if i == 1 && r.kernel != nil {
			st, kc, devs, err := r.kernel.stats(ctx)
			if err != nil {
				return s, err
			}
			s.GW[i], s.KernelXfrm, s.KernelDevices = st, kc.Stat.NonZero(), devs
			continue
		}
		st, err := r.bed.Stats(ctx, i)
		if err != nil {
			return s, err
		}
		s.GW[i] = st
		l, err := r.bed.GW[i].NS.Netlink().LinkByName("esp0")
		if err != nil {
			return s, fmt.Errorf("TUN device of %s: %w", r.bed.GW[i].Name, err)
		}
		if ls := l.Attrs().Statistics; ls != nil {
			s.TUNDrops[i], s.tunRx[i] = ls.TxDropped, ls.RxDropped
		}
	}
	t := r.bed.Topo
	for i, ns := range []*netns.Namespace{t.HostA, t.GW1, t.GW2, t.HostB} {
		snmp, err := testbed.SNMP(ns)
		if err != nil {
			return s, err
		}
		switch ns {
		case t.HostA:
			s.RcvbufDrops[0] = snmp["UdpRcvbufErrors"] + snmp["Udp6RcvbufErrors"]
		case t.HostB:
			s.RcvbufDrops[1] = snmp["UdpRcvbufErrors"] + snmp["Udp6RcvbufErrors"]
		}
		s.SNMP[i] = testbed.SNMPErrors(snmp)
		links, err := ns.Netlink().LinkList()
		if err != nil {
			return s, fmt.Errorf("links of %s: %w", ns.Short(), err)
		}
		for _, l := range links {
			st := l.Attrs().Statistics
			if st == nil {
				continue
			}
			s.KernelDrops[i] += st.RxDropped
			if l.Attrs().Name != "esp0" {
				s.KernelDrops[i] += st.TxDropped
			}
		}
	}
	if r.relay != nil {
		s.WAN = r.relay.Counters()
	}
	return s, nil
}

// stableSnapshot reads the counters until two readings in a row agree, so
// a packet still inside a gateway's pipeline is not missed (at most 2s).
func (r *runner) stableSnapshot(ctx context.Context) (snapshot, error) {
	last, err := r.snapshot(ctx)
	if err != nil {
		return last, err
	}
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		next, err := r.snapshot(ctx)
		if err != nil {
			return next, err
		}
		a, _ := json.Marshal(withoutClocks(last))
		b, _ := json.Marshal(withoutClocks(next))
		if bytes.Equal(a, b) {
			return next, nil
		}
		last = next
	}
	return last, nil
}

// withoutClocks is s without what changes with time alone, for
// comparing snapshots: the IKE SAs' ages and times to rekey.
func withoutClocks(s snapshot) snapshot {
	for i := range s.GW {
		s.GW[i].IKE = nil
	}
	return s
}

// writeEspSA writes the bed's SAs as Wireshark's esp_sa table; an SA whose
// suite Wireshark cannot name (AES-GMAC, AES-CCM) is a comment line saying so.
func (r *runner) writeEspSA(dir string) error {
	var b []byte
	for _, s := range r.bed.SAs {
		line, err := sa.EspSALine(s)
		if err != nil {
			line = "# " + err.Error()
		}
		b = append(append(b, line...), '\n')
	}
	if err := secret.WriteFile(filepath.Join(dir, "esp_sa"), b); err != nil {
		return fmt.Errorf("esp_sa file: %w", err)
	}
	return nil
}
