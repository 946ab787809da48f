package capture

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/netns"
)

// Sniffed is one IP packet a Sniffer saw. Data is valid only during the
// callback that receives it.
type Sniffed struct {
	Data     []byte
	Outgoing bool // sent by the namespace itself
	At       time.Time
}

// Sniffer watches the IP packets crossing an interface with an AF_PACKET
// socket, so it sees them before the host's kernel handles (or drops)
// them: the test bed's one packet watcher, for replays and for counting
// what really arrived.
type Sniffer struct {
	file *os.File
	done chan struct{}
	once sync.Once
}

// SniffOptions tune Sniff.
type SniffOptions struct {
	// Outgoing also hands on the packets the namespace sends.
	Outgoing bool
}

// Sniff starts watching ifname in ns (every interface of ns when ifname is
// "") and hands each IP packet to got, on one goroutine of its own, until
// Stop. A TCP or UDP checksum left to the (veth) hardware is completed
// first, so a packet reads as it will on the wire.
func Sniff(ns *netns.Namespace, ifname string, opt SniffOptions, got func(Sniffed)) (*Sniffer, error) {
	fd := -1
	err := ns.Do(func() error {
		index := 0
		if ifname != "" {
			ifi, err := net.InterfaceByName(ifname)
			if err != nil {
				return err
			}
			index = ifi.Index
		}
		var err error
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL))); err != nil {
			return err
		}
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
		if !opt.Outgoing {
			if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
				return fmt.Errorf("PACKET_IGNORE_OUTGOING: %w", err)
			}
		}
		// Auxiliary data says when a packet's transport checksum was left
		// to the hardware.
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
			return fmt.Errorf("PACKET_AUXDATA: %w", err)
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: index})
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("packet socket on %q in %s: %w", ifname, ns.Short(), err)
	}
	s := &Sniffer{file: os.NewFile(uintptr(fd), "sniff:"+ifname), done: make(chan struct{})}
	raw, err := s.file.SyscallConn()
	if err != nil {
		s.file.Close()
		return nil, fmt.Errorf("packet socket on %q in %s: %w", ifname, ns.Short(), err)
	}
	go func() {
		defer close(s.done)
		buf := make([]byte, 65536)
		oob := make([]byte, 256)
		for {
			var n, oobn int
			var from unix.Sockaddr
			var rerr error
			err := raw.Read(func(fd uintptr) bool {
				n, oobn, _, from, rerr = unix.Recvmsg(int(fd), buf, oob, 0)
				return rerr != unix.EAGAIN
			})
			if err != nil || rerr != nil && rerr != unix.EINTR {
				return // stopped (deadline) or closed
			}
			if rerr != nil {
				continue // EINTR
			}
			ipLen, ok := header.PacketLength(buf[:n]) // link padding cut off
			if !ok {
				continue
			}
			p := buf[:ipLen]
			if checksumNotReady(oob[:oobn]) {
				completeChecksum(p)
			}
			ll, _ := from.(*unix.SockaddrLinklayer)
			got(Sniffed{Data: p, Outgoing: ll != nil && ll.Pkttype == unix.PACKET_OUTGOING, At: time.Now()})
		}
	}()
	return s, nil
}

// Stop ends the watch; when it returns, got is not called again.
func (s *Sniffer) Stop() {
	s.once.Do(func() {
		s.file.SetReadDeadline(time.Unix(1, 0))
		<-s.done
		s.file.Close()
	})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// checksumNotReady reads TP_STATUS_CSUMNOTREADY from a packet's
// tpacket_auxdata.
func checksumNotReady(oob []byte) bool {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_PACKET && m.Header.Type == unix.PACKET_AUXDATA && len(m.Data) >= 4 {
			return binary.NativeEndian.Uint32(m.Data)&unix.TP_STATUS_CSUMNOTREADY != 0
		}
	}
	return false
}

// completeChecksum computes the TCP or UDP checksum of an IP packet.
func completeChecksum(p []byte) {
	hl, proto, _, frag, ok := header.Header(p)
	if !ok || frag {
		return
	}
	src, dst := header.AddrBytes(p)
	seg := p[hl:]
	switch {
	case proto == 6 && len(seg) >= 20:
		header.L4(seg, src, dst, proto, header.OffsetTCP)
	case proto == 17 && len(seg) >= 8:
		header.L4(seg, src, dst, proto, header.OffsetUDP)
	}
}

// rawSender sends whole IP packets, header included, from a namespace.
type rawSender struct{ fd4, fd6 int }

func newRawSender(ns *netns.Namespace) (*rawSender, error) {
	s := &rawSender{fd4: -1, fd6: -1}
	err := ns.Do(func() error {
		var err error
		// IPPROTO_RAW implies the IP header is the caller's (IP_HDRINCL).
		if s.fd4, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW); err != nil {
			return err
		}
		if s.fd6, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW); err != nil {
			return err
		}
		return unix.SetsockoptInt(s.fd6, unix.IPPROTO_IPV6, unix.IPV6_HDRINCL, 1)
	})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("raw sockets in %s: %w", ns.Short(), err)
	}
	return s, nil
}

func (s *rawSender) send(p []byte) error {
	switch _, dst := header.AddrBytes(p); len(dst) {
	case 4:
		return unix.Sendto(s.fd4, p, 0, &unix.SockaddrInet4{Addr: [4]byte(dst)})
	case 16:
		return unix.Sendto(s.fd6, p, 0, &unix.SockaddrInet6{Addr: [16]byte(dst)})
	}
	return fmt.Errorf("a %d-byte packet is no IP packet", len(p))
}

func (s *rawSender) close() {
	for _, fd := range []int{s.fd4, s.fd6} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
