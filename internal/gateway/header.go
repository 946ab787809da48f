package gateway

import (
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/espgw/espgw/esp"
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
// headers, with the path MTU learned for it (shared across reloads).
type saHeader struct {
	tunnel bool
	outer6 bool
	dscp   sa.DSCP
	decap  sa.DecapDSCP
	df     sa.DF
	ttl    uint8
	path   *pathMTU
}

func newSAHeader(cfg *sa.SA, path *pathMTU) *saHeader {
	if path == nil {
		path = &pathMTU{}
	}
	return &saHeader{tunnel: cfg.Mode == sa.Tunnel, outer6: cfg.Dst.Is6(), dscp: cfg.DSCP, decap: cfg.DecapDSCP, df: cfg.DF, ttl: cfg.OuterTTL(), path: path}
}

// outer is the outer header of one packet, from readTUN to sendESP.
type outer struct {
	tos, ttl uint8
	fragment bool // IPv4 outer without DF
	fragMTU  int
}

// ECN codepoints (RFC 3168).
const (
	notECT = 0
	ect1   = 1
	ect0   = 2
	ce     = 3
)

// trafficClass returns an IP packet's TOS (IPv4) or traffic class (IPv6)
// byte; the caller has checked the version and the header's length.
func trafficClass(pkt []byte) uint8 {
	if pkt[0]>>4 == 4 {
		return pkt[1]
	}
	return pkt[0]<<4 | pkt[1]>>4
}

// setTrafficClass writes it back, keeping an IPv4 header's checksum right.
func setTrafficClass(pkt []byte, tc uint8) {
	if pkt[0]>>4 == 6 {
		pkt[0] = pkt[0]&0xf0 | tc>>4
		pkt[1] = pkt[1]&0x0f | tc<<4
		return
	}
	old := pkt[1]
	pkt[1] = tc
	// RFC 1624 incremental update: HC' = ~(~HC + ~m + m').
	sum := uint32(^binary.BigEndian.Uint16(pkt[10:12])) + uint32(^(uint16(pkt[0])<<8 | uint16(old))) + uint32(uint16(pkt[0])<<8|uint16(tc))
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(pkt[10:12], ^uint16(sum))
}

// outerFor decides the outer header for inner packet pkt (already routed
// to the SA, so its header parses).
func (h *saHeader) outerFor(pkt []byte) outer {
	tc := trafficClass(pkt)
	v4 := pkt[0]>>4 == 4
	if !h.tunnel {
		// Transport mode: the packet's own header goes on the wire.
		o := outer{tos: tc}
		if v4 {
			o.ttl, o.fragment = pkt[8], pkt[6]&0x40 == 0
		} else {
			o.ttl = pkt[7]
		}
		return o
	}
	o := outer{tos: tc, ttl: h.ttl}
	if h.dscp.Fixed {
		o.tos = h.dscp.Value<<2 | tc&3
	}
	if !h.outer6 {
		switch h.df {
		case sa.DFCopy:
			o.fragment = v4 && pkt[6]&0x40 == 0
		case sa.DFClear:
			o.fragment = true
		}
	}
	return o
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
	tc := trafficClass(pkt)
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
		setTrafficClass(pkt, next)
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
	for _, h := range st.hdr {
		if h.path.mtu.Load() != 0 && now.UnixNano() > h.path.until.Load() {
			h.path.mtu.Store(0)
			h.path.inner.Store(0)
		}
	}
}
