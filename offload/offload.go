// Package offload is the batch interface of espgw's crypto engines.
//
// The interface is shaped like a crypto card's request rings (BSD crypto(9)
// and ubsec(4) MCRs, DPDK cryptodev bursts). The engines live in its
// subpackages; package engines opens them by name.
//
// An engine knows nothing of ESP framing. An Op hands it one ESP packet laid
// out as on the wire — SPI, sequence number, IV, payload, trailer, ICV — and
// the engine does the bulk work: encrypt and write the ICV (Seal), or verify
// the ICV in constant time and only then decrypt (Open).
//
// Writing an engine is one package and one case in package engines:
// implement Engine; if the work runs on the caller's goroutine,
// also Inline (embed InlineBase for the counters and Close, answer Submit
// with SubmitInline), and callers will call Run directly, with no hand-off;
// if the engine's sessions can run an op on their own, make them
// Processors, so engines that schedule work (ring) can use them. The ops of
// a Batch belong to the caller's packets (esp.Packet owns its Op): an
// engine writes each Status in place and never keeps an op after Done.
package offload

import (
	"context"
	"errors"

	"github.com/espgw/espgw/sa"
)

// Direction says what an Op asks of the engine.
type Direction uint8

const (
	// Seal encrypts the payload and writes the ICV.
	Seal Direction = iota
	// Open verifies the ICV and, only if it is good, decrypts the payload.
	Open
)

func (d Direction) String() string {
	if d == Seal {
		return "seal"
	}
	return "open"
}

// Status is the outcome of one Op.
type Status uint8

const (
	// OK means the op completed.
	OK Status = iota
	// BadICV means an Open found an ICV that does not verify; nothing was decrypted.
	BadICV
	// BadLength means the packet's layout does not fit the suite (e.g. a CBC
	// payload that is not a whole number of blocks).
	BadLength
	// Failed means the engine could not run the op at all.
	Failed
)

func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case BadICV:
		return "bad-icv"
	case BadLength:
		return "bad-length"
	}
	return "failed"
}

// Op is one request: a whole ESP packet in Packet, from the SPI to the end
// of the ICV, worked in place. Callers keep Ops in reused slices so that
// submitting them allocates nothing.
type Op struct {
	Session Session
	Dir     Direction
	// Packet is SPI(4) | Seq(4) | IV | payload+padding+pad length+next header | ICV.
	Packet []byte
	// SeqHi is the high 32 bits of the ESN, used in the ICV (HMAC suites:
	// appended to the authenticated data, RFC 4303 §2.2.1; GCM: in the AAD,
	// RFC 4106 §5) when the session has ESN on.
	SeqHi uint32
	// Status is set by the engine when the op completes.
	Status Status
}

// SessionConfig is what an engine needs to build the key schedules of one SA.
type SessionConfig struct {
	Suite   sa.Suite
	EncKey  sa.Key
	AuthKey sa.Key
	ESN     bool
	// CipherOnly asks for a session with no integrity at all (the suite's
	// Auth must be none and its cipher not an AEAD): ops encrypt or decrypt
	// the payload and carry no ICV. It exists to measure a bulk cipher the
	// way `openssl speed -evp` does; ESP never asks for it, and an engine
	// that cannot do it returns an error from NewSession.
	CipherOnly bool
}

// Session is an engine's cached per-SA state: expanded keys, HMAC pads.
// A Session belongs to the engine that made it.
type Session interface {
	Suite() sa.Suite
	ESN() bool
	// Close releases the session; ops must no longer name it.
	Close() error
}

// Stats are an engine's counters, named after the ubsec(4) driver's where
// they mean the same thing.
type Stats struct {
	Ops         uint64 // ops completed
	Bytes       uint64 // packet bytes processed
	Batches     uint64 // batches submitted
	Records     uint64 // command records (MCRs) issued to the card
	Interrupts  uint64 // completion interrupts delivered
	Doorbells   uint64 // notifications that announced new requests to a device
	Completions uint64 // completions reaped from a device's used ring
	QueueFull   uint64 // submissions refused or held because the queue was full
	MCRFull     uint64 // records that went out with the maximum aggregation
	MaxBatch    uint64 // largest record aggregation seen
	MaxQueue    uint64 // deepest request queue seen
	Errors      uint64 // ops that failed
	BadICV      uint64 // opens with a bad ICV
	QueueDepth  uint64 // ops queued right now
}

// Batch is a set of ops submitted together. Done is called once, when every
// op has its Status, and batches complete in the order they were submitted.
// The ops belong to the caller (each packet owns its Op: esp.Packet.Op), so
// the engine writes every Status where the packet will read it.
type Batch struct {
	Ops  []*Op
	Done func(*Batch)
}

// ErrQueueFull is returned by a non-blocking submit (ring.Engine.TrySubmit)
// when the engine cannot take the batch now (ubsec's ERESTART).
var ErrQueueFull = errors.New("offload: queue full")

// ErrClosed is returned for submissions to a closed engine.
var ErrClosed = errors.New("offload: engine closed")

// Engine is a crypto engine: inline CPU instructions, a descriptor ring, or
// an emulated card. Adding one is a package implementing it and a line in
// the registry (package engines).
type Engine interface {
	Name() string
	// Suites lists what NewSession accepts.
	Suites() []sa.Suite
	NewSession(SessionConfig) (Session, error)
	// Submit queues a batch, blocking while the engine is full, until ctx
	// ends. Once Submit returned nil the engine owns the ops until Done.
	Submit(ctx context.Context, b *Batch) error
	Stats() Stats
	Close() error
}

// Inline is an Engine whose work runs on the calling goroutine (cpu, aesni,
// the inline emulated profiles). Callers holding a batch call Run and skip
// the Batch, the Done callback and the wait: for a batch of one, that
// bookkeeping would cost as much as the cipher. Engines without it complete
// asynchronously.
type Inline interface {
	Engine
	// Run gives every op its Status before it returns; it fails only when
	// the engine is closed, and then touches no op.
	Run(ops []*Op) error
}

// Processor is a Session that can run one op itself on the calling
// goroutine. Engines that schedule work rather than doing it (ring, emul)
// run their ops through it; the sessions of cpu (and everything that wraps
// them) and of aesni are Processors.
type Processor interface {
	Session
	Process(op *Op)
}

// Process runs op with its own session, or fails it when the session is
// not a Processor.
func Process(op *Op) {
	p, ok := op.Session.(Processor)
	if !ok {
		op.Status = Failed
		return
	}
	p.Process(op)
}

// SubmitInline is Submit for an Inline engine: Run, then Done.
func SubmitInline(e Inline, b *Batch) error {
	if err := e.Run(b.Ops); err != nil {
		return err
	}
	if b.Done != nil {
		b.Done(b)
	}
	return nil
}

// Refs returns a pointer to each of ops, for setting up a batch over ops
// kept in one slice. It allocates the slice it returns: keep the result.
func Refs(ops []Op) []*Op {
	refs := make([]*Op, len(ops))
	for i := range ops {
		refs[i] = &ops[i]
	}
	return refs
}
