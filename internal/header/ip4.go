package header

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// IPv4Len is the length of an IPv4 header without options.
const IPv4Len = 20

// IPv4 is an IPv4 header without options (RFC 791).
type IPv4 struct {
	TOS      uint8
	TotalLen uint16 // the header and its payload
	ID       uint16
	DF, MF   bool   // don't fragment, more fragments
	FragOff  uint16 // the fragment's offset in bytes, a multiple of 8
	TTL      uint8
	Protocol uint8
	// Src and Dst are IPv4 addresses (or IPv4-mapped IPv6 ones); an
	// invalid Src is written as 0.0.0.0, which a header-including raw
	// socket fills in.
	Src, Dst netip.Addr
}

// Put writes h into b[:IPv4Len] with a zero checksum: what a
// header-including raw socket completes (Linux sums every header it sends).
func (h *IPv4) Put(b []byte) {
	b = b[:IPv4Len]
	b[0], b[1] = 0x45, h.TOS
	binary.BigEndian.PutUint16(b[2:], h.TotalLen)
	binary.BigEndian.PutUint16(b[4:], h.ID)
	frag := h.FragOff / 8
	if h.DF {
		frag |= 0x4000
	}
	if h.MF {
		frag |= 0x2000
	}
	binary.BigEndian.PutUint16(b[6:], frag)
	b[8], b[9] = h.TTL, h.Protocol
	b[10], b[11] = 0, 0
	var src [4]byte
	if h.Src.IsValid() {
		src = h.Src.Unmap().As4()
	}
	dst := h.Dst.Unmap().As4()
	copy(b[12:16], src[:])
	copy(b[16:20], dst[:])
}

// Marshal writes h into b[:IPv4Len] with its checksum.
func (h *IPv4) Marshal(b []byte) {
	h.Put(b)
	IPv4Header(b[:IPv4Len])
}

// Errors of the parsers, wrapped with what and where.
var (
	ErrShort   = errors.New("short")
	ErrVersion = errors.New("wrong IP version")
	ErrLength  = errors.New("bad length")
)

// ParseIPv4 reads the IPv4 header at the start of b and returns it and its
// length (options included, not read). It checks the version, the header
// length and that b holds the header; the checksum is the caller's to check
// (Valid) when it matters.
func ParseIPv4(b []byte) (IPv4, int, error) {
	if len(b) < IPv4Len {
		return IPv4{}, 0, fmt.Errorf("IPv4 header: %d bytes: %w", len(b), ErrShort)
	}
	if v := b[0] >> 4; v != 4 {
		return IPv4{}, 0, fmt.Errorf("IPv4 header: version %d: %w", v, ErrVersion)
	}
	hl := int(b[0]&0x0f) * 4
	if hl < IPv4Len || hl > len(b) {
		return IPv4{}, 0, fmt.Errorf("IPv4 header: header length %d in %d bytes: %w", hl, len(b), ErrLength)
	}
	frag := binary.BigEndian.Uint16(b[6:])
	h := IPv4{
		TOS: b[1], TotalLen: binary.BigEndian.Uint16(b[2:]), ID: binary.BigEndian.Uint16(b[4:]),
		DF: frag&0x4000 != 0, MF: frag&0x2000 != 0, FragOff: frag & 0x1fff * 8,
		TTL: b[8], Protocol: b[9],
		Src: netip.AddrFrom4([4]byte(b[12:16])), Dst: netip.AddrFrom4([4]byte(b[16:20])),
	}
	if int(h.TotalLen) < hl {
		return IPv4{}, 0, fmt.Errorf("IPv4 header: total length %d below the header's %d: %w", h.TotalLen, hl, ErrLength)
	}
	return h, hl, nil
}

// TrafficClass returns an IP packet's TOS (IPv4) or traffic class (IPv6)
// byte; the caller has checked the version and that the fixed header is
// there.
func TrafficClass(pkt []byte) uint8 {
	if pkt[0]>>4 == 4 {
		return pkt[1]
	}
	return pkt[0]<<4 | pkt[1]>>4
}

// SetTrafficClass writes it, keeping an IPv4 header's checksum right by an
// incremental update (Update).
func SetTrafficClass(pkt []byte, tc uint8) {
	if pkt[0]>>4 == 6 {
		pkt[0] = pkt[0]&0xf0 | tc>>4
		pkt[1] = pkt[1]&0x0f | tc<<4
		return
	}
	old := [2]byte{pkt[0], pkt[1]}
	pkt[1] = tc
	binary.BigEndian.PutUint16(pkt[10:], Update(binary.BigEndian.Uint16(pkt[10:]), old[:], pkt[0:2]))
}

// SetLength rewrites the length field of the IPv4 or IPv6 header at the
// start of hdr for a packet of total bytes, and an IPv4 header's checksum.
func SetLength(hdr []byte, total int) {
	if hdr[0]>>4 == 4 {
		binary.BigEndian.PutUint16(hdr[2:4], uint16(total))
		ihl, _ := IPv4HeaderLen(hdr) // the caller's own header
		IPv4Header(hdr[:ihl])
		return
	}
	binary.BigEndian.PutUint16(hdr[4:6], uint16(total-IPv6Len))
}
