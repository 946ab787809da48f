package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/transport"
	"github.com/espgw/espgw/sa"
)

// rxOffset is where received ESP lands in a buffer: room in front for the
// IPv6 header, and extension headers, that an opened transport-mode packet
// needs (raw IPv6 sockets do not deliver them; the transport writes them
// back there, exthdr.go).
const rxOffset = 64 + 256

// inbound moves ESP packets received on c into the TUN device.
func (g *Gateway) inbound(ctx context.Context, c Conn) error {
	size := max(inboundBuf, rxOffset+g.opts.InnerMTU+esp.Headroom+esp.Tailroom)
	p := newPipeline(g.engine, &g.counters.Opened, 2*g.opts.Workers+2, g.opts.Batch, size, g.opts.Inline)
	return p.run(ctx, g.opts.Workers, func(b *batch) error { return g.readESP(b, c) }, g.writeTUN)
}

// readESP receives a batch of ESP packets and checks each against its SA
// before any crypto.
func (g *Gateway) readESP(b *batch, c Conn) error {
	for _, p := range b.ptrs {
		p.Reset(p.Buf, rxOffset, 0)
	}
	n, err := c.Receive(b.ptrs)
	if err != nil {
		return fmt.Errorf("receive ESP: %w", err)
	}
	b.n = n
	g.counters.WireIn.Add(uint64(n))
	encap := encapOf(c)
	st := g.view()
	defer g.release()
	// The SAs are found first, in a loop of lookups alone: with many SAs
	// each is a cache miss, and independent misses overlap.
	for _, p := range b.ptrs[:n] {
		spi, ok := esp.SPIOf(p.Data())
		if !ok {
			g.drop(Runt)
			continue // no SA: dropped before the engine, counted
		}
		s, miss := st.receiver(spi, sa.Arrival{Dst: p.Local, Src: p.Peer.Addr(), Encap: encap, SrcPort: p.Peer.Port()})
		if s == nil {
			if miss == sa.NoSA && g.hold(spi, p, encap) {
				continue // for a CHILD_SA being negotiated (held.go)
			}
			g.drop(missReason(miss))
			continue
		}
		p.SA = s
	}
	g.prepareOpen(b)
	return nil
}

// prepareOpen checks each packet of b that has its SA against it before
// any crypto, and queues its op for the engine.
func (g *Gateway) prepareOpen(b *batch) {
	for i, p := range b.ptrs[:b.n] {
		s := p.SA
		if s == nil {
			continue
		}
		if s.Mode() == sa.Transport && p.HdrLen == 0 && p.Off >= 40 {
			// IPv6 raw sockets deliver no header: give the packet the one
			// it arrived with, so the opened packet has its own addresses.
			p.HdrLen = header.WriteIP(p.Buf, p.Off, s.Config.Src, s.Config.Dst, 50, p.Len)
		}
		if s.PrepareOpen(p) != esp.OK {
			continue // counted on the SA; FinishOpen passes it by
		}
		b.queue(i)
	}
}

// missReason is what an inbound packet with no SA is counted as.
func missReason(m sa.Miss) Reason {
	switch m {
	case sa.WrongEncap:
		return WrongEncap
	case sa.WrongSource:
		return WrongSource
	}
	return UnknownSPI
}

// encapOf is how packets received on c came: raw ESP unless c says UDP
// (transport.Conn by its Kind, memnet.Conn by its Encap).
func encapOf(c Conn) sa.Encap {
	switch c := c.(type) {
	case interface{ Kind() transport.Kind }:
		if c.Kind() == transport.UDPEncap {
			return sa.EncapUDP
		}
	case interface{ Encap() sa.Encap }:
		return c.Encap()
	}
	return sa.EncapNone
}

// writeTUN finishes an opened batch and writes the inner packets, in order.
func (g *Gateway) writeTUN(b *batch) {
	for _, p := range b.ptrs[:b.n] {
		if p.SA == nil || p.SA.FinishOpen(p) != esp.OK {
			continue
		}
		if h := headerOf(p.SA); h != nil && !h.decapsulate(p.Data(), p.TOS) {
			g.drop(ECNDrop)
			continue
		}
		if c := p.SA.Config; c.FollowSourcePort && p.Peer.Port() != c.SrcPort {
			g.peerPortMoved(c, p.Peer)
		}
		b.out = append(b.out, p.Buf[p.Off-tunOffset:p.Off+p.Len])
	}
	if len(b.out) == 0 {
		return
	}
	// Device.Write reports bytes, not packets; with GRO several packets
	// go out as one write. A failed write is one joined error per packet.
	_, err := g.dev.Write(b.out, tunOffset)
	lost := 0
	if err != nil {
		lost = len(b.out)
		var joined interface{ Unwrap() []error }
		if errors.As(err, &joined) {
			lost = min(len(joined.Unwrap()), len(b.out))
		}
		g.counters.Drops[TunWrite].Add(uint64(lost))
		g.log.Debug("TUN write", "lost", lost, "err", err)
	}
	g.counters.TunOut.Add(uint64(len(b.out) - lost))
}
