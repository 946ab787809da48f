package sa

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// MarshalJSON hides the key from encoding/json (and so from slog's JSON
// handler when an SA is logged as a plain struct).
func (k Key) MarshalJSON() ([]byte, error) { return []byte(`"` + k.String() + `"`), nil }

// MarshalText hides the key from every text encoder (YAML, slog's text handler).
// SA files are written by Marshal, which writes keys on purpose.
func (k Key) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// ParseKeyHex reads a key written in hex, with or without a 0x prefix.
// Leading zero bytes are kept. Errors never contain the text.
func ParseKeyHex(s string) (Key, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		s = s[2:]
	}
	if s == "" {
		return nil, errors.New("empty key")
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return nil, fmt.Errorf("not hexadecimal (character %d of the key)", i+1)
		}
	}
	if len(s)%2 != 0 {
		return nil, fmt.Errorf("odd number of hex digits (%d)", len(s))
	}
	k := make(Key, len(s)/2)
	if _, err := hex.Decode(k, []byte(s)); err != nil {
		// Unreachable after the checks above; the message is ours, not hex's,
		// because hex.InvalidByteError would print a key character.
		return nil, errors.New("not hexadecimal")
	}
	return k, nil
}

// hexKey is how Marshal writes a key: 0x and lower-case hex.
func hexKey(k Key) string { return "0x" + hex.EncodeToString(k) }

// RandomKey returns n bytes from crypto/rand.
func RandomKey(n int) (Key, error) {
	k := make(Key, n)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("generate %d-byte key: %w", n, err)
	}
	return k, nil
}

// RandomKeys returns fresh keys of the right lengths for the suite. aesBits
// (128, 192 or 256; 0 means 128) picks the AES key size for the AES ciphers;
// the nonce or salt of aes-ctr, aes-gcm-16, chacha20-poly1305, aes-gmac
// and aes-ccm is included.
func RandomKeys(s Suite, aesBits int) (enc, auth Key, err error) {
	n, err := encKeyLen(s.Cipher, aesBits)
	if err != nil {
		return nil, nil, err
	}
	if enc, err = RandomKey(n); err != nil {
		return nil, nil, err
	}
	if auth, err = RandomKey(s.AuthKeyLen()); err != nil {
		return nil, nil, err
	}
	return enc, auth, nil
}

// encKeyLen is the length of the encryption key material for an AES key of
// aesBits bits (ignored for the other ciphers).
func encKeyLen(c Cipher, aesBits int) (int, error) {
	extra := 0
	switch c {
	case CipherNull:
		return 0, nil
	case Cipher3DES:
		return 24, nil
	case CipherChaCha20Poly1305:
		return 36, nil
	case CipherAESCTR, CipherAESGCM16, CipherAESGCM12, CipherAESGCM8, CipherAESGMAC, CipherAESCCM8, CipherAESCCM12, CipherAESCCM16:
		extra = c.SaltLen()
	case CipherAESCBC:
	default:
		return 0, fmt.Errorf("unknown cipher %s", c)
	}
	switch aesBits {
	case 0, 128, 192, 256:
		return max(aesBits, 128)/8 + extra, nil
	}
	return 0, fmt.Errorf("AES key size %d bits, want 128, 192 or 256", aesBits)
}
