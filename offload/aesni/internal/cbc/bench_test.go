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
// its ratios are taken against (and openssl speed, run beside them).

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
			var e Encrypter
			b.SetBytes(int64(8 * size))
			for b.Loop() {
				_ = e.EncryptBatch(jobs)
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
// conditions, and reports each one's rate over its fastest run and the ratio: the multi-buffer
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
			var std, ours fastest
			var e Encrypter
			b.SetBytes(int64(16 * size))
			for b.Loop() {
				t0 := time.Now()
				for _, j := range jobs {
					enc.CryptBlocks(j.Dst, j.Src)
				}
				t1 := time.Now()
				_ = e.EncryptBatch(jobs)
				std.add(t1.Sub(t0))
				ours.add(time.Since(t1))
			}
			reportRatio(b, 8*size, std, ours)
		})
		b.Run(fmt.Sprintf("decrypt/%d", size), func(b *testing.B) {
			var std, ours fastest
			buf := jobs[0].Src
			b.SetBytes(int64(2 * size))
			for b.Loop() {
				t0 := time.Now()
				dec.CryptBlocks(buf, buf)
				t1 := time.Now()
				_ = k.Decrypt(iv, buf, buf)
				std.add(t1.Sub(t0))
				ours.add(time.Since(t1))
			}
			reportRatio(b, size, std, ours)
		})
	}
}

func reportRatio(b *testing.B, bytesPerRun int, std, ours fastest) {
	b.ReportMetric(std.rate(bytesPerRun), "stdlib-MB/s")
	b.ReportMetric(ours.rate(bytesPerRun), "aesni-MB/s")
	b.ReportMetric(std.min.Seconds()/ours.min.Seconds(), "x-stdlib")
}

// fastest keeps the shortest of many timed runs. On a machine shared with
// other work most runs are stretched by preemption; the shortest is the
// closest to the code's own speed, and taking it for both sides of a ratio
// keeps the ratio fair.
type fastest struct{ min time.Duration }

func (f *fastest) add(d time.Duration) {
	if f.min == 0 || d < f.min {
		f.min = d
	}
}

// rate is bytes per run over the shortest run, in MB/s.
func (f *fastest) rate(bytes int) float64 { return float64(bytes) / f.min.Seconds() / 1e6 }

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
		jobs32 := make([]Job, 32)
		for i := range jobs32 {
			buf := randBytes(r, size)
			jobs32[i] = Job{Key: k, IV: iv, Dst: buf, Src: buf}
		}
		buf := jobs[0].Src
		var e Encrypter
		for _, op := range []struct {
			name  string
			bytes int
			run   func(kernel)
		}{
			{"encrypt-batch8", 8 * size, func(kern kernel) { e.encryptBatch(jobs, kern) }},
			{"encrypt-batch16", 16 * size, func(kern kernel) { e.encryptBatch(jobs32[:16], kern) }},
			{"encrypt-batch32", 32 * size, func(kern kernel) { e.encryptBatch(jobs32, kern) }},
			{"decrypt", size, func(kern kernel) { decrypt(k, iv, buf, buf, kern) }},
		} {
			b.Run(fmt.Sprintf("%s/%d", op.name, size), func(b *testing.B) {
				kernels := impls()
				fastest := make([]fastest, len(kernels))
				for b.Loop() {
					for i, kern := range kernels {
						t0 := time.Now()
						op.run(kern)
						fastest[i].add(time.Since(t0))
					}
				}
				for i, kern := range kernels {
					b.ReportMetric(fastest[i].rate(op.bytes), kern.String()+"-MB/s")
				}
			})
		}
	}
}
