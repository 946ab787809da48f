package transport

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/header"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// The outer header. The gateway decides what each outer header carries —
// DSCP and ECN (esp.Packet.TOS), TTL or hop limit (esp.Packet.TTL), and for IPv4
// whether it may be fragmented (esp.Packet.Fragment) — and the transport gets
// it onto the wire:
//   - IPv6 (raw and UDP) and IPv4 UDP with DF: per-packet control messages
//     (IP_TOS, IP_TTL, IPV6_TCLASS, IPV6_HOPLIMIT); the kernel builds the
//     header.
//   - IPv4 raw ESP: the socket is IP_HDRINCL and the transport writes the
//     header itself, so DF is per packet; the kernel fills in the source
//     address, the checksum and, when 0, the ID.
//   - IPv4 UDP without DF: through a second, send-only IPPROTO_RAW socket,
//     with the IPv4 and UDP headers written here (UDP checksum 0, as RFC
//     3948 §3.1 allows), since DF is a socket-wide setting on a UDP socket.
//
// An IPv4 packet without DF that is larger than esp.Packet.FragMTU is sent as
// fragments (RFC 791), cut here: a header-including socket never
// fragments. On receive, IPv4 raw sockets deliver the header (its TOS is
// read from it); the others report the TOS or traffic class in a control
// message (IP_RECVTOS, IPV6_RECVTCLASS). The kernel has reassembled outer
// fragments before any socket sees them (ip_local_deliver, ipv6_frag_rcv),
// bounded by its ipfrag_high_thresh and ipfrag_time (see ReassemblyStats).

const (
	ipv4HeaderLen = 20
	udpHeaderLen  = 8
	// maxFragments bounds the fragments of one outer packet: at the
	// smallest fragment MTU accepted (MinFragMTU), a 64 KiB packet.
	maxFragments = 65535/((MinFragMTU-ipv4HeaderLen)&^7) + 1
	// controlLen is room for UDP_SEGMENT (or UDP_GRO) plus a TOS and a
	// TTL message, and a received packet's pktinfo.
	controlLen = 128 + maxExt // and the extension headers of an IPv6 raw packet
)

// MinFragMTU is the smallest outer MTU the transport fragments at (Linux's
// default net.ipv4.route.min_pmtu).
const MinFragMTU = 552

// ErrNoRawSocket is why Send refuses an IPv4 UDP packet without DF when the
// send-only raw socket could not be opened (it needs CAP_NET_RAW).
var ErrNoRawSocket = errors.New("no raw socket for IPv4 UDP packets without DF (needs CAP_NET_RAW)")

// ErrTooManyFragments is why Send refuses a packet that would need more than
// maxFragments fragments at its FragMTU.
var ErrTooManyFragments = errors.New("packet needs too many fragments at its fragment MTU")

// ownHeader reports whether packet p goes out with a header written here
// through the send-only raw socket (IPv4 UDP without DF), or is cut into
// fragments (IPv4 raw ESP without DF, larger than its FragMTU).
func (c *Conn) ownHeader(p *esp.Packet) bool {
	if c.v6 || !p.Fragment {
		return false
	}
	if c.kind == UDPEncap {
		return true
	}
	return p.FragMTU > 0 && ipv4HeaderLen+p.Len > p.FragMTU
}

// fragState is the reused scratch of sendOwn.
type fragState struct {
	msgs  []ipv4.Message
	hdrs  [][ipv4HeaderLen + udpHeaderLen]byte
	iovs  [][2][]byte
	addrs []net.IPAddr
	ip    [4]byte
	id    uint16
}

func (f *fragState) init() {
	f.msgs = make([]ipv4.Message, maxFragments)
	f.hdrs = make([][ipv4HeaderLen + udpHeaderLen]byte, maxFragments)
	f.iovs = make([][2][]byte, maxFragments)
	f.addrs = make([]net.IPAddr, 1)
	f.addrs[0].IP = f.ip[:]
	for i := range f.msgs {
		f.msgs[i].Addr = &f.addrs[0]
	}
}

// sendOwn sends one IPv4 packet with its headers written here, in
// fragments when it is larger than p.FragMTU, or says why not.
func (c *Conn) sendOwn(p *esp.Packet) error {
	f := &c.frag
	w := c.writer
	udp := 0
	if c.kind == UDPEncap {
		if c.raw4 == nil {
			return ErrNoRawSocket
		}
		w, udp = c.raw4, udpHeaderLen
	}
	data := p.Data()
	total := udp + len(data) // the IP payload
	a := p.Peer.Addr().Unmap().As4()
	f.ip = a
	per := total
	if p.FragMTU > 0 && ipv4HeaderLen+total > p.FragMTU {
		per = (max(p.FragMTU, MinFragMTU) - ipv4HeaderLen) &^ 7
	}
	n := (total + per - 1) / per
	if n > maxFragments {
		return ErrTooManyFragments
	}
	id := uint16(0) // unfragmented: the kernel picks one
	if n > 1 {
		f.id++
		if f.id == 0 {
			f.id = 1
		}
		id = f.id
	}
	proto := byte(ProtocolESP)
	if udp > 0 {
		proto = unix.IPPROTO_UDP
	}
	for k := range n {
		off := k * per
		size := min(per, total-off)
		h := f.hdrs[k][:ipv4HeaderLen]
		ip := header.IPv4{TOS: p.TOS, TotalLen: uint16(ipv4HeaderLen + size), ID: id, MF: k < n-1, FragOff: uint16(off),
			TTL: cmp.Or(p.TTL, defaultTTL), Protocol: proto, Src: p.Local, Dst: p.Peer.Addr()} // checksum (and a zero source): the kernel's
		ip.Put(h)
		iov := &f.iovs[k]
		iov[0] = h
		if k == 0 && udp > 0 {
			u := f.hdrs[k][ipv4HeaderLen:]
			binary.BigEndian.PutUint16(u[0:], c.local.Port())
			binary.BigEndian.PutUint16(u[2:], p.Peer.Port())
			binary.BigEndian.PutUint16(u[4:], uint16(total))
			u[6], u[7] = 0, 0
			iov[0] = f.hdrs[k][:]
			iov[1] = data[:size-udp]
		} else {
			iov[1] = data[off-udp : off-udp+size]
		}
		f.msgs[k].Buffers = iov[:]
		f.msgs[k].OOB = nil
	}
	for sent := 0; sent < n; {
		m, err := w.WriteBatch(f.msgs[sent:n], 0)
		if err != nil {
			var errno syscall.Errno
			if errors.As(err, &errno) {
				return errno
			}
			return err
		}
		sent += m
	}
	if n > 1 {
		c.stats.fragmented.Add(1)
		c.stats.fragmentsOut.Add(uint64(n))
	}
	return nil
}

// defaultTTL is the TTL of headers written here when esp.Packet.TTL is 0: the
// kernel's default (net.ipv4.ip_default_ttl).
const defaultTTL = 64

// fillHeader writes the IPv4 header of a whole (unfragmented) raw ESP
// packet into h for the header-including socket.
func fillHeader(h []byte, p *esp.Packet) {
	ip := header.IPv4{TOS: p.TOS, TotalLen: uint16(ipv4HeaderLen + p.Len), DF: !p.Fragment,
		TTL: cmp.Or(p.TTL, defaultTTL), Protocol: ProtocolESP, Src: p.Local, Dst: p.Peer.Addr()} // checksum (and a zero source): the kernel's
	ip.Put(h)
}

// putControl writes the control messages packet p needs (the outer TOS
// and TTL when set, its source address on a socket bound to all, and
// UDP_SEGMENT when gso > 0) into b and returns their length.
func (c *Conn) putControl(b []byte, p *esp.Packet, gso uint16) int {
	n := 0
	put := func(level, typ int32, size int) []byte {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[n]))
		h.Level, h.Type = level, typ
		h.SetLen(unix.CmsgLen(size))
		data := b[n+unix.CmsgLen(0) : n+unix.CmsgLen(size)]
		n += unix.CmsgSpace(size)
		return data
	}
	if gso > 0 {
		binary.NativeEndian.PutUint16(put(unix.SOL_UDP, unix.UDP_SEGMENT, 2), gso)
	}
	if c.v6 {
		if p.TOS != 0 {
			binary.NativeEndian.PutUint32(put(unix.IPPROTO_IPV6, unix.IPV6_TCLASS, 4), uint32(p.TOS))
		}
		if p.TTL != 0 {
			binary.NativeEndian.PutUint32(put(unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT, 4), uint32(p.TTL))
		}
		if c.setsSource(p) {
			info := (*unix.Inet6Pktinfo)(unsafe.Pointer(&put(unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unix.SizeofInet6Pktinfo)[0]))
			*info = unix.Inet6Pktinfo{Addr: p.Local.As16()}
		}
	} else {
		if p.TOS != 0 {
			binary.NativeEndian.PutUint32(put(unix.IPPROTO_IP, unix.IP_TOS, 4), uint32(p.TOS))
		}
		if p.TTL != 0 {
			binary.NativeEndian.PutUint32(put(unix.IPPROTO_IP, unix.IP_TTL, 4), uint32(p.TTL))
		}
		if c.setsSource(p) {
			info := (*unix.Inet4Pktinfo)(unsafe.Pointer(&put(unix.IPPROTO_IP, unix.IP_PKTINFO, unix.SizeofInet4Pktinfo)[0]))
			*info = unix.Inet4Pktinfo{Spec_dst: p.Local.Unmap().As4()}
		}
	}
	return n
}

// setsSource says whether packet p needs its source address in a control
// message: it has one, and the socket is bound to all addresses (raw
// IPv4 ESP writes it in the header instead).
func (c *Conn) setsSource(p *esp.Packet) bool {
	return p.Local.IsValid() && c.local.Addr().IsUnspecified() && !(c.kind == RawESP && !c.v6)
}

// receivedTOS returns the TOS or traffic class reported in a receive
// control message (IP_TOS or IPV6_TCLASS), or 0.
func receivedTOS(oob []byte) uint8 {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return 0
		}
		data := oob[unix.CmsgLen(0):l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			return data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			return uint8(binary.NativeEndian.Uint32(data))
		}
		oob = oob[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(oob)):]
	}
	return 0
}

// receivedDst is the destination address in a received datagram's
// IP_PKTINFO or IPV6_PKTINFO control message, or the zero Addr.
func receivedDst(oob []byte) netip.Addr {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return netip.Addr{}
		}
		data := oob[unix.CmsgLen(0):l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			// struct in_pktinfo: ifindex, local (routing) address, then
			// the header's destination.
			return netip.AddrFrom4([4]byte(data[8:12]))
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			return netip.AddrFrom16([16]byte(data[:16]))
		}
		oob = oob[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(oob)):]
	}
	return netip.Addr{}
}

// openRaw4 opens the send-only IPPROTO_RAW socket that carries IPv4 UDP
// packets without DF.
func (c *Conn) openRaw4(cfg Config) error {
	pc, err := openRawSender("ip4:255", "0.0.0.0", "IPv4 packets without DF", cfg, func(s int) {
		if err := unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, cfg.SocketBuffer); err != nil {
			unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUF, cfg.SocketBuffer)
		}
	})
	if err != nil {
		return err
	}
	c.raw4pc = pc
	c.raw4 = ipv4.NewPacketConn(pc)
	return nil
}

// openRawSender opens a send-only IPPROTO_RAW socket (the caller writes
// the IP header) for what, sets the configured mark, and lets set apply
// the socket's own options.
func openRawSender(network, laddr, what string, cfg Config, set func(fd int)) (net.PacketConn, error) {
	pc, err := net.ListenPacket(network, laddr)
	if err != nil {
		return nil, fmt.Errorf("open raw socket for %s: %w", what, err)
	}
	rc, err := pc.(syscall.Conn).SyscallConn()
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("open raw socket for %s: %w", what, err)
	}
	var errs []error
	rc.Control(func(fd uintptr) {
		s := int(fd)
		set(s)
		if cfg.Mark != 0 {
			if err := unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_MARK, int(cfg.Mark)); err != nil {
				errs = append(errs, fmt.Errorf("set SO_MARK: %w", err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		pc.Close()
		return nil, fmt.Errorf("open raw socket for %s: %w", what, err)
	}
	return pc, nil
}
