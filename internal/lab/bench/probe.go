package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
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

// Probe is a UDP load generator with timestamps: a sender socket opened in
// one namespace and a receiver socket in another, driven from this process.
// It offers a paced load of a frame-size mix and counts, per trial, what
// arrived and with what one-way delay.
type Probe struct {
	send  *ipv4.PacketConn
	sconn *net.UDPConn
	rconn *net.UDPConn
	recv  *ipv4.PacketConn

	// spread, when set, are the (source, destination) pairs the probes
	// go round-robin between, each message carrying its own address and
	// IP_PKTINFO source (NewSpreadProbe).
	spread []spreadTarget
	next   int

	current atomic.Pointer[trialState]
	nextID  uint32
	msgs    []ipv4.Message
	done    chan struct{}
	wg      sync.WaitGroup
}

// trialState is what the receiver counts for one trial. The receiver holds
// mu while it handles a batch, so a reader that takes mu after swapping the
// trial out sees final numbers.
type trialState struct {
	id       uint32
	mu       sync.Mutex
	received uint64
	last     time.Time
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

// NewProbe opens the receiver on dst (a local address of to) and the sender
// in from, and starts receiving.
func NewProbe(from, to *netns.Namespace, dst netip.Addr) (*Probe, error) {
	p := &Probe{done: make(chan struct{})}
	raddr := &net.UDPAddr{IP: dst.AsSlice(), Port: probePort}
	err := to.Do(func() error {
		c, err := net.ListenUDP("udp4", raddr)
		if err != nil {
			return err
		}
		p.rconn = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("open probe receiver on %s in %s: %w", raddr, to.Short(), err)
	}
	// A receiver that cannot keep up must not pass for a lossy tunnel: give
	// it a deep socket buffer (FORCE: above rmem_max, we are root).
	if err := setBuffer(p.rconn, unix.SO_RCVBUFFORCE, 16<<20); err != nil {
		p.rconn.Close()
		return nil, fmt.Errorf("probe receiver buffer: %w", err)
	}
	if err := setBuffer(p.rconn, unix.SO_TIMESTAMPNS, 1); err != nil {
		p.rconn.Close()
		return nil, fmt.Errorf("probe receiver timestamps: %w", err)
	}
	err = from.Do(func() error {
		c, err := net.DialUDP("udp4", nil, raddr)
		if err != nil {
			return err
		}
		p.sconn = c
		return nil
	})
	if err != nil {
		p.rconn.Close()
		return nil, fmt.Errorf("open probe sender to %s in %s: %w", raddr, from.Short(), err)
	}
	p.send, p.recv = ipv4.NewPacketConn(p.sconn), ipv4.NewPacketConn(p.rconn)
	p.msgs = make([]ipv4.Message, probeBatch)
	for i := range p.msgs {
		p.msgs[i].Buffers = [][]byte{make([]byte, MaxFrame)}
	}
	p.wg.Add(1)
	go p.receive()
	return p, nil
}

// Target is one tunnel's ends for a spread probe.
type Target struct{ Src, Dst netip.Addr }

type spreadTarget struct {
	addr *net.UDPAddr
	oob  []byte
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
	if err := to.Do(func() error {
		var err error
		p.rconn, err = net.ListenUDP("udp4", laddr)
		return err
	}); err != nil {
		return nil, fmt.Errorf("open probe receiver on %s in %s: %w", laddr, to.Short(), err)
	}
	if err := setBuffer(p.rconn, unix.SO_RCVBUFFORCE, 16<<20); err != nil {
		p.rconn.Close()
		return nil, fmt.Errorf("probe receiver buffer: %w", err)
	}
	if err := setBuffer(p.rconn, unix.SO_TIMESTAMPNS, 1); err != nil {
		p.rconn.Close()
		return nil, fmt.Errorf("probe receiver timestamps: %w", err)
	}
	if err := from.Do(func() error {
		var err error
		p.sconn, err = net.ListenUDP("udp4", &net.UDPAddr{})
		return err
	}); err != nil {
		p.rconn.Close()
		return nil, fmt.Errorf("open probe sender in %s: %w", from.Short(), err)
	}
	for _, t := range targets {
		cm := ipv4.ControlMessage{Src: t.Src.AsSlice()}
		p.spread = append(p.spread, spreadTarget{addr: &net.UDPAddr{IP: t.Dst.AsSlice(), Port: probePort}, oob: cm.Marshal()})
	}
	p.send, p.recv = ipv4.NewPacketConn(p.sconn), ipv4.NewPacketConn(p.rconn)
	p.msgs = make([]ipv4.Message, probeBatch)
	for i := range p.msgs {
		p.msgs[i].Buffers = [][]byte{make([]byte, MaxFrame)}
	}
	p.wg.Add(1)
	go p.receive()
	return p, nil
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

// Close stops the receiver and closes both sockets.
func (p *Probe) Close() error {
	close(p.done)
	err := errors.Join(p.sconn.Close(), p.rconn.Close())
	p.wg.Wait()
	return err
}

func (p *Probe) receive() {
	defer p.wg.Done()
	msgs := make([]ipv4.Message, probeBatch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 2048)}
		msgs[i].OOB = make([]byte, 64)
	}
	for {
		select {
		case <-p.done:
			return
		default:
		}
		p.rconn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := p.recv.ReadBatch(msgs, 0)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, syscall.EINTR) {
				continue
			}
			return // closed
		}
		now := time.Now().UnixNano()
		t := p.current.Load()
		if t == nil {
			continue
		}
		t.mu.Lock()
		for _, m := range msgs[:n] {
			b := m.Buffers[0][:m.N]
			if len(b) < probeHeader || binary.BigEndian.Uint32(b) != t.id {
				continue // a straggler of an earlier trial, or not ours
			}
			t.received++
			if t.lat != nil {
				at, ok := kernelTimestamp(m.OOB[:m.NN])
				if !ok {
					at = now
				}
				t.lat.Record(time.Duration(at - int64(binary.BigEndian.Uint64(b[8:]))))
			}
		}
		t.last = time.Now()
		t.mu.Unlock()
	}
}

// Run offers mix at rate packets per second (0: as fast as the sender goes)
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
	// Wait until the receiver has been quiet for a while: whatever is still
	// in flight after that counts as lost.
	drainStart := time.Now()
	for time.Since(drainStart) < drainMax && ctx.Err() == nil {
		time.Sleep(drainQuiet / 2)
		t.mu.Lock()
		quiet := time.Since(t.last) >= drainQuiet
		t.mu.Unlock()
		if quiet {
			break
		}
	}
	p.current.Store(nil)
	t.mu.Lock()
	res.Received, res.Latency = t.received, t.lat
	t.mu.Unlock()
	return res, err
}

// offer sends for d, pacing by a credit of packets due: each round sends
// what the elapsed time allows (at most a batch), then sleeps until the next
// packet is due. Bursts are thus at most one batch, and short at low rates.
func (p *Probe) offer(ctx context.Context, id uint32, mix Mix, rate float64, d time.Duration) (uint64, time.Duration, error) {
	var sent uint64
	var seq uint32
	start := time.Now()
	deadline := start.Add(d)
	k := 0 // position in the mix
	for {
		now := time.Now()
		if !now.Before(deadline) {
			break
		}
		if ctx.Err() != nil {
			return sent, time.Since(start), ctx.Err()
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
		ts := uint64(time.Now().UnixNano())
		for i := range n {
			frame := mix.Frames[k]
			k = (k + 1) % len(mix.Frames)
			b := p.msgs[i].Buffers[0][:frame-ethOverhead-ipv4UDPHdr]
			binary.BigEndian.PutUint32(b, id)
			binary.BigEndian.PutUint32(b[4:], seq)
			binary.BigEndian.PutUint64(b[8:], ts)
			p.msgs[i].Buffers[0] = b
			if p.spread != nil {
				t := &p.spread[p.next]
				p.next = (p.next + 1) % len(p.spread)
				p.msgs[i].Addr, p.msgs[i].OOB = t.addr, t.oob
			}
			seq++
		}
		w, err := p.send.WriteBatch(p.msgs[:n], 0)
		for i := range n {
			p.msgs[i].Buffers[0] = p.msgs[i].Buffers[0][:cap(p.msgs[i].Buffers[0])]
		}
		if w > 0 {
			sent += uint64(w)
		}
		if err != nil && !errors.Is(err, syscall.ENOBUFS) && !errors.Is(err, syscall.EAGAIN) {
			// A refused datagram (ICMP unreachable from a dead path) is a
			// loss for this trial, not an end to it.
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return sent, time.Since(start), fmt.Errorf("send probes: %w", err)
			}
		}
		if w < n {
			// The mix position ran ahead of what went out; step it back so
			// the mix stays exact.
			k = ((k-(n-max(w, 0)))%len(mix.Frames) + len(mix.Frames)) % len(mix.Frames)
			seq -= uint32(n - max(w, 0))
			if p.spread != nil {
				p.next = ((p.next-(n-max(w, 0)))%len(p.spread) + len(p.spread)) % len(p.spread)
			}
		}
	}
	return sent, time.Since(start), nil
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
