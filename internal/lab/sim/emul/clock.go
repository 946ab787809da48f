package emul

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/espgw/espgw/offload"
)

// clock is a ring profile's modelled time: the ring.Timing of its card. It
// keeps a clock of nanoseconds since the engine started and waits in real
// time for the modelled events, so that completions arrive when the card
// would have raised them (the ciphers are still computed for real).
//
// The modelled card works like ubsec(4) with its chip: a batch submitted at
// modelled time t reaches the queue after the host's time (model.Submit); a
// unit accepts up to Pipeline records at once (the chip's MCR FIFO) and the
// driver feeds it a record of the queued ops whenever it has room, so ops
// stack up in records only while the chip is full; a unit works its records
// one after another (model.Record each); and the host sees a batch whose
// last record finished at t at model.Complete(t).
//
// On the real clock a batch arrives when it is submitted. Virtual runs the
// model on its own clock, for measuring a card apart from the host running
// the emulation: a batch submitted again after its Done arrives at its
// modelled completion time however late its goroutine came back (a closed
// loop reacts at once in the model), a new batch at the last modelled
// completion; the ring then takes requests in the order they arrive in the
// model, and waits in real time only when the model is ahead of the real
// clock.
//
// The ring calls every method but Wait with its lock held (ring.Timing), so
// the fields need no lock of their own; delivered is read by ModelClock
// from outside.
type clock struct {
	m       *model
	epoch   time.Time
	virtual bool
	units   []unitClock

	lastDue   int64                   // modelled time of the latest batch handed back
	lastFresh int64                   // latest arrival of a batch not in a closed loop
	loops     map[*offload.Batch]loop // virtual: the closed loops seen
	delivered atomic.Int64            // lastDue, for ModelClock
}

// unitClock is a unit's chip: when its last Pipeline records finish, and
// the latest of them.
type unitClock struct {
	places []int64
	n      int
	last   int64
}

// loop is a batch a caller submits again and again (virtual): when it last
// completed in the model, and whether it is out with the caller.
type loop struct {
	done  int64
	out   bool
	since time.Time // real time it went out
}

// stragglerWait is how long (real time) a caller due back in the model may
// stay away before a unit stops waiting for it: long enough for a goroutine
// on a busy machine to be scheduled, short enough not to stall the ring for
// long when a caller stops.
const stragglerWait = 300 * time.Millisecond

func newClock(m *model, units int, virtual bool) *clock {
	c := &clock{m: m, epoch: time.Now(), virtual: virtual, units: make([]unitClock, units)}
	for i := range c.units {
		c.units[i].places = make([]int64, max(1, m.prof.Pipeline))
	}
	if virtual {
		c.loops = make(map[*offload.Batch]loop)
	}
	return c
}

// now is the real clock, on the model's scale.
func (c *clock) now() int64 { return int64(time.Since(c.epoch)) }

// Arrive is the batch's arrival at the card's queue: after the host's time
// from its submission, which is now, or on a virtual clock its last
// modelled completion (a closed loop) or the latest delivery (a new batch).
func (c *clock) Arrive(b *offload.Batch) int64 {
	at, fresh := c.now(), true
	if c.virtual {
		at = c.lastDue
		if l, ok := c.loops[b]; ok {
			at, fresh = l.done, false
			c.loops[b] = loop{done: l.done}
		}
	}
	arrival := int64(c.m.Submit(time.Duration(at), b))
	if fresh {
		// One caller's batches arrive in the order it submits them.
		arrival = max(arrival, c.lastFresh)
		c.lastFresh = arrival
	}
	return arrival
}

// Feed is when unit u's driver feeds the next record: once the first op
// has arrived and the chip has a place. On a virtual clock the record must
// also hold the ops of callers that are due back by then but have not yet
// been scheduled in real time, so it waits for them.
func (c *clock) Feed(u int, waiting, undelivered int64) (int64, bool) {
	uc := &c.units[u]
	feed := max(uc.places[uc.n%len(uc.places)], waiting)
	if feed > c.now() {
		return feed, false
	}
	if c.virtual && c.straggling(feed, undelivered) {
		return feed, false
	}
	return feed, true
}

// straggling reports whether a caller is due back in the model by feed: a
// batch done and not yet delivered, or one delivered and not yet submitted
// again. A caller away for longer than stragglerWait is forgotten.
func (c *clock) straggling(feed, undelivered int64) bool {
	late := undelivered <= feed
	for b, l := range c.loops {
		if l.out && l.done <= feed {
			if time.Since(l.since) > stragglerWait {
				delete(c.loops, b)
				continue
			}
			late = true
		}
	}
	return late
}

// Worked is when unit u's record is done: records are worked in order, so
// it starts when it was fed and the previous one is done.
func (c *clock) Worked(u int, at int64, ops []*offload.Op) int64 {
	uc := &c.units[u]
	done := max(at, uc.last) + int64(c.m.Record(ops))
	uc.places[uc.n%len(uc.places)] = done
	uc.n++
	uc.last = done
	return done
}

// Deliver is when the host sees the batch: its last record's completion
// plus the host's time, after the batch before it.
func (c *clock) Deliver(b *offload.Batch, arrival, done int64) int64 {
	at := max(int64(c.m.Complete(time.Duration(max(done, arrival)), b)), c.lastDue)
	c.lastDue = at
	c.delivered.Store(at)
	if c.virtual {
		// It goes out with its caller once the real clock reaches it.
		since := time.Now()
		if d := time.Duration(at - c.now()); d > 0 {
			since = since.Add(d)
		}
		c.loops[b] = loop{done: at, out: true, since: since}
	}
	return at
}

// ModelClock is the modelled time of the latest completion handed back, as
// time since the engine started; on a virtual clock it runs apart from the
// real clock.
func (c *clock) ModelClock() time.Duration { return time.Duration(c.delivered.Load()) }

// Wait returns once the real clock reaches at.
func (c *clock) Wait(at int64) { waitUntil(c.epoch, time.Duration(at)) }

// spinWindow is how close to a deadline waitUntil stops sleeping and spins:
// Go's timers on Linux wake up to about a millisecond late.
const spinWindow = 1500 * time.Microsecond

// waitUntil returns once the real clock reaches at (time since epoch): a
// sleep for the bulk, then spinning, yielding the processor, for the rest.
func waitUntil(epoch time.Time, at time.Duration) {
	d := at - time.Since(epoch)
	if d <= 0 {
		return
	}
	if d > spinWindow {
		time.Sleep(d - spinWindow)
	}
	for at > time.Since(epoch) {
		runtime.Gosched()
	}
}
