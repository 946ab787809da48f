package cpu

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/des"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"hash"
	"sync"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/internal/ccm"
	"github.com/espgw/espgw/sa"
)

// Session holds one SA's key schedules. It is safe for concurrent use: the
// block cipher and AEAD are stateless, and the stateful parts (CBC modes,
// HMAC states) come from a per-session pool, so steady-state ops allocate
// nothing.
type Session struct {
	// The interfaces first, then the small fields: 48 bytes and a pad to
	// the 64-byte size class, whose objects start on a cache line, so
	// that an op on one of many sessions costs one cache miss here.
	block cipher.Block
	aead  cipher.AEAD
	// keyed is the pool of the states that hold this session's keys
	// (CBC modes, HMAC), nil for suites without them: a pool costs a
	// cache line per CPU once used, which a gateway of 100,000 GCM SAs
	// need not pay per SA.
	keyed    *keyedPools
	icvLen   int32
	nonceLen int32 // Op.NonceLen the cipher takes
	// cbcBlock is the block a CBC cipher's text must be whole blocks of;
	// 1 for the others.
	cbcBlock int32
	cipher   sa.Cipher
	esn      bool
	gmac     bool // aes-gmac: AAD and Auth are hashed, nothing encrypted
	_        [64 - 56]byte
}

// keyedPools is one pool of keyedStates, and what builds their parts on
// first use (one pool, not one per part, and no sync.Pool.New closure:
// each costs every SA of a gateway its bytes).
type keyedPools struct {
	states  sync.Pool        // *keyedState
	hash    func() hash.Hash // nil without an HMAC
	authKey []byte
}

// keyedState holds the stateful parts that hold the session's keys: its
// CBC modes and HMAC, each built the first time this state needs it.
type keyedState struct {
	cbcEnc, cbcDec ivSetter
	mac            *macState
}

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

// ivSetter is implemented by the standard library's CBC modes.
type ivSetter interface {
	cipher.BlockMode
	SetIV([]byte)
}

type macState struct {
	h     hash.Hash
	sum   [64]byte
	seqHi [4]byte
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
	s := &Session{cipher: suite.Cipher, esn: cfg.ESN, icvLen: int32(suite.ICVLen()), cbcBlock: 1}
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
	hf := hashFunc(suite.Auth)
	if cbc || hf != nil {
		s.keyed = new(keyedPools)
	}
	switch {
	case s.aead != nil:
		s.nonceLen = int32(s.aead.NonceSize())
	case suite.Cipher == sa.CipherAESCTR:
		s.nonceLen = aes.BlockSize
	case cbc:
		s.nonceLen = int32(s.block.BlockSize())
	}
	if cbc {
		s.cbcBlock = int32(s.block.BlockSize())
	}
	if hf != nil {
		s.keyed.hash, s.keyed.authKey = hf, append([]byte(nil), cfg.AuthKey...)
	}
	return s, nil
}

// keyedState takes a keyed state from the session's pool, or a new one;
// the caller puts it back in s.keyed.states.
func (s *Session) keyedState() *keyedState {
	if st, ok := s.keyed.states.Get().(*keyedState); ok {
		return st
	}
	return new(keyedState)
}

// cbcMode returns st's CBC mode of the session's block cipher for dir.
func (s *Session) cbcMode(st *keyedState, dir offload.Direction) ivSetter {
	if dir == offload.Open {
		if st.cbcDec == nil {
			st.cbcDec = cipher.NewCBCDecrypter(s.block, make([]byte, int(s.cbcBlock))).(ivSetter)
		}
		return st.cbcDec
	}
	if st.cbcEnc == nil {
		st.cbcEnc = cipher.NewCBCEncrypter(s.block, make([]byte, int(s.cbcBlock))).(ivSetter)
	}
	return st.cbcEnc
}

// macState returns st's HMAC state of the session's key.
func (s *Session) macState(st *keyedState) *macState {
	if st.mac == nil {
		st.mac = &macState{h: hmac.New(s.keyed.hash, s.keyed.authKey)}
	}
	return st.mac
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

func hashFunc(a sa.Auth) func() hash.Hash {
	switch a {
	case sa.AuthHMACSHA1_96:
		return sha1.New
	case sa.AuthHMACSHA256_128:
		return sha256.New
	case sa.AuthHMACSHA384_192:
		return sha512.New384
	case sa.AuthHMACSHA512_256:
		return sha512.New
	case sa.AuthHMACMD5_96:
		return md5.New
	}
	return nil
}

// Close is a no-op: the schedules are garbage collected.
func (s *Session) Close() error { return nil }

// Process seals or opens one op in place.
func (s *Session) Process(op *offload.Op) {
	if !op.Fits() || op.ICV.Len != int(s.icvLen) || int(op.NonceLen) != int(s.nonceLen) {
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
		st := s.keyedState()
		m := s.cbcMode(st, dir)
		m.SetIV(op.NonceBytes())
		m.CryptBlocks(text, text)
		s.keyed.states.Put(st)
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

// mac computes the full HMAC over Auth (and the ESN high bits, RFC 4303
// §2.2.1) into the state's sum buffer.
func (s *Session) mac(st *macState, op *offload.Op) []byte {
	st.h.Reset()
	st.h.Write(op.Bytes(op.Auth))
	if s.esn {
		binary.BigEndian.PutUint32(st.seqHi[:], op.SeqHi)
		st.h.Write(st.seqHi[:])
	}
	return st.h.Sum(st.sum[:0])
}

// WriteICV computes the HMAC of a sealed op and writes it as its ICV:
// the CPU's half of a seal for engines whose device only ciphers.
func (s *Session) WriteICV(op *offload.Op) { s.writeICV(op) }

// VerifyICV says, in constant time, whether an HMAC suite's op carries
// the right ICV: the CPU's half of an open for engines whose device only
// ciphers.
func (s *Session) VerifyICV(op *offload.Op) bool { return s.verifyICV(op) }

func (s *Session) writeICV(op *offload.Op) {
	ks := s.keyedState()
	st := s.macState(ks)
	sum := s.mac(st, op)
	copy(op.Bytes(op.ICV), sum[:int(s.icvLen)])
	s.keyed.states.Put(ks)
}

func (s *Session) verifyICV(op *offload.Op) bool {
	ks := s.keyedState()
	st := s.macState(ks)
	sum := s.mac(st, op)
	ok := subtle.ConstantTimeCompare(sum[:int(s.icvLen)], op.Bytes(op.ICV)) == 1
	s.keyed.states.Put(ks)
	return ok
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
