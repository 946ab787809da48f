package netns

import (
	"fmt"
	"log/slog"
	"net/netip"
)

// Topology is the standard espgw test bed:
//
//	hostA ──(A LAN)── gw1 ──(WAN1)── wan ──(WAN2)── gw2 ──(B LAN)── hostB
//
// wan is a router between two WAN subnets. gw1 and gw2 forward and route
// everything non-local to wan; hosts route everything to their gateway. wan
// knows no route to the LANs unless Options.PlainRouting is set, so without a
// tunnel hostA cannot reach hostB: a working ping proves the tunnel.
//
// Interface names are the same on every run: hostA/hostB "eth0"; gw1/gw2
// "lan0" (LAN side) and "wan0" (WAN side); wan "gw1" and "gw2" (towards each
// gateway).
type Topology struct {
	*Bed
	HostA, GW1, WAN, GW2, HostB *Namespace
	Addr                        Addresses
}

// Addresses of the standard topology (TEST-NET-1/2/3 and 2001:db8::/32).
// Prefix fields carry the interface address with its subnet length.
type Addresses struct {
	HostA4, HostA6       netip.Prefix // hostA eth0
	GW1LAN4, GW1LAN6     netip.Prefix // gw1 lan0
	GW1WAN4, GW1WAN6     netip.Prefix // gw1 wan0 (gw1's outer address)
	WANToGW14, WANToGW16 netip.Prefix // wan gw1
	WANToGW24, WANToGW26 netip.Prefix // wan gw2
	GW2WAN4, GW2WAN6     netip.Prefix // gw2 wan0 (gw2's outer address)
	GW2LAN4, GW2LAN6     netip.Prefix // gw2 lan0
	HostB4, HostB6       netip.Prefix // hostB eth0
	LANA4, LANA6         netip.Prefix // subnet behind gw1
	LANB4, LANB6         netip.Prefix // subnet behind gw2
	// Phantoms are addresses on the LANs that no host owns: a replay's
	// packets travel between them (hostA's side, hostB's side), so the
	// hosts' kernels drop them quietly instead of answering.
	PhantomA4, PhantomA6 netip.Addr
	PhantomB4, PhantomB6 netip.Addr
}

// StandardAddresses returns the fixed addresses of the standard topology.
func StandardAddresses() Addresses {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	return Addresses{
		HostA4: p("192.0.2.10/24"), HostA6: p("2001:db8:a::10/64"),
		GW1LAN4: p("192.0.2.1/24"), GW1LAN6: p("2001:db8:a::1/64"),
		GW1WAN4: p("198.51.100.1/25"), GW1WAN6: p("2001:db8:1::1/64"),
		WANToGW14: p("198.51.100.126/25"), WANToGW16: p("2001:db8:1::fe/64"),
		WANToGW24: p("198.51.100.254/25"), WANToGW26: p("2001:db8:2::fe/64"),
		GW2WAN4: p("198.51.100.129/25"), GW2WAN6: p("2001:db8:2::1/64"),
		GW2LAN4: p("203.0.113.1/24"), GW2LAN6: p("2001:db8:b::1/64"),
		HostB4: p("203.0.113.10/24"), HostB6: p("2001:db8:b::10/64"),
		LANA4: p("192.0.2.0/24"), LANA6: p("2001:db8:a::/64"),
		LANB4: p("203.0.113.0/24"), LANB6: p("2001:db8:b::/64"),
		PhantomA4: a("192.0.2.80"), PhantomA6: a("2001:db8:a::80"),
		PhantomB4: a("203.0.113.80"), PhantomB6: a("2001:db8:b::80"),
	}
}

// TopologyOptions tune the standard topology; the zero value is a 1500-byte
// network with no route across the WAN for the LANs.
type TopologyOptions struct {
	// LANMTU and WANMTU set the veth MTUs (0: 1500).
	LANMTU, WANMTU int
	// PlainRouting gives wan routes to both LANs, so hosts reach each other
	// without a tunnel: the plain-routing baseline.
	PlainRouting bool
	// Addr, if set, replaces StandardAddresses (a scenario against an
	// external device takes the addresses that device was given).
	Addr *Addresses
	Log  *slog.Logger
}

// NewTopology builds the standard topology under prefix. On error everything
// built so far is removed.
func NewTopology(prefix string, opt TopologyOptions) (t *Topology, err error) {
	bed, err := New(prefix, opt.Log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			bed.Close()
		}
	}()
	t = &Topology{Bed: bed, Addr: StandardAddresses()}
	if opt.Addr != nil {
		t.Addr = *opt.Addr
	}
	for _, n := range []struct {
		p    **Namespace
		name string
	}{{&t.HostA, "hostA"}, {&t.GW1, "gw1"}, {&t.WAN, "wan"}, {&t.GW2, "gw2"}, {&t.HostB, "hostB"}} {
		if *n.p, err = bed.AddNamespace(n.name); err != nil {
			return nil, err
		}
	}
	lan := LinkOptions{MTU: opt.LANMTU}
	wan := LinkOptions{MTU: opt.WANMTU}
	a := t.Addr
	type end struct {
		ns     *Namespace
		ifname string
		addrs  []netip.Prefix
	}
	for _, l := range []struct {
		x, y end
		opt  LinkOptions
	}{
		{end{t.HostA, "eth0", []netip.Prefix{a.HostA4, a.HostA6}}, end{t.GW1, "lan0", []netip.Prefix{a.GW1LAN4, a.GW1LAN6}}, lan},
		{end{t.GW1, "wan0", []netip.Prefix{a.GW1WAN4, a.GW1WAN6}}, end{t.WAN, "gw1", []netip.Prefix{a.WANToGW14, a.WANToGW16}}, wan},
		{end{t.WAN, "gw2", []netip.Prefix{a.WANToGW24, a.WANToGW26}}, end{t.GW2, "wan0", []netip.Prefix{a.GW2WAN4, a.GW2WAN6}}, wan},
		{end{t.GW2, "lan0", []netip.Prefix{a.GW2LAN4, a.GW2LAN6}}, end{t.HostB, "eth0", []netip.Prefix{a.HostB4, a.HostB6}}, lan},
	} {
		if err = bed.Connect(l.x.ns, l.x.ifname, l.y.ns, l.y.ifname, l.opt); err != nil {
			return nil, err
		}
		for _, e := range []end{l.x, l.y} {
			for _, p := range e.addrs {
				if err = e.ns.AddAddr(e.ifname, p); err != nil {
					return nil, err
				}
			}
		}
	}
	def4, def6 := netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")
	type route struct {
		ns  *Namespace
		dst netip.Prefix
		via netip.Prefix
	}
	routes := []route{
		{t.HostA, def4, a.GW1LAN4}, {t.HostA, def6, a.GW1LAN6},
		{t.HostB, def4, a.GW2LAN4}, {t.HostB, def6, a.GW2LAN6},
		{t.GW1, def4, a.WANToGW14}, {t.GW1, def6, a.WANToGW16},
		{t.GW2, def4, a.WANToGW24}, {t.GW2, def6, a.WANToGW26},
	}
	if opt.PlainRouting {
		routes = append(routes,
			route{t.WAN, a.LANA4, a.GW1WAN4}, route{t.WAN, a.LANA6, a.GW1WAN6},
			route{t.WAN, a.LANB4, a.GW2WAN4}, route{t.WAN, a.LANB6, a.GW2WAN6})
	}
	for _, r := range routes {
		if err = r.ns.AddRoute(r.dst, r.via.Addr()); err != nil {
			return nil, err
		}
	}
	for _, ns := range []*Namespace{t.GW1, t.WAN, t.GW2} {
		if err = ns.EnableForwarding(); err != nil {
			return nil, fmt.Errorf("build topology: %w", err)
		}
	}
	return t, nil
}
