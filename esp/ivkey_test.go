package esp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// TestIVKeySharedIVsDistinct seals packets on two CBC SAs of one
// configuration (the same keys and sequence numbers) sharing an IV key,
// and on a third with a key of its own: no IV comes twice, and each
// packet opens on its peer.
func TestIVKeySharedIVsDistinct(t *testing.T) {
	ctx := context.Background()
	for _, cipher := range []sa.Cipher{sa.CipherAESCBC, sa.Cipher3DES} {
		t.Run(cipher.String(), func(t *testing.T) {
			cfg := testSA(t, sa.Suite{Cipher: cipher, Auth: sa.AuthHMACSHA1_96}, sa.Tunnel, false)
			eng := cpu.New()
			key := esp.NewIVKey()
			in, err := esp.NewSA(cfg, eng, esp.Options{})
			if err != nil {
				t.Fatal(err)
			}
			pr := esp.NewProcessor(eng)
			ivLen := cfg.Suite.IVLen()
			seen := map[string]string{}
			for i, k := range []*esp.IVKey{key, key, nil} {
				out, err := esp.NewSA(cfg, eng, esp.Options{IVKey: k})
				if err != nil {
					t.Fatal(err)
				}
				for seq := 1; seq <= 200; seq++ {
					inner := udpPacket(false, 40)
					buf := make([]byte, esp.Headroom+len(inner)+esp.Tailroom)
					copy(buf[esp.Headroom:], inner)
					p := &esp.Packet{Buf: buf, Off: esp.Headroom, Len: len(inner), SA: out}
					if err := pr.Seal(ctx, []*esp.Packet{p}); err != nil || p.Drop != esp.OK {
						t.Fatalf("seal: %v %v", err, p.Drop)
					}
					const espAt = 20 // after the outer IPv4 header
					iv := string(p.Data()[espAt+esp.HeaderLen : espAt+esp.HeaderLen+ivLen])
					where := fmt.Sprintf("SA %d seq %d", i, seq)
					if prev, ok := seen[iv]; ok {
						t.Fatalf("%s: IV %x already sent by %s", where, iv, prev)
					}
					seen[iv] = where
					if i == 0 { // the peer's window takes each number once
						q := &esp.Packet{Buf: buf, Off: p.Off, Len: p.Len, SA: in}
						if err := pr.Open(ctx, []*esp.Packet{q}); err != nil || q.Drop != esp.OK {
							t.Fatalf("%s: open: %v %v", where, err, q.Drop)
						}
					}
				}
			}
		})
	}
}
