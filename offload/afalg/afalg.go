// Package afalg is the offload engine on the Linux kernel's crypto API
// (AF_ALG).
//
// It is the offload engine that hands ESP's crypto to the Linux kernel's
// crypto API through AF_ALG sockets: whatever driver the kernel has for a
// suite — a card's (QAT, CCP, CAAM, virtio-crypto) or the kernel's software
// — or the one a user names.
//
// Every session is one socket bound to the suite's AEAD, as the kernel's own
// ESP asks for it (authenc(hmac(H),C), authencesn(…) with ESN,
// rfc4106(gcm(aes)), rfc7539esp(chacha20,poly1305), rfc4543(gcm(aes)),
// rfc4309(ccm(aes))), or to the bare cipher for a cipher-only session, with
// N+1 operation sockets accepted from it. The kernel takes one request at
// a time per operation socket (Linux 6.1.76 and later), so the engine runs
// N worker goroutines, worker i driving operation socket i of every
// session: a batch is split into up to N chunks, one per worker, and N
// requests are in flight at once. Socket N+1 is the submitter's own: when
// nothing is in flight, a batch of one or two ops runs on the goroutine
// that submits it, with no worker to wake and none to wake it back (the
// case of `openssl speed`'s one buffer at a time), and its requests wait in
// the kernel without a hand-off of the Go scheduler's (kcapi.Op.DoDirect:
// the hand-off doubled a request's cost under QEMU). The workers' requests
// do tell the scheduler, so that one worker's wait lets the others post
// theirs. Each op is one request worked in place: the same memory is sent
// (sendmsg) and received into (recvmsg), through iovecs of the op's
// ranges — Op.AAD and the IV as the associated data, the kernel's own ESP
// layout (with ESN the high sequence bits after the SPI, where authencesn
// and rfc4106 want them), then Cipher and the ICV — with the IV and the
// operation in control messages.
//
// Batches complete in the order they were submitted — whichever goroutine
// finishes the batch at the head of the queue delivers it and any done
// behind it — and a full queue blocks Submit until there is room or its
// context ends. A bad ICV is BadICV and nothing decrypted
// leaves the engine: the kernel's authenc checks the tag before it
// decrypts, but its generic GCM decrypts first (and a card may do either),
// so an open whose tag fails puts the ciphertext back (the AEADs: zeroes
// the payload, as the cpu engine's AEADs do; aes-gmac's is in clear).
package afalg

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/afalg/internal/kcapi"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// Name is the engine's name in the catalog; "afalg:DRIVER" binds a driver.
const Name = "afalg"

// ErrNoAFALG is wrapped by New's error on a kernel without AF_ALG.
var ErrNoAFALG = kcapi.ErrNoAFALG

// Defaults of Options.
const (
	DefaultSockets    = 4
	DefaultQueueDepth = 256
)

// Options tune the engine.
type Options struct {
	// Driver is the kernel driver for the cipher (virtio_crypto_aes_cbc,
	// a card's, cbc(aes-generic), …) or a whole AEAD's driver name; empty
	// means the kernel's highest-priority implementation of each suite.
	Driver string
	// Sockets is the number of operation sockets per session driven by
	// worker goroutines: the requests in flight. Each session has one
	// socket more, on which a submitter runs a batch of one or two ops
	// itself when the engine is idle. 0 means DefaultSockets.
	Sockets int
	// QueueDepth bounds the ops submitted and not yet completed; it is
	// also the largest batch. 0 means DefaultQueueDepth.
	QueueDepth int
	Logger     *slog.Logger
}

// Engine is the AF_ALG engine. It is safe for concurrent use.
type Engine struct {
	name string
	opts Options
	log  *slog.Logger
	note string

	chunks chan chunk
	pend   sync.Pool
	wg     sync.WaitGroup
	inline *worker // the submitter's own socket (index Sockets), while inlineBusy

	mu         sync.Mutex
	inflight   int
	closed     bool
	waiters    int
	space      chan struct{} // closed and replaced when ops complete and someone waits
	fifo       ring          // admitted batches in submission order
	delivering bool          // a goroutine is delivering completed batches
	inlineBusy bool

	counters  offload.Counters
	requests  atomic.Uint64
	failures  atomic.Uint64
	queueFull atomic.Uint64
	maxQueue  atomic.Uint64
	depth     atomic.Int64

	drvMu   sync.Mutex
	drivers []offload.Driver
}

// chunk is the part of a batch one worker takes: a batch is split into
// up to Sockets chunks, so a worker is woken once per chunk, not per op.
type chunk struct {
	ops []*offload.Op
	p   *pending
}

// pending is one admitted batch waiting for its chunks.
type pending struct {
	b    *offload.Batch
	left int // chunks not yet done; under Engine.mu
}

// ring is a FIFO of pending batches that grows only past its largest
// depth so far.
type ring struct {
	buf        []*pending
	head, size int
}

func (r *ring) push(p *pending) {
	if r.size == len(r.buf) {
		buf := make([]*pending, max(16, 2*len(r.buf)))
		for i := range r.size {
			buf[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = p
	r.size++
}

func (r *ring) front() *pending {
	if r.size == 0 {
		return nil
	}
	return r.buf[r.head]
}

func (r *ring) pop() {
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.size--
}

// New checks that the kernel has AF_ALG (and, with a driver, that
// /proc/crypto lists it) and starts the workers.
func New(opts Options) (*Engine, error) {
	if opts.Sockets <= 0 {
		opts.Sockets = DefaultSockets
	}
	if opts.QueueDepth <= 0 {
		opts.QueueDepth = DefaultQueueDepth
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	name := Name
	if opts.Driver != "" {
		name += ":" + opts.Driver
	}
	if err := kcapi.Probe(); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	e := &Engine{name: name, opts: opts, log: opts.Logger, note: kernelNote(release()),
		chunks: make(chan chunk, max(opts.QueueDepth, opts.Sockets)), space: make(chan struct{})}
	e.pend.New = func() any { return new(pending) }
	e.inline = newWorker(e, opts.Sockets, true)
	if e.note != "" {
		e.log.Warn(e.note, "engine", name)
	}
	algs, err := kcapi.ReadAlgs()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	servable := false
	for _, s := range cpu.AllSuites() {
		if _, err := planFor(s, false, false, opts.Driver, algs); err == nil {
			servable = true
			break
		}
	}
	if !servable {
		_, err := planFor(sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, false, false, opts.Driver, algs)
		if _, listed := algs.ByDriver(opts.Driver); !listed {
			// The usual case: the driver's module is not loaded, or its
			// device is not there.
			return nil, fmt.Errorf("%s: %v: is its module loaded and its device present?%s", name, err, e.noteSuffix())
		}
		return nil, fmt.Errorf("%s: no ESP suite can use driver %s: %v%s", name, opts.Driver, err, e.noteSuffix())
	}
	for i := 0; i < opts.Sockets; i++ {
		e.wg.Add(1)
		go e.work(i)
	}
	return e, nil
}

func release() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func (e *Engine) noteSuffix() string {
	if e.note == "" {
		return ""
	}
	return " (" + e.note + ")"
}

// Name is "afalg" or "afalg:DRIVER".
func (e *Engine) Name() string { return e.name }

// Drivers lists the kernel drivers the engine's sessions were bound to.
func (e *Engine) Drivers() []offload.Driver {
	e.drvMu.Lock()
	defer e.drvMu.Unlock()
	return append([]offload.Driver(nil), e.drivers...)
}

func (e *Engine) noteDriver(d offload.Driver) {
	e.drvMu.Lock()
	defer e.drvMu.Unlock()
	for _, x := range e.drivers {
		if x.Driver == d.Driver {
			return
		}
	}
	e.drivers = append(e.drivers, d)
	e.log.Info("afalg session bound", "algorithm", d.Algorithm, "driver", d.Driver, "modules", d.Module)
}

// Submit queues a batch, waiting while the queue is full.
func (e *Engine) Submit(ctx context.Context, b *offload.Batch) error {
	counted := false
	for {
		ok, wait, err := e.admit(b)
		if ok || err != nil {
			return err
		}
		if !counted {
			e.queueFull.Add(1)
			counted = true
		}
		select {
		case <-wait:
		case <-ctx.Done():
			e.mu.Lock()
			if wait == e.space { // not woken yet: no longer waiting
				e.waiters--
			}
			e.mu.Unlock()
			return ctx.Err()
		}
	}
}

// inlineMax is the largest batch a submitter runs itself when the engine
// is idle: one request needs no worker woken and none to wake it back.
const inlineMax = 2

// admit queues b if it fits (a batch larger than the whole queue fits an
// empty one); otherwise it registers as a waiter and returns the channel
// that is closed when ops complete. An idle engine runs a small batch on
// the caller, on the session's spare socket.
func (e *Engine) admit(b *offload.Batch) (bool, chan struct{}, error) {
	n := max(len(b.Ops), 1)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return false, nil, offload.ErrClosed
	}
	if e.inflight+n > e.opts.QueueDepth && e.inflight > 0 {
		e.waiters++
		sp := e.space
		e.mu.Unlock()
		return false, sp, nil
	}
	e.inflight += n
	if d := uint64(e.inflight); d > e.maxQueue.Load() {
		e.maxQueue.Store(d)
	}
	e.depth.Store(int64(e.inflight))
	p := e.pend.Get().(*pending)
	p.b = b
	e.fifo.push(p)
	if len(b.Ops) <= inlineMax && e.fifo.size == 1 && !e.inlineBusy {
		e.inlineBusy = true
		p.left = 1
		e.mu.Unlock()
		for _, op := range b.Ops {
			e.inline.process(op)
		}
		e.mu.Lock()
		e.inlineBusy = false
		e.finish(p)
		return true, nil, nil
	}
	// Split the batch into one chunk per worker (fewer for small
	// batches). The channel holds max(QueueDepth, Sockets) chunks: at
	// most QueueDepth ops are admitted, or one oversized batch into an
	// empty queue, in at most Sockets chunks; so sending never waits
	// (the workers need mu to finish a chunk), and sending under mu
	// keeps chunks in submission order.
	if len(b.Ops) == 0 {
		p.left = 1
		e.finish(p)
		return true, nil, nil
	}
	k := min(len(b.Ops), e.opts.Sockets)
	per := (len(b.Ops) + k - 1) / k
	p.left = (len(b.Ops) + per - 1) / per
	for i := 0; i < len(b.Ops); i += per {
		e.chunks <- chunk{ops: b.Ops[i:min(i+per, len(b.Ops))], p: p}
	}
	e.mu.Unlock()
	return true, nil, nil
}

// finish counts one chunk of p done and, if no other goroutine is at it,
// delivers the completed batches at the head of the queue, in order.
// Called with e.mu held; returns with it released. Done runs without the
// lock (it may submit again), and only one goroutine delivers at a time,
// so batches complete in submission order.
func (e *Engine) finish(p *pending) {
	p.left--
	if e.delivering {
		e.mu.Unlock()
		return
	}
	e.delivering = true
	for {
		h := e.fifo.front()
		if h == nil || h.left > 0 {
			break
		}
		e.fifo.pop()
		b := h.b
		h.b = nil
		e.pend.Put(h)
		e.inflight -= max(len(b.Ops), 1)
		e.depth.Store(int64(e.inflight))
		if e.waiters > 0 {
			e.waiters = 0
			close(e.space)
			e.space = make(chan struct{})
		}
		e.mu.Unlock()
		e.counters.Count(b.Ops)
		if b.Done != nil {
			b.Done(b)
		}
		e.mu.Lock()
	}
	e.delivering = false
	e.mu.Unlock()
}

// work is worker i: it drives operation socket i of every session.
func (e *Engine) work(i int) {
	defer e.wg.Done()
	w := newWorker(e, i, false)
	for c := range e.chunks {
		for _, op := range c.ops {
			w.process(op)
		}
		e.mu.Lock()
		e.finish(c.p)
	}
}

// Stats returns the counters: Records are the requests sent to the
// kernel, QueueDepth and MaxQueue the ops in flight now and at most.
func (e *Engine) Stats() offload.Stats {
	s := e.counters.Stats()
	s.Records = e.requests.Load()
	s.QueueFull = e.queueFull.Load()
	s.MaxQueue = e.maxQueue.Load()
	s.QueueDepth = uint64(e.depth.Load())
	s.Interrupts = s.Records // every request completes on its own
	s.MaxBatch = 1
	return s
}

// Close lets the admitted work finish and stops the workers. Sessions are
// closed by their owners.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.chunks)
	e.mu.Unlock()
	e.wg.Wait()
	return nil
}
