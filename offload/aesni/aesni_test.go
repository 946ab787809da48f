package aesni

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// maxPayload is the longest payload the tests try: a jumbo frame and then some.
const maxPayload = 9000

// pair is one SA's session on this engine and on the reference cpu engine.
type pair struct {
	suite    sa.Suite
	aes, ref offload.Session
	layout   esp.Layout
}

// lay fills op's ranges for its packet as esp does, under layout; a packet
// too short for the suite gets none, which an engine answers BadLength.
func lay(layout esp.Layout, op *offload.Op) {
	if !layout.Op(op, op.Session, op.Dir, op.Buf, op.SeqHi) {
		*op = offload.Op{Session: op.Session, Dir: op.Dir, Buf: op.Buf, SeqHi: op.SeqHi}
	}
}

func newPair(t testing.TB, r *rand.Rand, suite sa.Suite, encLen int, esn bool) pair {
	t.Helper()
	cfg := offload.SessionConfig{
		Suite:   suite,
		EncKey:  sa.Key(randBytes(r, encLen)),
		AuthKey: sa.Key(randBytes(r, suite.AuthKeyLen())),
		ESN:     esn,
	}
	a, err := New().NewSession(cfg)
	if err != nil {
		t.Fatalf("aesni session for %s: %v", suite, err)
	}
	c, err := cpu.New().NewSession(cfg)
	if err != nil {
		t.Fatalf("cpu session for %s: %v", suite, err)
	}
	return pair{suite, a, c, esp.NewLayout(suite, cfg.EncKey, esn)}
}

// allPairs is a session pair for every suite, key length and ESN setting.
func allPairs(t testing.TB, r *rand.Rand) []pair {
	var out []pair
	for _, s := range cpu.Suites() {
		for _, n := range s.EncKeyLens() {
			for _, esn := range []bool{false, true} {
				out = append(out, newPair(t, r, s, n, esn))
			}
		}
	}
	return out
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// packet lays out an ESP packet for suite with a payload of n bytes (a
// whole number of the suite's blocks) and room for the ICV.
func packet(r *rand.Rand, suite sa.Suite, n int) []byte {
	p := randBytes(r, esp.HeaderLen+suite.IVLen()+n+suite.ICVLen())
	clear(p[len(p)-suite.ICVLen():])
	return p
}

func randPayloadLen(r *rand.Rand, suite sa.Suite) int {
	bl := suite.BlockLen()
	if r.IntN(4) == 0 {
		return bl * r.IntN(8)
	}
	return bl * r.IntN(maxPayload/bl+1)
}

// runBoth submits the same ops to both engines, each on its own copy of the
// packets, and fails unless every status and every byte match.
func runBoth(t *testing.T, what string, ops []offload.Op, pairs []*pair) {
	t.Helper()
	ref := make([]offload.Op, len(ops))
	for i := range ops {
		ref[i] = ops[i]
		ref[i].Buf = bytes.Clone(ops[i].Buf)
		ref[i].Session = pairs[i].ref
		ops[i].Session = pairs[i].aes
		lay(pairs[i].layout, &ops[i])
		lay(pairs[i].layout, &ref[i])
	}
	aesEngine, refEngine := New(), cpu.New()
	if err := offload.NewWaiter(aesEngine).Run(context.Background(), offload.Refs(ops)); err != nil {
		t.Fatal(err)
	}
	if err := offload.NewWaiter(refEngine).Run(context.Background(), offload.Refs(ref)); err != nil {
		t.Fatal(err)
	}
	for i := range ops {
		if ops[i].Status != ref[i].Status {
			t.Fatalf("%s: op %d (%s %s, %d bytes): status %s, cpu engine says %s", what, i, ops[i].Dir, pairs[i].suite, len(ops[i].Buf), ops[i].Status, ref[i].Status)
		}
		if !bytes.Equal(ops[i].Buf, ref[i].Buf) {
			t.Fatalf("%s: op %d (%s %s, %d bytes): packet differs from the cpu engine's", what, i, ops[i].Dir, pairs[i].suite, len(ops[i].Buf))
		}
	}
}

// TestMatchesCPU seals mixed batches (every suite, key length and ESN
// setting, random lengths, some that do not fit) and opens them again,
// some corrupted, and holds every byte and status against the cpu engine.
func TestMatchesCPU(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	pairs := allPairs(t, r)
	for round := 0; round < 30; round++ {
		n := 1 + r.IntN(100)
		ops := make([]offload.Op, n)
		ps := make([]*pair, n)
		for i := range ops {
			p := &pairs[r.IntN(len(pairs))]
			pkt := packet(r, p.suite, randPayloadLen(r, p.suite))
			if r.IntN(20) == 0 {
				pkt = pkt[:r.IntN(len(pkt)+1)] // a packet that does not fit the suite
			}
			ops[i] = offload.Op{Dir: offload.Seal, Buf: pkt, SeqHi: r.Uint32()}
			ps[i] = p
		}
		runBoth(t, fmt.Sprintf("round %d seal", round), ops, ps)
		for i := range ops {
			ops[i].Dir = offload.Open
			if len(ops[i].Buf) > 0 && r.IntN(8) == 0 {
				ops[i].Buf[r.IntN(len(ops[i].Buf))] ^= 1 << r.IntN(8)
			}
			if r.IntN(16) == 0 {
				ops[i].SeqHi++ // the wrong ESN high bits must fail ESN sessions only
			}
		}
		runBoth(t, fmt.Sprintf("round %d open", round), ops, ps)
	}
}

// TestEveryLength seals and opens aes-cbc packets of every payload length
// up to maxPayload, all in one batch, for every key length and auth.
func TestEveryLength(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, auth := range []sa.Auth{sa.AuthHMACSHA1_96, sa.AuthHMACSHA256_128, sa.AuthHMACSHA384_192, sa.AuthHMACSHA512_256, sa.AuthHMACMD5_96} {
		suite := sa.Suite{Cipher: sa.CipherAESCBC, Auth: auth}
		for _, keyLen := range suite.EncKeyLens() {
			p := newPair(t, r, suite, keyLen, auth == sa.AuthHMACSHA256_128)
			var ops []offload.Op
			var ps []*pair
			for n := 0; n <= maxPayload; n += 16 {
				ops = append(ops, offload.Op{Dir: offload.Seal, Buf: packet(r, suite, n), SeqHi: r.Uint32()})
				ps = append(ps, &p)
			}
			what := fmt.Sprintf("%s, %d-byte key", suite, keyLen)
			runBoth(t, what+", seal", ops, ps)
			for i := range ops {
				ops[i].Dir = offload.Open
			}
			runBoth(t, what+", open", ops, ps)
			for i := range ops {
				if ops[i].Status != offload.OK {
					t.Fatalf("%s: open of a %d-byte packet: %s", what, len(ops[i].Buf), ops[i].Status)
				}
			}
		}
	}
}

// TestGMACEveryLength seals and opens aes-gmac packets of every payload
// length up to 2048 bytes, with and without ESN, for every key length, and
// holds them against the cpu engine (the standard library's GCM); every
// open of a packet with one bit flipped fails.
func TestGMACEveryLength(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	suite := sa.Suite{Cipher: sa.CipherAESGMAC}
	for _, keyLen := range suite.EncKeyLens() {
		for _, esn := range []bool{false, true} {
			p := newPair(t, r, suite, keyLen, esn)
			var ops []offload.Op
			var ps []*pair
			for n := 0; n <= 2048; n += suite.BlockLen() {
				ops = append(ops, offload.Op{Dir: offload.Seal, Buf: packet(r, suite, n), SeqHi: r.Uint32()})
				ps = append(ps, &p)
			}
			what := fmt.Sprintf("%s, %d-byte key, esn=%v", suite, keyLen, esn)
			runBoth(t, what+", seal", ops, ps)
			for i := range ops {
				ops[i].Dir = offload.Open
			}
			runBoth(t, what+", open", ops, ps)
			for i := range ops {
				if ops[i].Status != offload.OK {
					t.Fatalf("%s: open of a %d-byte packet: %s", what, len(ops[i].Buf), ops[i].Status)
				}
				ops[i].Buf[r.IntN(len(ops[i].Buf))] ^= 1 << r.IntN(8)
			}
			runBoth(t, what+", open corrupted", ops, ps)
			for i := range ops {
				if ops[i].Status != offload.BadICV {
					t.Fatalf("%s: open of a corrupted %d-byte packet: %s, want %s", what, len(ops[i].Buf), ops[i].Status, offload.BadICV)
				}
			}
		}
	}
}

// TestGMACSessionSize holds an aes-gmac session's heap below the standard
// library's GCM state alone (768 bytes).
func TestGMACSessionSize(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory distorts heap sizes")
	}
	const n = 2000
	cfg := offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherAESGMAC}, EncKey: make(sa.Key, 20)}
	e := New()
	keep := make([]offload.Session, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		s, err := e.NewSession(cfg)
		if err != nil {
			t.Fatal(err)
		}
		keep[i] = s
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("an aes-gmac session holds %.0f bytes of heap", per)
	if per >= 768 {
		t.Errorf("an aes-gmac session holds %.0f bytes of heap, want less than the standard library's 768-byte GCM", per)
	}
	runtime.KeepAlive(keep)
}

func TestForeignSessionFails(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	p := newPair(t, r, sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, 16, false)
	ops := []offload.Op{{Session: p.ref, Dir: offload.Seal, Buf: packet(r, p.suite, 64)}}
	lay(p.layout, &ops[0])
	if err := offload.NewWaiter(New()).Run(context.Background(), offload.Refs(ops)); err != nil {
		t.Fatal(err)
	}
	if ops[0].Status != offload.Failed {
		t.Errorf("an op with another engine's session: status %s, want %s", ops[0].Status, offload.Failed)
	}
}

// TestConcurrentSubmit has several goroutines share one engine and its
// sessions, as a gateway's workers do; run it with -race.
func TestConcurrentSubmit(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	pairs := allPairs(t, r)
	e := New()
	const goroutines = 4
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		r := rand.New(rand.NewPCG(uint64(g), 27))
		ops := make([]offload.Op, 24)
		plain := make([][]byte, len(ops))
		ps := make([]*pair, len(ops))
		for i := range ops {
			p := &pairs[r.IntN(len(pairs))]
			ops[i] = offload.Op{Session: p.aes, Dir: offload.Seal, Buf: packet(r, p.suite, randPayloadLen(r, p.suite)%2048)}
			plain[i] = bytes.Clone(ops[i].Buf)
			ps[i] = p
		}
		go func() {
			w, refs := offload.NewWaiter(e), offload.Refs(ops)
			for round := 0; round < 20; round++ {
				for _, dir := range []offload.Direction{offload.Seal, offload.Open} {
					for i := range ops {
						ops[i].Dir = dir
						lay(ps[i].layout, &ops[i])
					}
					if err := w.Run(context.Background(), refs); err != nil {
						errs <- err
						return
					}
					for i := range ops {
						if ops[i].Status != offload.OK {
							errs <- fmt.Errorf("round %d, %s op %d: %s", round, dir, i, ops[i].Status)
							return
						}
					}
				}
				for i := range ops {
					icv := ps[i].suite.ICVLen()
					n := len(ops[i].Buf) - icv
					if !bytes.Equal(ops[i].Buf[:n], plain[i][:n]) {
						errs <- fmt.Errorf("round %d, op %d: seal then open did not give the plaintext back", round, i)
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for g := 0; g < goroutines; g++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items, so allocations cannot be counted")
	}
	r := rand.New(rand.NewPCG(17, 18))
	e := New()
	w := offload.NewWaiter(e)
	for _, suite := range []sa.Suite{
		{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96},
		{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA512_256},
		{Cipher: sa.CipherAESGMAC},
	} {
		lens := suite.EncKeyLens()
		p := newPair(t, r, suite, lens[len(lens)-1], true)
		ops := make([]offload.Op, 100) // more than one chunk of seals
		for i := range ops {
			ops[i] = offload.Op{Session: p.aes, Buf: packet(r, suite, 16*(1+i%90))}
		}
		refs := offload.Refs(ops)
		for _, dir := range []offload.Direction{offload.Seal, offload.Open} {
			for i := range ops {
				ops[i].Dir = dir
				lay(p.layout, &ops[i])
			}
			allocs := testing.AllocsPerRun(20, func() {
				if err := w.Run(context.Background(), refs); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%s %s: %v allocations per batch", suite, dir, allocs)
			}
		}
	}
}

// FuzzMatchesCPU builds a batch from the fuzzer's bytes: per op a suite,
// a length, a direction and a corruption.
func FuzzMatchesCPU(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{1, 200, 3, 90, 7, 7, 7, 7})
	r := rand.New(rand.NewPCG(19, 20))
	pairs := allPairs(f, r)
	f.Fuzz(func(t *testing.T, shape []byte) {
		if len(shape) > 256 {
			return
		}
		r := rand.New(rand.NewPCG(uint64(len(shape)), 21))
		var ops []offload.Op
		var ps []*pair
		for i := 0; i+1 < len(shape); i += 2 {
			p := &pairs[int(shape[i])%len(pairs)]
			n := int(shape[i+1]) % 96 * p.suite.BlockLen()
			pkt := packet(r, p.suite, n)
			if shape[i]&0x80 != 0 {
				pkt = pkt[:len(pkt)-1-int(shape[i+1])%len(pkt)]
			}
			ops = append(ops, offload.Op{Dir: offload.Seal, Buf: pkt, SeqHi: uint32(shape[i])})
			ps = append(ps, p)
		}
		runBoth(t, "seal", ops, ps)
		for i := range ops {
			ops[i].Dir = offload.Open
			if shape[2*i+1]&1 != 0 && len(ops[i].Buf) > 0 {
				ops[i].Buf[int(shape[2*i])%len(ops[i].Buf)] ^= 0x40
			}
		}
		runBoth(t, "open", ops, ps)
	})
}

// TestCipherOnlyMatchesCPU: the bare-cipher sessions espgw speed times give
// the cpu engine's bytes, and write no ICV.
func TestCipherOnlyMatchesCPU(t *testing.T) {
	for _, n := range []int{16, 64, 1024, 8192} {
		key := make([]byte, 16)
		crand.Read(key)
		cfg := offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherAESCBC}, EncKey: key, CipherOnly: true}
		ours, err := New().NewSession(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := cpu.NewSession(cfg)
		if err != nil {
			t.Fatal(err)
		}
		pkt := make([]byte, 8+16+n)
		crand.Read(pkt)
		want := append([]byte(nil), pkt...)
		layout := esp.NewLayout(cfg.Suite, cfg.EncKey, false)
		for _, dir := range []offload.Direction{offload.Seal, offload.Open} {
			var a, b offload.Op
			layout.Op(&a, ours, dir, pkt, 0)
			layout.Op(&b, ref, dir, want, 0)
			if err := New().Submit(context.Background(), &offload.Batch{Ops: []*offload.Op{&a}}); err != nil {
				t.Fatal(err)
			}
			ref.Process(&b)
			if !bytes.Equal(pkt, want) || b.Status != offload.OK {
				t.Fatalf("%d bytes %s: aesni and cpu differ (cpu status %s)", n, dir, b.Status)
			}
		}
	}
}
