// Package inetsum computes the Internet checksum (RFC 1071) and the
// pseudo-header sums of UDP, TCP and ICMPv6 over IPv4 and IPv6, so the packet
// editors of espgw (the WAN impairments, the pcap rewriter) can leave every
// packet they touch with checksums a real stack accepts.
package inetsum

import "encoding/binary"

// Add adds the 16-bit big-endian words of b to the running sum. An odd final
// byte is padded with zero, as RFC 1071 says; so only the last slice given to
// a chain of Add calls may have an odd length.
func Add(sum uint32, b []byte) uint32 {
	// Eight bytes at a time as two 32-bit words: 2^16 ≡ 1 in one's
	// complement arithmetic, so folding a sum of 32-bit words gives the sum
	// of their 16-bit halves.
	s := uint64(sum)
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		s += v>>32 + v&0xffffffff
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(b[0])<<8 | uint64(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint32(s)
}

// fold32 keeps the running sum from overflowing on long inputs.
func fold32(sum uint32) uint32 {
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum
}

// Finish folds the sum and returns its one's complement: the value to store
// in a checksum field.
func Finish(sum uint32) uint16 {
	return ^uint16(fold32(sum))
}

// Pseudo returns the pseudo-header sum of an upper-layer packet of length n
// and protocol proto between the addresses src and dst, which are both 4
// bytes (IPv4, RFC 768/793) or both 16 bytes (IPv6, RFC 8200 §8.1).
func Pseudo(src, dst []byte, proto uint8, n int) uint32 {
	sum := Add(0, src)
	sum = Add(sum, dst)
	if len(src) == 16 {
		sum += uint32(n>>16) + uint32(n&0xffff)
	} else {
		sum += uint32(n)
	}
	sum += uint32(proto)
	return fold32(sum)
}

// IPv4Header recomputes the header checksum of the IPv4 header h (IHL bytes).
func IPv4Header(h []byte) {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], Finish(Add(0, h)))
}

// Transport checksum field offsets inside their headers.
const (
	OffsetTCP    = 16
	OffsetUDP    = 6
	OffsetICMP   = 2
	OffsetICMPv6 = 2
)

// L4 recomputes the checksum of the upper-layer packet seg (header and
// payload) of protocol proto carried between src and dst. field is the
// offset of the checksum inside seg. ICMPv4 (proto 1) has no pseudo-header.
// A UDP checksum that computes to zero is sent as 0xffff (RFC 768).
func L4(seg, src, dst []byte, proto uint8, field int) {
	seg[field], seg[field+1] = 0, 0
	var sum uint32
	if proto != 1 {
		sum = Pseudo(src, dst, proto, len(seg))
	}
	c := Finish(Add(sum, seg))
	if proto == 17 && c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(seg[field:], c)
}

// Valid reports whether the checksum over seg (with its checksum field in
// place) plus the pseudo-header sum pseudo verifies.
func Valid(pseudo uint32, seg []byte) bool {
	return fold32(Add(pseudo, seg)) == 0xffff
}
