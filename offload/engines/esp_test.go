package engines_test

import (
	"bytes"
	"context"
	"net/netip"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// inner builds an IPv4 UDP packet with n payload bytes.
func inner(n int) []byte {
	p := make([]byte, 28+n)
	p[0] = 0x45
	p[2], p[3] = byte((28+n)>>8), byte(28+n)
	p[8], p[9] = 64, 17
	copy(p[12:], []byte{198, 51, 100, 1})
	copy(p[16:], []byte{203, 0, 113, 1})
	p[24], p[25] = byte((8+n)>>8), byte(8+n)
	for i := range n {
		p[28+i] = byte(i)
	}
	return p
}

// TestESPRoundTripEveryEngine is esp's round trip (seal, open, compare) on
// every registered engine, every suite, both modes, with ESN on and off, in
// batches, so the ESP core is known to work on each of them.
func TestESPRoundTripEveryEngine(t *testing.T) {
	ctx := context.Background()
	for _, name := range testEngines() {
		t.Run(name, func(t *testing.T) {
			eng := newEngine(t, name)
			pr := esp.NewProcessor(eng)
			for _, suite := range cpu.AllSuites() {
				if !accepts(eng, suite) {
					continue
				}
				for _, mode := range []sa.Mode{sa.Tunnel, sa.Transport} {
					for _, esn := range []bool{false, true} {
						cfg := &sa.SA{SPI: 0x1001, Mode: mode, Suite: suite, ReplayWindow: 64, ESN: esn,
							Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
							EncKey: key(suite.EncKeyLens()[0]), AuthKey: key(suite.AuthKeyLen())}
						out, err := esp.NewSA(cfg, eng, esp.Options{})
						if err != nil {
							t.Fatal(err)
						}
						in, err := esp.NewSA(cfg, eng, esp.Options{})
						if err != nil {
							t.Fatal(err)
						}
						defer out.Close()
						defer in.Close()
						var pkts, opened []*esp.Packet
						var want [][]byte
						for _, n := range []int{0, 1, 13, 100, 1400} {
							data := inner(n)
							buf := make([]byte, esp.Headroom+len(data)+esp.Tailroom)
							copy(buf[esp.Headroom:], data)
							pkts = append(pkts, &esp.Packet{Buf: buf, Off: esp.Headroom, Len: len(data), SA: out})
							want = append(want, data)
						}
						if err := pr.Seal(ctx, pkts); err != nil {
							t.Fatal(err)
						}
						hdr := 0
						if mode == sa.Transport {
							hdr = 20
						}
						for i, p := range pkts {
							if p.Drop != esp.OK {
								t.Fatalf("%s %s: seal %d: %v", suite, mode, i, p.Drop)
							}
							opened = append(opened, &esp.Packet{Buf: p.Buf, Off: p.Off + hdr, Len: p.Len - hdr, HdrLen: hdr, SA: in})
						}
						if err := pr.Open(ctx, opened); err != nil {
							t.Fatal(err)
						}
						for i, q := range opened {
							if q.Drop != esp.OK {
								t.Fatalf("%s %s esn=%v: open %d: %v", suite, mode, esn, i, q.Drop)
							}
							got := append([]byte(nil), q.Data()...)
							if mode == sa.Transport {
								got[10], got[11] = want[i][10], want[i][11] // checksum rewritten
							}
							if !bytes.Equal(got, want[i]) {
								t.Fatalf("%s %s esn=%v: packet %d differs after the round trip", suite, mode, esn, i)
							}
						}
						if s := in.Snapshot(); s.OpenedPackets != uint64(len(pkts)) {
							t.Fatalf("%s: opened %d packets, want %d", suite, s.OpenedPackets, len(pkts))
						}
					}
				}
			}
		})
	}
}
