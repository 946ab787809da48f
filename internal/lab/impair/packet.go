package impair

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/secret"
)

// LinkType says what a packet handed to a Stage starts with.
type LinkType uint8

const (
	// Ethernet frames (with up to three VLAN tags), as the WAN relay
	// sees them on its interfaces.
	Ethernet LinkType = iota
	// IP packets with no link header (IPv4 or IPv6 by the version nibble).
	IP
)

// matcher decides which packets the impairments apply to: ESP (IP protocol
// 50) and ESP inside UDP on the configured ports (RFC 3948). On a UDP port,
// only datagrams that carry ESP match: IKE behind the non-ESP marker (four
// zero bytes) and NAT keepalives (one 0xff byte) are forwarded untouched,
// unless ike is set: then IKE messages match too, on UDP port 500 and
// behind the marker on port 4500.
type matcher struct {
	esp   bool
	ike   bool
	ports []uint16
}

func parseMatch(list []string) (matcher, error) {
	var m matcher
	if len(list) == 0 {
		return m, fmt.Errorf("match is empty: no packet would be impaired (default: [esp, udp/4500])")
	}
	for i, s := range list {
		s = strings.ToLower(strings.TrimSpace(s))
		switch {
		case s == "esp":
			m.esp = true
		case s == "ike":
			m.ike = true
		case strings.HasPrefix(s, "udp/"):
			p, err := strconv.ParseUint(s[4:], 10, 16)
			if err != nil || p == 0 {
				return m, fmt.Errorf("match[%d] %s: want a UDP port 1-65535 after udp/", i, secret.Name(list[i]))
			}
			m.ports = append(m.ports, uint16(p))
		default:
			return m, fmt.Errorf("match[%d] %s: want esp, ike or udp/PORT", i, secret.Name(list[i]))
		}
	}
	return m, nil
}

// layout locates the headers of a matching packet inside its frame.
type layout struct {
	ip    int // start of the IP header
	ipEnd int // end of the IP packet (link padding may follow)
	v6    bool
	udp   int // start of the UDP header, or -1 for raw ESP
	esp   int // start of the ESP header (of the IKE message when ike)
	ike   bool
}

const (
	ipProtoUDP = 17
	ipProtoESP = 50
	// IKE's ports (RFC 7296 §2.23) and its fixed header's length.
	ikePort      = 500
	nattPort     = 4500
	ikeHeaderLen = 28
)

// locate reports whether frame matches and where its headers are.
// Fragments never match: without the whole datagram an impairment could not
// keep the lengths and checksums consistent.
func (m *matcher) locate(frame []byte, link LinkType) (layout, bool) {
	var l layout
	off, ok := 0, true
	if link == Ethernet {
		if off, ok = header.EthernetIP(frame); !ok {
			return l, false
		}
	}
	l.ip = off
	total, ok := header.PacketLength(frame[off:])
	if !ok {
		return l, false
	}
	l.ipEnd, l.v6 = off+total, header.Version(frame[off:]) == 6
	hl, proto, f, ok := header.Upper(frame[off:l.ipEnd])
	if !ok || f.Is {
		return l, false
	}
	l4 := off + hl
	switch {
	case proto == ipProtoESP && m.esp:
		l.udp, l.esp = -1, l4
	case proto == ipProtoUDP && (len(m.ports) > 0 || m.ike):
		if l4+header.UDPLen > l.ipEnd || int(binary.BigEndian.Uint16(frame[l4+4:])) != l.ipEnd-l4 {
			return l, false
		}
		sp, dp := header.Ports(frame[l4:])
		l.udp, l.esp = l4, l4+header.UDPLen
		marker := l.esp+8 <= l.ipEnd && binary.BigEndian.Uint32(frame[l.esp:]) == 0
		switch {
		case m.ike && (sp == ikePort || dp == ikePort):
			l.ike = true
			return l, l.esp+ikeHeaderLen <= l.ipEnd
		case m.ike && marker && (sp == nattPort || dp == nattPort):
			l.esp += 4 // the IKE message after the marker
			l.ike = true
			return l, l.esp+ikeHeaderLen <= l.ipEnd
		case !slices.Contains(m.ports, sp) && !slices.Contains(m.ports, dp):
			return l, false
		case marker:
			return l, false // non-ESP marker: IKE
		}
	default:
		return l, false
	}
	if l.esp+8 > l.ipEnd { // no room for SPI and sequence number: keepalive or junk
		return l, false
	}
	return l, true
}

// setLength makes the packet in frame end at newEnd (inside the ESP part),
// fixing the IP and UDP lengths and checksums, and returns the new frame
// length: link padding after the IP packet is dropped with the bytes cut.
func (l *layout) setLength(frame []byte, newEnd int) int {
	header.SetLength(frame[l.ip:], newEnd-l.ip)
	l.ipEnd = newEnd
	if l.udp >= 0 {
		binary.BigEndian.PutUint16(frame[l.udp+4:], uint16(newEnd-l.udp))
	}
	l.fixUDP(frame)
	return newEnd
}

// fixUDP recomputes the UDP checksum after the payload changed, so the
// receiving stack delivers the datagram and the ESP layer judges it. An IPv4
// UDP checksum of zero (none, allowed by RFC 3948) stays zero.
func (l *layout) fixUDP(frame []byte) {
	if l.udp < 0 {
		return
	}
	if !l.v6 && binary.BigEndian.Uint16(frame[l.udp+header.OffsetUDP:]) == 0 {
		return
	}
	src, dst := header.AddrBytes(frame[l.ip:])
	header.L4(frame[l.udp:l.ipEnd], src, dst, ipProtoUDP, header.OffsetUDP)
}
