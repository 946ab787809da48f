// Package cpu is the reference offload engine, on Go's standard library
// ciphers.
//
// It is the reference offload engine: every op runs inline on the submitting
// goroutine with Go's standard library ciphers (AES-NI, SHA-NI underneath
// where the CPU has them), x/crypto's ChaCha20-Poly1305 and package ccm's
// AES-CCM. Other engines reuse its Session for the actual cipher work and
// add queueing, batching or timing around it.
package cpu

import (
	"context"
	"slices"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/sa"
)

// Name is the catalog name of this engine.
const Name = "cpu"

// Engine runs ops inline. It is safe for concurrent use.
type Engine struct {
	offload.InlineBase
}

// New returns the inline engine.
func New() *Engine { return &Engine{} }

// Name returns "cpu".
func (e *Engine) Name() string { return Name }

// NewSession builds the key schedules for one SA.
func (e *Engine) NewSession(cfg offload.SessionConfig) (offload.Session, error) {
	return NewSession(cfg)
}

// Run works every op on the calling goroutine.
func (e *Engine) Run(ops []*offload.Op) error {
	if e.Closed() {
		return offload.ErrClosed
	}
	for _, op := range ops {
		if s, ok := op.Session.(*Session); ok {
			s.Process(op) // the common case, without an interface assertion
		} else {
			offload.Process(op)
		}
	}
	e.Count(ops)
	return nil
}

// Submit runs the batch inline and calls its Done before returning.
func (e *Engine) Submit(_ context.Context, b *offload.Batch) error {
	return offload.SubmitInline(e, b)
}

// Suites lists the suites of AllSuites that this package's sessions do:
// all but aes-gcm-8, whose 8-byte ICV Go's GCM does not take.
func Suites() []sa.Suite {
	return slices.DeleteFunc(AllSuites(), func(s sa.Suite) bool { return s.Cipher == sa.CipherAESGCM8 })
}

// AllSuites lists every cipher and auth combination espgw supports on
// some engine.
func AllSuites() []sa.Suite {
	var out []sa.Suite
	for _, c := range []sa.Cipher{sa.CipherAESCBC, sa.Cipher3DES, sa.CipherAESCTR, sa.CipherNull} {
		for _, a := range []sa.Auth{sa.AuthHMACSHA1_96, sa.AuthHMACSHA256_128, sa.AuthHMACSHA384_192, sa.AuthHMACSHA512_256, sa.AuthHMACMD5_96} {
			out = append(out, sa.Suite{Cipher: c, Auth: a})
		}
	}
	for _, c := range []sa.Cipher{sa.CipherAESGCM16, sa.CipherAESGCM12, sa.CipherAESGCM8, sa.CipherChaCha20Poly1305,
		sa.CipherAESGMAC, sa.CipherAESCCM8, sa.CipherAESCCM12, sa.CipherAESCCM16} {
		out = append(out, sa.Suite{Cipher: c, Auth: sa.AuthNone})
	}
	return out
}
