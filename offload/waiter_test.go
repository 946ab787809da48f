package offload_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
)

// submitOnly hides an engine's Inline, so the Waiter takes the Submit path
// that asynchronous engines take.
type submitOnly struct{ offload.Engine }

// A Waiter marks the ops an engine refused as failed and says which engine
// refused, on both paths; Start and Wait pair up across goroutines.
func TestWaiter(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(offload.Engine) offload.Engine
		verb string
	}{
		{"inline", func(e offload.Engine) offload.Engine { return e }, "run 2 ops on cpu"},
		{"submit", func(e offload.Engine) offload.Engine { return submitOnly{e} }, "submit 2 ops to cpu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := cpu.New()
			w := offload.NewWaiter(tc.wrap(e))
			if err := w.Run(context.Background(), nil); err != nil {
				t.Fatalf("Run of no ops: %v", err)
			}
			done := make(chan struct{})
			go func() { w.Wait(); close(done) }()
			if err := w.Start(context.Background(), nil); err != nil {
				t.Fatalf("Start of no ops: %v", err)
			}
			<-done // Wait on another goroutine returns once Start has run

			e.Close()
			ops := []*offload.Op{{}, {}}
			err := w.Run(context.Background(), ops)
			if !errors.Is(err, offload.ErrClosed) || !strings.Contains(err.Error(), tc.verb) {
				t.Errorf("Run on a closed engine: %v, want %q and ErrClosed", err, tc.verb)
			}
			for i, op := range ops {
				if op.Status != offload.Failed {
					t.Errorf("op %d: status %v, want Failed", i, op.Status)
				}
			}
			ops[0].Status, ops[1].Status = offload.OK, offload.OK
			if err := w.Start(context.Background(), ops); err == nil {
				t.Error("Start on a closed engine: no error")
			}
			w.Wait() // also after a failed Start
			if ops[0].Status != offload.Failed {
				t.Errorf("after a failed Start: status %v, want Failed", ops[0].Status)
			}
		})
	}
}
