package gateway

import (
	"github.com/espgw/espgw/internal/transport"
)

// rxOffset is where received ESP lands in a buffer: room in front for the
// IPv6 header an opened transport-mode packet needs (raw IPv6 sockets do
// not deliver it).
const rxOffset = 64

// Wire adapts a transport.Conn (raw ESP or UDP-encapsulated, batched) to
// the gateway's Conn. Receive and Send each reuse their own scratch, so one
// goroutine may receive while another sends.
type Wire struct {
	*transport.Conn
	rx, tx []transport.Packet
	bufs   [][]byte // the receive buffers by Tag, as msgs get rewritten
}

// NewWire wraps c.
func NewWire(c *transport.Conn) *Wire { return &Wire{Conn: c} }

// Receive implements Conn.
func (w *Wire) Receive(msgs []Message) (int, error) {
	w.rx, w.bufs = w.rx[:0], w.bufs[:0]
	for i, m := range msgs {
		w.bufs = append(w.bufs, m.Buf)
		// Receive reorders whole entries; the Tag says whose buffer it is.
		w.rx = append(w.rx, transport.Packet{Buf: m.Buf[rxOffset:], Tag: i})
	}
	n, err := w.Conn.Receive(w.rx)
	for i := range n {
		p := &w.rx[i]
		full := w.bufs[p.Tag]
		off := len(full) - cap(p.Data)
		// A raw IPv4 socket's header stays in the buffer before the ESP.
		msgs[i] = Message{Buf: full, Off: off, Len: len(p.Data), HdrLen: off - rxOffset, Peer: p.Peer, TOS: p.TOS}
	}
	return n, err
}

// Send implements Conn.
func (w *Wire) Send(msgs []Message) (int, error) {
	w.tx = w.tx[:0]
	for _, m := range msgs {
		w.tx = append(w.tx, transport.Packet{Data: m.Buf[m.Off : m.Off+m.Len], Peer: m.Peer, TOS: m.TOS, TTL: m.TTL, Fragment: m.Fragment, FragMTU: m.FragMTU})
	}
	return w.Conn.Send(w.tx)
}
