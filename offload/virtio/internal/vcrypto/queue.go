package vcrypto

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/espgw/espgw/offload/virtio/internal/vfio"
)

// Descriptor flags (§2.7.5).
const (
	descNext  = 1
	descWrite = 2
)

// availNoInterrupt asks the device not to interrupt: completions are polled.
const availNoInterrupt = 1

// queue is a split virtqueue (§2.7) whose descriptors are paired: slot i
// owns descriptors 2i (device-readable: the request) and 2i+1
// (device-writable: the result and the status byte). Each slot has a fixed
// buffer in DMA memory, so a request is built by writing into its slot and
// posting two descriptors that never change shape — the ring of fixed
// command records that ubsec's MCRs and DPDK's crypto_virtio use.
//
// A queue is used by one goroutine at a time.
type queue struct {
	index    int // the device's queue number
	size     int // descriptors
	mem      *vfio.DMA
	descOff  int
	availOff int
	usedOff  int
	slotOff  int
	slotSize int
	outMax   int // bytes of a slot's device-readable part
	doorbell int

	availIdx uint16 // next avail ring index the driver fills
	usedIdx  uint16 // next used ring index the driver reads
}

func align(n, a int) int { return (n + a - 1) &^ (a - 1) }

// newQueue lays out a queue of size descriptors and size/2 slots of
// outMax readable and inMax writable bytes in one DMA allocation.
func newQueue(dev *vfio.Device, index, size, outMax, inMax int) (*queue, error) {
	q := &queue{index: index, size: size, outMax: align(outMax, 64)}
	q.descOff = 0
	q.availOff = 16 * size
	q.usedOff = align(q.availOff+6+2*size, 4096)
	q.slotOff = align(q.usedOff+6+8*size, 4096)
	q.slotSize = align(q.outMax+inMax, 64)
	mem, err := dev.AllocDMA(q.slotOff + q.slotSize*size/2)
	if err != nil {
		return nil, err
	}
	q.mem = mem
	for i := 0; i < size/2; i++ {
		base := q.slotOff + i*q.slotSize
		q.setDesc(2*i, mem.Addr(base), uint32(q.outMax), descNext, uint16(2*i+1))
		q.setDesc(2*i+1, mem.Addr(base+q.outMax), uint32(inMax), descWrite, 0)
	}
	q.storeAvail(0)
	return q, nil
}

func (q *queue) slots() int { return q.size / 2 }

// out and in are slot i's device-readable and device-writable buffers.
func (q *queue) out(i int) []byte {
	base := q.slotOff + i*q.slotSize
	return q.mem.Mem[base : base+q.outMax]
}

func (q *queue) in(i int) []byte {
	base := q.slotOff + i*q.slotSize + q.outMax
	return q.mem.Mem[base : base+q.slotSize-q.outMax]
}

func (q *queue) setDesc(d int, addr uint64, n uint32, flags, next uint16) {
	b := q.mem.Mem[q.descOff+16*d:]
	binary.LittleEndian.PutUint64(b[0:], addr)
	binary.LittleEndian.PutUint32(b[8:], n)
	binary.LittleEndian.PutUint16(b[12:], flags)
	binary.LittleEndian.PutUint16(b[14:], next)
}

// setLens sets how much of slot i the device reads and may write for the
// next request.
func (q *queue) setLens(i, outLen, inLen int) {
	binary.LittleEndian.PutUint32(q.mem.Mem[q.descOff+16*(2*i)+8:], uint32(outLen))
	binary.LittleEndian.PutUint32(q.mem.Mem[q.descOff+16*(2*i+1)+8:], uint32(inLen))
}

// post puts slot i on the avail ring; the device sees it after publish.
func (q *queue) post(i int) {
	off := q.availOff + 4 + 2*int(q.availIdx%uint16(q.size))
	binary.LittleEndian.PutUint16(q.mem.Mem[off:], uint16(2*i))
	q.availIdx++
}

// publish makes every posted slot visible to the device. The atomic store
// orders the descriptor and ring writes before it (amd64 keeps stores in
// order; the atomic keeps the compiler from moving them).
func (q *queue) publish() { q.storeAvail(q.availIdx) }

func (q *queue) storeAvail(idx uint16) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&q.mem.Mem[q.availOff])), uint32(idx)<<16|availNoInterrupt)
}

// deviceUsed is the used ring's index as the device last wrote it.
func (q *queue) deviceUsed() uint16 {
	return uint16(atomic.LoadUint32((*uint32)(unsafe.Pointer(&q.mem.Mem[q.usedOff]))) >> 16)
}

// reap calls done for every slot the device completed since the last reap,
// in the order the device completed them, and returns how many.
func (q *queue) reap(done func(slot int, written uint32)) int {
	end := q.deviceUsed()
	n := 0
	for ; q.usedIdx != end; q.usedIdx++ {
		e := q.mem.Mem[q.usedOff+4+8*int(q.usedIdx%uint16(q.size)):]
		id := binary.LittleEndian.Uint32(e[0:])
		written := binary.LittleEndian.Uint32(e[4:])
		done(int(id/2), written)
		n++
	}
	return n
}
