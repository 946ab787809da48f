package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/transport"
	"github.com/espgw/espgw/internal/xdp"
	"github.com/espgw/espgw/sa"
)

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

// openXDP puts raw ESP of key k over AF_XDP as the wan-io setting asks,
// beside the raw socket w it keeps open: nil (and no error) when the
// setting is socket, the key is not raw ESP, or auto found XDP unable to
// attach (which it logs, with why). Both families on one interface share
// one AF_XDP connection (one program, one socket per queue, as a queue
// takes one socket): when open already holds one on the family's
// interface, it serves this family too.
func (rt *Runtime) openXDP(k connKey, w *transport.Conn, cfg *Config, log *slog.Logger, open map[connKey]*xdp.Conn) (*xdp.Conn, error) {
	if k.encap != sa.EncapNone || cfg.WanIO == WanIOSocket || cfg.WanIO == "" {
		return nil, nil
	}
	family := "IPv4"
	if k.v6 {
		family = "IPv6"
	}
	x, err := func() (*xdp.Conn, error) {
		local, dev, err := wanDevice(cfg.Local, k.v6)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", xdp.ErrUnsupported, err)
		}
		for ok, x := range open {
			if ok.v6 != k.v6 && x.Device() == dev {
				if err := x.Serve(local, w); err != nil {
					return nil, fmt.Errorf("%w: %w", xdp.ErrUnsupported, err)
				}
				return x, nil
			}
		}
		return xdp.Open(xdp.Config{Device: dev, Local: local, Fallback: w, Mode: cfg.XDPMode, Log: log})
	}()
	switch {
	case err == nil:
		return x, nil
	case cfg.WanIO == WanIOAuto && errors.Is(err, xdp.ErrUnsupported):
		log.Warn("wan-io auto: raw ESP stays on raw sockets", "family", family, "why", err)
		return nil, nil
	}
	return nil, fmt.Errorf("%s: wan-io %s for %s raw ESP: %w", cfg.File, cfg.WanIO, family, err)
}

// sharedXDP reports whether a key of xdps still uses x.
func sharedXDP(xdps map[connKey]*xdp.Conn, x *xdp.Conn) bool {
	for _, y := range xdps {
		if y == x {
			return true
		}
	}
	return false
}

// undoXDP undoes openXDP's work for key k of a change that failed: x
// stops serving k's family if it was open before the change (in before),
// else it is closed.
func undoXDP(k connKey, x *xdp.Conn, before map[connKey]*xdp.Conn) {
	if x == nil {
		return
	}
	if sharedXDP(before, x) {
		x.Drop(k.v6)
		return
	}
	x.Close()
}

// wanDevice is the local address of a family and the interface holding it.
func wanDevice(local []netip.Addr, v6 bool) (netip.Addr, string, error) {
	for _, a := range local {
		if a.Is6() != v6 || a.Is4In6() {
			continue
		}
		links, err := netlink.LinkList()
		if err != nil {
			return a, "", fmt.Errorf("list interfaces: %w", err)
		}
		for _, l := range links {
			addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
			if err != nil {
				continue
			}
			for _, la := range addrs {
				if ip, ok := netip.AddrFromSlice(la.IP); ok && ip.Unmap() == a {
					return a, l.Attrs().Name, nil
				}
			}
		}
		return a, "", fmt.Errorf("no interface holds the local address %s", a)
	}
	return netip.Addr{}, "", errors.New("no local address of the family to steer ESP for")
}
