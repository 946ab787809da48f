package cbc

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"math/rand/v2"
	"testing"
)

// The benchmarks put this package beside crypto/cipher's CBC, the reference
// the ratios are taken against (and openssl speed, run beside them).

var benchSizes = []int{64, 1024, 8192}

func BenchmarkEncrypt(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	key := randBytes(r, 16)
	iv := (*[16]byte)(randBytes(r, 16))
	k, _ := NewKey(key)
	block, _ := aes.NewCipher(key)
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("stdlib/%d", size), func(b *testing.B) {
			buf := randBytes(r, size)
			enc := cipher.NewCBCEncrypter(block, iv[:])
			b.SetBytes(int64(size))
			for b.Loop() {
				enc.CryptBlocks(buf, buf)
			}
		})
		b.Run(fmt.Sprintf("single/%d", size), func(b *testing.B) {
			buf := randBytes(r, size)
			b.SetBytes(int64(size))
			for b.Loop() {
				_ = k.Encrypt(iv, buf, buf)
			}
		})
		b.Run(fmt.Sprintf("batch8/%d", size), func(b *testing.B) {
			jobs := make([]Job, 8)
			for i := range jobs {
				buf := randBytes(r, size)
				jobs[i] = Job{Key: k, IV: iv, Dst: buf, Src: buf}
			}
			b.SetBytes(int64(8 * size))
			for b.Loop() {
				_ = EncryptBatch(jobs)
			}
		})
	}
}

func BenchmarkDecrypt(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	key := randBytes(r, 16)
	iv := (*[16]byte)(randBytes(r, 16))
	k, _ := NewKey(key)
	block, _ := aes.NewCipher(key)
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("stdlib/%d", size), func(b *testing.B) {
			buf := randBytes(r, size)
			dec := cipher.NewCBCDecrypter(block, iv[:])
			b.SetBytes(int64(size))
			for b.Loop() {
				dec.CryptBlocks(buf, buf)
			}
		})
		b.Run(fmt.Sprintf("8way/%d", size), func(b *testing.B) {
			buf := randBytes(r, size)
			b.SetBytes(int64(size))
			for b.Loop() {
				_ = k.Decrypt(iv, buf, buf)
			}
		})
	}
}
