package esp_test

import (
	"bytes"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/sa"
)

// modernKAT seals each published or OpenSSL-computed tunnel-mode ESP packet
// of file from its inner packet, byte for byte, opens it back, and checks
// that a flipped ICV bit, and with ESN wrong high bits, fail the ICV.
func modernKAT(t *testing.T, file string, cipherOf func(v vector) sa.Cipher, wantN, wantESN int) {
	vs := loadVectors(t, file)
	if len(vs) != wantN {
		t.Fatalf("%s: %d vectors, want %d", file, len(vs), wantN)
	}
	esn := 0
	for _, v := range vs {
		t.Run(v.id(), func(t *testing.T) {
			isESN, _ := v["esn"].(bool)
			if isESN {
				esn++
			}
			pt := v.bytes(t, "plaintext")
			padLen := int(pt[len(pt)-2])
			inner := pt[:len(pt)-2-padLen]
			seq := v.uint(t, "seq")
			cfg := &sa.SA{SPI: uint32(v.uint(t, "spi")), Mode: sa.Tunnel,
				Suite: sa.Suite{Cipher: cipherOf(v)}, EncKey: v.bytes(t, "keymat"), ESN: isESN, ReplayWindow: 64}
			want := v.bytes(t, "esp_packet")
			if got := sealOne(t, knownSA(t, cfg, seq, v.bytes(t, "iv")), inner); !bytes.Equal(got, want) {
				t.Fatalf("sealed\n got %x\nwant %x", got, want)
			}
			rx, _ := newPairFrom(t, cfg)
			rx.StartReceiveAfter(seq - 1)
			got, r := openOne(t, rx, want, 0)
			if r != esp.OK || !bytes.Equal(got, inner) {
				t.Fatalf("opened %v %x, want %x", r, got, inner)
			}
			bad := bytes.Clone(want)
			bad[len(bad)-1] ^= 0x80
			fresh, _ := newPairFrom(t, cfg)
			fresh.StartReceiveAfter(seq - 1)
			if _, r := openOne(t, fresh, bad, 0); r != esp.BadICV {
				t.Fatalf("open with a flipped ICV bit: %v, want bad-icv", r)
			}
			if isESN {
				wrong, _ := newPairFrom(t, cfg)
				wrong.StartReceiveAfter(seq - 1 + 7<<32)
				if _, r := openOne(t, wrong, want, 0); r != esp.BadICV {
					t.Fatalf("open with wrong ESN high bits: %v, want bad-icv", r)
				}
			}
		})
	}
	if esn != wantESN {
		t.Fatalf("%d ESN vectors ran, want %d", esn, wantESN)
	}
}

// RFC 7634 Appendix B: the ESP example.
func TestRFC7634ESPExample(t *testing.T) {
	modernKAT(t, "rfc7634_chacha20_poly1305_esp.json", func(vector) sa.Cipher { return sa.CipherChaCha20Poly1305 }, 1, 0)
}

func TestRFC4543GMACPackets(t *testing.T) {
	modernKAT(t, "rfc4543_gmac_esp.json", func(vector) sa.Cipher { return sa.CipherAESGMAC }, 5, 2)
}

func TestRFC4309CCMPackets(t *testing.T) {
	modernKAT(t, "rfc4309_ccm_esp.json", func(v vector) sa.Cipher {
		switch v["icv"].(float64) {
		case 8:
			return sa.CipherAESCCM8
		case 12:
			return sa.CipherAESCCM12
		}
		return sa.CipherAESCCM16
	}, 15, 6)
}
