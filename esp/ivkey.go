package esp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"sync/atomic"
)

// IVKey makes the CBC IVs (AES-CBC, 3DES-CBC) of the SAs built with it
// (Options.IVKey): one random AES-128 key for all of them, so that a table
// of many SAs holds one key schedule for its IVs instead of one per SA.
//
// Each SA history built with it takes a number of its own (Number), and
// its IV for sequence number seq is AES_key(seq ‖ number), as NIST SP
// 800-38A appendix C permits: the block is never the same twice under the
// key, since no SA sends a sequence number twice and no two histories
// share a number, so no two IVs come from one block; and the key is
// random and never leaves the IVKey, so an IV is the output of a
// pseudorandom permutation on a fresh input: unpredictable (RFC 3602 §3)
// to anyone who saw any number of other IVs, of this SA or another.
type IVKey struct {
	block cipher.Block
	next  atomic.Uint64 // the last number handed out
}

// NewIVKey draws a random IV key.
func NewIVKey() *IVKey {
	var key [16]byte
	rand.Read(key[:])
	b, _ := aes.NewCipher(key[:]) // a 16-byte key is always valid
	return &IVKey{block: b}
}

// Number hands out a number no earlier call on k returned.
func (k *IVKey) Number() uint64 {
	return k.next.Add(1)
}
