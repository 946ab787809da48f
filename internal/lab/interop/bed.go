package interop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/internal/lab/wanrelay"
	"github.com/espgw/espgw/sa"
)

// The bed's addresses are the standard topology's (netns.StandardAddresses):
// the guest stands where gw2 does, with hostB's addresses on its loopback.
// The WAN is one subnet here, gw1 and the guest facing each other across
// the relay (the standard topology routes between two halves).
var (
	std      = netns.StandardAddresses()
	HostA4   = std.HostA4
	GW1LAN4  = std.GW1LAN4
	HostA6   = std.HostA6
	GW1LAN6  = std.GW1LAN6
	GW1WAN   = netip.PrefixFrom(std.GW1WAN4.Addr(), 24)
	GuestWAN = netip.PrefixFrom(std.GW2WAN4.Addr(), 24)
	// The WAN's IPv6 addresses, for cases with OuterV6 (added on first use).
	GW1WAN6   = netip.MustParsePrefix("2001:db8:1::1/64")
	GuestWAN6 = netip.MustParsePrefix("2001:db8:1::2/64")
	// The far inner network: hosts on the guest's loopback.
	FarHost4 = netip.PrefixFrom(std.HostB4.Addr(), 32)
	FarHost6 = netip.PrefixFrom(std.HostB6.Addr(), 128)
)

// Interface names: gw1's LAN and WAN ports, the relay's port toward gw1,
// the guest's tap in the wan namespace, and gw1's TUN.
const (
	lanIf   = "lan"
	wanIf   = "wan"
	relayIf = "gw1"
	tapIf   = "kptap0"
	tunIf   = "esp0"
	// transportTable holds gw1's route into the TUN for transport mode.
	transportTable = "100"
	// wanMTU leaves room for ESP around the largest inner packets the
	// tests send (1400-byte pings, 1500-byte TCP segments), so neither
	// side fragments.
	wanMTU = 1600
)

// BedOptions shape a Bed.
type BedOptions struct {
	// Binary is the espgw executable gw1 runs.
	Binary string
	// Prefix names the namespaces (unique among concurrent runs).
	Prefix      string
	BootTimeout time.Duration
	Log         *slog.Logger
	// Scapy puts scapy's ESP responder (StartScapyPeer) in a namespace of
	// its own behind the relay instead of booting the kernel guest.
	Scapy bool
}

// Bed is hostA — gw1 (espgw run) — wan (wanrelay) — Linux kernel guest,
// each in its own namespace; the guest is the far gateway, with the far
// inner network on its loopback. The guest boots once; Configure sets up
// each case.
type Bed struct {
	NS               *netns.Bed
	HostA, GW1, WAN  *netns.Namespace
	Peer             *kernelpeer.Peer // the kernel guest, unless BedOptions.Scapy
	Far              *netns.Namespace
	Scapy            *ScapyPeer // the current case's responder, with BedOptions.Scapy
	useScapy         bool
	Dir              string
	binary           string
	log              *slog.Logger
	gw               *testbed.Gateway
	relay            *wanrelay.Running
	tunnel           *Tunnel
	transportRouting bool
	wanV6            bool // gw1's IPv6 WAN address is in place
}

// Case is one tunnel between gw1 and the guest.
type Case struct {
	Suite   sa.Suite
	AESBits int // 128 or 256 for AES suites
	Mode    sa.Mode
	Encap   sa.Encap
	ESN     bool
	// Impair is what the relay does to gw1's packets toward the guest;
	// nil impairs nothing. ImpairBack is the same for the guest's packets
	// toward gw1.
	Impair, ImpairBack *impair.Config
	// Header sets the outer-header options of both SAs (sa/header.go);
	// nil leaves the defaults.
	Header func(*sa.SA)
	// OuterV6 runs the SAs between the WAN's IPv6 addresses.
	OuterV6 bool
}

// Name is the case as a test name: suite/mode/encap/esn.
func (c Case) Name() string {
	return fmt.Sprintf("%s/%s/%s/esn=%v", testbed.SuiteName(c.Suite, c.AESBits), c.Mode, EncapName(c.Encap), c.ESN)
}

// EncapName names an encapsulation for test names and the matrix.
func EncapName(e sa.Encap) string {
	if e == sa.EncapUDP {
		return "udp-4500"
	}
	return "esp"
}

// Tunnel is a configured case: its SAs and the addresses its traffic uses.
type Tunnel struct {
	Case
	// Out carries gw1 → guest, In guest → gw1.
	Out, In *sa.SA
	// Near is where traffic starts on espgw's side (hostA in tunnel mode,
	// gw1 itself in transport mode), NearAddrs its addresses; FarAddrs are
	// the guest's.
	Near      *netns.Namespace
	NearAddrs []netip.Addr
	FarAddrs  []netip.Addr
}

// StartBed builds the namespaces and links and boots the guest. On error
// everything made so far is removed.
func StartBed(ctx context.Context, opts BedOptions) (b *Bed, err error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if _, err := os.Stat(opts.Binary); err != nil {
		return nil, fmt.Errorf("start interop bed: espgw binary: %w", err)
	}
	nsb, err := netns.New(opts.Prefix, opts.Log)
	if err != nil {
		return nil, err
	}
	b = &Bed{NS: nsb, binary: opts.Binary, log: opts.Log, useScapy: opts.Scapy}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if b.Dir, err = os.MkdirTemp("", "espgw-interop-"); err != nil {
		return b, fmt.Errorf("start interop bed: %w", err)
	}
	for _, p := range []struct {
		ns   **netns.Namespace
		name string
	}{{&b.HostA, "hosta"}, {&b.GW1, "gw1"}, {&b.WAN, "wan"}} {
		if *p.ns, err = nsb.AddNamespace(p.name); err != nil {
			return b, err
		}
	}
	// The wan namespace is a bump in the wire: no addresses, no IPv6, no
	// forwarding, so its own kernel never answers on the relay's ports.
	if err := b.WAN.Sysctl(map[string]string{
		"net/ipv6/conf/all/disable_ipv6": "1", "net/ipv6/conf/default/disable_ipv6": "1",
	}); err != nil {
		return b, err
	}
	if err := nsb.Connect(b.HostA, lanIf, b.GW1, lanIf, netns.LinkOptions{}); err != nil {
		return b, err
	}
	if err := nsb.Connect(b.GW1, wanIf, b.WAN, relayIf, netns.LinkOptions{MTU: wanMTU}); err != nil {
		return b, err
	}
	steps := []func() error{
		func() error { return b.HostA.AddAddr(lanIf, HostA4) },
		func() error { return b.HostA.AddAddr(lanIf, HostA6) },
		func() error { return b.HostA.AddRoute(netip.MustParsePrefix("0.0.0.0/0"), GW1LAN4.Addr()) },
		func() error { return b.HostA.AddRoute(netip.MustParsePrefix("::/0"), GW1LAN6.Addr()) },
		func() error { return b.GW1.AddAddr(lanIf, GW1LAN4) },
		func() error { return b.GW1.AddAddr(lanIf, GW1LAN6) },
		func() error { return b.GW1.AddAddr(wanIf, GW1WAN) },
		b.GW1.EnableForwarding,
		// Transport mode delivers the guest's packets to gw1's own
		// address from the TUN, while the route back to the guest points
		// out of the WAN port: strict reverse-path filtering would drop
		// them.
		func() error {
			return b.GW1.Sysctl(map[string]string{"net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/default/rp_filter": "0"})
		},
		// New devices (gw1's TUN) get IPv6 host behaviour: with
		// forwarding=1 inherited they would join ff02::2 and send MLD
		// reports into the tunnel at creation (see the package doc).
		// Forwarding itself follows conf/all.
		func() error { return b.GW1.Sysctl(map[string]string{"net/ipv6/conf/default/forwarding": "0"}) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return b, fmt.Errorf("start interop bed: %w", err)
		}
	}
	if opts.Scapy {
		if b.Far, err = nsb.AddNamespace("far"); err != nil {
			return b, err
		}
		if err := nsb.Connect(b.WAN, tapIf, b.Far, "eth0", netns.LinkOptions{MTU: wanMTU}); err != nil {
			return b, err
		}
		if err := b.Far.AddAddr("eth0", GuestWAN); err != nil {
			return b, err
		}
		return b, nil
	}
	b.Peer, err = kernelpeer.Start(ctx, kernelpeer.Config{Netns: b.WAN.Name(), Tap: tapIf, GuestAddrs: []netip.Prefix{GuestWAN},
		MTU: wanMTU, BootTimeout: opts.BootTimeout, Logger: opts.Log})
	return b, err
}

// Configure sets up c: fresh SAs with random keys, the guest's XFRM state
// and policies, gw1's gateway (restarted on the new SA file), gw1's routing
// for transport mode, and a fresh relay with c's impairments.
func (b *Bed) Configure(ctx context.Context, c Case) (*Tunnel, error) {
	if c.AESBits == 0 {
		c.AESBits = 128
	}
	b.stopRelay()
	if err := b.stopGateway(); err != nil {
		return nil, err
	}
	t, err := b.makeTunnel(c)
	if err != nil {
		return nil, err
	}
	if err := b.setWANv6(ctx, c.OuterV6); err != nil {
		return nil, err
	}
	if b.useScapy {
		if b.Scapy != nil {
			b.Scapy.Close()
			b.Scapy = nil
		}
		owned := append([]netip.Addr{}, t.FarAddrs...)
		if b.Scapy, err = StartScapyPeer(ctx, ScapyPeerConfig{Netns: b.Far.Name(), Iface: "eth0", Local: GuestWAN.Addr(), Owned: owned}, []*sa.SA{t.Out, t.In}); err != nil {
			return nil, err
		}
	} else {
		wan, near := []netip.Prefix{GuestWAN}, []netip.Addr{GW1WAN.Addr()}
		if c.OuterV6 {
			wan, near = append(wan, GuestWAN6), append(near, GW1WAN6.Addr())
		}
		if err := b.Peer.ConfigureGateway(ctx, kernelpeer.Gateway{WAN: wan, LAN: []netip.Prefix{FarHost4, FarHost6}, MTU: wanMTU,
			Routes: []kernelpeer.Route{
				{Dst: HostA4.Masked(), Via: GW1WAN.Addr()},
				{Dst: HostA6.Masked()}, // IPv6 inside the IPv4 tunnel: out of eth0, then XFRM
			},
			Near: b.GW1, NearIf: wanIf, NearAddrs: near, ToGuest: t.Out, FromGuest: t.In}); err != nil {
			return nil, err
		}
	}
	if err := b.startGateway(ctx, t); err != nil {
		return nil, err
	}
	if err := b.setTransportRouting(c.Mode == sa.Transport); err != nil {
		return nil, err
	}
	impaired := func(c *impair.Config) impair.Config {
		if c == nil {
			return impair.DefaultConfig()
		}
		return *c
	}
	if b.relay, err = wanrelay.Start(wanrelay.Config{Netns: b.WAN.Name(), A: relayIf, B: tapIf, AToB: impaired(c.Impair), BToA: impaired(c.ImpairBack), Logger: b.log}); err != nil {
		return nil, err
	}
	b.tunnel = t
	return t, nil
}

func (b *Bed) makeTunnel(c Case) (*Tunnel, error) {
	enc, auth, err := sa.RandomKeys(c.Suite, c.AESBits)
	if err != nil {
		return nil, fmt.Errorf("keys for %s: %w", c.Name(), err)
	}
	enc2, auth2, err := sa.RandomKeys(c.Suite, c.AESBits)
	if err != nil {
		return nil, fmt.Errorf("keys for %s: %w", c.Name(), err)
	}
	gw1, guest := GW1WAN.Addr(), GuestWAN.Addr()
	if c.OuterV6 {
		gw1, guest = GW1WAN6.Addr(), GuestWAN6.Addr()
	}
	out := &sa.SA{SPI: 0x1001, Mode: c.Mode, Src: gw1, Dst: guest, Encap: c.Encap, Suite: c.Suite,
		EncKey: enc, AuthKey: auth, ESN: c.ESN, ReplayWindow: 64}
	in := &sa.SA{SPI: 0x2001, Mode: c.Mode, Src: guest, Dst: gw1, Encap: c.Encap, Suite: c.Suite,
		EncKey: enc2, AuthKey: auth2, ESN: c.ESN, ReplayWindow: 64}
	if c.Encap == sa.EncapUDP {
		for _, s := range []*sa.SA{out, in} {
			s.SrcPort, s.DstPort = sa.DefaultNATTPort, sa.DefaultNATTPort
		}
	}
	if c.ESN {
		// Both directions cross 2^32 within the first packets, so the
		// high bits take part in every ICV and the carry is exercised.
		out.InitialSeq = 1<<32 - 3
		in.InitialSeq = 2<<32 - 3
	}
	if c.Header != nil {
		c.Header(out)
		c.Header(in)
	}
	t := &Tunnel{Case: c, Out: out, In: in}
	if c.Mode == sa.Tunnel {
		near4, near6 := HostA4.Masked(), HostA6.Masked()
		far4, far6 := FarHost4.Masked(), FarHost6.Masked()
		out.Selectors = []sa.Selector{{Src: near4, Dst: far4}, {Src: near6, Dst: far6}}
		in.Selectors = []sa.Selector{{Src: far4, Dst: near4}, {Src: far6, Dst: near6}}
		t.Near = b.HostA
		t.NearAddrs = []netip.Addr{HostA4.Addr(), HostA6.Addr()}
		t.FarAddrs = []netip.Addr{FarHost4.Addr(), FarHost6.Addr()}
	} else {
		t.Near = b.GW1
		t.NearAddrs = []netip.Addr{gw1}
		t.FarAddrs = []netip.Addr{guest}
	}
	return t, nil
}

// stopGateway stops gw1, if it runs.
func (b *Bed) stopGateway() error {
	if b.gw == nil {
		return nil
	}
	out, err := b.gw.Stop(syscall.SIGTERM)
	b.gw = nil
	if err != nil {
		return fmt.Errorf("stop gw1: %w\n%s", err, out)
	}
	return nil
}

// startGateway writes gw1's SA file and configuration for t and starts
// gw1 on them.
func (b *Bed) startGateway(ctx context.Context, t *Tunnel) error {
	set := &sa.Config{SAs: []*sa.SA{t.Out, t.In}}
	var routes []netip.Prefix
	if t.Mode == sa.Tunnel {
		routes = []netip.Prefix{FarHost4.Masked(), FarHost6.Masked()}
	} else {
		// The gateway picks a transport SA through the SPD; its traffic
		// reaches the TUN by the policy routes of setTransportRouting.
		set.SPD = []sa.Policy{{Selector: sa.Selector{Src: netip.PrefixFrom(t.Out.Src, t.Out.Src.BitLen()), Dst: netip.PrefixFrom(t.Out.Dst, t.Out.Dst.BitLen())},
			Action: sa.Protect, SPI: t.Out.SPI}}
	}
	if err := sa.WriteFile(filepath.Join(b.Dir, "sas.yaml"), set); err != nil {
		return fmt.Errorf("write gw1's SA file: %w", err)
	}
	// Every case's SAs are new (fresh keys, same SPIs): the sequence
	// numbers gw1 reserved for the last case's must not carry over.
	if err := os.RemoveAll(filepath.Join(b.Dir, "gw1-state")); err != nil {
		return fmt.Errorf("clear gw1's state directory: %w", err)
	}
	// ESPGW_WAN_IO=xdp puts gw1's raw ESP on AF_XDP against the same peers.
	path := filepath.Join(b.Dir, "gw1.yaml")
	if err := (testbed.GatewayConfig{Local: t.Out.Src, Peer: t.Out.Dst, Engine: "cpu", OuterMTU: wanMTU, TUN: tunIf, Routes: routes,
		SAFile: "sas.yaml", StateDir: "gw1-state", WanIO: testbed.DefaultWanIO()}).Write(path); err != nil {
		return err
	}
	var err error
	b.gw, err = testbed.RunGateway(ctx, b.GW1, b.binary, path)
	return err
}

// setTransportRouting sends gw1's own ICMP and TCP toward the guest into
// the TUN (policy routing, table 100) while the gateway's ESP to the same
// address keeps the main table and the WAN port.
func (b *Bed) setTransportRouting(on bool) error {
	guest := GuestWAN.Addr().String() + "/32"
	if b.transportRouting {
		for _, pref := range []string{"100", "101"} {
			if _, err := b.GW1.Output(context.Background(), "ip", "rule", "del", "pref", pref); err != nil {
				return err
			}
		}
		b.transportRouting = false
	}
	if !on {
		return nil
	}
	cmds := [][]string{
		{"ip", "rule", "add", "pref", "100", "to", guest, "ipproto", "icmp", "lookup", transportTable},
		{"ip", "rule", "add", "pref", "101", "to", guest, "ipproto", "tcp", "lookup", transportTable},
		{"ip", "route", "replace", guest, "dev", tunIf, "src", GW1WAN.Addr().String(), "table", transportTable},
	}
	for i, c := range cmds {
		if _, err := b.GW1.Output(context.Background(), c[0], c[1:]...); err != nil {
			return fmt.Errorf("transport-mode routing in gw1: %w", err)
		}
		if i == 1 {
			b.transportRouting = true
		}
	}
	return nil
}

// GatewayStats reads gw1's counters (`espgw stats --json`).
func (b *Bed) GatewayStats(ctx context.Context) (gateway.Stats, error) {
	return testbed.GatewayStats(ctx, b.GW1, b.binary)
}

// GatewayOutput is what gw1 has logged since its last start.
func (b *Bed) GatewayOutput() string {
	if b.gw == nil {
		return ""
	}
	return b.gw.Output()
}

// RelayCounters are the relay's counters of the current case.
func (b *Bed) RelayCounters() wanrelay.Counters {
	if b.relay == nil {
		return wanrelay.Counters{}
	}
	return b.relay.Counters()
}

// Close stops the relay, the gateway and the guest and removes the
// namespaces and files.
func (b *Bed) Close() error {
	var errs []error
	b.stopRelay()
	errs = append(errs, b.stopGateway())
	if b.Peer != nil {
		errs = append(errs, b.Peer.Close())
	}
	if b.Scapy != nil {
		errs = append(errs, b.Scapy.Close())
	}
	if b.NS != nil {
		errs = append(errs, b.NS.Close())
	}
	if b.Dir != "" {
		os.RemoveAll(b.Dir)
	}
	return errors.Join(errs...)
}

func (b *Bed) stopRelay() {
	if b.relay == nil {
		return
	}
	if err := b.relay.Close(); err != nil {
		b.log.Warn("wan relay", "err", err)
	}
	b.relay = nil
}

// Carry restarts gw1 on out (gw1 → guest) and in (guest → gw1) in place of
// the current case's SAs, leaving the guest as it is: for SAs read back
// from what the guest's kernel holds.
func (b *Bed) Carry(ctx context.Context, out, in *sa.SA) error {
	if b.tunnel == nil {
		return errors.New("carry: no case configured")
	}
	if err := b.stopGateway(); err != nil {
		return err
	}
	t := *b.tunnel
	t.Out, t.In = out, in
	if err := b.startGateway(ctx, &t); err != nil {
		return err
	}
	b.tunnel = &t
	return nil
}

// setWANv6 gives gw1's WAN port its IPv6 address for an OuterV6 case, and
// takes it away again for the others, leaving the bed as they know it.
func (b *Bed) setWANv6(ctx context.Context, on bool) error {
	if on == b.wanV6 {
		return nil
	}
	args := []string{"-6", "addr", "del", GW1WAN6.String(), "dev", wanIf}
	if on {
		args = []string{"-6", "addr", "add", GW1WAN6.String(), "dev", wanIf, "nodad"}
	}
	if _, err := b.GW1.Output(ctx, "ip", args...); err != nil {
		return fmt.Errorf("gw1's IPv6 WAN address: %w", err)
	}
	b.wanV6 = on
	return nil
}
