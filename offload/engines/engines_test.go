package engines_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/internal/lab/sim/emul"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/offload/engines"
	"github.com/espgw/espgw/sa"
)

// testEngines are the engines the conformance tests run on: every engine
// that runs anywhere, or the ones ESPGW_TEST_ENGINES names (comma-separated),
// which is how the guest runs them on afalg with the kernel's drivers.
func testEngines() []string {
	if v := os.Getenv("ESPGW_TEST_ENGINES"); v != "" {
		return strings.Split(v, ",")
	}
	return (sim.Engines{}).Software()
}

func newEngine(t testing.TB, name string) offload.Engine {
	t.Helper()
	e, err := (sim.Engines{}).Open(name, engines.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func key(n int) sa.Key {
	k := make(sa.Key, n)
	rand.Read(k)
	return k
}

// pair is one SA's session on the engine under test and on cpu, and the
// layout of its packets.
type pair struct {
	suite    sa.Suite
	got, ref offload.Session
	layout   esp.Layout
}

// op lays out an op on pkt for session s as esp does.
func (p pair) op(s offload.Session, dir offload.Direction, pkt []byte, seqHi uint32) *offload.Op {
	op := new(offload.Op)
	if !p.layout.Op(op, s, dir, pkt, seqHi) {
		*op = offload.Op{Session: s, Dir: dir, Buf: pkt, SeqHi: seqHi} // too short: no ranges
	}
	return op
}

// accepts reports whether e makes a session for suite at some key length.
func accepts(e offload.Engine, suite sa.Suite) bool {
	for _, kl := range suite.EncKeyLens() {
		if s, err := e.NewSession(offload.SessionConfig{Suite: suite, EncKey: key(kl), AuthKey: key(suite.AuthKeyLen())}); err == nil {
			s.Close()
			return true
		}
	}
	return false
}

// sessions pairs a session on e with one on ref for every suite and key
// length both do; what e does is what its NewSession accepts.
func sessions(t testing.TB, e, ref offload.Engine, esn bool) []pair {
	var out []pair
	for _, suite := range cpu.AllSuites() {
		for _, kl := range suite.EncKeyLens() {
			cfg := offload.SessionConfig{Suite: suite, EncKey: key(kl), AuthKey: key(suite.AuthKeyLen()), ESN: esn}
			got, err := e.NewSession(cfg)
			if err != nil {
				t.Logf("%s: no %s session: %v", e.Name(), suite, err)
				continue
			}
			// Devices hold a limited number of sessions (QEMU's
			// virtio-crypto: 256): give each back when the test ends.
			t.Cleanup(func() { got.Close() })
			want, err := ref.NewSession(cfg)
			if err != nil {
				// aes-gcm-8 on afalg: cpu has no 8-byte GCM tag to compare with.
				t.Logf("%s: no %s on %s to compare with", e.Name(), suite, ref.Name())
				continue
			}
			out = append(out, pair{suite, got, want, esp.NewLayout(suite, cfg.EncKey, esn)})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: does no suite", e.Name())
	}
	return out
}

// packet lays out an ESP-shaped packet with a payload of n blocks-worth of
// random bytes (n rounded to the suite's block).
func packet(suite sa.Suite, n int) []byte {
	bl := suite.BlockLen()
	n = (n + bl - 1) / bl * bl
	pkt := make([]byte, 8+suite.IVLen()+n+suite.ICVLen())
	rand.Read(pkt)
	return pkt
}

// run puts the same ops through e and cpu and compares every byte and status.
func run(t testing.TB, e, ref offload.Engine, p pair, dir offload.Direction, pkts [][]byte, seqHi uint32) [][]byte {
	t.Helper()
	got := make([]*offload.Op, len(pkts))
	want := make([]*offload.Op, len(pkts))
	for i, pkt := range pkts {
		got[i] = p.op(p.got, dir, append([]byte(nil), pkt...), seqHi)
		want[i] = p.op(p.ref, dir, append([]byte(nil), pkt...), seqHi)
	}
	ctx := context.Background()
	if err := offload.NewWaiter(e).Run(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := offload.NewWaiter(ref).Run(ctx, want); err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, len(pkts))
	for i := range got {
		if got[i].Status != want[i].Status {
			t.Fatalf("%s %s %s len %d: status %v, cpu %v", e.Name(), p.suite, dir, len(pkts[i]), got[i].Status, want[i].Status)
		}
		if string(got[i].Buf) != string(want[i].Buf) {
			t.Fatalf("%s %s %s len %d: packet differs from cpu", e.Name(), p.suite, dir, len(pkts[i]))
		}
		out[i] = got[i].Buf
	}
	return out
}

// TestDifferential: every engine gives byte-identical results to cpu for
// every suite and key size, many lengths, seal, open, and open of a
// corrupted packet, with and without ESN.
func TestDifferential(t *testing.T) {
	ref := cpu.New()
	for _, name := range testEngines() {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, name)
			for _, esn := range []bool{false, true} {
				for _, p := range sessions(t, e, ref, esn) {
					var pkts [][]byte
					for _, n := range []int{0, 1, 15, 16, 17, 63, 100, 255, 256, 1000, 1400, 1500, 4096, 9000} {
						pkts = append(pkts, packet(p.suite, n))
					}
					sealed := run(t, e, ref, p, offload.Seal, pkts, 7)
					run(t, e, ref, p, offload.Open, sealed, 7)
					for i := range sealed {
						sealed[i][len(sealed[i])/2] ^= 1
					}
					run(t, e, ref, p, offload.Open, sealed, 7)
				}
			}
		})
	}
}

// FuzzEngines seals and opens a fuzzer-chosen packet with a fuzzer-chosen
// suite on every engine and compares with cpu.
func FuzzEngines(f *testing.F) {
	f.Add(uint8(0), uint32(0), []byte("hello"), false)
	f.Add(uint8(7), uint32(1), make([]byte, 1400), true)
	f.Add(uint8(25), uint32(1<<31), make([]byte, 33), false)
	ref := cpu.New()
	var es []offload.Engine
	var ps [][]pair
	for _, name := range testEngines() {
		e := newEngine(f, name)
		es = append(es, e)
		ps = append(ps, sessions(f, e, ref, true))
	}
	f.Fuzz(func(t *testing.T, which uint8, seqHi uint32, payload []byte, corrupt bool) {
		if len(payload) > 1<<14 {
			return
		}
		for k, e := range es {
			p := ps[k][int(which)%len(ps[k])]
			bl := p.suite.BlockLen()
			n := (len(payload) + bl - 1) / bl * bl
			pkt := make([]byte, 8+p.suite.IVLen()+n+p.suite.ICVLen())
			binary.BigEndian.PutUint32(pkt, 0x1001)
			copy(pkt[8+p.suite.IVLen():], payload)
			sealed := run(t, e, ref, p, offload.Seal, [][]byte{pkt}, seqHi)
			if corrupt && len(payload) > 0 {
				sealed[0][8+p.suite.IVLen()] ^= payload[0] | 1
			}
			run(t, e, ref, p, offload.Open, sealed, seqHi)
			// an unaligned payload is a BadLength on every engine alike
			if bl > 4 {
				run(t, e, ref, p, offload.Open, [][]byte{append(sealed[0], 0)}, seqHi)
			}
		}
	})
}

// modernCiphers are the suites no published card measurement prices.
var modernCiphers = []sa.Cipher{sa.CipherChaCha20Poly1305, sa.CipherAESGMAC, sa.CipherAESCCM8, sa.CipherAESCCM12, sa.CipherAESCCM16}

// TestEverySuite: the engines that run anywhere serve every suite espgw
// knows (a device engine declares what its driver can do), but for an
// emulated device, which serves its device's ciphers (every suite of them)
// that its published figures price: none of the modern AEADs.
func TestEverySuite(t *testing.T) {
	for _, name := range (sim.Engines{}).Software() {
		want := len(cpu.Suites())
		if p, ok := strings.CutPrefix(name, emul.Prefix+":"); ok {
			want = 0
			for _, s := range cpu.Suites() {
				if c := emul.Profiles()[p].Ciphers; (c == nil || slices.Contains(c, s.Cipher)) && !slices.Contains(modernCiphers, s.Cipher) {
					want++
				}
			}
		}
		e := newEngine(t, name)
		got := 0
		for _, s := range cpu.AllSuites() {
			if accepts(e, s) {
				got++
			}
		}
		if got != want {
			t.Errorf("%s: %d suites, want %d", name, got, want)
		}
	}
}

// TestFlippedBitAnywhere: one flipped bit anywhere in a sealed packet —
// SPI, sequence number, IV, payload, padding, trailer or ICV — is BadICV,
// and the packet comes back as it went in (GCM: its payload zeroed), on
// every engine as on cpu; with ESN, wrong high bits are BadICV too.
func TestFlippedBitAnywhere(t *testing.T) {
	ref := cpu.New()
	for _, name := range testEngines() {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, name)
			for _, esn := range []bool{false, true} {
				for _, p := range sessions(t, e, ref, esn) {
					sealed := run(t, e, ref, p, offload.Seal, [][]byte{packet(p.suite, 61)}, 3)[0]
					var bad [][]byte
					for i := range len(sealed) * 8 / 7 {
						b := append([]byte(nil), sealed...)
						b[i*7/8] ^= 1 << (i % 8)
						bad = append(bad, b)
					}
					for i := 0; i < len(bad); i += 64 {
						got := run(t, e, ref, p, offload.Open, bad[i:min(i+64, len(bad))], 3)
						for k, b := range got {
							if st := openStatus(t, e, p, b); st != offload.BadICV {
								t.Fatalf("%s %s esn=%v: bit %d flipped: %v, want bad-icv", name, p.suite, esn, i+k, st)
							}
						}
					}
					if esn {
						if st := openStatus(t, e, p, sealed, 4); st != offload.BadICV {
							t.Fatalf("%s %s: wrong ESN high bits: %v, want bad-icv", name, p.suite, st)
						}
					}
					if st := openStatus(t, e, p, sealed); st != offload.OK {
						t.Fatalf("%s %s esn=%v: the untouched packet: %v", name, p.suite, esn, st)
					}
				}
			}
		})
	}
}

// openStatus opens a copy of pkt on the engine under test (high sequence
// bits 3 unless given) and returns its status.
func openStatus(t *testing.T, e offload.Engine, p pair, pkt []byte, seqHi ...uint32) offload.Status {
	t.Helper()
	hi := uint32(3)
	if len(seqHi) > 0 {
		hi = seqHi[0]
	}
	op := p.op(p.got, offload.Open, append([]byte(nil), pkt...), hi)
	if err := offload.NewWaiter(e).Run(context.Background(), []*offload.Op{op}); err != nil {
		t.Fatal(err)
	}
	return op.Status
}

// TestInOrderCompletion: batches submitted back to back, from several
// goroutines, complete in the order the engine took them, each once, with
// every op done.
func TestInOrderCompletion(t *testing.T) {
	ref := cpu.New()
	for _, name := range testEngines() {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, name)
			p := sessions(t, e, ref, false)[0]
			const submitters, perSubmitter = 4, 50
			var mu sync.Mutex // orders taking a batch with noting it as taken
			var taken, done []int
			var doneMu sync.Mutex
			var wg sync.WaitGroup
			var all sync.WaitGroup
			all.Add(submitters * perSubmitter)
			for g := range submitters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range perSubmitter {
						id := g*perSubmitter + k
						b := &offload.Batch{Ops: make([]*offload.Op, 1+id%7)}
						for i := range b.Ops {
							b.Ops[i] = p.op(p.got, offload.Seal, packet(p.suite, 40+i*100), 0)
						}
						b.Done = func(b *offload.Batch) {
							for i := range b.Ops {
								if b.Ops[i].Status != offload.OK {
									t.Errorf("batch %d op %d: %v", id, i, b.Ops[i].Status)
								}
							}
							doneMu.Lock()
							done = append(done, id)
							doneMu.Unlock()
							all.Done()
						}
						mu.Lock()
						if err := e.Submit(context.Background(), b); err != nil {
							t.Errorf("submit: %v", err)
							all.Done()
						} else {
							taken = append(taken, id)
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			all.Wait()
			doneMu.Lock()
			defer doneMu.Unlock()
			if len(done) != len(taken) {
				t.Fatalf("%d batches completed, %d taken", len(done), len(taken))
			}
			for i := range taken {
				if done[i] != taken[i] {
					t.Fatalf("completion %d is batch %d, but batch %d was taken %dth", i, done[i], taken[i], i)
				}
			}
		})
	}
}

func TestUnknownEngine(t *testing.T) {
	for _, name := range []string{"nope", "emul:nope", "cpu:x", "ring:5", ""} {
		if _, err := (sim.Engines{}).Open(name, engines.Options{}); err == nil {
			t.Errorf("engine %q: no error", name)
		}
	}

}

// An emulated card asked for a modern AEAD refuses it, naming the suite.
func TestEmulRefusesModernSuites(t *testing.T) {
	for _, p := range emul.ProfileNames() {
		e := newEngine(t, emul.Prefix+":"+p)
		for _, c := range modernCiphers {
			s := sa.Suite{Cipher: c}
			enc, _, err := sa.RandomKeys(s, 128)
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.NewSession(offload.SessionConfig{Suite: s, EncKey: enc})
			if err == nil || !strings.Contains(err.Error(), c.String()) {
				t.Errorf("emul:%s with %s: %v, want a refusal naming it", p, s, err)
			}
		}
	}
}

// virtio:ADDRESS takes a PCI address only: a path or anything else is
// refused before sysfs is looked at, and a value that could be a key is
// not printed.
func TestVirtioAddressValidated(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"virtio:../../../../tmp/x", `"../../../../tmp/x" is not a PCI address (want DDDD:BB:DD.F`},
		{"virtio:0000:00:04", "is not a PCI address"},
		{"virtio:0000:00:20.0", "is not a PCI address"},
		{"virtio:0000:00:04.8", "is not a PCI address"},
		{"virtio:", "is not a PCI address"},
		{"virtio:00112233445566778899aabbccddeeff", "(a 32-character value, not shown) is not a PCI address"},
	} {
		_, err := (sim.Engines{}).Open(c.name, engines.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "00112233445566778899") {
			t.Errorf("%s: the error shows the value: %v", c.name, err)
		}
	}
}
