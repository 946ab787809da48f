package testbed

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/espgw/espgw/internal/lab/wanrelay"
)

// Relay is a wanrelay running inside the bed's wan namespace, bridging the
// two gateways' WAN links through its impairment stages.
type Relay = wanrelay.Running

// StartRelay turns the wan namespace from a router into a bump in the wire
// and starts a relay there: wan loses its addresses and stops forwarding,
// each gateway reaches the other's outer addresses straight out of its wan0
// (on-link routes), and every frame between them crosses the relay, gw1→gw2
// through cfg.AToB and gw2→gw1 through cfg.BToA. cfg's Netns, A and B are
// filled in. Close stops the relay; Bed.Close does not.
func (b *Bed) StartRelay(cfg wanrelay.Config) (*Relay, error) {
	t := b.Topo
	a := t.Addr
	ctx := context.Background()
	for _, port := range []string{"gw1", "gw2"} {
		if out, err := t.WAN.Output(ctx, "ip", "addr", "flush", "dev", port); err != nil {
			return nil, fmt.Errorf("bridge the wan namespace: %w: %s", err, out)
		}
	}
	err := t.WAN.Sysctl(map[string]string{
		"net/ipv4/ip_forward":                "0",
		"net/ipv6/conf/all/forwarding":       "0",
		"net/ipv6/conf/gw1/disable_ipv6":     "1",
		"net/ipv6/conf/gw2/disable_ipv6":     "1",
		"net/ipv6/conf/all/disable_ipv6":     "1",
		"net/ipv6/conf/default/disable_ipv6": "1",
	})
	if err != nil {
		return nil, fmt.Errorf("bridge the wan namespace: %w", err)
	}
	for _, r := range []struct {
		gw   int
		dsts []netip.Prefix
	}{
		{0, []netip.Prefix{a.GW2WAN4, a.GW2WAN6}},
		{1, []netip.Prefix{a.GW1WAN4, a.GW1WAN6}},
	} {
		ns := t.GW1
		if r.gw == 1 {
			ns = t.GW2
		}
		for _, d := range r.dsts {
			host := netip.PrefixFrom(d.Addr(), d.Addr().BitLen())
			if err := ns.AddDeviceRoute(host, "wan0"); err != nil {
				return nil, fmt.Errorf("bridge the wan namespace: %w", err)
			}
		}
	}
	cfg.Netns, cfg.A, cfg.B = t.WAN.Name(), "gw1", "gw2"
	if cfg.Logger == nil {
		cfg.Logger = b.log
	}
	return wanrelay.Start(cfg)
}
