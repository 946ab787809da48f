package afalg

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/espgw/espgw/offload/afalg/internal/kcapi"
	"github.com/espgw/espgw/sa"
)

func guestAlgs(t *testing.T) kcapi.Algs {
	t.Helper()
	f, err := os.Open("internal/kcapi/testdata/proc_crypto_guest.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	algs, err := kcapi.ParseAlgs(f)
	if err != nil {
		t.Fatal(err)
	}
	return algs
}

var (
	cbcSHA1   = sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}
	cbcSHA512 = sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA512_256}
	desMD5    = sa.Suite{Cipher: sa.Cipher3DES, Auth: sa.AuthHMACMD5_96}
	ctrSHA256 = sa.Suite{Cipher: sa.CipherAESCTR, Auth: sa.AuthHMACSHA256_128}
	nullSHA1  = sa.Suite{Cipher: sa.CipherNull, Auth: sa.AuthHMACSHA1_96}
	gcm       = sa.Suite{Cipher: sa.CipherAESGCM16}
)

// TestPlan: the names a session binds to, as the kernel's own ESP asks
// for them, and with a driver the full driver names a template needs.
func TestPlan(t *testing.T) {
	algs := guestAlgs(t)
	for _, tt := range []struct {
		suite      sa.Suite
		esn, only  bool
		driver     string
		kind, bind string
	}{
		{cbcSHA1, false, false, "", kcapi.AEAD, "authenc(hmac(sha1),cbc(aes))"},
		{cbcSHA1, true, false, "", kcapi.AEAD, "authencesn(hmac(sha1),cbc(aes))"},
		{desMD5, false, false, "", kcapi.AEAD, "authenc(hmac(md5),cbc(des3_ede))"},
		{ctrSHA256, false, false, "", kcapi.AEAD, "authenc(hmac(sha256),rfc3686(ctr(aes)))"},
		{nullSHA1, false, false, "", kcapi.AEAD, "authenc(hmac(sha1),ecb(cipher_null))"},
		{gcm, false, false, "", kcapi.AEAD, "rfc4106(gcm(aes))"},
		{gcm, true, false, "", kcapi.AEAD, "rfc4106(gcm(aes))"},
		{sa.Suite{Cipher: sa.CipherChaCha20Poly1305}, true, false, "", kcapi.AEAD, "rfc7539esp(chacha20,poly1305)"},
		{sa.Suite{Cipher: sa.CipherAESGMAC}, false, false, "", kcapi.AEAD, "rfc4543(gcm(aes))"},
		{sa.Suite{Cipher: sa.CipherAESCCM8}, true, false, "", kcapi.AEAD, "rfc4309(ccm(aes))"},
		{sa.Suite{Cipher: sa.CipherAESCCM16}, false, false, "", kcapi.AEAD, "rfc4309(ccm(aes))"},
		{sa.Suite{Cipher: sa.CipherAESCBC}, false, true, "", kcapi.SKCipher, "cbc(aes)"},
		{sa.Suite{Cipher: sa.CipherAESCTR}, false, true, "", kcapi.SKCipher, "rfc3686(ctr(aes))"},
		{cbcSHA1, false, false, "virtio_crypto_aes_cbc", kcapi.AEAD, "authenc(hmac(sha1-generic),virtio_crypto_aes_cbc)"},
		{cbcSHA512, true, false, "virtio_crypto_aes_cbc", kcapi.AEAD, "authencesn(hmac(sha512-generic),virtio_crypto_aes_cbc)"},
		{sa.Suite{Cipher: sa.CipherAESCBC}, false, true, "virtio_crypto_aes_cbc", kcapi.SKCipher, "virtio_crypto_aes_cbc"},
		{cbcSHA1, false, false, "cbc(aes-generic)", kcapi.AEAD, "authenc(hmac(sha1-generic),cbc(aes-generic))"},
		{ctrSHA256, false, false, "ctr(aes-generic)", kcapi.AEAD, "authenc(hmac(sha256-generic),rfc3686(ctr(aes-generic)))"},
	} {
		p, err := planFor(tt.suite, tt.esn, tt.only, tt.driver, algs)
		if err != nil {
			t.Errorf("%s esn=%v driver %q: %v", tt.suite, tt.esn, tt.driver, err)
			continue
		}
		if p.kind != tt.kind || p.bind != tt.bind {
			t.Errorf("%s esn=%v driver %q: %s %s, want %s %s", tt.suite, tt.esn, tt.driver, p.kind, p.bind, tt.kind, tt.bind)
		}
	}
}

// TestPlanRefuses: a suite the driver cannot do is an error that names
// the driver, what /proc/crypto lists it as, and who offers the cipher.
func TestPlanRefuses(t *testing.T) {
	algs := guestAlgs(t)
	for _, tt := range []struct {
		suite  sa.Suite
		driver string
		want   []string
	}{
		{desMD5, "virtio_crypto_aes_cbc", []string{"driver virtio_crypto_aes_cbc cannot do 3des-cbc+hmac-md5-96", "lists it as cbc(aes) (skcipher, module virtio_crypto)", "needs cbc(des3_ede)", "des3_ede: des3_ede-generic (des_generic, priority 100)"}},
		{gcm, "virtio_crypto_aes_cbc", []string{"cannot do aes-gcm-16", "rfc4106(gcm(aes))"}},
		{cbcSHA1, "qat_aes_cbc", []string{`no driver "qat_aes_cbc"`, "cbc(aes) is offered by: virtio_crypto_aes_cbc (virtio_crypto, priority 150); cbc(aes-generic) (kernel, priority 100)"}},
	} {
		_, err := planFor(tt.suite, false, false, tt.driver, algs)
		if err == nil {
			t.Errorf("%s on %s: no error", tt.suite, tt.driver)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s on %s: error %q lacks %q", tt.suite, tt.driver, err, w)
			}
		}
	}
}

func TestLeavesAndModules(t *testing.T) {
	algs := guestAlgs(t)
	for _, tt := range []struct{ driver, want string }{
		{"authenc(hmac(sha1-generic),virtio_crypto_aes_cbc)", "sha1-generic: kernel, virtio_crypto_aes_cbc: virtio_crypto"},
		{"cbc(aes-generic)", "aes-generic: kernel"},
		{"virtio_crypto_aes_cbc", "virtio_crypto_aes_cbc: virtio_crypto"},
		{"rfc4106(gcm_base(ctr(aes-generic),ghash-generic))", "aes-generic: kernel, ghash-generic: ghash_generic"},
	} {
		if got := describe(tt.driver, algs); got != tt.want {
			t.Errorf("describe(%s) = %q, want %q", tt.driver, got, tt.want)
		}
	}
	for in, want := range map[string]string{"rfc3686(ctr(aes))": "aes", "cbc(des3_ede)": "des3_ede", "aes": "aes", "rfc4106(gcm(aes))": "aes"} {
		if got := innermost(in); got != want {
			t.Errorf("innermost(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestKernelNote: from Linux 7.2 on espgw says that AF_ALG cannot reach
// hardware.
func TestKernelNote(t *testing.T) {
	for rel, want := range map[string]bool{
		"6.1.0-57-amd64": false, "7.1.9": false, "7.2.0": true, "7.10.1-arch1": true, "8.0": true, "garbage": false,
	} {
		if got := kernelNote(rel) != ""; got != want {
			t.Errorf("kernelNote(%q) said %v, want %v", rel, got, want)
		}
	}
	if n := kernelNote("7.2.0"); !strings.Contains(n, "7.2") || !strings.Contains(n, "hardware") {
		t.Errorf("note %q", n)
	}
}

// TestNoAFALG: on a kernel without AF_ALG (this project's build machine)
// the engine is a clear error, never a panic.
func TestNoAFALG(t *testing.T) {
	if kcapi.Probe() == nil {
		t.Skip("this kernel has AF_ALG; the guest tests cover the engine")
	}
	_, err := New(Options{})
	if err == nil || !errors.Is(err, ErrNoAFALG) || !strings.HasPrefix(err.Error(), "afalg: this kernel has no AF_ALG (") {
		t.Fatalf("New on a kernel without AF_ALG: %v", err)
	}
	if _, err := New(Options{Driver: "virtio_crypto_aes_cbc"}); !errors.Is(err, ErrNoAFALG) {
		t.Fatalf("New with a driver: %v", err)
	}
}
