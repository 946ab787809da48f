// Package ring is a descriptor-ring offload engine modelled on the ubsec(4)
// driver for Broadcom BCM58xx cards. Requests wait in a bounded queue
// (UBS_MAX_NQUEUE, 60 by default); a free unit of the "card" — a worker
// goroutine — stacks up to Aggregation of them into one multiple command
// record (MCR, UBS_MAX_AGGR, 5 by default), runs them with the cpu engine's
// ciphers, and raises one completion "interrupt" per record. Batches complete
// strictly in the order they were submitted. When the queue is full, TrySubmit
// answers ErrQueueFull (the driver's ERESTART) and Submit blocks until
// completions make room for its batch (the driver's unblock, at most once per
// record), or until its context ends.
// The counters are the driver's: queue full, MCR full, max batch (largest
// aggregation), max queue.
//
// A Model, when set, decides when records start and finish and when the host
// sees a completion; package emul uses it to emulate real cards. Without one
// the ring runs as fast as the CPU does, which measures what the queueing and
// hand-off themselves cost.
//
// Aggregation saves interrupts at the cost of latency: NetBSD's ubsec(4)
// notes that 1 gives the best latency for network traffic.
//
// A batch larger than the queue is taken when the queue is empty and
// streams in as its first ops complete; other submitters wait behind it.
// Once a blocked Submit has its batch in, the context no longer matters:
// the engine owns the ops until Done. Steady-state submission allocates
// nothing (TestSteadyStateAllocatesNothing). Queue slots are freed when a
// unit finishes an op; with a model, a unit runs at most Pipeline records
// ahead of the modelled card, and the host-side time after that is spent in
// the delivery loop, outside the queue.
//
// Cost. A unit takes the lock once per record (completing one record and
// taking the next together); one idle unit at a time yields a few times
// before it parks, the others park at once. What is left is the hand-off
// itself: BenchmarkRingVsCPU (package engines) seals 32 × 1400-byte ESP
// packets on cpu, on the ring and on a bare hand-off engine (one goroutine,
// one channel) in one loop. With one processor (-cpu 1) the ring costs 2-4%
// more CPU per byte than cpu for aes-cbc+hmac-sha1 and 6-12% for aes-gcm;
// with two, every hand-off wakes an idle OS thread (futex, the runtime's
// spinning and stealing) and packets change cores, which costs even the bare
// hand-off 15-25% (cbc) and 30-50% (gcm) on a 2-vCPU VM, and the ring
// stays within a few percent of that floor.
package ring

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// Name is the registry name of the untimed ring engine.
const Name = "ring"

// Defaults from the ubsec(4) driver.
const (
	DefaultQueueDepth  = 60 // UBS_MAX_NQUEUE
	DefaultAggregation = 5  // UBS_MAX_AGGR
)

// Config shapes a ring. Zero values take the defaults.
type Config struct {
	Name        string // reported by Name(); "ring" by default
	QueueDepth  int    // ops admitted at once
	Aggregation int    // ops per command record; 1 for the lowest latency
	Units       int    // worker goroutines standing in for the card's units; GOMAXPROCS by default
	// Model, if set, times the card (see Model). Its sessions may wrap the
	// cpu sessions; the units run every op with offload.Process, so they
	// must be offload.Processors.
	Model Model
	// NewSession, if set, builds sessions instead of cpu.NewSession, so a
	// model can attach per-session costs.
	NewSession func(offload.SessionConfig) (offload.Session, error)
	// Virtual runs the model on its own clock, for measuring a card apart
	// from the host running the emulation: a batch submitted again after
	// its Done arrives at its modelled completion time however late the
	// goroutine came back (a closed loop reacts at once in the model), a new
	// batch at the last modelled completion; the card takes requests in
	// the order they arrive in the model (so "submission order" is the
	// model's), and the ring waits in real time only when the model is
	// ahead of the real clock. ModelClock tells the modelled time. Without
	// it, a batch arrives when it is submitted.
	Virtual bool
}

// Model is a card's timing. The ring keeps a modelled clock (nanoseconds
// since the engine started) and waits in real time for the modelled events,
// so completions arrive when the card would have raised them; the cipher
// results are still computed for real.
//
// The modelled card works like ubsec(4) with its chip: a request submitted at
// modelled time t reaches the queue at Submit(t); a unit accepts up to
// Pipeline records at once (the chip's MCR FIFO) and the driver feeds it a
// record of up to Aggregation queued ops whenever it has room, so ops stack
// up in records only while the chip is full; a unit works its records one
// after another, each for Record; and the host sees the completion of a batch
// whose last record finished at t at Complete(t) (interrupt, wake-up,
// copy-out). Submit and Complete are called with the ring locked, in
// submission and completion order, so a model may keep state in them (a
// host's CPUs); Record is called by the units concurrently and must not.
type Model interface {
	Submit(t time.Duration, b *offload.Batch) time.Duration
	Record(ops []*offload.Op) time.Duration
	Complete(t time.Duration, b *offload.Batch) time.Duration
	// Pipeline is how many records a unit accepts before it is full.
	Pipeline() int
}

// batchRec tracks one submitted batch through the ring.
type batchRec struct {
	b         *offload.Batch
	admitted  int   // ops counted against the queue (a batch larger than the queue streams in)
	next      int   // next op to hand to a unit
	completed int   // ops with a Status
	arrival   int64 // modelled arrival (ns since epoch)
	deadline  int64 // modelled completion of its last record
}

// loop is a batch a caller submits again and again (Virtual): when it last
// completed in the model, and whether it is out with the caller.
type loop struct {
	done  int64
	out   bool
	since time.Time // real time it went out
}

// unitSpins is how many times an idle unit yields before it parks.
const unitSpins = 20

// stragglerWait is how long (real time) a caller due back in the model may
// stay away before a unit takes it for gone. Long enough for a goroutine on
// a busy machine to be scheduled, short enough not to stall the ring for
// long when a caller stops.
const stragglerWait = 300 * time.Millisecond

// Engine is a ring engine. It is safe for concurrent use.
type Engine struct {
	cfg   Config
	epoch time.Time

	mu      sync.Mutex
	work    sync.Cond // units wait here for ops
	deliver sync.Cond // the timed delivery loop waits here

	fifo       []*batchRec // ring buffer of batches in submission order
	head, n    int         // fifo head index and length
	disp       int         // fifo offset (from head) of the batch being dispatched
	free       []*batchRec // spare records
	inflight   int         // ops admitted and not yet completed
	streaming  *batchRec   // a batch larger than the queue, still streaming in
	delivering bool        // one goroutine calls Done at a time, in order
	spinning   bool        // an idle unit is yielding before it parks
	closed     bool
	waiting    bool           // a Submit is blocked for room
	blocked    *offload.Batch // the batch it waits to admit
	room       chan struct{}  // signalled when the blocked batch fits
	turn       chan struct{}  // blocked Submits queue here one at a time
	done       chan struct{}  // closed by Close
	wg         sync.WaitGroup

	// modelled clock
	lastDelivered int64
	lastFresh     int64                   // latest arrival of a batch not in a closed loop
	resubmit      map[*offload.Batch]loop // Virtual: the closed loops seen

	stats offload.Stats
}

// New starts a ring with cfg.
func New(cfg Config) *Engine {
	if cfg.Name == "" {
		cfg.Name = Name
	}
	if cfg.QueueDepth <= 0 {
		cfg.QueueDepth = DefaultQueueDepth
	}
	if cfg.Aggregation <= 0 {
		cfg.Aggregation = DefaultAggregation
	}
	if cfg.Units <= 0 {
		cfg.Units = runtime.GOMAXPROCS(0)
	}
	e := &Engine{
		cfg:   cfg,
		epoch: time.Now(),
		fifo:  make([]*batchRec, 2*cfg.QueueDepth),
		room:  make(chan struct{}, 1),
		turn:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	if cfg.Virtual {
		e.resubmit = make(map[*offload.Batch]loop)
	}
	e.work.L = &e.mu
	e.deliver.L = &e.mu
	e.free = make([]*batchRec, 0, len(e.fifo))
	for range len(e.fifo) {
		e.free = append(e.free, new(batchRec))
	}
	for u := range cfg.Units {
		e.wg.Add(1)
		go e.unit(u)
	}
	if cfg.Model != nil {
		e.wg.Add(1)
		go e.deliverTimed()
	}
	return e
}

// Name returns the configured name.
func (e *Engine) Name() string { return e.cfg.Name }

// Config returns the ring's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Suites lists the cpu suites. Batches up to the queue depth are admitted
// at once, larger ones stream through the queue.
func (e *Engine) Suites() []sa.Suite { return cpu.AllSuites() }

// NewSession builds the key schedules for one SA.
func (e *Engine) NewSession(cfg offload.SessionConfig) (offload.Session, error) {
	if e.cfg.NewSession != nil {
		return e.cfg.NewSession(cfg)
	}
	return cpu.NewSession(cfg)
}

// now is the modelled clock's reading of the real clock.
func (e *Engine) now() int64 { return int64(time.Since(e.epoch)) }

// admissible reports whether b fits now; mu held.
func (e *Engine) admissible(b *offload.Batch) bool {
	if e.closed || e.streaming != nil || e.n == len(e.fifo) {
		return false
	}
	if len(b.Ops) > e.cfg.QueueDepth {
		return e.inflight == 0
	}
	return e.inflight+len(b.Ops) <= e.cfg.QueueDepth
}

// admit puts b in the fifo; mu held and admissible(b) true. It reports
// whether the batch is already complete (no ops, nothing ahead of it).
func (e *Engine) admit(b *offload.Batch) {
	r := e.free[len(e.free)-1]
	e.free = e.free[:len(e.free)-1]
	*r = batchRec{b: b, admitted: min(len(b.Ops), e.cfg.QueueDepth)}
	if r.admitted < len(b.Ops) {
		e.streaming = r
	}
	if e.cfg.Model != nil {
		at := e.now()
		fresh := true
		if e.cfg.Virtual {
			at = e.lastDelivered
			if l, ok := e.resubmit[b]; ok {
				at, fresh = l.done, false
				e.resubmit[b] = loop{done: l.done}
			}
		}
		r.arrival = int64(e.cfg.Model.Submit(time.Duration(at), b))
		if fresh {
			// One caller's batches arrive in the order it submits them.
			r.arrival = max(r.arrival, e.lastFresh)
			e.lastFresh = r.arrival
		}
	}
	// On its own clock, the card sees requests in the order they arrive
	// in the model, not the order goroutines happened to run in.
	at := e.n
	if e.cfg.Virtual {
		for at > e.disp {
			prev := e.fifo[(e.head+at-1)%len(e.fifo)]
			if prev.next > 0 || prev.arrival <= r.arrival {
				break
			}
			e.fifo[(e.head+at)%len(e.fifo)] = prev
			at--
		}
	}
	e.fifo[(e.head+at)%len(e.fifo)] = r
	e.n++
	e.inflight += r.admitted
	e.stats.Batches++
	e.stats.MaxQueue = max(e.stats.MaxQueue, uint64(e.inflight))
	if r.admitted > 0 {
		e.work.Signal()
	}
}

// TrySubmit queues b or returns offload.ErrQueueFull without blocking. A
// batch larger than the queue is taken only when the queue is empty; it then
// streams in as room frees up.
func (e *Engine) TrySubmit(b *offload.Batch) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return offload.ErrClosed
	}
	if e.waiting || !e.admissible(b) {
		e.stats.QueueFull++
		e.mu.Unlock()
		return offload.ErrQueueFull
	}
	e.admit(b)
	e.complete() // a batch with no ops may be complete already
	e.mu.Unlock()
	return nil
}

// Submit queues b, blocking while the queue is full, until ctx ends.
func (e *Engine) Submit(ctx context.Context, b *offload.Batch) error {
	e.mu.Lock()
	if !e.closed && !e.waiting && e.admissible(b) {
		e.admit(b)
		e.complete()
		e.mu.Unlock()
		return nil
	}
	if e.closed {
		e.mu.Unlock()
		return offload.ErrClosed
	}
	e.stats.QueueFull++
	e.mu.Unlock()
	// Blocked submitters take turns, so that the one at the front gets the
	// room as it frees up.
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for %s queue: %w", e.cfg.Name, ctx.Err())
	case <-e.done:
		return offload.ErrClosed
	}
	defer func() { <-e.turn }()
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return offload.ErrClosed
		}
		e.waiting, e.blocked = false, nil
		if e.admissible(b) {
			e.admit(b)
			e.complete()
			e.mu.Unlock()
			return nil
		}
		e.waiting, e.blocked = true, b
		e.mu.Unlock()
		select {
		case <-e.room:
		case <-ctx.Done():
			e.mu.Lock()
			e.waiting, e.blocked = false, nil
			e.mu.Unlock()
			return fmt.Errorf("wait for %s queue: %w", e.cfg.Name, ctx.Err())
		case <-e.done:
			return offload.ErrClosed
		}
	}
}

// unit is one of the card's units: it takes a record of up to Aggregation
// ops, runs them, and completes them with one interrupt.
func (e *Engine) unit(u int) {
	defer e.wg.Done()
	ops := make([]*offload.Op, 0, e.cfg.Aggregation)
	recs := make([]*batchRec, 0, e.cfg.Aggregation)
	// With a model: the modelled completion times of the last Pipeline
	// records, and of the latest one.
	var fifo []int64
	if e.cfg.Model != nil {
		fifo = make([]int64, max(1, e.cfg.Model.Pipeline()))
	}
	var nrec int
	var last int64
	var spins int
	e.mu.Lock()
	for {
		r := e.dispatchable()
		if r == nil {
			if e.closed {
				e.mu.Unlock()
				return
			}
			if spins < unitSpins && (spins > 0 || !e.spinning) {
				// The next batch of a busy caller usually comes within
				// microseconds: yield a few times before parking, which
				// costs a futex sleep and wake-up each time. One unit
				// spins at a time; the others park at once (spinning
				// units only contend for the lock and the run queue).
				if spins == 0 {
					e.spinning = true
				}
				spins++
				e.mu.Unlock()
				runtime.Gosched()
				e.mu.Lock()
				continue
			}
			if spins > 0 {
				spins, e.spinning = 0, false
			}
			clear(ops[:cap(ops)]) // drop references to the callers' ops while parked
			clear(recs[:cap(recs)])
			e.work.Wait()
			continue
		}
		if spins > 0 {
			spins, e.spinning = 0, false
		}
		var feed int64
		if e.cfg.Model != nil {
			// The driver feeds a record once the first op has arrived and
			// the chip has room, and puts in everything that arrived by then.
			feed = max(fifo[nrec%len(fifo)], e.earliest())
			if feed > e.now() {
				e.mu.Unlock()
				waitUntil(e.epoch, feed)
				e.mu.Lock()
				continue
			}
			// On its own clock, the record must also hold the ops of
			// callers that are due back by then but have not yet been
			// scheduled in real time.
			if e.cfg.Virtual && e.straggling(feed) {
				e.mu.Unlock()
				runtime.Gosched()
				e.mu.Lock()
				continue
			}
		}
		ops, recs = ops[:0], recs[:0]
		if e.cfg.Model == nil {
			for len(ops) < e.cfg.Aggregation {
				r := e.dispatchable()
				if r == nil {
					break
				}
				ops = append(ops, r.b.Ops[r.next])
				recs = append(recs, r)
				r.next++
			}
		} else {
			// Everything that has arrived by the feed, in submission
			// order (a late goroutine may have queued behind a later
			// arrival in the model).
			e.dispatchable() // advance past dispatched batches
			for i := e.disp; i < e.n && len(ops) < e.cfg.Aggregation; i++ {
				r := e.fifo[(e.head+i)%len(e.fifo)]
				for r.arrival <= feed && r.next < r.admitted && len(ops) < e.cfg.Aggregation {
					ops = append(ops, r.b.Ops[r.next])
					recs = append(recs, r)
					r.next++
				}
			}
		}
		k := uint64(len(ops))
		e.stats.Records++
		e.stats.MaxBatch = max(e.stats.MaxBatch, k)
		if len(ops) == e.cfg.Aggregation {
			e.stats.MCRFull++
		}
		if e.dispatchable() != nil {
			e.work.Signal() // more for another unit
		}
		e.mu.Unlock()

		var bytes, bad, failed uint64
		for _, op := range ops {
			offload.Process(op)
			bytes += uint64(len(op.Packet))
			switch op.Status {
			case offload.OK:
			case offload.BadICV:
				bad++
			default:
				failed++
			}
		}
		var done int64
		if e.cfg.Model != nil {
			// Records are worked in order: this one starts when it was fed
			// and the previous one is done. The delivery loop waits for
			// the modelled time; the unit goes on feeding.
			done = max(feed, last) + int64(e.cfg.Model.Record(ops))
			fifo[nrec%len(fifo)] = done
			nrec++
			last = done
		}

		e.mu.Lock()
		e.stats.Interrupts++
		e.stats.Ops += k
		e.stats.Bytes += bytes
		e.stats.BadICV += bad
		e.stats.Errors += failed
		for _, r := range recs {
			r.completed++
			r.deadline = max(r.deadline, done)
			e.release(r)
		}
		e.unblock()
		e.complete()
		// mu held: straight on to the next record, one critical section
		// per record.
	}
}

// straggling reports whether a closed-loop caller is due back in the model
// by feed. A caller away for longer than stragglerWait is taken for gone and
// forgotten. mu held.
func (e *Engine) straggling(feed int64) bool {
	late := false
	// Completed batches about to be delivered may come back by feed too
	// (only those at the head: the rest wait for batches ahead of them).
	for i := range e.n {
		r := e.fifo[(e.head+i)%len(e.fifo)]
		if r.completed < len(r.b.Ops) {
			break
		}
		if r.deadline <= feed {
			late = true
			break
		}
	}
	for b, l := range e.resubmit {
		if l.out && l.done <= feed {
			if time.Since(l.since) > stragglerWait {
				delete(e.resubmit, b)
				continue
			}
			late = true
		}
	}
	return late
}

// earliest is the earliest modelled arrival of an op waiting for a unit;
// mu held and some op waiting.
func (e *Engine) earliest() int64 {
	first := int64(math.MaxInt64)
	for i := e.disp; i < e.n; i++ {
		r := e.fifo[(e.head+i)%len(e.fifo)]
		if r.next < r.admitted {
			first = min(first, r.arrival)
		}
	}
	return first
}

// dispatchable returns the batch holding the next op a unit may take; mu held.
func (e *Engine) dispatchable() *batchRec {
	for e.disp < e.n {
		r := e.fifo[(e.head+e.disp)%len(e.fifo)]
		if r.next < r.admitted {
			return r
		}
		if r.next < len(r.b.Ops) {
			return nil // streaming: wait for room
		}
		e.disp++
	}
	return nil
}

// release frees one op's place in the queue, or streams in the next op of
// a batch larger than the queue; mu held.
func (e *Engine) release(r *batchRec) {
	if s := e.streaming; s != nil {
		s.admitted++
		if s.admitted == len(s.b.Ops) {
			e.streaming = nil
		}
		e.work.Signal()
		return
	}
	e.inflight--
}

// unblock wakes a blocked Submit once its batch fits: the driver's
// crypto_unblock at a completion interrupt, once per record rather than
// once per op, and only when the wait is over; mu held.
func (e *Engine) unblock() {
	if e.waiting && e.admissible(e.blocked) {
		select {
		case e.room <- struct{}{}:
		default:
		}
	}
}

// complete calls Done for the completed batches at the head of the fifo, in
// order, with mu released around each call; mu held on entry and on return.
// With a model, the delivery loop does it at the modelled time instead.
func (e *Engine) complete() {
	if e.cfg.Model != nil {
		if e.n > 0 && e.fifo[e.head].completed == len(e.fifo[e.head].b.Ops) {
			e.deliver.Signal()
		}
		return
	}
	if e.delivering {
		return
	}
	e.delivering = true
	for e.n > 0 {
		r := e.fifo[e.head]
		if r.completed < len(r.b.Ops) {
			break
		}
		b := e.pop()
		e.mu.Unlock()
		if b.Done != nil {
			b.Done(b)
		}
		e.mu.Lock()
	}
	e.delivering = false
}

// pop removes the fifo head, recycles its record and returns its batch; mu held.
func (e *Engine) pop() *offload.Batch {
	r := e.fifo[e.head]
	b := r.b
	*r = batchRec{}
	e.fifo[e.head] = nil
	e.free = append(e.free, r)
	e.head = (e.head + 1) % len(e.fifo)
	e.n--
	if e.disp > 0 {
		e.disp--
	}
	e.unblock() // a blocked batch may have waited for a place in the fifo
	return b
}

// deliverTimed raises the host-side completion of each batch, in order, at
// its modelled time: its last record's completion plus the host's time.
func (e *Engine) deliverTimed() {
	defer e.wg.Done()
	e.mu.Lock()
	for {
		if e.n == 0 || e.fifo[e.head].completed < len(e.fifo[e.head].b.Ops) {
			if e.closed && e.n == 0 {
				e.mu.Unlock()
				return
			}
			e.deliver.Wait()
			continue
		}
		r := e.fifo[e.head]
		at := int64(e.cfg.Model.Complete(time.Duration(max(r.deadline, r.arrival)), r.b))
		at = max(at, e.lastDelivered)
		e.mu.Unlock()
		waitUntil(e.epoch, at)
		e.mu.Lock()
		b := e.pop()
		e.lastDelivered = at
		if e.resubmit != nil {
			e.resubmit[b] = loop{done: at, out: true, since: time.Now()}
		}
		e.mu.Unlock()
		if b.Done != nil {
			b.Done(b)
		}
		e.mu.Lock()
	}
}

// ModelClock is the modelled time of the latest completion delivered, as
// time since the engine started; with Virtual it runs apart from the real
// clock.
func (e *Engine) ModelClock() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return time.Duration(e.lastDelivered)
}

// Stats returns the driver-like counters.
func (e *Engine) Stats() offload.Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.QueueDepth = uint64(e.inflight)
	return s
}

// Close stops taking work, lets the units finish what was admitted, and
// returns when they have.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.done)
	e.work.Broadcast()
	e.deliver.Broadcast()
	e.mu.Unlock()
	e.wg.Wait()
	return nil
}

// spinWindow is how close to a deadline waitUntil stops sleeping and spins:
// Go's timers on Linux wake up to about a millisecond late.
const spinWindow = 1500 * time.Microsecond

// waitUntil returns once the real clock reaches at (ns since epoch): a sleep
// for the bulk, then spinning, yielding the processor, for the rest.
func waitUntil(epoch time.Time, at int64) {
	d := time.Duration(at) - time.Since(epoch)
	if d <= 0 {
		return
	}
	if d > spinWindow {
		time.Sleep(d - spinWindow)
	}
	for time.Duration(at) > time.Since(epoch) {
		runtime.Gosched()
	}
}
