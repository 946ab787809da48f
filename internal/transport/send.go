package transport

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/espgw/espgw/esp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

const (
	// The kernel segments at most this many datagrams from one UDP_SEGMENT send.
	maxGSOSegments = 64
	// Largest UDP payload of one (super-)datagram: 65535 minus the headers
	// the length fields cover.
	maxUDPPayload4 = 65535 - 20 - 8
	maxUDPPayload6 = 65535 - 8
)

// sendState is the reused scratch of Send: one message per packet at most.
type sendState struct {
	msgs  []ipv4.Message
	iovs  [][]byte // backing array of the messages' Buffers
	ips   [][16]byte
	udp   []net.UDPAddr
	raw   []net.IPAddr
	oob   [][]byte              // per message, room for UDP_SEGMENT and the TOS and TTL messages
	hdr   [][ipv4HeaderLen]byte // IPv4 raw ESP: each message's outer header
	pair  [][2][]byte           // IPv4 raw ESP: each message's header and ESP packet
	first []int                 // index in the chunk of each message's first packet
	count []int                 // packets in each message
	bytes []int                 // ESP bytes in each message
}

func (s *sendState) init(n int, kind Kind, v6 bool) {
	s.msgs = make([]ipv4.Message, n)
	s.iovs = make([][]byte, n)
	s.ips = make([][16]byte, n)
	s.udp = make([]net.UDPAddr, n)
	s.raw = make([]net.IPAddr, n)
	s.oob = make([][]byte, n)
	s.first = make([]int, n)
	s.count = make([]int, n)
	s.bytes = make([]int, n)
	s.hdr = make([][ipv4HeaderLen]byte, n)
	s.pair = make([][2][]byte, n)
	ipLen := 4
	if v6 {
		ipLen = 16
	}
	for i := range n {
		s.udp[i].IP = s.ips[i][:ipLen]
		s.raw[i].IP = s.ips[i][:ipLen]
		s.oob[i] = make([]byte, controlLen)
		if kind == UDPEncap {
			s.msgs[i].Addr = &s.udp[i]
		} else {
			s.msgs[i].Addr = &s.raw[i]
		}
	}
}

// Send sends each packet's Data to its Peer with its outer header fields,
// in order, in batches of at most BatchSize packets per system call, and
// returns how many packets the kernel took. A packet it refuses (or that is
// invalid: empty, wrong address family, UDP port 0) is counted in
// Stats.SendErrors and skipped; Send goes on with the rest and returns the
// first such error (wrapping a syscall.Errno such as EMSGSIZE, or one of
// the Err* values here).
func (c *Conn) Send(pkts []*esp.Packet) (int, error) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	var (
		sent     int
		firstErr error
	)
	for len(pkts) > 0 {
		// A packet whose header is written here (header.go) goes on its
		// own, between the batches before and after it: order is kept.
		if p := pkts[0]; c.ownHeader(p) || c.extSend(p) {
			err := c.checkPacket(p)
			what := "without DF"
			if err == nil && c.extSend(p) {
				what = "with IPv6 extension headers"
				err = c.sendExt(p)
			} else if err == nil {
				err = c.sendOwn(p)
			}
			if err != nil {
				c.stats.sendErrors.Add(1)
				if firstErr == nil {
					firstErr = fmt.Errorf("send %d-byte packet %s over %s to %s: %w", p.Len, what, c.kind, p.Peer, err)
				}
			} else {
				sent++
				c.stats.packetsOut.Add(1)
				c.stats.bytesOut.Add(uint64(p.Len))
			}
			pkts = pkts[1:]
			continue
		}
		n := 1
		for n < min(len(pkts), c.batch) && !c.ownHeader(pkts[n]) && !c.extSend(pkts[n]) {
			n++
		}
		chunk := pkts[:n]
		pkts = pkts[n:]
		got, err := c.sendChunk(chunk)
		sent += got
		if firstErr == nil {
			firstErr = err
		}
	}
	return sent, firstErr
}

func (c *Conn) sendChunk(chunk []*esp.Packet) (int, error) {
	var firstErr error
	s := &c.send
	m := 0
	gso := c.gso.Load()
	maxPayload := maxUDPPayload4
	if c.v6 {
		maxPayload = maxUDPPayload6
	}
	gsoSize, ended := 0, false
	for i, p := range chunk {
		if err := c.checkPacket(p); err != nil {
			c.stats.sendErrors.Add(1)
			if firstErr == nil {
				firstErr = fmt.Errorf("send over %s from %s to %s: %w", c.kind, c.local, p.Peer, err)
			}
			ended = true // an invalid packet ends a GSO run: packets stay in order
			continue
		}
		n := p.Len
		if gso && m > 0 && !ended {
			// Extend the previous super-datagram when the kernel can
			// segment it back into exactly these packets.
			prev := m - 1
			head := chunk[s.first[prev]]
			if p.Peer == head.Peer && p.Local == head.Local && n <= gsoSize && p.TOS == head.TOS && p.TTL == head.TTL &&
				s.count[prev] < maxGSOSegments && s.bytes[prev]+n <= maxPayload {
				s.count[prev]++
				s.bytes[prev] += n
				s.msgs[prev].Buffers = s.iovs[s.first[prev] : s.first[prev]+s.count[prev]]
				s.iovs[i] = p.Data()
				ended = n < gsoSize // a shorter tail segment must be the last
				continue
			}
		}
		s.iovs[i] = p.Data()
		msg := &s.msgs[m]
		msg.Buffers = s.iovs[i : i+1]
		msg.OOB = nil
		if c.kind == RawESP && !c.v6 {
			fillHeader(s.hdr[m][:], p)
			s.pair[m] = [2][]byte{s.hdr[m][:], p.Data()}
			msg.Buffers = s.pair[m][:]
		} else if p.TOS != 0 || p.TTL != 0 || c.setsSource(p) {
			msg.OOB = s.oob[m][:c.putControl(s.oob[m], p, 0)]
		}
		c.setPeer(m, p)
		s.first[m], s.count[m], s.bytes[m] = i, 1, n
		gsoSize, ended = n, false
		m++
	}
	if gso {
		for j := range m {
			if s.count[j] > 1 {
				head := chunk[s.first[j]]
				s.msgs[j].OOB = s.oob[j][:c.putControl(s.oob[j], head, uint16(head.Len))]
			}
		}
	}

	sent := 0
	for start := 0; start < m; {
		n, err := c.writer.WriteBatch(s.msgs[start:m], 0)
		n = max(n, 0)
		for j := start; j < start+n; j++ {
			sent += s.count[j]
			c.stats.packetsOut.Add(uint64(s.count[j]))
			c.stats.bytesOut.Add(uint64(s.bytes[j]))
			if s.count[j] > 1 {
				c.stats.gsoBatches.Add(1)
			}
		}
		start += n
		if err == nil {
			continue
		}
		if start >= m {
			break
		}
		if gso && s.count[start] > 1 && errors.Is(err, unix.EIO) {
			// EIO: the route's device cannot checksum-offload, which
			// UDP_SEGMENT requires. Send the rest one datagram each.
			c.gso.Store(false)
			rest, restErr := c.sendChunk(chunk[s.first[start]:])
			if firstErr == nil {
				firstErr = restErr
			}
			return sent + rest, firstErr
		}
		c.stats.sendErrors.Add(uint64(s.count[start]))
		if firstErr == nil {
			firstErr = fmt.Errorf("send %d ESP packet(s) of %d bytes to %s over %s: %w", s.count[start], s.bytes[start], chunk[s.first[start]].Peer, c.kind, unwrapSyscall(err))
		}
		start++ // skip the refused message, keep going
	}
	return sent, firstErr
}

// Why Send refused a packet before the kernel saw it.
var (
	ErrEmptyPacket   = errors.New("empty packet")
	ErrNoPeer        = errors.New("packet has no peer address")
	ErrAddressFamily = errors.New("peer is of the other address family than the transport")
	ErrNoPort        = errors.New("peer has no UDP port")
)

func (c *Conn) checkPacket(p *esp.Packet) error {
	switch {
	case p.Len <= 0 || p.Off < 0 || p.Off+p.Len > len(p.Buf):
		return ErrEmptyPacket
	case !p.Peer.Addr().IsValid():
		return ErrNoPeer
	case isIPv6(p.Peer.Addr()) != c.v6:
		return ErrAddressFamily
	case c.kind == UDPEncap && p.Peer.Port() == 0:
		return ErrNoPort
	}
	return nil
}

func (c *Conn) setPeer(m int, p *esp.Packet) {
	s := &c.send
	a := p.Peer.Addr().Unmap()
	if c.v6 {
		s.ips[m] = a.As16()
	} else {
		a4 := a.As4()
		copy(s.ips[m][:4], a4[:])
	}
	s.udp[m].Port = int(p.Peer.Port())
}

// unwrapSyscall turns x/net's *os.SyscallError into its errno, so callers
// can test for unix.EMSGSIZE and friends with errors.Is either way.
func unwrapSyscall(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return fmt.Errorf("%s: %w", se.Syscall, se.Err)
	}
	return err
}

// isIPv6 reports whether a is a real IPv6 address (not an IPv4-mapped one).
func isIPv6(a netip.Addr) bool { return a.Is6() && !a.Is4In6() }

// SendKeepalive sends one RFC 3948 NAT keepalive (a single 0xFF byte) to
// peer, which keeps a NAT mapping open between ESP packets (UDP only).
func (c *Conn) SendKeepalive(peer netip.AddrPort) error {
	if c.kind != UDPEncap {
		return fmt.Errorf("send NAT keepalive to %s: %s transport has no keepalives", peer, c.kind)
	}
	if isIPv6(peer.Addr()) != c.v6 || peer.Port() == 0 {
		return fmt.Errorf("send NAT keepalive from %s: bad peer %s", c.local, peer)
	}
	if _, err := c.pc.WriteTo([]byte{0xff}, net.UDPAddrFromAddrPort(peer)); err != nil {
		c.stats.sendErrors.Add(1)
		return fmt.Errorf("send NAT keepalive to %s: %w", peer, err)
	}
	c.stats.keepalivesSent.Add(1)
	return nil
}

// SendNonESP sends data (an IKE message) to peer behind the RFC 3948
// non-ESP marker, from this UDP socket (UDP only): from the address from
// when it is valid and the socket is bound to all addresses, where the
// message it answers arrived.
func (c *Conn) SendNonESP(data []byte, from netip.Addr, peer netip.AddrPort) error {
	if c.kind != UDPEncap {
		return fmt.Errorf("send IKE message to %s: %s transport has no non-ESP marker", peer, c.kind)
	}
	if isIPv6(peer.Addr()) != c.v6 || peer.Port() == 0 {
		return fmt.Errorf("send IKE message from %s: bad peer %s", c.local, peer)
	}
	b := append(make([]byte, 4, 4+len(data)), data...)
	var oob []byte
	if from.IsValid() && c.local.Addr().IsUnspecified() {
		if c.v6 {
			oob = unix.PktInfo6(&unix.Inet6Pktinfo{Addr: from.As16()})
		} else {
			oob = unix.PktInfo4(&unix.Inet4Pktinfo{Spec_dst: from.Unmap().As4()})
		}
	}
	u, ok := c.pc.(*net.UDPConn)
	if !ok {
		return fmt.Errorf("send IKE message to %s: not a UDP socket", peer)
	}
	if _, _, err := u.WriteMsgUDPAddrPort(b, oob, peer); err != nil {
		c.stats.sendErrors.Add(1)
		return fmt.Errorf("send IKE message to %s: %w", peer, err)
	}
	return nil
}
