package cpu

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/des"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/internal/ccm"
	"github.com/espgw/espgw/sa"
)

// Session holds one SA's key schedules. It is safe for concurrent use: the
// block cipher and AEAD are stateless, CBC runs over the block cipher one
// block at a time, and an HMAC starts from the session's keyed states in a
// hash from a pool that every session of the hash shares, so steady-state
// ops allocate nothing and a session that carried traffic holds no more
// than one that did not.
type Session struct {
	block cipher.Block
	aead  cipher.AEAD
	// pads is the HMAC's keyed states, the inner then the outer (hmac.go),
	// nil without an HMAC.
	pads string
	// modes holds the session's CBC modes, taken by one op at a time:
	// unbuiltModes until the first op builds them, nil while an op has
	// them (a concurrent op then runs CBC over the block cipher).
	modes atomic.Pointer[cbcModes]

	cipher sa.Cipher
	hash   hashKind // of the HMAC
	esn    bool
	gmac   bool  // aes-gmac: AAD and Auth are hashed, nothing encrypted
	icvLen uint8 // ICV bytes
	// cbcBlock is the block a CBC cipher's text must be whole blocks of;
	// 1 for the others.
	cbcBlock uint8
	nonceLen uint8 // Op.NonceLen the cipher takes
}

// cbcModes are the standard library's CBC modes of a session's block
// cipher, built on its first CBC op in each direction.
type cbcModes struct {
	enc, dec ivSetter
}

// ivSetter is implemented by the standard library's CBC modes.
type ivSetter interface {
	cipher.BlockMode
	SetIV([]byte)
}

// unbuiltModes marks a session whose CBC modes are not built yet; it is
// never used as modes.
var unbuiltModes = new(cbcModes)

// The scratch of GCM and CTR holds no key: one pool each serves every
// session (per-session pools would cost each SA its per-CPU caches).
var (
	gmacScratchPool = sync.Pool{New: func() any { return new(gmacScratch) }}
	ctrScratchPool  = sync.Pool{New: func() any { return new(ctrScratch) }}
)

// ctrScratch holds counter blocks and keystream; pooled because slices
// handed to cipher.Block escape and would otherwise allocate per packet.
type ctrScratch struct {
	blocks, stream [8 * aes.BlockSize]byte
}

// gmacScratch holds the tag an aes-gmac op with ESN computes: the AEAD
// writes it, so it would escape to the heap from the stack.
type gmacScratch struct {
	tag [16]byte
}

// NewSession expands the SA's keys for the suite. The salt or nonce at
// the end of the encryption key is not kept: it comes with every op, in
// Op.Nonce.
func NewSession(cfg offload.SessionConfig) (*Session, error) {
	suite := cfg.Suite
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new %s session: %w", suite, err)
	}
	if suite.Cipher == sa.CipherAESGCM8 {
		return nil, fmt.Errorf("new %s session: aes-gcm-8 is not supported by Go's crypto/cipher, whose GCM takes 12- to 16-byte ICVs: use the afalg engine (the kernel's rfc4106)", suite)
	}
	s := &Session{cipher: suite.Cipher, esn: cfg.ESN, icvLen: uint8(suite.ICVLen()), cbcBlock: 1}
	if cfg.CipherOnly {
		s.icvLen = 0
	}
	key := []byte(cfg.EncKey[:len(cfg.EncKey)-suite.Cipher.SaltLen()])
	var err error
	switch suite.Cipher {
	case sa.CipherAESCBC:
		s.block, err = aes.NewCipher(key)
	case sa.Cipher3DES:
		s.block, err = des.NewTripleDESCipher(key)
	case sa.CipherAESCTR:
		s.block, err = aes.NewCipher(key)
	case sa.CipherAESGCM16, sa.CipherAESGCM12, sa.CipherAESGCM8, sa.CipherAESGMAC:
		s.gmac = suite.Cipher == sa.CipherAESGMAC
		var b cipher.Block
		if b, err = aes.NewCipher(key); err == nil {
			// The AEAD keeps its own copy of the schedule: holding
			// the block too would cost every GCM SA half a kilobyte.
			s.aead, err = cipher.NewGCMWithTagSize(b, suite.ICVLen())
		}
	case sa.CipherChaCha20Poly1305:
		s.aead, err = chacha20poly1305.New(key)
	case sa.CipherAESCCM8, sa.CipherAESCCM12, sa.CipherAESCCM16:
		var b cipher.Block
		if b, err = aes.NewCipher(key); err == nil {
			s.aead, err = ccm.New(b, 11, suite.ICVLen(), nil)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("new %s session: expand key: %w", suite, err)
	}
	cbc := s.block != nil && (suite.Cipher == sa.CipherAESCBC || suite.Cipher == sa.Cipher3DES)
	switch {
	case s.aead != nil:
		s.nonceLen = uint8(s.aead.NonceSize())
	case suite.Cipher == sa.CipherAESCTR:
		s.nonceLen = aes.BlockSize
	case cbc:
		s.nonceLen = uint8(s.block.BlockSize())
	}
	if cbc {
		s.cbcBlock = uint8(s.block.BlockSize())
		s.modes.Store(unbuiltModes)
	}
	if s.hash = hashOf(suite.Auth); s.hash != noHash {
		if s.pads, err = s.hash.pads(cfg.AuthKey); err != nil {
			return nil, fmt.Errorf("new %s session: %w", suite, err)
		}
	}
	return s, nil
}

// NewAEADSession is NewSession for an AEAD suite whose AEAD the caller
// built on a block cipher of its own (package ccm with the aesni engine's
// CBC-MAC); everything around it (nonce, AAD, ESN) is NewSession's.
func NewAEADSession(cfg offload.SessionConfig, aead cipher.AEAD) (*Session, error) {
	s, err := NewSession(cfg)
	if err != nil {
		return nil, err
	}
	if s.aead == nil || aead.NonceSize() != s.aead.NonceSize() || aead.Overhead() != s.aead.Overhead() {
		return nil, fmt.Errorf("new %s session: an AEAD with a %d-byte nonce and a %d-byte tag does not fit it", cfg.Suite, aead.NonceSize(), aead.Overhead())
	}
	s.aead = aead
	return s, nil
}

// Close is a no-op: the schedules are garbage collected.
func (s *Session) Close() error { return nil }

// Process seals or opens one op in place.
func (s *Session) Process(op *offload.Op) {
	if !op.Fits() || op.ICV.Len != int(s.icvLen) || op.NonceLen != s.nonceLen {
		op.Status = offload.BadLength
		return
	}
	if s.aead != nil {
		s.processAEAD(op)
		return
	}
	text := op.Bytes(op.Cipher)
	if len(text)%int(s.cbcBlock) != 0 {
		op.Status = offload.BadLength
		return
	}
	if op.Dir == offload.Seal {
		s.crypt(offload.Seal, op, text)
		if s.icvLen > 0 {
			s.writeICV(op)
		}
		op.Status = offload.OK
		return
	}
	if s.icvLen > 0 && !s.verifyICV(op) {
		op.Status = offload.BadICV
		return
	}
	s.crypt(offload.Open, op, text)
	op.Status = offload.OK
}

// crypt encrypts or decrypts text in place from op's nonce.
func (s *Session) crypt(dir offload.Direction, op *offload.Op, text []byte) {
	switch s.cipher {
	case sa.CipherAESCBC, sa.Cipher3DES:
		s.cbc(dir, op.NonceBytes(), text)
	case sa.CipherAESCTR:
		s.ctr(&op.Nonce, text)
	}
}

// ctr applies the keystream from the counter block, counting up its last
// 32 bits (RFC 3686 §4). It works eight blocks at a time in pooled scratch
// rather than through cipher.NewCTR, which would allocate per packet.
func (s *Session) ctr(start *[16]byte, text []byte) {
	sc := ctrScratchPool.Get().(*ctrScratch)
	defer ctrScratchPool.Put(sc)
	ctrBlocks, stream := &sc.blocks, &sc.stream
	for i := 0; i < 8; i++ {
		copy(ctrBlocks[i*aes.BlockSize:], start[:12])
	}
	counter := binary.BigEndian.Uint32(start[12:])
	for len(text) > 0 {
		n := min(len(text), len(stream))
		for i := 0; i*aes.BlockSize < n; i++ {
			b := ctrBlocks[i*aes.BlockSize:]
			binary.BigEndian.PutUint32(b[12:16], counter)
			counter++
			s.block.Encrypt(stream[i*aes.BlockSize:], b[:aes.BlockSize])
		}
		subtle.XORBytes(text[:n], text[:n], stream[:n])
		text = text[n:]
	}
}

// WriteICV computes the HMAC of a sealed op and writes it as its ICV:
// the CPU's half of a seal for engines whose device only ciphers.
func (s *Session) WriteICV(op *offload.Op) { s.writeICV(op) }

// VerifyICV says, in constant time, whether an HMAC suite's op carries
// the right ICV: the CPU's half of an open for engines whose device only
// ciphers.
func (s *Session) VerifyICV(op *offload.Op) bool { return s.verifyICV(op) }

func (s *Session) writeICV(op *offload.Op) {
	m := s.hash.scratch()
	copy(op.Bytes(op.ICV), s.mac(m, op)[:s.icvLen])
	s.hash.done(m)
}

func (s *Session) verifyICV(op *offload.Op) bool {
	m := s.hash.scratch()
	ok := subtle.ConstantTimeCompare(s.mac(m, op)[:s.icvLen], op.Bytes(op.ICV)) == 1
	s.hash.done(m)
	return ok
}

// mac computes the full HMAC over Auth (and the ESN high bits, RFC 4303
// §2.2.1) in m.
func (s *Session) mac(m *macScratch, op *offload.Op) []byte {
	s.hash.start(m, s.pads, 0)
	m.h.Write(op.Bytes(op.Auth))
	if s.esn {
		binary.BigEndian.PutUint32(m.seqHi[:], op.SeqHi)
		m.h.Write(m.seqHi[:])
	}
	sum := m.h.Sum(m.sum[:0])
	s.hash.start(m, s.pads, 1)
	m.h.Write(sum)
	return m.h.Sum(m.sum[:0])
}

// cbc encrypts or decrypts text in place in CBC mode from iv with the
// session's CBC modes (the standard library's loop, without a call through
// cipher.Block per block), or over the block cipher when another op has
// them. An SA's packets are sealed or opened one at a time in a gateway,
// so the modes are nearly always free; a session that carried traffic
// holds one mode per direction it ran.
func (s *Session) cbc(dir offload.Direction, iv, text []byte) {
	m := s.modes.Swap(nil)
	if m == nil {
		if dir == offload.Open {
			s.cbcDecrypt(iv, text)
		} else {
			s.cbcEncrypt(iv, text)
		}
		return
	}
	if m == unbuiltModes {
		m = new(cbcModes)
	}
	var mode ivSetter
	if dir == offload.Open {
		if m.dec == nil {
			m.dec = cipher.NewCBCDecrypter(s.block, iv).(ivSetter)
		}
		mode = m.dec
	} else {
		if m.enc == nil {
			m.enc = cipher.NewCBCEncrypter(s.block, iv).(ivSetter)
		}
		mode = m.enc
	}
	mode.SetIV(iv)
	mode.CryptBlocks(text, text)
	s.modes.Store(m)
}

// cbcEncrypt encrypts text, whole blocks, in place in CBC mode from iv.
func (s *Session) cbcEncrypt(iv, text []byte) {
	n := int(s.cbcBlock)
	prev := iv
	for i := 0; i+n <= len(text); i += n {
		b := text[i : i+n]
		xorBlock(b, prev)
		s.block.Encrypt(b, b)
		prev = b
	}
}

// cbcDecrypt decrypts text, whole blocks, in place in CBC mode from iv:
// from the last block back, so that each block's predecessor is still
// ciphertext when it is needed.
func (s *Session) cbcDecrypt(iv, text []byte) {
	n := int(s.cbcBlock)
	for i := len(text) - n; i >= 0; i -= n {
		b := text[i : i+n]
		s.block.Decrypt(b, b)
		if i > 0 {
			xorBlock(b, text[i-n:i])
		} else {
			xorBlock(b, iv)
		}
	}
}

// xorBlock XORs x into b, one 16- or 8-byte cipher block, a word at a
// time (subtle.XORBytes costs a call and its length checks per block).
func xorBlock(b, x []byte) {
	if len(b) == 16 && len(x) >= 16 {
		binary.LittleEndian.PutUint64(b[0:8], binary.LittleEndian.Uint64(b[0:8])^binary.LittleEndian.Uint64(x[0:8]))
		binary.LittleEndian.PutUint64(b[8:16], binary.LittleEndian.Uint64(b[8:16])^binary.LittleEndian.Uint64(x[8:16]))
		return
	}
	subtle.XORBytes(b, b, x)
}

// processAEAD seals or opens with an AEAD suite: Cipher followed by the
// ICV is the AEAD's ciphertext and tag, under Op.Nonce and Op.AAD. Go's
// GCM and x/crypto's ChaCha20-Poly1305 compute the tag over the ciphertext
// in the same pass as they decrypt and, on a mismatch, wipe what they
// wrote before returning, as CCM does after decrypting: no unverified
// plaintext leaves the engine, though the dropped packet's bytes are
// zeroed rather than left as they came.
func (s *Session) processAEAD(op *offload.Op) {
	nonce := op.NonceBytes()
	if s.gmac {
		s.processGMAC(op, nonce)
		return
	}
	if op.ICV.Off != op.Cipher.End() {
		op.Status = offload.BadLength
		return
	}
	aad := op.AADBytes()
	if op.Dir == offload.Seal {
		plain := op.Bytes(op.Cipher)
		s.aead.Seal(plain[:0], nonce, plain, aad)
		op.Status = offload.OK
		return
	}
	sealed := op.Buf[op.Cipher.Off:op.ICV.End()]
	if _, err := s.aead.Open(sealed[:0], nonce, sealed, aad); err != nil {
		op.Status = offload.BadICV
		return
	}
	op.Status = offload.OK
}

// processGMAC seals or opens with RFC 4543's ENCR_NULL_AUTH_AES_GMAC: the
// ICV is GCM's tag over an empty plaintext with AAD followed by Auth as
// the associated data. Go's GCM takes that as one slice, so it is laid out
// in place: AAD over the bytes just before Auth, which are put back after.
// When fewer bytes than AAD precede Auth (AAD with ESN), Auth first moves
// up into the ICV room that follows it, and back after.
func (s *Session) processGMAC(op *offload.Op, nonce []byte) {
	aad, auth, icv := op.AADBytes(), op.Auth, op.Bytes(op.ICV)
	shift := max(0, len(aad)-auth.Off)
	if shift == 0 && op.ICV.Off >= auth.End() {
		s.gmacInPlace(op, nonce, aad, icv)
		return
	}
	if op.ICV.Off != auth.End() || len(icv) < shift {
		op.Status = offload.BadLength
		return
	}
	if len(icv) != gcmTagSize {
		op.Status = offload.BadLength
		return
	}
	// The ICV and the AAD-long front are moved as arrays, which compile
	// to a few loads and stores; only the tag, which the AEAD writes,
	// comes from the pool (from the stack it would escape to the heap).
	icvBytes := (*[gcmTagSize]byte)(icv)
	received := *icvBytes
	copy(op.Buf[auth.Off+shift:auth.End()+shift], op.Bytes(auth))
	start := auth.Off + shift - len(aad)
	var front *[12]byte
	var saved [12]byte
	if len(aad) == len(op.AAD) {
		front = (*[12]byte)(op.Buf[start:])
		saved, *front = *front, op.AAD
	} else {
		copy(saved[:], op.Buf[start:auth.Off+shift])
		copy(op.Buf[start:], aad)
	}
	sc := gmacScratchPool.Get().(*gmacScratch)
	s.aead.Seal(sc.tag[:0], nonce, nil, op.Buf[start:auth.End()+shift])
	if front != nil {
		*front = saved
	} else {
		copy(op.Buf[start:], saved[:len(aad)])
	}
	copy(op.Buf[auth.Off:auth.End()], op.Buf[auth.Off+shift:auth.End()+shift])
	switch {
	case op.Dir == offload.Seal:
		*icvBytes = sc.tag
		op.Status = offload.OK
	case subtle.ConstantTimeCompare(sc.tag[:], received[:]) != 1:
		*icvBytes = received
		op.Status = offload.BadICV
	default:
		*icvBytes = received
		op.Status = offload.OK
	}
	gmacScratchPool.Put(sc)
}

// gcmTagSize is the length of aes-gmac's ICV, GCM's full tag.
const gcmTagSize = 16

// gmacInPlace is processGMAC when AAD fits in the bytes before Auth and
// the ICV follows Auth: the tag is written straight into the ICV (on an
// open, over the received one, which is put back if they differ), and
// nothing is pooled.
func (s *Session) gmacInPlace(op *offload.Op, nonce, aad, icv []byte) {
	auth := op.Auth
	start := auth.Off - len(aad)
	if len(icv) != gcmTagSize {
		op.Status = offload.BadLength
		return
	}
	var front [16]byte
	placed := string(op.Buf[start:auth.Off]) == string(aad) // AAD lies in Buf already
	if !placed {
		copy(front[:], op.Buf[start:auth.Off])
		copy(op.Buf[start:], aad)
	}
	icvBytes := (*[gcmTagSize]byte)(icv)
	received := *icvBytes
	s.aead.Seal(icv[:0], nonce, nil, op.Buf[start:auth.End()])
	if !placed {
		copy(op.Buf[start:], front[:len(aad)])
	}
	op.Status = offload.OK
	if op.Dir == offload.Open && subtle.ConstantTimeCompare(icvBytes[:], received[:]) != 1 {
		*icvBytes = received
		op.Status = offload.BadICV
	}
}
