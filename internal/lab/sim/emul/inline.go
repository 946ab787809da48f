package emul

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/espgw/espgw/offload"
)

// inline is an inline profile's engine: the ops run on the submitting
// goroutine, then the call returns at the modelled completion time.
type inline struct {
	name    string
	m       *model
	epoch   time.Time
	virtual bool // the cores' clocks run on the model alone (see Options.Virtual)

	mu    sync.Mutex
	cores []time.Duration                  // modelled time each core is next idle
	loops map[*offload.Batch]time.Duration // virtual: each batch's last modelled completion

	offload.InlineBase
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

func (e *inline) NewSession(cfg offload.SessionConfig) (offload.Session, error) {
	return e.m.newSession(cfg)
}

func (e *inline) Submit(_ context.Context, b *offload.Batch) error {
	return e.run(b.Ops, b)
}

// runner is an inline profile on the real clock: an offload.Inline, so
// callers run their batches on it directly. On a virtual clock the engine
// is only an offload.Engine: the model tells callers apart by their Batch,
// which Run does not have.
type runner struct{ *inline }

// Run works the ops and returns once the model says the core is done.
func (e runner) Run(ops []*offload.Op) error { return e.run(ops, nil) }

// run runs the ops, books their modelled time on the least busy core and
// returns once the model says the core is done (or nearly: see minWait).
// b is the caller's batch (nil from Run, on the real clock): on a virtual
// clock its next submission starts after its last one.
func (e *inline) run(ops []*offload.Op, b *offload.Batch) error {
	if e.Closed() {
		return offload.ErrClosed
	}
	var work time.Duration
	for _, op := range ops {
		offload.Process(op)
		c, _ := e.m.cost(op)
		work += c
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
		waitUntil(e.epoch, done)
	}
	e.Count(ops)
	if b != nil && b.Done != nil {
		b.Done(b)
	}
	return nil
}
