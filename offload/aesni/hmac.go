package aesni

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding"
	"fmt"
	"hash"

	"github.com/espgw/espgw/sa"
)

// hashKind numbers the hash functions of the HMAC suites, to index the
// reusable hash states of a worker.
type hashKind uint8

const (
	hashSHA1 hashKind = iota
	hashSHA256
	hashSHA384
	hashSHA512
	hashMD5
	numHashKinds
)

// newHash makes a hash of each kind.
var newHash = [numHashKinds]func() hash.Hash{
	hashSHA1:   sha1.New,
	hashSHA256: sha256.New,
	hashSHA384: sha512.New384,
	hashSHA512: sha512.New,
	hashMD5:    md5.New,
}

func hashOf(a sa.Auth) (hashKind, bool) {
	switch a {
	case sa.AuthHMACSHA1_96:
		return hashSHA1, true
	case sa.AuthHMACSHA256_128:
		return hashSHA256, true
	case sa.AuthHMACSHA384_192:
		return hashSHA384, true
	case sa.AuthHMACSHA512_256:
		return hashSHA512, true
	case sa.AuthHMACMD5_96:
		return hashMD5, true
	}
	return 0, false
}

// hmacKey is one SA's HMAC key as the hash states after the inner and the
// outer padded key block (RFC 2104): each op restores them instead of
// hashing the pads again, which saves two compressions per packet.
type hmacKey struct {
	kind         hashKind
	inner, outer []byte // marshalled hash states
}

func newHMACKey(a sa.Auth, key []byte) (hmacKey, error) {
	kind, ok := hashOf(a)
	if !ok {
		return hmacKey{}, fmt.Errorf("precompute HMAC pads: no hash for %s", a)
	}
	h := newHash[kind]()
	if len(key) > h.BlockSize() {
		h.Write(key)
		key = h.Sum(nil)
		h.Reset()
	}
	pad := make([]byte, h.BlockSize())
	state := func(x byte) ([]byte, error) {
		clear(pad)
		copy(pad, key)
		for i := range pad {
			pad[i] ^= x
		}
		h.Reset()
		h.Write(pad)
		m, ok := h.(encoding.BinaryMarshaler)
		if !ok {
			return nil, fmt.Errorf("precompute HMAC pads: %s state cannot be saved", a)
		}
		return m.MarshalBinary()
	}
	inner, err := state(0x36)
	if err != nil {
		return hmacKey{}, err
	}
	outer, err := state(0x5c)
	if err != nil {
		return hmacKey{}, err
	}
	clear(pad)
	return hmacKey{kind: kind, inner: inner, outer: outer}, nil
}

// hasher is a reusable hash of one kind, with the restore method at hand.
type hasher struct {
	hash.Hash
	encoding.BinaryUnmarshaler
}

// macer holds one worker's hash states, one pair per kind, reused across
// sessions because the key lives in the restored state.
type macer struct {
	in, out [numHashKinds]hasher
	sum     [sha512.Size]byte
	seqHi   [4]byte
}

func newMacer() *macer {
	m := new(macer)
	for k, mk := range newHash {
		for _, h := range []*hasher{&m.in[k], &m.out[k]} {
			x := mk()
			h.Hash, h.BinaryUnmarshaler = x, x.(encoding.BinaryUnmarshaler)
		}
	}
	return m
}

// mac computes HMAC(key, data || seqHi if esn) and returns it in m's buffer.
func (m *macer) mac(k *hmacKey, data []byte, esn bool, seqHi uint32) ([]byte, error) {
	in, out := &m.in[k.kind], &m.out[k.kind]
	if err := in.UnmarshalBinary(k.inner); err != nil {
		return nil, fmt.Errorf("restore HMAC inner state: %w", err)
	}
	in.Write(data)
	if esn {
		m.seqHi = [4]byte{byte(seqHi >> 24), byte(seqHi >> 16), byte(seqHi >> 8), byte(seqHi)}
		in.Write(m.seqHi[:])
	}
	inner := in.Sum(m.sum[:0])
	if err := out.UnmarshalBinary(k.outer); err != nil {
		return nil, fmt.Errorf("restore HMAC outer state: %w", err)
	}
	out.Write(inner)
	return out.Sum(m.sum[:0]), nil
}
