package header

import "encoding/binary"

// Version returns the IP version of the packet at the start of b (the high
// nibble of its first byte), or 0 when b is empty.
func Version(b []byte) uint8 {
	if len(b) == 0 {
		return 0
	}
	return b[0] >> 4
}

// AddrBytes returns the source and destination address fields of the IPv4
// or IPv6 header at the start of b as slices of b (4 or 16 bytes each), for
// pseudo-header sums and rewriting in place; both are nil when b does not
// start with a whole fixed IPv4 or IPv6 header.
func AddrBytes(b []byte) (src, dst []byte) {
	switch Version(b) {
	case 4:
		if len(b) >= IPv4Len {
			return b[12:16], b[16:20]
		}
	case 6:
		if len(b) >= IPv6Len {
			return b[8:24], b[24:40]
		}
	}
	return nil, nil
}

// TTL returns an IP packet's TTL (IPv4) or hop limit (IPv6); the caller has
// checked the version and that the fixed header is there.
func TTL(pkt []byte) uint8 {
	if pkt[0]>>4 == 4 {
		return pkt[8]
	}
	return pkt[7]
}

// DF reports whether an IPv4 packet has its don't fragment flag set; an
// IPv6 packet (which routers never fragment) reports false. The caller has
// checked that the fixed header is there.
func DF(pkt []byte) bool { return pkt[0]>>4 == 4 && pkt[6]&0x40 != 0 }

// SetTTL writes it, keeping an IPv4 header's checksum right by an
// incremental update (Update).
func SetTTL(pkt []byte, ttl uint8) {
	if pkt[0]>>4 == 6 {
		pkt[7] = ttl
		return
	}
	// The TTL is the high byte of the header's fifth word.
	old := [2]byte{pkt[8], pkt[9]}
	pkt[8] = ttl
	binary.BigEndian.PutUint16(pkt[10:], Update(binary.BigEndian.Uint16(pkt[10:]), old[:], pkt[8:10]))
}

// IPv4ID returns the identification of the IPv4 header at the start of
// pkt, which must hold the fixed header.
func IPv4ID(pkt []byte) uint16 {
	return binary.BigEndian.Uint16(pkt[4:])
}

// SetIPv4ID writes it, keeping the header's checksum right by an
// incremental update (Update).
func SetIPv4ID(pkt []byte, id uint16) {
	old := [2]byte{pkt[4], pkt[5]}
	binary.BigEndian.PutUint16(pkt[4:], id)
	binary.BigEndian.PutUint16(pkt[10:], Update(binary.BigEndian.Uint16(pkt[10:]), old[:], pkt[4:6]))
}

// Ports returns the source and destination ports at the start of the TCP,
// UDP, SCTP or UDP-Lite header seg, which must hold them (4 bytes).
func Ports(seg []byte) (src, dst uint16) {
	return binary.BigEndian.Uint16(seg), binary.BigEndian.Uint16(seg[2:])
}

// UDPLen is the length of a UDP header.
const UDPLen = 8
