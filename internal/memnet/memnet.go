// Package memnet is an in-memory TUN device and outer link for pipeline
// tests.
//
// It provides in-memory stand-ins for the gateway's TUN device and outer
// sockets, connected by channels, in the manner of wireguard-go's tuntest
// and bindtest: they isolate the data plane from the kernel, for pipeline
// benchmarks and for tests of the pipeline's logic. They are not used by the
// gateway itself.
package memnet

import (
	"errors"
	"net/netip"
	"sync"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/sa"
)

// ErrClosed is returned by reads and writes after Close.
var ErrClosed = errors.New("memnet: closed")

// packet is a buffer in flight between the two ends.
type packet struct {
	buf  []byte
	n    int
	peer netip.AddrPort // the sender
	dst  netip.Addr     // where the sender sent it
}

// link is one direction of travel: a bounded queue of packets and a free
// list, so moving a packet copies it but allocates nothing.
type link struct {
	queue chan *packet
	free  chan *packet
	done  chan struct{}
	once  sync.Once
}

func newLink(depth, size int) *link {
	l := &link{queue: make(chan *packet, depth), free: make(chan *packet, depth), done: make(chan struct{})}
	for range depth {
		l.free <- &packet{buf: make([]byte, size)}
	}
	return l
}

func (l *link) close() { l.once.Do(func() { close(l.done) }) }

// put copies b into the link, blocking while it is full.
func (l *link) put(b []byte, peer netip.AddrPort, dst netip.Addr) error {
	var p *packet
	select {
	case p = <-l.free:
	case <-l.done:
		return ErrClosed
	}
	p.n = copy(p.buf, b)
	p.peer, p.dst = peer, dst
	select {
	case l.queue <- p:
		return nil
	case <-l.done:
		return ErrClosed
	}
}

// get takes at least one packet, then whatever else is queued, up to max,
// calling fn for each.
func (l *link) get(max int, fn func(i int, p *packet)) (int, error) {
	var p *packet
	select {
	case p = <-l.queue:
	case <-l.done:
		return 0, ErrClosed
	}
	n := 0
	for {
		fn(n, p)
		l.free <- p
		n++
		if n == max {
			return n, nil
		}
		select {
		case p = <-l.queue:
		default:
			return n, nil
		}
	}
}

// Device is an in-memory TUN: the host side injects packets with Send and
// takes the gateway's writes with Receive.
type Device struct {
	toGW, fromGW *link
	batch        int
}

// NewDevice returns a device with queues of depth packets.
func NewDevice(depth, batch int) *Device {
	return &Device{toGW: newLink(depth, 65535), fromGW: newLink(depth, 65535), batch: batch}
}

// Read gives the gateway the packets the host sent.
func (d *Device) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	return d.toGW.get(len(bufs), func(i int, p *packet) {
		sizes[i] = copy(bufs[i][offset:], p.buf[:p.n])
	})
}

// Write takes the gateway's packets for the host.
func (d *Device) Write(bufs [][]byte, offset int) (int, error) {
	for i, b := range bufs {
		if err := d.fromGW.put(b[offset:], netip.AddrPort{}, netip.Addr{}); err != nil {
			return i, err
		}
	}
	return len(bufs), nil
}

// BatchSize is the most packets one Read returns.
func (d *Device) BatchSize() int { return d.batch }

// Close ends the device; blocked calls return ErrClosed.
func (d *Device) Close() error {
	d.toGW.close()
	d.fromGW.close()
	return nil
}

// Send is the host sending a packet into the gateway.
func (d *Device) Send(pkt []byte) error { return d.toGW.put(pkt, netip.AddrPort{}, netip.Addr{}) }

// Receive is the host receiving the packets the gateway wrote, up to len(bufs);
// it returns their sizes in sizes.
func (d *Device) Receive(bufs [][]byte, sizes []int) (int, error) {
	return d.fromGW.get(len(bufs), func(i int, p *packet) {
		sizes[i] = copy(bufs[i], p.buf[:p.n])
	})
}

// Conn is one end of an in-memory outer link.
type Conn struct {
	in, out *link
	local   netip.AddrPort
	// As is how received packets say they came (raw ESP by default), as
	// the socket they would have come through would say (the gateway
	// matches it against the SA's encapsulation).
	As sa.Encap
}

// Encap is how received packets came (the As field).
func (c *Conn) Encap() sa.Encap { return c.As }

// Pipe returns two connected outer ends with the given addresses.
func Pipe(a, b netip.AddrPort, depth int) (*Conn, *Conn) {
	ab, ba := newLink(depth, 65535), newLink(depth, 65535)
	return &Conn{in: ba, out: ab, local: a}, &Conn{in: ab, out: ba, local: b}
}

// Receive implements gateway.Conn: each packet lands at its Off, with no IP
// header in front, as after an IPv6 raw socket.
func (c *Conn) Receive(pkts []*esp.Packet) (int, error) {
	return c.in.get(len(pkts), func(i int, p *packet) {
		q := pkts[i]
		q.HdrLen, q.Peer, q.Local = 0, p.peer, p.dst
		q.Len = copy(q.Buf[q.Off:], p.buf[:p.n])
	})
}

// Send implements gateway.Conn.
func (c *Conn) Send(pkts []*esp.Packet) (int, error) {
	for i, p := range pkts {
		if err := c.out.put(p.Data(), c.local, p.Peer.Addr()); err != nil {
			return i, err
		}
	}
	return len(pkts), nil
}

// Close ends this end's receiving; the far end's sends to it fail from now
// on, while the far end's own receiving goes on until it closes too.
func (c *Conn) Close() error {
	c.in.close()
	return nil
}
