// Package cpu is the reference offload engine: every op runs inline on the
// submitting goroutine with Go's standard library ciphers (AES-NI, SHA-NI
// underneath where the CPU has them). Other engines reuse its Session for the
// actual cipher work and add queueing, batching or timing around it.
package cpu

import (
	"context"
	"sync/atomic"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/sa"
)

// Name is the registry name of this engine.
const Name = "cpu"

// MaxBatch is the largest batch one Submit takes.
const MaxBatch = 1024

// Engine runs ops inline. It is safe for concurrent use.
type Engine struct {
	counters offload.Counters
	closed   atomic.Bool
}

// New returns the inline engine.
func New() *Engine { return &Engine{} }

// Name returns "cpu".
func (e *Engine) Name() string { return Name }

// Capabilities lists every suite espgw knows.
func (e *Engine) Capabilities() offload.Capabilities {
	return offload.Capabilities{Suites: AllSuites(), MaxBatch: MaxBatch, InPlace: true}
}

// NewSession builds the key schedules for one SA.
func (e *Engine) NewSession(cfg offload.SessionConfig) (offload.Session, error) {
	return NewSession(cfg)
}

// Submit runs the batch inline and calls its Done before returning.
func (e *Engine) Submit(_ context.Context, b *offload.Batch) error { return e.TrySubmit(b) }

// TrySubmit is Submit: an inline engine never has a full queue.
func (e *Engine) TrySubmit(b *offload.Batch) error {
	if e.closed.Load() {
		return offload.ErrClosed
	}
	for i := range b.Ops {
		Process(&b.Ops[i])
	}
	e.counters.Count(b)
	if b.Done != nil {
		b.Done(b)
	}
	return nil
}

// Stats returns the engine's counters.
func (e *Engine) Stats() offload.Stats { return e.counters.Stats() }

// Close stops the engine from taking more work.
func (e *Engine) Close() error {
	e.closed.Store(true)
	return nil
}

// Process runs one op with the cipher work of its session, which must be a
// *Session of this package (or embed one, see Unwrap).
func Process(op *offload.Op) {
	s, ok := op.Session.(interface{ CPUSession() *Session })
	if !ok {
		op.Status = offload.Failed
		return
	}
	s.CPUSession().Process(op)
}

// AllSuites lists every cipher and auth combination espgw supports.
func AllSuites() []sa.Suite {
	var out []sa.Suite
	for _, c := range []sa.Cipher{sa.CipherAESCBC, sa.Cipher3DES, sa.CipherAESCTR, sa.CipherNull} {
		for _, a := range []sa.Auth{sa.AuthHMACSHA1_96, sa.AuthHMACSHA256_128, sa.AuthHMACSHA384_192, sa.AuthHMACSHA512_256, sa.AuthHMACMD5_96} {
			out = append(out, sa.Suite{Cipher: c, Auth: a})
		}
	}
	return append(out, sa.Suite{Cipher: sa.CipherAESGCM16, Auth: sa.AuthNone})
}
