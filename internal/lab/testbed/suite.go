package testbed

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/espgw/espgw/sa"
)

// ParseSuite reads a suite as the CLI writes it: CIPHER[-BITS][+AUTH], e.g.
// aes-cbc-128+hmac-sha1-96, aes-cbc-256+hmac-sha2-256-128, 3des-cbc+hmac-sha1-96,
// aes-ctr+hmac-sha1-96, aes-gcm-16, aes-gcm-16-256, chacha20-poly1305,
// aes-gmac-192, aes-ccm-8-256. BITS picks the AES key size (default 128).
func ParseSuite(s string) (sa.Suite, int, error) {
	encName, authName, hasAuth := strings.Cut(s, "+")
	bits := 128
	for _, b := range []int{128, 192, 256} {
		suffix := "-" + strconv.Itoa(b)
		if strings.HasPrefix(encName, "aes-") && strings.HasSuffix(encName, suffix) {
			bits, encName = b, strings.TrimSuffix(encName, suffix)
		}
	}
	// A part that does not parse is named by sa's error (which shows it
	// only if it is evidently a misspelt name); the whole is shown only
	// once both parts are known names.
	c, err := sa.ParseCipher(encName)
	if err != nil {
		return sa.Suite{}, 0, fmt.Errorf("suite: %w", err)
	}
	suite := sa.Suite{Cipher: c}
	if hasAuth {
		if suite.Auth, err = sa.ParseAuth(authName); err != nil {
			return sa.Suite{}, 0, fmt.Errorf("suite: %w", err)
		}
	} else if !c.IsAEAD() {
		suite.Auth = sa.AuthHMACSHA1_96
	}
	if err := suite.Validate(); err != nil {
		return sa.Suite{}, 0, fmt.Errorf("suite %q: %w", s, err)
	}
	return suite, bits, nil
}

// SuiteName writes a suite back in ParseSuite's form.
func SuiteName(s sa.Suite, bits int) string { return s.NameWithBits(bits) }
