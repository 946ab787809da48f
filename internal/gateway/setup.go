package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/transport"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/engines"
	"github.com/espgw/espgw/sa"
	"github.com/espgw/espgw/tun"
)

// Runtime is a gateway built from a Config: its TUN device, sockets and
// engine, ready to Run.
type Runtime struct {
	*Gateway
	Config *Config
	TUN    *tun.Device
	Engine offload.Engine
	conns  map[connKey]*transport.Conn
	rules  []*netlink.Rule
}

type connKey struct {
	v6    bool
	encap sa.Encap
}

// Start builds everything a Config asks for in the current network
// namespace: the engine, one socket per outer family and encapsulation the
// SAs use, the TUN device with its MTU, addresses and routes.
func Start(cfg *Config, log *slog.Logger) (rt *Runtime, err error) {
	if log == nil {
		log = slog.Default()
	}
	rt = &Runtime{Config: cfg, conns: map[connKey]*transport.Conn{}}
	defer func() {
		if err != nil {
			rt.Close()
		}
	}()
	rt.Engine, err = engines.New(cfg.Engine, engines.Options{Workers: cfg.Workers})
	if err != nil {
		return rt, fmt.Errorf("%s: engine: %w", cfg.File, err)
	}
	mtu := cfg.TUN.MTU
	for _, s := range cfg.SAs {
		k := connKey{v6: s.Src.Is6(), encap: s.Encap}
		if rt.conns[k] == nil {
			if err := rt.open(k, cfg); err != nil {
				return rt, err
			}
		}
		if cfg.TUN.MTU == 0 {
			m, err := InnerMTU(cfg.OuterMTU, s)
			if err != nil {
				return rt, fmt.Errorf("%s: MTU for %s: %w", cfg.File, s, err)
			}
			if mtu == 0 || m < mtu {
				mtu = m
			}
		}
	}
	if mtu == 0 {
		mtu = cfg.OuterMTU - 100
	}
	mode := tun.OffloadAuto
	if !cfg.TUN.Offloads {
		mode = tun.OffloadOff
	}
	rt.TUN, err = tun.Create(cfg.TUN.Name, tun.Options{MTU: mtu, Offloads: mode, Log: log})
	if err != nil {
		return rt, fmt.Errorf("%s: %w", cfg.File, err)
	}
	for _, a := range cfg.TUN.Addresses {
		if err := rt.TUN.AddAddress(a); err != nil {
			return rt, fmt.Errorf("%s: tun address %s: %w", cfg.File, a, err)
		}
	}
	// No IPv6 link-local address on the TUN: the kernel would otherwise send
	// router solicitations and MLD reports into the tunnel. Routes need none.
	quiet := "/proc/sys/net/ipv6/conf/" + cfg.TUN.Name + "/addr_gen_mode"
	if err := os.WriteFile(quiet, []byte("1"), 0o644); err != nil && !os.IsNotExist(err) {
		log.Warn("could not turn off IPv6 link-local addressing on the TUN", "err", err)
	}
	if err := rt.TUN.Up(); err != nil {
		return rt, fmt.Errorf("%s: tun up: %w", cfg.File, err)
	}
	for _, r := range cfg.TUN.Routes {
		if err := rt.TUN.AddRoute(tun.Route{Dst: r}); err != nil {
			return rt, fmt.Errorf("%s: tun route %s: %w", cfg.File, r, err)
		}
	}
	rt.rules, err = routeTransportPeers(cfg.TUN.Name, transportPeers(cfg))
	if err != nil {
		return rt, fmt.Errorf("%s: %w", cfg.File, err)
	}
	stateDir := ""
	if cfg.StateDir != "" {
		stateDir = cfg.rel(cfg.StateDir)
		if err := os.MkdirAll(stateDir, 0o700); err != nil {
			return rt, fmt.Errorf("%s: state-dir: %w", cfg.File, err)
		}
	}
	var conns []Conn
	for _, w := range rt.conns {
		conns = append(conns, w)
	}
	rt.Gateway = New(rt.TUN, conns, rt.pick, rt.Engine, Options{
		Local: cfg.Local, InnerMTU: mtu, OuterMTU: cfg.OuterMTU, ICMPSource: prefixAddrs(cfg.TUN.Addresses), StateDir: stateDir, Workers: cfg.Workers, Batch: cfg.Batch, Inline: cfg.Inline, Log: log,
	})
	if err := rt.Load(cfg.SAs, cfg.SPD); err != nil {
		return rt, fmt.Errorf("%s: %w", cfg.File, err)
	}
	log.Info("gateway ready", "tun", cfg.TUN.Name, "mtu", mtu, "offloads", rt.TUN.Offloads(), "engine", rt.Engine.Name(), "sockets", len(conns))
	return rt, nil
}

func (rt *Runtime) open(k connKey, cfg *Config) error {
	local := netip.IPv4Unspecified()
	if k.v6 {
		local = netip.IPv6Unspecified()
	}
	kind := transport.RawESP
	port := uint16(0)
	if k.encap == sa.EncapUDP {
		kind, port = transport.UDPEncap, sa.DefaultNATTPort
		for _, s := range cfg.SAs {
			if s.Encap == sa.EncapUDP && s.Src.Is6() == k.v6 && s.SrcPort != 0 && rt.isOutbound(cfg, s) {
				port = s.SrcPort
			}
		}
	}
	c, err := transport.Open(transport.Config{Kind: kind, Local: netip.AddrPortFrom(local, port), GSO: kind == transport.UDPEncap, GRO: kind == transport.UDPEncap, Mark: fwMark})
	if err != nil {
		return fmt.Errorf("%s: open %s socket: %w", cfg.File, kind, err)
	}
	rt.conns[k] = c
	return nil
}

func (rt *Runtime) isOutbound(cfg *Config, s *sa.SA) bool {
	for _, l := range cfg.Local {
		if l == s.Src {
			return true
		}
	}
	return false
}

func (rt *Runtime) pick(s *sa.SA) Conn {
	return rt.conns[connKey{v6: s.Dst.Is6(), encap: s.Encap}]
}

// Run runs the gateway until ctx ends.
func (rt *Runtime) Run(ctx context.Context) error { return rt.Gateway.Run(ctx) }

// Reload reads the SAs again and puts them in force without dropping the
// tunnel.
func (rt *Runtime) Reload() error {
	next, err := rt.Config.Reload()
	if err != nil {
		return err
	}
	return rt.Load(next.SAs, next.SPD)
}

// Close releases what Start built and Run did not close.
func (rt *Runtime) Close() {
	for _, r := range rt.rules {
		netlink.RuleDel(r)
	}
	if rt.Gateway == nil {
		for _, c := range rt.conns {
			c.Close()
		}
		if rt.TUN != nil {
			rt.TUN.Close()
		}
	}
	if rt.Engine != nil {
		rt.Engine.Close()
	}
}

// InnerMTU is the largest inner packet an SA carries in outerMTU bytes.
func InnerMTU(outerMTU int, s *sa.SA) (int, error) {
	o := tun.Overhead{OuterIP: 20, ESPHeader: esp.HeaderLen, IV: s.Suite.IVLen(), Block: s.Suite.BlockLen(), ICV: s.Suite.ICVLen()}
	if s.Dst.Is6() {
		o.OuterIP = 40
	}
	if s.Encap == sa.EncapUDP {
		o.UDP = 8
	}
	m, err := tun.InnerMTU(outerMTU, o)
	if s.Mode == sa.Transport {
		// The packet keeps its own header: no outer one is added.
		m += o.OuterIP
	}
	return m, err
}

func prefixAddrs(ps []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range ps {
		out = append(out, p.Addr())
	}
	return out
}
