// Package ring is a descriptor-ring offload engine modelled on the ubsec(4)
// driver for Broadcom BCM58xx cards. Requests wait in a bounded queue
// (UBS_MAX_NQUEUE, 60 by default); a free unit of the "card" — a worker
// goroutine — stacks up to Aggregation of them into one multiple command
// record (MCR, UBS_MAX_AGGR, 5 by default), runs them with the cpu engine's
// ciphers, and raises one completion "interrupt" per record. Batches complete
// strictly in the order they were submitted (with a Timing, the order it has
// them arrive). When the queue is full, Submit blocks until completions make
// room for its batch (the driver's unblock, at most once per record), or
// until its context ends.
// The counters are the driver's: queue full, MCR full, max batch (largest
// aggregation), max queue.
//
// A Timing, when set, decides when records are fed and finish and when a
// batch is delivered: package emul's models of real cards keep their clock
// behind it, and the ring only orders by the times it hands out. Without one
// the ring runs as fast as the CPU does, which measures what the queueing
// and hand-off themselves cost.
//
// Aggregation saves interrupts at the cost of latency: NetBSD's ubsec(4)
// notes that 1 gives the best latency for network traffic.
//
// A batch larger than the queue is taken when the queue is empty and
// streams in as its first ops complete; other submitters wait behind it.
// Once a blocked Submit has its batch in, the context no longer matters:
// the engine owns the ops until Done. Steady-state submission allocates
// nothing (TestSteadyStateAllocatesNothing). Queue slots are freed when a
// unit finishes an op; with a Timing, a delivery loop hands batches back at
// the times it says, outside the queue.
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

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
)

// Name is the catalog name of the untimed ring engine.
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
	// Timing, if set, times the card (see Timing). Its sessions may wrap
	// the cpu sessions; the units run every op with offload.Process, so
	// they must be offload.Processors.
	Timing Timing
	// NewSession, if set, builds sessions instead of cpu.NewSession, so a
	// model can attach per-session costs.
	NewSession func(offload.SessionConfig) (offload.Session, error)
}

// Timing decides when a ring's events happen: package emul implements it
// with a model of a card's time. Times are the timing's own (nanoseconds on
// its clock): the ring compares them and hands them back, nothing more.
// The ring calls every method but Wait with its lock held, units and
// delivery in turn, so a timing may keep state without a lock of its own.
//
// The ring's side: a batch is given its arrival by Arrive as it is
// admitted, and its ops are taken in order of arrival (ties in submission
// order; a timing may have a batch arrive before one submitted earlier, and
// then "in order" is the timing's). A unit about to take a record asks Feed
// when, takes up to Aggregation of the ops arrived by then, runs them and
// reports the record to Worked; a batch is done when its last record is.
// Batches are delivered in order, each once Wait(Deliver(…)) returns.
type Timing interface {
	// Arrive returns when batch b, being admitted, reaches the queue.
	Arrive(b *offload.Batch) int64
	// Feed returns when unit u's next record is fed, given the earliest
	// arrival of an op waiting for a unit and the earliest completion of
	// a batch done but not yet delivered (math.MaxInt64: none), and
	// whether the record is to be taken now; if not, the ring calls
	// Wait(at), yields, and asks again.
	Feed(u int, waiting, undelivered int64) (at int64, now bool)
	// Worked returns when unit u's record of ops, fed at at, is done.
	Worked(u int, at int64, ops []*offload.Op) int64
	// Deliver returns when the host sees batch b, which arrived at
	// arrival and whose last record was done at done; it is called in
	// delivery order.
	Deliver(b *offload.Batch, arrival, done int64) int64
	// Wait returns once the timing's clock reaches at.
	Wait(at int64)
}

// batchRec tracks one submitted batch through the ring.
type batchRec struct {
	b         *offload.Batch
	admitted  int   // ops counted against the queue (a batch larger than the queue streams in)
	next      int   // next op to hand to a unit
	completed int   // ops with a Status
	arrival   int64 // Timing: when it reached the queue
	done      int64 // Timing: when its last record was done
}

// unitSpins is how many times an idle unit yields before it parks.
const unitSpins = 20

// Engine is a ring engine. It is safe for concurrent use.
type Engine struct {
	cfg Config

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
		cfg:  cfg,
		fifo: make([]*batchRec, 2*cfg.QueueDepth),
		room: make(chan struct{}, 1),
		turn: make(chan struct{}, 1),
		done: make(chan struct{}),
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
	if cfg.Timing != nil {
		e.wg.Add(1)
		go e.deliverTimed()
	}
	return e
}

// Name returns the configured name.
func (e *Engine) Name() string { return e.cfg.Name }

// Config returns the ring's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// NewSession builds the key schedules for one SA.
func (e *Engine) NewSession(cfg offload.SessionConfig) (offload.Session, error) {
	if e.cfg.NewSession != nil {
		return e.cfg.NewSession(cfg)
	}
	return cpu.NewSession(cfg)
}

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
	// Ops are taken in order of arrival: a timing may have a batch arrive
	// before one submitted earlier (a closed loop resubmitting at its
	// modelled time, on a goroutine that ran late).
	at := e.n
	if t := e.cfg.Timing; t != nil {
		r.arrival = t.Arrive(b)
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

// Submit queues b, blocking while the queue is full, until ctx ends. A
// batch larger than the queue is taken only when the queue is empty; it
// then streams in as room frees up.
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
		feed := int64(math.MaxInt64) // untimed: every op waiting has arrived
		if t := e.cfg.Timing; t != nil {
			at, now := t.Feed(u, e.earliest(), e.undelivered())
			if !now {
				e.mu.Unlock()
				t.Wait(at)
				runtime.Gosched()
				e.mu.Lock()
				continue
			}
			feed = at
		}
		// The ops arrived by the feed, in order (with a timing, a late
		// goroutine's batch may sit behind one that arrived later).
		ops, recs = ops[:0], recs[:0]
		for i := e.disp; i < e.n && len(ops) < e.cfg.Aggregation; i++ {
			r := e.fifo[(e.head+i)%len(e.fifo)]
			for r.arrival <= feed && r.next < r.admitted && len(ops) < e.cfg.Aggregation {
				ops = append(ops, r.b.Ops[r.next])
				recs = append(recs, r)
				r.next++
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
			bytes += uint64(len(op.Buf))
			switch op.Status {
			case offload.OK:
			case offload.BadICV:
				bad++
			default:
				failed++
			}
		}
		e.mu.Lock()
		var done int64
		if t := e.cfg.Timing; t != nil {
			// The delivery loop waits for the record's time; the unit
			// goes on feeding.
			done = t.Worked(u, feed, ops)
		}
		e.stats.Interrupts++
		e.stats.Ops += k
		e.stats.Bytes += bytes
		e.stats.BadICV += bad
		e.stats.Errors += failed
		for _, r := range recs {
			r.completed++
			r.done = max(r.done, done)
			e.release(r)
		}
		e.unblock()
		e.complete()
		// mu held: straight on to the next record, one critical section
		// per record.
	}
}

// undelivered is the earliest completion of the batches done at the head
// of the fifo and not yet delivered (those behind a batch still on the card
// wait for it), or math.MaxInt64; mu held.
func (e *Engine) undelivered() int64 {
	first := int64(math.MaxInt64)
	for i := range e.n {
		r := e.fifo[(e.head+i)%len(e.fifo)]
		if r.completed < len(r.b.Ops) {
			break
		}
		first = min(first, r.done)
	}
	return first
}

// earliest is the earliest arrival of an op waiting for a unit;
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
// With a timing, the delivery loop does it at the timing's time instead.
func (e *Engine) complete() {
	if e.cfg.Timing != nil {
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

// deliverTimed hands each batch back, in order, at the time the timing
// says.
func (e *Engine) deliverTimed() {
	defer e.wg.Done()
	t := e.cfg.Timing
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
		at := t.Deliver(r.b, r.arrival, r.done)
		e.mu.Unlock()
		t.Wait(at)
		e.mu.Lock()
		b := e.pop()
		e.mu.Unlock()
		if b.Done != nil {
			b.Done(b)
		}
		e.mu.Lock()
	}
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
