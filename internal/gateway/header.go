package gateway

import (
	"encoding/binary"
	"net"
	"sync/atomic"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/sa"
)

// The outer header of a tunnel (RFC 4301 §5.1.2, RFC 6040) and the path
// beneath it. Outbound, the gateway decides each outer header from the
// inner one and the SA's options: DSCP copied or fixed, ECN copied (RFC
// 6040 normal mode), DF copied, set or cleared, TTL per SA. Inbound, it
// folds the outer ECN into the inner header by RFC 6040's table (dropping
// what the table says to drop) and copies the outer DSCP in when the SA
// asks. Transport-mode packets keep their own header's values. The TTL of
// the inner packet is the host kernel's business: it routes the packet
// into the TUN and out of it, as a router, once each way.

// saHeader is what the data path needs of an SA to write or read outer
// headers, with the path MTU learned for it. It is one cache line, its
// own: with many SAs every line a packet reads is a cache miss.
type saHeader struct {
	tunnel bool
	outer6 bool
	dscp   sa.DSCP
	decap  sa.DecapDSCP
	df     sa.DF
	ttl    uint8
	// fits is the largest inner packet the SA carries in the configured
	// outer MTU, computed on first use (0: not yet).
	fits atomic.Int32
	cfg  *sa.SA
	path pathMTU
	_    [64 - 40]byte // to the 64-byte size class, whose objects start on a line
}

func newSAHeader(cfg *sa.SA) *saHeader {
	return &saHeader{tunnel: cfg.Mode == sa.Tunnel, outer6: cfg.Dst.Is6(), dscp: cfg.DSCP, decap: cfg.DecapDSCP, df: cfg.DF, ttl: cfg.OuterTTL(), cfg: cfg}
}

// ECN codepoints (RFC 3168).
const (
	notECT = 0
	ect1   = 1
	ect0   = 2
	ce     = 3
)

// setOuter decides the outer header of p, whose data is the inner packet
// (already routed to the SA, so its header parses): p.TOS, p.TTL and
// p.Fragment, which the transport writes.
func (h *saHeader) setOuter(p *esp.Packet) {
	pkt := p.Data()
	tc := header.TrafficClass(pkt)
	v4 := header.Version(pkt) == 4
	p.TOS, p.FragMTU = tc, 0
	if !h.tunnel {
		// Transport mode: the packet's own header goes on the wire.
		p.TTL, p.Fragment = header.TTL(pkt), v4 && !header.DF(pkt)
		return
	}
	p.TTL, p.Fragment = h.ttl, false
	if h.dscp.Fixed {
		p.TOS = h.dscp.Value<<2 | tc&3
	}
	if !h.outer6 {
		switch h.df {
		case sa.DFCopy:
			p.Fragment = v4 && !header.DF(pkt)
		case sa.DFClear:
			p.Fragment = true
		}
	}
}

// decapsulate folds the outer traffic class into the opened tunnel-mode
// inner packet pkt: ECN by RFC 6040 §4.2 (normal mode), and DSCP when the
// SA copies it. It reports false when the combination must be dropped: an
// outer CE over an inner Not-ECT, a congestion mark the inner transport
// cannot carry.
func (h *saHeader) decapsulate(pkt []byte, outerTC uint8) bool {
	if !h.tunnel || len(pkt) < 20 {
		return true
	}
	if pkt[0]>>4 == 6 && len(pkt) < 40 {
		return true
	}
	tc := header.TrafficClass(pkt)
	in, out := tc&3, outerTC&3
	next := tc
	switch {
	case out == ce && in == notECT:
		return false
	case out == ce:
		next = tc&^3 | ce
	case out == ect1 && in == ect0:
		next = tc&^3 | ect1
	}
	if h.decap == sa.DecapCopy {
		next = outerTC&^3 | next&3
	}
	if next != tc {
		header.SetTrafficClass(pkt, next)
	}
	return true
}

// pathMTU is the outer path MTU learned from ICMP about one outbound SA's
// packets (RFC 1191, RFC 8201): lowered by each report, back to the
// configured outer MTU when it expires.
type pathMTU struct {
	mtu   atomic.Int32 // the learned outer MTU; 0: none
	inner atomic.Int32 // the largest inner packet that fits it
	until atomic.Int64 // when it expires, Unix nanoseconds
}

// innerLimit is the largest inner packet the SA carries now.
func (g *Gateway) innerLimit(h *saHeader) int {
	lim := g.InnerMTU()
	f := int(h.fits.Load())
	if f == 0 {
		// The TUN MTU may be above what the outer MTU carries (a test bed
		// that wants large inner packets to reach the gateway).
		f = lim
		if m, err := InnerMTU(g.opts.OuterMTU, h.cfg); err == nil && m > 0 {
			f = m
		}
		h.fits.Store(int32(f))
	}
	lim = min(lim, f)
	if m := int(h.path.inner.Load()); m > 0 && m < lim {
		return m
	}
	return lim
}

// outerMTU is the largest outer packet the SA sends now.
func (g *Gateway) outerMTU(h *saHeader) int {
	if m := int(h.path.mtu.Load()); m > 0 {
		return m
	}
	return g.opts.OuterMTU
}

// DefaultPMTUExpiry is how long a learned path MTU holds (Linux's
// net.ipv4.route.mtu_expires).
const DefaultPMTUExpiry = 10 * time.Minute

// Smallest path MTUs believed, as Linux's min_pmtu and IPv6's minimum link
// MTU: a report below them (perhaps forged) lowers the path to them only.
const (
	minPMTU4 = 552
	minPMTU6 = 1280
)

// learnPMTU lowers s's path MTU to mtu (bounded), for the expiry.
func (g *Gateway) learnPMTU(s *esp.SA, h *saHeader, mtu int, now time.Time) bool {
	floor := minPMTU4
	if h.outer6 {
		floor = minPMTU6
	}
	mtu = max(mtu, floor)
	if mtu >= g.outerMTU(h) {
		return false // PMTU only falls on reports; it rises when it expires
	}
	inner, err := InnerMTU(mtu, s.Config)
	if err != nil || inner < 68 {
		return false
	}
	h.path.until.Store(now.Add(g.opts.PMTUExpiry).UnixNano())
	h.path.inner.Store(int32(inner))
	h.path.mtu.Store(int32(mtu))
	return true
}

// expirePMTU forgets learned path MTUs whose time is up.
func (g *Gateway) expirePMTU(st *state, now time.Time) {
	for _, s := range st.all {
		if h := headerOf(s); h != nil && h.path.mtu.Load() != 0 && now.UnixNano() > h.path.until.Load() {
			h.path.mtu.Store(0)
			h.path.inner.Store(0)
		}
	}
}

// ICMP about the outer path. A raw ICMP socket per outer family (opened by
// Start) sees every "fragmentation needed" and "packet too big" the host
// receives; the ones quoting an ESP packet of an outbound SA — raw, or in
// UDP with the SPI quoted — lower that SA's path MTU. Reports about other
// packets, unknown SPIs or foreign addresses are counted and ignored.

// PMTUCounters count the ICMP reports about the outer path.
type PMTUCounters struct {
	Updates atomic.Uint64 // reports that lowered an SA's path MTU
	Ignored atomic.Uint64 // reports about no outbound SA of ours, or not lower
}

// HandleICMP reads one ICMP (v6: ICMPv6) message, without its IP header,
// received by the host, and applies what it says about an outer path.
func (g *Gateway) HandleICMP(msg []byte, v6 bool, now time.Time) {
	mtu, quote, ok := pathReport(msg, v6)
	if !ok {
		return // not about a path MTU: someone else's business
	}
	src, dst, proto, payload, ok := quotedFlow(quote, v6)
	st := g.view()
	defer g.release()
	updated := false
	if ok {
		switch proto {
		case 50:
			if len(payload) >= 4 {
				s := st.out[binary.BigEndian.Uint32(payload)]
				updated = s != nil && s.Config.Encap == sa.EncapNone && g.learnFor(st, s, src, dst, mtu, now)
			}
		case 17:
			// ESP in UDP: the SPI follows the UDP header when the report
			// quotes that much (RFC 1812 routers do; RFC 792 ones quote 8
			// bytes, and then every UDP SA to that peer learns).
			if len(payload) >= 12 && binary.BigEndian.Uint32(payload[8:]) != 0 {
				s := st.out[binary.BigEndian.Uint32(payload[8:])]
				updated = s != nil && s.Config.Encap == sa.EncapUDP && g.learnFor(st, s, src, dst, mtu, now)
			} else if len(payload) >= 4 {
				for _, s := range st.out {
					if s.Config.Encap == sa.EncapUDP && g.learnFor(st, s, src, dst, mtu, now) {
						updated = true
					}
				}
			}
		}
	}
	if updated {
		g.pmtu.Updates.Add(1)
	} else {
		g.pmtu.Ignored.Add(1)
	}
}

// learnFor lowers s's path MTU if the quoted packet was one of s's.
func (g *Gateway) learnFor(st *state, s *esp.SA, src, dst [16]byte, mtu int, now time.Time) bool {
	c := s.Config
	if c.Src.As16() != src || c.Dst.As16() != dst {
		return false
	}
	h := headerOf(s)
	if h == nil {
		return false
	}
	if g.learnPMTU(s, h, mtu, now) {
		g.log.Info("path MTU lowered by ICMP", "spi", s.SPI(), "dst", c.Dst, "mtu", h.path.mtu.Load(), "inner", h.path.inner.Load())
		return true
	}
	return false
}

// pathReport returns the MTU of an ICMP fragmentation-needed (type 3 code
// 4) or ICMPv6 packet-too-big (type 2) message and the packet it quotes.
func pathReport(msg []byte, v6 bool) (mtu int, quote []byte, ok bool) {
	h, err := header.ParseICMP(msg)
	if err != nil {
		return 0, nil, false
	}
	if v6 {
		if h.Type != header.ICMPv6PacketTooBig || h.Code != 0 {
			return 0, nil, false
		}
		return int(min(h.Rest, 1<<16)), msg[header.ICMPLen:], true
	}
	if h.Type != header.ICMPUnreachable || h.Code != header.ICMPFragNeeded {
		return 0, nil, false
	}
	m := int(h.Rest & 0xffff)
	if m == 0 {
		return 0, nil, false // an RFC 792 router that gives no MTU: no guess made
	}
	return m, msg[header.ICMPLen:], true
}

// quotedFlow reads the addresses and upper protocol of a quoted IP packet
// and returns the bytes after its headers (IPv4 addresses as mapped IPv6,
// to compare with netip.Addr.As16).
func quotedFlow(q []byte, v6 bool) (src, dst [16]byte, proto uint8, payload []byte, ok bool) {
	if !v6 {
		if len(q) < 20 || q[0]>>4 != 4 {
			return src, dst, 0, nil, false
		}
		ihl := int(q[0]&0x0f) * 4
		if ihl < 20 || len(q) < ihl || binary.BigEndian.Uint16(q[6:])&0x1fff != 0 {
			return src, dst, 0, nil, false
		}
		src = netipMapped(q[12:16])
		dst = netipMapped(q[16:20])
		return src, dst, q[9], q[ihl:], true
	}
	if len(q) < 40 || q[0]>>4 != 6 {
		return src, dst, 0, nil, false
	}
	copy(src[:], q[8:24])
	copy(dst[:], q[24:40])
	next, off := q[6], 40
	for next == 0 || next == 43 || next == 60 {
		if len(q) < off+2 {
			return src, dst, 0, nil, false
		}
		next, off = q[off], off+(int(q[off+1])+1)*8
	}
	if len(q) < off {
		return src, dst, 0, nil, false
	}
	return src, dst, next, q[off:], true
}

func netipMapped(a []byte) [16]byte {
	var m [16]byte
	m[10], m[11] = 0xff, 0xff
	copy(m[12:], a)
	return m
}

// icmpConn is a raw ICMP socket of one family: one that watches for
// reports about the outer path, or one that only sends.
type icmpConn struct {
	pc    net.PacketConn
	v6    bool
	watch bool
}

// readICMP hands every message c receives to HandleICMP until c closes.
// Go's raw IPv4 sockets strip the IP header; IPv6 ones never deliver it.
func (g *Gateway) readICMP(c icmpConn) {
	buf := make([]byte, 2048)
	for {
		n, _, err := c.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		g.HandleICMP(buf[:n], c.v6, time.Now())
	}
}
