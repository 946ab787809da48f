package xdp

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// UMEM and ring geometry. Half the frames are for receiving (they live in
// the fill ring, the RX ring or a caller's copy in flight), half for
// sending (free, in the TX ring, or in the completion ring).
const (
	frameSize  = 2048
	numFrames  = 4096
	ringSize   = 2048 // every ring; a power of two
	rxFrames   = numFrames / 2
	txFrames   = numFrames - rxFrames
	txBudget   = 256                                  // XDP_MAX_TX_SKB_BUDGET: frames one sendto may send in copy mode
	maxPayload = frameSize - unix.XDP_PACKET_HEADROOM // the most a received frame may carry
)

// ring is one of an AF_XDP socket's four rings, mmapped from the kernel:
// a producer and a consumer index and size entries of descriptors (RX, TX)
// or frame addresses (fill, completion).
type ring struct {
	mem      []byte
	producer *uint32
	consumer *uint32
	flags    *uint32
	desc     unsafe.Pointer
	mask     uint32
}

func (r *ring) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.desc, uintptr(i&r.mask)*8))
}

func (r *ring) xdpDesc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.desc, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// needsWakeup reports whether the kernel asks to be kicked (need_wakeup).
func (r *ring) needsWakeup() bool { return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0 }

// socket is one AF_XDP socket bound to one queue of a device, with its own
// UMEM.
type socket struct {
	fd            int
	queue         int
	umem          []byte
	fill, comp    ring
	rx, tx        ring
	zeroCopy      bool
	txFree        []uint64 // UMEM addresses of free TX frames
	txOutstanding uint32   // TX frames handed to the kernel and not yet completed
	// sendto wakes the kernel to send from the TX ring; tests replace it
	// to make kicks fail.
	sendto func(fd int) unix.Errno
}

// wakeTX is the sendto that kicks an AF_XDP socket's TX ring.
func wakeTX(fd int) unix.Errno {
	_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// mode asks bind for zero copy, copy, or whatever the driver does.
type bindMode uint16

const (
	bindZeroCopy bindMode = unix.XDP_ZEROCOPY
	bindCopy     bindMode = unix.XDP_COPY
)

// openSocket creates an AF_XDP socket on queue of ifindex with its UMEM and
// rings, fills the fill ring, and binds it.
func openSocket(ifindex, queue int, mode bindMode) (s *socket, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open an AF_XDP socket: %w", err)
	}
	sk := &socket{fd: fd, queue: queue, sendto: wakeTX}
	defer func() {
		if err != nil {
			sk.close()
		}
	}()
	s = sk
	s.umem, err = unix.Mmap(-1, 0, numFrames*frameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("allocate a UMEM of %d frames: %w", numFrames, err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(len(s.umem)), Size: frameSize}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return nil, fmt.Errorf("register the UMEM: %w", err)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, ringSize); err != nil {
			return nil, fmt.Errorf("size AF_XDP ring %d: %w", opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	size := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&size)), 0); e != 0 {
		return nil, fmt.Errorf("read the AF_XDP ring offsets: %w", e)
	}
	if err := s.fill.mmap(fd, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, 8); err != nil {
		return nil, fmt.Errorf("map the fill ring: %w", err)
	}
	if err := s.comp.mmap(fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, 8); err != nil {
		return nil, fmt.Errorf("map the completion ring: %w", err)
	}
	if err := s.rx.mmap(fd, unix.XDP_PGOFF_RX_RING, off.Rx, int(unsafe.Sizeof(unix.XDPDesc{}))); err != nil {
		return nil, fmt.Errorf("map the RX ring: %w", err)
	}
	if err := s.tx.mmap(fd, unix.XDP_PGOFF_TX_RING, off.Tx, int(unsafe.Sizeof(unix.XDPDesc{}))); err != nil {
		return nil, fmt.Errorf("map the TX ring: %w", err)
	}
	// Every receive frame goes to the kernel now; the TX ones wait here.
	for i := range uint32(rxFrames) {
		*s.fill.addr(i) = uint64(i) * frameSize
	}
	atomic.StoreUint32(s.fill.producer, rxFrames)
	s.txFree = make([]uint64, 0, txFrames)
	for i := rxFrames; i < numFrames; i++ {
		s.txFree = append(s.txFree, uint64(i)*frameSize)
	}
	// In copy mode a sendto sends at most the budget's frames; ask for a
	// whole batch's worth (kernels without the option keep 32 and the
	// kick loops).
	unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, txBudget)
	// need_wakeup only with zero copy, where the driver says when it wants
	// a kick. In copy mode every TX batch needs its sendto anyway, and
	// with need_wakeup set the kernel also drives TX from poll(): the
	// receiving goroutine's poll then waits on the socket's mutex while
	// the sender's kick carries a batch through the whole veth path, and
	// the return traffic (TCP's ACKs) with it.
	flags := uint16(mode)
	if mode == bindZeroCopy {
		flags |= unix.XDP_USE_NEED_WAKEUP
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(ifindex), QueueID: uint32(queue)}
	// A socket closed a moment ago may still hold the queue: the kernel
	// releases it from a work queue.
	for tries := 0; ; tries++ {
		err := unix.Bind(fd, sa)
		if err == nil {
			break
		}
		if err != unix.EBUSY || tries == 50 {
			return nil, fmt.Errorf("bind the AF_XDP socket to queue %d: %w", queue, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.zeroCopy = mode == bindZeroCopy
	return s, nil
}

func (r *ring) mmap(fd int, pgoff int64, off unix.XDPRingOffset, entry int) error {
	mem, err := unix.Mmap(fd, pgoff, int(off.Desc)+ringSize*entry, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return err
	}
	base := unsafe.Pointer(&mem[0])
	r.mem = mem
	r.producer = (*uint32)(unsafe.Add(base, off.Producer))
	r.consumer = (*uint32)(unsafe.Add(base, off.Consumer))
	r.flags = (*uint32)(unsafe.Add(base, off.Flags))
	r.desc = unsafe.Add(base, off.Desc)
	r.mask = ringSize - 1
	return nil
}

func setsockopt(fd, opt int, val unsafe.Pointer, size uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(val), size, 0); e != 0 {
		return e
	}
	return nil
}

// frame is the UMEM bytes of a descriptor.
func (s *socket) frame(addr uint64, n uint32) []byte { return s.umem[addr : addr+uint64(n)] }

// received returns how many descriptors wait in the RX ring (at most max).
func (s *socket) received(max uint32) uint32 {
	cons := *s.rx.consumer // only this side writes it
	n := atomic.LoadUint32(s.rx.producer) - cons
	return min(n, max)
}

// release hands n consumed RX descriptors back: their frames go to the
// fill ring for the kernel to fill again. The fill ring has room for every
// receive frame, so it never overflows.
func (s *socket) release(n uint32) {
	cons := *s.rx.consumer
	prod := *s.fill.producer
	for i := range n {
		d := s.rx.xdpDesc(cons + i)
		*s.fill.addr(prod + i) = d.Addr &^ (frameSize - 1)
	}
	atomic.StoreUint32(s.fill.producer, prod+n)
	atomic.StoreUint32(s.rx.consumer, cons+n)
}

// reap takes the completed TX frames back.
func (s *socket) reap() {
	cons := *s.comp.consumer
	n := atomic.LoadUint32(s.comp.producer) - cons
	for i := range n {
		s.txFree = append(s.txFree, *s.comp.addr(cons + i))
	}
	if n > 0 {
		atomic.StoreUint32(s.comp.consumer, cons+n)
		s.txOutstanding -= n
	}
}

// txRoom is how many descriptors the TX ring can take now.
func (s *socket) txRoom() uint32 {
	return ringSize - (*s.tx.producer - atomic.LoadUint32(s.tx.consumer))
}

// errTXStuck is a kick after which frames are still in the TX ring.
var errTXStuck = errors.New("the kernel took not every frame from the TX ring in 64 kicks")

// kick makes the kernel send what is in the TX ring: in copy mode every
// sendto sends up to the budget, so it is repeated while frames are left
// (EAGAIN, EBUSY and ENOBUFS say the kernel could not take them all now);
// with zero copy only when the driver asks for a wakeup (the socket is
// bound with need_wakeup only then). It returns nil once the ring is
// empty (or the driver wants no kick), and otherwise the frames are still
// in the ring for a later kick.
func (s *socket) kick() error {
	if s.zeroCopy && !s.tx.needsWakeup() {
		return nil
	}
	for range 64 {
		switch e := s.sendto(s.fd); e {
		case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS:
			if s.txQueued() == 0 {
				return nil
			}
		default:
			return e
		}
	}
	return errTXStuck
}

// txQueued is how many descriptors wait in the TX ring for the kernel.
func (s *socket) txQueued() uint32 {
	return *s.tx.producer - atomic.LoadUint32(s.tx.consumer)
}

// statistics reads the socket's XDP_STATISTICS.
func (s *socket) statistics() (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	size := uint32(unsafe.Sizeof(st))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS, uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&size)), 0); e != 0 {
		return st, e
	}
	return st, nil
}

func (s *socket) close() {
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
	for _, r := range []*ring{&s.fill, &s.comp, &s.rx, &s.tx} {
		if r.mem != nil {
			unix.Munmap(r.mem)
			r.mem = nil
		}
	}
	if s.umem != nil {
		unix.Munmap(s.umem)
		s.umem = nil
	}
}
