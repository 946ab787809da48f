package gateway

import (
	"net/netip"

	"github.com/espgw/espgw/internal/pmtu"
)

// tooBig answers an inner packet larger than the tunnel's MTU mtu, which
// the gateway drops, with ICMP "fragmentation needed" or ICMPv6 "packet
// too big", written back into the TUN toward its sender (unless the rules
// forbid an error about it).
func (g *Gateway) tooBig(pkt []byte, mtu int) {
	buf := g.icmp[0]
	var n int
	var err error
	if pkt[0]>>4 == 4 {
		n, err = pmtu.FragmentationNeeded(buf[tunOffset:], pkt, g.source(true), mtu)
	} else {
		n, err = pmtu.PacketTooBig(buf[tunOffset:], pkt, g.source(false), max(mtu, 1280))
	}
	if err == nil {
		g.icmp[0] = buf[:tunOffset+n]
		if _, err := g.dev.Write(g.icmp, tunOffset); err != nil {
			g.log.Debug("ICMP too-big to TUN", "err", err)
		}
		g.icmp[0] = buf[:cap(buf)]
	}
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
