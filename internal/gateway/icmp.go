package gateway

import (
	"net/netip"

	"github.com/espgw/espgw/internal/pmtu"
)

// tooBig answers an inner packet larger than the tunnel's MTU mtu, which
// the gateway drops, with ICMP "fragmentation needed" or ICMPv6 "packet
// too big" toward its sender (unless the rules forbid an error about it).
//
// Where the gateway has a raw ICMP socket of the family (Start opens one
// of each) the error leaves from the host, as a router's own ICMP does:
// the kernel routes it to the sender and gives it the source address of
// the interface toward it (RFC 4443 §2.2, RFC 1812 §4.3.2.4). Written into
// the TUN instead it comes from source's address.
func (g *Gateway) tooBig(pkt []byte, mtu int) {
	v4 := pkt[0]>>4 == 4
	src, ok := g.source(v4)
	conn := g.icmpSender(!v4)
	if conn == nil && !ok {
		g.log.Debug("ICMP too-big not sent: the gateway holds no address of the family to send it from", "ipv4", v4)
		return
	}
	if !ok {
		// The kernel writes the header, and its source.
		src = netip.IPv6Unspecified()
		if v4 {
			src = netip.IPv4Unspecified()
		}
	}
	buf := g.icmp[0]
	var n int
	var err error
	if v4 {
		n, err = pmtu.FragmentationNeeded(buf[tunOffset:], pkt, src, mtu)
	} else {
		n, err = pmtu.PacketTooBig(buf[tunOffset:], pkt, src, max(mtu, 1280))
	}
	if err != nil {
		g.log.Debug("build ICMP too-big", "err", err)
		return
	}
	if (conn != nil && g.sendICMP(conn, buf[tunOffset:tunOffset+n])) || !ok {
		return
	}
	g.icmp[0] = buf[:tunOffset+n]
	if _, err := g.dev.Write(g.icmp, tunOffset); err != nil {
		g.log.Debug("ICMP too-big to TUN", "err", err)
	}
	g.icmp[0] = buf[:cap(buf)]
}

// icmpSender is the raw ICMP socket of the family, nil when there is none.
func (g *Gateway) icmpSender(v6 bool) *icmpConn {
	for i := range g.icmpConns {
		if g.icmpConns[i].v6 == v6 {
			return &g.icmpConns[i]
		}
	}
	return nil
}

// sendICMP sends a built ICMP error (IP header and message) from the host
// through the raw ICMP socket c, and reports whether it could.
func (g *Gateway) sendICMP(c *icmpConn, pkt []byte) bool {
	// The kernel writes the IP header (and, for ICMPv6, the checksum over
	// the source it picks); ICMPv4's checksum covers the message alone and
	// is already right.
	hdr, dst := 20, g.icmpDst[:4]
	if c.v6 {
		hdr, dst = 40, g.icmpDst[:16]
		copy(dst, pkt[24:40])
	} else {
		copy(dst, pkt[16:20])
	}
	g.icmpAddr.IP = dst
	if _, err := c.pc.WriteTo(pkt[hdr:], &g.icmpAddr); err != nil {
		g.log.Debug("send ICMP too-big", "err", err)
		return false
	}
	return true
}

// source is the address an ICMP error written into the TUN comes from: the
// first of the family in Options.ICMPSource, else in Options.Local. There
// is no fixed fallback: an error must come from an address of the node
// (RFC 4443 §2.2), and one from an address it does not hold is what bogon
// filters drop.
func (g *Gateway) source(v4 bool) (netip.Addr, bool) {
	for _, list := range [][]netip.Addr{g.opts.ICMPSource, g.opts.Local} {
		for _, a := range list {
			if a.Is4() == v4 {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}
