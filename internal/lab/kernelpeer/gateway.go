package kernelpeer

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// Gateway is the guest as the far gateway of an espgw gateway's tunnel,
// in whatever topology the caller built: the interop bed's (the far hosts
// on the guest's loopback) or a scenario's (hostB behind the guest's
// eth1).
type Gateway struct {
	// WAN are the guest's outer addresses, on eth0.
	WAN []netip.Prefix
	// LAN are its inner addresses: with LANPort on eth1, the guest
	// routing for the hosts behind it; without, on its loopback, the
	// guest being the far hosts itself.
	LAN     []netip.Prefix
	LANPort bool
	// MTU is eth0's; 0 means 1500.
	MTU int
	// Routes lead toward espgw's side; one without Via goes out of eth0
	// directly (to an on-link address, or where XFRM takes over: IPv6
	// inside an IPv4 tunnel).
	Routes []Route
	// Near is the espgw gateway's namespace, NearIf its WAN interface and
	// NearAddrs its outer addresses. Neighbour entries between them and
	// the guest's WAN addresses are pinned both ways: with a
	// transport-mode policy between two IPv6 addresses, neighbour
	// discovery itself would be sent through ESP.
	Near      *netns.Namespace
	NearIf    string
	NearAddrs []netip.Addr
	// ToGuest and FromGuest are the tunnel's SAs as the espgw gateway
	// holds them, mirrored into the guest (XFRMCommands).
	ToGuest, FromGuest *sa.SA
}

// ConfigureGateway makes the guest g: it replaces the guest's addresses,
// routes, SAs and policies in one round trip (commands cost the most under
// emulation), then pins the neighbour entries. Errors never carry the SAs'
// keys.
func (p *Peer) ConfigureGateway(ctx context.Context, g Gateway) error {
	lan := "lo"
	var sc strings.Builder
	fmt.Fprintf(&sc, "set -e\nip neigh flush dev eth0 nud all\nip addr flush dev eth0 scope global\nip link set eth0 mtu %d\n", cmp.Or(g.MTU, 1500))
	if g.LANPort {
		lan = "eth1"
		sc.WriteString("ip neigh flush dev eth1 nud all\nip addr flush dev eth1 scope global\nip link set eth1 mtu 1500 up\n" +
			"echo 1 >/proc/sys/net/ipv4/ip_forward\necho 1 >/proc/sys/net/ipv6/conf/all/forwarding\n" +
			"echo 0 >/proc/sys/net/ipv4/conf/all/rp_filter\necho 0 >/proc/sys/net/ipv4/conf/eth0/rp_filter\n")
	} else {
		sc.WriteString("ip addr flush dev lo scope global\n")
	}
	for _, on := range []struct {
		dev   string
		addrs []netip.Prefix
	}{{"eth0", g.WAN}, {lan, g.LAN}} {
		for _, a := range on.addrs {
			nodad := ""
			if a.Addr().Is6() {
				nodad = " nodad"
			}
			fmt.Fprintf(&sc, "ip addr add %s dev %s%s\n", a, on.dev, nodad)
		}
	}
	for _, r := range g.Routes {
		via := ""
		if r.Via.IsValid() {
			via = " via " + r.Via.String()
		}
		fmt.Fprintf(&sc, "ip route replace %s%s dev eth0\n", r.dst(), via)
	}
	sas, err := replaceScript([]DirectedSA{{g.ToGuest, Inbound}, {g.FromGuest, Outbound}})
	if err != nil {
		return fmt.Errorf("the kernel peer's gateway: %w", err)
	}
	sc.WriteString(sas)
	if out, err := p.Run(ctx, sc.String()); err != nil {
		return fmt.Errorf("configure the kernel peer as a gateway: %w", redactErr(err, out))
	}
	var wan []netip.Addr
	for _, a := range g.WAN {
		wan = append(wan, a.Addr())
	}
	return p.pinNeighbours(ctx, g.Near.Netlink(), g.NearIf, g.NearAddrs, wan)
}

var busyboxSummary = regexp.MustCompile(`--- (\S+) ping statistics ---\s*\n(\d+) packets transmitted, (\d+) packets received`)

// PingSizes pings dst from the guest with each payload size, count
// requests each, in one round trip, and returns one result per size.
func (p *Peer) PingSizes(ctx context.Context, dst netip.Addr, sizes []int, count int) ([]testbed.PingResult, error) {
	var script strings.Builder
	for _, s := range sizes {
		fmt.Fprintf(&script, "ping -q -c %d -i 0.2 -W 2 -s %d %s\n", count, s, dst)
	}
	script.WriteString("true\n")
	out, err := p.Run(ctx, script.String())
	if err != nil {
		return nil, fmt.Errorf("ping %s from the kernel peer: %w", dst, err)
	}
	m := busyboxSummary.FindAllStringSubmatch(out, -1)
	if len(m) != len(sizes) {
		return nil, fmt.Errorf("ping %s from the kernel peer: %d summaries for %d sizes in %q", dst, len(m), len(sizes), out)
	}
	res := make([]testbed.PingResult, len(sizes))
	for i := range m {
		res[i].Sent, _ = strconv.Atoi(m[i][2])
		res[i].Received, _ = strconv.Atoi(m[i][3])
		res[i].Output = m[i][0]
	}
	return res, nil
}
