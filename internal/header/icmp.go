package header

import (
	"encoding/binary"
	"fmt"
)

// ICMPLen is the length of an ICMP or ICMPv6 header.
const ICMPLen = 8

// ICMP is an ICMP (RFC 792) or ICMPv6 (RFC 4443) header: type, code and
// the four bytes after the checksum (the next-hop MTU of fragmentation
// needed in the low 16 bits, the MTU of packet too big).
type ICMP struct {
	Type, Code uint8
	Rest       uint32
}

// ICMP types espgw sends and reads.
const (
	ICMPUnreachable    = 3 // code 4: fragmentation needed
	ICMPFragNeeded     = 4
	ICMPv6PacketTooBig = 2
)

// Marshal writes h into b[:ICMPLen] with a zero checksum; the message's
// checksum covers the payload too (ICMPChecksum, L4 for ICMPv6).
func (h *ICMP) Marshal(b []byte) {
	b = b[:ICMPLen]
	b[0], b[1], b[2], b[3] = h.Type, h.Code, 0, 0
	binary.BigEndian.PutUint32(b[4:], h.Rest)
}

// ParseICMP reads the ICMP header at the start of b.
func ParseICMP(b []byte) (ICMP, error) {
	if len(b) < ICMPLen {
		return ICMP{}, fmt.Errorf("ICMP header: %d bytes: %w", len(b), ErrShort)
	}
	return ICMP{Type: b[0], Code: b[1], Rest: binary.BigEndian.Uint32(b[4:])}, nil
}

// ICMPChecksum sets the checksum of the ICMPv4 message msg (no
// pseudo-header).
func ICMPChecksum(msg []byte) {
	msg[2], msg[3] = 0, 0
	binary.BigEndian.PutUint16(msg[2:], Finish(Add(0, msg)))
}
