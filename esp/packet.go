package esp

import (
	"encoding/binary"
	"net/netip"

	"github.com/espgw/espgw/internal/header"
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
	// found just before Off (raw IPv4 sockets deliver it; the gateway
	// writes an IPv6 one, with header.WriteIP, and the transport one that
	// had extension headers). On
	// send, when over 40, it is an IPv6 header with extension headers just
	// before Off that the transport sends in front of the ESP packet.
	HdrLen int

	// Peer is the far end on the outer side: the source of a received ESP
	// packet, the destination of one to send (the UDP port, or 0 for raw
	// ESP).
	Peer netip.AddrPort
	// Local is, on receive, the outer destination address the packet was
	// sent to: with SPI, encapsulation and Peer, what finds its SA (sa.SAD);
	// on send, the outer source address (the SA's), or the zero Addr for
	// the one the kernel's route gives.
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

// Reset points the packet at n bytes at off in buf, clearing the rest but
// the Op, which PrepareSeal and PrepareOpen fill whole before it goes to an
// engine (an Op they did not fill is never queued): a batch resets each of
// its packets, and the Op is half of a Packet.
func (p *Packet) Reset(buf []byte, off, n int) {
	p.Buf, p.Off, p.Len, p.HdrLen = buf, off, n, 0
	p.Peer, p.Local = netip.AddrPort{}, netip.Addr{}
	p.TOS, p.TTL, p.Fragment, p.FragMTU = 0, 0, false, 0
	p.SA, p.Seq, p.Drop = nil, 0, OK
}

// ipHeaderLen finds where a transport-mode payload starts and which protocol
// it carries: the IPv4 header, or the IPv6 header and the extension headers
// that stay in front of ESP (hop-by-hop, routing, fragment, and destination
// options unless they follow a routing header; RFC 4303 §3.1.1, as Linux
// places ESP). It returns the offset of the next-header byte to rewrite.
func ipHeaderLen(pkt []byte) (hdrLen int, proto uint8, protoAt int, ok bool) {
	hdrLen, proto, protoAt, _, ok = header.Header(pkt)
	return hdrLen, proto, protoAt, ok
}

// fixIPLength rewrites the length fields (and IPv4 checksum) of the IP
// header at hdr for a packet of total bytes.
func fixIPLength(hdr []byte, total int) { header.SetLength(hdr, total) }

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
	src, dst = header.Addrs(pkt)
	if sa.HasPorts(proto) && len(pkt) >= hl+4 && !nonInitial(pkt) {
		sport = binary.BigEndian.Uint16(pkt[hl:])
		dport = binary.BigEndian.Uint16(pkt[hl+2:])
	}
	return src, dst, proto, sport, dport, true
}
