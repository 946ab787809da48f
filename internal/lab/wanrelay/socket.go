package wanrelay

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/lab/netns"
)

// withNetns runs fn on an OS thread inside the named network namespace
// ("" runs it where the caller is). Sockets fn opens stay in that namespace
// for their lifetime, whichever thread uses them later. It runs on a fresh
// goroutine, so a thread that cannot return to its namespace dies with it.
func withNetns(name string, fn func() error) error {
	if name == "" {
		return fn()
	}
	h, err := vnetns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("open netns %q: %w", name, err)
	}
	defer h.Close()
	errc := make(chan error, 1)
	go func() { errc <- netns.Run(h, fn) }()
	return <-errc
}

// vnetHdrLen is the size of struct virtio_net_hdr, which PACKET_VNET_HDR
// puts before every frame read and expects before every frame written. It
// carries the checksum-offload and GSO state of the frame, so the relay
// forwards frames from sockets whose checksums the sender's kernel left to
// the "hardware" (veth) and super-packets made by GSO.
const vnetHdrLen = 10

// vnetHdr is struct virtio_net_hdr, in host byte order.
type vnetHdr struct {
	flags, gsoType                         uint8
	hdrLen, gsoSize, csumStart, csumOffset uint16
}

func decodeVnetHdr(b []byte) vnetHdr {
	u := func(i int) uint16 { return binary.NativeEndian.Uint16(b[i:]) }
	return vnetHdr{flags: b[0], gsoType: b[1], hdrLen: u(2), gsoSize: u(4), csumStart: u(6), csumOffset: u(8)}
}

// link is an AF_PACKET socket bound to one interface of the relay.
type link struct {
	name  string
	index int
	mtu   int
	mac   net.HardwareAddr
	fd    int
	file  *os.File        // the fd in Go's poller, for deadlines
	raw   syscall.RawConn // reads and writes that wait in the poller

	mu     sync.Mutex // guards closed against kernelDrops
	closed bool
}

// openLink opens a raw packet socket on the named interface, in promiscuous
// mode (frames for the gateways' MAC addresses are not addressed to the
// relay), with outgoing frames ignored (so the relay never reads back what
// it sent) and with virtio-net headers on.
func openLink(name string) (*link, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", name, err)
	}
	if ifi.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("interface %s is down", name)
	}
	proto := int(htons(unix.ETH_P_ALL))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, fmt.Errorf("packet socket for %s: %w", name, err)
	}
	setup := func() error {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
			return fmt.Errorf("PACKET_VNET_HDR: %w", err)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
			return fmt.Errorf("PACKET_IGNORE_OUTGOING: %w", err)
		}
		for _, o := range []int{unix.SO_RCVBUFFORCE, unix.SO_SNDBUFFORCE} {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o, 8<<20); err != nil {
				return fmt.Errorf("socket buffer: %w", err)
			}
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			return fmt.Errorf("bind: %w", err)
		}
		mreq := unix.PacketMreq{Ifindex: int32(ifi.Index), Type: unix.PACKET_MR_PROMISC}
		if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq); err != nil {
			return fmt.Errorf("promiscuous mode: %w", err)
		}
		return nil
	}
	if err := setup(); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("packet socket on %s: %w", name, err)
	}
	l, err := newLink(name, fd, ifi.MTU)
	if err != nil {
		return nil, fmt.Errorf("packet socket on %s: %w", name, err)
	}
	l.index, l.mac = ifi.Index, ifi.HardwareAddr
	return l, nil
}

// newLink puts the non-blocking socket fd into Go's poller.
func newLink(name string, fd, mtu int) (*link, error) {
	f := os.NewFile(uintptr(fd), "packet:"+name)
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &link{name: name, mtu: mtu, fd: fd, file: f, raw: raw}, nil
}

func (l *link) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return l.file.Close()
}

// kernelDrops returns the frames the kernel dropped on this socket since
// the last call (its receive buffer was full: the relay fell behind).
func (l *link) kernelDrops() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0 // the fd number may belong to another file by now
	}
	var n uint64
	l.raw.Control(func(fd uintptr) {
		if st, err := unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
			n = uint64(st.Drops)
		}
	})
	return n
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// batch is a vector of message headers for recvmmsg/sendmmsg over fixed
// buffers, built once.
type batch struct {
	msgs []unix.Mmsghdr
	iovs []unix.Iovec
	bufs [][]byte
}

func newBatch(n, size int) *batch {
	b := &batch{msgs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n), bufs: make([][]byte, n)}
	for i := range b.msgs {
		b.bufs[i] = make([]byte, size)
		b.iovs[i].Base = &b.bufs[i][0]
		b.iovs[i].SetLen(size)
		b.msgs[i].Hdr.Iov = &b.iovs[i]
		b.msgs[i].Hdr.Iovlen = 1
	}
	return b
}

// recv reads up to len(b.msgs) frames without blocking; it returns 0 and
// EAGAIN when none is waiting. Lengths are in msgs[i].Len; a frame longer
// than its buffer has MSG_TRUNC in msgs[i].Hdr.Flags.
func (b *batch) recv(fd int) (int, error) {
	for i := range b.msgs {
		b.iovs[i].SetLen(len(b.bufs[i]))
		b.msgs[i].Hdr.Flags = 0
	}
	n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.msgs[0])),
		uintptr(len(b.msgs)), unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// send writes frames [from, to) of the batch, whose lengths are set with
// setLen; it returns how many the kernel took.
func (b *batch) send(fd, from, to int) (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.msgs[from])),
		uintptr(to-from), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func (b *batch) setLen(i, n int) { b.iovs[i].SetLen(n) }
