package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/runinfo"
	"github.com/espgw/espgw/internal/lab/strongswan"
)

// Sides of an IKE setup measure.
const (
	SideEspgw  = "espgw"
	SideCharon = "charon"
)

// IKEOptions choose a tunnel-setup bench (espgw bench --ike-tunnels N): N
// tunnels (IKE_SA_INIT, IKE_AUTH with the first CHILD_SA) set up from gw1's
// WAN address to gw2's, for each pair of initiator and responder among
// espgw's ike package and strongSwan's charon, then every CHILD_SA of the
// espgw initiator rekeyed, all in one run on one topology so that the
// ratios between the pairs hold on a busy machine.
type IKEOptions struct {
	Prefix  string
	Tunnels int
	// Parallel is how many setups (or rekeys) an initiator keeps in
	// flight (default 8; more than 16 meets espgw's COOKIE threshold).
	Parallel int
	IKE, ESP string // proposals (default aes128-sha256-x25519, aes128gcm16)
	// Sides are the implementations measured (default espgw and, when it
	// is installed, charon); every initiator meets every responder.
	Sides []string
	// GatewayTunnels, when not 0, also runs an espgw gateway pair that
	// negotiates that many tunnels itself (IKEGateways): time to every
	// tunnel up and carrying traffic, memory per tunnel, every CHILD_SA
	// rekeyed under load. Binary is the espgw executable it runs
	// (default: this one).
	GatewayTunnels int
	Binary         string
	// ProfileDir, when set, has the gateway pair serve Go's profiler and
	// writes a CPU profile of each into this folder while gw1's rekeys
	// fall due.
	ProfileDir string
	// Dir, when set, keeps the charons' configurations and logs there;
	// otherwise they go in a temporary folder removed at the end.
	Dir string
	// Timeout bounds each pair's setups and rekeys (default 5 minutes).
	Timeout  time.Duration
	Progress func(what string, done, total int)
}

// IKEPair is one initiator against one responder.
type IKEPair struct {
	Initiator string `json:"initiator"`
	Responder string `json:"responder"`
	Asked     int    `json:"asked"`
	// Established is how many tunnels the initiator saw complete (IKE
	// SA and first CHILD_SA), Failed how many it gave up on.
	Established int `json:"established"`
	Failed      int `json:"failed"`
	// Seconds is from the first IKE_SA_INIT until the last tunnel was
	// established; PerSec is Established over it.
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"tunnels_per_sec"`
	// Rekeys is how many of the tunnels had their CHILD_SA rekeyed
	// (CREATE_CHILD_SA with REKEY_SA, the old one deleted), in
	// RekeySeconds (espgw initiators only).
	Rekeys       int     `json:"rekeys,omitempty"`
	RekeyFailed  int     `json:"rekey_failed,omitempty"`
	RekeySeconds float64 `json:"rekey_seconds,omitempty"`
	RekeysPerSec float64 `json:"rekeys_per_sec,omitempty"`
	// HeapPerTunnel and RSSPerTunnel are this process's growth in live
	// Go heap (after a collection) and resident memory per established
	// tunnel (espgw against espgw: both ends' IKE SA and CHILD_SA, one
	// process).
	HeapPerTunnel float64 `json:"heap_per_tunnel_bytes,omitempty"`
	RSSPerTunnel  float64 `json:"rss_per_tunnel_bytes,omitempty"`
	// ResponderCPU is the responder's CPU time over the setups (charon's
	// process; this process's for espgw, initiator included).
	ResponderCPU float64 `json:"responder_cpu_seconds,omitempty"`
	// ResponderCPUPerTunnel is ResponderCPU over Established: with charon
	// initiating, what the responder alone spent on each tunnel, the
	// figure that holds when the initiator sets the pace.
	ResponderCPUPerTunnel float64 `json:"responder_cpu_per_tunnel_seconds,omitempty"`
	Error                 string  `json:"error,omitempty"`
}

// IKERatio is one pair's rate over another's, measured in the same run.
type IKERatio struct {
	Measure string  `json:"measure"`
	Of      string  `json:"of"`
	Over    string  `json:"over"`
	Value   float64 `json:"value"`
}

// IKEReport is an IKE tunnel-setup bench run.
type IKEReport struct {
	Started    time.Time       `json:"started"`
	Elapsed    time.Duration   `json:"elapsed_ns"`
	Command    string          `json:"command,omitempty"`
	LoadAvg    string          `json:"loadavg,omitempty"`
	LoadEnd    string          `json:"loadavg_end,omitempty"`
	IKETunnels int             `json:"ike_tunnels"`
	Parallel   int             `json:"parallel"`
	IKE        string          `json:"ike_proposals"`
	ESP        string          `json:"esp_proposals"`
	Results    []*IKEPair      `json:"results"`
	Gateways   *IKEGateways    `json:"gateways,omitempty"`
	Ratios     []IKERatio      `json:"ratios,omitempty"`
	Partial    bool            `json:"partial"`
	Problems   []string        `json:"problems,omitempty"`
	Machine    runinfo.Machine `json:"machine"`
}

func (o *IKEOptions) defaults() {
	// Not the other benches' prefix: one may run beside this one.
	o.Prefix = cmp.Or(o.Prefix, "ikb")
	o.Parallel = cmp.Or(o.Parallel, 8)
	o.IKE = cmp.Or(o.IKE, "aes128-sha256-x25519")
	o.ESP = cmp.Or(o.ESP, "aes128gcm16")
	o.Timeout = cmp.Or(o.Timeout, 5*time.Minute)
	if len(o.Sides) == 0 {
		o.Sides = []string{SideEspgw}
		if strongswan.CheckInstalled() == nil {
			o.Sides = append(o.Sides, SideCharon)
		}
	}
	if o.Progress == nil {
		o.Progress = func(string, int, int) {}
	}
	if o.Binary == "" {
		o.Binary, _ = os.Executable()
	}
}

// CheckIKE says what this machine lacks to run o.
func CheckIKE(o IKEOptions) error {
	o.defaults()
	if o.Tunnels < 1 {
		return fmt.Errorf("ike bench: %d tunnels: want at least 1", o.Tunnels)
	}
	if o.GatewayTunnels < 0 || o.GatewayTunnels > 1<<16 {
		return fmt.Errorf("ike bench: %d gateway tunnels: want 0…%d", o.GatewayTunnels, 1<<16)
	}
	if o.Parallel < 1 {
		return fmt.Errorf("ike bench: %d in flight: want at least 1", o.Parallel)
	}
	if _, err := ike.ParseProposals(ike.ProtoIKE, o.IKE); err != nil {
		return fmt.Errorf("ike bench: IKE proposals %q: %w", o.IKE, err)
	}
	if _, err := ike.ParseProposals(ike.ProtoESP, o.ESP); err != nil {
		return fmt.Errorf("ike bench: ESP proposals %q: %w", o.ESP, err)
	}
	for _, s := range o.Sides {
		switch s {
		case SideEspgw:
		case SideCharon:
			if err := strongswan.CheckInstalled(); err != nil {
				return fmt.Errorf("ike bench: charon: %w", err)
			}
		default:
			return fmt.Errorf("ike bench: side %q: want %s or %s", s, SideEspgw, SideCharon)
		}
	}
	if err := netns.CheckPrerequisites(); err != nil {
		return fmt.Errorf("ike bench: %w", err)
	}
	return nil
}

// ikeSecret is the bench's pre-shared key: only ever inside its own
// namespaces.
const ikeSecret = "an IKE bench's pre-shared key"

// RunIKE measures every initiator against every responder in turn.
func RunIKE(ctx context.Context, o IKEOptions) (*IKEReport, error) {
	o.defaults()
	if err := CheckIKE(o); err != nil {
		return nil, err
	}
	rep := &IKEReport{Started: time.Now(), IKETunnels: o.Tunnels, Parallel: o.Parallel, IKE: o.IKE, ESP: o.ESP, Machine: runinfo.Describe()}
	rep.LoadAvg = rep.Machine.LoadAvg
	topo, err := netns.NewTopology(o.Prefix, netns.TopologyOptions{})
	if err != nil {
		return nil, err
	}
	defer topo.Close()
	dir := o.Dir
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("ike bench: %w", err)
		}
	} else {
		if dir, err = os.MkdirTemp("", "espgw-"+o.Prefix+"-ike-"); err != nil {
			return nil, fmt.Errorf("ike bench: %w", err)
		}
		defer os.RemoveAll(dir)
	}
	b := &ikeBed{o: &o, topo: topo, dir: dir}
	var pairs [][2]string
	for _, i := range o.Sides {
		for _, r := range o.Sides {
			pairs = append(pairs, [2]string{i, r})
		}
	}
	for k, p := range pairs {
		if ctx.Err() != nil {
			break
		}
		o.Progress(fmt.Sprintf("%s initiating, %s responding", p[0], p[1]), k, len(pairs))
		res := &IKEPair{Initiator: p[0], Responder: p[1], Asked: o.Tunnels}
		if err := b.measure(ctx, res); err != nil {
			res.Error = err.Error()
			if ctx.Err() == nil {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s → %s: %v", p[0], p[1], err))
			}
		}
		rep.Results = append(rep.Results, res)
	}
	if o.GatewayTunnels > 0 && ctx.Err() == nil {
		o.Progress(fmt.Sprintf("an espgw gateway pair with %d tunnels", o.GatewayTunnels), len(pairs), len(pairs)+1)
		rep.Gateways = &IKEGateways{Tunnels: o.GatewayTunnels}
		if err := b.measureGateways(ctx, rep.Gateways); err != nil {
			rep.Gateways.Error = err.Error()
			if ctx.Err() == nil {
				rep.Problems = append(rep.Problems, fmt.Sprintf("gateway pair: %v", err))
			}
		}
	}
	o.Progress("done", 1, 1)
	rep.ratios()
	rep.Partial = ctx.Err() != nil
	rep.LoadEnd = runinfo.Describe().LoadAvg
	rep.Elapsed = time.Since(rep.Started)
	return rep, nil
}

// pair is the result of initiator i against responder r, or nil.
func (r *IKEReport) pair(i, resp string) *IKEPair {
	for _, x := range r.Results {
		if x.Initiator == i && x.Responder == resp && x.Error == "" {
			return x
		}
	}
	return nil
}

func (r *IKEReport) ratios() {
	add := func(measure string, of, over *IKEPair, v func(*IKEPair) float64) {
		if of == nil || over == nil || v(over) == 0 {
			return
		}
		r.Ratios = append(r.Ratios, IKERatio{Measure: measure, Of: of.Initiator + " → " + of.Responder,
			Over: over.Initiator + " → " + over.Responder, Value: v(of) / v(over)})
	}
	setup := func(p *IKEPair) float64 { return p.PerSec }
	rekey := func(p *IKEPair) float64 { return p.RekeysPerSec }
	for _, i := range []string{SideEspgw, SideCharon} {
		add("setup rate, espgw responder ÷ charon responder", r.pair(i, SideEspgw), r.pair(i, SideCharon), setup)
	}
	for _, resp := range []string{SideEspgw, SideCharon} {
		add("setup rate, espgw initiator ÷ charon initiator", r.pair(SideEspgw, resp), r.pair(SideCharon, resp), setup)
	}
	// With charon initiating, the espgw responder is alone in this
	// process: its CPU per tunnel against charon's.
	// CPU time counts in ticks of 10 ms: a ratio needs some of them.
	if e, c := r.pair(SideCharon, SideEspgw), r.pair(SideCharon, SideCharon); e != nil && c != nil && e.ResponderCPU >= 0.1 && c.ResponderCPU >= 0.1 {
		r.Ratios = append(r.Ratios, IKERatio{Measure: "responder CPU per tunnel, charon ÷ espgw (higher: espgw cheaper)",
			Of: "charon → charon", Over: "charon → espgw", Value: c.ResponderCPUPerTunnel / e.ResponderCPUPerTunnel})
	}
	add("CHILD_SA rekey rate, espgw responder ÷ charon responder", r.pair(SideEspgw, SideEspgw), r.pair(SideEspgw, SideCharon), rekey)
}

// ikeBed is the topology the pairs take turns on: initiators on gw1,
// responders on gw2.
type ikeBed struct {
	o    *IKEOptions
	topo *netns.Topology
	dir  string
	runs int
}

func (b *ikeBed) config(id, peer string, lts, rts netip.Prefix) (ike.Config, error) {
	ikeP, err := ike.ParseProposals(ike.ProtoIKE, b.o.IKE)
	if err != nil {
		return ike.Config{}, err
	}
	espP, err := ike.ParseProposals(ike.ProtoESP, b.o.ESP)
	if err != nil {
		return ike.Config{}, err
	}
	return ike.Config{LocalID: ike.FQDN(id), RemoteID: ike.FQDN(peer), PSK: []byte(ikeSecret), IKE: ikeP, ESP: espP,
		LocalTS: []ike.Selector{ike.PrefixSelector(lts)}, RemoteTS: []ike.Selector{ike.PrefixSelector(rts)}}, nil
}

// espgwEndpoint is an ike endpoint on addr in ns, serving until stop.
func (b *ikeBed) espgwEndpoint(ns *netns.Namespace, addr netip.Addr, cfg ike.Config) (ep *ike.Endpoint, stop func(), err error) {
	var tr *ike.Transport
	if err := ns.Do(func() (err error) { tr, err = ike.Listen(addr); return err }); err != nil {
		return nil, nil, fmt.Errorf("IKE sockets on %s in %s: %w", addr, ns.Short(), err)
	}
	if ep, err = ike.NewEndpoint(cfg, addr, tr.Send); err != nil {
		tr.Close()
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.Serve(ctx, ep); close(done) }()
	return ep, func() { cancel(); tr.Close(); <-done }, nil
}

// charon starts a charon in ns: an initiator (gw1) or a responder (gw2).
func (b *ikeBed) charon(ctx context.Context, initiator bool) (*strongswan.Charon, error) {
	a := b.topo.Addr
	b.runs++
	cfg := strongswan.Config{NS: b.topo.GW2, Dir: filepath.Join(b.dir, fmt.Sprintf("charon%d", b.runs)), Local: a.GW2WAN4.Addr(), Remote: a.GW1WAN4.Addr(),
		LocalNet: a.LANB4, RemoteNet: a.LANA4, ID: "gw2", PeerID: "gw1", PSK: ikeSecret, IKE: b.o.IKE, ESP: b.o.ESP, RealNAT: true, Quiet: true,
		// Every IKE SA kept (no replacing the older one of the same
		// identities), and each initiation a new IKE SA rather than a
		// CHILD_SA in an established one.
		// The bench's initiator is one peer address: charon's limits of
		// half-open IKE SAs per address (COOKIEs past 3, drops past 5)
		// are lifted, as espgw's responder has none (its COOKIE
		// threshold, 16 half-open SAs in all, is below charon's 30).
		Setup: []string{"uniqueids=no"}, Options: []string{"\treuse_ikesa = no", "\tcookie_threshold_ip = 1000", "\tblock_threshold = 1000"}}
	if initiator {
		cfg.NS, cfg.Local, cfg.Remote, cfg.LocalNet, cfg.RemoteNet, cfg.ID, cfg.PeerID = b.topo.GW1, a.GW1WAN4.Addr(), a.GW2WAN4.Addr(), a.LANA4, a.LANB4, "gw1", "gw2"
	}
	c, err := strongswan.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := c.WaitConnection(ctx, 20*time.Second); err != nil {
		c.Kill()
		return nil, err
	}
	return c, nil
}

// measure sets up res.Asked tunnels from res.Initiator to res.Responder
// and, with an espgw initiator, rekeys each one's CHILD_SA.
func (b *ikeBed) measure(ctx context.Context, res *IKEPair) error {
	ctx, cancel := context.WithTimeout(ctx, b.o.Timeout)
	defer cancel()
	a := b.topo.Addr
	respPID := os.Getpid()
	if res.Responder == SideCharon {
		c, err := b.charon(ctx, false)
		if err != nil {
			return fmt.Errorf("charon responder: %w", err)
		}
		defer c.Kill()
		respPID = c.PID()
	} else {
		cfg, err := b.config("gw2", "gw1", a.LANB4, a.LANA4)
		if err != nil {
			return err
		}
		_, stop, err := b.espgwEndpoint(b.topo.GW2, a.GW2WAN4.Addr(), cfg)
		if err != nil {
			return fmt.Errorf("espgw responder: %w", err)
		}
		defer stop()
	}
	cpu0, _ := cpuTime(respPID)
	var err error
	if res.Initiator == SideCharon {
		err = b.charonSetups(ctx, res)
	} else {
		err = b.espgwSetups(ctx, res)
	}
	if cpu1, cerr := cpuTime(respPID); cerr == nil {
		res.ResponderCPU = (cpu1 - cpu0).Seconds()
		if res.Established > 0 {
			res.ResponderCPUPerTunnel = res.ResponderCPU / float64(res.Established)
		}
	}
	return err
}

// espgwSetups has espgw's ike set up the tunnels from gw1, Parallel in
// flight, then rekey each one's CHILD_SA the same way.
func (b *ikeBed) espgwSetups(ctx context.Context, res *IKEPair) error {
	a := b.topo.Addr
	cfg, err := b.config("gw1", "gw2", a.LANA4, a.LANB4)
	if err != nil {
		return err
	}
	var heap0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heap0)
	rss0, _, _ := memory(os.Getpid())
	ep, stop, err := b.espgwEndpoint(b.topo.GW1, a.GW1WAN4.Addr(), cfg)
	if err != nil {
		return fmt.Errorf("espgw initiator: %w", err)
	}
	defer stop()
	remote := netip.AddrPortFrom(a.GW2WAN4.Addr(), ike.Port)
	sas := make([]*ike.IKESA, res.Asked)
	errs := make([]error, res.Asked)
	start := time.Now()
	var last atomic.Int64
	parallel(res.Asked, b.o.Parallel, func(i int) {
		if ctx.Err() != nil {
			errs[i] = ctx.Err()
			return
		}
		s, err := ep.Initiate(ctx, remote)
		if err == nil {
			sas[i] = s
			last.Store(int64(time.Since(start)))
		}
		errs[i] = err
	})
	for _, e := range errs {
		if e == nil {
			res.Established++
		} else {
			res.Failed++
		}
	}
	res.Seconds = time.Duration(last.Load()).Seconds()
	if res.Seconds > 0 {
		res.PerSec = float64(res.Established) / res.Seconds
	}
	if res.Responder == SideEspgw && res.Established > 0 {
		var heap1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&heap1)
		rss1, _, _ := memory(os.Getpid())
		res.HeapPerTunnel = (float64(heap1.HeapAlloc) - float64(heap0.HeapAlloc)) / float64(res.Established)
		res.RSSPerTunnel = (float64(rss1) - float64(rss0)) / float64(res.Established)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%d of %d setups failed, the first: %w", res.Failed, res.Asked, firstError(errs))
	}

	rerrs := make([]error, res.Asked)
	start = time.Now()
	last.Store(0)
	parallel(res.Asked, b.o.Parallel, func(i int) {
		kids := sas[i].Children()
		if len(kids) == 0 {
			rerrs[i] = errors.New("no CHILD_SA to rekey")
			return
		}
		if _, err := sas[i].RekeyChild(ctx, kids[0]); err != nil {
			rerrs[i] = err
			return
		}
		last.Store(int64(time.Since(start)))
	})
	for _, e := range rerrs {
		if e == nil {
			res.Rekeys++
		} else {
			res.RekeyFailed++
		}
	}
	res.RekeySeconds = time.Duration(last.Load()).Seconds()
	if res.RekeySeconds > 0 {
		res.RekeysPerSec = float64(res.Rekeys) / res.RekeySeconds
	}
	if res.RekeyFailed > 0 {
		return fmt.Errorf("%d of %d CHILD_SA rekeys failed, the first: %w", res.RekeyFailed, res.Asked, firstError(rerrs))
	}
	return nil
}

// charonSetups has a charon on gw1 initiate the tunnels (stroke up-nb,
// one IKE SA each), keeping Parallel in flight, counting completions in
// its log.
func (b *ikeBed) charonSetups(ctx context.Context, res *IKEPair) error {
	c, err := b.charon(ctx, true)
	if err != nil {
		return fmt.Errorf("charon initiator: %w", err)
	}
	defer c.Kill()
	log := &logCounter{path: c.LogPath(), done: []byte("CHILD_SA espgw{"), failed: []byte("giving up after")}
	// One shell in charon's namespaces runs stroke up-nb, in the
	// background, for each line it reads: starting the stroke processes
	// costs that shell, not this process, where an espgw responder runs.
	sh := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(c.PID()), "-m", "-n", "sh", "-c",
		"while read x; do /usr/lib/ipsec/stroke up-nb espgw >/dev/null 2>&1 & done; wait")
	var shOut bytes.Buffer
	sh.Stdout, sh.Stderr = &shOut, &shOut
	in, err := sh.StdinPipe()
	if err != nil {
		return fmt.Errorf("charon initiator: %w", err)
	}
	if err := sh.Start(); err != nil {
		return fmt.Errorf("charon initiator: start the stroke shell: %w", err)
	}
	defer func() { in.Close(); sh.Wait() }()
	start := time.Now()
	initiated := 0
	var seen time.Duration
	for {
		if err := log.scan(); err != nil {
			return err
		}
		if log.doneN > res.Established {
			res.Established, seen = log.doneN, time.Since(start)
		}
		res.Failed = log.failedN
		if res.Established+res.Failed >= res.Asked {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%d of %d tunnels established: %w", res.Established, res.Asked, ctx.Err())
		}
		if n := min(res.Asked-initiated, b.o.Parallel-(initiated-res.Established-res.Failed)); n > 0 {
			if _, err := in.Write(bytes.Repeat([]byte("up\n"), n)); err != nil {
				return fmt.Errorf("charon initiator: the stroke shell: %w: %s", err, shOut.String())
			}
			initiated += n
		}
		time.Sleep(2 * time.Millisecond)
	}
	res.Seconds = seen.Seconds()
	if res.Seconds > 0 {
		res.PerSec = float64(res.Established) / res.Seconds
	}
	if res.Failed > 0 {
		return fmt.Errorf("%d of %d setups failed (charon's log: %s)", res.Failed, res.Asked, c.LogPath())
	}
	return nil
}

// logCounter counts lines of a growing log that hold done (CHILD_SA …
// established) or failed, reading only what was added since last time.
type logCounter struct {
	path           string
	done, failed   []byte
	off            int64
	partial        []byte
	doneN, failedN int
}

func (l *logCounter) scan() error {
	f, err := os.Open(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read charon's log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(l.off, io.SeekStart); err != nil {
		return fmt.Errorf("read charon's log: %w", err)
	}
	data, err := io.ReadAll(bufio.NewReader(f))
	if err != nil {
		return fmt.Errorf("read charon's log: %w", err)
	}
	l.off += int64(len(data))
	data = append(l.partial, data...)
	end := bytes.LastIndexByte(data, '\n')
	l.partial = slices.Clone(data[end+1:])
	for line := range bytes.Lines(data[:end+1]) {
		switch {
		case bytes.Contains(line, l.done) && bytes.Contains(line, []byte("established")):
			l.doneN++
		case bytes.Contains(line, l.failed):
			l.failedN++
		}
	}
	return nil
}

// parallel runs fn(0 … n-1) on k goroutines.
func parallel(n, k int, fn func(int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(k, n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		})
	}
	wg.Wait()
}

func firstError(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// Print writes the report as tables, the ratios of the same run below.
func (r *IKEReport) Print(w io.Writer) {
	if r.Partial {
		fmt.Fprintln(w, "PARTIAL RESULTS: the run was interrupted.")
	}
	fmt.Fprintf(w, "espgw bench --ike-tunnels %d: IKE %s, ESP %s, %d in flight per initiator; load average at start %s, at end %s\n",
		r.IKETunnels, r.IKE, r.ESP, r.Parallel, r.LoadAvg, r.LoadEnd)
	if r.Machine.Host != "" {
		fmt.Fprintf(w, "machine: %s\n", r.Machine)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "initiator\tresponder\testablished\tfailed\ts to all\ttunnels/s\tresponder CPU s\tresp. CPU ms/tunnel\trekeys\trekeys/s\theap B/tunnel\tRSS B/tunnel\t")
	dash := func(v float64, f string) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf(f, v)
	}
	for _, x := range r.Results {
		rekeys := "-"
		if x.Initiator == SideEspgw {
			rekeys = fmt.Sprintf("%d/%d", x.Rekeys, x.Asked)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d\t%.2f\t%.1f\t%.2f\t%.3f\t%s\t%s\t%s\t%s\t\n", x.Initiator, x.Responder, x.Established, x.Asked, x.Failed,
			x.Seconds, x.PerSec, x.ResponderCPU, x.ResponderCPUPerTunnel*1e3, rekeys, dash(x.RekeysPerSec, "%.1f"), dash(x.HeapPerTunnel, "%.0f"), dash(x.RSSPerTunnel, "%.0f"))
	}
	tw.Flush()
	if len(r.Ratios) > 0 {
		fmt.Fprintln(w, "\nRatios (same run, same topology):")
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, x := range r.Ratios {
			fmt.Fprintf(tw, "%s\t%s over %s\t%.2f×\n", x.Measure, x.Of, x.Over, x.Value)
		}
		tw.Flush()
	}
	if g := r.Gateways; g != nil {
		fmt.Fprintf(w, "\nespgw gateway pair, %d tunnels (gw1 one IKE connection per tunnel, each to its own address of gw2):\n", g.Tunnels)
		if g.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", g.Error)
		}
		fmt.Fprintf(w, "  %d of %d CHILD_SAs in force at gw1; all %.2f s after its launch, a load over every tunnel out whole at %.2f s\n", g.Up, g.Tunnels, g.UpSeconds, g.TrafficSeconds)
		fmt.Fprintf(w, "  gw2 RSS %.1f MiB, %.0f B per tunnel over gw2 with none up\n", float64(g.RSS)/(1<<20), g.RSSPerTunnel)
		fmt.Fprintf(w, "  %d CHILD_SA rekeys by gw1 over %.1f s under %.0f pkt/s spread over every tunnel: %d of %d packets lost\n",
			g.Rekeys, g.RekeySeconds, g.Rate, g.RekeyLost, g.RekeySent)
		fmt.Fprintf(w, "  the kernels' loss counters meanwhile: %v\n", g.KernelLosses)
		for i, c := range g.Counts {
			fmt.Fprintf(w, "  gw%d: TUN in %d, out %d; wire in %d, out %d; drops %v\n", i+1, c.TunIn, c.TunOut, c.WireIn, c.WireOut, c.Drops)
		}
	}
	for _, x := range r.Results {
		if x.Error != "" {
			fmt.Fprintf(w, "%s → %s: %s\n", x.Initiator, x.Responder, x.Error)
		}
	}
}
