package cbc

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
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

// BenchmarkRatio runs this package and crypto/cipher in turn within every
// iteration, so that on a shared, noisy machine both see the same
// conditions, and reports each one's rate and the ratio: the multi-buffer
// encryption of 8 buffers against one crypto/cipher stream over the same
// bytes, and the 8-way decryption against crypto/cipher's.
func BenchmarkRatio(b *testing.B) {
	r := rand.New(rand.NewPCG(11, 12))
	key := randBytes(r, 16)
	iv := (*[16]byte)(randBytes(r, 16))
	k, _ := NewKey(key)
	block, _ := aes.NewCipher(key)
	for _, size := range benchSizes {
		jobs := make([]Job, 8)
		for i := range jobs {
			buf := randBytes(r, size)
			jobs[i] = Job{Key: k, IV: iv, Dst: buf, Src: buf}
		}
		enc := cipher.NewCBCEncrypter(block, iv[:])
		dec := cipher.NewCBCDecrypter(block, iv[:])
		b.Run(fmt.Sprintf("encrypt-batch8/%d", size), func(b *testing.B) {
			var std, ours time.Duration
			b.SetBytes(int64(16 * size))
			for b.Loop() {
				t0 := time.Now()
				for _, j := range jobs {
					enc.CryptBlocks(j.Dst, j.Src)
				}
				t1 := time.Now()
				_ = EncryptBatch(jobs)
				std, ours = std+t1.Sub(t0), ours+time.Since(t1)
			}
			reportRatio(b, int64(8*size), std, ours)
		})
		b.Run(fmt.Sprintf("decrypt/%d", size), func(b *testing.B) {
			var std, ours time.Duration
			buf := jobs[0].Src
			b.SetBytes(int64(2 * size))
			for b.Loop() {
				t0 := time.Now()
				dec.CryptBlocks(buf, buf)
				t1 := time.Now()
				_ = k.Decrypt(iv, buf, buf)
				std, ours = std+t1.Sub(t0), ours+time.Since(t1)
			}
			reportRatio(b, int64(size), std, ours)
		})
	}
}

func reportRatio(b *testing.B, bytesPerRun int64, std, ours time.Duration) {
	n := float64(b.N * int(bytesPerRun))
	b.ReportMetric(n/std.Seconds()/1e6, "stdlib-MB/s")
	b.ReportMetric(n/ours.Seconds()/1e6, "aesni-MB/s")
	b.ReportMetric(std.Seconds()/ours.Seconds(), "x-stdlib")
}

// BenchmarkKernels runs every kernel this CPU has in turn within every
// iteration (see BenchmarkRatio) and reports each one's rate.
func BenchmarkKernels(b *testing.B) {
	r := rand.New(rand.NewPCG(13, 14))
	k, _ := NewKey(randBytes(r, 16))
	iv := (*[16]byte)(randBytes(r, 16))
	for _, size := range benchSizes {
		jobs := make([]Job, 8)
		for i := range jobs {
			buf := randBytes(r, size)
			jobs[i] = Job{Key: k, IV: iv, Dst: buf, Src: buf}
		}
		buf := jobs[0].Src
		for _, op := range []struct {
			name  string
			bytes int
			run   func(kernel)
		}{
			{"encrypt-batch8", 8 * size, func(kern kernel) { encryptBatch(jobs, kern) }},
			{"decrypt", size, func(kern kernel) { decrypt(k, iv, buf, buf, kern) }},
		} {
			b.Run(fmt.Sprintf("%s/%d", op.name, size), func(b *testing.B) {
				kernels := impls()
				spent := make([]time.Duration, len(kernels))
				for b.Loop() {
					for i, kern := range kernels {
						t0 := time.Now()
						op.run(kern)
						spent[i] += time.Since(t0)
					}
				}
				for i, kern := range kernels {
					b.ReportMetric(float64(b.N*op.bytes)/spent[i].Seconds()/1e6, kern.String()+"-MB/s")
				}
			})
		}
	}
}
