package netns

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
)

// NAT is a namespace that stands as a NAT in front of another, home: a
// veth between them (home's end HomeIf with Home, the NAT's InsideIf with
// Inside), home's default route through it, and home's UDP masqueraded to
// Ports when it leaves by OutIf, which the caller adds to the NAT (a
// guest's tap, a veth to the WAN).
type NAT struct {
	Name             string // the NAT's namespace, short name
	HomeIf, InsideIf string
	Home, Inside     netip.Prefix
	OutIf            string
	Ports            string // iptables --to-ports, such as "40000-40999"
}

// AddNAT adds the NAT n in front of home and returns its namespace. It
// needs iptables.
func (b *Bed) AddNAT(ctx context.Context, home *Namespace, n NAT) (*Namespace, error) {
	nat, err := b.AddNamespace(n.Name)
	if err != nil {
		return nil, err
	}
	if err := b.Connect(home, n.HomeIf, nat, n.InsideIf, LinkOptions{}); err != nil {
		return nil, err
	}
	def := netip.MustParsePrefix("0.0.0.0/0")
	if n.Home.Addr().Is6() {
		def = netip.MustParsePrefix("::/0")
	}
	for _, step := range []func() error{
		func() error { return home.AddAddr(n.HomeIf, n.Home) },
		func() error { return nat.AddAddr(n.InsideIf, n.Inside) },
		func() error { return home.AddRoute(def, n.Inside.Addr()) },
		nat.EnableForwarding,
	} {
		if err := step(); err != nil {
			return nil, fmt.Errorf("set up the NAT %s: %w", n.Name, err)
		}
	}
	tool := "iptables"
	if n.Home.Addr().Is6() {
		tool = "ip6tables"
	}
	rule := []string{"-t", "nat", "-A", "POSTROUTING", "-s", n.Home.Addr().String(), "-o", n.OutIf, "-p", "udp", "-j", "MASQUERADE"}
	if n.Ports != "" {
		rule = append(rule, "--to-ports", n.Ports)
	}
	if out, err := nat.Output(ctx, tool, rule...); err != nil {
		return nil, fmt.Errorf("set up the NAT %s: %s %s: %w\n%s", n.Name, tool, strings.Join(rule, " "), err, out)
	}
	return nat, nil
}
