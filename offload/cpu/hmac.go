package cpu

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strings"
	"sync"

	"github.com/espgw/espgw/sa"
)

// An HMAC (RFC 2104) hashes every message after one block of the key
// XOR ipad, and its inner hash after one block of the key XOR opad. A
// session keeps the hash's state after each of those blocks, as the
// hash's own binary marshaling writes it, and a packet's HMAC starts from
// them in a pooled hash that all sessions of the hash share: a session
// holds tens of bytes of keyed state, not hashes of its own.
//
// After exactly one block the hash's buffer is empty, and its marshaled
// form (magic, chaining state, buffer, length) holds a block of zeros
// where the buffer is, 8 bytes before the end; a session keeps the state
// without them.

// hashKind names the hash of an HMAC suite.
type hashKind uint8

const (
	noHash hashKind = iota
	hashMD5
	hashSHA1
	hashSHA256
	hashSHA384
	hashSHA512
	numHashes
)

// hashInfo is what a hash kind makes its hashes with, and the pool of
// scratch its HMACs run in.
type hashInfo struct {
	new  func() hash.Hash
	pool sync.Pool // *macScratch
}

// hashes are the hash kinds' constructors and scratch pools; the pools
// hold no key (the keyed states come from the session).
var hashes = [numHashes]hashInfo{
	hashMD5:    {new: md5.New},
	hashSHA1:   {new: sha1.New},
	hashSHA256: {new: sha256.New},
	hashSHA384: {new: sha512.New384},
	hashSHA512: {new: sha512.New},
}

func hashOf(a sa.Auth) hashKind {
	switch a {
	case sa.AuthHMACSHA1_96:
		return hashSHA1
	case sa.AuthHMACSHA256_128:
		return hashSHA256
	case sa.AuthHMACSHA384_192:
		return hashSHA384
	case sa.AuthHMACSHA512_256:
		return hashSHA512
	case sa.AuthHMACMD5_96:
		return hashMD5
	}
	return noHash
}

// macScratch is one pooled hash and the room its HMAC works in.
type macScratch struct {
	h     hash.Hash
	state []byte // a marshaled state, restored from a session's pads
	sum   [64]byte
	seqHi [4]byte
	pad   [128]byte // a key block XOR ipad or opad
}

// scratch takes a scratch of the kind from its pool, or a new one; give
// it back with done.
func (k hashKind) scratch() *macScratch {
	if m, ok := hashes[k].pool.Get().(*macScratch); ok {
		return m
	}
	return &macScratch{h: hashes[k].new()}
}

func (k hashKind) done(m *macScratch) { hashes[k].pool.Put(m) }

// errStateLayout is returned when a hash's marshaled state after one block
// is not laid out as the session's compact keyed states expect.
var errStateLayout = errors.New("the hash's marshaled state after one block does not end in an empty buffer and its length")

// pads computes the keyed states of an HMAC of this kind under key: the
// inner one, then the outer one, each the hash's marshaled state after
// its first block without the block of zeros of its empty buffer.
func (k hashKind) pads(key []byte) (string, error) {
	m := k.scratch()
	defer k.done(m)
	h := m.h
	bs := h.BlockSize()
	if len(key) > bs {
		h.Reset()
		h.Write(key)
		key = h.Sum(m.sum[:0])
	}
	var out strings.Builder
	for _, x := range [2]byte{0x36, 0x5c} {
		pad := m.pad[:bs]
		clear(pad)
		copy(pad, key)
		for i := range pad {
			pad[i] ^= x
		}
		h.Reset()
		h.Write(pad)
		st, err := h.(encoding.BinaryAppender).AppendBinary(m.state[:0])
		if err != nil {
			return "", fmt.Errorf("HMAC keyed state: %w", err)
		}
		m.state = st
		buf := len(st) - 8 - bs
		if buf < 0 || slices.ContainsFunc(st[buf:buf+bs], func(b byte) bool { return b != 0 }) {
			return "", fmt.Errorf("HMAC keyed state: %w", errStateLayout)
		}
		if out.Cap() == 0 {
			out.Grow(2 * (len(st) - bs)) // both states: one allocation, no garbage
		}
		out.Write(st[:buf])
		out.Write(st[buf+bs:])
	}
	clear(m.pad[:])
	for which := range 2 {
		if err := k.restore(m, out.String(), which); err != nil {
			return "", fmt.Errorf("HMAC keyed state: %w", err)
		}
	}
	return out.String(), nil
}

// start puts m's hash in the keyed state which (0 inner, 1 outer) of
// pads, which pads checked it takes.
func (k hashKind) start(m *macScratch, pads string, which int) {
	if err := k.restore(m, pads, which); err != nil {
		panic(fmt.Sprintf("restore an HMAC keyed state that restored before: %v", err))
	}
}

func (k hashKind) restore(m *macScratch, pads string, which int) error {
	h := m.h
	bs := h.BlockSize()
	n := len(pads) / 2 // each state without its buffer
	p := pads[which*n : (which+1)*n]
	head := n - 8
	st := append(m.state[:0], p[:head]...)
	st = append(st, make([]byte, bs)...)
	st = append(st, p[head:]...)
	m.state = st
	return h.(encoding.BinaryUnmarshaler).UnmarshalBinary(st)
}
