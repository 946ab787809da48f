package esp_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// BenchmarkManySAs seals and opens 64-byte packets in batches of 32, each
// packet on the next of n SA pairs in turn, on one goroutine with the cpu
// engine: what the per-SA state a packet touches (the SA, its history and
// counters, the engine session and key schedule) costs once thousands of
// SAs crowd each other out of the cache, without the pipeline's hand-offs.
// It reports the process's CPU per packet, seal plus open; n=10000 over
// n=1 is the layout's cost.
//
//	go test ./esp -run '^$' -bench ManySAs -benchtime 2000000x
func BenchmarkManySAs(b *testing.B) {
	ctx := context.Background()
	suite := sa.Suite{Cipher: sa.CipherAESGCM16}
	for _, n := range []int{1, 10000} {
		b.Run(fmt.Sprintf("sas=%d", n), func(b *testing.B) {
			eng := cpu.New()
			tx, rx := make([]*esp.SA, n), make([]*esp.SA, n)
			for i := range n {
				cfg := testSA(b, suite, sa.Tunnel, false)
				cfg.SPI, cfg.ESN, cfg.ReplayWindow = uint32(0x1000+i), true, 1024
				var err error
				if tx[i], err = esp.NewSA(cfg, eng, esp.Options{}); err != nil {
					b.Fatal(err)
				}
				if rx[i], err = esp.NewSA(cfg, eng, esp.Options{}); err != nil {
					b.Fatal(err)
				}
			}
			pr := esp.NewProcessor(eng)
			const batch = 32
			inner := innerOf(64)
			pkts := make([]esp.Packet, batch)
			ptrs := make([]*esp.Packet, batch)
			bufs := make([][]byte, batch)
			for i := range pkts {
				bufs[i] = make([]byte, esp.Headroom+len(inner)+esp.Tailroom)
				ptrs[i] = &pkts[i]
			}
			next := 0
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			for range b.N / batch {
				first := next
				for i, p := range ptrs {
					copy(bufs[i][esp.Headroom:], inner)
					*p = esp.Packet{Buf: bufs[i], Off: esp.Headroom, Len: len(inner), SA: tx[next]}
					next = (next + 1) % n
				}
				if err := pr.Seal(ctx, ptrs); err != nil {
					b.Fatal(err)
				}
				for i, p := range ptrs {
					if p.Drop != esp.OK {
						b.Fatalf("seal: %v", p.Drop)
					}
					*p = esp.Packet{Buf: p.Buf, Off: p.Off, Len: p.Len, SA: rx[(first+i)%n]}
				}
				if err := pr.Open(ctx, ptrs); err != nil {
					b.Fatal(err)
				}
				for _, p := range ptrs {
					if p.Drop != esp.OK {
						b.Fatalf("open: %v", p.Drop)
					}
				}
			}
			b.StopTimer()
			// The process's CPU time: on a shared machine the wall time
			// is mostly waiting for a core.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N/batch*batch), "cpu-ns/pkt")
		})
	}
}

// processCPU is the user and system time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
