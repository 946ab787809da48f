package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/sa"
)

// Transport-mode SAs protect traffic to the peer's own address, which is
// also where the ESP packets go: a plain route into the TUN would loop them
// back in. As wg-quick does, the gateway marks its outer sockets and routes
// only unmarked traffic for those peers through the TUN, from a table of
// its own.
const (
	fwMark       = 0x4553 // "ES"
	routeTable   = 0x4553
	rulePriority = 100
)

// peerRoute is a transport-mode peer and the local address its SA sends from.
type peerRoute struct{ peer, local netip.Addr }

// transportPeers are the peers of outbound transport-mode SAs and of IKE
// connections with a transport-mode CHILD_SA.
func transportPeers(cfg *Config) []peerRoute {
	var out []peerRoute
	seen := map[netip.Addr]bool{}
	add := func(peer, local netip.Addr) {
		if !seen[peer] {
			seen[peer] = true
			out = append(out, peerRoute{peer: peer, local: local})
		}
	}
	for _, s := range cfg.SAs {
		if s.Mode == sa.Transport && containsAddr(cfg.Local, s.Src) {
			add(s.Dst, s.Src)
		}
	}
	if cfg.IKE == nil {
		return out
	}
	for _, conn := range cfg.IKE.Connections {
		for _, ch := range conn.Children {
			if ch.Transport && len(conn.RemoteAddrs) > 0 && len(conn.LocalAddrs) > 0 {
				add(conn.RemoteAddrs[0], conn.LocalAddrs[0])
			}
		}
	}
	return out
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, l := range list {
		if l == a {
			return true
		}
	}
	return false
}

// routeTransportPeers sends unmarked traffic for each peer into the TUN and
// returns the rules it added, for removal.
func routeTransportPeers(tunName string, peers []peerRoute) ([]*netlink.Rule, error) {
	if len(peers) == 0 {
		return nil, nil
	}
	link, err := netlink.LinkByName(tunName)
	if err != nil {
		return nil, fmt.Errorf("find TUN %s: %w", tunName, err)
	}
	families := map[int]bool{}
	for _, p := range peers {
		bits := 32
		fam := unix.AF_INET
		if p.peer.Is6() {
			bits, fam = 128, unix.AF_INET6
		}
		families[fam] = true
		// The source must be the SA's: the TUN has no address of its own
		// for the kernel to pick.
		r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: &net.IPNet{IP: p.peer.AsSlice(), Mask: net.CIDRMask(bits, bits)},
			Src: p.local.AsSlice(), Table: routeTable}
		if err := netlink.RouteReplace(r); err != nil {
			return nil, fmt.Errorf("route transport-mode peer %s into %s: %w", p.peer, tunName, err)
		}
	}
	var rules []*netlink.Rule
	for fam := range families {
		rule := transportRule(fam)
		// A gateway killed with -9 never removed its rule: the same rule
		// from that run is recognised by its table, mark and priority
		// and replaced, rather than the start failing with "file
		// exists". (Its routes went with its TUN.)
		stale, err := staleTransportRules(fam)
		if err != nil {
			return rules, err
		}
		for _, r := range stale {
			if err := netlink.RuleDel(r); err != nil && !errors.Is(err, unix.ENOENT) {
				return rules, fmt.Errorf("replace the transport-mode policy rule a previous run left: %w", err)
			}
		}
		if err := netlink.RuleAdd(rule); err != nil {
			return rules, fmt.Errorf("add policy rule for transport-mode peers: %w", err)
		}
		rules = append(rules, rule)
	}
	return rules, nil
}

// transportRule is the rule that sends unmarked traffic to the gateway's own
// table: ip rule add not fwmark 0x4553 lookup 0x4553 priority 100.
func transportRule(family int) *netlink.Rule {
	rule := netlink.NewRule()
	rule.Family, rule.Table, rule.Priority = family, routeTable, rulePriority
	rule.Mark, rule.Invert = fwMark, true
	mask := uint32(0xffffffff)
	rule.Mask = &mask
	return rule
}

// staleTransportRules are the rules of the family that are the gateway's
// own transport-mode rule.
func staleTransportRules(family int) ([]*netlink.Rule, error) {
	all, err := netlink.RuleList(family)
	if err != nil {
		return nil, fmt.Errorf("list policy rules: %w", err)
	}
	var out []*netlink.Rule
	for i := range all {
		r := &all[i]
		if r.Table == routeTable && r.Priority == rulePriority && r.Mark == fwMark && r.Invert {
			out = append(out, r)
		}
	}
	return out, nil
}
