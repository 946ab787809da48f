package impair

import "github.com/espgw/espgw/internal/header"

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
	header.SetTrafficClass(ip, header.TrafficClass(ip)|0x03)
}

// tooBig reports whether the located packet exceeds the PMTU and may not
// be fragmented on the way.
func (s *Stage) tooBig(frame []byte, l *layout) bool {
	if s.cfg.PMTU == 0 || l.ipEnd-l.ip <= s.cfg.PMTU {
		return false
	}
	f, _ := header.Fragment(frame[l.ip:l.ipEnd])
	return l.v6 || f.DF
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
	hdr, limit := header.IPv4Len, maxICMP4
	if l.v6 {
		hdr, limit = header.IPv6Len, maxICMP6
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
	// From the packet's destination back to its source.
	from, to := header.Addrs(orig)
	if l.v6 {
		h := header.IPv6{PayloadLen: uint16(8 + quote), NextHeader: 58, HopLimit: 64, Src: to, Dst: from}
		h.Marshal(ip)
		m := header.ICMP{Type: header.ICMPv6PacketTooBig, Rest: uint32(s.cfg.PMTU)}
		m.Marshal(icmp)
		src, dst := header.AddrBytes(ip)
		header.L4(icmp, src, dst, 58, header.OffsetICMPv6)
	} else {
		h := header.IPv4{TOS: 0xc0, TotalLen: uint16(hdr + 8 + quote), TTL: 64, Protocol: 1, Src: to, Dst: from}
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
