package gateway

import (
	"net/netip"

	"github.com/espgw/espgw/sa"
)

// SetOnPeerPort sets what the data path tells of an inbound ESP packet
// that passed every check of its SA but came from another source port
// than the SA's (sa.SA.FollowSourcePort: the peer's NAT mapped it anew):
// the SA and where the packet came from. f must not block; nil sets none.
func (g *Gateway) SetOnPeerPort(f func(in *sa.SA, from netip.AddrPort)) {
	if f == nil {
		g.onPeerPort.Store(nil)
		return
	}
	g.onPeerPort.Store(&f)
}

// peerPortMoved tells of an opened packet from another port of its SA's
// peer.
func (g *Gateway) peerPortMoved(in *sa.SA, from netip.AddrPort) {
	if f := g.onPeerPort.Load(); f != nil {
		(*f)(in, from)
	}
}
