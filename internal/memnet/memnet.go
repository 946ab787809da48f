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

// startSize is a packet buffer's first size: an MTU-sized packet and its
// framing. A larger packet grows the buffer once, which the free list then
// keeps; small buffers keep a deep queue within the caches.
const startSize = 2048

// set copies b into the packet, growing its buffer when b is larger.
func (p *packet) set(b []byte, peer netip.AddrPort, dst netip.Addr) {
	if len(b) > len(p.buf) {
		p.buf = make([]byte, len(b))
	}
	p.n = copy(p.buf, b)
	p.peer, p.dst = peer, dst
}

// link is one direction of travel: a bounded FIFO of packets and a free
// list under one mutex, so moving a packet copies it but allocates nothing,
// and a batch costs two short holds of the lock and at most one wake-up, as
// a kernel queue read or written many packets at a time does. Packets are
// copied in and out with the lock released, so that the two ends do not
// wait on each other's copies.
type link struct {
	mu       sync.Mutex
	nonEmpty sync.Cond // signalled when packets are queued
	nonFull  sync.Cond // signalled when packets are freed
	ring     []*packet // the queue: n packets from head
	head, n  int
	free     []*packet
	closed   bool
}

func newLink(depth int) *link {
	l := &link{ring: make([]*packet, depth), free: make([]*packet, 0, depth)}
	l.nonEmpty.L, l.nonFull.L = &l.mu, &l.mu
	for range depth {
		l.free = append(l.free, &packet{buf: make([]byte, startSize)})
	}
	return l
}

func (l *link) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.nonEmpty.Broadcast()
	l.nonFull.Broadcast()
}

// chunk is the most packets a put or get moves per hold of the lock.
const chunk = 256

// put copies count packets into the link, blocking while it is full; fill
// copies packet i into p. It returns how many went in. The packets of one
// put are queued in order, each chunk of them at once.
func (l *link) put(count int, fill func(i int, p *packet)) (int, error) {
	var taken [chunk]*packet
	for done := 0; done < count; {
		l.mu.Lock()
		for len(l.free) == 0 && !l.closed {
			l.nonFull.Wait()
		}
		if l.closed {
			l.mu.Unlock()
			return done, ErrClosed
		}
		k := min(count-done, len(l.free), chunk)
		copy(taken[:k], l.free[len(l.free)-k:])
		clear(l.free[len(l.free)-k:])
		l.free = l.free[:len(l.free)-k]
		l.mu.Unlock()
		for j, p := range taken[:k] {
			fill(done+j, p)
		}
		l.mu.Lock()
		for _, p := range taken[:k] {
			l.ring[(l.head+l.n)%len(l.ring)] = p
			l.n++
		}
		if l.n == k {
			l.nonEmpty.Signal()
		}
		l.mu.Unlock()
		done += k
	}
	return count, nil
}

// get takes at least one packet, then whatever else is queued, up to max
// (and up to a chunk), calling fn for each.
func (l *link) get(max int, fn func(i int, p *packet)) (int, error) {
	var taken [chunk]*packet
	l.mu.Lock()
	for l.n == 0 && !l.closed {
		l.nonEmpty.Wait()
	}
	if l.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	n := min(max, l.n, chunk)
	for i := range n {
		taken[i] = l.ring[l.head]
		l.ring[l.head] = nil
		l.head = (l.head + 1) % len(l.ring)
	}
	l.n -= n
	l.mu.Unlock()
	for i, p := range taken[:n] {
		fn(i, p)
	}
	l.mu.Lock()
	l.free = append(l.free, taken[:n]...)
	if len(l.free) == n {
		l.nonFull.Broadcast()
	}
	l.mu.Unlock()
	return n, nil
}

// pending reports whether packets are queued.
func (l *link) pending() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n > 0
}

// Device is an in-memory TUN: the host side injects packets with Send and
// takes the gateway's writes with Receive.
type Device struct {
	toGW, fromGW *link
	batch        int
}

// NewDevice returns a device with queues of depth packets.
func NewDevice(depth, batch int) *Device {
	return &Device{toGW: newLink(depth), fromGW: newLink(depth), batch: batch}
}

// Read gives the gateway the packets the host sent.
func (d *Device) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	return d.toGW.get(len(bufs), func(i int, p *packet) {
		sizes[i] = copy(bufs[i][offset:], p.buf[:p.n])
	})
}

// Write takes the gateway's packets for the host.
func (d *Device) Write(bufs [][]byte, offset int) (int, error) {
	return d.fromGW.put(len(bufs), func(i int, p *packet) {
		p.set(bufs[i][offset:], netip.AddrPort{}, netip.Addr{})
	})
}

// Pending reports whether packets the host sent wait to be read, as the
// TUN device's does.
func (d *Device) Pending() bool { return d.toGW.pending() }

// BatchSize is the most packets one Read returns.
func (d *Device) BatchSize() int { return d.batch }

// Close ends the device; blocked calls return ErrClosed.
func (d *Device) Close() error {
	d.toGW.close()
	d.fromGW.close()
	return nil
}

// Send is the host sending a packet into the gateway.
func (d *Device) Send(pkt []byte) error {
	_, err := d.toGW.put(1, func(_ int, p *packet) {
		p.set(pkt, netip.AddrPort{}, netip.Addr{})
	})
	return err
}

// SendAll is the host sending pkts into the gateway at once, as a GSO
// train the TUN device splits into segments arrives: the gateway's next
// read finds them all.
func (d *Device) SendAll(pkts [][]byte) error {
	_, err := d.toGW.put(len(pkts), func(i int, p *packet) {
		p.set(pkts[i], netip.AddrPort{}, netip.Addr{})
	})
	return err
}

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
	ab, ba := newLink(depth), newLink(depth)
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
	return c.out.put(len(pkts), func(i int, p *packet) {
		p.set(pkts[i].Data(), c.local, pkts[i].Peer.Addr())
	})
}

// Close ends this end's receiving; the far end's sends to it fail from now
// on, while the far end's own receiving goes on until it closes too.
func (c *Conn) Close() error {
	c.in.close()
	return nil
}
