// Package gmac is AES-GMAC (RFC 4543): GHASH on PCLMULQDQ and the tag mask on AES-NI.
//
// GHASH runs up to eight blocks per reduction, each multiplied by its power
// of H from a table built once per key (the aggregated reduction of Go's
// GCM and intel-ipsec-mb). The tag mask E(K, J0) is encrypted on the AES-NI
// key schedule of package cbc. On CPUs without PCLMULQDQ or AES-NI, on other
// architectures and in builds with the purego tag, GHASH runs on Go's 4-bit
// table method and the mask on package cbc's pure-Go AES.
package gmac

import (
	"crypto/subtle"
	"encoding/binary"

	"github.com/espgw/espgw/offload/aesni/internal/cbc"
)

// TagSize is the length of a tag; NonceSize that of a nonce (salt ‖ IV).
const (
	TagSize   = 16
	NonceSize = 12
)

// Key is one AES key's GMAC state, 512 bytes: 256 of table, the 240-byte
// encryption schedule and two words. Build it once per SA; Tag only
// reads it, so goroutines may share it.
//
// The assembly reads table at offset 0; keep it first.
type Key struct {
	// table holds, for the assembly, H^8 … H^1 in its byte-reflected form,
	// each followed by the XOR of its halves (Karatsuba); for the
	// fallback, the sixteen 4-bit multiples of H.
	table  [16][2]uint64
	enc    [cbc.ScheduleLen]byte
	rounds int
	// asm says the table is the assembly's.
	asm bool
}

// Init expands a 16-, 24- or 32-byte AES key into k.
func (k *Key) Init(key []byte) error { return k.init(key, useAsm) }

// init is Init on the assembly or, if not asm, on the fallback.
func (k *Key) init(key []byte, asm bool) error {
	*k = Key{asm: asm}
	rounds, err := cbc.ExpandEncrypt(&k.enc, key)
	if err != nil {
		return err
	}
	k.rounds = rounds
	var h [16]byte
	if !asm {
		cbc.EncryptBlock(&k.enc, rounds, &h, &h)
		k.initGeneric(&h)
		return nil
	}
	encryptBlock(&k.enc[0], rounds, &h, &h)
	initTable(&k.table, &h)
	return nil
}

// Tag writes the GMAC of aad followed by data under nonce: GCM's tag with
// the concatenation as its associated data and an empty plaintext (RFC
// 4543 §3: aad is SPI and sequence number, data the IV and payload).
func (k *Key) Tag(tag *[TagSize]byte, nonce *[NonceSize]byte, aad, data []byte) {
	bits := uint64(len(aad)+len(data)) * 8
	var j0 [16]byte
	copy(j0[:], nonce[:])
	j0[15] = 1
	var acc [16]byte
	if k.asm {
		k.tagAsm(tag, &acc, &j0, aad, data, bits)
		return
	}
	var b [16]byte
	if n := len(aad) &^ 15; n > 0 {
		k.blocksGeneric(&acc, aad[:n])
		aad = aad[n:]
	}
	if len(aad) > 0 {
		// The block that aad ends in starts data.
		c := copy(b[:], aad)
		c += copy(b[c:], data)
		data = data[c-len(aad):]
		k.blocksGeneric(&acc, b[:])
	}
	whole := len(data) &^ 15
	if whole > 0 {
		k.blocksGeneric(&acc, data[:whole])
	}
	if whole < len(data) {
		b = [16]byte{}
		copy(b[:], data[whole:])
		k.blocksGeneric(&acc, b[:])
	}
	var lens [16]byte
	binary.BigEndian.PutUint64(lens[:], bits)
	k.blocksGeneric(&acc, lens[:])
	cbc.EncryptBlock(&k.enc, k.rounds, tag, &j0)
	subtle.XORBytes(tag[:], tag[:], acc[:])
}

// tagAsm is Tag on the assembly: one call from the block aad ends in, the
// whole blocks of data in place and its padded last block. A short packet
// is hashed from one padded copy instead.
func (k *Key) tagAsm(tag, acc, j0 *[16]byte, aad, data []byte, bits uint64) {
	if total := len(aad) + len(data); total <= smallLen {
		var buf [smallLen]byte
		copy(buf[copy(buf[:], aad):], data)
		ghash(&k.table, acc, nil, &buf[0], (total+15)/16, nil, &k.enc[0], k.rounds, j0, bits, tag)
		return
	}
	if n := len(aad) &^ 15; n > 0 {
		ghash(&k.table, acc, nil, &aad[0], n/16, nil, nil, 0, nil, 0, nil)
		aad = aad[n:]
	}
	var head, tail *[16]byte
	if len(aad) > 0 {
		head = new([16]byte)
		c := copy(head[:], aad)
		c += copy(head[c:], data)
		data = data[c-len(aad):]
	}
	whole := len(data) &^ 15
	if whole < len(data) {
		tail = new([16]byte)
		copy(tail[:], data[whole:])
	}
	var p *byte
	if whole > 0 {
		p = &data[0]
	}
	ghash(&k.table, acc, head, p, whole/16, tail, &k.enc[0], k.rounds, j0, bits, tag)
}

// smallLen is the most associated data the assembly hashes from a copy.
const smallLen = 128

// Verify reports in constant time whether icv is the tag of aad and data
// under nonce.
func (k *Key) Verify(icv []byte, nonce *[NonceSize]byte, aad, data []byte) bool {
	var tag [TagSize]byte
	k.Tag(&tag, nonce, aad, data)
	return subtle.ConstantTimeCompare(tag[:], icv) == 1
}

// initGeneric builds the fallback's table: the multiples of H by the
// 4-bit numbers, at their bit-reversed indices.
func (k *Key) initGeneric(h *[16]byte) {
	x := [2]uint64{binary.BigEndian.Uint64(h[:8]), binary.BigEndian.Uint64(h[8:])}
	k.table[reverseBits(1)] = x
	for i := 2; i < 16; i += 2 {
		k.table[reverseBits(i)] = double(k.table[reverseBits(i/2)])
		d := k.table[reverseBits(i)]
		k.table[reverseBits(i+1)] = [2]uint64{d[0] ^ x[0], d[1] ^ x[1]}
	}
}

// reverseBits reverses the bits of a 4-bit number.
func reverseBits(i int) int {
	i = (i<<2)&0xc | (i>>2)&0x3
	return (i<<1)&0xa | (i>>1)&0x5
}

// double multiplies a field element by x; in GCM's bit order that is a
// right shift, reduced by the polynomial 1 + x + x² + x⁷ + x¹²⁸.
func double(v [2]uint64) [2]uint64 {
	msb := v[1]&1 == 1
	d := [2]uint64{v[0] >> 1, v[1]>>1 | v[0]<<63}
	if msb {
		d[0] ^= 0xe100000000000000
	}
	return d
}

// reduction is what the four bits shifted out of a product add back.
var reduction = [16]uint16{
	0x0000, 0x1c20, 0x3840, 0x2460, 0x7080, 0x6ca0, 0x48c0, 0x54e0,
	0xe100, 0xfd20, 0xd940, 0xc560, 0x9180, 0x8da0, 0xa9c0, 0xb5e0,
}

// blocksGeneric is blocks on the 4-bit table, acc in big-endian order.
func (k *Key) blocksGeneric(acc *[16]byte, p []byte) {
	y := [2]uint64{binary.BigEndian.Uint64(acc[:8]), binary.BigEndian.Uint64(acc[8:])}
	for ; len(p) >= 16; p = p[16:] {
		y[0] ^= binary.BigEndian.Uint64(p)
		y[1] ^= binary.BigEndian.Uint64(p[8:])
		var z [2]uint64
		for i := range 2 {
			word := y[1-i]
			for j := 0; j < 64; j += 4 {
				msw := z[1] & 0xf
				z[1] = z[1]>>4 | z[0]<<60
				z[0] = z[0]>>4 ^ uint64(reduction[msw])<<48
				t := k.table[word&0xf]
				z[0] ^= t[0]
				z[1] ^= t[1]
				word >>= 4
			}
		}
		y = z
	}
	binary.BigEndian.PutUint64(acc[:8], y[0])
	binary.BigEndian.PutUint64(acc[8:], y[1])
}

// Implementation names the code Tag runs: "pclmulqdq" or "generic".
func Implementation() string {
	if useAsm {
		return "pclmulqdq"
	}
	return "generic"
}
