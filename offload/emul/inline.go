package emul

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
)

// inline is an inline profile's engine: the ops run on the submitting
// goroutine, then the call returns at the modelled completion time.
type inline struct {
	name    string
	m       *model
	epoch   time.Time
	virtual bool // the cores' clocks run on the model alone (see ring.Config.Virtual)

	mu    sync.Mutex
	cores []time.Duration                  // modelled time each core is next idle
	loops map[*offload.Batch]time.Duration // virtual: each batch's last modelled completion

	ops, bytes, batches, errors, badICV atomic.Uint64
	closed                              atomic.Bool
}

// minWait is the least debt worth waiting for: shorter modelled times are
// accumulated on the core's clock and waited for together, since neither a
// timer nor a spin is finer than a few microseconds.
const minWait = 20 * time.Microsecond

func newInline(name string, m *model, virtual bool) *inline {
	return &inline{name: name, m: m, epoch: time.Now(), virtual: virtual,
		cores: make([]time.Duration, max(1, m.prof.Units)), loops: make(map[*offload.Batch]time.Duration)}
}

// ModelClock is the modelled time the busiest core is done, as time since
// the engine started.
func (e *inline) ModelClock() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Max(e.cores)
}

func (e *inline) Name() string { return e.name }

func (e *inline) Capabilities() offload.Capabilities {
	return offload.Capabilities{Suites: e.m.suites(), MaxBatch: cpu.MaxBatch, InPlace: true}
}

func (e *inline) NewSession(cfg offload.SessionConfig) (offload.Session, error) {
	return e.m.newSession(cfg)
}

func (e *inline) Submit(_ context.Context, b *offload.Batch) error { return e.TrySubmit(b) }

// TrySubmit runs the batch, books its modelled time on the least busy core
// and returns once the model says the core is done (or nearly: see minWait).
func (e *inline) TrySubmit(b *offload.Batch) error {
	if e.closed.Load() {
		return offload.ErrClosed
	}
	var work time.Duration
	var n, bad, failed uint64
	for i := range b.Ops {
		op := &b.Ops[i]
		cpu.Process(op)
		c, _ := e.m.cost(op)
		work += c
		n += uint64(len(op.Packet))
		switch op.Status {
		case offload.OK:
		case offload.BadICV:
			bad++
		default:
			failed++
		}
	}
	now := time.Since(e.epoch)
	e.mu.Lock()
	i := 0
	for j := range e.cores {
		if e.cores[j] < e.cores[i] {
			i = j
		}
	}
	start := e.cores[i]
	if e.virtual {
		// A caller's next batch starts after its last one in the model.
		start = max(start, e.loops[b])
	} else {
		start = max(start, now)
	}
	done := start + work
	e.cores[i] = done
	if e.virtual {
		e.loops[b] = done
	}
	e.mu.Unlock()
	if done-now > minWait {
		for done > time.Since(e.epoch) {
			if d := done - time.Since(e.epoch); d > 1500*time.Microsecond {
				time.Sleep(d - 1500*time.Microsecond)
				continue
			}
			runtimeYield()
		}
	}
	e.ops.Add(uint64(len(b.Ops)))
	e.bytes.Add(n)
	e.batches.Add(1)
	e.badICV.Add(bad)
	e.errors.Add(failed)
	if b.Done != nil {
		b.Done(b)
	}
	return nil
}

func (e *inline) Stats() offload.Stats {
	return offload.Stats{Ops: e.ops.Load(), Bytes: e.bytes.Load(), Batches: e.batches.Load(),
		Errors: e.errors.Load(), BadICV: e.badICV.Load()}
}

func (e *inline) Close() error {
	e.closed.Store(true)
	return nil
}

func runtimeYield() { runtime.Gosched() }
