package afalg_test

// These tests need a kernel with AF_ALG, which this project's machines do
// not have: internal/lab/cryptoguest runs this package's test binary in the
// QEMU guest, once on the kernel's software drivers and once with
// ESPGW_AFALG_DRIVER=virtio_crypto_aes_cbc on QEMU's virtio-crypto device.
// Here they skip, saying so; the conformance tests every engine passes are
// in offload/engines (ESPGW_TEST_ENGINES=afalg in the guest).

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/afalg"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// driver is the kernel driver the guest run binds, or "" for the kernel's
// choice.
func driver() string { return os.Getenv("ESPGW_AFALG_DRIVER") }

func newEngine(t testing.TB, opts afalg.Options) *afalg.Engine {
	t.Helper()
	if opts.Driver == "" {
		opts.Driver = driver()
	}
	e, err := afalg.New(opts)
	if errors.Is(err, afalg.ErrNoAFALG) {
		t.Skipf("%v: internal/lab/cryptoguest runs this test in the QEMU guest", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st := e.Stats()
		// The guest harness reads this line to compare the requests with
		// the device's own count.
		fmt.Printf("afalg-requests %s %s %d\n", t.Name(), e.Name(), st.Records)
		e.Close()
	})
	return e
}

// cbcSession is an aes-cbc+hmac-sha1-96 session with zero keys, closed
// when the test ends.
func cbcSession(t *testing.T, e *afalg.Engine, esn bool) offload.Session {
	t.Helper()
	suite := sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}
	s, err := e.NewSession(offload.SessionConfig{Suite: suite, EncKey: make(sa.Key, 16), AuthKey: make(sa.Key, 20), ESN: esn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// serves reports whether e makes a session for suite at some key length.
func serves(e *afalg.Engine, suite sa.Suite) bool {
	for _, n := range suite.EncKeyLens() {
		s, err := e.NewSession(offload.SessionConfig{Suite: suite, EncKey: make(sa.Key, n), AuthKey: make(sa.Key, suite.AuthKeyLen())})
		if err == nil {
			s.Close()
			return true
		}
	}
	return false
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

// cbcOp is a seal of an aes-cbc+hmac-sha1-96 packet of n bytes of zeroes.
func cbcOp(s offload.Session, esn bool, n int) offload.Op {
	return op(s, sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, nil, esn, offload.Seal, make([]byte, n), 0)
}

type vector map[string]any

func loadVectors(t *testing.T, name string) []vector {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("../../testdata/vectors", name))
	if err != nil {
		t.Fatalf("known-answer vectors missing: %v", err)
	}
	var f struct{ Vectors []vector }
	if err := json.Unmarshal(raw, &f); err != nil || len(f.Vectors) == 0 {
		t.Fatalf("parse %s: %v (%d vectors)", name, err, len(f.Vectors))
	}
	return f.Vectors
}

func (v vector) bytes(t *testing.T, k string) []byte {
	t.Helper()
	s, _ := v[k].(string)
	b, err := hex.DecodeString(s)
	if err != nil || s == "" {
		t.Fatalf("vector %v field %s: %q %v", v["id"], k, s, err)
	}
	return b
}

func run(t *testing.T, e offload.Engine, ops []offload.Op) {
	t.Helper()
	if err := offload.NewWaiter(e).Run(context.Background(), offload.Refs(ops)); err != nil {
		t.Fatal(err)
	}
}

// TestKnownAnswersGCM seals and opens the RFC 4106 ESP packets (ESN ones
// included) whole: SPI | seq | IV | ciphertext | tag.
func TestKnownAnswersGCM(t *testing.T) {
	aeadKAT(t, "rfc4106_gcm_esp_draft-mcgrew-gcm-test-01.json", func(vector) sa.Cipher { return sa.CipherAESGCM16 }, 10)
}

// TestKnownAnswersModern does the same with RFC 7634's ESP example and the
// AES-GMAC and AES-CCM ESP packets (rfc7539esp, rfc4543, rfc4309).
func TestKnownAnswersModern(t *testing.T) {
	aeadKAT(t, "rfc7634_chacha20_poly1305_esp.json", func(vector) sa.Cipher { return sa.CipherChaCha20Poly1305 }, 0)
	aeadKAT(t, "rfc4543_gmac_esp.json", func(vector) sa.Cipher { return sa.CipherAESGMAC }, 2)
	aeadKAT(t, "rfc4309_ccm_esp.json", func(v vector) sa.Cipher {
		switch v["icv"].(float64) {
		case 8:
			return sa.CipherAESCCM8
		case 12:
			return sa.CipherAESCCM12
		}
		return sa.CipherAESCCM16
	}, 6)
}

// aeadKAT seals each ESP packet of file from its plaintext and opens it,
// and with ESN opens it under wrong high bits, which must fail.
func aeadKAT(t *testing.T, file string, cipherOf func(vector) sa.Cipher, minESN int) {
	e := newEngine(t, afalg.Options{})
	esn := 0
	for _, v := range loadVectors(t, file) {
		suite := sa.Suite{Cipher: cipherOf(v)}
		if !serves(e, suite) {
			t.Skipf("%s does not serve %s", e.Name(), suite)
		}
		isESN, _ := v["esn"].(bool)
		seq, err := strconv.ParseUint(v["seq"].(string), 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		keymat := v.bytes(t, "keymat")
		s, err := e.NewSession(offload.SessionConfig{Suite: suite, EncKey: keymat, ESN: isESN})
		if err != nil {
			t.Fatal(err)
		}
		icv := suite.ICVLen()
		want := v.bytes(t, "esp_packet")
		pt := v.bytes(t, "plaintext")
		in := append(append([]byte(nil), want[:16]...), pt...)
		in = append(in, make([]byte, icv)...)
		ops := []offload.Op{
			op(s, suite, keymat, isESN, offload.Seal, in, uint32(seq>>32)),
			op(s, suite, keymat, isESN, offload.Open, append([]byte(nil), want...), uint32(seq>>32)),
		}
		run(t, e, ops)
		if ops[0].Status != offload.OK || !bytes.Equal(ops[0].Buf, want) {
			t.Fatalf("%s: sealed %v\n got %x\nwant %x", v["id"], ops[0].Status, ops[0].Buf, want)
		}
		if ops[1].Status != offload.OK || !bytes.Equal(ops[1].Buf[16:len(want)-icv], pt) {
			t.Fatalf("%s: opened %v %x, want %x", v["id"], ops[1].Status, ops[1].Buf[16:], pt)
		}
		if isESN {
			esn++
			wrong := []offload.Op{op(s, suite, keymat, isESN, offload.Open, append([]byte(nil), want...), uint32(seq>>32)+7)}
			run(t, e, wrong)
			if wrong[0].Status != offload.BadICV {
				t.Fatalf("%s: wrong ESN high bits: %v", v["id"], wrong[0].Status)
			}
		}
		s.Close()
	}
	if esn < minESN {
		t.Fatalf("%s: only %d ESN vectors", file, esn)
	}
}

// cipherKAT encrypts pt under a cipher-only session with the vector's IV
// and decrypts ct back.
func cipherKAT(t *testing.T, e *afalg.Engine, c sa.Cipher, key, iv, pt, ct []byte) {
	t.Helper()
	s, err := e.NewSession(offload.SessionConfig{Suite: sa.Suite{Cipher: c}, EncKey: key, CipherOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hdr := append([]byte{0, 0, 0x10, 0x01, 0, 0, 0, 1}, iv...)
	suite := sa.Suite{Cipher: c}
	ops := []offload.Op{
		op(s, suite, key, false, offload.Seal, append(append([]byte(nil), hdr...), pt...), 0),
		op(s, suite, key, false, offload.Open, append(append([]byte(nil), hdr...), ct...), 0),
	}
	run(t, e, ops)
	if ops[0].Status != offload.OK || !bytes.Equal(ops[0].Buf[len(hdr):], ct) {
		t.Fatalf("encrypt %v\n got %x\nwant %x", ops[0].Status, ops[0].Buf[len(hdr):], ct)
	}
	if ops[1].Status != offload.OK || !bytes.Equal(ops[1].Buf[len(hdr):], pt) {
		t.Fatalf("decrypt %v\n got %x\nwant %x", ops[1].Status, ops[1].Buf[len(hdr):], pt)
	}
}

// TestKnownAnswersCiphers: RFC 3602 (all eight cases; 5–8 are whole ESP
// payloads), the SP 800-67 3DES examples and RFC 3686's AES-CTR vectors,
// on cipher-only sessions (cbc(aes), cbc(des3_ede), rfc3686(ctr(aes))).
func TestKnownAnswersCiphers(t *testing.T) {
	e := newEngine(t, afalg.Options{})
	n := 0
	if serves(e, sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}) {
		for _, v := range loadVectors(t, "rfc3602_aes_cbc_esp.json") {
			cipherKAT(t, e, sa.CipherAESCBC, v.bytes(t, "key"), v.bytes(t, "iv"), v.bytes(t, "plaintext"), v.bytes(t, "ciphertext"))
			n++
		}
	}
	if serves(e, sa.Suite{Cipher: sa.Cipher3DES, Auth: sa.AuthHMACSHA1_96}) {
		for _, v := range loadVectors(t, "nist_3des_cbc_cavp_sp800-67.json") {
			key, pt, ct := v.bytes(t, "key"), v.bytes(t, "plaintext"), v.bytes(t, "ciphertext")
			if v["iv"] == nil { // the ECB example: one-block CBC messages under a zero IV
				for i := 0; i < len(pt); i += 8 {
					cipherKAT(t, e, sa.Cipher3DES, key, make([]byte, 8), pt[i:i+8], ct[i:i+8])
				}
			} else {
				cipherKAT(t, e, sa.Cipher3DES, key, v.bytes(t, "iv"), pt, ct)
			}
			n++
		}
	}
	if serves(e, sa.Suite{Cipher: sa.CipherAESCTR, Auth: sa.AuthHMACSHA1_96}) {
		for _, v := range loadVectors(t, "rfc3686_aes_ctr_esp.json") {
			cipherKAT(t, e, sa.CipherAESCTR, v.bytes(t, "keymat"), v.bytes(t, "iv"), v.bytes(t, "plaintext"), v.bytes(t, "ciphertext"))
			n++
		}
	}
	if n < 8 {
		t.Fatalf("only %d cipher vectors ran on %s", n, e.Name())
	}
}

// TestKnownAnswersHMAC: the RFC 2202/4868 HMAC vectors whose data can be
// an ESP packet, as the ICV of a null-cipher packet
// (authenc(hmac(…),ecb(cipher_null))).
func TestKnownAnswersHMAC(t *testing.T) {
	e := newEngine(t, afalg.Options{})
	n := 0
	for _, c := range []struct {
		file, field string
		auth        sa.Auth
	}{
		{"rfc2404_hmac_sha1_96_via_rfc2202.json", "digest_96", sa.AuthHMACSHA1_96},
		{"rfc4868_hmac_sha256_128.json", "hmac_sha256_128", sa.AuthHMACSHA256_128},
	} {
		suite := sa.Suite{Cipher: sa.CipherNull, Auth: c.auth}
		if !serves(e, suite) {
			continue
		}
		for _, v := range loadVectors(t, c.file) {
			key, data, icv := v.bytes(t, "key"), v.bytes(t, "data"), v.bytes(t, c.field)
			if len(key) != suite.AuthKeyLen() || len(data) < 8 || (len(data)-8)%4 != 0 {
				continue
			}
			s, err := e.NewSession(offload.SessionConfig{Suite: suite, EncKey: sa.Key{}, AuthKey: key})
			if err != nil {
				t.Fatal(err)
			}
			pkt := append(append([]byte(nil), data...), make([]byte, len(icv))...)
			ops := []offload.Op{op(s, suite, nil, false, offload.Seal, pkt, 0)}
			run(t, e, ops)
			if ops[0].Status != offload.OK || !bytes.Equal(pkt[len(data):], icv) {
				t.Fatalf("%s: ICV %x (%v), want %x", v["id"], pkt[len(data):], ops[0].Status, icv)
			}
			ops[0].Dir = offload.Open
			run(t, e, ops)
			if ops[0].Status != offload.OK {
				t.Fatalf("%s: the published ICV: %v", v["id"], ops[0].Status)
			}
			s.Close()
			n++
		}
	}
	if n < 2 && driver() == "" {
		t.Fatalf("only %d HMAC vectors went through %s", n, e.Name())
	}
}

// TestCipherOnlyAgainstCPU: cipher-only sessions (what `espgw speed`
// times) give cpu's bytes at every length, both ways.
func TestCipherOnlyAgainstCPU(t *testing.T) {
	e := newEngine(t, afalg.Options{})
	for _, c := range []sa.Cipher{sa.CipherAESCBC, sa.Cipher3DES, sa.CipherAESCTR} {
		suite := sa.Suite{Cipher: c}
		if !serves(e, sa.Suite{Cipher: c, Auth: sa.AuthHMACSHA1_96}) {
			continue
		}
		for _, kl := range suite.EncKeyLens() {
			key := make(sa.Key, kl)
			for i := range key {
				key[i] = byte(i*7 + kl)
			}
			cfg := offload.SessionConfig{Suite: suite, EncKey: key, CipherOnly: true}
			got, err := e.NewSession(cfg)
			if err != nil {
				t.Fatal(err)
			}
			want, err := cpu.NewSession(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for n := 0; n <= 1500; n += 97 {
				n := (n + suite.BlockLen() - 1) / suite.BlockLen() * suite.BlockLen()
				pkt := make([]byte, 8+suite.IVLen()+n)
				for i := range pkt {
					pkt[i] = byte(i * 13)
				}
				for _, dir := range []offload.Direction{offload.Seal, offload.Open} {
					a := []offload.Op{op(got, suite, key, false, dir, append([]byte(nil), pkt...), 0)}
					b := op(want, suite, key, false, dir, append([]byte(nil), pkt...), 0)
					run(t, e, a)
					want.Process(&b)
					if a[0].Status != b.Status || !bytes.Equal(a[0].Buf, b.Buf) {
						t.Fatalf("%s %d bytes %s: %v, cpu %v; bytes differ: %v", suite, n, dir, a[0].Status, b.Status, !bytes.Equal(a[0].Buf, b.Buf))
					}
				}
			}
			got.Close()
		}
	}
}

// TestDeviceRequests sends a known number of requests (seals, then opens
// of what was sealed, every payload non-empty so each reaches the cipher)
// and prints the count: on the device the guest harness checks that the
// data queue's used index moved by exactly this much.
func TestDeviceRequests(t *testing.T) {
	e := newEngine(t, afalg.Options{Sockets: 3})
	suite := sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}
	s, err := e.NewSession(offload.SessionConfig{Suite: suite, EncKey: make(sa.Key, 16), AuthKey: make(sa.Key, 32)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 100
	ops := make([]offload.Op, n)
	for i := range ops {
		ops[i] = op(s, suite, nil, false, offload.Seal, make([]byte, 8+16+16*(1+i%90)+16), 0)
	}
	run(t, e, ops)
	for i := range ops {
		if ops[i].Status != offload.OK {
			t.Fatalf("seal %d: %v", i, ops[i].Status)
		}
		ops[i].Dir = offload.Open
	}
	run(t, e, ops)
	for i := range ops {
		if ops[i].Status != offload.OK {
			t.Fatalf("open %d: %v", i, ops[i].Status)
		}
	}
	if got := e.Stats().Records; got != 2*n {
		t.Fatalf("%d requests counted, want %d", got, 2*n)
	}
	fmt.Printf("afalg-device-requests %d\n", 2*n)
}

// TestDriverReported: the engine says which driver and modules did the
// work, as /proc/crypto names them.
func TestDriverReported(t *testing.T) {
	e := newEngine(t, afalg.Options{})
	cbcSession(t, e, false) // the session binds what Drivers reports
	ds := e.Drivers()
	if len(ds) != 1 || ds[0].Algorithm != "authenc(hmac(sha1),cbc(aes))" {
		t.Fatalf("drivers %+v", ds)
	}
	t.Logf("driver %s, modules %s", ds[0].Driver, ds[0].Module)
	fmt.Printf("afalg-driver %s | %s\n", ds[0].Driver, ds[0].Module)
	if d := driver(); d != "" && (!strings.Contains(ds[0].Driver, d) || !strings.Contains(ds[0].Module, d+": ")) {
		t.Fatalf("bound to %s but the report says %+v", d, ds[0])
	}
}

// TestUnservableSuite: with a driver bound, a suite it cannot do is a
// clear error at session creation naming the driver and /proc/crypto.
func TestUnservableSuite(t *testing.T) {
	if driver() == "" {
		t.Skip("the kernel's own choice serves every suite")
	}
	e := newEngine(t, afalg.Options{})
	_, err := e.NewSession(offload.SessionConfig{Suite: sa.Suite{Cipher: sa.Cipher3DES, Auth: sa.AuthHMACSHA1_96}, EncKey: make(sa.Key, 24), AuthKey: make(sa.Key, 20)})
	if err == nil || !strings.Contains(err.Error(), driver()) || !strings.Contains(err.Error(), "/proc/crypto") {
		t.Fatalf("3des on %s: %v", driver(), err)
	}
	t.Log(err)
}

// TestSessionAllocatesNothing: a steady-state op (submit, kernel request,
// completion) allocates nothing.
func TestSessionAllocatesNothing(t *testing.T) {
	e := newEngine(t, afalg.Options{})
	s := cbcSession(t, e, true)
	w := offload.NewWaiter(e)
	ops := make([]offload.Op, 8)
	for i := range ops {
		ops[i] = cbcOp(s, true, 8+16+1024+12)
	}
	refs := offload.Refs(ops)
	ctx := context.Background()
	w.Run(ctx, refs) // warm the pools
	if a := testing.AllocsPerRun(50, func() { w.Run(ctx, refs) }); a != 0 {
		t.Fatalf("%.2f allocations per batch", a)
	}
}

// TestOversizedBatch: a batch larger than the queue is taken when the
// queue is empty, split over more sockets than the queue has places, and
// completes; so does a batch behind it.
func TestOversizedBatch(t *testing.T) {
	e := newEngine(t, afalg.Options{Sockets: 8, QueueDepth: 4})
	s := cbcSession(t, e, false)
	for _, n := range []int{20, 3, 9} {
		ops := make([]offload.Op, n)
		for i := range ops {
			ops[i] = cbcOp(s, false, 8+16+64+12)
		}
		run(t, e, ops)
		for i := range ops {
			if ops[i].Status != offload.OK {
				t.Fatalf("batch of %d, op %d: %v", n, i, ops[i].Status)
			}
		}
	}
}

// TestBackPressure: with the queue full, a Submit whose context has ended
// is refused (and counted), and one that may wait waits until there is
// room; every batch taken completes.
func TestBackPressure(t *testing.T) {
	e := newEngine(t, afalg.Options{Sockets: 1, QueueDepth: 4})
	s := cbcSession(t, e, false)
	done := make(chan *offload.Batch, 64)
	batch := func() *offload.Batch {
		b := &offload.Batch{Ops: make([]*offload.Op, 4), Done: func(b *offload.Batch) { done <- b }}
		for i := range b.Ops {
			o := cbcOp(s, false, 8+16+4096+12)
			b.Ops[i] = &o
		}
		return b
	}
	ended, end := context.WithCancel(context.Background())
	end()
	taken, full := 0, 0
	for range 32 {
		switch err := e.Submit(ended, batch()); {
		case err == nil:
			taken++
		case errors.Is(err, context.Canceled):
			full++
		default:
			t.Fatal(err)
		}
	}
	if full == 0 {
		t.Fatalf("32 batches of 4 into a queue of 4: none refused (%d taken)", taken)
	}
	if err := e.Submit(context.Background(), batch()); err != nil { // waits for room
		t.Fatal(err)
	}
	taken++
	for range taken {
		b := <-done
		for _, op := range b.Ops {
			if op.Status != offload.OK {
				t.Fatalf("op %v", op.Status)
			}
		}
	}
	if st := e.Stats(); st.QueueFull < uint64(full) || st.MaxQueue > 4 {
		t.Fatalf("stats %+v after %d refusals", st, full)
	}
}
