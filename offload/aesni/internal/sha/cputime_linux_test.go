package sha

import (
	"crypto/hmac"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCPUTime measures as `openssl speed` does by default: bytes per
// second of the benchmarking thread's CPU time, so that other work on a
// shared machine does not count against either side. Per hash and size, 8
// packets: the standard library's crypto/hmac, one stream per packet
// (single), the two-stream kernel on pairs of packets (batch8), and the
// kernels alone over whole blocks: one stream (x1) against two interleaved
// (x2), the figure that says what interleaving gains on this CPU.
func BenchmarkCPUTime(b *testing.B) {
	const batch = 8
	for _, h := range []Hash{SHA1, SHA256} {
		for _, size := range []int{64, 1024, 8192} {
			key := []byte("0123456789abcdef0123")
			k, _ := NewKey(h, key)
			data := make([]byte, batch*size)
			sums := make([][MaxSize]byte, batch)
			jobs := make([]Job, batch)
			for i := range jobs {
				jobs[i] = Job{Key: k, Data: data[i*size : (i+1)*size], Sum: &sums[i]}
			}
			std := hmac.New(newStd(h), key)
			var m Macer
			var st0, st1 [8]uint32
			p0, p1 := &data[0], &data[len(data)/2]
			n := len(data) / 2 / BlockSize
			var x x8
			for l := range x.p {
				x.p[l] = &data[l*len(data)/8]
			}
			for _, c := range []struct {
				name string
				run  func()
			}{
				{"stdlib", func() {
					for i := range jobs {
						std.Reset()
						std.Write(jobs[i].Data)
						std.Sum(sums[i][:0])
					}
				}},
				{"single", func() {
					for i := range jobs {
						_ = k.MAC(&sums[i], jobs[i].Data, false, 0)
					}
				}},
				{"batch8", func() { _ = m.MACBatch(jobs) }},
				{"kernel-x1", func() { blocks(h, best, &st0, p0, n); blocks(h, best, &st1, p1, n) }},
				{"kernel-x2", func() { blocks2(h, best, &st0, &st1, p0, p1, n) }},
				{"kernel-x8", func() { blocks8(h, &x, n/4) }},
			} {
				if c.name == "kernel-x8" && !x8Runs(h) {
					continue
				}
				b.Run(fmt.Sprintf("%s/%d/%s", h, size, c.name), func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					start := threadCPU(b)
					for b.Loop() {
						c.run()
					}
					spent := threadCPU(b) - start
					b.ReportMetric(float64(b.N*len(data))/spent.Seconds()/1e6, "MB/cpu-s")
				})
			}
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
