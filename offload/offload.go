// Package offload owns the crypto engines of espgw: one batch interface,
// shaped like a crypto card's request rings (BSD crypto(9) and ubsec(4) MCRs,
// DPDK cryptodev bursts), a registry by name, and the engines themselves.
//
// An engine knows nothing of ESP framing. An Op hands it one ESP packet laid
// out as on the wire — SPI, sequence number, IV, payload, trailer, ICV — and
// the engine does the bulk work: encrypt and write the ICV (Seal), or verify
// the ICV in constant time and only then decrypt (Open).
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

// Capabilities describe what an engine can do.
type Capabilities struct {
	Suites   []sa.Suite
	MaxBatch int  // largest batch accepted by one Submit
	InPlace  bool // always true for espgw engines: output overwrites input
	Async    bool // completions arrive on another goroutine
}

// Stats are an engine's counters, named after the ubsec(4) driver's where
// they mean the same thing.
type Stats struct {
	Ops        uint64 // ops completed
	Bytes      uint64 // packet bytes processed
	Batches    uint64 // batches submitted
	Records    uint64 // command records (MCRs) issued to the card
	Interrupts uint64 // completion interrupts delivered
	QueueFull  uint64 // submissions refused or held because the queue was full
	MCRFull    uint64 // records that went out with the maximum aggregation
	MaxBatch   uint64 // largest record aggregation seen
	MaxQueue   uint64 // deepest request queue seen
	Errors     uint64 // ops that failed
	BadICV     uint64 // opens with a bad ICV
	QueueDepth uint64 // ops queued right now
}

// Batch is a set of ops submitted together. Done is called once, when every
// op has its Status, and batches complete in the order they were submitted.
type Batch struct {
	Ops  []Op
	Done func(*Batch)
}

// ErrQueueFull is returned by TrySubmit when the engine cannot take the batch
// now (ubsec's ERESTART); the caller retries later or uses Submit.
var ErrQueueFull = errors.New("offload: queue full")

// ErrClosed is returned for submissions to a closed engine.
var ErrClosed = errors.New("offload: engine closed")

// Engine is a crypto engine: inline CPU instructions, a descriptor ring, or
// an emulated card.
type Engine interface {
	Name() string
	Capabilities() Capabilities
	NewSession(SessionConfig) (Session, error)
	// Submit queues a batch, blocking while the engine is full, until ctx ends.
	Submit(ctx context.Context, b *Batch) error
	// TrySubmit queues a batch or returns ErrQueueFull without blocking.
	TrySubmit(b *Batch) error
	Stats() Stats
	Close() error
}
