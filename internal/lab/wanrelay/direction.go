package wanrelay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/impair"
)

// batchSize is how many frames one recvmmsg/sendmmsg moves at most.
const batchSize = 32

// direction forwards the frames read on one link to the other through its
// impairment stage. Its goroutine owns everything but the counters and the
// stage, which Counters reads under mu.
type direction struct {
	from, to *link
	pcap     *capture

	mu     sync.Mutex
	stage  *impair.Stage
	router *router // Route mode only
	c      Direction
	emitFn func(now time.Time, frame []byte, v verdict) // routedNow, made once

	rx, tx *batch
	seg    []byte // one datagram cut from a GSO super-packet

	// State of the read and write callbacks, made once so a call to
	// RawConn.Read or Write allocates nothing: a batch read, a batch
	// written (flush) and one frame written (writeOne).
	readFn, writeFn, oneFn func(fd uintptr) bool
	rxN                    int
	rxErr                  error
	txFrom, txTo           int
	txN                    int
	txErr                  error
	one                    []byte
	oneErr                 error

	// The MACs of the frame being pushed, as it arrived (routing rewrites
	// them), for an ICMP error the stage sends back (sendBack).
	macs [12]byte
	back []byte
}

func newDirection(from, to *link, st *impair.Stage, size int, pcap *capture) *direction {
	d := &direction{from: from, to: to, pcap: pcap, stage: st,
		rx: newBatch(batchSize, maxFrame), tx: newBatch(batchSize, vnetHdrLen+size),
		seg: make([]byte, size)}
	d.c.From, d.c.To = from.name, to.name
	d.emitFn = d.routedNow
	d.readFn = func(fd uintptr) bool {
		d.rxN, d.rxErr = d.rx.recv(int(fd))
		return d.rxErr != unix.EAGAIN
	}
	d.back = make([]byte, vnetHdrLen+size)
	d.writeFn = func(fd uintptr) bool {
		d.txN, d.txErr = d.tx.send(int(fd), d.txFrom, d.txTo)
		return d.txErr != unix.EAGAIN
	}
	d.oneFn = func(fd uintptr) bool {
		_, d.oneErr = unix.Write(int(fd), d.one)
		return d.oneErr != unix.EAGAIN
	}
	return d
}

// writeOne writes b (virtio-net header and frame) to l.
func (d *direction) writeOne(l *link, b []byte) error {
	d.one = b
	err := l.raw.Write(d.oneFn)
	d.one = nil
	if err == nil {
		err = d.oneErr
	}
	return err
}

func (d *direction) counters() Direction {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.c.RxKernelDrops += d.from.kernelDrops()
	c := d.c
	c.Impair = d.stage.Counters()
	c.InFlight, c.IKEInFlight = d.stage.InFlight(), d.stage.IKEInFlight()
	if d.router != nil {
		c.NeighborWaiting = len(d.router.pend)
	}
	return c
}

func (d *direction) run(ctx context.Context) error {
	for {
		d.mu.Lock()
		now := time.Now()
		if d.router != nil {
			d.router.retry(now, d.emitFn)
		}
		err := d.flush(now)
		next, timed := d.stage.Next()
		if d.router != nil && !d.router.retryAt.IsZero() && (!timed || d.router.retryAt.Before(next)) {
			next, timed = d.router.retryAt, true
		}
		d.mu.Unlock()
		if err != nil {
			return err
		}
		if !timed {
			next = time.Time{} // no deadline
		}
		if err := d.from.file.SetReadDeadline(next); err != nil {
			return fmt.Errorf("relay %s: %w", d.from.name, err)
		}
		// After setting the deadline: Run's stop sets a past one, so a stop
		// either is seen here or wakes the read below.
		if ctx.Err() != nil {
			return nil
		}
		err = d.from.raw.Read(d.readFn)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err == nil {
			err = d.rxErr
		}
		if err != nil {
			return fmt.Errorf("relay: read from %s: %w", d.from.name, err)
		}
		d.mu.Lock()
		now = time.Now()
		for i := 0; i < d.rxN; i++ {
			d.ingest(now, i)
		}
		d.mu.Unlock()
	}
}

// ingest hands received frame i to the stage (or straight on, for a GSO
// frame the stage must not see whole).
func (d *direction) ingest(now time.Time, i int) {
	m := &d.rx.msgs[i]
	d.c.RxFrames++
	if m.Hdr.Flags&unix.MSG_TRUNC != 0 {
		d.c.RxTruncated++
		return
	}
	buf := d.rx.bufs[i][:m.Len]
	if len(buf) < vnetHdrLen+14 {
		d.c.RxMalformed++
		return
	}
	h := decodeVnetHdr(buf)
	frame := buf[vnetHdrLen:]
	d.c.RxBytes += uint64(len(frame))
	if h.gsoType != unix.VIRTIO_NET_HDR_GSO_NONE {
		if h.gsoType&^unix.VIRTIO_NET_HDR_GSO_ECN == unix.VIRTIO_NET_HDR_GSO_UDP_L4 && d.stage.Matches(frame) {
			d.segment(now, h, frame)
			return
		}
		if d.router != nil {
			if v := d.router.route(frame); v != forward { // a GSO frame does not wait for a neighbour
				d.routedNow(now, frame, v)
				return
			}
		}
		d.c.GSOPassed++
		d.pass(now, buf)
		return
	}
	if h.flags&unix.VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 {
		if !completeChecksum(frame, int(h.csumStart), int(h.csumOffset)) {
			d.c.RxMalformed++
			return
		}
		d.c.ChecksumsCompleted++
	}
	d.push(now, frame)
}

// push routes the frame in Route mode and hands it to the stage.
func (d *direction) push(now time.Time, frame []byte) {
	copy(d.macs[:], frame)
	defer d.sendBack()
	if d.router == nil {
		d.stage.Push(now, frame)
		return
	}
	if len(d.router.pend) > 0 { // frames wait behind the ones waiting for a neighbour
		d.routed(now, frame, pending)
		return
	}
	d.routed(now, frame, d.router.route(frame))
}

// routed acts on a routing verdict, counting every frame not forwarded.
func (d *direction) routed(now time.Time, frame []byte, v verdict) {
	switch v {
	case forward:
		d.stage.Push(now, frame)
	case notRouted:
		d.c.NotRouted++
	case ttlExpired:
		d.c.TTLExpired++
	case noRoute:
		d.c.NoRoute++
	case pending:
		if d.router.hold(now, frame) {
			d.c.NeighborWaits++
		} else {
			d.c.NeighborOverflow++
		}
	}
}

// routedNow acts on a verdict for a frame that may not wait for its next
// hop any longer: pending counts it unresolved.
func (d *direction) routedNow(now time.Time, frame []byte, v verdict) {
	if v == pending {
		d.c.NeighborUnresolved++
		return
	}
	d.routed(now, frame, v)
}

// sendBack sends the stage's ICMP errors about the frame just pushed out
// of the port it came in on, addressed to the MAC it came from.
func (d *direction) sendBack() {
	for p := d.stage.PopBack(); p != nil; p = d.stage.PopBack() {
		b := d.back[:vnetHdrLen+len(p.Bytes())]
		clear(b[:vnetHdrLen])
		f := b[vnetHdrLen:]
		copy(f, p.Bytes())
		copy(f[0:6], d.macs[6:12]) // to the sender
		copy(f[6:12], d.macs[0:6]) // from where it was sent to
		d.stage.Release(p)
		if err := d.writeOne(d.from, b); err != nil {
			d.c.BackErrors++
			continue
		}
		d.c.BackFrames++
		if d.pcap != nil {
			d.pcap.write(time.Now(), f)
		}
	}
}

// completeChecksum does what the NIC would have: sums the frame from start
// (where the sender's kernel left the pseudo-header sum in the field at
// start+off) and stores the result.
func completeChecksum(frame []byte, start, off int) bool {
	if start+off+2 > len(frame) {
		return false
	}
	c := header.Finish(header.Add(0, frame[start:]))
	if c == 0 && off == header.OffsetUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(frame[start+off:], c)
	return true
}

// segment cuts a UDP GSO super-packet into the datagrams the sender's kernel
// would have sent (as udp4_ufo/__udp_gso_segment do: the same headers, IPv4
// IDs counting up, lengths and checksums per datagram) and pushes each.
func (d *direction) segment(now time.Time, h vnetHdr, frame []byte) {
	udp, size := int(h.csumStart), int(h.gsoSize)
	ip, ok := header.EthernetIP(frame)
	if !ok || udp < ip+20 || udp+8 > len(frame) || size == 0 || udp+8+size > len(d.seg) {
		d.c.RxMalformed++
		return
	}
	payload := frame[udp+8:]
	d.c.GSOSegmented++
	for n := 0; len(payload) > 0; n++ {
		chunk := payload[:min(size, len(payload))]
		payload = payload[len(chunk):]
		seg := d.seg[:udp+8+len(chunk)]
		copy(seg, frame[:udp+8])
		copy(seg[udp+8:], chunk)
		if header.Version(seg[ip:]) == 4 {
			header.SetIPv4ID(seg[ip:], header.IPv4ID(frame[ip:])+uint16(n))
		}
		header.SetLength(seg[ip:], len(seg)-ip)
		src, dst := header.AddrBytes(seg[ip:])
		binary.BigEndian.PutUint16(seg[udp+4:], uint16(8+len(chunk)))
		header.L4(seg[udp:], src, dst, 17, header.OffsetUDP)
		d.c.GSOSegments++
		d.push(now, seg)
	}
}

// pass sends buf (virtio-net header and frame) as it came.
func (d *direction) pass(now time.Time, buf []byte) {
	d.sent(now, buf[vnetHdrLen:], d.writeOne(d.to, buf))
}

func (d *direction) sent(now time.Time, frame []byte, err error) {
	if err != nil {
		d.c.TxErrors++
		d.c.LastTxError = fmt.Sprintf("send %d bytes on %s: %v", len(frame), d.to.name, err)
		return
	}
	d.c.TxFrames++
	d.c.TxBytes += uint64(len(frame))
	if d.pcap != nil {
		d.pcap.write(now, frame)
	}
}

// flush sends every packet the stage has due at now, a batch at a time.
func (d *direction) flush(now time.Time) error {
	for {
		k := 0
		for ; k < batchSize; k++ {
			p := d.stage.Pop(now)
			if p == nil {
				break
			}
			b := d.tx.bufs[k]
			clear(b[:vnetHdrLen]) // plain frame: checksums done, no GSO
			n := copy(b[vnetHdrLen:], p.Bytes())
			d.tx.setLen(k, vnetHdrLen+n)
			d.stage.Release(p)
		}
		for from := 0; from < k; {
			d.txFrom, d.txTo = from, k
			err := d.to.raw.Write(d.writeFn)
			if err != nil {
				return fmt.Errorf("relay: write to %s: %w", d.to.name, err)
			}
			if d.txErr != nil { // the first frame failed: count it, go on
				d.sent(now, d.tx.bufs[from][vnetHdrLen:int(d.tx.iovs[from].Len)], d.txErr)
				from++
				continue
			}
			for i := from; i < from+d.txN; i++ {
				d.sent(now, d.tx.bufs[i][vnetHdrLen:int(d.tx.iovs[i].Len)], nil)
			}
			from += d.txN
		}
		if k < batchSize {
			return nil
		}
	}
}
