package speed_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/speed"
	"github.com/espgw/espgw/sa"
)

// opensslOutput is what `openssl speed -evp aes-128-cbc -seconds 1` printed
// on this machine (OpenSSL 3.0.19).
const opensslOutput = `version: 3.0.19
built on: Fri Apr  3 12:29:32 2026 UTC
options: bn(64,64)
The 'numbers' are in 1000s of bytes per second processed.
type             16 bytes     64 bytes    256 bytes   1024 bytes   8192 bytes  16384 bytes
AES-128-CBC     510726.77k   872324.04k  1024053.76k  1044424.86k  1085557.03k  1088070.06k
`

func TestParseArgs(t *testing.T) {
	f, err := speed.ParseArgs(strings.Fields("-evp aes-128-cbc -multi 4 -seconds 2 -bytes 1400 -engine ring -batch 32 --vs-openssl --json -elapsed esp:aes-256-cbc+hmac-sha2-256-128"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Multi != 4 || f.Duration != 2*time.Second || len(f.Sizes) != 1 || f.Sizes[0] != 1400 || f.Engine != "ring" ||
		f.Batch != 32 || !f.VsOpenSSL || !f.JSON || !f.Elapsed || len(f.Algs) != 2 || !f.Algs[1].ESP {
		t.Errorf("parsed %+v", f)
	}
	for _, bad := range []string{"", "-evp", "-evp rc4", "-evp aes-128-cbc -multi 0", "-evp aes-128-cbc -seconds x",
		"-evp aes-128-cbc -frobnicate", "-evp esp:aes-128-cbc", "-evp esp:aes-128-gcm+hmac-sha1-96", "-evp esp:rot13+hmac-sha1-96"} {
		if _, err := speed.ParseArgs(strings.Fields(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseAlg(t *testing.T) {
	for _, name := range append(speed.BulkAlgs, "esp:aes-128-cbc+hmac-sha1-96", "esp:aes-128-gcm", "esp:des-ede3-cbc+hmac-md5-96", "ESP:AES-256-CTR+HMAC-SHA2-512-256") {
		if _, err := speed.ParseAlg(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, name := range []string{"aes-cbc", "aes-512-cbc", "aes-128-ecb", "null", "aes-128-cbcx", "esp:", "aes-gmac", "esp:chacha20-poly1305+hmac-sha1-96",
		"aes-128-cbc-hmac-md5", "aes-128-ctr-hmac-sha1", "aes-192-cbc-hmac-sha1", "aes-128-cbc-hmac-"} {
		if _, err := speed.ParseAlg(name); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// openssl's chacha20-poly1305 is the AEAD with its tag, keyed with
	// ESP's 36 bytes (key and salt); the modern suites as whole ESP seals.
	for _, tc := range []struct {
		name   string
		cipher sa.Cipher
		keyLen int
		esp    bool
	}{
		{"chacha20-poly1305", sa.CipherChaCha20Poly1305, 36, false},
		{"esp:chacha20-poly1305", sa.CipherChaCha20Poly1305, 36, true},
		{"esp:aes-gmac", sa.CipherAESGMAC, 20, true},
		{"aes-gmac-128", sa.CipherAESGMAC, 20, false},
		{"aes-gmac-256", sa.CipherAESGMAC, 36, false},
		{"esp:aes-ccm-8", sa.CipherAESCCM8, 19, true},
		{"esp:aes-ccm-16", sa.CipherAESCCM16, 19, true},
	} {
		a, err := speed.ParseAlg(tc.name)
		if err != nil || a.Suite != (sa.Suite{Cipher: tc.cipher}) || a.KeyLen != tc.keyLen || a.ESP != tc.esp || a.CipherOnly {
			t.Errorf("%s: %+v, %v", tc.name, a, err)
		}
	}
	// openssl's stitched CBC with HMAC ciphers are bulk ops with the ICV.
	for _, tc := range []struct {
		name   string
		suite  sa.Suite
		keyLen int
	}{
		{"aes-128-cbc-hmac-sha1", sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, 16},
		{"AES-256-CBC-HMAC-SHA1", sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, 32},
		{"aes-128-cbc-hmac-sha256", sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}, 16},
		{"aes-256-cbc-hmac-sha256", sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}, 32},
	} {
		a, err := speed.ParseAlg(tc.name)
		if err != nil || a.Suite != tc.suite || a.KeyLen != tc.keyLen || a.ESP || a.CipherOnly {
			t.Errorf("%s: %+v, %v", tc.name, a, err)
		}
	}
}

func TestParseOpenSSL(t *testing.T) {
	row, err := speed.ParseOpenSSL([]byte(opensslOutput), "AES-128-CBC", 6)
	if err != nil {
		t.Fatal(err)
	}
	if row.KBps[0] != 510726.77 || row.KBps[5] != 1088070.06 {
		t.Errorf("parsed %v", row.KBps)
	}
	if _, err := speed.ParseOpenSSL([]byte(opensslOutput), "DES-EDE3-CBC", 6); err == nil {
		t.Error("found a row that is not there")
	}
}

// TestTableLayout checks the table lines up with openssl's, column for
// column, so the two can be laid side by side.
func TestTableLayout(t *testing.T) {
	res := &speed.Result{Engine: "cpu", Multi: 1, Batch: 1, Timing: "cpu", Sizes: speed.Sizes,
		Rows: []speed.Row{{Label: "AES-128-CBC", KBps: []float64{510726.77, 872324.04, 1024053.76, 1044424.86, 1085557.03, 1088070.06}},
			{Label: "DES-EDE3-CBC", KBps: []float64{5.5, 21945.94, 0, 1, 2, 3}}}}
	var out bytes.Buffer
	speed.WriteTable(&out, res, nil)
	lines := strings.Split(out.String(), "\n")
	want := strings.Split(opensslOutput, "\n")
	find := func(ls []string, prefix string) string {
		for _, l := range ls {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		t.Fatalf("no line starting %q in\n%s", prefix, strings.Join(ls, "\n"))
		return ""
	}
	for _, prefix := range []string{"The 'numbers'", "type", "AES-128-CBC"} {
		if got, w := find(lines, prefix), find(want, prefix); got != w {
			t.Errorf("line differs from openssl's:\n got %q\nwant %q", got, w)
		}
	}
	// below 10000 bytes/s openssl prints bytes per second without the k
	if got := find(lines, "DES-EDE3-CBC"); got != "DES-EDE3-CBC      5500.00     21945.94k        0.00      1000.00      2000.00      3000.00 " {
		t.Errorf("small rates: %q", got)
	}
}

// TestRun times two algorithms briefly on the cpu and ring engines and
// checks the result makes sense and prints.
func TestRun(t *testing.T) {
	for _, engine := range []string{"cpu", "ring", "emul:t4", "aesni"} {
		f, err := speed.ParseArgs([]string{"-engine", engine, "-evp", "aes-128-gcm", "-evp", "esp:aes-128-cbc+hmac-sha1-96",
			"-evp", "aes-128-cbc-hmac-sha1", "-bytes", "1400", "-batch", "8", "-multi", "2"})
		if err != nil {
			t.Fatal(err)
		}
		f.Duration = 100 * time.Millisecond
		res, err := speed.Run(context.Background(), f.Config, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Rows {
			if len(r.KBps) != 1 || r.KBps[0] <= 0 || r.Ops[0] == 0 {
				t.Errorf("%s: row %+v", engine, r)
			}
		}
		if res.Stats.Ops == 0 {
			t.Errorf("%s: engine counted no ops", engine)
		}
		var js bytes.Buffer
		if err := speed.WriteJSON(&js, res, nil); err != nil || !json.Valid(js.Bytes()) {
			t.Errorf("%s: JSON %v: %s", engine, err, js.String())
		}
	}
	if _, err := speed.Run(context.Background(), speed.Config{Engine: "nope", Duration: time.Millisecond}, nil); err == nil || !strings.Contains(err.Error(), "unknown offload engine") {
		t.Errorf("unknown engine: %v", err)
	}
}

// TestRunCountsEveryRound: the ops counted are those done by the end of
// the window, a whole batch at a time, at every size and batch: 64-byte
// buffers in batches of 32 count in steps of 32 ops, not of many rounds.
func TestRunCountsEveryRound(t *testing.T) {
	for _, batch := range []int{1, 32} {
		alg, err := speed.ParseAlg("aes-128-cbc")
		if err != nil {
			t.Fatal(err)
		}
		cfg := speed.Config{Algs: []speed.Alg{alg}, Engine: "cpu", Batch: batch, Multi: 1, Elapsed: true,
			Duration: 30 * time.Millisecond, Sizes: []int{16, 64, 64, 64, 64, 256}}
		res, err := speed.Run(context.Background(), cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		ops := res.Rows[0].Ops
		var total uint64
		steps := 0 // counts that are not a multiple of 64 rounds
		for _, n := range ops {
			total += n
			if n%uint64(batch) != 0 {
				t.Errorf("batch %d: %d ops counted, not whole batches", batch, n)
			}
			if n%uint64(64*batch) != 0 {
				steps++
			}
		}
		if steps == 0 {
			t.Errorf("batch %d: every count %v is a multiple of 64 rounds: counted in steps of rounds, not each round", batch, ops)
		}
		if total > res.Stats.Ops {
			t.Errorf("batch %d: %d ops counted, the engine did %d", batch, total, res.Stats.Ops)
		}
	}
}

// A run whose buffers cannot fit in memory is refused before any is
// allocated, from the CLI and from Run alike.
func TestRunBounded(t *testing.T) {
	for _, bad := range []string{"-evp aes-128-cbc -batch 100000000", "-evp aes-128-cbc -multi 100000",
		"-evp aes-128-cbc -batch 4096 -multi 256", "-evp aes-128-cbc -bytes 100000"} {
		if _, err := speed.ParseArgs(strings.Fields(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	alg, err := speed.ParseAlg("aes-128-cbc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := speed.Run(context.Background(), speed.Config{Algs: []speed.Alg{alg}, Engine: "cpu", Batch: 100_000_000, Duration: time.Second}, nil); err == nil || !strings.Contains(err.Error(), "-batch") {
		t.Errorf("Run with a batch of 10^8: %v", err)
	}
	if _, err := speed.ParseArgs(strings.Fields("-evp aes-128-cbc -batch 4096")); err != nil {
		t.Errorf("the largest batch: %v", err)
	}
}

// TestParseOpenSSLInfinite: openssl's rate is infinite when its process
// used no CPU time (a device did the work): an error that says to time by
// the wall clock, never +Inf in a table or in JSON.
func TestParseOpenSSLInfinite(t *testing.T) {
	out := []byte("type             16 bytes     64 bytes\nAES-128-CBC       4555.20k         infk\n")
	if _, err := speed.ParseOpenSSL(out, "AES-128-CBC", 2); err == nil || !strings.Contains(err.Error(), "-elapsed") {
		t.Fatalf("error %v", err)
	}
}

func TestInOpenSSL(t *testing.T) {
	for name, want := range map[string]bool{"aes-128-gcm": true, "chacha20-poly1305": true, "aes-128-cbc-hmac-sha1": true,
		"aes-gmac-128": false, "aes-gmac-256": false, "esp:aes-128-gcm": false} {
		a, err := speed.ParseAlg(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.InOpenSSL(); got != want {
			t.Errorf("%s: InOpenSSL %v, want %v", name, got, want)
		}
	}
}
