package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/lab/netns"
)

// probeHeader is what every probe datagram starts with: the trial it belongs
// to (4 bytes), its sequence number (4) and when it was sent (8, Unix
// nanoseconds). The receiver takes the arrival time from the kernel
// (SO_TIMESTAMPNS, stamped when the packet reaches hostB's socket), so time
// the datagram waits for the receiving goroutine to be scheduled is not
// counted as path latency. Sender and receiver share this machine's clock.
const probeHeader = 16

const (
	probePort  = 9
	probeBatch = 64
	// drainQuiet is how long the receiver must hear nothing of a finished
	// trial before its count is final; drainMax bounds the wait at RFC 2544's
	// two seconds. On a busy machine packets can sit for a hundred
	// milliseconds and more in a starved softirq: a shorter wait would count
	// them as lost.
	drainQuiet = 200 * time.Millisecond
	drainMax   = 2 * time.Second
)

// Probe is a UDP load generator with timestamps: sender sockets opened in
// one namespace and receiver sockets in another, driven from this process.
// It offers a paced load of a frame-size mix and counts, per trial, what
// arrived and with what one-way delay.
//
// It must outrun the paths it measures, plain routing included, or a
// result would be its own limit: it sends from probeSockets sockets, each
// on its own goroutine (so the kernel's per-packet work on the way, which
// runs on the sending CPU, spreads over the CPUs), in sendmmsg batches of
// probeBatch (called directly, allocating nothing); the receiving sockets share the port (SO_REUSEPORT, one per
// sender flow) and read with recvmmsg directly, allocating nothing.
type Probe struct {
	senders   []*sender
	receivers []*receiver

	current atomic.Pointer[trialState]
	nextID  uint32
	done    chan struct{}
	wg      sync.WaitGroup
}

// sender is one sending socket and its batch.
type sender struct {
	conn *net.UDPConn
	pc   *ipv4.PacketConn
	msgs []ipv4.Message
	// spread, when set, are the (source, destination) pairs the probes
	// go round-robin between, each message carrying its own address and
	// IP_PKTINFO source (NewSpreadProbe).
	spread []spreadTarget
	next   int
	// direct is sendmmsg called on the socket directly, allocating
	// nothing (connected senders; spread ones go through pc): its
	// scratch, arguments and results.
	direct *directSend
}

// directSend is one connected sender's sendmmsg, called inside
// RawConn.Write so the poller waits when the socket buffer is full.
type directSend struct {
	rc    syscall.RawConn
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	n     int // messages to send
	sent  int
	errno syscall.Errno
	call  func(fd uintptr) bool
}

func newDirectSend(c *net.UDPConn, n int) (*directSend, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	d := &directSend{rc: rc, hdrs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n)}
	d.call = d.sendmmsg
	return d, nil
}

func (d *directSend) sendmmsg(fd uintptr) bool {
	r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&d.hdrs[0])), uintptr(d.n), unix.MSG_DONTWAIT, 0, 0)
	if errno == unix.EAGAIN {
		return false
	}
	d.sent, d.errno = int(r), errno
	if errno != 0 {
		d.sent = 0
	}
	return true
}

// write sends msgs' first buffers as datagrams, returning how many went.
func (d *directSend) write(msgs []ipv4.Message) (int, error) {
	for i := range msgs {
		b := msgs[i].Buffers[0]
		d.iovs[i].Base = &b[0]
		d.iovs[i].SetLen(len(b))
		d.hdrs[i].Hdr = unix.Msghdr{Iov: &d.iovs[i], Iovlen: 1}
		d.hdrs[i].Len = 0
	}
	d.n = len(msgs)
	if err := d.rc.Write(d.call); err != nil {
		return 0, err
	}
	if d.errno != 0 {
		return 0, d.errno
	}
	return d.sent, nil
}

// Target is one tunnel's ends for a spread probe.
type Target struct{ Src, Dst netip.Addr }

type spreadTarget struct {
	addr *net.UDPAddr
	oob  []byte
}

// receiver is one receiving socket and its recvmmsg scratch.
type receiver struct {
	conn  *net.UDPConn
	rc    syscall.RawConn
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	bufs  [][]byte
	oobs  [][]byte
	got   int
	errno syscall.Errno
	call  func(fd uintptr) bool
}

// probeSockets is how many sending (and receiving) sockets a probe uses.
func probeSockets() int { return max(2, runtime.GOMAXPROCS(0)) }

// trialState is what the receivers count for one trial. received is
// counted atomically; the latency histogram (latency trials only, at rates
// far below the maximum) under mu. A reader that takes mu after swapping
// the trial out and waiting for the receivers' batches in hand sees final
// numbers.
type trialState struct {
	id       uint32
	received atomic.Uint64
	last     atomic.Int64 // Unix ns of the last packet received
	inHand   sync.WaitGroup
	mu       sync.Mutex
	lat      *Latency
}

// TrialResult is one trial's outcome.
type TrialResult struct {
	Mix      string        `json:"mix"`
	Offered  float64       `json:"offered_pps"` // asked for; 0: as fast as possible
	Sent     uint64        `json:"sent"`
	Received uint64        `json:"received"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Latency  *Latency      `json:"-"`
}

// SentRate is the rate the sender achieved, in packets per second.
func (r TrialResult) SentRate() float64 { return float64(r.Sent) / r.Elapsed.Seconds() }

// Loss is the fraction of sent packets that did not arrive.
func (r TrialResult) Loss() float64 {
	if r.Sent == 0 {
		return 0
	}
	if r.Received >= r.Sent {
		return 0
	}
	return float64(r.Sent-r.Received) / float64(r.Sent)
}

// NewProbe opens the receivers on dst (a local address of to) and the
// senders in from, and starts receiving.
func NewProbe(from, to *netns.Namespace, dst netip.Addr) (*Probe, error) {
	p := &Probe{done: make(chan struct{})}
	raddr := &net.UDPAddr{IP: dst.AsSlice(), Port: probePort}
	n := probeSockets()
	fail := func(err error) (*Probe, error) {
		p.closeSockets()
		return nil, err
	}
	for range n {
		r, err := openReceiver(to, raddr)
		if err != nil {
			return fail(err)
		}
		p.receivers = append(p.receivers, r)
	}
	for range n {
		var c *net.UDPConn
		err := from.Do(func() error {
			var err error
			c, err = net.DialUDP("udp4", nil, raddr)
			return err
		})
		if err != nil {
			return fail(fmt.Errorf("open probe sender to %s in %s: %w", raddr, from.Short(), err))
		}
		if err := setBuffer(c, unix.SO_SNDBUFFORCE, 4<<20); err != nil {
			c.Close()
			return fail(fmt.Errorf("probe sender buffer: %w", err))
		}
		snd := &sender{conn: c, pc: ipv4.NewPacketConn(c), msgs: make([]ipv4.Message, probeBatch)}
		if snd.direct, err = newDirectSend(c, probeBatch); err != nil {
			c.Close()
			return fail(fmt.Errorf("probe sender: %w", err))
		}
		for i := range snd.msgs {
			snd.msgs[i].Buffers = [][]byte{make([]byte, MaxFrame)}
		}
		p.senders = append(p.senders, snd)
	}
	p.start()
	return p, nil
}

// NewSpreadProbe is NewProbe with the load spread round-robin over targets:
// each probe from its target's source to its destination (sources local to
// from, destinations to to), received on every address of to.
func NewSpreadProbe(from, to *netns.Namespace, targets []Target) (*Probe, error) {
	if len(targets) == 0 {
		return nil, errors.New("spread probe: no targets")
	}
	p := &Probe{done: make(chan struct{})}
	laddr := &net.UDPAddr{IP: net.IPv4zero, Port: probePort}
	fail := func(err error) (*Probe, error) {
		p.closeSockets()
		return nil, err
	}
	n := probeSockets()
	for range n {
		r, err := openReceiver(to, laddr)
		if err != nil {
			return fail(err)
		}
		p.receivers = append(p.receivers, r)
	}
	var spread []spreadTarget
	for _, t := range targets {
		cm := ipv4.ControlMessage{Src: t.Src.AsSlice()}
		spread = append(spread, spreadTarget{addr: &net.UDPAddr{IP: t.Dst.AsSlice(), Port: probePort}, oob: cm.Marshal()})
	}
	for i := range n {
		var c *net.UDPConn
		if err := from.Do(func() error {
			var err error
			c, err = net.ListenUDP("udp4", &net.UDPAddr{})
			return err
		}); err != nil {
			return fail(fmt.Errorf("open probe sender in %s: %w", from.Short(), err))
		}
		snd := &sender{conn: c, pc: ipv4.NewPacketConn(c), msgs: make([]ipv4.Message, probeBatch), spread: spread, next: i * len(spread) / n}
		for i := range snd.msgs {
			snd.msgs[i].Buffers = [][]byte{make([]byte, MaxFrame)}
		}
		p.senders = append(p.senders, snd)
	}
	p.start()
	return p, nil
}

// start runs the receivers.
func (p *Probe) start() {
	for _, r := range p.receivers {
		p.wg.Add(1)
		go p.receive(r)
	}
}

// openReceiver opens one of the receiving sockets sharing raddr's port.
func openReceiver(to *netns.Namespace, raddr *net.UDPAddr) (*receiver, error) {
	var c *net.UDPConn
	err := to.Do(func() error {
		lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
				return err
			}
			return serr
		}}
		pc, err := lc.ListenPacket(context.Background(), "udp4", raddr.String())
		if err != nil {
			return err
		}
		c = pc.(*net.UDPConn)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("open probe receiver on %s in %s: %w", raddr, to.Short(), err)
	}
	// A receiver that cannot keep up must not pass for a lossy tunnel: give
	// it a deep socket buffer (FORCE: above rmem_max, we are root).
	if err := setBuffer(c, unix.SO_RCVBUFFORCE, 16<<20); err != nil {
		c.Close()
		return nil, fmt.Errorf("probe receiver buffer: %w", err)
	}
	if err := setBuffer(c, unix.SO_TIMESTAMPNS, 1); err != nil {
		c.Close()
		return nil, fmt.Errorf("probe receiver timestamps: %w", err)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, err
	}
	r := &receiver{conn: c, rc: rc, hdrs: make([]unix.Mmsghdr, probeBatch), iovs: make([]unix.Iovec, probeBatch)}
	for range probeBatch {
		r.bufs = append(r.bufs, make([]byte, 2048))
		r.oobs = append(r.oobs, make([]byte, 64))
	}
	r.call = r.recvmmsg
	return r, nil
}

// recvmmsg reads a batch without blocking; it reports false to have the
// poller wait when nothing is there.
func (r *receiver) recvmmsg(fd uintptr) bool {
	for i := range r.hdrs {
		r.iovs[i].Base = &r.bufs[i][0]
		r.iovs[i].SetLen(len(r.bufs[i]))
		h := &r.hdrs[i]
		h.Hdr = unix.Msghdr{Iov: &r.iovs[i], Iovlen: 1, Control: &r.oobs[i][0]}
		h.Hdr.SetControllen(len(r.oobs[i]))
		h.Len = 0
	}
	n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(len(r.hdrs)), unix.MSG_DONTWAIT, 0, 0)
	if errno == unix.EAGAIN || errno == unix.EINTR {
		return false
	}
	r.got, r.errno = int(n), errno
	return true
}

func setBuffer(c *net.UDPConn, opt, size int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, size) }); err != nil {
		return err
	}
	return serr
}

func (p *Probe) closeSockets() error {
	var errs []error
	for _, s := range p.senders {
		errs = append(errs, s.conn.Close())
	}
	for _, r := range p.receivers {
		errs = append(errs, r.conn.Close())
	}
	return errors.Join(errs...)
}

// Close stops the receivers and closes every socket.
func (p *Probe) Close() error {
	close(p.done)
	err := p.closeSockets()
	p.wg.Wait()
	return err
}

func (p *Probe) receive(r *receiver) {
	defer p.wg.Done()
	for {
		select {
		case <-p.done:
			return
		default:
		}
		r.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if err := r.rc.Read(r.call); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			return // closed
		}
		if r.errno != 0 {
			if r.errno == unix.EINTR {
				continue
			}
			return
		}
		t := p.current.Load()
		if t == nil {
			continue
		}
		t.inHand.Add(1)
		if p.current.Load() != t { // swapped out meanwhile: not counted
			t.inHand.Done()
			continue
		}
		now := time.Now().UnixNano()
		var n uint64
		for i := range r.got {
			b := r.bufs[i][:r.hdrs[i].Len]
			if len(b) < probeHeader || binary.BigEndian.Uint32(b) != t.id {
				continue // a straggler of an earlier trial, or not ours
			}
			n++
			if t.lat != nil {
				at, ok := kernelTimestamp(r.oobs[i][:r.hdrs[i].Hdr.Controllen])
				if !ok {
					at = now
				}
				t.mu.Lock()
				t.lat.Record(time.Duration(at - int64(binary.BigEndian.Uint64(b[8:]))))
				t.mu.Unlock()
			}
		}
		if n > 0 {
			t.received.Add(n)
			t.last.Store(time.Now().UnixNano())
		}
		t.inHand.Done()
	}
}

// Run offers mix at rate packets per second (0: as fast as the senders go)
// for d, waits for the stragglers, and counts. With latency set it records
// every delivered packet's one-way delay.
func (p *Probe) Run(ctx context.Context, mix Mix, rate float64, d time.Duration, latency bool) (TrialResult, error) {
	p.nextID++
	t := &trialState{id: p.nextID}
	if latency {
		t.lat = NewLatency()
	}
	p.current.Store(t)
	res := TrialResult{Mix: mix.Name, Offered: rate}
	sent, elapsed, err := p.offer(ctx, t.id, mix, rate, d)
	res.Sent, res.Elapsed = sent, elapsed
	// Wait until the receivers have been quiet for a while: whatever is
	// still in flight after that counts as lost.
	drainStart := time.Now()
	t.last.Store(drainStart.UnixNano())
	for time.Since(drainStart) < drainMax && ctx.Err() == nil {
		time.Sleep(drainQuiet / 2)
		if time.Since(time.Unix(0, t.last.Load())) >= drainQuiet {
			break
		}
	}
	p.current.Store(nil)
	t.inHand.Wait()
	res.Received = t.received.Load()
	t.mu.Lock()
	res.Latency = t.lat
	t.mu.Unlock()
	return res, err
}

// offer sends for d from every sender at once, each its share of rate
// (every sender as fast as it goes when rate is 0), and returns what went
// out and how long it took.
func (p *Probe) offer(ctx context.Context, id uint32, mix Mix, rate float64, d time.Duration) (uint64, time.Duration, error) {
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	sent := make([]uint64, len(p.senders))
	errs := make([]error, len(p.senders))
	for i, s := range p.senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each sender starts elsewhere in the mix and numbers its own
			// packets; together they send the mix's proportions.
			sent[i], errs[i] = s.offer(ctx, id, mix, rate/float64(len(p.senders)), start, deadline, i*len(mix.Frames)/len(p.senders), uint32(i)<<28)
		}()
	}
	wg.Wait()
	var total uint64
	for _, n := range sent {
		total += n
	}
	return total, time.Since(start), errors.Join(errs...)
}

// offer is one sender's share: it paces by a credit of packets due — each
// round sends what the elapsed time allows (at most a batch), then sleeps
// until the next packet is due — so bursts are at most one batch, and
// short at low rates.
func (s *sender) offer(ctx context.Context, id uint32, mix Mix, rate float64, start, deadline time.Time, k int, seq uint32) (uint64, error) {
	var sent uint64
	for round := 0; ; round++ {
		now := time.Now()
		if !now.Before(deadline) {
			break
		}
		if round%64 == 0 && ctx.Err() != nil {
			return sent, ctx.Err()
		}
		n := probeBatch
		if rate > 0 {
			due := int64(rate*now.Sub(start).Seconds()) + 1 - int64(sent)
			if due <= 0 {
				next := start.Add(time.Duration(float64(sent) / rate * float64(time.Second)))
				time.Sleep(min(next.Sub(now), deadline.Sub(now)))
				continue
			}
			n = int(min(due, probeBatch))
		}
		ts := uint64(now.UnixNano())
		for i := range n {
			frame := mix.Frames[k]
			k = (k + 1) % len(mix.Frames)
			b := s.msgs[i].Buffers[0][:frame-ethOverhead-ipv4UDPHdr]
			binary.BigEndian.PutUint32(b, id)
			binary.BigEndian.PutUint32(b[4:], seq)
			binary.BigEndian.PutUint64(b[8:], ts)
			s.msgs[i].Buffers[0] = b
			if s.spread != nil {
				t := &s.spread[s.next]
				s.next = (s.next + 1) % len(s.spread)
				s.msgs[i].Addr, s.msgs[i].OOB = t.addr, t.oob
			}
			seq++
		}
		var w int
		var err error
		if s.direct != nil {
			w, err = s.direct.write(s.msgs[:n])
		} else {
			w, err = s.pc.WriteBatch(s.msgs[:n], 0)
		}
		for i := range n {
			s.msgs[i].Buffers[0] = s.msgs[i].Buffers[0][:cap(s.msgs[i].Buffers[0])]
		}
		if w > 0 {
			sent += uint64(w)
		}
		if err != nil && !errors.Is(err, syscall.ENOBUFS) && !errors.Is(err, syscall.EAGAIN) {
			// A refused datagram (ICMP unreachable from a dead path) is a
			// loss for this trial, not an end to it.
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return sent, fmt.Errorf("send probes: %w", err)
			}
		}
		if w < n {
			// The mix position ran ahead of what went out; step it back so
			// the mix stays exact.
			k = ((k-(n-max(w, 0)))%len(mix.Frames) + len(mix.Frames)) % len(mix.Frames)
			seq -= uint32(n - max(w, 0))
			if s.spread != nil {
				s.next = ((s.next-(n-max(w, 0)))%len(s.spread) + len(s.spread)) % len(s.spread)
			}
		}
	}
	return sent, nil
}

// kernelTimestamp finds SCM_TIMESTAMPNS in a control message buffer and
// returns it in Unix nanoseconds; it parses in place, allocating nothing.
func kernelTimestamp(oob []byte) (int64, bool) {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		if h.Len < unix.SizeofCmsghdr || int(h.Len) > len(oob) {
			return 0, false
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && int(h.Len) >= unix.CmsgLen(16) {
			data := oob[unix.CmsgLen(0):]
			sec := int64(binary.NativeEndian.Uint64(data))
			nsec := int64(binary.NativeEndian.Uint64(data[8:]))
			return sec*1e9 + nsec, true
		}
		oob = oob[min(unix.CmsgSpace(int(h.Len)-unix.CmsgLen(0)), len(oob)):]
	}
	return 0, false
}
