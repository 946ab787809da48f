package gateway

import "net/netip"

// Device is the inner side: a TUN device read and written in batches with
// every packet at a fixed offset in its buffer (wireguard-go's tun.Device
// shape), so the ESP framing can be written in place around it.
type Device interface {
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)
	Write(bufs [][]byte, offset int) (int, error)
	BatchSize() int
	Close() error
}

// pendingDevice is a Device that can tell, without blocking, that a Read
// would return at once (tun.Device).
type pendingDevice interface{ Pending() bool }

// Message is one outer packet. On Receive, Buf[Off:Off+Len] is the ESP
// packet from the SPI on and HdrLen the length of the outer IP header the
// socket delivered just before it (0 when it delivered none). On Send,
// Buf[Off:Off+Len] is the ESP packet to send to Peer.
type Message struct {
	Buf      []byte
	Off, Len int
	HdrLen   int
	Peer     netip.AddrPort
	// The outer header (header.go): on Receive the TOS or traffic class it
	// arrived with; on Send the TOS, TTL (0: the socket's default) and, for
	// IPv4, whether DF is clear and at what MTU to fragment.
	TOS, TTL uint8
	Fragment bool
	FragMTU  int
}

// Conn is the outer side: one socket carrying ESP (raw IP protocol 50, or
// UDP per RFC 3948) in batches.
type Conn interface {
	Receive(msgs []Message) (int, error)
	Send(msgs []Message) (int, error)
	Close() error
}
