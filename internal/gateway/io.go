package gateway

import "github.com/espgw/espgw/esp"

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

// Conn is the outer side: one socket carrying ESP (raw IP protocol 50, or
// UDP per RFC 3948) in batches of the data path's one packet struct
// (transport.Conn, memnet.Conn).
//
// Receive reads into each packet's Buf from its Off on and returns n ≥ 1
// packets first in pkts (it may reorder the pointers), each with Data the
// ESP packet from the SPI on, HdrLen the length of the outer IP header the
// socket delivered just before it (0 when it delivered none), Peer the
// source and TOS the outer TOS or traffic class. Send sends each packet's
// Data to its Peer with its outer header fields (TOS, TTL, Fragment,
// FragMTU), in order, and returns how many went out.
type Conn interface {
	Receive(pkts []*esp.Packet) (int, error)
	Send(pkts []*esp.Packet) (int, error)
	Close() error
}
