package aesni

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/aesni/internal/cbc"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// BenchmarkOneOp is what a single small op costs beyond its cipher, the
// case `espgw speed -batch 1` and a gateway at one packet per read are
// made of. Every iteration runs, in chunks of oneOpChunk calls each:
//
//   - bare: the cipher alone (this package's CBC for aesni, the standard
//     library's for cpu) on a buffer of the size;
//   - op: the engine's Run with one op of a cipher-only session over the
//     same buffer (what espgw speed -evp times);
//   - seal: esp.Processor.Seal of one inner packet of the size on an
//     aes-cbc-128+hmac-sha1-96 SA (framing, IV, padding, cipher, HMAC), and
//     sealop: that SA's engine op alone, so seal−sealop is the ESP framing.
//
// The fastest chunk of each is kept (on a shared machine most chunks are
// stretched by preemption; the fastest is the closest to the code's own
// cost, and taking it on every side keeps the differences fair). Reported
// in ns per call, with op-bare, the engine's own cost per op.
func BenchmarkOneOp(b *testing.B) {
	for _, eng := range []offload.Inline{New(), cpu.New()} {
		for _, size := range []int{16, 64, 1024} {
			b.Run(fmt.Sprintf("%s/%d", eng.Name(), size), func(b *testing.B) {
				o := newOneOp(b, eng, size)
				for b.Loop() {
					o.round(b)
				}
				for _, m := range []struct {
					name string
					d    time.Duration
				}{{"bare-ns", o.bare}, {"op-ns", o.op}, {"seal-ns", o.seal}, {"sealop-ns", o.sealOp}} {
					b.ReportMetric(float64(m.d.Nanoseconds())/oneOpChunk, m.name)
				}
				b.ReportMetric(float64((o.op-o.bare).Nanoseconds())/oneOpChunk, "op-bare-ns")
			})
		}
	}
}

const oneOpChunk = 256

type oneOp struct {
	eng                    offload.Inline
	bareFn                 func()
	cipherOp, sealOps      []*offload.Op
	pr                     *esp.Processor
	pkt                    []*esp.Packet
	buf, inner             []byte
	sa                     *esp.SA
	bare, op, seal, sealOp time.Duration // fastest chunk of each
}

func newOneOp(b *testing.B, eng offload.Inline, size int) *oneOp {
	r := rand.New(rand.NewPCG(41, 42))
	key := randBytes(r, 16)
	o := &oneOp{eng: eng}
	// The cipher-only op and the bare cipher on the same buffer.
	sess, err := eng.NewSession(offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherAESCBC}, EncKey: key, CipherOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	pkt := randBytes(r, esp.HeaderLen+16+size)
	o.cipherOp = []*offload.Op{new(offload.Op)}
	layout := esp.NewLayout(sa.Suite{Cipher: sa.CipherAESCBC}, key, false)
	layout.Op(o.cipherOp[0], sess, offload.Seal, pkt, 0)
	iv, payload := (*[16]byte)(pkt[esp.HeaderLen:esp.HeaderLen+16]), pkt[esp.HeaderLen+16:]
	if eng.Name() == Name {
		k, err := cbc.NewKey(key)
		if err != nil {
			b.Fatal(err)
		}
		o.bareFn = func() { _ = k.Encrypt(iv, payload, payload) }
	} else {
		blk, _ := aes.NewCipher(key)
		mode := cipher.NewCBCEncrypter(blk, iv[:]).(interface {
			cipher.BlockMode
			SetIV([]byte)
		})
		o.bareFn = func() { mode.SetIV(iv[:]); mode.CryptBlocks(payload, payload) }
	}
	// A whole ESP seal of an inner packet of the size, and its engine op.
	cfg := &sa.SA{SPI: 0x1001, Mode: sa.Tunnel, Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, ESN: true,
		Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
		EncKey: sa.Key(key), AuthKey: sa.Key(randBytes(r, 20))}
	if o.sa, err = esp.NewSA(cfg, eng, esp.Options{}); err != nil {
		b.Fatal(err)
	}
	o.inner = make([]byte, size)
	o.inner[0] = 0x45 // an IPv4 packet as far as tunnel mode cares
	o.buf = make([]byte, esp.Headroom+size+esp.Tailroom)
	o.pr = esp.NewProcessor(eng)
	o.pkt = []*esp.Packet{new(esp.Packet)}
	o.sealESP(b)
	o.sealOps = []*offload.Op{&o.pkt[0].Op}
	return o
}

func (o *oneOp) sealESP(b *testing.B) {
	p := o.pkt[0]
	copy(o.buf[esp.Headroom:], o.inner)
	p.Reset(o.buf, esp.Headroom, len(o.inner))
	p.SA = o.sa
	if err := o.pr.Seal(context.Background(), o.pkt); err != nil || p.Drop != esp.OK {
		b.Fatalf("seal: %v %v", err, p.Drop)
	}
}

func (o *oneOp) round(b *testing.B) {
	fastest := func(d *time.Duration, fn func()) {
		start := time.Now()
		for range oneOpChunk {
			fn()
		}
		if t := time.Since(start); *d == 0 || t < *d {
			*d = t
		}
	}
	fastest(&o.bare, o.bareFn)
	fastest(&o.op, func() {
		if err := o.eng.Run(o.cipherOp); err != nil || o.cipherOp[0].Status != offload.OK {
			b.Fatalf("op: %v %v", err, o.cipherOp[0].Status)
		}
	})
	fastest(&o.seal, func() { o.sealESP(b) })
	// The sealed packet's op again: its bytes are ciphertext by now, which
	// costs the engine the same.
	fastest(&o.sealOp, func() {
		if err := o.eng.Run(o.sealOps); err != nil || o.sealOps[0].Status != offload.OK {
			b.Fatalf("seal op: %v %v", err, o.sealOps[0].Status)
		}
	})
}
