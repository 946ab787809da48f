package virtio_test

// These tests drive a real virtio-crypto device. This project's machines
// have none, so they run inside the QEMU guest that internal/lab/cryptoguest
// boots with QEMU's virtio-crypto-pci device behind an emulated IOMMU; it
// sets ESPGW_VIRTIO_REQUIRED, which turns a missing device into a failure.
// Anywhere else they skip, saying where they run.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/offload/virtio"
	"github.com/espgw/espgw/sa"
)

func open(t testing.TB) *virtio.Engine {
	t.Helper()
	e, err := virtio.Open(virtio.Config{Device: os.Getenv("ESPGW_VIRTIO_DEVICE")})
	if err != nil {
		if os.Getenv("ESPGW_VIRTIO_REQUIRED") != "" {
			t.Fatalf("virtio engine: %v", err)
		}
		t.Skipf("no virtio-crypto device here (%v): these tests run in the QEMU guest, go test ./internal/lab/cryptoguest", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return e
}

func key(n int) sa.Key {
	k := make(sa.Key, n)
	rand.Read(k)
	return k
}

// suites are the ESP suites the device serves (its ciphers, every HMAC):
// those the engine makes sessions for.
func suites(t *testing.T, e *virtio.Engine) []sa.Suite {
	var out []sa.Suite
	for _, suite := range cpu.AllSuites() {
		s, err := e.NewSession(offload.SessionConfig{Suite: suite, EncKey: key(suite.EncKeyLens()[0]), AuthKey: key(suite.AuthKeyLen())})
		if err != nil {
			t.Logf("no %s: %v", suite, err)
			continue
		}
		s.Close()
		out = append(out, suite)
	}
	if len(out) == 0 {
		t.Fatal("the device serves no ESP suite")
	}
	return out
}

// op lays out an op on the ESP packet pkt as esp does, for suite under
// encKey.
func op(s offload.Session, suite sa.Suite, encKey sa.Key, esn bool, dir offload.Direction, pkt []byte, seqHi uint32) offload.Op {
	var o offload.Op
	layout := esp.NewLayout(suite, encKey, esn)
	if !layout.Op(&o, s, dir, pkt, seqHi) {
		o = offload.Op{Session: s, Dir: dir, Buf: pkt, SeqHi: seqHi} // too short: no ranges
	}
	return o
}

// run puts ops through the engine in one batch and waits.
func run(t testing.TB, e offload.Engine, ops []offload.Op) {
	t.Helper()
	if err := offload.NewWaiter(e).Run(context.Background(), offload.Refs(ops)); err != nil {
		t.Fatal(err)
	}
}

func packet(suite sa.Suite, n int) []byte {
	bl := suite.BlockLen()
	n = (n + bl - 1) / bl * bl
	pkt := make([]byte, 8+suite.IVLen()+n+suite.ICVLen())
	rand.Read(pkt)
	return pkt
}

// TestDifferential: byte for byte what cpu does, for every suite the device
// serves and every key length, ESN on and off, payloads from 0 to 1500
// bytes, seal then open; and a flipped bit anywhere in a sealed packet
// (header, IV, payload, ICV) is BadICV with the packet left as it came.
func TestDifferential(t *testing.T) {
	e := open(t)
	ref := cpu.New()
	var lengths []int
	for n := 0; n <= 1500; n += 37 {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 1500)
	for _, suite := range suites(t, e) {
		for _, kl := range suite.EncKeyLens() {
			for _, esn := range []bool{false, true} {
				name := fmt.Sprintf("%s/key%d/esn=%v", suite, kl, esn)
				t.Run(name, func(t *testing.T) {
					cfg := offload.SessionConfig{Suite: suite, EncKey: key(kl), AuthKey: key(suite.AuthKeyLen()), ESN: esn}
					got, err := e.NewSession(cfg)
					if err != nil {
						t.Fatal(err)
					}
					defer got.Close()
					want, err := ref.NewSession(cfg)
					if err != nil {
						t.Fatal(err)
					}
					var gops, wops []offload.Op
					for _, n := range lengths {
						pkt := packet(suite, n)
						gops = append(gops, op(got, suite, cfg.EncKey, esn, offload.Seal, bytes.Clone(pkt), 9))
						wops = append(wops, op(want, suite, cfg.EncKey, esn, offload.Seal, bytes.Clone(pkt), 9))
					}
					run(t, e, gops)
					run(t, ref, wops)
					for i := range gops {
						if gops[i].Status != offload.OK || !bytes.Equal(gops[i].Buf, wops[i].Buf) {
							t.Fatalf("seal of %d bytes: status %v, packet equal to cpu's: %v", len(gops[i].Buf), gops[i].Status, bytes.Equal(gops[i].Buf, wops[i].Buf))
						}
					}
					sealed := make([][]byte, len(gops))
					for i := range gops {
						sealed[i] = bytes.Clone(gops[i].Buf)
						gops[i].Dir, wops[i].Dir = offload.Open, offload.Open
					}
					run(t, e, gops)
					run(t, ref, wops)
					for i := range gops {
						if gops[i].Status != offload.OK || !bytes.Equal(gops[i].Buf, wops[i].Buf) {
							t.Fatalf("open of %d bytes: status %v, equal to cpu's: %v", len(gops[i].Buf), gops[i].Status, bytes.Equal(gops[i].Buf, wops[i].Buf))
						}
					}
					// A flipped bit anywhere: BadICV, and nothing decrypted.
					var bad []offload.Op
					for i, s := range sealed {
						for _, at := range []int{0, 5, 8, len(s) / 2, len(s) - 1} {
							p := bytes.Clone(s)
							p[at] ^= 1 << (i % 8)
							bad = append(bad, op(got, suite, cfg.EncKey, esn, offload.Open, p, 9))
						}
					}
					// The wrong ESN high bits are a bad ICV too.
					bad = append(bad, op(got, suite, cfg.EncKey, esn, offload.Open, bytes.Clone(sealed[3]), 10))
					kept := make([][]byte, len(bad))
					for i := range bad {
						kept[i] = bytes.Clone(bad[i].Buf)
					}
					run(t, e, bad)
					for i := range bad {
						if !esn && i == len(bad)-1 {
							continue // without ESN the high bits are not authenticated
						}
						if bad[i].Status != offload.BadICV {
							t.Fatalf("tampered packet %d: status %v, want bad-icv", i, bad[i].Status)
						}
						if !bytes.Equal(bad[i].Buf, kept[i]) {
							t.Fatalf("tampered packet %d: the engine changed it", i)
						}
					}
				})
			}
		}
	}
}

// TestInOrderManyInFlight submits more batches than the device has slots
// and checks every op finished, in submission order, with cpu's bytes.
func TestInOrderManyInFlight(t *testing.T) {
	e := open(t)
	ref := cpu.New()
	suite := sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}
	cfg := offload.SessionConfig{Suite: suite, EncKey: key(16), AuthKey: key(32)}
	got, err := e.NewSession(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ref.NewSession(cfg)
	const batches, per = 40, 16 // 640 requests through a ring of 128
	order := make(chan int, batches)
	all := make([][]offload.Op, batches)
	wantPkts := make([][][]byte, batches)
	bs := make([]offload.Batch, batches)
	for b := range batches {
		for i := range per {
			pkt := packet(suite, 64*(i+1)+b)
			all[b] = append(all[b], op(got, suite, cfg.EncKey, false, offload.Seal, bytes.Clone(pkt), 0))
			w := []offload.Op{op(want, suite, cfg.EncKey, false, offload.Seal, bytes.Clone(pkt), 0)}
			run(t, ref, w)
			wantPkts[b] = append(wantPkts[b], w[0].Buf)
		}
		b := b
		bs[b] = offload.Batch{Ops: offload.Refs(all[b]), Done: func(*offload.Batch) { order <- b }}
	}
	for b := range bs {
		if err := e.Submit(context.Background(), &bs[b]); err != nil {
			t.Fatal(err)
		}
	}
	for want := range batches {
		if got := <-order; got != want {
			t.Fatalf("batch %d completed where batch %d should", got, want)
		}
	}
	for b := range all {
		for i, op := range all[b] {
			if op.Status != offload.OK || !bytes.Equal(op.Buf, wantPkts[b][i]) {
				t.Fatalf("batch %d op %d: status %v, equal to cpu's: %v", b, i, op.Status, bytes.Equal(op.Buf, wantPkts[b][i]))
			}
		}
	}
	st := e.Stats()
	if st.Records != batches*per || st.Completions != batches*per {
		t.Fatalf("records %d, completions %d, want %d each", st.Records, st.Completions, batches*per)
	}
	if st.MaxQueue < 2 || st.Doorbells >= st.Records {
		t.Fatalf("deepest queue %d and %d doorbells for %d records: requests were not batched", st.MaxQueue, st.Doorbells, st.Records)
	}
	t.Logf("records %d, doorbells %d, deepest queue %d, queue full %d", st.Records, st.Doorbells, st.MaxQueue, st.QueueFull)
}

type vector map[string]any

func vectors(t *testing.T, file string) []vector {
	dir := os.Getenv("ESPGW_VECTORS")
	if dir == "" {
		dir = "../../testdata/vectors"
	}
	raw, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatalf("known-answer vectors missing: %v", err)
	}
	var f struct{ Vectors []vector }
	if err := json.Unmarshal(raw, &f); err != nil || len(f.Vectors) == 0 {
		t.Fatalf("parse %s: %v (%d vectors)", file, err, len(f.Vectors))
	}
	return f.Vectors
}

func (v vector) hex(t *testing.T, k string) []byte {
	s, _ := v[k].(string)
	b, err := hex.DecodeString(s)
	if err != nil || s == "" {
		t.Fatalf("vector %v: field %s: %q %v", v["id"], k, s, err)
	}
	return b
}

// TestKnownAnswers runs the standards' cipher vectors on the device itself,
// through cipher-only sessions: RFC 3602 AES-CBC, RFC 3686 AES-CTR (the
// counter block nonce | IV | 1 built for the device), NIST 3DES-CBC.
func TestKnownAnswers(t *testing.T) {
	e := open(t)
	cases := []struct {
		file   string
		cipher sa.Cipher
		key    func(v vector) []byte
	}{
		{"rfc3602_aes_cbc_esp.json", sa.CipherAESCBC, func(v vector) []byte { return v.hex(t, "key") }},
		{"rfc3686_aes_ctr_esp.json", sa.CipherAESCTR, func(v vector) []byte { return v.hex(t, "keymat") }},
		{"nist_3des_cbc_cavp_sp800-67.json", sa.Cipher3DES, func(v vector) []byte { return v.hex(t, "key") }},
	}
	for _, c := range cases {
		for _, v := range vectors(t, c.file) {
			id, _ := v["id"].(string)
			if alg, _ := v["algorithm"].(string); strings.Contains(alg, "ECB") {
				continue // no ESP cipher: ECB has no IV
			}
			t.Run(id, func(t *testing.T) {
				suite := sa.Suite{Cipher: c.cipher, Auth: sa.AuthNone}
				encKey := c.key(v)
				s, err := e.NewSession(offload.SessionConfig{Suite: suite, EncKey: encKey, CipherOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				plain, ct, iv := v.hex(t, "plaintext"), v.hex(t, "ciphertext"), v.hex(t, "iv")
				pkt := append(append(make([]byte, 8), iv...), plain...)
				ops := []offload.Op{op(s, suite, encKey, false, offload.Seal, pkt, 0)}
				run(t, e, ops)
				if ops[0].Status != offload.OK || !bytes.Equal(pkt[8+len(iv):], ct) {
					t.Fatalf("encrypt: status %v, ciphertext %x, want %x", ops[0].Status, pkt[8+len(iv):], ct)
				}
				ops[0].Dir = offload.Open
				run(t, e, ops)
				if ops[0].Status != offload.OK || !bytes.Equal(pkt[8+len(iv):], plain) {
					t.Fatalf("decrypt: status %v, plaintext %x, want %x", ops[0].Status, pkt[8+len(iv):], plain)
				}
			})
		}
	}
}

// TestRefusesGCM: the device has no AEAD; the engine says so at session
// creation, naming the device.
func TestRefusesGCM(t *testing.T) {
	e := open(t)
	_, err := e.NewSession(offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherAESGCM16, Auth: sa.AuthNone}, EncKey: key(20)})
	if err == nil || !strings.Contains(err.Error(), e.Device()) {
		t.Fatalf("GCM session: %v, want an error naming the device", err)
	}
}

// TestReopen closes the engine and opens the device again, as a restarted
// gateway does: the reset at open reclaims it.
func TestReopen(t *testing.T) {
	for range 3 {
		e, err := virtio.Open(virtio.Config{Device: os.Getenv("ESPGW_VIRTIO_DEVICE")})
		if err != nil {
			if os.Getenv("ESPGW_VIRTIO_REQUIRED") != "" {
				t.Fatal(err)
			}
			t.Skip(err)
		}
		suite := sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}
		s, err := e.NewSession(offload.SessionConfig{Suite: suite, EncKey: key(16), AuthKey: key(20)})
		if err != nil {
			t.Fatal(err)
		}
		ops := []offload.Op{op(s, suite, nil, false, offload.Seal, packet(suite, 100), 0)}
		run(t, e, ops)
		if ops[0].Status != offload.OK {
			t.Fatalf("seal after reopen: %v", ops[0].Status)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeviceCountsRequests puts a known number of requests through the
// device and checks the engine's counters. With ESPGW_VIRTIO_HOLD set to a
// folder it then writes "records N" to FOLDER/ready and keeps the device
// open until FOLDER/release appears, so the host can read the device's own
// used index over QMP before Close resets it (internal/lab/cryptoguest).
func TestDeviceCountsRequests(t *testing.T) {
	e := open(t)
	suite := sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}
	s, err := e.NewSession(offload.SessionConfig{Suite: suite, EncKey: key(16), AuthKey: key(20)})
	if err != nil {
		t.Fatal(err)
	}
	const batches, per = 40, 25
	for range batches {
		ops := make([]offload.Op, per)
		for i := range ops {
			ops[i] = op(s, suite, nil, false, offload.Seal, packet(suite, 1000), 0)
		}
		run(t, e, ops)
		for i := range ops {
			if ops[i].Status != offload.OK {
				t.Fatalf("op %d: %v", i, ops[i].Status)
			}
		}
	}
	st := e.Stats()
	if st.Records != batches*per || st.Completions != st.Records || st.Ops != st.Records {
		t.Fatalf("records %d, completions %d, ops %d; want %d each", st.Records, st.Completions, st.Ops, batches*per)
	}
	hold := os.Getenv("ESPGW_VIRTIO_HOLD")
	if hold == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(hold, "ready"), []byte(fmt.Sprintf("records %d, doorbells %d\n", st.Records, st.Doorbells)), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(hold, "release")); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("never released")
		}
	}
}
