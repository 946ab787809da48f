package header

import (
	"encoding/binary"
	"net/netip"
)

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

// Update returns the checksum hc updated for the bytes old becoming new, of
// the same even length (RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m')), so a
// field can change without summing the whole packet again.
func Update(hc uint16, old, new []byte) uint16 {
	sum := uint32(^hc)
	for i := 0; i+1 < len(old); i += 2 {
		sum += uint32(^binary.BigEndian.Uint16(old[i:]))
		sum += uint32(binary.BigEndian.Uint16(new[i:]))
	}
	return ^uint16(fold32(sum))
}

// IPv4HeaderLen returns the length of the IPv4 header at the start of b
// (IHL × 4), or false when b is not IPv4 or shorter than its header.
func IPv4HeaderLen(b []byte) (int, bool) {
	if len(b) < 20 || b[0]>>4 != 4 {
		return 0, false
	}
	n := int(b[0]&0x0f) * 4
	return n, n >= 20 && n <= len(b)
}

// PacketLength returns the length the IPv4 or IPv6 header at the start of b
// gives its packet, or false when the header does not parse or b is shorter
// than that length (bytes past it are a link layer's padding).
func PacketLength(b []byte) (int, bool) {
	if len(b) < 1 {
		return 0, false
	}
	switch b[0] >> 4 {
	case 4:
		hl, ok := IPv4HeaderLen(b)
		if !ok {
			return 0, false
		}
		n := int(binary.BigEndian.Uint16(b[2:]))
		return n, n >= hl && n <= len(b)
	case 6:
		if len(b) < 40 {
			return 0, false
		}
		n := 40 + int(binary.BigEndian.Uint16(b[4:]))
		return n, n <= len(b)
	}
	return 0, false
}

// EthernetIP returns where the IPv4 or IPv6 packet of an Ethernet frame
// starts, past up to three VLAN tags (802.1Q, 802.1ad and the older
// 0x9100), or false when the frame carries no IP.
func EthernetIP(frame []byte) (int, bool) {
	for off, tags := 12, 0; off+2 <= len(frame); off, tags = off+4, tags+1 {
		switch binary.BigEndian.Uint16(frame[off:]) {
		case 0x0800, 0x86dd:
			return off + 2, true
		case 0x8100, 0x88a8, 0x9100:
			if tags < 3 {
				continue
			}
		}
		return 0, false
	}
	return 0, false
}

// Header finds the IP header that stays in front of a transport payload:
// the IPv4 header, or the IPv6 header with the extension headers RFC 4303
// §3.1.1 keeps in front of ESP (hop-by-hop, routing, fragment). It returns
// their length, the protocol that follows, the offset of the byte naming
// it, and whether a fragment header is among them; ok is false when the
// headers do not parse within b.
func Header(b []byte) (hl int, proto uint8, protoAt int, frag bool, ok bool) {
	if len(b) >= 1 && b[0]>>4 == 4 {
		if hl, ok = IPv4HeaderLen(b); !ok {
			return 0, 0, 0, false, false
		}
		return hl, b[9], 9, false, true
	}
	if len(b) < IPv6Len || b[0]>>4 != 6 {
		return 0, 0, 0, false, false
	}
	if p := b[6]; p != 0 && p != 43 && p != 44 && p != 60 {
		return IPv6Len, p, 6, false, true // no extension header: the common case, without the walk
	}
	hl, proto, protoAt, fragAt, ok := ext6(b, false)
	return hl, proto, protoAt, fragAt != 0, ok
}

// Addrs reads the source and destination of the IPv4 or IPv6 header at the
// start of b, which must hold the whole fixed header.
func Addrs(b []byte) (src, dst netip.Addr) {
	if b[0]>>4 == 4 {
		return netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
	}
	return netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40]))
}
