// Package ccm is the CCM mode (NIST SP 800-38C) as a cipher.AEAD.
//
// It is the CCM mode of NIST SP 800-38C (RFC 3610) as a cipher.AEAD over any
// 128-bit block cipher: a CBC-MAC over the nonce, the associated data and
// the plaintext, and CTR encryption of the plaintext and the tag. ESP's
// AES-CCM (RFC 4309) uses it with an 11-byte nonce and 8-, 12- or 16-byte
// tags. Seal and Open work in place and allocate nothing.
package ccm

import (
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

const blockSize = 16

// ErrOpen is returned by Open when the tag does not verify.
var ErrOpen = errors.New("ccm: message authentication failed")

// Mac is a CBC-MAC step: it runs CBC encryption of src (whole blocks)
// chained from the state in x, leaving the last ciphertext block in x;
// scratch (ScratchLen bytes) is its own to write. A block cipher with a
// faster CBC than one block at a time supplies its own.
type Mac func(x *[blockSize]byte, src, scratch []byte)

// ScratchLen is the length of a Mac's scratch.
const ScratchLen = 8 * blockSize

type ccm struct {
	b         cipher.Block
	mac       Mac
	nonceSize int
	tagSize   int
}

// scratch holds the blocks an op works in; pooled because slices handed
// to cipher.Block escape and would otherwise allocate per op.
type scratch struct {
	x, ctr, s0 [blockSize]byte
	blocks     [8 * blockSize]byte
	stream     [ScratchLen]byte // the key stream, or a Mac's scratch
	tag        [blockSize]byte
}

// The scratch holds no key: one pool serves every AEAD.
var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// New returns CCM over b with the given nonce (7…13 bytes) and tag (4, 6,
// 8, 10, 12, 14 or 16 bytes) sizes. mac, if not nil, runs the CBC-MAC in
// place of b's one-block-at-a-time chaining.
func New(b cipher.Block, nonceSize, tagSize int, mac Mac) (cipher.AEAD, error) {
	if b.BlockSize() != blockSize {
		return nil, fmt.Errorf("ccm: a %d-byte block cipher, want 16", b.BlockSize())
	}
	if nonceSize < 7 || nonceSize > 13 {
		return nil, fmt.Errorf("ccm: nonce of %d bytes, want 7…13", nonceSize)
	}
	if tagSize < 4 || tagSize > 16 || tagSize%2 != 0 {
		return nil, fmt.Errorf("ccm: tag of %d bytes, want 4, 6, 8, 10, 12, 14 or 16", tagSize)
	}
	c := &ccm{b: b, mac: mac, nonceSize: nonceSize, tagSize: tagSize}
	if c.mac == nil {
		c.mac = c.chain
	}
	return c, nil
}

func (c *ccm) NonceSize() int { return c.nonceSize }
func (c *ccm) Overhead() int  { return c.tagSize }

// maxLen is the longest plaintext the length field of 15-nonceSize bytes holds.
func (c *ccm) maxLen() uint64 {
	q := 15 - c.nonceSize
	if q >= 8 {
		return 1<<63 - 1
	}
	return 1<<(8*q) - 1
}

// chain is the CBC-MAC on the block cipher alone.
func (c *ccm) chain(x *[blockSize]byte, src, _ []byte) {
	for len(src) > 0 {
		subtle.XORBytes(x[:], x[:], src[:blockSize])
		c.b.Encrypt(x[:], x[:])
		src = src[blockSize:]
	}
}

// tag computes the CBC-MAC of nonce, aad and plaintext into sc.tag
// (SP 800-38C A.2: B0, the encoded associated data, the payload, each
// zero-padded to whole blocks).
func (c *ccm) tag(sc *scratch, nonce, plaintext, aad []byte) {
	q := 15 - c.nonceSize
	x := &sc.x
	clear(x[:])
	x[0] = byte((c.tagSize-2)/2<<3 | (q - 1))
	if len(aad) > 0 {
		x[0] |= 1 << 6
	}
	copy(x[1:], nonce)
	n := uint64(len(plaintext))
	for i := 15; i > c.nonceSize; i-- {
		x[i] = byte(n)
		n >>= 8
	}
	c.b.Encrypt(x[:], x[:])
	if len(aad) > 0 {
		// The length prefix, then as much of aad as fills the block.
		blk := sc.blocks[:blockSize]
		clear(blk)
		var h int
		switch {
		case len(aad) < 1<<16-1<<8:
			binary.BigEndian.PutUint16(blk, uint16(len(aad)))
			h = 2
		case uint64(len(aad)) < 1<<32:
			blk[0], blk[1] = 0xff, 0xfe
			binary.BigEndian.PutUint32(blk[2:], uint32(len(aad)))
			h = 6
		default:
			blk[0], blk[1] = 0xff, 0xff
			binary.BigEndian.PutUint64(blk[2:], uint64(len(aad)))
			h = 10
		}
		k := copy(blk[h:], aad)
		c.mac(x, blk, sc.stream[:])
		c.macPadded(sc, aad[k:])
	}
	c.macPadded(sc, plaintext)
}

// macPadded feeds data to the CBC-MAC, its last partial block zero-padded.
func (c *ccm) macPadded(sc *scratch, data []byte) {
	whole := len(data) &^ (blockSize - 1)
	if whole > 0 {
		c.mac(&sc.x, data[:whole], sc.stream[:])
	}
	if rest := data[whole:]; len(rest) > 0 {
		blk := sc.blocks[:blockSize]
		clear(blk)
		copy(blk, rest)
		c.mac(&sc.x, blk, sc.stream[:])
	}
}

// ctr XORs data with the key stream from counter 1 and leaves the first
// key block (counter 0, which encrypts the tag) in sc.s0.
func (c *ccm) ctr(sc *scratch, nonce, dst, src []byte) {
	q := 15 - c.nonceSize
	ctr := &sc.ctr
	clear(ctr[:])
	ctr[0] = byte(q - 1)
	copy(ctr[1:], nonce)
	c.b.Encrypt(sc.s0[:], ctr[:])
	for i := 0; i < 8; i++ {
		copy(sc.blocks[i*blockSize:], ctr[:])
	}
	var counter uint64 = 1
	for len(src) > 0 {
		n := min(len(src), len(sc.stream))
		for i := 0; i*blockSize < n; i++ {
			b := sc.blocks[i*blockSize : (i+1)*blockSize]
			v := counter
			for j := 15; j > c.nonceSize; j-- {
				b[j] = byte(v)
				v >>= 8
			}
			counter++
			c.b.Encrypt(sc.stream[i*blockSize:], b)
		}
		subtle.XORBytes(dst[:n], src[:n], sc.stream[:n])
		src, dst = src[n:], dst[n:]
	}
}

func (c *ccm) Seal(dst, nonce, plaintext, aad []byte) []byte {
	if len(nonce) != c.nonceSize {
		panic("ccm: incorrect nonce length given to Seal")
	}
	if uint64(len(plaintext)) > c.maxLen() {
		panic("ccm: message too large for the nonce size")
	}
	ret, out := sliceForAppend(dst, len(plaintext)+c.tagSize)
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	c.tag(sc, nonce, plaintext, aad)
	c.ctr(sc, nonce, out, plaintext)
	subtle.XORBytes(out[len(plaintext):], sc.x[:c.tagSize], sc.s0[:c.tagSize])
	return ret
}

func (c *ccm) Open(dst, nonce, ciphertext, aad []byte) ([]byte, error) {
	if len(nonce) != c.nonceSize {
		panic("ccm: incorrect nonce length given to Open")
	}
	if len(ciphertext) < c.tagSize || uint64(len(ciphertext)-c.tagSize) > c.maxLen() {
		return nil, ErrOpen
	}
	n := len(ciphertext) - c.tagSize
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	copy(sc.tag[:], ciphertext[n:])
	ret, out := sliceForAppend(dst, n)
	c.ctr(sc, nonce, out, ciphertext[:n])
	c.tag(sc, nonce, out, aad)
	subtle.XORBytes(sc.x[:c.tagSize], sc.x[:c.tagSize], sc.s0[:c.tagSize])
	if subtle.ConstantTimeCompare(sc.x[:c.tagSize], sc.tag[:c.tagSize]) != 1 {
		// CCM can only check the tag over the plaintext: wipe it.
		clear(out)
		return nil, ErrOpen
	}
	return ret, nil
}

// sliceForAppend extends in by n bytes, as crypto/cipher does.
func sliceForAppend(in []byte, n int) (head, tail []byte) {
	if total := len(in) + n; cap(in) >= total {
		head = in[:total]
	} else {
		head = make([]byte, total)
		copy(head, in)
	}
	tail = head[len(in):]
	return
}
