package gateway

import (
	"net/netip"

	"github.com/espgw/espgw/internal/pmtu"
)

// tooBig answers an inner packet larger than the tunnel's MTU mtu, which
// the gateway drops, with ICMP "fragmentation needed" or ICMPv6 "packet
// too big" toward its sender (unless the rules forbid an error about it).
//
// Where the gateway has a raw ICMP socket of the family (Start opens them)
// the error leaves from the host, as a router's own ICMP does: the kernel
// routes it to the sender and gives it the source address of the
// interface toward it. Written into the TUN instead it would arrive from
// the TUN with a source address of the host's own, which the kernel drops
// as a martian.
func (g *Gateway) tooBig(pkt []byte, mtu int) {
	buf := g.icmp[0]
	var n int
	var err error
	if pkt[0]>>4 == 4 {
		n, err = pmtu.FragmentationNeeded(buf[tunOffset:], pkt, g.source(true), mtu)
	} else {
		n, err = pmtu.PacketTooBig(buf[tunOffset:], pkt, g.source(false), max(mtu, 1280))
	}
	if err == nil && g.sendICMP(buf[tunOffset:tunOffset+n]) {
		return
	}
	if err == nil {
		g.icmp[0] = buf[:tunOffset+n]
		if _, err := g.dev.Write(g.icmp, tunOffset); err != nil {
			g.log.Debug("ICMP too-big to TUN", "err", err)
		}
		g.icmp[0] = buf[:cap(buf)]
	}
}

// sendICMP sends a built ICMP error (IP header and message) from the host
// through the family's raw ICMP socket, and reports whether it could.
func (g *Gateway) sendICMP(pkt []byte) bool {
	v6 := pkt[0]>>4 == 6
	hdr := 20
	if v6 {
		hdr = 40
	}
	for _, c := range g.icmpConns {
		if c.v6 != v6 {
			continue
		}
		// The kernel writes the IP header (and, for ICMPv6, the checksum
		// over the source it picks); ICMPv4's checksum covers the message
		// alone and is already right.
		dst := g.icmpDst[:4]
		if v6 {
			dst = g.icmpDst[:16]
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
	return false
}

// source is the address the gateway's ICMP errors come from.
func (g *Gateway) source(v4 bool) netip.Addr {
	for _, a := range append(g.opts.ICMPSource, g.opts.Local...) {
		if a.Is4() == v4 {
			return a
		}
	}
	if v4 {
		return netip.MustParseAddr("192.0.0.8") // RFC 7600 dummy address
	}
	return netip.MustParseAddr("2001:db8::1")
}
