package sa

import (
	"fmt"

	"github.com/espgw/espgw/internal/secret"
)

// Cipher is an ESP encryption algorithm.
type Cipher uint8

const (
	CipherNull             Cipher = iota // RFC 2410
	CipherAESCBC                         // RFC 3602, 128/192/256 by key length
	Cipher3DES                           // RFC 2451
	CipherAESCTR                         // RFC 3686, key || 4-byte nonce
	CipherAESGCM16                       // RFC 4106 with a 16-byte ICV, key || 4-byte salt
	CipherAESGCM8                        // RFC 4106 with an 8-byte ICV
	CipherAESGCM12                       // RFC 4106 with a 12-byte ICV
	CipherChaCha20Poly1305               // RFC 7634, 32-byte key || 4-byte salt
	CipherAESGMAC                        // RFC 4543 ENCR_NULL_AUTH_AES_GMAC, key || 4-byte salt
	CipherAESCCM8                        // RFC 4309 with an 8-byte ICV, key || 3-byte salt
	CipherAESCCM12                       // RFC 4309 with a 12-byte ICV, key || 3-byte salt
	CipherAESCCM16                       // RFC 4309 with a 16-byte ICV, key || 3-byte salt
)

var cipherNames = [...]string{
	CipherNull:             "null",
	CipherAESCBC:           "aes-cbc",
	Cipher3DES:             "3des-cbc",
	CipherAESCTR:           "aes-ctr",
	CipherAESGCM16:         "aes-gcm-16",
	CipherAESGCM8:          "aes-gcm-8",
	CipherAESGCM12:         "aes-gcm-12",
	CipherChaCha20Poly1305: "chacha20-poly1305",
	CipherAESGMAC:          "aes-gmac",
	CipherAESCCM8:          "aes-ccm-8",
	CipherAESCCM12:         "aes-ccm-12",
	CipherAESCCM16:         "aes-ccm-16",
}

// CipherList names every cipher, for the errors of the SA formats.
const CipherList = "aes-cbc, 3des-cbc, aes-ctr, aes-gcm-16, aes-gcm-12, aes-gcm-8, chacha20-poly1305, aes-gmac, aes-ccm-8, aes-ccm-12, aes-ccm-16 or null"

func (c Cipher) String() string {
	if int(c) < len(cipherNames) {
		return cipherNames[c]
	}
	return fmt.Sprintf("cipher(%d)", uint8(c))
}

// ParseCipher reads a cipher name as written in SA files.
func ParseCipher(name string) (Cipher, error) {
	for c, n := range cipherNames {
		if n == name {
			return Cipher(c), nil
		}
	}
	return 0, fmt.Errorf("unknown cipher %s (want %s)", secret.Word(name, cipherNames[:]...), CipherList)
}

// IsAEAD reports whether the cipher computes its own ICV (aes-gmac, which
// only authenticates, too).
func (c Cipher) IsAEAD() bool {
	switch c {
	case CipherAESGCM16, CipherAESGCM12, CipherAESGCM8, CipherChaCha20Poly1305, CipherAESGMAC,
		CipherAESCCM8, CipherAESCCM12, CipherAESCCM16:
		return true
	}
	return false
}

// IsGCM reports whether the cipher is AES-GCM (RFC 4106), of any ICV length.
func (c Cipher) IsGCM() bool {
	return c == CipherAESGCM16 || c == CipherAESGCM12 || c == CipherAESGCM8
}

// Encrypts reports whether the cipher hides the payload (not null or
// aes-gmac, which send it in clear).
func (c Cipher) Encrypts() bool { return c != CipherNull && c != CipherAESGMAC }

// SaltLen is the length of the salt or nonce that ends the encryption key
// material and goes into every packet's nonce.
func (c Cipher) SaltLen() int {
	switch c {
	case CipherAESCTR, CipherAESGCM16, CipherAESGCM12, CipherAESGCM8, CipherChaCha20Poly1305, CipherAESGMAC:
		return 4
	case CipherAESCCM8, CipherAESCCM12, CipherAESCCM16:
		return 3
	}
	return 0
}

// Auth is an ESP integrity algorithm.
type Auth uint8

const (
	AuthNone           Auth = iota // only with an AEAD cipher
	AuthHMACSHA1_96                // RFC 2404
	AuthHMACSHA256_128             // RFC 4868
	AuthHMACSHA384_192             // RFC 4868
	AuthHMACSHA512_256             // RFC 4868
	AuthHMACMD5_96                 // RFC 2403
)

var authNames = [...]string{
	AuthNone:           "none",
	AuthHMACSHA1_96:    "hmac-sha1-96",
	AuthHMACSHA256_128: "hmac-sha2-256-128",
	AuthHMACSHA384_192: "hmac-sha2-384-192",
	AuthHMACSHA512_256: "hmac-sha2-512-256",
	AuthHMACMD5_96:     "hmac-md5-96",
}

func (a Auth) String() string {
	if int(a) < len(authNames) {
		return authNames[a]
	}
	return fmt.Sprintf("auth(%d)", uint8(a))
}

// ParseAuth reads an integrity algorithm name as written in SA files.
func ParseAuth(name string) (Auth, error) {
	for a, n := range authNames {
		if n == name {
			return Auth(a), nil
		}
	}
	return 0, fmt.Errorf("unknown auth %s (want hmac-sha1-96, hmac-sha2-256-128, hmac-sha2-384-192, hmac-sha2-512-256, hmac-md5-96 or none)", secret.Word(name, authNames[:]...))
}

// Suite is a cipher and an integrity algorithm used together.
type Suite struct {
	Cipher Cipher
	Auth   Auth
}

func (s Suite) String() string {
	if s.Cipher.IsAEAD() {
		return s.Cipher.String()
	}
	return s.Cipher.String() + "+" + s.Auth.String()
}

// IVLen is the length of the explicit IV carried in each packet.
func (s Suite) IVLen() int {
	switch s.Cipher {
	case CipherAESCBC:
		return 16
	case Cipher3DES, CipherAESCTR, CipherAESGCM16, CipherAESGCM12, CipherAESGCM8, CipherChaCha20Poly1305,
		CipherAESGMAC, CipherAESCCM8, CipherAESCCM12, CipherAESCCM16:
		return 8
	}
	return 0
}

// BlockLen is the alignment the padded payload must reach (at least 4).
func (s Suite) BlockLen() int {
	switch s.Cipher {
	case CipherAESCBC:
		return 16
	case Cipher3DES:
		return 8
	}
	return 4
}

// ICVLen is the length of the integrity check value.
func (s Suite) ICVLen() int {
	switch {
	case s.Cipher == CipherAESGCM16, s.Cipher == CipherChaCha20Poly1305, s.Cipher == CipherAESGMAC,
		s.Cipher == CipherAESCCM16:
		return 16
	case s.Cipher == CipherAESGCM12, s.Cipher == CipherAESCCM12:
		return 12
	case s.Cipher == CipherAESGCM8, s.Cipher == CipherAESCCM8:
		return 8
	case s.Auth == AuthHMACSHA1_96, s.Auth == AuthHMACMD5_96:
		return 12
	case s.Auth == AuthHMACSHA256_128:
		return 16
	case s.Auth == AuthHMACSHA384_192:
		return 24
	case s.Auth == AuthHMACSHA512_256:
		return 32
	}
	return 0
}

// EncKeyLens lists the valid lengths of the encryption key material,
// including any trailing nonce or salt.
func (s Suite) EncKeyLens() []int {
	switch s.Cipher {
	case CipherAESCBC:
		return []int{16, 24, 32}
	case Cipher3DES:
		return []int{24}
	case CipherAESCTR, CipherAESGCM16, CipherAESGCM12, CipherAESGCM8, CipherAESGMAC:
		return []int{20, 28, 36}
	case CipherChaCha20Poly1305:
		return []int{36}
	case CipherAESCCM8, CipherAESCCM12, CipherAESCCM16:
		return []int{19, 27, 35}
	}
	return []int{0}
}

// AuthKeyLen is the required integrity key length (RFC 2404, 4868, 2403).
func (s Suite) AuthKeyLen() int {
	switch s.Auth {
	case AuthHMACSHA1_96:
		return 20
	case AuthHMACSHA256_128:
		return 32
	case AuthHMACSHA384_192:
		return 48
	case AuthHMACSHA512_256:
		return 64
	case AuthHMACMD5_96:
		return 16
	}
	return 0
}

// Validate reports whether the cipher and auth may be combined.
func (s Suite) Validate() error {
	if s.Cipher.IsAEAD() && s.Auth != AuthNone {
		return fmt.Errorf("%s is an AEAD cipher: auth must be none, not %s", s.Cipher, s.Auth)
	}
	if !s.Cipher.IsAEAD() && s.Auth == AuthNone {
		return fmt.Errorf("%s needs an auth algorithm (ESP without integrity is not supported)", s.Cipher)
	}
	return nil
}

// ValidateKeys checks key lengths without ever printing the keys.
func (s Suite) ValidateKeys(enc, auth Key) error {
	if err := s.Validate(); err != nil {
		return err
	}
	ok := false
	for _, n := range s.EncKeyLens() {
		ok = ok || len(enc) == n
	}
	if !ok {
		return fmt.Errorf("enc-key for %s is %d bytes, want %v", s.Cipher, len(enc), s.EncKeyLens())
	}
	if len(auth) != s.AuthKeyLen() {
		return fmt.Errorf("auth-key for %s is %d bytes, want %d", s.Auth, len(auth), s.AuthKeyLen())
	}
	return nil
}
