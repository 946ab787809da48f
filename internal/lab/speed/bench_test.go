package speed

import (
	"context"
	"strconv"
	"testing"

	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/offload/engines"
)

func BenchmarkRound(b *testing.B) {
	for _, tc := range []struct {
		alg  string
		size int
	}{{"aes-128-cbc", 16}, {"aes-128-cbc", 8192}, {"des-ede3-cbc", 8192}} {
		b.Run(tc.alg+"/"+strconv.Itoa(tc.size), func(b *testing.B) {
			eng, err := (sim.Engines{}).Open("cpu", engines.Options{})
			if err != nil {
				b.Fatal(err)
			}
			alg, _ := ParseAlg(tc.alg)
			s, err := newStream(eng, alg, tc.size, 1)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(tc.size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.round(context.Background(), eng, tc.size); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
