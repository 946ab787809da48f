package testbed

import (
	"testing"

	"github.com/espgw/espgw/sa"
)

// Every suite name the CLI takes reads to its suite and key size and is
// written back the same.
func TestSuiteNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    sa.Suite
		bits int
	}{
		{"aes-cbc-256+hmac-sha2-256-128", sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}, 256},
		{"aes-gcm-16-128", sa.Suite{Cipher: sa.CipherAESGCM16}, 128},
		{"chacha20-poly1305", sa.Suite{Cipher: sa.CipherChaCha20Poly1305}, 128},
		{"aes-gmac-192", sa.Suite{Cipher: sa.CipherAESGMAC}, 192},
		{"aes-ccm-8-256", sa.Suite{Cipher: sa.CipherAESCCM8}, 256},
		{"aes-ccm-12-128", sa.Suite{Cipher: sa.CipherAESCCM12}, 128},
		{"aes-ccm-16-192", sa.Suite{Cipher: sa.CipherAESCCM16}, 192},
	} {
		s, bits, err := ParseSuite(tc.name)
		if err != nil || s != tc.s || bits != tc.bits {
			t.Errorf("ParseSuite(%s) = %s, %d, %v", tc.name, s, bits, err)
			continue
		}
		if got := SuiteName(s, bits); got != tc.name {
			t.Errorf("SuiteName(%s, %d) = %s, want %s", s, bits, got, tc.name)
		}
	}
	if _, _, err := ParseSuite("chacha20-poly1305+hmac-sha1-96"); err == nil {
		t.Error("chacha20-poly1305 with an HMAC: no error")
	}
}
