// Package aesni is the offload engine on espgw's own AES-NI assembly.
//
// It is the instruction-level offload engine: AES-CBC in amd64 assembly
// (AES-NI), used the way a gateway holding a batch of packets can use it, as
// intel-ipsec-mb does. The seals of a batch are encrypted as up to eight
// independent CBC streams at once (multi-buffer), and each open is decrypted
// eight blocks at a time; see package internal/cbc. HMAC-SHA1 and
// HMAC-SHA256 run the same way across the packets of a batch, from inner and
// outer hash states precomputed per SA (package internal/sha): a batch's
// seal is one pass of CBC lanes, then one of SHA lanes; its open one pass of
// SHA lanes, then the decryptions. The other HMACs run on the standard
// library from precomputed states. AES-CCM's CBC-MAC runs on the same CBC
// assembly (package ccm does the rest). AES-GMAC runs on package gmac:
// GHASH on PCLMULQDQ, the tag mask on the AES-NI schedule. The other
// ciphers (3DES, AES-CTR, AES-GCM, ChaCha20-Poly1305 through x/crypto's
// assembly, NULL) go through the cpu engine's code.
//
// On CPUs without AES-NI, on other architectures and in builds with the
// purego tag the same engine runs with the pure-Go fallback of internal/cbc.
package aesni

import (
	"context"
	"crypto/aes"
	"crypto/subtle"
	"fmt"
	"sync"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/aesni/internal/cbc"
	"github.com/espgw/espgw/offload/aesni/internal/gmac"
	"github.com/espgw/espgw/offload/aesni/internal/sha"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/offload/internal/ccm"
	"github.com/espgw/espgw/sa"
)

// Name is the catalog name of this engine.
const Name = "aesni"

// Engine runs ops inline on the submitting goroutine. It is safe for
// concurrent use: each Submit borrows a worker's scratch from a pool.
type Engine struct {
	offload.InlineBase
	workers sync.Pool
}

// New returns the engine.
func New() *Engine {
	e := &Engine{}
	e.workers.New = func() any { return newWorker() }
	return e
}

// Name returns "aesni".
func (e *Engine) Name() string { return Name }

// Session is one SA's state: for aes-cbc the AES schedules and the
// precomputed HMAC states, for aes-gmac its GMAC key, for the other suites
// the cpu engine's session.
type Session struct {
	cpu    *cpu.Session // nil for aes-cbc and aes-gmac
	cbc    bool         // aes-cbc: the ops run here, not in cpu
	key    *cbc.Key     // aes-cbc
	gmac   *gmac.Key    // aes-gmac
	mac    hmacKey
	icvLen int
	esn    bool
	// laneKey is the HMAC for package sha's lanes, if lanes says it runs
	// there (HMAC-SHA1 and HMAC-SHA256).
	laneKey sha.Key
	lanes   bool
	// cipherOnly sessions (offload.SessionConfig.CipherOnly) have no ICV:
	// espgw speed times the bare cipher with them.
	cipherOnly bool
	// workers lends Process a worker's scratch: the engine's pool.
	workers *sync.Pool
}

// NewSession builds the key schedules for one SA.
func (e *Engine) NewSession(cfg offload.SessionConfig) (offload.Session, error) {
	return newSession(cfg, &e.workers)
}

func newSession(cfg offload.SessionConfig, workers *sync.Pool) (*Session, error) {
	s := &Session{icvLen: cfg.Suite.ICVLen(), esn: cfg.ESN, cipherOnly: cfg.CipherOnly, workers: workers}
	var err error
	switch cfg.Suite.Cipher {
	case sa.CipherAESCBC:
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("aesni: new %s session: %w", cfg.Suite, err)
		}
	case sa.CipherAESGMAC:
		if s.gmac, err = newGMACKey(cfg); err != nil {
			return nil, fmt.Errorf("aesni: %w", err)
		}
		return s, nil
	case sa.CipherAESCCM8, sa.CipherAESCCM12, sa.CipherAESCCM16:
		s.cpu, err = newCCMSession(cfg)
	default:
		s.cpu, err = cpu.NewSession(cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("aesni: %w", err)
	}
	if cfg.Suite.Cipher != sa.CipherAESCBC {
		return s, nil
	}
	s.cbc = true
	s.key = new(cbc.Key)
	if err := s.key.Init(cfg.EncKey); err != nil {
		return nil, fmt.Errorf("aesni: new %s session: %w", cfg.Suite, err)
	}
	if s.cipherOnly {
		return s, nil
	}
	if s.mac, err = newHMACKey(cfg.Suite.Auth, cfg.AuthKey); err != nil {
		return nil, fmt.Errorf("aesni: new %s session: %w", cfg.Suite, err)
	}
	if err := s.initLanes(cfg.Suite.Auth, cfg.AuthKey); err != nil {
		return nil, fmt.Errorf("aesni: new %s session: %w", cfg.Suite, err)
	}
	return s, nil
}

// Close is a no-op: the schedules are garbage collected.
func (s *Session) Close() error { return nil }

// Process runs one op on the calling goroutine: the session is an
// offload.Processor, so engines that schedule work (ring) can run it. One
// op has nothing to gather: a seal is one CBC stream, and only the HMAC
// needs a worker's scratch (its hash states).
func (s *Session) Process(op *offload.Op) {
	if !s.cbc {
		s.processOther(op)
		return
	}
	iv, payload, ok := s.layout(op)
	if !ok {
		op.Status = offload.BadLength
		return
	}
	if s.cipherOnly {
		var err error
		if op.Dir == offload.Open {
			err = s.key.DecryptInPlace(iv, payload)
		} else {
			err = s.key.EncryptInPlace(iv, payload)
		}
		op.Status = offload.OK
		if err != nil {
			op.Status = offload.Failed
		}
		return
	}
	w := s.workers.Get().(*worker)
	if op.Dir == offload.Open {
		w.open(s, op)
	} else if err := s.key.EncryptInPlace(iv, payload); err != nil {
		op.Status = offload.Failed
	} else {
		w.writeICV(s, op)
	}
	s.workers.Put(w)
}

// Run works every op on the calling goroutine. A batch of one is the
// op's own Process; larger batches borrow a worker, whose scratch gathers
// the seals into multi-buffer runs.
func (e *Engine) Run(ops []*offload.Op) error {
	if e.Closed() {
		return offload.ErrClosed
	}
	if len(ops) == 0 {
		return nil
	}
	if s, ok := ops[0].Session.(*Session); ok && len(ops) == 1 {
		s.Process(ops[0])
		e.CountOne(ops[0])
		return nil
	}
	w := e.workers.Get().(*worker)
	w.run(ops)
	e.workers.Put(w)
	e.Count(ops)
	return nil
}

// Submit runs the batch inline and calls its Done before returning.
func (e *Engine) Submit(_ context.Context, b *offload.Batch) error {
	return offload.SubmitInline(e, b)
}

// sealChunk is how many seals a worker gathers for one multi-buffer run;
// larger batches run in chunks of this size.
const sealChunk = 64

// worker is the scratch one batch needs: the multi-buffer jobs of its seals
// and the hash states. Reused, so a batch allocates nothing.
type worker struct {
	enc   cbc.Encrypter
	jobs  []cbc.Job
	ops   []*offload.Op
	macer *macer
	// seals and opens gather the HMACs that package sha's lanes run.
	seals, opens *macBatch
	sum          [sha.MaxSize]byte
}

func newWorker() *worker {
	return &worker{
		jobs:  make([]cbc.Job, 0, sealChunk),
		ops:   make([]*offload.Op, 0, sealChunk),
		macer: newMacer(),
		seals: newMacBatch(),
		opens: newMacBatch(),
	}
}

// run gives every op its Status. The aes-cbc seals are gathered and
// encrypted together, then MACed together; the opens are MACed together,
// then each is decrypted (CBC decryption is parallel within a packet).
func (w *worker) run(ops []*offload.Op) {
	for _, op := range ops {
		s, ok := op.Session.(*Session)
		switch {
		case !ok:
			op.Status = offload.Failed
		case !s.cbc:
			s.processOther(op)
		case op.Dir == offload.Open:
			w.addOpen(s, op)
		default:
			w.addSeal(s, op)
		}
	}
	w.flushSeals()
	w.opens.open()
}

// addOpen queues an open whose HMAC runs in lanes, and opens any other
// at once.
func (w *worker) addOpen(s *Session, op *offload.Op) {
	if _, _, ok := s.layout(op); !ok || !s.lanes {
		w.open(s, op)
		return
	}
	w.opens.add(s, op)
	if w.opens.full() {
		w.opens.open()
	}
}

// layout takes an aes-cbc op's IV (its nonce) and text, or says they do
// not fit: the ranges out of Buf, an IV that is not one block, text that
// is not whole blocks, an ICV not of the suite's length.
func (s *Session) layout(op *offload.Op) (iv *[cbc.BlockSize]byte, text []byte, ok bool) {
	if !op.Fits() || op.NonceLen != cbc.BlockSize || op.Cipher.Len%cbc.BlockSize != 0 || (!s.cipherOnly && op.ICV.Len != s.icvLen) {
		return nil, nil, false
	}
	return &op.Nonce, op.Bytes(op.Cipher), true
}

func (w *worker) open(s *Session, op *offload.Op) {
	iv, payload, ok := s.layout(op)
	if !ok {
		op.Status = offload.BadLength
		return
	}
	if !s.cipherOnly {
		sum, err := w.icv(s, op.Bytes(op.Auth), op.SeqHi)
		if err != nil {
			op.Status = offload.Failed
			return
		}
		if subtle.ConstantTimeCompare(sum[:s.icvLen], op.Bytes(op.ICV)) != 1 {
			op.Status = offload.BadICV
			return
		}
	}
	if err := s.key.DecryptInPlace(iv, payload); err != nil {
		op.Status = offload.Failed
		return
	}
	op.Status = offload.OK
}

// decrypt decrypts an open whose ICV has been checked.
func (s *Session) decrypt(op *offload.Op) {
	iv, payload, _ := s.layout(op)
	op.Status = offload.OK
	if err := s.key.DecryptInPlace(iv, payload); err != nil {
		op.Status = offload.Failed
	}
}

// icv is one packet's full HMAC, in the worker's scratch: one stream of
// package sha where it runs the session's HMAC, else the standard library.
func (w *worker) icv(s *Session, authed []byte, seqHi uint32) ([]byte, error) {
	if s.lanes {
		if err := s.laneKey.MAC(&w.sum, authed, s.esn, seqHi); err != nil {
			return nil, err
		}
		return w.sum[:], nil
	}
	return w.macer.mac(&s.mac, authed, s.esn, seqHi)
}

func (w *worker) addSeal(s *Session, op *offload.Op) {
	iv, payload, ok := s.layout(op)
	if !ok {
		op.Status = offload.BadLength
		return
	}
	w.jobs = append(w.jobs, cbc.Job{Key: s.key, IV: iv, Dst: payload, Src: payload})
	w.ops = append(w.ops, op)
	if len(w.jobs) == cap(w.jobs) {
		w.flushSeals()
	}
}

// writeICV MACs an encrypted seal into its ICV (none for a cipher-only
// session) and gives the op its Status.
func (w *worker) writeICV(s *Session, op *offload.Op) {
	if s.cipherOnly {
		op.Status = offload.OK
		return
	}
	sum, err := w.icv(s, op.Bytes(op.Auth), op.SeqHi)
	if err != nil {
		op.Status = offload.Failed
		return
	}
	copy(op.Bytes(op.ICV), sum[:s.icvLen])
	op.Status = offload.OK
}

// flushSeals encrypts the gathered seals together, then writes their ICVs
// (encrypt-then-MAC: the ICV covers the ciphertext), those of package sha's
// HMACs in one run of its lanes.
func (w *worker) flushSeals() {
	if len(w.jobs) == 0 {
		return
	}
	err := w.enc.EncryptBatch(w.jobs)
	for _, op := range w.ops {
		s := op.Session.(*Session)
		switch {
		case err != nil:
			op.Status = offload.Failed
		case s.lanes && !s.cipherOnly:
			w.seals.add(s, op)
		default:
			w.writeICV(s, op)
		}
	}
	w.seals.seal()
	clear(w.jobs)
	clear(w.ops)
	w.jobs, w.ops = w.jobs[:0], w.ops[:0]
}

// newCCMSession is the cpu engine's session for an AES-CCM suite with its
// CBC-MAC on this package's CBC assembly, eight blocks per call.
func newCCMSession(cfg offload.SessionConfig) (*cpu.Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new %s session: %w", cfg.Suite, err)
	}
	raw := []byte(cfg.EncKey[:len(cfg.EncKey)-cfg.Suite.Cipher.SaltLen()])
	key, err := cbc.NewKey(raw)
	if err != nil {
		return nil, fmt.Errorf("new %s session: %w", cfg.Suite, err)
	}
	b, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("new %s session: %w", cfg.Suite, err)
	}
	mac := func(x *[cbc.BlockSize]byte, src, scratch []byte) {
		for len(src) > 0 {
			n := min(len(src), len(scratch))
			key.Encrypt(x, scratch[:n], src[:n]) // whole blocks, buffers of ours: cannot fail
			copy(x[:], scratch[n-cbc.BlockSize:n])
			src = src[n:]
		}
	}
	a, err := ccm.New(b, 11, cfg.Suite.ICVLen(), mac)
	if err != nil {
		return nil, fmt.Errorf("new %s session: %w", cfg.Suite, err)
	}
	return cpu.NewAEADSession(cfg, a)
}

// processOther runs an op of a suite other than aes-cbc: aes-gmac here,
// the others in the cpu engine's session.
func (s *Session) processOther(op *offload.Op) {
	if s.gmac == nil {
		s.cpu.Process(op)
		return
	}
	if !op.Fits() || op.NonceLen != gmac.NonceSize || op.ICV.Len != gmac.TagSize {
		op.Status = offload.BadLength
		return
	}
	nonce := (*[gmac.NonceSize]byte)(op.Nonce[:gmac.NonceSize])
	aad, authed, icv := op.AADBytes(), op.Bytes(op.Auth), op.Bytes(op.ICV)
	if op.Dir == offload.Seal {
		s.gmac.Tag((*[gmac.TagSize]byte)(icv), nonce, aad, authed)
		op.Status = offload.OK
		return
	}
	op.Status = offload.OK
	if !s.gmac.Verify(icv, nonce, aad, authed) {
		op.Status = offload.BadICV
	}
}

// newGMACKey is an aes-gmac session's key: the encryption key without its
// 4-byte salt, which comes with every op in Op.Nonce.
func newGMACKey(cfg offload.SessionConfig) (*gmac.Key, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new %s session: %w", cfg.Suite, err)
	}
	k := new(gmac.Key)
	if err := k.Init([]byte(cfg.EncKey[:len(cfg.EncKey)-cfg.Suite.Cipher.SaltLen()])); err != nil {
		return nil, fmt.Errorf("new %s session: %w", cfg.Suite, err)
	}
	return k, nil
}
