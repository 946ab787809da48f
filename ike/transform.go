package ike

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"

	"golang.org/x/crypto/chacha20poly1305"
)

// Transform IDs this package implements (IANA's IKEv2 registries).
const (
	EncrAESCBC   uint16 = 12
	EncrAESGCM16 uint16 = 20
	// EncrChaCha20Poly1305 (RFC 7634) has no Key Length attribute: its
	// key is 256 bits.
	EncrChaCha20Poly1305 uint16 = 28

	PRFHMACSHA1   uint16 = 2
	PRFHMACSHA256 uint16 = 5
	PRFHMACSHA384 uint16 = 6
	PRFHMACSHA512 uint16 = 7

	IntegHMACSHA1_96    uint16 = 2
	IntegHMACSHA256_128 uint16 = 12
	IntegHMACSHA384_192 uint16 = 13
	IntegHMACSHA512_256 uint16 = 14
	ESNNo               uint16 = 0
	ESNYes              uint16 = 1
)

var transformNames = map[TransformType]map[uint16]string{
	TransformENCR:  {3: "3DES", 12: "AES_CBC", 13: "AES_CTR", 18: "AES_GCM_8", 19: "AES_GCM_12", 20: "AES_GCM_16", 28: "CHACHA20_POLY1305"},
	TransformPRF:   {1: "PRF_HMAC_MD5", 2: "PRF_HMAC_SHA1", 4: "PRF_AES128_XCBC", 5: "PRF_HMAC_SHA2_256", 6: "PRF_HMAC_SHA2_384", 7: "PRF_HMAC_SHA2_512"},
	TransformINTEG: {1: "HMAC_MD5_96", 2: "HMAC_SHA1_96", 5: "AES_XCBC_96", 12: "HMAC_SHA2_256_128", 13: "HMAC_SHA2_384_192", 14: "HMAC_SHA2_512_256"},
	TransformDH:    {2: "MODP_1024", 14: "MODP_2048", 15: "MODP_3072", 16: "MODP_4096", 19: "ECP_256", 20: "ECP_384", 21: "ECP_521", 31: "CURVE_25519"},
	TransformESN:   {0: "NO_EXT_SEQ", 1: "EXT_SEQ"},
}

func transformName(t TransformType, id uint16) string {
	if n, ok := transformNames[t][id]; ok {
		return n
	}
	return fmt.Sprintf("%s(%d)", t, id)
}

// prfAlg is a pseudo-random function: HMAC with a hash.
type prfAlg struct {
	hash func() hash.Hash
	size int
}

func prfFor(id uint16) (prfAlg, error) {
	switch id {
	case PRFHMACSHA1:
		return prfAlg{sha1.New, sha1.Size}, nil
	case PRFHMACSHA256:
		return prfAlg{sha256.New, sha256.Size}, nil
	case PRFHMACSHA384:
		return prfAlg{sha512.New384, sha512.Size384}, nil
	case PRFHMACSHA512:
		return prfAlg{sha512.New, sha512.Size}, nil
	}
	return prfAlg{}, fmt.Errorf("PRF %s is not supported", transformName(TransformPRF, id))
}

// sum is prf(key, data...).
func (p prfAlg) sum(key []byte, data ...[]byte) []byte {
	m := hmac.New(p.hash, key)
	for _, d := range data {
		m.Write(d)
	}
	return m.Sum(nil)
}

// plus is prf+ (RFC 7296 §2.13): T1 | T2 | ... cut to n bytes, where
// Tk = prf(K, Tk-1 | S | k).
func (p prfAlg) plus(key, seed []byte, n int) ([]byte, error) {
	if n > 255*p.size {
		return nil, fmt.Errorf("prf+ asked for %d bytes, more than 255 blocks of %d", n, p.size)
	}
	// One HMAC for every block: Tk-1 is the block last appended.
	m := hmac.New(p.hash, key)
	out := make([]byte, 0, n+p.size)
	for k := 1; len(out) < n; k++ {
		prev := out[max(len(out)-p.size, 0):]
		m.Reset()
		m.Write(prev)
		m.Write(seed)
		m.Write([]byte{byte(k)})
		out = m.Sum(out)
	}
	return out[:n], nil
}

// integAlg is an integrity transform: HMAC truncated.
type integAlg struct {
	hash        func() hash.Hash
	keyLen, icv int
}

func integFor(id uint16) (integAlg, error) {
	switch id {
	case IntegHMACSHA1_96:
		return integAlg{sha1.New, 20, 12}, nil
	case IntegHMACSHA256_128:
		return integAlg{sha256.New, 32, 16}, nil
	case IntegHMACSHA384_192:
		return integAlg{sha512.New384, 48, 24}, nil
	case IntegHMACSHA512_256:
		return integAlg{sha512.New, 64, 32}, nil
	}
	return integAlg{}, fmt.Errorf("integrity %s is not supported", transformName(TransformINTEG, id))
}

// encrAlg is an encryption transform with its key length.
type encrAlg struct {
	id     uint16
	keyLen int // bytes of key material, the salt of AES-GCM included
	aead   bool
}

func encrFor(t Transform) (encrAlg, error) {
	switch t.ID {
	case EncrAESCBC, EncrAESGCM16:
		if t.KeyLen != 128 && t.KeyLen != 192 && t.KeyLen != 256 {
			return encrAlg{}, fmt.Errorf("%s with a %d-bit key, want 128, 192 or 256", transformName(TransformENCR, t.ID), t.KeyLen)
		}
		e := encrAlg{id: t.ID, keyLen: int(t.KeyLen) / 8}
		if t.ID == EncrAESGCM16 {
			e.keyLen += 4
			e.aead = true
		}
		return e, nil
	case EncrChaCha20Poly1305:
		if t.KeyLen != 0 {
			return encrAlg{}, fmt.Errorf("%s with a Key Length attribute (%d), which it must not have", transformName(TransformENCR, t.ID), t.KeyLen)
		}
		return encrAlg{id: t.ID, keyLen: chacha20poly1305.KeySize + 4, aead: true}, nil
	}
	return encrAlg{}, fmt.Errorf("encryption %s is not supported", transformName(TransformENCR, t.ID))
}
