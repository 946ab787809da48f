// Package cbc is AES-CBC for the aesni offload engine, in amd64 assembly with
// a pure-Go fallback.
//
// It owns the two shapes of CBC that a gateway holding a batch of packets can
// run faster than one stream at a time, as intel-ipsec-mb does:
//
//   - Decrypt: CBC decryption is parallel within one buffer, so the assembly
//     keeps 8 blocks in flight (AESDEC on 8 XMM registers), or 16 where the
//     CPU has VAES (VAESDEC on 8 YMM registers, two blocks each).
//   - Encrypter.EncryptBatch: CBC encryption is serial within one buffer but independent
//     across buffers, so the assembly runs up to 8 buffers as lanes, one block
//     per lane per step (two lanes per YMM register where the CPU has VAES),
//     and a job scheduler refills a lane with the next buffer as soon as its
//     buffer is done. A batch of at most 8 equal buffers, the common case,
//     skips the scheduler: one kernel call.
//
// Everything works in place (dst may be src) and allocates nothing per call.
// The assembly is used on amd64 CPUs with AES-NI (and VAES with AVX2 where
// present, found with CPUID); elsewhere, on CPUs without it and in builds
// with the purego tag, the same scheduler drives the standard library's
// block cipher. The key schedules are computed in Go (FIPS 197) once per key.
package cbc

//go:generate python3 _asm/gen.py

import (
	"errors"
	"fmt"
	"unsafe"
)

// Job is one buffer for Encrypter.EncryptBatch: Src encrypted under Key in
// CBC mode from IV into Dst. IV is only read; Dst may be Src.
type Job struct {
	Key *Key
	IV  *[BlockSize]byte
	Dst []byte
	Src []byte
}

// Decrypt decrypts src, a whole number of blocks, into dst in CBC mode from
// iv. iv is only read; dst may be src.
func (k *Key) Decrypt(iv *[BlockSize]byte, dst, src []byte) error {
	if err := checkBuffers(k, iv, dst, src); err != nil {
		return fmt.Errorf("cbc decrypt: %w", err)
	}
	decrypt(k, iv, dst, src, best)
	return nil
}

// Encrypt encrypts src, a whole number of blocks, into dst in CBC mode from
// iv: one stream, with no other buffer to interleave. iv is only read; dst may
// be src.
func (k *Key) Encrypt(iv *[BlockSize]byte, dst, src []byte) error {
	if err := checkBuffers(k, iv, dst, src); err != nil {
		return fmt.Errorf("cbc encrypt: %w", err)
	}
	encrypt(k, iv, dst, src, best)
	return nil
}

// EncryptInPlace is Encrypt with dst and src both buf, for a small buffer,
// on which the calls between the caller and the assembly cost as much as a
// block: one call, the checks in place need, then the assembly.
func (k *Key) EncryptInPlace(iv *[BlockSize]byte, buf []byte) error {
	if best == kernelGo || k == nil || k.rounds == 0 || iv == nil || len(buf) == 0 || len(buf)%BlockSize != 0 {
		return k.Encrypt(iv, buf, buf)
	}
	encryptBlocksAsm(&k.enc[0], k.rounds, iv, &buf[0], &buf[0], len(buf)/BlockSize)
	return nil
}

// DecryptInPlace is Decrypt with dst and src both buf, like EncryptInPlace.
func (k *Key) DecryptInPlace(iv *[BlockSize]byte, buf []byte) error {
	if best == kernelGo || k == nil || k.rounds == 0 || iv == nil || len(buf) == 0 || len(buf)%BlockSize != 0 {
		return k.Decrypt(iv, buf, buf)
	}
	decryptBlocksAsm(&k.dec[0], k.rounds, iv, &buf[0], &buf[0], len(buf)/BlockSize, best == kernelVAES)
	return nil
}

var (
	errNoKey    = errors.New("no key")
	errNoIV     = errors.New("no IV")
	errKeyUnset = errors.New("key not initialised (use NewKey or Init)")
	errOverlap  = errors.New("dst and src overlap without being the same buffer")
)

func checkBuffers(k *Key, iv *[BlockSize]byte, dst, src []byte) error {
	switch {
	case k == nil:
		return errNoKey
	case k.rounds == 0:
		return errKeyUnset
	case iv == nil:
		return errNoIV
	case len(src)%BlockSize != 0:
		return fmt.Errorf("input of %d bytes is not a whole number of %d-byte blocks", len(src), BlockSize)
	case len(dst) < len(src):
		return fmt.Errorf("output of %d bytes is shorter than the %d-byte input", len(dst), len(src))
	case inexactOverlap(dst[:len(src)], src):
		return errOverlap
	}
	return nil
}

// inexactOverlap reports whether x and y share memory at different offsets,
// which in-place CBC cannot handle.
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	xs, ys := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	return xs < ys+uintptr(len(y)) && ys < xs+uintptr(len(x))
}

func decrypt(k *Key, iv *[BlockSize]byte, dst, src []byte, kern kernel) {
	if len(src) == 0 {
		return
	}
	if kern != kernelGo {
		decryptBlocksAsm(&k.dec[0], k.rounds, iv, &dst[0], &src[0], len(src)/BlockSize, kern == kernelVAES)
		return
	}
	// Backwards, so that in place the ciphertext block each block needs
	// is still there when it is needed.
	for i := len(src) - BlockSize; i >= 0; i -= BlockSize {
		k.block.Decrypt(dst[i:i+BlockSize], src[i:i+BlockSize])
		prev := iv[:]
		if i > 0 {
			prev = src[i-BlockSize : i]
		}
		for b, p := range prev {
			dst[i+b] ^= p
		}
	}
}

func encrypt(k *Key, iv *[BlockSize]byte, dst, src []byte, kern kernel) {
	if len(src) == 0 {
		return
	}
	if kern != kernelGo {
		encryptBlocksAsm(&k.enc[0], k.rounds, iv, &dst[0], &src[0], len(src)/BlockSize)
		return
	}
	prev := iv[:]
	for i := 0; i < len(src); i += BlockSize {
		out := dst[i : i+BlockSize]
		for b := range out {
			out[b] = src[i+b] ^ prev[b]
		}
		k.block.Encrypt(out, out)
		prev = out
	}
}

// kernel names an implementation of the CBC loops.
type kernel uint8

const (
	kernelGo   kernel = iota // the standard library's block cipher
	kernelXMM                // AES-NI on XMM registers, legacy SSE encoding
	kernelAVX                // AES-NI on XMM registers, VEX encoding with memory operands
	kernelVAES               // kernelAVX, and VAES on YMM registers (two blocks per instruction) to decrypt
)

var kernelNames = [...]string{kernelGo: "go", kernelXMM: "aes-ni", kernelAVX: "aes-ni-avx", kernelVAES: "vaes-avx2"}

func (k kernel) String() string { return kernelNames[k] }

// Implementation names what runs the CBC loops on this CPU and build:
// "vaes-avx2", "aes-ni-avx", "aes-ni" or "go".
func Implementation() string { return best.String() }
