package cbc

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCPUTime measures as `openssl speed` does by default: bytes per
// second of the benchmarking thread's CPU time, not of wall-clock time, so
// that other work on a shared machine does not count against either side.
// Its numbers are the ones to hold against openssl speed's.
func BenchmarkCPUTime(b *testing.B) {
	r := rand.New(rand.NewPCG(15, 16))
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
		buf := jobs[0].Src
		enc := cipher.NewCBCEncrypter(block, iv[:])
		dec := cipher.NewCBCDecrypter(block, iv[:])
		var e Encrypter
		for _, c := range []struct {
			name  string
			bytes int
			run   func()
		}{
			{"encrypt/stdlib", size, func() { enc.CryptBlocks(buf, buf) }},
			{"encrypt/batch8", 8 * size, func() { _ = e.EncryptBatch(jobs) }},
			{"decrypt/stdlib", size, func() { dec.CryptBlocks(buf, buf) }},
			{"decrypt/aesni", size, func() { _ = k.Decrypt(iv, buf, buf) }},
		} {
			b.Run(fmt.Sprintf("%s/%d", c.name, size), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				start := threadCPU(b)
				for b.Loop() {
					c.run()
				}
				spent := threadCPU(b) - start
				b.ReportMetric(float64(b.N*c.bytes)/spent.Seconds()/1e6, "MB/cpu-s")
			})
		}
	}
}

// threadCPU is the CPU time the calling thread has used.
func threadCPU(b *testing.B) time.Duration {
	const rusageThread = 1 // RUSAGE_THREAD, Linux
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		b.Fatalf("getrusage(RUSAGE_THREAD): %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
