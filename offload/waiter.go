package offload

import (
	"context"
	"fmt"
)

// Waiter is the one way batches are run on an engine: an Inline engine's
// Run is called directly, an asynchronous engine gets a Submit and is
// waited for. Run does both halves on one goroutine; Start and Wait split
// them, so that one goroutine hands a batch over and another waits for it
// (the gateway's pipeline). One Waiter holds one batch at a time; it is
// reused, so running a batch allocates nothing. Ops the engine did not
// take come back with Status Failed.
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

// Run has the engine work ops and returns when every op has its Status.
func (w *Waiter) Run(ctx context.Context, ops []*Op) error {
	if len(ops) == 0 {
		return nil
	}
	if w.inline != nil {
		return w.runInline(ops)
	}
	err := w.Start(ctx, ops)
	w.Wait()
	return err
}

// Start hands ops to the engine: an Inline engine works them before Start
// returns, an asynchronous one gets them as one Submit. Every Start is
// followed by one Wait, also when Start fails; until Wait returns, the
// engine owns the ops.
func (w *Waiter) Start(ctx context.Context, ops []*Op) error {
	var err error
	switch {
	case len(ops) == 0:
	case w.inline != nil:
		err = w.runInline(ops)
	default:
		w.batch.Ops = ops
		if err = w.engine.Submit(ctx, &w.batch); err == nil {
			return nil // the engine's Done signals
		}
		err = fmt.Errorf("submit %d ops to %s: %w", len(ops), w.engine.Name(), err)
		failed(ops)
	}
	w.signal(nil)
	return err
}

// Wait returns when every op of the last Start has its Status. Once
// submitted, ops are the engine's until it is done with them, so Wait does
// not end with a context: the caller may reuse its buffers after it.
func (w *Waiter) Wait() {
	<-w.done
	w.batch.Ops = nil
}

func (w *Waiter) runInline(ops []*Op) error {
	if err := w.inline.Run(ops); err != nil {
		failed(ops)
		return fmt.Errorf("run %d ops on %s: %w", len(ops), w.engine.Name(), err)
	}
	return nil
}

// failed marks ops the engine did not take as failed, so that their
// packets are counted as engine failures.
func failed(ops []*Op) {
	for _, op := range ops {
		op.Status = Failed
	}
}
