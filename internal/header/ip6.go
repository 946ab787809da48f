package header

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// IPv6Len is the length of the fixed IPv6 header.
const IPv6Len = 40

// IPv6 is the fixed IPv6 header (RFC 8200 §3).
type IPv6 struct {
	TrafficClass uint8
	FlowLabel    uint32 // 20 bits
	PayloadLen   uint16 // extension headers included
	NextHeader   uint8
	HopLimit     uint8
	Src, Dst     netip.Addr
}

// Marshal writes h into b[:IPv6Len].
func (h *IPv6) Marshal(b []byte) {
	b = b[:IPv6Len]
	binary.BigEndian.PutUint32(b[0:], 6<<28|uint32(h.TrafficClass)<<20|h.FlowLabel&0xfffff)
	binary.BigEndian.PutUint16(b[4:], h.PayloadLen)
	b[6], b[7] = h.NextHeader, h.HopLimit
	src, dst := h.Src.As16(), h.Dst.As16()
	copy(b[8:24], src[:])
	copy(b[24:40], dst[:])
}

// ParseIPv6 reads the fixed IPv6 header at the start of b. It checks the
// version and that b holds the header, not the payload length.
func ParseIPv6(b []byte) (IPv6, error) {
	if len(b) < IPv6Len {
		return IPv6{}, fmt.Errorf("IPv6 header: %d bytes: %w", len(b), ErrShort)
	}
	w := binary.BigEndian.Uint32(b)
	if v := w >> 28; v != 6 {
		return IPv6{}, fmt.Errorf("IPv6 header: version %d: %w", v, ErrVersion)
	}
	return IPv6{
		TrafficClass: uint8(w >> 20), FlowLabel: w & 0xfffff,
		PayloadLen: binary.BigEndian.Uint16(b[4:]), NextHeader: b[6], HopLimit: b[7],
		Src: netip.AddrFrom16([16]byte(b[8:24])), Dst: netip.AddrFrom16([16]byte(b[24:40])),
	}, nil
}

// WriteIP writes, ending at buf[end], a minimal IP header for src→dst
// carrying proto in front of a payload of n bytes (TTL or hop limit 64, TOS
// 0, IPv4 without DF), and returns its length.
func WriteIP(buf []byte, end int, src, dst netip.Addr, proto uint8, n int) int {
	if src.Is4() {
		h := IPv4{TotalLen: uint16(IPv4Len + n), TTL: 64, Protocol: proto, Src: src, Dst: dst}
		h.Marshal(buf[end-IPv4Len : end])
		return IPv4Len
	}
	h := IPv6{PayloadLen: uint16(n), NextHeader: proto, HopLimit: 64, Src: src, Dst: dst}
	h.Marshal(buf[end-IPv6Len : end])
	return IPv6Len
}
