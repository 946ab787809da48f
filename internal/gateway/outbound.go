package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/sa"
)

// outbound moves packets from the TUN device out through the tunnel.
func (g *Gateway) outbound(ctx context.Context) error {
	size := esp.Headroom + g.opts.InnerMTU + esp.Tailroom + outboundSlack
	p := newPipeline(g.engine, &g.counters.Sealed, 2*g.opts.Workers+2, g.opts.Batch+drainMax, size, g.opts.Inline)
	return p.run(ctx, g.opts.Workers, g.readTUN, g.sendESP)
}

// drainMax is the most packets readTUN gathers into a batch from the queue
// behind its first read.
const drainMax = 64

// readTUN reads a batch of inner packets, finds each one's SA and frames it.
// Sequence numbers are assigned here, on one goroutine, so they go out in
// order.
//
// A TUN read returns one packet (or one GSO train). When more are already
// queued — the gateway is behind — they are read into the same batch, so
// they are sealed together and leave in one send: with UDP encapsulation
// one GSO train crosses the outer path instead of a packet at a time. An
// idle gateway finds nothing queued and sends at once.
func (g *Gateway) readTUN(b *batch) error {
	n, err := g.dev.Read(b.bufs[:len(b.bufs)-drainMax], b.sizes, esp.Headroom)
	if err != nil {
		return fmt.Errorf("read TUN: %w", err)
	}
	if pd, ok := g.dev.(pendingDevice); ok {
		// Each read may split a GSO train into up to BatchSize buffers.
		room := g.dev.BatchSize()
		for n < drainMax && len(b.bufs)-n >= room && pd.Pending() {
			m, err := g.dev.Read(b.bufs[n:], b.sizes[n:], esp.Headroom)
			n += m
			if err != nil {
				if !errors.Is(err, os.ErrClosed) {
					g.drop(TunRead)
					g.log.Warn("read TUN", "err", err)
				}
				break
			}
		}
	}
	b.n = n
	g.counters.TunIn.Add(uint64(n))
	// The SAs are looked up with the tables held, the packets framed
	// after: framing may wait for an SA's first sequence reservation (an
	// fsync), and a change must not wait behind it with every reader
	// queued after the change.
	st := g.view()
	for i := range n {
		p := b.ptrs[i]
		p.Reset(b.bufs[i], esp.Headroom, b.sizes[i])
		s, r, ok := g.route(st, p.Data())
		if !ok {
			g.drop(r)
			continue // no SA: dropped before the engine, counted
		}
		p.SA = s
	}
	g.release()
	for i := range n {
		p := b.ptrs[i]
		s := p.SA
		if s == nil {
			continue
		}
		h := headerOf(s)
		h.setOuter(p)
		if lim := g.innerLimit(h); p.Len > lim {
			// Too big for the path: the outer packet is fragmented when
			// its DF is clear; otherwise the sender hears the MTU that
			// fits, except that IPv6's minimum MTU (RFC 8200 §5) is
			// carried whatever the path, in IPv4 fragments.
			switch {
			case p.Fragment:
			case p.Data()[0]>>4 == 6 && p.Len <= minPMTU6 && !h.outer6:
				p.Fragment = true
			default:
				g.tooBig(p.Data(), lim)
				g.drop(TooBig)
				p.SA = nil
				continue
			}
		}
		if p.Fragment {
			p.FragMTU = g.outerMTU(h)
		}
		if s.PrepareSeal(p) != esp.OK {
			continue // counted on the SA; FinishSeal passes it by
		}
		b.queue(i)
	}
	return nil
}

// route applies the SPD to an outbound packet.
func (g *Gateway) route(st *state, pkt []byte) (*esp.SA, Reason, bool) {
	src, dst, proto, sport, dport, ok := esp.FlowOf(pkt)
	if !ok {
		return nil, NotIP, false
	}
	if s := st.byPeer[dst]; s != nil && s.Config.Src == src {
		return s, 0, true
	}
	if st.only != nil {
		return st.only, 0, true
	}
	if esp.FragmentOf(pkt).Is {
		// A non-initial fragment goes where its initial fragment went,
		// by the ports remembered from it, never by its payload's first
		// bytes (RFC 4301 §7; esp/fragment.go).
		_, _, _, sport, dport, _ = g.frags.FlowOf(pkt)
	}
	pol := st.spd.Lookup(src, dst, proto, sport, dport)
	if pol == nil {
		if g.acquire(src, dst, proto, sport, dport) {
			return nil, Acquire, false
		}
		return nil, NoPolicy, false
	}
	switch pol.Action {
	case sa.Protect:
		if s := st.out[pol.SPI]; s != nil {
			return s, 0, true
		}
		return nil, NoSA, false
	case sa.Bypass:
		return nil, Bypass, false
	}
	return nil, PolicyDiscard, false
}

// sendESP finishes a sealed batch and sends it, in order.
func (g *Gateway) sendESP(b *batch) {
	q := b.sendq[:0]
	var conn Conn
	flush := func() {
		if len(q) == 0 {
			return
		}
		sent, _ := conn.Send(q)
		g.counters.WireOut.Add(uint64(sent))
		if lost := len(q) - sent; lost > 0 {
			g.counters.Drops[SendError].Add(uint64(lost))
		}
		q = q[len(q):]
	}
	for _, p := range b.ptrs[:b.n] {
		if p.SA == nil || p.SA.FinishSeal(p) != esp.OK {
			continue
		}
		cfg := p.SA.Config
		c := g.pick(cfg)
		if c == nil {
			// A change closed the socket while the packet was in flight.
			g.drop(NoSocket)
			continue
		}
		if c != conn {
			flush()
			conn = c
		}
		espLen := len(p.Op.Buf)
		port := cfg.DstPort
		if cfg.Encap == sa.EncapUDP && port == 0 {
			port = sa.DefaultNATTPort
		}
		// The socket sends ESP alone (the kernel or the transport writes
		// the outer IP header, also in transport mode): the packet becomes
		// its ESP part, with its outer header's fields.
		if hdr := p.Len - espLen; cfg.Mode == sa.Transport && cfg.Dst.Is6() && hdr > 40 {
			// IPv6 extension headers stay in front of ESP: the transport
			// sends the packet's own header chain with it (exthdr.go).
			p.HdrLen = hdr
		}
		p.Off, p.Len = p.Off+p.Len-espLen, espLen
		p.Peer, p.Local = netip.AddrPortFrom(cfg.Dst, port), cfg.Src
		q = append(q, p)
	}
	flush()
}
