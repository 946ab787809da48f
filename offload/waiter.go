package offload

import (
	"context"
	"fmt"
)

// Waiter runs batches synchronously on any engine: an Inline engine's Run is
// called directly, an asynchronous engine gets a Submit and is waited for.
// One Waiter serves one goroutine; it is reused so that waiting allocates
// nothing per batch.
type Waiter struct {
	engine Engine
	inline Inline // engine, when it is Inline
	batch  Batch
	done   chan struct{}
}

// NewWaiter returns a Waiter for batches on e.
func NewWaiter(e Engine) *Waiter {
	w := &Waiter{engine: e, done: make(chan struct{}, 1)}
	w.inline, _ = e.(Inline)
	w.batch.Done = w.signal
	return w
}

func (w *Waiter) signal(*Batch) { w.done <- struct{}{} }

// Engine returns the engine the Waiter runs batches on.
func (w *Waiter) Engine() Engine { return w.engine }

// Run has the engine work ops and returns when every op has its Status.
func (w *Waiter) Run(ctx context.Context, ops []*Op) error {
	if len(ops) == 0 {
		return nil
	}
	if w.inline != nil {
		if err := w.inline.Run(ops); err != nil {
			return fmt.Errorf("run %d ops on %s: %w", len(ops), w.engine.Name(), err)
		}
		return nil
	}
	w.batch.Ops = ops
	if err := w.engine.Submit(ctx, &w.batch); err != nil {
		return fmt.Errorf("submit %d ops to %s: %w", len(ops), w.engine.Name(), err)
	}
	// Once submitted, the engine owns the ops until Done: wait even if ctx
	// ends, so the caller may safely reuse its buffers.
	<-w.done
	w.batch.Ops = nil
	return nil
}
