package interop

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// XfrmPeerConfig places a Linux-kernel ESP peer: a far gateway whose inner
// network lives on the guest itself.
type XfrmPeerConfig struct {
	// Netns is the existing namespace that gets the guest's tap (a bridge
	// or relay there connects it to espgw's gateway).
	Netns string
	// Tap names the tap in Netns; empty means "kptap0".
	Tap string
	// Addr is the guest's outer address on its eth0, e.g. 198.51.100.129/24:
	// the Dst of the SAs toward the guest and the Src of those from it.
	Addr netip.Prefix
	// TapAddrs go on the tap in Netns; usually none, when the tap is a
	// port of a relay or bridge.
	TapAddrs []netip.Prefix
	// Inner are the far inner network's hosts, put on the guest's
	// loopback (e.g. 203.0.113.10/32, 2001:db8:b::10/128): tunnel-mode
	// traffic to them ends in the guest.
	Inner []netip.Prefix
	// Routes lead from the guest to the near inner networks (e.g.
	// 192.0.2.0/24 via espgw's outer address) so the kernel's route
	// lookup succeeds and its XFRM policy takes over. A route without Via
	// goes out of eth0 directly: for an inner family the outer network
	// does not carry (IPv6 inside an IPv4 tunnel).
	Routes []kernelpeer.Route
	// MTU of the tap and eth0; 0 leaves 1500.
	MTU         int
	BootTimeout time.Duration
	Logger      *slog.Logger
}

// XfrmPeer is a running Linux-kernel ESP peer (see StartXfrmPeer).
type XfrmPeer struct {
	cfg    XfrmPeerConfig
	kernel *kernelpeer.Peer
}

// StartXfrmPeer boots the kernel guest (prepared beforehand with
// kernelpeer.PrepareCommand), gives it its outer and inner addresses and
// routes, and installs sas (which may be empty; see Configure).
func StartXfrmPeer(ctx context.Context, cfg XfrmPeerConfig, sas []*sa.SA) (*XfrmPeer, error) {
	if !cfg.Addr.IsValid() {
		return nil, fmt.Errorf("start xfrm peer: XfrmPeerConfig.Addr is not set")
	}
	var viaRoutes []kernelpeer.Route
	var devRoutes []netip.Prefix
	for _, r := range cfg.Routes {
		if r.Via.IsValid() {
			viaRoutes = append(viaRoutes, r)
		} else {
			devRoutes = append(devRoutes, r.Dst)
		}
	}
	k, err := kernelpeer.Start(ctx, kernelpeer.Config{
		Netns: cfg.Netns, Tap: cfg.Tap, HostAddrs: cfg.TapAddrs,
		GuestAddrs: []netip.Prefix{cfg.Addr}, GuestRoutes: viaRoutes,
		MTU: cfg.MTU, BootTimeout: cfg.BootTimeout, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("start xfrm peer: %w", err)
	}
	x := &XfrmPeer{cfg: cfg, kernel: k}
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, a := range cfg.Inner {
		fmt.Fprintf(&script, "ip addr add %s dev lo\n", a)
	}
	for _, d := range devRoutes {
		fmt.Fprintf(&script, "ip route add %s dev eth0\n", d)
	}
	if _, err := k.Run(ctx, script.String()); err != nil {
		k.Close()
		return nil, fmt.Errorf("start xfrm peer: inner addresses and routes: %w", err)
	}
	if err := x.Configure(ctx, sas); err != nil {
		k.Close()
		return nil, err
	}
	return x, nil
}

// Configure replaces the guest's SAs and policies with sas, in one round
// trip. An SA whose Dst is the guest's address is inbound to the guest;
// one whose Src is, outbound. Tunnel SAs need selectors (the kernel's
// policies are made from them); transport SAs without selectors protect
// all traffic between their two hosts.
func (x *XfrmPeer) Configure(ctx context.Context, sas []*sa.SA) error {
	var cmds []kernelpeer.Command
	addr := x.cfg.Addr.Addr()
	for _, s := range sas {
		var dir kernelpeer.Direction
		switch {
		case addr == s.Dst || s.Dst == GuestWAN6.Addr():
			dir = kernelpeer.Inbound
		case addr == s.Src || s.Src == GuestWAN6.Addr():
			dir = kernelpeer.Outbound
		default:
			return fmt.Errorf("configure xfrm peer: %v is neither from nor to the guest's %s", s, addr)
		}
		c, err := kernelpeer.XFRMCommands(s, dir)
		if err != nil {
			return fmt.Errorf("configure xfrm peer: %w", err)
		}
		if interFamily(s) {
			// The state's selector takes the outer family unless told
			// otherwise; the kernel then refuses inner packets of the
			// other family (XfrmInStateMismatch, XfrmOutNoStates).
			c[0].Args = append(c[0].Args, "flag", "af-unspec")
		}
		cmds = append(cmds, c...)
	}
	return x.kernel.ReplaceWithCommands(ctx, cmds)
}

// interFamily reports whether a tunnel SA carries an inner family other
// than its outer one (IPv6 in IPv4 or the reverse).
func interFamily(s *sa.SA) bool {
	for _, sel := range s.Selectors {
		for _, p := range []netip.Prefix{sel.Src, sel.Dst} {
			if p.IsValid() && p.Addr().Is4() != s.Src.Is4() {
				return true
			}
		}
	}
	return false
}

// Counters reads the guest kernel's per-SA counters (`ip -s xfrm state`)
// and its global XFRM error counters (/proc/net/xfrm_stat).
func (x *XfrmPeer) Counters(ctx context.Context) (kernelpeer.Counters, error) {
	return x.kernel.Counters(ctx)
}

// PingResult is what one ping saw, from the guest or from espgw's side.
type PingResult = testbed.PingResult

// Run runs a busybox sh script in the guest ("ip" is iproute2's).
func (x *XfrmPeer) Run(ctx context.Context, script string) (string, error) {
	return x.kernel.Run(ctx, script)
}

// Kernel is the underlying guest, for what this type does not wrap.
func (x *XfrmPeer) Kernel() *kernelpeer.Peer { return x.kernel }

// Close stops the guest and removes its tap.
func (x *XfrmPeer) Close() error { return x.kernel.Close() }
