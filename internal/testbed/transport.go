package testbed

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/espgw/espgw/sa"
)

// transportTable is the routing table that sends gateway-to-gateway traffic
// into the TUN device for transport-mode SAs.
const transportTable = "100"

// TransportPolicies are the outbound policies transport-mode SAs need: each
// gateway protects what it sends from its own outer address to the other's
// with its outbound SA (gw1 0x1001, gw2 0x2001). Both policies go into the
// one SA file; each gateway only ever matches its own.
func TransportPolicies(sas [2]*sa.SA) []sa.Policy {
	var ps []sa.Policy
	for i, s := range sas {
		host := func(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }
		ps = append(ps, sa.Policy{Priority: 10 + i, Action: sa.Protect, SPI: s.SPI,
			Selector: sa.Selector{Src: host(s.Src), Dst: host(s.Dst)}})
	}
	return ps
}

// RouteTransport routes ICMP (ICMPv6 for an IPv6 tunnel) from each gateway
// to the other's outer address into the gateway's own TUN device (esp0),
// with the local outer address as source, so a transport-mode SA carries it
// while ESP itself still leaves through wan0: a policy rule on the IP
// protocol picks a table with one route into the TUN. A ping from gw1 to
// gw2's outer address then crosses the tunnel both ways.
func (b *Bed) RouteTransport(ctx context.Context) error {
	gw1, gw2 := b.Outer()
	family, proto := "-4", "icmp"
	if gw1.Is6() {
		family, proto = "-6", "ipv6-icmp"
	}
	for i, g := range b.GW {
		local, peer := gw1, gw2
		if i == 1 {
			local, peer = gw2, gw1
		}
		for _, args := range [][]string{
			{family, "route", "add", peer.String(), "dev", "esp0", "src", local.String(), "table", transportTable},
			{family, "rule", "add", "to", peer.String(), "ipproto", proto, "lookup", transportTable, "pref", "100"},
		} {
			if out, err := g.NS.Output(ctx, "ip", args...); err != nil {
				return fmt.Errorf("route transport traffic in %s: %w: %s", g.Name, err, out)
			}
		}
	}
	return nil
}
