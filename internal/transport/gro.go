package transport

import (
	"net/netip"
	"unsafe"

	"github.com/espgw/espgw/esp"
	"golang.org/x/sys/unix"
)

// UDP GRO: with UDP_GRO set on the socket, the kernel hands over runs of
// same-size datagrams of one flow as one super-datagram plus a control
// message giving the segment size. Above all it keeps a UDP GSO
// super-datagram from the peer whole all the way up (veth and the router in
// between forward it unsegmented), so the receiving kernel does one socket
// delivery per 64 segments instead of one per packet. The super-datagrams
// land in the Conn's own 64 KiB buffers and each segment is copied into a
// caller's packet; segments that do not fit in this call's slots wait
// for the next Receive.

// groBufLen holds the largest super-datagram (a UDP payload of 65535-8 for IPv6).
const groBufLen = 65535

// groMessages is how many super-datagram buffers one Receive call posts:
// enough for a full batch of 64-segment runs, and for small batches of
// datagrams that did not coalesce.
func groMessages(batch int) int { return max(4, batch/32) }

type groState struct {
	bufs [][]byte
	oobs [][]byte
	// Received datagrams not yet fully handed out, in arrival order.
	pending []groDatagram
	head    int // first pending entry with segments left
}

type groDatagram struct {
	data []byte // remaining bytes of the (super-)datagram
	seg  int    // segment size (len(data) for a plain datagram)
	peer netip.AddrPort
	tos  uint8 // GRO coalesces only segments with the same TOS
	dst  netip.Addr
}

func (g *groState) init(batch int) {
	n := groMessages(batch)
	g.bufs = make([][]byte, n)
	g.oobs = make([][]byte, n)
	for i := range g.bufs {
		g.bufs[i] = make([]byte, groBufLen)
		g.oobs[i] = make([]byte, controlLen)
	}
	g.pending = make([]groDatagram, 0, n)
}

// receiveGRO is Receive for a socket with UDP_GRO on.
func (c *Conn) receiveGRO(pkts []*esp.Packet) (int, error) {
	g := &c.groRecv
	r := &c.recv
	for {
		if out := c.drainGRO(pkts); out > 0 {
			return out, nil
		}
		// Nothing pending: every scratch buffer is free again.
		g.pending, g.head = g.pending[:0], 0
		want := len(g.bufs)
		for i := range want {
			r.post(i, g.bufs[i], g.oobs[i])
		}
		if err := c.receive(want); err != nil {
			return 0, err
		}
		for i := range r.got {
			h := &r.hdrs[i]
			if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
				c.stats.truncated.Add(1)
				continue
			}
			d := groDatagram{data: g.bufs[i][:h.Len], peer: c.peer(&r.names[i])}
			d.seg = groSegment(g.oobs[i][:h.Hdr.Controllen])
			d.tos = receivedTOS(g.oobs[i][:h.Hdr.Controllen])
			d.dst = receivedDst(g.oobs[i][:h.Hdr.Controllen])
			if d.seg <= 0 || d.seg > len(d.data) {
				d.seg = len(d.data)
			} else if d.seg < len(d.data) {
				c.stats.groBatches.Add(1)
			}
			if len(d.data) == 0 {
				c.stats.short.Add(1)
				continue
			}
			g.pending = append(g.pending, d)
		}
	}
}

// drainGRO copies pending segments into pkts and returns how many ESP
// packets it placed.
func (c *Conn) drainGRO(pkts []*esp.Packet) int {
	g := &c.groRecv
	out, bytes := 0, 0
	for out < len(pkts) && g.head < len(g.pending) {
		d := &g.pending[g.head]
		if len(d.data) == 0 {
			g.head++
			continue
		}
		seg := d.data[:min(d.seg, len(d.data))]
		d.data = d.data[len(seg):]
		_, n, ok := c.classify(seg, d.peer, func() netip.Addr { return d.dst })
		if !ok {
			continue
		}
		p := pkts[out]
		if n > len(p.Buf)-p.Off {
			c.stats.truncated.Add(1)
			continue
		}
		p.Len, p.HdrLen = copy(p.Buf[p.Off:], seg[len(seg)-n:]), 0
		p.Peer = d.peer
		p.TOS = d.tos
		p.Local = d.dst
		bytes += n
		out++
	}
	// Counted once per call, not per segment: two locked adds per packet
	// are a cost of their own at 64 segments a datagram.
	c.stats.packetsIn.Add(uint64(out))
	c.stats.bytesIn.Add(uint64(bytes))
	return out
}

// groSegment returns the segment size from a UDP_GRO control message in
// oob, or 0 when there is none.
func groSegment(oob []byte) int {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return 0
		}
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && l >= unix.CmsgLen(2) {
			data := oob[unix.CmsgLen(0):l]
			if len(data) >= 4 {
				return int(*(*int32)(unsafe.Pointer(&data[0])))
			}
			return int(*(*uint16)(unsafe.Pointer(&data[0])))
		}
		oob = oob[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(oob)):]
	}
	return 0
}
