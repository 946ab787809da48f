// Package transport carries ESP packets between gateways over raw IP or UDP.
//
// It carries ESP packets between gateways: raw ESP (IP protocol 50) over
// IPv4 or IPv6, or ESP in UDP per RFC 3948 (port 4500, non-ESP marker, NAT
// keepalives). It moves batches — sendmmsg through golang.org/x/net's
// WriteBatch, recvmmsg directly — optionally with UDP GSO, on sockets with
// buffers sized for load, and counts everything it sees. It knows nothing of
// ESP beyond where a packet starts: it moves the data path's one packet
// struct, esp.Packet, whose Data is the ESP packet from SPI to ICV, whose
// Peer is the far end, and whose TOS, TTL, Fragment and FragMTU are the
// outer header's (header.go).
//
// The batch paths allocate nothing per packet: callers own the packets and
// their buffers; the Conn reuses its message headers, socket addresses and
// control buffers. (Receive calls recvmmsg
// itself because x/net's ReadBatch allocates a net.Addr per message.)
//
// What the kernel does for each transport:
//   - Raw ESP: the kernel builds the outer IP header on send. IPv4 raw
//     sockets deliver the IP header on receive, IPv6 ones do not; Receive
//     leaves it in the buffer in front of the packet (esp.Packet.HdrLen), so
//     the packet's Data always starts at the SPI. The socket sets
//     IP_PMTUDISC_DO (IPv6: IPV6_PMTUDISC_DO): a packet too big for the path
//     fails with EMSGSIZE instead of being fragmented, unless
//     Config.Fragment asks the kernel to fragment instead (IPv6; IPv4
//     packets say so one by one: esp.Packet.Fragment, see header.go).
//   - UDP: the same, plus UDP GSO (UDP_SEGMENT, Linux ≥ 4.18) when
//     Config.GSO is set: runs of equal-size packets to the same peer go to
//     the kernel as one super-datagram that it segments (in the NIC or in
//     software), and UDP GRO (UDP_GRO, readable from Linux 5.12) when
//     Config.GRO is set: see gro.go.
package transport

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/nsrun"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// Kind is the outer encapsulation of ESP packets.
type Kind int

const (
	// RawESP sends ESP directly over IP (protocol 50).
	RawESP Kind = iota
	// UDPEncap sends ESP inside UDP (RFC 3948).
	UDPEncap
)

func (k Kind) String() string {
	switch k {
	case RawESP:
		return "raw-esp"
	case UDPEncap:
		return "udp-encap"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// DefaultUDPPort is the IKE NAT-traversal port that carries ESP in UDP.
const DefaultUDPPort = 4500

// ProtocolESP is ESP's IP protocol number.
const ProtocolESP = 50

// DefaultBatchSize is the number of messages per Send/Receive call when
// Config.BatchSize is 0.
const DefaultBatchSize = 128

// DefaultSocketBuffer is the receive and send buffer size asked for when
// Config.SocketBuffer is 0.
const DefaultSocketBuffer = 4 << 20

// MinPacketLen is the shortest ESP packet: SPI and sequence number.
const MinPacketLen = 8

// Config describes a transport endpoint.
type Config struct {
	Kind Kind
	// Local is the address to bind; its family selects IPv4 or IPv6. An
	// unspecified address (0.0.0.0, ::) receives on every address of that
	// family. The port is the UDP port (0 means 4500); raw ESP ignores it.
	Local netip.AddrPort
	// BatchSize is the most packets one Send or Receive call moves (0:
	// DefaultBatchSize).
	BatchSize int
	// SocketBuffer is the size asked for SO_RCVBUF and SO_SNDBUF, forced
	// beyond net.core.[rw]mem_max when the process has CAP_NET_ADMIN (0:
	// DefaultSocketBuffer).
	SocketBuffer int
	// GSO enables UDP generic segmentation offload on send (UDP only).
	GSO bool
	// GRO enables UDP generic receive offload (UDP only): coalesced
	// super-datagrams are received whole and split into packets by copying.
	GRO bool
	// Fragment lets the kernel fragment outer packets larger than the path
	// MTU (IP_PMTUDISC_DONT) instead of refusing them with EMSGSIZE.
	Fragment bool
	// Mark, when not 0, is the socket's firewall mark (SO_MARK): policy
	// routing keeps marked ESP away from routes into the tunnel itself.
	Mark uint32
	// Namespace, when set (a handle > 0), is the network namespace the
	// socket is opened in; otherwise the calling thread's current one.
	Namespace vnetns.NsHandle
	// NonESP, when set on a UDP transport, is given every datagram with
	// the RFC 3948 non-ESP marker (IKE on port 4500), without the marker,
	// and its source; data is valid only during the call.
	NonESP func(data []byte, from netip.AddrPort, to netip.Addr)
}

// Stats are a Conn's counters since Open.
type Stats struct {
	PacketsOut, BytesOut uint64 // ESP packets (and their bytes) handed to the kernel
	PacketsIn, BytesIn   uint64 // ESP packets (and their bytes) returned by Receive
	SendErrors           uint64 // packets the kernel refused (see the error Send returned)
	ReceiveErrors        uint64 // failed receive calls
	Keepalives           uint64 // RFC 3948 NAT keepalives (one 0xFF byte) received and ignored
	KeepalivesSent       uint64 // RFC 3948 NAT keepalives sent (SendKeepalive)
	NonESP               uint64 // UDP datagrams with the non-ESP marker (IKE) received and ignored
	Short                uint64 // datagrams too short for an ESP header, dropped
	Truncated            uint64 // datagrams longer than the room in the packet's Buf, dropped
	GSOBatches           uint64 // UDP GSO super-datagrams sent
	GROBatches           uint64 // UDP GRO super-datagrams received
	Fragmented           uint64 // IPv4 packets sent as fragments (esp.Packet.Fragment, larger than FragMTU)
	FragmentsOut         uint64 // the fragments they were sent as
}

type counters struct {
	packetsOut, bytesOut, packetsIn, bytesIn atomic.Uint64
	sendErrors, receiveErrors                atomic.Uint64
	keepalives, nonESP, short, truncated     atomic.Uint64
	keepalivesSent                           atomic.Uint64
	gsoBatches, groBatches                   atomic.Uint64
	fragmented, fragmentsOut                 atomic.Uint64
}

// Conn is an open transport endpoint. Send and Receive may run concurrently;
// concurrent calls of the same method are serialised.
type Conn struct {
	kind  Kind
	v6    bool
	local netip.AddrPort
	batch int

	pc     net.PacketConn  // *net.UDPConn or *net.IPConn
	rc     syscall.RawConn // for recvmmsg and socket options
	writer batchWriter     // x/net ipv4 or ipv6 PacketConn

	// IPv4 UDP only: the send-only IPPROTO_RAW socket for packets without
	// DF (header.go); nil when it could not be opened.
	raw4   batchWriter
	raw4pc net.PacketConn
	// IPv6 raw ESP only: the send-only IPPROTO_RAW socket for packets with
	// extension headers in front of ESP (exthdr.go); nil when it could not
	// be opened.
	raw6   *ipv6.PacketConn
	raw6pc net.PacketConn
	ext    extState

	rcvBuf, sndBuf int

	gso, gro atomic.Bool
	nonESP   func(data []byte, from netip.AddrPort, to netip.Addr)

	sendMu  sync.Mutex
	send    sendState
	frag    fragState
	recvMu  sync.Mutex
	recv    recvState
	groRecv groState

	stats counters
}

type batchWriter interface {
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

// ipv4.Message and ipv6.Message are the same type (x/net/internal/socket.Message).
var _ ipv4.Message = ipv6.Message{}

// Open opens a transport endpoint.
func Open(cfg Config) (*Conn, error) {
	if !cfg.Local.Addr().IsValid() {
		return nil, fmt.Errorf("open %s transport: no local address (use 0.0.0.0 or :: to bind all)", cfg.Kind)
	}
	if cfg.Kind != RawESP && cfg.Kind != UDPEncap {
		return nil, fmt.Errorf("open transport: unknown kind %d", int(cfg.Kind))
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.BatchSize < 1 || cfg.BatchSize > 1024 {
		return nil, fmt.Errorf("open %s transport on %s: batch size %d outside 1..1024", cfg.Kind, cfg.Local, cfg.BatchSize)
	}
	if cfg.SocketBuffer == 0 {
		cfg.SocketBuffer = DefaultSocketBuffer
	}
	if cfg.SocketBuffer < 4096 {
		return nil, fmt.Errorf("open %s transport on %s: socket buffer %d below 4096 bytes", cfg.Kind, cfg.Local, cfg.SocketBuffer)
	}
	if (cfg.GSO || cfg.GRO) && cfg.Kind != UDPEncap {
		return nil, fmt.Errorf("open %s transport on %s: GSO and GRO are for UDP encapsulation only", cfg.Kind, cfg.Local)
	}
	addr := cfg.Local.Addr().Unmap()
	if cfg.Kind == UDPEncap && cfg.Local.Port() == 0 {
		cfg.Local = netip.AddrPortFrom(addr, DefaultUDPPort)
	} else {
		cfg.Local = netip.AddrPortFrom(addr, cfg.Local.Port())
	}
	c := &Conn{kind: cfg.Kind, v6: addr.Is6(), batch: cfg.BatchSize, nonESP: cfg.NonESP}

	open := func() error { return c.open(cfg) }
	var err error
	if cfg.Namespace > 0 {
		err = nsrun.Run(cfg.Namespace, open)
	} else {
		err = open()
	}
	if err != nil {
		if c.pc != nil {
			c.pc.Close()
		}
		return nil, fmt.Errorf("open %s transport on %s: %w", cfg.Kind, cfg.Local, err)
	}
	c.send.init(c.batch, c.kind, c.v6)
	c.frag.init()
	c.recv.init(max(c.batch, groMessages(c.batch)))
	if c.gro.Load() {
		c.groRecv.init(c.batch)
	}
	return c, nil
}

func (c *Conn) open(cfg Config) error {
	var network, address string
	switch {
	case cfg.Kind == UDPEncap && !c.v6:
		network, address = "udp4", cfg.Local.String()
	case cfg.Kind == UDPEncap:
		network, address = "udp6", cfg.Local.String()
	case !c.v6:
		network, address = "ip4:50", cfg.Local.Addr().String()
	default:
		network, address = "ip6:50", cfg.Local.Addr().String()
	}
	pc, err := net.ListenPacket(network, address)
	if err != nil {
		return err
	}
	c.pc = pc
	if c.rc, err = pc.(syscall.Conn).SyscallConn(); err != nil {
		return err
	}
	if err := c.setOptions(cfg); err != nil {
		return err
	}
	if c.v6 {
		c.writer = ipv6Writer{ipv6.NewPacketConn(pc)}
	} else {
		c.writer = ipv4.NewPacketConn(pc)
	}
	if c.kind == RawESP && c.v6 {
		if err := c.openRaw6(cfg); err != nil {
			c.raw6, c.raw6pc = nil, nil // such packets then fail, counted
		}
		c.ext.init()
	}
	if c.kind == UDPEncap && !c.v6 {
		if err := c.openRaw4(cfg); err != nil {
			// Packets with DF still go; those without fail with
			// ErrNoRawSocket, counted, rather than leave with DF set.
			c.raw4, c.raw4pc = nil, nil
		}
	}
	switch a := pc.LocalAddr().(type) {
	case *net.UDPAddr:
		c.local = a.AddrPort()
	case *net.IPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		c.local = netip.AddrPortFrom(ip.Unmap(), 0)
	}
	return nil
}

// ipv6Writer adapts ipv6.PacketConn (whose Message type is the same as
// ipv4's) to batchWriter.
type ipv6Writer struct{ *ipv6.PacketConn }

func (w ipv6Writer) WriteBatch(ms []ipv4.Message, flags int) (int, error) {
	return w.PacketConn.WriteBatch(ms, flags)
}

func (c *Conn) setOptions(cfg Config) error {
	var errs []error
	pmtu4, pmtu6 := unix.IP_PMTUDISC_DO, unix.IPV6_PMTUDISC_DO
	if cfg.Fragment {
		pmtu4, pmtu6 = unix.IP_PMTUDISC_DONT, unix.IPV6_PMTUDISC_DONT
	}
	ctlErr := c.rc.Control(func(fd uintptr) {
		s := int(fd)
		for _, o := range []struct{ plain, force int }{{unix.SO_RCVBUF, unix.SO_RCVBUFFORCE}, {unix.SO_SNDBUF, unix.SO_SNDBUFFORCE}} {
			// FORCE passes net.core.*mem_max with CAP_NET_ADMIN; the plain
			// option still gets us up to the limit without it.
			if err := unix.SetsockoptInt(s, unix.SOL_SOCKET, o.force, cfg.SocketBuffer); err != nil {
				if err := unix.SetsockoptInt(s, unix.SOL_SOCKET, o.plain, cfg.SocketBuffer); err != nil {
					errs = append(errs, fmt.Errorf("set socket buffer: %w", err))
				}
			}
		}
		var err error
		if c.rcvBuf, err = unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF); err != nil {
			errs = append(errs, fmt.Errorf("read SO_RCVBUF: %w", err))
		}
		if c.sndBuf, err = unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUF); err != nil {
			errs = append(errs, fmt.Errorf("read SO_SNDBUF: %w", err))
		}
		if c.v6 {
			// Go opens "udp6" sockets with IPV6_V6ONLY, so a v6 endpoint
			// never sees v4-mapped peers.
			if err := unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, pmtu6); err != nil {
				errs = append(errs, fmt.Errorf("set IPV6_MTU_DISCOVER: %w", err))
			}
			// The outer traffic class, for ECN and DSCP on decapsulation.
			if err := unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1); err != nil {
				errs = append(errs, fmt.Errorf("set IPV6_RECVTCLASS: %w", err))
			}
			if c.kind == RawESP {
				// Extension headers in front of ESP, and the hop limit,
				// to give a transport-mode packet its header back
				// (exthdr.go).
				for _, o := range []struct {
					opt  int
					name string
				}{{unix.IPV6_RECVHOPOPTS, "IPV6_RECVHOPOPTS"}, {unix.IPV6_RECVDSTOPTS, "IPV6_RECVDSTOPTS"},
					{unix.IPV6_RECVRTHDR, "IPV6_RECVRTHDR"}, {unix.IPV6_RECVHOPLIMIT, "IPV6_RECVHOPLIMIT"}} {
					if err := unix.SetsockoptInt(s, unix.IPPROTO_IPV6, o.opt, 1); err != nil {
						errs = append(errs, fmt.Errorf("set %s: %w", o.name, err))
					}
				}
			}
			// The destination address of each packet, so the receiver
			// finds its SA by SPI and destination (RFC 4301 SAD) on a
			// socket bound to every address.
			if err := unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1); err != nil {
				errs = append(errs, fmt.Errorf("set IPV6_RECVPKTINFO: %w", err))
			}
		} else {
			if err := unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, pmtu4); err != nil {
				errs = append(errs, fmt.Errorf("set IP_MTU_DISCOVER: %w", err))
			}
			if c.kind == RawESP {
				// The transport writes the outer header: DF, TOS and TTL
				// per packet (header.go).
				if err := unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_HDRINCL, 1); err != nil {
					errs = append(errs, fmt.Errorf("set IP_HDRINCL: %w", err))
				}
			} else {
				if err := unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_RECVTOS, 1); err != nil {
					errs = append(errs, fmt.Errorf("set IP_RECVTOS: %w", err))
				}
				// As IPV6_RECVPKTINFO (raw IPv4 sockets deliver the header).
				if err := unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_PKTINFO, 1); err != nil {
					errs = append(errs, fmt.Errorf("set IP_PKTINFO: %w", err))
				}
			}
		}
		if cfg.Mark != 0 {
			if err := unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_MARK, int(cfg.Mark)); err != nil {
				errs = append(errs, fmt.Errorf("set SO_MARK: %w", err))
			}
		}
		if cfg.GSO {
			// Probe: UDP_SEGMENT is readable exactly where the kernel has it.
			if _, err := unix.GetsockoptInt(s, unix.IPPROTO_UDP, unix.UDP_SEGMENT); err == nil {
				c.gso.Store(true)
			}
		}
		if cfg.GRO {
			// Kernels before 5.12 cannot read UDP_GRO back; there GRO stays off.
			if unix.SetsockoptInt(s, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil {
				if v, err := unix.GetsockoptInt(s, unix.IPPROTO_UDP, unix.UDP_GRO); err == nil && v == 1 {
					c.gro.Store(true)
				}
			}
		}
	})
	if ctlErr != nil {
		return ctlErr
	}
	return errors.Join(errs...)
}

// Kind is the transport's encapsulation.
func (c *Conn) Kind() Kind { return c.kind }

// LocalAddr is the bound address (port 0 for raw ESP).
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// BatchSize is the most packets one Send or Receive call moves.
func (c *Conn) BatchSize() int { return c.batch }

// GSO reports whether UDP GSO is in use; it turns off by itself if the
// kernel refuses a super-datagram (EIO: no checksum offload on the route).
func (c *Conn) GSO() bool { return c.gso.Load() }

// GRO reports whether UDP GRO is on for receiving.
func (c *Conn) GRO() bool { return c.gro.Load() }

// SocketBuffers are the receive and send buffer sizes the kernel granted
// (as it reports them: twice the requested size, for its bookkeeping).
func (c *Conn) SocketBuffers() (receive, send int) { return c.rcvBuf, c.sndBuf }

// HeaderLen is what the outer headers add to each ESP packet on the wire:
// 20 or 40 for the IP header, plus 8 for UDP. Use it with tun.Overhead.
func (c *Conn) HeaderLen() (ip, udp int) {
	ip = 20
	if c.v6 {
		ip = 40
	}
	if c.kind == UDPEncap {
		udp = 8
	}
	return ip, udp
}

// SetReadDeadline makes a blocked Receive return an error once t passes.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.pc.SetReadDeadline(t) }

// Close closes the socket; a blocked Receive returns net.ErrClosed.
func (c *Conn) Close() error {
	if c.raw6pc != nil {
		c.raw6pc.Close()
	}
	if c.raw4pc != nil {
		c.raw4pc.Close()
	}
	return c.pc.Close()
}

// Stats returns a snapshot of the counters.
func (c *Conn) Stats() Stats {
	s := &c.stats
	return Stats{
		PacketsOut: s.packetsOut.Load(), BytesOut: s.bytesOut.Load(),
		PacketsIn: s.packetsIn.Load(), BytesIn: s.bytesIn.Load(),
		SendErrors: s.sendErrors.Load(), ReceiveErrors: s.receiveErrors.Load(),
		Keepalives: s.keepalives.Load(), KeepalivesSent: s.keepalivesSent.Load(), NonESP: s.nonESP.Load(),
		Short: s.short.Load(), Truncated: s.truncated.Load(),
		GSOBatches: s.gsoBatches.Load(), GROBatches: s.groBatches.Load(),
		Fragmented: s.fragmented.Load(), FragmentsOut: s.fragmentsOut.Load(),
	}
}
