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

// espHeaderLen is SPI(4) + sequence number(4).
const espHeaderLen = 8

// Session holds one SA's key schedules. It is safe for concurrent use: the
// block cipher and AEAD are stateless, and the stateful parts (CBC modes,
// HMAC states) come from per-session pools, so steady-state ops allocate
// nothing.
type Session struct {
	suite  sa.Suite
	esn    bool
	ivLen  int
	icvLen int
	block  cipher.Block
	aead   cipher.AEAD
	nonce  [4]byte // CTR nonce or the AEADs' salt (3 bytes for CCM)
	salt   int     // the salt's length
	gmac   bool    // aes-gmac: the whole packet is AAD, nothing encrypted
	// keyed are the pools of the states that hold this session's keys
	// (CBC modes, HMAC), nil for suites without them: a pool costs a
	// cache line per CPU once used, which a gateway of 100,000 GCM SAs
	// need not pay per SA.
	keyed *keyedPools
}

type keyedPools struct {
	cbcEnc, cbcDec, macs sync.Pool
}

// The scratch of GCM and CTR holds no key: one pool each serves every
// session (per-session pools would cost each SA its per-CPU caches).
var (
	gcmScratchPool = sync.Pool{New: func() any { return new(gcmScratch) }}
	ctrScratchPool = sync.Pool{New: func() any { return new(ctrScratch) }}
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

type gcmScratch struct {
	nonce [12]byte
	aad   [12]byte
	icv   [16]byte // the ICV an aes-gmac open received
	tag   [16]byte // the ICV an aes-gmac op computed
}

// NewSession expands the SA's keys for the suite.
func NewSession(cfg offload.SessionConfig) (*Session, error) {
	suite := cfg.Suite
	if err := validate(cfg); err != nil {
		return nil, fmt.Errorf("new %s session: %w", suite, err)
	}
	if suite.Cipher == sa.CipherAESGCM8 {
		return nil, fmt.Errorf("new %s session: aes-gcm-8 is not supported by Go's crypto/cipher, whose GCM takes 12- to 16-byte ICVs: use the afalg engine (the kernel's rfc4106)", suite)
	}
	s := &Session{suite: suite, esn: cfg.ESN, ivLen: suite.IVLen(), icvLen: suite.ICVLen()}
	key := []byte(cfg.EncKey)
	var err error
	switch suite.Cipher {
	case sa.CipherAESCBC:
		s.block, err = aes.NewCipher(key)
	case sa.Cipher3DES:
		s.block, err = des.NewTripleDESCipher(key)
	case sa.CipherAESCTR:
		copy(s.nonce[:], key[len(key)-4:])
		s.block, err = aes.NewCipher(key[:len(key)-4])
	case sa.CipherAESGCM16, sa.CipherAESGCM12, sa.CipherAESGCM8, sa.CipherAESGMAC:
		s.salt, s.gmac = 4, suite.Cipher == sa.CipherAESGMAC
		copy(s.nonce[:], key[len(key)-4:])
		var b cipher.Block
		if b, err = aes.NewCipher(key[:len(key)-4]); err == nil {
			// The AEAD keeps its own copy of the schedule: holding
			// the block too would cost every GCM SA half a kilobyte.
			s.aead, err = cipher.NewGCMWithTagSize(b, suite.ICVLen())
		}
	case sa.CipherChaCha20Poly1305:
		s.salt = 4
		copy(s.nonce[:], key[len(key)-4:])
		s.aead, err = chacha20poly1305.New(key[:len(key)-4])
	case sa.CipherAESCCM8, sa.CipherAESCCM12, sa.CipherAESCCM16:
		s.salt = 3
		copy(s.nonce[:], key[len(key)-3:])
		var b cipher.Block
		if b, err = aes.NewCipher(key[:len(key)-3]); err == nil {
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
	if cbc {
		zero := make([]byte, s.block.BlockSize())
		s.keyed.cbcEnc.New = func() any { return cipher.NewCBCEncrypter(s.block, zero).(ivSetter) }
		s.keyed.cbcDec.New = func() any { return cipher.NewCBCDecrypter(s.block, zero).(ivSetter) }
	}
	if hf != nil {
		authKey := append([]byte(nil), cfg.AuthKey...)
		s.keyed.macs.New = func() any { return &macState{h: hmac.New(hf, authKey)} }
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

// validate checks an ESP suite and its keys, or, for a cipher-only session,
// that the suite really has no integrity and the cipher key fits.
func validate(cfg offload.SessionConfig) error {
	if !cfg.CipherOnly {
		return cfg.Suite.ValidateKeys(cfg.EncKey, cfg.AuthKey)
	}
	s := cfg.Suite
	if s.Auth != sa.AuthNone || s.Cipher.IsAEAD() || len(cfg.AuthKey) != 0 {
		return fmt.Errorf("a cipher-only session needs a non-AEAD cipher with auth none and no auth key, not %s", s)
	}
	for _, n := range s.EncKeyLens() {
		if len(cfg.EncKey) == n {
			return nil
		}
	}
	return fmt.Errorf("enc-key for %s is %d bytes, want %v", s.Cipher, len(cfg.EncKey), s.EncKeyLens())
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

// Suite returns the session's suite.
func (s *Session) Suite() sa.Suite { return s.suite }

// ESN reports whether the ICV covers the high sequence bits.
func (s *Session) ESN() bool { return s.esn }

// Close is a no-op: the schedules are garbage collected.
func (s *Session) Close() error { return nil }

// Process seals or opens one ESP packet in place.
func (s *Session) Process(op *offload.Op) {
	pkt := op.Packet
	body := espHeaderLen + s.ivLen
	if len(pkt) < body+s.icvLen {
		op.Status = offload.BadLength
		return
	}
	if s.aead != nil {
		s.processAEAD(op)
		return
	}
	payload := pkt[body : len(pkt)-s.icvLen]
	if bs := s.suite.BlockLen(); len(payload)%bs != 0 {
		op.Status = offload.BadLength
		return
	}
	iv := pkt[espHeaderLen:body]
	if op.Dir == offload.Seal {
		s.crypt(offload.Seal, iv, payload)
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
	s.crypt(offload.Open, iv, payload)
	op.Status = offload.OK
}

// crypt encrypts or decrypts payload in place.
func (s *Session) crypt(dir offload.Direction, iv, payload []byte) {
	switch s.suite.Cipher {
	case sa.CipherAESCBC, sa.Cipher3DES:
		pool := &s.keyed.cbcEnc
		if dir == offload.Open {
			pool = &s.keyed.cbcDec
		}
		m := pool.Get().(ivSetter)
		m.SetIV(iv)
		m.CryptBlocks(payload, payload)
		pool.Put(m)
	case sa.CipherAESCTR:
		s.ctr(iv, payload)
	}
}

// ctr applies the RFC 3686 keystream: counter block = nonce | IV | counter
// from 1. It works eight blocks at a time in pooled scratch rather than
// through cipher.NewCTR, which would allocate per packet.
func (s *Session) ctr(iv, payload []byte) {
	sc := ctrScratchPool.Get().(*ctrScratch)
	defer ctrScratchPool.Put(sc)
	ctrBlocks, stream := &sc.blocks, &sc.stream
	for i := 0; i < 8; i++ {
		b := ctrBlocks[i*aes.BlockSize:]
		copy(b[:4], s.nonce[:])
		copy(b[4:12], iv)
	}
	counter := uint32(1)
	for len(payload) > 0 {
		n := min(len(payload), len(stream))
		for i := 0; i*aes.BlockSize < n; i++ {
			b := ctrBlocks[i*aes.BlockSize:]
			binary.BigEndian.PutUint32(b[12:16], counter)
			counter++
			s.block.Encrypt(stream[i*aes.BlockSize:], b[:aes.BlockSize])
		}
		subtle.XORBytes(payload[:n], payload[:n], stream[:n])
		payload = payload[n:]
	}
}

// mac computes the full HMAC over the packet's authenticated part (and the
// ESN high bits, RFC 4303 §2.2.1) into the state's sum buffer.
func (s *Session) mac(st *macState, op *offload.Op) []byte {
	st.h.Reset()
	st.h.Write(op.Packet[:len(op.Packet)-s.icvLen])
	if s.esn {
		binary.BigEndian.PutUint32(st.seqHi[:], op.SeqHi)
		st.h.Write(st.seqHi[:])
	}
	return st.h.Sum(st.sum[:0])
}

// WriteICV computes the HMAC of a sealed packet and writes it as its ICV:
// the CPU's half of a seal for engines whose device only ciphers.
func (s *Session) WriteICV(op *offload.Op) { s.writeICV(op) }

// VerifyICV says, in constant time, whether an HMAC suite's packet carries
// the right ICV: the CPU's half of an open for engines whose device only
// ciphers.
func (s *Session) VerifyICV(op *offload.Op) bool { return s.verifyICV(op) }

func (s *Session) writeICV(op *offload.Op) {
	st := s.keyed.macs.Get().(*macState)
	sum := s.mac(st, op)
	copy(op.Packet[len(op.Packet)-s.icvLen:], sum[:s.icvLen])
	s.keyed.macs.Put(st)
}

func (s *Session) verifyICV(op *offload.Op) bool {
	st := s.keyed.macs.Get().(*macState)
	sum := s.mac(st, op)
	ok := subtle.ConstantTimeCompare(sum[:s.icvLen], op.Packet[len(op.Packet)-s.icvLen:]) == 1
	s.keyed.macs.Put(st)
	return ok
}

// processAEAD seals or opens with an AEAD suite: nonce = salt | IV, AAD =
// SPI | [seq high] | seq low (RFC 4106 §5, RFC 7634 §2.1, RFC 4309 §5).
// Go's GCM and x/crypto's ChaCha20-Poly1305 compute the tag over the
// ciphertext in the same pass as they decrypt and, on a mismatch, wipe
// what they wrote before returning, as CCM does after decrypting: no
// unverified plaintext leaves the engine, though the dropped packet's
// bytes are zeroed rather than left as they came.
func (s *Session) processAEAD(op *offload.Op) {
	pkt := op.Packet
	sc := gcmScratchPool.Get().(*gcmScratch)
	defer gcmScratchPool.Put(sc)
	nonce := sc.nonce[:s.salt+8]
	copy(nonce, s.nonce[:s.salt])
	copy(nonce[s.salt:], pkt[espHeaderLen:espHeaderLen+8])
	if s.gmac {
		s.processGMAC(op, sc, nonce)
		return
	}
	aad := sc.aad[:8]
	copy(aad[:4], pkt[:4])
	if s.esn {
		aad = sc.aad[:12]
		binary.BigEndian.PutUint32(aad[4:8], op.SeqHi)
		copy(aad[8:12], pkt[4:8])
	} else {
		copy(aad[4:8], pkt[4:8])
	}
	body := pkt[espHeaderLen+8:]
	if op.Dir == offload.Seal {
		plain := body[:len(body)-s.icvLen]
		s.aead.Seal(plain[:0], nonce, plain, aad)
		op.Status = offload.OK
		return
	}
	if _, err := s.aead.Open(body[:0], nonce, body, aad); err != nil {
		op.Status = offload.BadICV
		return
	}
	op.Status = offload.OK
}

// processGMAC seals or opens with RFC 4543's ENCR_NULL_AUTH_AES_GMAC: the
// ICV is GCM's tag over an empty plaintext with the AAD SPI | [seq high] |
// seq low | IV | payload, which is the packet itself as it lies, or, with
// ESN, once the high bits are let in after the SPI: the packet moves up
// four bytes into its ICV room for that and back after.
func (s *Session) processGMAC(op *offload.Op, sc *gcmScratch, nonce []byte) {
	pkt := op.Packet
	n := len(pkt) - s.icvLen
	icv := pkt[n:]
	if op.Dir == offload.Open {
		copy(sc.icv[:], icv)
	}
	aad := pkt[:n]
	if s.esn {
		copy(pkt[12:n+4], pkt[8:n])
		copy(pkt[8:12], pkt[4:8])
		binary.BigEndian.PutUint32(pkt[4:8], op.SeqHi)
		aad = pkt[:n+4]
	}
	s.aead.Seal(sc.tag[:0], nonce, nil, aad)
	if s.esn {
		copy(pkt[4:8], pkt[8:12])
		copy(pkt[8:n], pkt[12:n+4])
	}
	if op.Dir == offload.Seal {
		copy(icv, sc.tag[:])
		op.Status = offload.OK
		return
	}
	copy(icv, sc.icv[:])
	if subtle.ConstantTimeCompare(sc.tag[:], sc.icv[:]) != 1 {
		op.Status = offload.BadICV
		return
	}
	op.Status = offload.OK
}
