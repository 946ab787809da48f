package wanrelay

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/espgw/espgw/internal/header"
)

// Mode is how the relay joins its two ports.
type Mode string

const (
	// Bridge forwards every frame unchanged from one port to the other: the
	// relay is a bump in the wire and the gateways share one subnet.
	Bridge Mode = "bridge"
	// Route makes the relay the router of a wan namespace whose kernel owns
	// an address on each port (the gateways route to it): the relay forwards
	// the IP packets addressed through wan — next-hop MAC from wan's routing
	// and neighbour tables, TTL or hop limit decremented — and leaves what
	// is for wan itself (ARP, ND, pings to wan) to wan's kernel. It turns
	// the namespace's IPv4 and IPv6 forwarding off while it runs, so no
	// packet crosses twice, and restores them on Close.
	Route Mode = "route"
)

// Bounds of the wait for a next hop's MAC address.
const (
	maxPending   = 1024
	pendingRetry = 5 * time.Millisecond
	pendingLimit = time.Second
)

// verdict is what route decided for a frame.
type verdict uint8

const (
	forward verdict = iota
	notRouted
	ttlExpired
	noRoute
	pending
)

// router is the layer-3 part of one direction in Route mode. It is owned by
// its direction's goroutine.
type router struct {
	in, out *link
	nl      *netlink.Handle
	local   map[netip.Addr]bool // wan's own addresses
	hops    map[netip.Addr][6]byte
	probes  map[netip.Addr]time.Time
	probe4  net.PacketConn // a datagram to a next hop makes wan's kernel resolve it
	probe6  net.PacketConn

	pend    []pendingFrame
	free    [][]byte
	retryAt time.Time
}

type pendingFrame struct {
	buf   []byte
	since time.Time
}

// newRouter opens the netlink and probe sockets of a direction in netns.
func newRouter(netnsName string, in, out *link, local map[netip.Addr]bool) (*router, error) {
	r := &router{in: in, out: out, local: local, hops: map[netip.Addr][6]byte{}, probes: map[netip.Addr]time.Time{}}
	err := withNetns(netnsName, func() error {
		h, err := vnetns.Get()
		if err != nil {
			return err
		}
		defer h.Close()
		if r.nl, err = netlink.NewHandleAt(h); err != nil {
			return fmt.Errorf("netlink: %w", err)
		}
		if r.probe4, err = net.ListenPacket("udp4", ":0"); err != nil {
			return err
		}
		r.probe6, err = net.ListenPacket("udp6", ":0")
		return err
	})
	if err != nil {
		r.close()
		return nil, fmt.Errorf("route %s→%s: %w", in.name, out.name, err)
	}
	return r, nil
}

func (r *router) close() {
	if r.nl != nil {
		r.nl.Close()
	}
	for _, c := range []net.PacketConn{r.probe4, r.probe6} {
		if c != nil {
			c.Close()
		}
	}
}

// route decides what to do with a frame received on r.in and, to forward
// it, rewrites it in place for r.out.
func (r *router) route(frame []byte) verdict {
	if len(frame) < 14+20 {
		return notRouted
	}
	if !bytes.Equal(frame[:6], r.in.mac) {
		return notRouted // broadcast, multicast, another host's
	}
	ip := frame[14:]
	switch et, v := binary.BigEndian.Uint16(frame[12:]), header.Version(ip); {
	case et == 0x0800 && v == 4:
	case et == 0x86dd && v == 6 && len(ip) >= header.IPv6Len:
	default:
		return notRouted
	}
	_, dst := header.Addrs(ip)
	if r.local[dst] || dst.IsMulticast() || dst.IsLinkLocalUnicast() || dst == netip.IPv4Unspecified() {
		return notRouted
	}
	ttl := header.TTL(ip)
	if ttl <= 1 {
		return ttlExpired
	}
	mac, ok := r.hops[dst]
	if !ok {
		var v verdict
		if mac, v = r.resolve(dst); v != forward {
			return v
		}
	}
	header.SetTTL(ip, ttl-1)
	copy(frame[:6], mac[:])
	copy(frame[6:12], r.out.mac)
	return forward
}

// resolve finds the MAC of dst's next hop out of r.out from wan's routing
// and neighbour tables, and caches it. When the neighbour is not known yet
// it makes wan's kernel resolve it and says pending.
func (r *router) resolve(dst netip.Addr) ([6]byte, verdict) {
	var mac [6]byte
	routes, err := r.nl.RouteGet(dst.AsSlice())
	if err != nil || len(routes) == 0 || routes[0].LinkIndex != r.out.index {
		return mac, noRoute
	}
	hop := dst
	if routes[0].Gw != nil {
		hop, _ = netip.AddrFromSlice(routes[0].Gw)
		hop = hop.Unmap()
	}
	family := netlink.FAMILY_V4
	if hop.Is6() {
		family = netlink.FAMILY_V6
	}
	neighs, _ := r.nl.NeighList(r.out.index, family)
	for _, n := range neighs {
		a, _ := netip.AddrFromSlice(n.IP)
		if a.Unmap() == hop && len(n.HardwareAddr) == 6 &&
			n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT) != 0 {
			copy(mac[:], n.HardwareAddr)
			r.hops[dst] = mac
			return mac, forward
		}
	}
	if t, ok := r.probes[hop]; !ok || time.Since(t) > 100*time.Millisecond {
		r.probes[hop] = time.Now()
		c := r.probe4
		if hop.Is6() {
			c = r.probe6
		}
		c.WriteTo(nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(hop, 9)))
	}
	return mac, pending
}

// hold keeps a frame that waits for its next hop; false when the wait
// queue is full.
func (r *router) hold(now time.Time, frame []byte) bool {
	if len(r.pend) >= maxPending {
		return false
	}
	var b []byte
	if n := len(r.free); n > 0 {
		b, r.free = r.free[n-1][:0], r.free[:n-1]
	}
	r.pend = append(r.pend, pendingFrame{buf: append(b, frame...), since: now})
	if r.retryAt.IsZero() {
		r.retryAt = now.Add(pendingRetry)
	}
	return true
}

// retry routes the waiting frames again once their retry time has come:
// each is handed to emit with its verdict (forward, or pending for one that
// waited too long). Frames keep their order.
func (r *router) retry(now time.Time, emit func(now time.Time, frame []byte, v verdict)) {
	if len(r.pend) == 0 || now.Before(r.retryAt) {
		return
	}
	keep := r.pend[:0]
	blocked := false
	for _, p := range r.pend {
		v := pending
		if !blocked {
			v = r.route(p.buf)
		}
		if v == pending && now.Sub(p.since) < pendingLimit {
			blocked = true // later frames wait behind it, to keep order
			keep = append(keep, p)
			continue
		}
		emit(now, p.buf, v)
		r.free = append(r.free, p.buf)
	}
	r.pend = keep
	r.retryAt = time.Time{}
	if len(r.pend) > 0 {
		r.retryAt = now.Add(pendingRetry)
	}
}

// localAddrs lists the addresses of every interface of the current
// namespace.
func localAddrs() (map[netip.Addr]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	m := map[netip.Addr]bool{}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			m[p.Addr()] = true
		}
	}
	return m, nil
}

// forwardingSysctls are the switches Route mode turns off while it runs.
var forwardingSysctls = []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"}

// setForwarding writes v to the forwarding switches of the current
// namespace and returns what they held.
func setForwarding(v []string) ([]string, error) {
	old := make([]string, len(forwardingSysctls))
	for i, p := range forwardingSysctls {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		old[i] = strings.TrimSpace(string(b))
		if err := os.WriteFile(p, []byte(v[i]), 0o644); err != nil {
			return nil, fmt.Errorf("write %s: %w", p, err)
		}
	}
	return old, nil
}
