package ike

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
)

// Datagram is one IKE message on the wire: its bytes (without the
// non-ESP marker of port 4500) and the two ends.
type Datagram struct {
	Data          []byte
	Local, Remote netip.AddrPort
}

// The IKE ports (RFC 7296 §2.23).
const (
	Port     = 500
	NATTPort = 4500
)

// Transport is the two UDP sockets of an endpoint: port 500 and the NAT
// traversal port 4500, where IKE messages start with four zero bytes.
type Transport struct {
	local      netip.Addr
	ike, natt  *net.UDPConn
	ikePort    uint16
	nattPort   uint16
	closeOnce  sync.Once
	closeError error
}

// Listen opens the IKE sockets on local's ports 500 and 4500.
func Listen(local netip.Addr) (*Transport, error) { return ListenPorts(local, Port, NATTPort) }

// ListenPorts opens the IKE sockets on other ports (0 picks free ones).
func ListenPorts(local netip.Addr, ikePort, nattPort uint16) (*Transport, error) {
	t := &Transport{local: local}
	var err error
	if t.ike, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, ikePort))); err != nil {
		return nil, fmt.Errorf("IKE socket on %s: %w", netip.AddrPortFrom(local, ikePort), err)
	}
	if t.natt, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, nattPort))); err != nil {
		t.ike.Close()
		return nil, fmt.Errorf("IKE NAT-T socket on %s: %w", netip.AddrPortFrom(local, nattPort), err)
	}
	t.ikePort = uint16(t.ike.LocalAddr().(*net.UDPAddr).Port)
	t.nattPort = uint16(t.natt.LocalAddr().(*net.UDPAddr).Port)
	return t, nil
}

// Send writes a datagram from the socket of d.Local's port.
func (t *Transport) Send(d Datagram) error {
	c, data := t.ike, d.Data
	if d.Local.Port() == t.nattPort {
		c, data = t.natt, append(make([]byte, 4, 4+len(d.Data)), d.Data...)
	}
	if _, err := c.WriteToUDPAddrPort(data, d.Remote); err != nil {
		return fmt.Errorf("send IKE message to %s: %w", d.Remote, err)
	}
	return nil
}

// Serve reads both sockets and hands each IKE message to e until ctx ends
// or the transport is closed, on as many goroutines as there are CPUs (a
// reader waits while all are busy): the Diffie-Hellman work of one
// IKE_SA_INIT does not hold up the others.
func (t *Transport) Serve(ctx context.Context, e *Endpoint) error {
	stop := context.AfterFunc(ctx, func() { t.Close() })
	defer stop()
	work := make(chan Datagram)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for d := range work {
				e.Handle(d)
			}
		})
	}
	errs := make(chan error, 2)
	for _, c := range []*net.UDPConn{t.ike, t.natt} {
		go func() { errs <- t.read(c, e, work) }()
	}
	err := <-errs
	t.Close()
	<-errs
	close(work)
	wg.Wait()
	if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (t *Transport) read(c *net.UDPConn, e *Endpoint, work chan<- Datagram) error {
	buf := make([]byte, MaxMessageLen+4)
	natt := c == t.natt
	port := t.ikePort
	if natt {
		port = t.nattPort
	}
	for {
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return fmt.Errorf("read IKE socket: %w", err)
		}
		data := buf[:n]
		if natt {
			switch {
			case n == 1 && data[0] == 0xff:
				e.count("NAT-T keepalive")
				continue
			case n < 4 || data[0]|data[1]|data[2]|data[3] != 0:
				e.count("ESP on the IKE NAT-T socket")
				continue
			}
			data = data[4:]
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		work <- Datagram{Data: append([]byte(nil), data...), Local: netip.AddrPortFrom(t.local, port), Remote: from}
	}
}

// Close closes both sockets.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() { t.closeError = errors.Join(t.ike.Close(), t.natt.Close()) })
	return t.closeError
}
