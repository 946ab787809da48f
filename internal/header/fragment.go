package header

import "encoding/binary"

// Frag is where an IP packet stands in its datagram, read from its IPv4
// header (RFC 791 §3.2) or its IPv6 fragment header (RFC 8200 §4.5).
type Frag struct {
	// Is: the packet is a fragment: IPv4 with MF or an offset, or IPv6
	// with a fragment header (an atomic one, offset 0 and no more, too).
	Is     bool
	Offset int    // of the fragment's data in the datagram's, in bytes
	More   bool   // more fragments follow
	ID     uint32 // the datagram's identification (16 bits in IPv4)
	DF     bool   // IPv4's don't fragment flag
	// Proto is the datagram's protocol: IPv4's, or the next header of the
	// fragment header; with ID and the addresses it names the datagram.
	Proto uint8
}

// frag4 reads the fragment fields of the IPv4 header b.
func frag4(b []byte) Frag {
	ff := binary.BigEndian.Uint16(b[6:])
	f := Frag{Offset: int(ff&0x1fff) * 8, More: ff&0x2000 != 0, ID: uint32(IPv4ID(b)), DF: ff&0x4000 != 0, Proto: b[9]}
	f.Is = f.More || f.Offset != 0
	return f
}

// frag6 reads the IPv6 fragment header at b[at:], or none when at is 0.
func frag6(b []byte, at int) Frag {
	if at == 0 {
		return Frag{}
	}
	fo := binary.BigEndian.Uint16(b[at+2:])
	return Frag{Is: true, Offset: int(fo &^ 7), More: fo&1 != 0, ID: binary.BigEndian.Uint32(b[at+4:]), Proto: b[at]}
}

// Fragment reads the fragmentation of the IPv4 packet at the start of b,
// or of the IPv6 packet from the fragment header among the extension
// headers Header walks; ok is false when the headers do not parse within
// b, as for Header.
func Fragment(b []byte) (f Frag, ok bool) {
	if Version(b) == 4 {
		if _, ok := IPv4HeaderLen(b); !ok {
			return Frag{}, false
		}
		return frag4(b), true
	}
	if len(b) < IPv6Len || b[0]>>4 != 6 {
		return Frag{}, false
	}
	_, _, _, at, ok := ext6(b, false)
	if !ok {
		return Frag{}, false
	}
	return frag6(b, at), true
}

// Upper finds the upper-layer header of the IP packet at the start of b:
// past the IPv4 header, or past the IPv6 header and every extension header
// in front of the upper layer (hop-by-hop, routing, destination options,
// fragment, AH), where Header stops at those that go behind ESP. It
// returns the offset and protocol of the upper layer and the packet's
// fragmentation. After a fragment header with a non-zero offset it stops:
// what follows is the middle of the datagram. ok is false when the headers
// do not parse within b.
func Upper(b []byte) (hl int, proto uint8, f Frag, ok bool) {
	if Version(b) == 4 {
		if hl, ok = IPv4HeaderLen(b); !ok {
			return 0, 0, Frag{}, false
		}
		return hl, b[9], frag4(b), true
	}
	if len(b) < IPv6Len || b[0]>>4 != 6 {
		return 0, 0, Frag{}, false
	}
	hl, proto, _, at, ok := ext6(b, true)
	if !ok {
		return 0, 0, Frag{}, false
	}
	return hl, proto, frag6(b, at), true
}

// ext6 walks the extension headers of the IPv6 packet b (its fixed header
// checked by the caller). It passes hop-by-hop, routing and fragment
// headers, and destination options unless a routing header came before
// them (then they are for the final destination and go behind ESP, as
// Linux's ip6_find_1stfragopt places ESP). With upper it also passes those
// and AH, and stops after a fragment header that is not the first. It
// returns the headers' length, the protocol that follows, the offset of
// the byte naming it and the offset of the first fragment header (0 for
// none); ok is false when the headers do not parse within b.
func ext6(b []byte, upper bool) (hl int, proto uint8, protoAt, fragAt int, ok bool) {
	protoAt, hl, proto = 6, IPv6Len, b[6]
	routing := false
	for {
		switch {
		case proto == 0 || proto == 43 || proto == 44:
		case proto == 60 && (upper || !routing):
		case proto == 51 && upper:
		default:
			return hl, proto, protoAt, fragAt, true
		}
		if len(b) < hl+8 {
			return 0, 0, 0, 0, false
		}
		cur := proto
		protoAt, proto = hl, b[hl]
		switch cur {
		case 44:
			if fragAt == 0 {
				fragAt = hl
			}
			hl += 8
			if upper && binary.BigEndian.Uint16(b[hl-6:])&^7 != 0 {
				return hl, proto, protoAt, fragAt, true
			}
		case 51: // AH's length is in 4-byte words, less 2
			hl += (int(b[hl+1]) + 2) * 4
		default:
			routing = routing || cur == 43
			hl += (int(b[hl+1]) + 1) * 8
		}
		if len(b) < hl {
			return 0, 0, 0, 0, false
		}
	}
}
