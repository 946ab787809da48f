package afalg

import (
	"errors"
	"fmt"
	"time"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/afalg/internal/kcapi"
	"github.com/espgw/espgw/sa"
)

// session is one SA's transform on the kernel and its operation sockets,
// one per worker.
type session struct {
	e          *Engine
	suite      sa.Suite
	cipherOnly bool
	aead       bool // the cipher computes the ICV (rfc4106, rfc4543, rfc4309, rfc7539esp)
	ivLen      int
	icvLen     int
	cbcBlock   int // a CBC cipher's block, which the text must be whole blocks of; 1 for the others
	tfm        *kcapi.Transform
	ops        []*kcapi.Op
}

// NewSession binds a transform for the SA's suite, sets its key and tag
// length, and accepts one operation socket per worker.
func (e *Engine) NewSession(cfg offload.SessionConfig) (offload.Session, error) {
	s, err := e.newSession(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: new %s session: %w", e.name, cfg.Suite, err)
	}
	return s, nil
}

func (e *Engine) newSession(cfg offload.SessionConfig) (*session, error) {
	suite := cfg.Suite
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	algs, err := kcapi.ReadAlgs()
	if err != nil {
		return nil, err
	}
	p, err := planFor(suite, cfg.ESN, cfg.CipherOnly, e.opts.Driver, algs)
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, e.noteSuffix())
	}
	s := &session{e: e, suite: suite, cipherOnly: cfg.CipherOnly,
		aead: suite.Cipher.IsAEAD(), ivLen: suite.IVLen(), icvLen: suite.ICVLen(), cbcBlock: 1}
	switch suite.Cipher {
	case sa.CipherAESCBC:
		s.cbcBlock = 16
	case sa.Cipher3DES:
		s.cbcBlock = 8
	}
	if s.cipherOnly {
		s.icvLen = 0
	}
	s.tfm, err = kcapi.Bind(p.kind, p.bind)
	if err != nil {
		return nil, e.bindError(p, err, algs)
	}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	key := []byte(cfg.EncKey)
	if p.kind == kcapi.AEAD && !s.aead {
		key = kcapi.AuthencKey(cfg.AuthKey, cfg.EncKey)
	}
	if err := s.tfm.SetKey(key); err != nil {
		return nil, err
	}
	if p.kind == kcapi.AEAD {
		if err := s.tfm.SetAuthSize(s.icvLen); err != nil {
			return nil, err
		}
	}
	for range e.opts.Sockets + 1 { // the workers', and the inline path's
		op, err := s.tfm.Accept(s.ivLen)
		if err != nil {
			return nil, err
		}
		s.ops = append(s.ops, op)
	}
	// The instance exists now: read which driver the kernel gave us.
	if after, err := kcapi.ReadAlgs(); err == nil {
		algs = after
	}
	d := offload.Driver{Algorithm: p.alg, Driver: p.bind, Note: e.note}
	if p.bind == p.alg {
		if best, found := algs.Best(p.alg); found {
			d.Driver = best.Driver
		}
	}
	d.Module = describe(d.Driver, algs)
	e.noteDriver(d)
	ok = true
	return s, nil
}

// bindError explains a bind the kernel refused.
func (e *Engine) bindError(p plan, err error, algs kcapi.Algs) error {
	if errors.Is(err, kcapi.ErrNoAFALG) {
		return err
	}
	algif := "algif_aead"
	if p.kind == kcapi.SKCipher {
		algif = "algif_skcipher"
	}
	return fmt.Errorf("%w: the kernel has no %s %s (is %s loaded? /proc/crypto offers %s for %s)%s",
		err, p.kind, p.bind, algif, offering(algs, innermostOf(p)), innermostOf(p), e.noteSuffix())
}

func innermostOf(p plan) string {
	if p.kind == kcapi.SKCipher {
		return p.alg
	}
	return innermost(p.alg)
}

// Close closes the operation sockets and the transform.
func (s *session) Close() error {
	var errs []error
	for _, op := range s.ops {
		errs = append(errs, op.Close())
	}
	s.ops = nil
	if s.tfm != nil {
		errs = append(errs, s.tfm.Close())
		s.tfm = nil
	}
	return errors.Join(errs...)
}

// worker is one worker goroutine's request buffers.
type worker struct {
	e  *Engine
	id int
	// direct: requests keep the thread (kcapi.Op.DoDirect). Only the
	// submitter's own socket does, while its requests stay shorter than
	// directLimit: the submitter waits for them anyway, and no worker
	// needs its P meanwhile.
	direct  bool
	slow    int // direct requests in a row longer than directLimit
	in, out kcapi.Vec
	assoc   [12 + 16]byte // where the kernel copies the associated data back to
	saved   []byte        // an open's ciphertext, put back if the tag fails
}

func newWorker(e *Engine, id int, direct bool) *worker {
	return &worker{e: e, id: id, direct: direct, saved: make([]byte, 16<<10)}
}

// The submitter's socket stops holding its thread after directSlow
// requests in a row longer than directLimit: a device that slow gains
// nothing from it, and the P is better given to other goroutines (one slow
// request alone may be the host's scheduling, under QEMU).
const (
	directLimit = time.Millisecond
	directSlow  = 8
)

// process runs one op as one request on the worker's socket of its session.
func (w *worker) process(op *offload.Op) {
	s, ok := op.Session.(*session)
	if !ok || s.e != w.e || w.id >= len(s.ops) {
		op.Status = offload.Failed
		return
	}
	if !op.Fits() || op.IV.Len != s.ivLen || op.ICV.Len != s.icvLen || op.Cipher.Len%s.cbcBlock != 0 {
		op.Status = offload.BadLength
		return
	}
	seal := op.Dir == offload.Seal
	iv, text, icv := op.Bytes(op.IV), op.Bytes(op.Cipher), op.Bytes(op.ICV)
	w.in.Reset()
	w.out.Reset()
	if s.cipherOnly {
		if len(text) == 0 { // the kernel would wait for data that never comes
			op.Status = offload.OK
			return
		}
		w.in.Add(text)
		op.Status = w.do(s, op, seal, iv, 0, len(text))
		return
	}
	// The associated data is Op.AAD and the IV: SPI | [seq high] | seq
	// low | IV, the order authenc, authencesn and the rfc templates read
	// it in. The kernel copies it to the output too, into scratch.
	aad := op.AADBytes()
	assoc := len(aad) + len(iv)
	if assoc > len(w.assoc) {
		op.Status = offload.BadLength
		return
	}
	w.in.Add(aad)
	w.in.Add(iv)
	w.out.Add(w.assoc[:assoc])
	if seal {
		w.in.Add(text)
		w.out.Add(text)
		w.out.Add(icv)
		op.Status = w.do(s, op, true, iv, assoc, assoc+len(text)+len(icv))
		return
	}
	w.in.Add(text)
	w.in.Add(icv)
	w.out.Add(text)
	if !s.aead {
		if len(text) > len(w.saved) {
			w.saved = make([]byte, len(text))
		}
		copy(w.saved, text)
	}
	st := w.do(s, op, false, iv, assoc, assoc+len(text))
	if st == offload.BadICV {
		if s.aead {
			if s.suite.Cipher.Encrypts() {
				clear(text)
			}
		} else {
			copy(text, w.saved)
		}
	}
	op.Status = st
}

// do sends the request and maps the outcome to a Status.
func (w *worker) do(s *session, op *offload.Op, seal bool, iv []byte, assoc, want int) offload.Status {
	if s.cipherOnly {
		w.out = w.in
	}
	w.e.requests.Add(1)
	var n int
	var err error
	if w.direct {
		start := time.Now()
		n, err = s.ops[w.id].DoDirect(seal, iv, assoc, &w.in, &w.out)
		if d := time.Since(start); d <= directLimit {
			w.slow = 0
		} else if w.slow++; w.slow == directSlow {
			w.direct = false
			w.e.log.Info("afalg: requests take longer than the submitter holds its thread for; its requests release it from now on",
				"engine", w.e.name, "last", d, "limit", directLimit, "in a row", directSlow)
		}
	} else {
		n, err = s.ops[w.id].Do(seal, iv, assoc, &w.in, &w.out)
	}
	switch {
	case errors.Is(err, kcapi.ErrBadMessage):
		return offload.BadICV
	case err != nil || n != want:
		w.e.failed(s, err, n, want)
		return offload.Failed
	}
	return offload.OK
}

// failed logs a request the kernel refused or cut short: the first, and
// then one in a thousand, so that a failing driver is seen without a log
// line per packet (every one is counted in Stats.Errors).
func (e *Engine) failed(s *session, err error, n, want int) {
	k := e.failures.Add(1)
	if k != 1 && k%1000 != 0 {
		return
	}
	if err == nil {
		err = fmt.Errorf("the kernel returned %d bytes, want %d", n, want)
	}
	e.log.Warn("afalg request failed", "engine", e.name, "suite", s.suite.String(), "failures", k, "err", err)
}
