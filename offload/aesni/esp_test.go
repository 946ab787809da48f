package aesni_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/aesni"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// TestESPAcrossEngines runs whole ESP packets through the esp package: a
// batch sealed on one engine must open on the other, for every suite, with
// and without ESN, both ways round.
func TestESPAcrossEngines(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(31, 32))
	engines := []offload.Engine{aesni.New(), cpu.New()}
	for _, suite := range cpu.Suites() {
		for _, esn := range []bool{false, true} {
			cfg := &sa.SA{SPI: 0x2001, Mode: sa.Tunnel, Suite: suite, ReplayWindow: 64, ESN: esn,
				Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
				EncKey:  sa.Key(randBytes(r, suite.EncKeyLens()[r.IntN(len(suite.EncKeyLens()))])),
				AuthKey: sa.Key(randBytes(r, suite.AuthKeyLen())),
			}
			for i, sealer := range engines {
				opener := engines[1-i]
				t.Run(fmt.Sprintf("%s/esn=%v/%s-to-%s", suite, esn, sealer.Name(), opener.Name()), func(t *testing.T) {
					out, err := esp.NewSA(cfg, sealer, esp.Options{})
					if err != nil {
						t.Fatal(err)
					}
					in, err := esp.NewSA(cfg, opener, esp.Options{})
					if err != nil {
						t.Fatal(err)
					}
					inners := make([][]byte, 24)
					sealed := make([]*esp.Packet, len(inners))
					for k := range inners {
						inners[k] = ipv4UDP(r, r.IntN(1400))
						buf := make([]byte, esp.Headroom+len(inners[k])+esp.Tailroom)
						copy(buf[esp.Headroom:], inners[k])
						sealed[k] = &esp.Packet{Buf: buf, Off: esp.Headroom, Len: len(inners[k]), SA: out}
					}
					if err := esp.NewProcessor(sealer).Seal(ctx, sealed); err != nil {
						t.Fatal(err)
					}
					opened := make([]*esp.Packet, len(sealed))
					for k, p := range sealed {
						if p.Drop != esp.OK {
							t.Fatalf("seal of packet %d: %v", k, p.Drop)
						}
						opened[k] = &esp.Packet{Buf: p.Buf, Off: p.Off, Len: p.Len, SA: in}
					}
					if err := esp.NewProcessor(opener).Open(ctx, opened); err != nil {
						t.Fatal(err)
					}
					for k, q := range opened {
						if q.Drop != esp.OK {
							t.Fatalf("open of packet %d: %v", k, q.Drop)
						}
						if !bytes.Equal(q.Data(), inners[k]) {
							t.Fatalf("packet %d: the inner packet differs after the round trip", k)
						}
					}
				})
			}
		}
	}
}

// ipv4UDP builds an IPv4 UDP packet between TEST-NET addresses with n
// random payload bytes.
func ipv4UDP(r *rand.Rand, n int) []byte {
	p := make([]byte, 28+n)
	p[0] = 0x45
	p[2], p[3] = byte((28+n)>>8), byte(28+n)
	p[8], p[9] = 64, 17
	copy(p[12:], []byte{198, 51, 100, 1})
	copy(p[16:], []byte{203, 0, 113, 1})
	p[20], p[21], p[22], p[23] = 0x12, 0x34, 0x56, 0x78
	p[24], p[25] = byte((8+n)>>8), byte(8+n)
	copy(p[28:], randBytes(r, n))
	return p
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
