package esp_test

import (
	"context"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// TestSealOpenAllocateNothing proves the per-packet path allocates nothing
// once the pools are warm.
func TestSealOpenAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector (sync.Pool drops items); the test runs in the plain build")
	}
	ctx := context.Background()
	for _, suite := range cpu.Suites() {
		t.Run(suite.String(), func(t *testing.T) {
			cfg := testSA(t, suite, sa.Tunnel, false)
			cfg.ReplayWindow = 1024
			out, in := newPair(t, cfg)
			pr := esp.NewProcessor(out.Engine())
			inner := udpPacket(false, 1000)
			buf := make([]byte, esp.Headroom+len(inner)+esp.Tailroom)
			p, q := new(esp.Packet), new(esp.Packet)
			batchP, batchQ := []*esp.Packet{p}, []*esp.Packet{q}
			round := func() {
				copy(buf[esp.Headroom:], inner)
				*p = esp.Packet{Buf: buf, Off: esp.Headroom, Len: len(inner), SA: out}
				if err := pr.Seal(ctx, batchP); err != nil || p.Drop != esp.OK {
					t.Fatalf("seal: %v %v", err, p.Drop)
				}
				*q = esp.Packet{Buf: buf, Off: p.Off, Len: p.Len, SA: in}
				if err := pr.Open(ctx, batchQ); err != nil || q.Drop != esp.OK {
					t.Fatalf("open: %v %v", err, q.Drop)
				}
			}
			round()
			if n := testing.AllocsPerRun(200, round); n != 0 {
				t.Errorf("seal+open allocates %.1f times per packet, want 0", n)
			}
		})
	}
}
