package capture

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/sa"
)

const (
	protoUDP = 17
	protoESP = 50
)

// Sealer turns inner IP packets into ESP packets as they travel on the wire:
// in tunnel mode behind an outer IPv4 or IPv6 header from the SA, in
// transport mode behind the packet's own header, and with a UDP header
// (RFC 3948) in between when the SA is UDP-encapsulated. It reuses one
// buffer, so a result is valid until the next call.
type Sealer struct {
	sa  *esp.SA
	pr  *esp.Processor
	buf []byte
	pkt esp.Packet
	one []*esp.Packet
}

// NewSealer returns a Sealer for s.
func NewSealer(s *esp.SA) *Sealer {
	z := &Sealer{sa: s, pr: esp.NewProcessor(s.Engine())}
	z.one = []*esp.Packet{&z.pkt}
	return z
}

// Seal seals one inner IP packet. A packet the SA refuses comes back as an
// esp.Reason error.
func (z *Sealer) Seal(ctx context.Context, inner []byte) ([]byte, error) {
	cfg := z.sa.Config
	need := esp.Headroom + len(inner) + esp.Tailroom + max(cfg.TFCPad, 0)
	if len(z.buf) < need {
		z.buf = make([]byte, need)
	}
	buf := z.buf
	copy(buf[esp.Headroom:], inner)
	z.pkt = esp.Packet{Buf: buf, Off: esp.Headroom, Len: len(inner), SA: z.sa}
	if err := z.pr.Seal(ctx, z.one); err != nil {
		return nil, err
	}
	if z.pkt.Drop != esp.OK {
		return nil, z.pkt.Drop
	}
	off, n := z.pkt.Off, z.pkt.Len
	if cfg.Mode == sa.Transport {
		if cfg.Encap == sa.EncapUDP {
			hl, _, protoAt, _, ok := header.Header(buf[off : off+n])
			if !ok {
				return nil, fmt.Errorf("sealed transport packet has no IP header")
			}
			copy(buf[off-header.UDPLen:], buf[off:off+hl])
			off -= header.UDPLen
			n += header.UDPLen
			buf[off+protoAt] = protoUDP
			src, dst := header.Addrs(buf[off : off+hl])
			putUDP(buf[off+hl:off+n], cfg, src, dst)
			header.SetLength(buf[off:off+hl], n)
		}
		return buf[off : off+n], nil
	}
	proto := uint8(protoESP)
	if cfg.Encap == sa.EncapUDP {
		off -= header.UDPLen
		n += header.UDPLen
		proto = protoUDP
		putUDP(buf[off:off+n], cfg, cfg.Src, cfg.Dst)
	}
	hl := header.WriteIP(buf, off, cfg.Src, cfg.Dst, proto, n)
	return buf[off-hl : off+n], nil
}

// natPorts returns the SA's UDP ports, RFC 3948's 4500 where unset.
func natPorts(cfg *sa.SA) (src, dst uint16) {
	return cmp.Or(cfg.SrcPort, sa.DefaultNATTPort), cmp.Or(cfg.DstPort, sa.DefaultNATTPort)
}

// putUDP writes the UDP header at the start of seg (header and ESP). The
// checksum is zero over IPv4, as RFC 3948 §2.1 allows, and computed over
// IPv6, where zero is not allowed.
func putUDP(seg []byte, cfg *sa.SA, src, dst netip.Addr) {
	sport, dport := natPorts(cfg)
	binary.BigEndian.PutUint16(seg[0:], sport)
	binary.BigEndian.PutUint16(seg[2:], dport)
	binary.BigEndian.PutUint16(seg[4:], uint16(len(seg)))
	seg[6], seg[7] = 0, 0
	if src.Is6() && !src.Is4In6() {
		s, d := src.As16(), dst.As16()
		header.L4(seg, s[:], d[:], protoUDP, header.OffsetUDP)
	}
}

// Result is what became of one packet given to Opener.Open.
type Result struct {
	// Inner is the opened inner packet, valid until the next Open.
	Inner []byte
	// SA is the SA that judged the packet; nil when none was found.
	SA *esp.SA
	// SPI is the packet's SPI, when it had one.
	SPI uint32
	// Reject is why an ESP packet did not open; OK when it did or when
	// the packet was skipped.
	Reject esp.Reason
	// Skip is set when the packet was not ESP at all.
	Skip Skip
}

// Opener opens ESP packets as captured on the wire — IP protocol 50, or UDP
// on the SAs' ports (4500 by default) — with the SA their SPI (and outer
// destination) names.
type Opener struct {
	sad   *sa.SAD
	sas   map[*sa.SA]*esp.SA
	ports map[uint16]bool
	pr    *esp.Processor
	buf   []byte
	pkt   esp.Packet
	one   []*esp.Packet
}

// NewOpener returns an Opener for the SAs, which share one engine.
func NewOpener(sas []*esp.SA) (*Opener, error) {
	if len(sas) == 0 {
		return nil, fmt.Errorf("no SAs to open with")
	}
	cfgs := make([]*sa.SA, len(sas))
	o := &Opener{sas: map[*sa.SA]*esp.SA{}, ports: map[uint16]bool{sa.DefaultNATTPort: true}}
	for i, s := range sas {
		cfgs[i] = s.Config
		o.sas[s.Config] = s
		if s.Config.Encap == sa.EncapUDP {
			sp, dp := natPorts(s.Config)
			o.ports[sp], o.ports[dp] = true, true
		}
	}
	sad, err := sa.NewSAD(cfgs)
	if err != nil {
		return nil, fmt.Errorf("index SAs by SPI: %w", err)
	}
	o.sad = sad
	o.pr = esp.NewProcessor(sas[0].Engine())
	o.one = []*esp.Packet{&o.pkt}
	return o, nil
}

// Open classifies one IP packet and opens it if it is ESP for a known SA.
func (o *Opener) Open(ctx context.Context, ip []byte) (Result, error) {
	total, okLen := header.PacketLength(ip)
	hl, _, protoAt, _, ok := header.Header(ip)
	if !ok || !okLen || total < hl {
		return Result{Skip: MalformedIP}, nil
	}
	ip = ip[:total]
	if f, _ := header.Fragment(ip); f.Is {
		return Result{Skip: IPFragment}, nil
	}
	espOff := hl
	switch ip[protoAt] {
	case protoESP:
	case protoUDP:
		if len(ip) < hl+header.UDPLen {
			return Result{Skip: NotESP}, nil
		}
		sport, dport := header.Ports(ip[hl:])
		if !o.ports[sport] && !o.ports[dport] {
			return Result{Skip: NotESP}, nil
		}
		payload := ip[hl+header.UDPLen:]
		if len(payload) == 1 && payload[0] == 0xff {
			return Result{Skip: NATKeepalive}, nil
		}
		if len(payload) >= 4 && binary.BigEndian.Uint32(payload) == 0 {
			return Result{Skip: NonESPMarker}, nil
		}
		espOff = hl + header.UDPLen
	default:
		return Result{Skip: NotESP}, nil
	}
	espPkt := ip[espOff:]
	spi, ok := esp.SPIOf(espPkt)
	if !ok {
		return Result{Reject: esp.Truncated}, nil
	}
	_, dst := header.Addrs(ip)
	cfg := o.sad.LookupDst(spi, dst)
	if cfg == nil {
		cfg = o.sad.Lookup(spi)
	}
	if cfg == nil {
		return Result{SPI: spi, Reject: esp.UnknownSPI}, nil
	}
	s := o.sas[cfg]
	if need := hl + len(espPkt); len(o.buf) < need {
		o.buf = make([]byte, need)
	}
	off, hdrLen := 0, 0
	if cfg.Mode == sa.Transport {
		// The IP header goes right in front of ESP, as a raw socket
		// delivers it, naming ESP even when UDP carried it.
		copy(o.buf, ip[:hl])
		o.buf[protoAt] = protoESP
		off, hdrLen = hl, hl
	}
	n := copy(o.buf[off:], espPkt)
	o.pkt = esp.Packet{Buf: o.buf, Off: off, Len: n, HdrLen: hdrLen, SA: s}
	if err := o.pr.Open(ctx, o.one); err != nil {
		return Result{}, err
	}
	if o.pkt.Drop != esp.OK {
		return Result{SA: s, SPI: spi, Reject: o.pkt.Drop}, nil
	}
	return Result{Inner: o.pkt.Data(), SA: s, SPI: spi}, nil
}
