package gateway

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"github.com/espgw/espgw/sa"
)

// DefaultNATKeepalive is RFC 3948 §2.3's suggested keepalive interval.
const DefaultNATKeepalive = 20 * time.Second

// NATKeepalive chooses the SAs that send RFC 3948 §2.3 NAT keepalives (one
// 0xFF byte over UDP) so that a NAT between the gateways keeps its mapping
// while the tunnel is idle.
type NATKeepalive struct {
	// Every is how long an SA stays idle before it sends one (and between
	// them); 0: none are sent.
	Every time.Duration
	// All sends them on every UDP-encapsulated outbound SA; otherwise only
	// on those whose local address is behind a NAT (BehindNAT).
	All bool
}

// BehindNAT reports whether a local outer address can only reach a peer
// through a NAT: a private (RFC 1918, unique local), shared (RFC 6598) or
// link-local address. Manual keying has no NAT detection (IKE's NAT-D), so
// a gateway behind a NAT with a public-looking address needs nat-keepalive
// set.
func BehindNAT(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsPrivate() || a.IsLinkLocalUnicast() || sharedSpace.Contains(a)
}

var sharedSpace = netip.MustParsePrefix("100.64.0.0/10") // RFC 6598

// keepaliveSender is a socket that can send NAT keepalives (UDP).
type keepaliveSender interface {
	SendKeepalive(peer netip.AddrPort) error
}

// keepalives sends a NAT keepalive for each chosen SA that sent nothing in
// the last interval, until ctx ends.
func (g *Gateway) keepalives(ctx context.Context) error {
	t := time.NewTicker(g.opts.NATKeepalive.Every)
	defer t.Stop()
	last := map[uint32]uint64{} // each SA's sequence number at the last tick
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		g.sendKeepalives(last)
	}
}

type keepalivePath struct {
	via  keepaliveSender
	peer netip.AddrPort
}

func (g *Gateway) sendKeepalives(last map[uint32]uint64) {
	var due []keepalivePath
	st := g.view()
	for spi, s := range st.out {
		cfg := s.Config
		if cfg.Encap != sa.EncapUDP || !g.opts.NATKeepalive.All && !BehindNAT(cfg.Src) {
			continue
		}
		seq, prev := s.LastSeq(), last[spi]
		last[spi] = seq
		if seq != prev {
			continue // it sent packets: the NAT saw traffic
		}
		if k, ok := g.pick(cfg).(keepaliveSender); ok {
			p := keepalivePath{via: k, peer: netip.AddrPortFrom(cfg.Dst, cfg.DstPort)}
			if !slices.Contains(due, p) {
				due = append(due, p)
			}
		}
	}
	for spi := range last {
		if st.out[spi] == nil {
			delete(last, spi)
		}
	}
	g.release()
	for _, p := range due {
		if err := p.via.SendKeepalive(p.peer); err != nil {
			g.log.Debug("send NAT keepalive", "err", err)
		}
	}
}
