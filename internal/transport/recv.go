package transport

import (
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"github.com/espgw/espgw/esp"
	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/header"
)

// recvState is the reused scratch of Receive. recvmmsg is called directly
// rather than through x/net's ReadBatch, which allocates a net.Addr (and its
// IP slice) for every message it returns.
type recvState struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // large enough for either family
	oobs  [][]byte                // control messages: the outer TOS or traffic class

	// Arguments and results of the recvmmsg call inside RawConn.Read.
	want, got int
	errno     syscall.Errno
	call      func(fd uintptr) bool // bound once, so Read does not allocate a closure
}

func (r *recvState) init(n int) {
	r.hdrs = make([]unix.Mmsghdr, n)
	r.iovs = make([]unix.Iovec, n)
	r.names = make([]unix.RawSockaddrInet6, n)
	r.oobs = make([][]byte, n)
	for i := range r.oobs {
		r.oobs[i] = make([]byte, controlLen)
	}
	r.call = r.recvmmsg
}

// post sets message i up to receive into b, with control buffer oob.
func (r *recvState) post(i int, b, oob []byte) {
	r.iovs[i].Base = &b[0]
	r.iovs[i].SetLen(len(b))
	h := &r.hdrs[i]
	h.Hdr = unix.Msghdr{
		Name:    (*byte)(unsafe.Pointer(&r.names[i])),
		Namelen: unix.SizeofSockaddrInet6,
		Iov:     &r.iovs[i],
		Iovlen:  1,
	}
	if len(oob) > 0 {
		h.Hdr.Control = &oob[0]
		h.Hdr.SetControllen(len(oob))
	}
	h.Len = 0
}

func (r *recvState) recvmmsg(fd uintptr) bool {
	// MSG_DONTWAIT: the call never blocks (the poller waits instead), so
	// it is made as a raw system call, without the runtime's bookkeeping
	// for one that might.
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.want), unix.MSG_DONTWAIT, 0, 0)
	if errno == unix.EAGAIN || errno == unix.EWOULDBLOCK {
		return false // not ready: the poller waits and calls again
	}
	if errno == unix.EINTR {
		return false
	}
	r.got, r.errno = int(n), errno
	return true
}

var esp0 = [4]byte{} // RFC 3948 non-ESP marker: where an SPI would be, four zero bytes

// Receive waits for ESP packets and returns how many it put in pkts[:n]
// (n ≥ 1 unless err != nil). A datagram is read into pkts[i].Buf from
// pkts[i].Off on (room in front is the caller's, say for a header to
// write); Receive then points the packet's Off and Len at the ESP packet
// (SPI to ICV), sets HdrLen to the length of the IPv4 header a raw socket
// delivered just before it (0 otherwise), TOS to the outer TOS or traffic
// class, and Peer to the source. Datagrams that are not ESP — NAT
// keepalives, non-ESP-marked (IKE) datagrams, runts, or those longer than
// the room in Buf — are counted and not returned. Receive reorders the
// pointers in pkts so the n ESP packets come first.
func (c *Conn) Receive(pkts []*esp.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, fmt.Errorf("receive over %s on %s: no packet slots", c.kind, c.local)
	}
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	for i, p := range pkts {
		if p.Off < 0 || p.Off >= len(p.Buf) {
			return 0, fmt.Errorf("receive over %s on %s: packet slot %d has no room (buffer of %d bytes, offset %d)", c.kind, c.local, i, len(p.Buf), p.Off)
		}
	}
	if c.gro.Load() {
		return c.receiveGRO(pkts)
	}
	r := &c.recv
	want := min(len(pkts), c.batch)
	for {
		for i := range want {
			r.post(i, pkts[i].Buf[pkts[i].Off:], r.oobs[i])
		}
		if err := c.receive(want); err != nil {
			return 0, err
		}
		if n := c.keepESP(pkts, r.got); n > 0 {
			return n, nil
		}
		// Everything in this batch was ignored (keepalives, IKE, runts):
		// read again.
	}
}

// keepESP classifies the got received datagrams, moves the ESP packets to
// the front of pkts and returns their number.
func (c *Conn) keepESP(pkts []*esp.Packet, got int) int {
	r := &c.recv
	out, bytes := 0, 0
	for i := range got {
		h := &r.hdrs[i]
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
			c.stats.truncated.Add(1)
			continue
		}
		// Swaps below only touch positions ≤ i, so pkts[i] still holds
		// the buffer message i was read into.
		p := pkts[i]
		d := p.Buf[p.Off : p.Off+int(h.Len)]
		peer := c.peer(&r.names[i])
		oob := r.oobs[i][:h.Hdr.Controllen]
		hdr, n, ok := c.classify(d, peer, func() netip.Addr { return c.dst(d, oob) })
		if !ok {
			continue
		}
		pkts[out], pkts[i] = pkts[i], pkts[out]
		p.TOS = c.tos(d, oob)
		p.Local = c.dst(d, oob)
		p.Off, p.Len, p.HdrLen = p.Off+hdr, n, hdr
		p.Peer = peer
		if c.v6 && c.kind == RawESP {
			oob := r.oobs[i][:h.Hdr.Controllen]
			restoreExt(p, oob, receivedHopLimit(oob))
		}
		bytes += n
		out++
	}
	c.stats.packetsIn.Add(uint64(out))
	c.stats.bytesIn.Add(uint64(bytes))
	return out
}

// classify finds the ESP packet inside datagram d: the length of the IP
// header in front of it (raw IPv4) and its own length, or it counts why
// there is none. dst is the address d was sent to, for an IKE message.
func (c *Conn) classify(d []byte, peer netip.AddrPort, dst func() netip.Addr) (hdr, n int, ok bool) {
	if c.kind == RawESP && !c.v6 {
		// IPv4 raw sockets deliver the IP header; IPv6 ones do not.
		var ok bool
		if hdr, ok = header.IPv4HeaderLen(d); !ok {
			c.stats.short.Add(1)
			return 0, 0, false
		}
		d = d[hdr:]
	}
	if c.kind == UDPEncap {
		if len(d) == 1 && d[0] == 0xff {
			c.stats.keepalives.Add(1)
			return 0, 0, false
		}
		if len(d) >= 4 && [4]byte(d[:4]) == esp0 {
			c.stats.nonESP.Add(1)
			if c.nonESP != nil {
				c.nonESP(d[4:], netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port()), dst().Unmap())
			}
			return 0, 0, false
		}
	}
	if len(d) < MinPacketLen {
		c.stats.short.Add(1)
		return 0, 0, false
	}
	return hdr, len(d), true
}

// tos is the outer TOS or traffic class of datagram d: from the IPv4
// header raw IPv4 sockets deliver, else from its control messages.
func (c *Conn) tos(d, oob []byte) uint8 {
	if c.kind == RawESP && !c.v6 {
		return d[1] // classify checked the header is there
	}
	return receivedTOS(oob)
}

// dst is the outer destination of datagram d: from the IPv4 header raw
// IPv4 sockets deliver, else from its pktinfo.
func (c *Conn) dst(d, oob []byte) netip.Addr {
	if c.kind == RawESP && !c.v6 {
		return netip.AddrFrom4([4]byte(d[16:20])) // classify checked the header is there
	}
	return receivedDst(oob)
}

func (c *Conn) peer(sa *unix.RawSockaddrInet6) netip.AddrPort {
	if sa.Family == unix.AF_INET {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), uint16(p[0])<<8|uint16(p[1]))
	}
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(p[0])<<8|uint16(p[1]))
}

// receive waits for and takes up to want datagrams into the buffers
// posted in c.recv: r.got says how many came.
func (c *Conn) receive(want int) error {
	r := &c.recv
	r.want = want
	if err := c.rc.Read(r.call); err != nil {
		return fmt.Errorf("receive over %s on %s: %w", c.kind, c.local, err)
	}
	if r.errno != 0 {
		c.stats.receiveErrors.Add(1)
		return fmt.Errorf("receive over %s on %s: recvmmsg: %w", c.kind, c.local, r.errno)
	}
	return nil
}
