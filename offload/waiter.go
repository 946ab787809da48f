package offload

import (
	"context"
	"fmt"
)

// Waiter runs batches synchronously on any engine, inline or asynchronous.
// One Waiter serves one goroutine; it is reused so that waiting allocates
// nothing per batch.
type Waiter struct {
	batch Batch
	done  chan struct{}
}

// NewWaiter returns a Waiter ready for use.
func NewWaiter() *Waiter {
	w := &Waiter{done: make(chan struct{}, 1)}
	w.batch.Done = w.signal
	return w
}

func (w *Waiter) signal(*Batch) { w.done <- struct{}{} }

// Run submits ops to e and returns when every op has its Status.
func (w *Waiter) Run(ctx context.Context, e Engine, ops []Op) error {
	if len(ops) == 0 {
		return nil
	}
	w.batch.Ops = ops
	if err := e.Submit(ctx, &w.batch); err != nil {
		return fmt.Errorf("submit %d ops to %s: %w", len(ops), e.Name(), err)
	}
	// Once submitted, the engine owns the ops until Done: wait even if ctx
	// ends, so the caller may safely reuse its buffers.
	<-w.done
	return nil
}
