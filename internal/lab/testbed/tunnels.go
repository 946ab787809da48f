package testbed

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/espgw/espgw/internal/control"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/sa"
)

// A bed of tunnels (Options.Tunnels) gives each tunnel its own SA
// pair and its own inner prefix pair, with a protect policy each way:
// tunnel 0 is the LANs' (SPIs 0x1001 and 0x2001, as on a one-tunnel bed),
// tunnel i > 0 carries A(i) behind gw1 to B(i) behind gw2. The hosts own
// the whole of their blocks (a local route), so any address in them can
// send and receive, and the gateways route the blocks: the TUN toward the
// far side, the LAN toward their own host.
var (
	// TunnelBlockA and TunnelBlockB hold the tunnels' prefixes behind gw1
	// and gw2 (10.x: only ever inside the bed's own namespaces).
	TunnelBlockA = netip.MustParsePrefix("10.64.0.0/10")
	TunnelBlockB = netip.MustParsePrefix("10.128.0.0/10")
)

// MaxTunnels is the most tunnels a bed gives their own /24 pair.
const MaxTunnels = 1 << 14

// Tunnel is one SA pair of a many-tunnel bed and the inner prefixes it
// carries.
type Tunnel struct {
	Index int
	// Out is gw1→gw2, Back gw2→gw1.
	Out, Back *sa.SA
	// A is the prefix behind gw1, B the one behind gw2; HostA and HostB
	// are the addresses traffic of the tunnel uses.
	A, B         netip.Prefix
	HostA, HostB netip.Addr
}

// tunnelPrefix is tunnel i's /24 in block.
func tunnelPrefix(block netip.Prefix, i int) netip.Prefix {
	b := block.Addr().As4()
	b[1] += byte(i >> 8)
	b[2] = byte(i)
	return netip.PrefixFrom(netip.AddrFrom4(b), 24)
}

// TunnelSPIs are tunnel i's SPIs in its generation gen (0 at the start, one
// more per rekey): tunnel 0's first pair is the one-tunnel bed's.
func TunnelSPIs(i, gen int) (out, back uint32) {
	if i == 0 && gen == 0 {
		return 0x1001, 0x2001
	}
	return uint32(gen+1)<<24 | 1<<20 | uint32(i), uint32(gen+1)<<24 | 2<<20 | uint32(i)
}

// NewTunnel makes tunnel i's SAs in generation gen, with fresh keys and the
// bed's suite and settings.
func (b *Bed) NewTunnel(i, gen int) (*Tunnel, error) {
	if i < 0 || i >= MaxTunnels {
		return nil, fmt.Errorf("tunnel %d: a bed has tunnels 0…%d", i, MaxTunnels-1)
	}
	t := &Tunnel{Index: i}
	a := b.Topo.Addr
	if i == 0 {
		t.A, t.B, t.HostA, t.HostB = a.LANA4, a.LANB4, a.HostA4.Addr(), a.HostB4.Addr()
	} else {
		t.A, t.B = tunnelPrefix(TunnelBlockA, i), tunnelPrefix(TunnelBlockB, i)
		t.HostA, t.HostB = t.A.Addr().Next(), t.B.Addr().Next()
	}
	outSPI, backSPI := TunnelSPIs(i, gen)
	var err error
	if t.Out, err = b.newSA(outSPI, false); err != nil {
		return nil, err
	}
	if t.Back, err = b.newSA(backSPI, true); err != nil {
		return nil, err
	}
	return t, nil
}

// Policies are the tunnel's two protect policies (each gateway uses the one
// whose SA is outbound on it).
func (t *Tunnel) Policies() []sa.Policy {
	if t.Index == 0 {
		var ps []sa.Policy
		for _, dst := range []netip.Prefix{t.B, lan6(t.B)} {
			ps = append(ps, sa.Policy{Priority: 10, Selector: sa.Selector{Dst: dst}, Action: sa.Protect, SPI: t.Out.SPI})
		}
		for _, dst := range []netip.Prefix{t.A, lan6(t.A)} {
			ps = append(ps, sa.Policy{Priority: 10, Selector: sa.Selector{Dst: dst}, Action: sa.Protect, SPI: t.Back.SPI})
		}
		return ps
	}
	return []sa.Policy{
		{Priority: 10, Selector: sa.Selector{Src: t.A, Dst: t.B}, Action: sa.Protect, SPI: t.Out.SPI},
		{Priority: 10, Selector: sa.Selector{Src: t.B, Dst: t.A}, Action: sa.Protect, SPI: t.Back.SPI},
	}
}

// lan6 is the IPv6 LAN beside tunnel 0's IPv4 one.
func lan6(p netip.Prefix) netip.Prefix {
	a := netns.StandardAddresses()
	if p == a.LANA4 {
		return a.LANA6
	}
	return a.LANB6
}

// makeTunnels writes the SA file of a many-tunnel bed.
func (b *Bed) makeTunnels() error {
	cfg := &sa.Config{}
	for i := range b.opts.Tunnels {
		t, err := b.NewTunnel(i, 0)
		if err != nil {
			return err
		}
		b.Tunnels = append(b.Tunnels, t)
		cfg.SAs = append(cfg.SAs, t.Out, t.Back)
		cfg.SPD = append(cfg.SPD, t.Policies()...)
	}
	b.SAs = [2]*sa.SA{b.Tunnels[0].Out, b.Tunnels[0].Back}
	return b.writeSAs(cfg)
}

// routeTunnels gives the hosts their blocks and the gateways their routes.
func (b *Bed) routeTunnels(ctx context.Context) error {
	t, a := b.Topo, b.Topo.Addr
	for _, c := range []struct {
		ns   *netns.Namespace
		args []string
	}{
		{t.HostA, []string{"route", "add", "local", TunnelBlockA.String(), "dev", "lo"}},
		{t.HostB, []string{"route", "add", "local", TunnelBlockB.String(), "dev", "lo"}},
		{t.GW1, []string{"route", "add", TunnelBlockA.String(), "via", a.HostA4.Addr().String()}},
		{t.GW2, []string{"route", "add", TunnelBlockB.String(), "via", a.HostB4.Addr().String()}},
	} {
		if out, err := c.ns.Output(ctx, "ip", c.args...); err != nil {
			return fmt.Errorf("tunnels: ip %v in %s: %w: %s", c.args, c.ns.Short(), err, out)
		}
	}
	return nil
}

// ControlSocket is gateway i's control socket.
func (b *Bed) ControlSocket(i int) string { return filepath.Join(b.Dir, fmt.Sprintf("gw%d.sock", i+1)) }

// both makes each change on gw1, then on gw2, through their control
// sockets; what names the changes in errors.
func (b *Bed) both(what string, reqs ...control.Request) error {
	var cs [2]*control.Client
	for i := range cs {
		c, err := control.Dial(b.ControlSocket(i))
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		defer c.Close()
		cs[i] = c
	}
	for _, req := range reqs {
		for i, c := range cs {
			if _, err := c.Do(req); err != nil {
				return fmt.Errorf("%s, %s: gw%d: %w", what, strings.TrimSpace(req.Op+" "+req.Phase), i+1, err)
			}
		}
	}
	return nil
}

// AddTunnels puts tunnels in force on both running gateways through their
// control sockets: the SAs, then the policies, each one atomic change per
// gateway.
func (b *Bed) AddTunnels(ts ...*Tunnel) error {
	var sas []*sa.SA
	var pols []sa.Policy
	for _, t := range ts {
		sas = append(sas, t.Out, t.Back)
		pols = append(pols, t.Policies()...)
	}
	raw, err := control.SAEntries(sas...)
	if err != nil {
		return err
	}
	praw, err := control.PolicyEntries(pols...)
	if err != nil {
		return err
	}
	return b.both(fmt.Sprintf("add %d tunnels", len(ts)), control.Request{Op: "sa.add", SA: raw}, control.Request{Op: "policy.add", SPD: praw})
}

// DelTunnels takes tunnels out of force on both gateways: their policies,
// then their SAs.
func (b *Bed) DelTunnels(ts ...*Tunnel) error {
	var pols []sa.Policy
	req := control.Request{Op: "sa.del"}
	for _, t := range ts {
		pols = append(pols, t.Policies()...)
		for _, s := range []*sa.SA{t.Out, t.Back} {
			req.IDs = append(req.IDs, control.SAID{SPI: fmt.Sprintf("%#x", s.SPI), Dst: s.Dst.String()})
		}
	}
	praw, err := control.PolicyEntries(pols...)
	if err != nil {
		return err
	}
	return b.both(fmt.Sprintf("delete %d tunnels", len(ts)), control.Request{Op: "policy.del", SPD: praw}, req)
}

// RekeyTunnel rolls old over to next (the same tunnel in its next
// generation) on both gateways, make-before-break as espgw sa rekey does:
// next's inbound SAs on both, then outbound switched on both, then after
// grace the old inbound SAs deleted.
func (b *Bed) RekeyTunnel(old, next *Tunnel, grace time.Duration) error {
	raw, err := control.SAEntries(next.Out, next.Back)
	if err != nil {
		return err
	}
	req := control.Request{Op: "sa.rekey", SA: raw, Replaces: []string{fmt.Sprintf("%#x", old.Out.SPI), fmt.Sprintf("%#x", old.Back.SPI)}}
	what := fmt.Sprintf("rekey tunnel %d", old.Index)
	install, change, retire := req, req, req
	install.Phase, change.Phase, retire.Phase = control.PhaseInstall, control.PhaseSwitch, control.PhaseRetire
	if err := b.both(what, install, change); err != nil {
		return err
	}
	time.Sleep(grace)
	return b.both(what, retire)
}
