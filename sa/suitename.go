package sa

import (
	"strconv"
	"strings"
)

// NameWithBits is the suite's name with the AES key size in bits after the
// cipher, as the lab's suite flags and the gateway's metrics write it:
// aes-cbc-256+hmac-sha2-256-128, aes-gcm-16-128, 3des-cbc+hmac-sha1-96.
func (s Suite) NameWithBits(bits int) string {
	name := s.Cipher.String()
	if strings.HasPrefix(name, "aes-") {
		name += "-" + strconv.Itoa(bits)
	}
	if !s.Cipher.IsAEAD() {
		name += "+" + s.Auth.String()
	}
	return name
}

// KeyBits is the size in bits of the SA's AES key (its encryption key
// without the salt or nonce that follows it), 0 for other ciphers.
func (s *SA) KeyBits() int {
	if !strings.HasPrefix(s.Suite.Cipher.String(), "aes-") {
		return 0
	}
	salt := s.Suite.EncKeyLens()[0] - 16
	return (len(s.EncKey) - salt) * 8
}
