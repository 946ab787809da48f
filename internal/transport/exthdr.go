package transport

import (
	"encoding/binary"
	"errors"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/header"
)

// IPv6 extension headers in front of ESP (transport mode, RFC 4303 §3.1.1):
// a packet's hop-by-hop, destination-options and routing headers stay in
// clear before its ESP header, so the socket must carry them both ways.
//
//   - Send: a raw ESP packet whose esp.Packet.HdrLen is over 40 has its
//     IPv6 header and extension headers in the HdrLen bytes before Off; it
//     is sent whole through a send-only IPPROTO_RAW socket (IPv6 raw
//     sockets of that protocol include the header), exactly as the packet
//     had them.
//   - Receive: IPv6 raw sockets deliver no header, but report the
//     extension headers in control messages (IPV6_RECVHOPOPTS,
//     IPV6_RECVDSTOPTS, IPV6_RECVRTHDR, in the order they came). A packet
//     that had some gets its IPv6 header and them written back in front of
//     the ESP packet (HdrLen), with the source, destination, traffic class
//     and hop limit it arrived with.

// errExtUDP is why a packet with extension headers is refused over UDP.
var errExtUDP = errors.New("IPv6 extension headers in front of ESP in UDP are not sent (raw ESP only)")

// maxExt bounds the extension headers kept from one received packet.
const maxExt = 512

// extSend reports whether p goes whole, its own IPv6 header and extension
// headers in front, through the raw IPv6 socket.
func (c *Conn) extSend(p *esp.Packet) bool {
	return c.v6 && p.HdrLen > 40 && p.Off >= p.HdrLen
}

// sendExt sends p's header, extension headers and ESP packet.
func (c *Conn) sendExt(p *esp.Packet) error {
	if c.kind != RawESP {
		return errExtUDP
	}
	if c.raw6 == nil {
		return ErrNoRawSocket
	}
	x := &c.ext
	x.iov = [2][]byte{p.Buf[p.Off-p.HdrLen : p.Off], p.Data()}
	x.msg[0].Buffers = x.iov[:]
	a := p.Peer.Addr().As16()
	copy(x.ip[:], a[:])
	if _, err := c.raw6.WriteBatch(x.msg[:], 0); err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return errno
		}
		return err
	}
	return nil
}

// extState is the reused scratch of sendExt.
type extState struct {
	msg  [1]ipv6.Message
	iov  [2][]byte
	addr net.IPAddr
	ip   [16]byte
}

func (x *extState) init() {
	x.addr.IP = x.ip[:]
	x.msg[0].Addr = &x.addr
}

// openRaw6 opens the send-only IPPROTO_RAW socket for packets with
// extension headers.
func (c *Conn) openRaw6(cfg Config) error {
	pc, err := openRawSender("ip6:255", "::", "IPv6 extension headers", cfg, func(s int) {
		// IPPROTO_RAW implies it; said explicitly for older kernels.
		unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_HDRINCL, 1)
	})
	if err != nil {
		return err
	}
	c.raw6pc = pc
	c.raw6 = ipv6.NewPacketConn(pc)
	return nil
}

// restoreExt writes the IPv6 header and the extension headers reported in
// oob in front of received ESP packet p, and sets p.HdrLen; without any it
// leaves p alone.
func restoreExt(p *esp.Packet, oob []byte, hopLimit uint8) {
	ext := 0
	first := uint8(0)
	var bufs [8][]byte
	var types [8]uint8
	n := 0
	for len(oob) >= unix.SizeofCmsghdr && n < len(bufs) {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			break
		}
		data := oob[unix.CmsgLen(0):l]
		if h.Level == unix.IPPROTO_IPV6 && len(data) >= 8 {
			var t uint8
			switch h.Type {
			case unix.IPV6_HOPOPTS:
				t = 0
			case unix.IPV6_DSTOPTS:
				t = 60
			case unix.IPV6_RTHDR:
				t = 43
			default:
				t = 255
			}
			if t != 255 && (int(data[1])+1)*8 == len(data) {
				bufs[n], types[n] = data, t
				n++
				ext += len(data)
			}
		}
		oob = oob[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(oob)):]
	}
	if n == 0 || ext > maxExt || p.Off < 40+ext {
		return
	}
	first = types[0]
	at := p.Off - ext
	for i := range n {
		at += copy(p.Buf[at:], bufs[i])
	}
	// The chain written is the one header.Header walks.
	ip := header.IPv6{TrafficClass: p.TOS, PayloadLen: uint16(ext + p.Len), NextHeader: first, HopLimit: hopLimit, Src: p.Peer.Addr(), Dst: p.Local}
	ip.Marshal(p.Buf[p.Off-ext-header.IPv6Len : p.Off-ext])
	p.HdrLen = header.IPv6Len + ext
}

// receivedHopLimit is the hop limit in an IPV6_HOPLIMIT control message, or 64.
func receivedHopLimit(oob []byte) uint8 {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			break
		}
		data := oob[unix.CmsgLen(0):l]
		if h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_HOPLIMIT && len(data) >= 4 {
			return uint8(binary.NativeEndian.Uint32(data))
		}
		oob = oob[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(oob)):]
	}
	return 64
}
