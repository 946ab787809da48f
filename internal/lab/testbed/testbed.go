// Package testbed runs two espgw gateways on the standard topology and
// drives traffic across.
//
// It runs two espgw gateways on the standard topology (hostA — gw1 — wan —
// gw2 — hostB, in network namespaces) with a fresh pair of SAs, and drives
// traffic across: the shared ground of `espgw demo`, the integration tests,
// scenarios and the bench. Gateways are real `espgw run` processes, the
// lab's one way to run one (RunGateway for a bed whose far side is not
// espgw) with the lab's one config writer (GatewayConfig); everything the
// bed makes is removed by Close. Ping (ping.go) is the lab's one ping
// runner, for beds of this package and any other namespace: it counts every
// reply that came back, late ones included; StartTcpdump (capture.go) its
// one tcpdump, and FileName its one way to make a name a file name.
package testbed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/sa"
)

// Options choose the tunnel.
type Options struct {
	// Binary is the espgw executable the gateways run (default: this one).
	Binary string
	// Nice, when not 0, runs the gateway processes at this nice(1) value.
	Nice int
	// Prefix names the namespaces; it must be unique among running beds.
	Prefix string
	Suite  sa.Suite
	// AESBits picks 128, 192 or 256 for aes ciphers (default 128).
	AESBits int
	Mode    sa.Mode
	Encap   sa.Encap
	// OuterV6 carries the tunnel over IPv6 between the gateways.
	OuterV6 bool
	// DualStack gives the gateways both WAN addresses (local: [IPv4,
	// IPv6]) and two SA pairs: the IPv4 LANs' traffic over IPv4 (SPIs
	// 0x1001 and 0x2001, Bed.SAs) and the IPv6 LANs' over IPv6 (0x1006
	// and 0x2006, Bed.SAs6), each way by a policy. Tunnel mode, one
	// tunnel; OuterV6 is ignored.
	DualStack    bool
	ESN          bool
	ReplayWindow int // default 64
	InitialSeq   uint64
	Engine       [2]string // per gateway (default: DefaultEngine)
	// WanIO is the gateways' wan-io setting (default: DefaultWanIO).
	WanIO string
	// Pprof turns the gateways' Go profiler on (pprof: PprofAddr, in each
	// gateway's namespace), for Bed.Profile.
	Pprof bool
	// XDPMode is the gateways' xdp-mode setting (default: none, which is
	// auto: generic on the WAN veths).
	XDPMode string
	Workers int
	// NoOffloads turns the TUN devices' vnet-hdr offloads off (default on).
	NoOffloads bool
	Hard       sa.Lifetime
	// WANMTU is the MTU of the WAN links and the gateways' outer MTU
	// (0: 1500).
	WANMTU int
	// TUNMTU, when set, is the gateways' TUN MTU instead of the one that
	// fits the outer MTU: larger inner packets then reach the gateways,
	// which answer them with ICMP or fragment the outer packets.
	TUNMTU int
	// Addresses, if set, replace the standard topology's addresses.
	Addresses *netns.Addresses
	// Prepare, if set, runs on the topology before the gateways start.
	Prepare func(*netns.Topology) error
	// Customize, if set, may change the SA file (keys, policies, lifetimes)
	// before both gateways get it.
	Customize func(*sa.Config) error
	// SegmentOnWire has the gateways' interfaces cut GSO super-packets
	// into packets before they leave — UDP GSO of ESP on the WAN, TCP and
	// UDP packets coalesced by GRO on the TUN toward the LANs — so that a
	// capture on the wire shows each packet on its own (needs ethtool). The
	// gateways still use the offloads; only where segmentation happens moves.
	SegmentOnWire bool
	// Tunnels, when set, makes that many SA pairs, each with its own inner
	// prefix pair and a policy each way (see Tunnel); the first is the
	// LANs'. 0: the one tunnel of two SAs and no policy.
	Tunnels int
	// IKE, when set, is each gateway's ike: section (gw1's, gw2's): the
	// gateways negotiate their SAs themselves, the bed makes none (SAs
	// stays empty) and writes no SA file.
	IKE [2]string
	Log *slog.Logger
}

// Bed is a running test bed.
type Bed struct {
	Topo *netns.Topology
	Dir  string    // configs, SA files, captures
	SAs  [2]*sa.SA // gw1→gw2 and gw2→gw1
	// SAs6 are a dual-stack bed's IPv6-outer pair (Options.DualStack).
	SAs6 [2]*sa.SA
	// Tunnels are a many-tunnel bed's SA pairs (Options.Tunnels).
	Tunnels []*Tunnel
	GW      [2]*Gateway
	opts    Options
	log     *slog.Logger
}

// Start builds the topology and starts both gateways; on error everything
// is torn down.
func Start(ctx context.Context, opts Options) (b *Bed, err error) {
	if opts.Binary == "" {
		if opts.Binary, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find the espgw binary: %w", err)
		}
	}
	opts.ReplayWindow = cmp.Or(opts.ReplayWindow, 64)
	opts.AESBits = cmp.Or(opts.AESBits, 128)
	for i := range opts.Engine {
		opts.Engine[i] = cmp.Or(opts.Engine[i], DefaultEngine())
	}
	opts.WanIO = cmp.Or(opts.WanIO, DefaultWanIO())
	opts.Log = cmp.Or(opts.Log, slog.New(slog.DiscardHandler))
	if err := netns.CheckPrerequisites(); err != nil {
		return nil, err
	}
	topo, err := netns.NewTopology(opts.Prefix, netns.TopologyOptions{Log: opts.Log, WANMTU: opts.WANMTU, Addr: opts.Addresses})
	if err != nil {
		return nil, err
	}
	b = &Bed{Topo: topo, opts: opts, log: opts.Log}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if b.Dir, err = os.MkdirTemp("", "espgw-"+opts.Prefix+"-"); err != nil {
		return b, fmt.Errorf("make work folder: %w", err)
	}
	// Interfaces made from now on (the gateways' TUNs) act as IPv6 hosts,
	// not routers: a router interface joins ff02::2 and its MLD report
	// would be the first packet into the tunnel. Forwarding follows
	// conf/all and stays on.
	for _, ns := range []*netns.Namespace{topo.GW1, topo.GW2} {
		if err := ns.Sysctl(map[string]string{"net/ipv6/conf/default/forwarding": "0"}); err != nil {
			return b, fmt.Errorf("quiet new interfaces in %s: %w", ns.Short(), err)
		}
	}
	if opts.Prepare != nil {
		if err = opts.Prepare(topo); err != nil {
			return b, fmt.Errorf("prepare the topology: %w", err)
		}
	}
	if opts.SegmentOnWire {
		for _, ns := range []*netns.Namespace{topo.GW1, topo.GW2} {
			for _, dev := range []string{"wan0", "lan0"} {
				if out, err := ns.Output(ctx, "ethtool", "-K", dev, "tx-udp-segmentation", "off", "tso", "off", "gso", "off"); err != nil {
					return b, fmt.Errorf("segment on the wire in %s (is ethtool installed?): %w: %s", ns.Short(), err, out)
				}
			}
		}
	}
	if opts.Tunnels > MaxTunnels {
		return b, fmt.Errorf("%d tunnels: a bed has at most %d", opts.Tunnels, MaxTunnels)
	}
	if opts.IKE[0] != "" {
		if opts.Tunnels >= 1 || opts.DualStack {
			return b, errors.New("IKE: one tunnel, one family")
		}
	} else if opts.Tunnels >= 1 {
		if opts.Mode != sa.Tunnel {
			return b, errors.New("many tunnels: tunnel mode only")
		}
		if err = b.makeTunnels(); err != nil {
			return b, err
		}
		if err = b.routeTunnels(ctx); err != nil {
			return b, err
		}
	} else if opts.DualStack {
		if opts.Mode != sa.Tunnel {
			return b, errors.New("dual stack: tunnel mode only")
		}
		if err = b.makeDualStackSAs(); err != nil {
			return b, err
		}
	} else if err = b.makeSAs(); err != nil {
		return b, err
	}
	for i, ns := range []*netns.Namespace{topo.GW1, topo.GW2} {
		g := &Gateway{Name: ns.Short(), NS: ns}
		if g.Config, err = b.writeConfig(i); err != nil {
			return b, err
		}
		b.GW[i] = g
		if err = b.StartGateway(ctx, i); err != nil {
			return b, err
		}
	}
	return b, nil
}

// Outer returns the outer (WAN) addresses of gw1 and gw2 in the family the
// tunnel uses.
func (b *Bed) Outer() (netip.Addr, netip.Addr) {
	a := b.Topo.Addr
	if b.opts.OuterV6 {
		return a.GW1WAN6.Addr(), a.GW2WAN6.Addr()
	}
	return a.GW1WAN4.Addr(), a.GW2WAN4.Addr()
}

func (b *Bed) makeSAs() error {
	for i, spi := range []uint32{0x1001, 0x2001} {
		s, err := b.newSA(spi, i == 1)
		if err != nil {
			return err
		}
		s.InitialSeq = b.opts.InitialSeq
		b.SAs[i] = s
	}
	return b.writeSAs(&sa.Config{SAs: b.SAs[:]})
}

// makeDualStackSAs writes a dual-stack bed's SA file: the IPv4 pair, the
// IPv6 pair, and a policy per LAN prefix naming the pair of its family.
func (b *Bed) makeDualStackSAs() error {
	a := b.Topo.Addr
	cfg := &sa.Config{}
	for i, spi := range []uint32{0x1001, 0x2001, 0x1006, 0x2006} {
		s, err := b.newSA(spi, i%2 == 1)
		if err != nil {
			return err
		}
		if i >= 2 {
			s.Src, s.Dst = a.GW1WAN6.Addr(), a.GW2WAN6.Addr()
			if i == 3 {
				s.Src, s.Dst = s.Dst, s.Src
			}
			b.SAs6[i-2] = s
		} else {
			s.Src, s.Dst = a.GW1WAN4.Addr(), a.GW2WAN4.Addr()
			if i == 1 {
				s.Src, s.Dst = s.Dst, s.Src
			}
			b.SAs[i] = s
		}
		s.InitialSeq = b.opts.InitialSeq
		cfg.SAs = append(cfg.SAs, s)
	}
	for _, p := range []struct {
		dst netip.Prefix
		spi uint32
	}{{a.LANB4, 0x1001}, {a.LANA4, 0x2001}, {a.LANB6, 0x1006}, {a.LANA6, 0x2006}} {
		cfg.SPD = append(cfg.SPD, sa.Policy{Priority: 10, Selector: sa.Selector{Dst: p.dst}, Action: sa.Protect, SPI: p.spi})
	}
	return b.writeSAs(cfg)
}

// newSA is an SA of the bed's suite and settings with fresh keys, gw1→gw2
// or, back, gw2→gw1.
func (b *Bed) newSA(spi uint32, back bool) (*sa.SA, error) {
	enc, auth, err := sa.RandomKeys(b.opts.Suite, b.opts.AESBits)
	if err != nil {
		return nil, fmt.Errorf("random keys for %s: %w", b.opts.Suite, err)
	}
	s := &sa.SA{SPI: spi, Mode: b.opts.Mode, Encap: b.opts.Encap, Suite: b.opts.Suite,
		EncKey: enc, AuthKey: auth, ESN: b.opts.ESN, ReplayWindow: b.opts.ReplayWindow, Hard: b.opts.Hard}
	s.Src, s.Dst = b.Outer()
	if back {
		s.Src, s.Dst = s.Dst, s.Src
	}
	if s.Encap == sa.EncapUDP {
		s.SrcPort, s.DstPort = sa.DefaultNATTPort, sa.DefaultNATTPort
	}
	return s, nil
}

// writeSAs writes the SA file both gateways read, after Options.Customize.
func (b *Bed) writeSAs(cfg *sa.Config) error {
	if b.opts.Customize != nil {
		if err := b.opts.Customize(cfg); err != nil {
			return fmt.Errorf("customize the SAs: %w", err)
		}
	}
	return sa.WriteFile(filepath.Join(b.Dir, "sas.yaml"), cfg)
}

// writeConfig writes gateway i's configuration: its outer address, a TUN
// routing the far LAN, the shared SA file.
func (b *Bed) writeConfig(i int) (string, error) {
	path := filepath.Join(b.Dir, fmt.Sprintf("gw%d.yaml", i+1))
	return path, b.gatewayConfig(i).Write(path)
}

// Reconfigure stops gateway i, has edit change its configuration (an ike:
// section in place of the SA file, say), writes it and starts the gateway
// again.
func (b *Bed) Reconfigure(ctx context.Context, i int, edit func(*GatewayConfig)) error {
	if b.GW[i].cmd != nil {
		if _, err := b.GW[i].Stop(syscall.SIGTERM); err != nil {
			return fmt.Errorf("reconfigure %s: %w", b.GW[i].Name, err)
		}
	}
	c := b.gatewayConfig(i)
	edit(&c)
	if err := c.Write(b.GW[i].Config); err != nil {
		return fmt.Errorf("reconfigure %s: %w", b.GW[i].Name, err)
	}
	return b.StartGateway(ctx, i)
}

// gatewayConfig is gateway i's configuration.
func (b *Bed) gatewayConfig(i int) GatewayConfig {
	a := b.Topo.Addr
	gw1, gw2 := b.Outer()
	local, peer := gw1, gw2
	routes := []netip.Prefix{a.LANB4, a.LANB6}
	if i == 1 {
		local, peer = gw2, gw1
		routes = []netip.Prefix{a.LANA4, a.LANA6}
	}
	if b.opts.Tunnels >= 1 {
		routes = append(routes, []netip.Prefix{TunnelBlockB, TunnelBlockA}[i])
	}
	var locals []netip.Addr
	if b.opts.DualStack {
		locals = []netip.Addr{a.GW1WAN4.Addr(), a.GW1WAN6.Addr()}
		if i == 1 {
			locals = []netip.Addr{a.GW2WAN4.Addr(), a.GW2WAN6.Addr()}
		}
	}
	saFile := "sas.yaml"
	if b.opts.IKE[i] != "" {
		saFile = ""
	}
	return GatewayConfig{Extra: b.opts.IKE[i], Local: local, Locals: locals, Peer: peer, Engine: b.opts.Engine[i], WanIO: b.opts.WanIO, Metrics: "127.0.0.1:9478",
		TUN: "esp0", TUNMTU: b.opts.TUNMTU, Routes: routes, NoOffloads: b.opts.NoOffloads, OuterMTU: b.opts.WANMTU, Workers: b.opts.Workers,
		XDPMode: b.opts.XDPMode, Pprof: pprofAddr(b.opts.Pprof), SAFile: saFile, StateDir: fmt.Sprintf("gw%d-state", i+1), Control: fmt.Sprintf("gw%d.sock", i+1)}
}

// StartGateway starts gateway i's espgw run process, with args after its
// -c CONFIG, and waits until its stats endpoint answers.
func (b *Bed) StartGateway(ctx context.Context, i int, args ...string) error {
	g := b.GW[i]
	run := append([]string{"run", "-c", g.Config}, args...)
	cmd := g.NS.Command(context.Background(), b.opts.Binary, run...)
	if b.opts.Nice != 0 {
		// nice(1) execs the gateway, so the PID stays the gateway's.
		cmd = g.NS.Command(context.Background(), "nice", append([]string{"-n", strconv.Itoa(b.opts.Nice), b.opts.Binary}, run...)...)
	}
	return g.start(ctx, b.opts.Binary, cmd, b.Topo.Start)
}

// StopGateway signals gateway i and waits for it to exit, returning its output.
func (b *Bed) StopGateway(i int, sig syscall.Signal) (string, error) {
	if b.GW[i] == nil || b.GW[i].cmd == nil {
		return "", errors.New("gateway not running")
	}
	return b.GW[i].Stop(sig)
}

// Stats reads gateway i's counters through `espgw stats --json` in its namespace.
func (b *Bed) Stats(ctx context.Context, i int) (gateway.Stats, error) {
	return GatewayStats(ctx, b.GW[i].NS, b.opts.Binary)
}

// PprofAddr is where a gateway of a bed with Options.Pprof serves Go's
// profiler, in its own namespace.
const PprofAddr = "127.0.0.1:6060"

func pprofAddr(on bool) string {
	if on {
		return PprofAddr
	}
	return ""
}

// Profile takes a CPU profile of gateway i over d and writes it to path
// (pprof's format, for go tool pprof). The bed needs Options.Pprof.
func (b *Bed) Profile(ctx context.Context, i int, d time.Duration, path string) error {
	return b.GW[i].Profile(ctx, d, path)
}

// Close stops the gateways and removes every namespace, link and file.
func (b *Bed) Close() error {
	var errs []error
	for i, g := range b.GW {
		if g != nil && g.cmd != nil {
			if _, err := b.StopGateway(i, syscall.SIGTERM); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if b.Topo != nil {
		errs = append(errs, b.Topo.Close())
	}
	if b.Dir != "" {
		os.RemoveAll(b.Dir)
	}
	return errors.Join(errs...)
}

// DefaultWanIO is the wan-io setting gateways get when none is given:
// $ESPGW_WAN_IO, or socket. Running the test suite with ESPGW_WAN_IO=xdp
// puts every end-to-end test's raw ESP on AF_XDP.
func DefaultWanIO() string {
	return cmp.Or(os.Getenv("ESPGW_WAN_IO"), "socket")
}

// DefaultEngine is the engine gateways get when none is named: $ESPGW_ENGINE,
// or cpu. Running the test suite with ESPGW_ENGINE=aesni (or ring, …) puts
// every end-to-end test on that engine.
func DefaultEngine() string {
	return cmp.Or(os.Getenv("ESPGW_ENGINE"), "cpu")
}

// FileName is name made a file name: every character but letters, digits,
// '.', '+', '-' and '_' made '_'.
func FileName(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune(".+-_", r):
			return r
		}
		return '_'
	}, name)
}
