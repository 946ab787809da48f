package engines_test

import (
	"context"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload/engines"
	"github.com/espgw/espgw/sa"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSeal1400x32 seals batches of 32 1400-byte packets
// (aes-128-cbc+hmac-sha1-96) through esp.Processor on each engine; compare
// the engines' ns/op and cpu-ns/op (CPU time of the whole process, which a
// busy machine disturbs less than wall time) within one run.
func BenchmarkSeal1400x32(b *testing.B) {
	suite := sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}
	for _, tc := range []struct {
		name  string
		units int
	}{{"cpu", 0}, {"ring", 0}, {"cpu", 0}, {"ring", 0}, {"cpu", 0}, {"ring", 0}} {
		name := tc.name
		if tc.units > 0 {
			name += "-units=1"
		}
		b.Run(name, func(b *testing.B) {
			eng, err := engines.New(tc.name, engines.Options{Workers: tc.units})
			if err != nil {
				b.Fatal(err)
			}
			defer eng.Close()
			cfg := &sa.SA{SPI: 0x1001, Mode: sa.Tunnel, Suite: suite,
				Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
				EncKey: key(16), AuthKey: key(20)}
			out, err := esp.NewSA(cfg, eng, esp.Options{})
			if err != nil {
				b.Fatal(err)
			}
			pr := esp.NewProcessor(eng)
			pkts := make([]*esp.Packet, 32)
			bufs := make([][]byte, 32)
			for i := range pkts {
				pkts[i] = new(esp.Packet)
				bufs[i] = make([]byte, esp.Headroom+1400+esp.Tailroom)
			}
			ctx := context.Background()
			b.SetBytes(32 * 1400)
			b.ReportAllocs()
			c0 := cpuTime()
			for b.Loop() {
				for i, p := range pkts {
					*p = esp.Packet{Buf: bufs[i], Off: esp.Headroom, Len: 1400, SA: out}
					bufs[i][esp.Headroom] = 0x45
				}
				if err := pr.Seal(ctx, pkts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
