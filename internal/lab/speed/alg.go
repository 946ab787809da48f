package speed

import (
	"fmt"
	"slices"
	"strings"

	"github.com/espgw/espgw/sa"
)

// Alg is one algorithm `espgw speed` can time: a bulk cipher over a buffer
// (as `openssl speed -evp` does) or a whole ESP seal of a packet.
type Alg struct {
	Name   string // as given, lower case: aes-128-cbc, esp:aes-128-cbc+hmac-sha1-96
	Suite  sa.Suite
	KeyLen int  // encryption key bytes, including a CTR nonce or GCM salt
	ESP    bool // a whole ESP seal through esp.Processor
	// CipherOnly: a bulk op is a cipher-only session (no ICV); false for
	// the AEADs (GCM, ChaCha20-Poly1305), whose tag is part of the cipher.
	CipherOnly bool
}

// Label is the row label: openssl's upper-case EVP name for bulk ciphers,
// the name as given for ESP suites.
func (a Alg) Label() string {
	if a.ESP {
		return a.Name
	}
	return strings.ToUpper(a.Name)
}

// InOpenSSL reports whether `openssl speed -evp` has the algorithm: not the
// esp: suites, nor aes-gmac (openssl has GCM's EVP, no bulk GMAC).
func (a Alg) InOpenSSL() bool { return !a.ESP && a.Suite.Cipher != sa.CipherAESGMAC }

// BulkAlgs lists the bulk cipher names ParseAlg knows.
var BulkAlgs = []string{
	"aes-128-cbc", "aes-192-cbc", "aes-256-cbc", "des-ede3-cbc",
	"aes-128-ctr", "aes-192-ctr", "aes-256-ctr",
	"aes-128-gcm", "aes-192-gcm", "aes-256-gcm",
	"chacha20-poly1305",
	"aes-gmac-128", "aes-gmac-192", "aes-gmac-256",
	"aes-128-cbc-hmac-sha1", "aes-256-cbc-hmac-sha1", "aes-128-cbc-hmac-sha256", "aes-256-cbc-hmac-sha256",
}

// parseCBCHMAC reads openssl's names of its stitched AES-CBC with HMAC
// ciphers (aes-128-cbc-hmac-sha1): timed here as an engine op with the
// ESP ICV, HMAC-SHA1-96 or HMAC-SHA256-128 over the ciphertext.
func parseCBCHMAC(name string) (sa.Suite, int, bool) {
	cname, hname, ok := strings.Cut(name, "-hmac-")
	if !ok {
		return sa.Suite{}, 0, false
	}
	c, keyLen, ok := parseCipher(cname)
	if !ok || c != sa.CipherAESCBC {
		return sa.Suite{}, 0, false
	}
	switch hname {
	case "sha1":
		return sa.Suite{Cipher: c, Auth: sa.AuthHMACSHA1_96}, keyLen, true
	case "sha256":
		return sa.Suite{Cipher: c, Auth: sa.AuthHMACSHA256_128}, keyLen, true
	}
	return sa.Suite{}, 0, false
}

// parseCipher reads an openssl-style cipher name (or an espgw one).
func parseCipher(name string) (sa.Cipher, int, bool) {
	switch name {
	case "des-ede3-cbc", "3des-cbc":
		return sa.Cipher3DES, 24, true
	case "null":
		return sa.CipherNull, 0, true
	case "aes-cbc":
		return sa.CipherAESCBC, 16, true
	case "aes-ctr":
		return sa.CipherAESCTR, 20, true
	case "aes-gcm", "aes-gcm-16":
		return sa.CipherAESGCM16, 20, true
	case "chacha20-poly1305":
		return sa.CipherChaCha20Poly1305, 36, true
	case "aes-gmac", "aes-gmac-128":
		return sa.CipherAESGMAC, 20, true
	case "aes-gmac-192":
		return sa.CipherAESGMAC, 28, true
	case "aes-gmac-256":
		return sa.CipherAESGMAC, 36, true
	case "aes-ccm-8", "aes-ccm-8-128":
		return sa.CipherAESCCM8, 19, true
	case "aes-ccm-12", "aes-ccm-12-128":
		return sa.CipherAESCCM12, 19, true
	case "aes-ccm-16", "aes-ccm-16-128":
		return sa.CipherAESCCM16, 19, true
	}
	var bits int
	var mode string
	if _, err := fmt.Sscanf(strings.ReplaceAll(name, "-", " "), "aes %d %s", &bits, &mode); err != nil || (bits != 128 && bits != 192 && bits != 256) {
		return 0, 0, false
	}
	if name != fmt.Sprintf("aes-%d-%s", bits, mode) {
		return 0, 0, false
	}
	switch mode {
	case "cbc":
		return sa.CipherAESCBC, bits / 8, true
	case "ctr":
		return sa.CipherAESCTR, bits/8 + 4, true
	case "gcm":
		return sa.CipherAESGCM16, bits/8 + 4, true
	}
	return 0, 0, false
}

// ParseAlg reads a bulk cipher name (aes-128-cbc, des-ede3-cbc, aes-128-gcm,
// aes-128-ctr, …) or esp:CIPHER+AUTH (esp:aes-128-cbc+hmac-sha1-96,
// esp:aes-128-gcm).
func ParseAlg(name string) (Alg, error) {
	name = strings.ToLower(name)
	if rest, ok := strings.CutPrefix(name, "esp:"); ok {
		cname, aname, hasAuth := strings.Cut(rest, "+")
		c, keyLen, ok := parseCipher(cname)
		if !ok {
			return Alg{}, fmt.Errorf("algorithm %q: unknown cipher %q (want aes-128-cbc, aes-256-cbc, des-ede3-cbc, aes-128-ctr, aes-128-gcm, null, …)", name, cname)
		}
		auth := sa.AuthNone
		if hasAuth {
			a, err := sa.ParseAuth(aname)
			if err != nil {
				return Alg{}, fmt.Errorf("algorithm %q: %w", name, err)
			}
			auth = a
		}
		suite := sa.Suite{Cipher: c, Auth: auth}
		if err := suite.Validate(); err != nil {
			return Alg{}, fmt.Errorf("algorithm %q: %w", name, err)
		}
		return Alg{Name: name, Suite: suite, KeyLen: keyLen, ESP: true}, nil
	}
	if suite, keyLen, ok := parseCBCHMAC(name); ok && slices.Contains(BulkAlgs, name) {
		return Alg{Name: name, Suite: suite, KeyLen: keyLen}, nil
	}
	c, keyLen, ok := parseCipher(name)
	if !ok || !slices.Contains(BulkAlgs, name) {
		return Alg{}, fmt.Errorf("unknown algorithm %q (want one of %s, or esp:CIPHER+AUTH such as esp:aes-128-cbc+hmac-sha1-96)", name, strings.Join(BulkAlgs, ", "))
	}
	return Alg{Name: name, Suite: sa.Suite{Cipher: c}, KeyLen: keyLen, CipherOnly: !c.IsAEAD()}, nil
}
