package esp_test

// Seal and open throughput per suite and inner packet size, in bytes of inner
// packet per second (b.SetBytes), on the cpu engine:
//
//	go test ./esp -run '^$' -bench . -benchtime 200ms
//
// BenchmarkReference runs the bare standard-library primitives on the same
// bytes in the same process, so the ESP cost reads as a ratio against it
// (and against `openssl speed -evp aes-128-cbc` on the same machine).

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha1"
	"fmt"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

var benchSizes = []int{64, 512, 1400}

type benchSuite struct {
	name   string
	suite  sa.Suite
	keyLen int
}

func benchSuites() []benchSuite {
	var out []benchSuite
	for _, s := range cpu.Suites() {
		n := s.EncKeyLens()[0]
		name := s.String()
		if s.Cipher == sa.CipherAESCBC || s.Cipher == sa.CipherAESGCM16 {
			name = fmt.Sprintf("%s-128%s", s.Cipher, name[len(s.Cipher.String()):])
		}
		out = append(out, benchSuite{name, s, n})
	}
	out = append(out,
		benchSuite{"aes-cbc-192+hmac-sha1-96", sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, 24},
		benchSuite{"aes-cbc-256+hmac-sha1-96", sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, 32},
		benchSuite{"aes-cbc-256+hmac-sha2-256-128", sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}, 32},
		benchSuite{"aes-gcm-16-256", sa.Suite{Cipher: sa.CipherAESGCM16}, 36},
	)
	return out
}

// innerOf returns an IPv4 UDP packet of exactly size bytes.
func innerOf(size int) []byte { return udpPacket(false, size-28) }

func BenchmarkSeal(b *testing.B) {
	ctx := context.Background()
	for _, bs := range benchSuites() {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", bs.name, size), func(b *testing.B) {
				cfg := testSA(b, bs.suite, sa.Tunnel, false)
				cfg.EncKey = randomKey(b, bs.keyLen)
				cfg.ESN = true // never exhausts, however large b.N
				tx, _ := newPair(b, cfg)
				pr := esp.NewProcessor(tx.Engine())
				inner := innerOf(size)
				buf := make([]byte, esp.Headroom+len(inner)+esp.Tailroom)
				p := new(esp.Packet)
				batch := []*esp.Packet{p}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					copy(buf[esp.Headroom:], inner)
					p.Reset(buf, esp.Headroom, len(inner)) // as the gateway takes a packet
					p.SA = tx
					if err := pr.Seal(ctx, batch); err != nil || p.Drop != esp.OK {
						b.Fatalf("seal: %v %v", err, p.Drop)
					}
				}
			})
		}
	}
}

func BenchmarkOpen(b *testing.B) {
	ctx := context.Background()
	for _, bs := range benchSuites() {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", bs.name, size), func(b *testing.B) {
				cfg := testSA(b, bs.suite, sa.Tunnel, false)
				cfg.EncKey = randomKey(b, bs.keyLen)
				cfg.ReplayWindow = 0 // the same packet opens every time
				tx, rx := newPair(b, cfg)
				pr := esp.NewProcessor(tx.Engine())
				inner := innerOf(size)
				buf := make([]byte, esp.Headroom+len(inner)+esp.Tailroom)
				copy(buf[esp.Headroom:], inner)
				p := &esp.Packet{Buf: buf, Off: esp.Headroom, Len: len(inner), SA: tx}
				if err := pr.Seal(ctx, []*esp.Packet{p}); err != nil || p.Drop != esp.OK {
					b.Fatalf("seal: %v %v", err, p.Drop)
				}
				sealed := append([]byte(nil), p.Data()...)
				q := new(esp.Packet)
				batch := []*esp.Packet{q}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					copy(buf, sealed)
					q.Reset(buf, 0, len(sealed))
					q.SA = rx
					if err := pr.Open(ctx, batch); err != nil || q.Drop != esp.OK {
						b.Fatalf("open: %v %v", err, q.Drop)
					}
				}
			})
		}
	}
}

// BenchmarkReference is the floor under aes-cbc-128+hmac-sha1-96: the
// standard library's CBC and HMAC over the same number of bytes, no ESP.
func BenchmarkReference(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("stdlib-aes-128-cbc/%d", size), func(b *testing.B) {
			blk, _ := aes.NewCipher(make([]byte, 16))
			iv := make([]byte, 16)
			buf := make([]byte, (size+15)/16*16)
			b.SetBytes(int64(size))
			for b.Loop() {
				cipher.NewCBCEncrypter(blk, iv).CryptBlocks(buf, buf)
			}
		})
		b.Run(fmt.Sprintf("stdlib-aes-128-cbc+hmac-sha1/%d", size), func(b *testing.B) {
			blk, _ := aes.NewCipher(make([]byte, 16))
			iv := make([]byte, 16)
			buf := make([]byte, (size+15)/16*16)
			m := hmac.New(sha1.New, make([]byte, 20))
			sum := make([]byte, 0, 20)
			b.SetBytes(int64(size))
			for b.Loop() {
				cipher.NewCBCEncrypter(blk, iv).CryptBlocks(buf, buf)
				m.Reset()
				m.Write(buf)
				sum = m.Sum(sum[:0])
			}
		})
	}
}
