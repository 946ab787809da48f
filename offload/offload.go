// Package offload is the crypto engine contract of espgw.
//
// The interface is shaped like a crypto card's request rings (BSD crypto(9)
// and ubsec(4) MCRs, DPDK cryptodev bursts). The engines live in its
// subpackages; package engines opens them by name.
//
// An engine does the crypto and knows nothing of ESP. Package esp lays out
// every request (esp.Layout), once per packet. An Op names the packet's
// bytes (Buf) and, as ranges of them, the IV, the text the cipher runs over
// (Cipher), the bytes the ICV covers (Auth) and the ICV. It also carries
// what esp built: the nonce or counter block the cipher starts from, the
// associated data of the AEADs (SPI, ESN high bits, sequence number), and
// the ESN high bits an HMAC appends. This is the shape of a DPDK crypto op
// and of Go's cipher.AEAD. An engine reads the op's fields and its
// session's keys, and nothing else: no header length, no field offsets, no
// trailer.
//
// Seal encrypts Cipher, then writes the ICV over Auth. Open verifies the
// ICV in constant time, and decrypts only if it is good. An op whose ranges
// do not fit its suite (CBC text that is not whole blocks, an ICV of the
// wrong length, a range outside Buf) is BadLength. An engine writes each
// op's Status in place and never keeps an op after its batch is done.
//
// Writing an engine is one package and one case in package engines:
// implement Engine. If the work runs on the caller's goroutine, also
// implement Inline (embed InlineBase for the counters and Close, answer
// Submit with SubmitInline); callers then call Run directly, with no
// hand-off. If the engine's sessions can run an op on their own, make them
// Processors, so that engines that schedule work (ring) can use them. The
// ops of a Batch belong to the caller's packets (esp.Packet owns its Op).
package offload

import (
	"context"
	"errors"
	"fmt"
	"slices"

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

// Range is the part of an Op's Buf from Off, Len bytes long.
type Range struct{ Off, Len int }

// End is the offset just past the range.
func (r Range) End() int { return r.Off + r.Len }

// Op is one request on one packet in Buf, worked in place. The caller
// (package esp) lays the request out: every range and every built field
// below is computed there, once, and an engine reads them without knowing
// where they came from. Callers keep Ops in reused slices so that
// submitting them allocates nothing.
type Op struct {
	Session Session
	Dir     Direction
	// Buf holds the packet; the ranges index it.
	Buf []byte
	// IV is the IV as the packet carries it. Engines that build their own
	// nonce from it and a salt (the kernel's templates) read it; the others
	// take Nonce.
	IV Range
	// Cipher is what the cipher runs over: encrypted on Seal, decrypted on
	// Open. For the null cipher and aes-gmac it stays as it is, and AF_ALG
	// still sends it as the request's text.
	Cipher Range
	// Auth is what the ICV covers as it lies in Buf: for an HMAC, from the
	// start of the packet to the end of Cipher, followed by SeqHi when the
	// session has ESN on; for aes-gmac, the IV and Cipher, after AAD. It is
	// empty for the other AEADs, whose tag covers AAD and Cipher.
	Auth Range
	// ICV is where Seal writes the ICV and Open reads it. For the AEADs it
	// follows Cipher directly, as cipher.AEAD wants the tag. It is empty
	// for a cipher-only session.
	ICV Range
	// Nonce is what the cipher starts from, NonceLen bytes: the CBC IV, the
	// RFC 3686 counter block (nonce, IV, counter 1), or the AEADs' salt and
	// IV (12 bytes; 11 for CCM).
	Nonce    [16]byte
	NonceLen uint8
	// AADLen is the length of AAD: 8, or 12 with ESN.
	AADLen uint8
	// AAD is the associated data of the AEADs and of AF_ALG's authenc
	// templates: SPI, the high 32 bits of the sequence number with ESN
	// (RFC 4106 §5, RFC 4543 §3.3, RFC 4309 §5, RFC 7634 §2.1), and its low
	// 32 bits.
	AAD [12]byte
	// SeqHi is the high 32 bits of the sequence number, appended to Auth
	// for an HMAC when the session has ESN on (RFC 4303 §2.2.1).
	SeqHi uint32
	// Status is set by the engine when the op completes.
	Status Status
}

// Bytes returns the part of Buf that r covers.
func (op *Op) Bytes(r Range) []byte { return op.Buf[r.Off : r.Off+r.Len] }

// NonceBytes returns the built nonce.
func (op *Op) NonceBytes() []byte { return op.Nonce[:op.NonceLen] }

// AADBytes returns the built associated data.
func (op *Op) AADBytes() []byte { return op.AAD[:op.AADLen] }

// Fits reports whether every range lies in Buf and the built fields are
// no longer than their arrays; an engine fails an op that does not fit
// rather than index out of it.
func (op *Op) Fits() bool {
	n := len(op.Buf)
	return op.IV.in(n) && op.Cipher.in(n) && op.Auth.in(n) && op.ICV.in(n) &&
		int(op.NonceLen) <= len(op.Nonce) && int(op.AADLen) <= len(op.AAD)
}

// in reports whether r lies in a buffer of n bytes.
func (r Range) in(n int) bool {
	return r.Off >= 0 && r.Len >= 0 && r.Off <= n && r.Len <= n-r.Off
}

// SessionConfig is what an engine needs to build the key schedules of one SA.
type SessionConfig struct {
	Suite sa.Suite
	// EncKey is the encryption key material as the SA carries it, with
	// any salt or nonce at its end (sa.Cipher.SaltLen): an engine that
	// takes Op.Nonce drops it, one that hands the kernel the IV keeps it.
	EncKey  sa.Key
	AuthKey sa.Key
	// ESN puts the high sequence bits in the ICV. For the AEADs they are
	// in Op.AAD already; an HMAC appends Op.SeqHi to Op.Auth.
	ESN bool
	// CipherOnly asks for a session with no integrity at all (the suite's
	// Auth must be none and its cipher one that encrypts and is not an
	// AEAD): ops encrypt or decrypt Cipher and carry no ICV. It exists to
	// measure a bulk cipher the way `openssl speed -evp` does; ESP never
	// asks for it, and an engine that cannot do it returns an error from
	// NewSession.
	CipherOnly bool
}

// Validate checks the suite and its key lengths, or, for a cipher-only
// session, that the suite has a cipher that encrypts, no integrity, and a
// key that fits. The null cipher has no cipher-only session: with no
// integrity either it would protect nothing (RFC 4303 §3.2 refuses an SA
// with neither).
func (c SessionConfig) Validate() error {
	s := c.Suite
	if !c.CipherOnly {
		return s.ValidateKeys(c.EncKey, c.AuthKey)
	}
	if s.Auth != sa.AuthNone || s.Cipher.IsAEAD() || !s.Cipher.Encrypts() || len(c.AuthKey) != 0 {
		return fmt.Errorf("a cipher-only session needs a cipher that encrypts, not an AEAD, with auth none and no auth key, not %s", s)
	}
	if !slices.Contains(s.EncKeyLens(), len(c.EncKey)) {
		return fmt.Errorf("enc-key for %s is %d bytes, want %v", s.Cipher, len(c.EncKey), s.EncKeyLens())
	}
	return nil
}

// Session is an engine's cached per-SA state: expanded keys, HMAC pads.
// A Session belongs to the engine that made it.
type Session interface {
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

// ErrClosed is returned for submissions to a closed engine.
var ErrClosed = errors.New("offload: engine closed")

// Engine is a crypto engine: inline CPU instructions, a descriptor ring, or
// an emulated card. Adding one is a package implementing it and a case in
// package engines (the lab's models: in package sim).
type Engine interface {
	Name() string
	// NewSession builds a session, or says why the engine cannot do the
	// suite: what an engine does is what it accepts here.
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
