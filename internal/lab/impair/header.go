package impair

import (
	"net/netip"

	"github.com/espgw/espgw/internal/header"
)

// Header impairments: what a WAN does to the outer header rather than to
// the ESP inside it.
//
//   - ECNCE (`ecn-ce: percent`) sets the ECN field of the outer IP header
//     to CE (congestion experienced) — whatever it was, so a Not-ECT packet
//     marked CE, which RFC 6040 tells a tunnel egress to drop, can be
//     produced on purpose.
//   - PMTU (`pmtu: bytes`) is a link of that MTU for packets that must not
//     be fragmented: a matching IPv4 packet with DF set, or any IPv6 one,
//     longer than PMTU is dropped (TooBig) and answered with ICMP
//     "fragmentation needed" / ICMPv6 "packet too big" announcing PMTU,
//     sent back toward its sender (PopBack) from the packet's destination
//     address. Packets without DF and fragments pass: only senders that
//     forbid fragmentation learn a path MTU.

// markCE sets the outer ECN field of the located packet to CE.
func markCE(frame []byte, l *layout) {
	ip := frame[l.ip:]
	if l.v6 {
		ip[1] |= 0x30 // the traffic class's low two bits straddle bytes 0 and 1
		return
	}
	ip[1] |= 0x03
	header.IPv4Header(ip[:int(ip[0]&0x0f)*4])
}

// tooBig reports whether the located packet exceeds the PMTU and may not
// be fragmented on the way.
func (s *Stage) tooBig(frame []byte, l *layout) bool {
	if s.cfg.PMTU == 0 || l.ipEnd-l.ip <= s.cfg.PMTU {
		return false
	}
	return l.v6 || frame[l.ip+6]&0x40 != 0
}

// Largest ICMP errors built (RFC 1812 §4.3.2.3, RFC 4443 §2.4 (c)).
const (
	maxICMP4 = 576
	maxICMP6 = 1280
)

// reportTooBig queues the ICMP error about the located packet for PopBack.
// For Ethernet links the MACs are left zero: the relay writes them, as it
// knows which link the packet came from.
func (s *Stage) reportTooBig(frame []byte, l *layout) {
	link := 0
	if s.link == Ethernet {
		link = 14 // any VLAN tags are the relay's to write, with the MACs
	}
	orig := frame[l.ip:l.ipEnd]
	hdr, limit := 20, maxICMP4
	if l.v6 {
		hdr, limit = 40, maxICMP6
	}
	quote := min(len(orig), limit-hdr-8, s.size-link-hdr-8)
	p := s.getSized(link + hdr + 8 + quote)
	if p == nil {
		s.c.Overflow++ // no room for the report; the packet is dropped anyway
		return
	}
	b := p.buf
	if link > 0 {
		clear(b[:12])
		b[12], b[13] = 0x08, 0x00
		if l.v6 {
			b[12], b[13] = 0x86, 0xdd
		}
	}
	ip := b[link : link+hdr]
	icmp := b[link+hdr : link+hdr+8+quote]
	copy(icmp[8:], orig[:quote])
	if l.v6 {
		// From the packet's destination back to its source.
		h := header.IPv6{PayloadLen: uint16(8 + quote), NextHeader: 58, HopLimit: 64,
			Src: netip.AddrFrom16([16]byte(orig[24:40])), Dst: netip.AddrFrom16([16]byte(orig[8:24]))}
		h.Marshal(ip)
		m := header.ICMP{Type: header.ICMPv6PacketTooBig, Rest: uint32(s.cfg.PMTU)}
		m.Marshal(icmp)
		header.L4(icmp, ip[8:24], ip[24:40], 58, header.OffsetICMPv6)
	} else {
		h := header.IPv4{TOS: 0xc0, TotalLen: uint16(hdr + 8 + quote), TTL: 64, Protocol: 1,
			Src: netip.AddrFrom4([4]byte(orig[16:20])), Dst: netip.AddrFrom4([4]byte(orig[12:16]))}
		h.Marshal(ip)
		m := header.ICMP{Type: header.ICMPUnreachable, Code: header.ICMPFragNeeded, Rest: uint32(s.cfg.PMTU) & 0xffff}
		m.Marshal(icmp)
		header.ICMPChecksum(icmp)
	}
	s.c.TooBigReported++
	s.back.push(p)
}

// PopBack returns the next packet to send back toward the sender of this
// stage's direction (an ICMP error about a packet), or nil. Give it back
// with Release once sent.
func (s *Stage) PopBack() *Packet {
	if s.back.len() == 0 {
		return nil
	}
	return s.back.pop()
}
