package esp

import (
	"encoding/binary"
	"net/netip"

	"github.com/espgw/espgw/internal/inetsum"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/sa"
)

// Packet is one packet worked in place in Buf. Data is Buf[Off:Off+Len]:
// before Seal the inner IP packet, after it the ESP packet (tunnel mode) or
// the IP header followed by ESP (transport mode); before Open the ESP packet
// from the SPI on, after it the inner IP packet. Packets are reused: nothing
// in them is allocated per packet.
type Packet struct {
	Buf      []byte
	Off, Len int
	// HdrLen is, for Open in transport mode, the length of the IP header
	// found just before Off (raw IPv4 sockets deliver it; see WriteIPHeader;
	// the transport rebuilds an IPv6 one that had extension headers). On
	// send, when over 40, it is an IPv6 header with extension headers just
	// before Off that the transport sends in front of the ESP packet.
	HdrLen int

	// Peer is the far end on the outer side: the source of a received ESP
	// packet, the destination of one to send (the UDP port, or 0 for raw
	// ESP).
	Peer netip.AddrPort
	// Local is, on receive, the outer destination address the packet was
	// sent to: with SPI, encapsulation and Peer, what finds its SA (sa.SAD).
	Local netip.Addr
	// The outer IP header, as the transport reads or writes it: on receive
	// the TOS (IPv4) or traffic class (IPv6) the packet arrived with; on
	// send the TOS, the TTL or hop limit (0: the socket's default) and, for
	// IPv4, whether DF is clear (Fragment) and at what MTU to cut fragments
	// (FragMTU, when > 0).
	TOS, TTL uint8
	Fragment bool
	FragMTU  int

	SA  *SA
	Seq uint64 // full sequence number, known after Prepare
	// Drop is the reason the packet did not come out, or OK.
	Drop Reason
	// Op is the engine request Prepare fills. The packet owns it: batches
	// hand the engine &p.Op, and the engine's Status is where Finish reads it.
	Op offload.Op
}

// Data returns the packet's current bytes.
func (p *Packet) Data() []byte { return p.Buf[p.Off : p.Off+p.Len] }

// Reset points the packet at n bytes at off in buf, clearing the rest.
func (p *Packet) Reset(buf []byte, off, n int) {
	*p = Packet{Buf: buf, Off: off, Len: n}
}

// ipHeaderLen finds where a transport-mode payload starts and which protocol
// it carries: the IPv4 header, or the IPv6 header and the extension headers
// that stay in front of ESP (hop-by-hop, routing, fragment, and destination
// options unless they follow a routing header; RFC 4303 §3.1.1, as Linux
// places ESP). It returns the offset of the next-header byte to rewrite.
func ipHeaderLen(pkt []byte) (hdrLen int, proto uint8, protoAt int, ok bool) {
	hdrLen, proto, protoAt, _, ok = inetsum.Header(pkt)
	return hdrLen, proto, protoAt, ok
}

// fixIPLength rewrites the length fields (and IPv4 checksum) of the IP
// header at hdr for a packet of total bytes.
func fixIPLength(hdr []byte, total int) {
	if hdr[0]>>4 == 4 {
		binary.BigEndian.PutUint16(hdr[2:4], uint16(total))
		ihl, _ := inetsum.IPv4HeaderLen(hdr) // the caller's own header
		inetsum.IPv4Header(hdr[:ihl])
		return
	}
	binary.BigEndian.PutUint16(hdr[4:6], uint16(total-40))
}

// WriteIPHeader writes a minimal IP header for src→dst carrying proto in
// front of a payload of n bytes, ending at buf[end], and returns its length.
// Gateways use it to give an opened transport-mode packet the header an IPv6
// raw socket does not deliver; pcap writers use it for outer headers.
func WriteIPHeader(buf []byte, end int, src, dst netip.Addr, proto uint8, n int) int {
	if src.Is4() {
		h := buf[end-20 : end]
		clear(h)
		h[0] = 0x45
		h[8] = 64
		h[9] = proto
		s, d := src.As4(), dst.As4()
		copy(h[12:16], s[:])
		copy(h[16:20], d[:])
		fixIPLength(h, 20+n)
		return 20
	}
	h := buf[end-40 : end]
	clear(h)
	h[0] = 0x60
	h[6] = proto
	h[7] = 64
	s, d := src.As16(), dst.As16()
	copy(h[8:24], s[:])
	copy(h[24:40], d[:])
	fixIPLength(h, 40+n)
	return 40
}

// FlowOf pulls the selector fields (RFC 4301 §4.4.1) out of an IP packet:
// addresses, the upper-layer protocol past any IPv6 hop-by-hop, routing and
// fragment headers, and TCP, UDP, SCTP or UDP-Lite ports. A non-initial
// fragment's ports are never read (its first bytes are payload): they are
// 0, OPAQUE, which only a selector with any ports matches; Fragments.FlowOf
// gives it its initial fragment's instead (RFC 4301 §7, fragment.go).
// Policy checks on both sides of the tunnel use it.
func FlowOf(pkt []byte) (src, dst netip.Addr, proto uint8, sport, dport uint16, ok bool) {
	hl, proto, _, ok := ipHeaderLen(pkt)
	if !ok {
		return
	}
	// Destination options after a routing header come before the upper
	// layer too.
	for proto == 60 && len(pkt) >= hl+8 {
		proto, hl = pkt[hl], hl+(int(pkt[hl+1])+1)*8
	}
	src, dst = inetsum.Addrs(pkt)
	if sa.HasPorts(proto) && len(pkt) >= hl+4 && !nonInitial(pkt) {
		sport = binary.BigEndian.Uint16(pkt[hl:])
		dport = binary.BigEndian.Uint16(pkt[hl+2:])
	}
	return src, dst, proto, sport, dport, true
}
