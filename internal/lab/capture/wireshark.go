package capture

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/espgw/espgw/sa"
)

// Wireshark's names for the algorithms in its esp_sa table (ESP
// preferences, "ESP SAs"), as Wireshark 4.0 spells them.
var (
	wiresharkCipher = map[sa.Cipher]string{
		sa.CipherNull:     "NULL",
		sa.CipherAESCBC:   "AES-CBC [RFC3602]",
		sa.Cipher3DES:     "TripleDES-CBC [RFC2451]",
		sa.CipherAESCTR:   "AES-CTR [RFC3686]",
		sa.CipherAESGCM16: "AES-GCM with 16 octet ICV [RFC4106]",
	}
	wiresharkAuth = map[sa.Auth]string{
		sa.AuthNone:           "NULL",
		sa.AuthHMACSHA1_96:    "HMAC-SHA-1-96 [RFC2404]",
		sa.AuthHMACSHA256_128: "HMAC-SHA-256-128 [RFC4868]",
		sa.AuthHMACSHA384_192: "HMAC-SHA-384-192 [RFC4868]",
		sa.AuthHMACSHA512_256: "HMAC-SHA-512-256 [RFC4868]",
		sa.AuthHMACMD5_96:     "HMAC-MD5-96 [RFC2403]",
	}
)

// WiresharkSA returns the SA as a line of Wireshark's esp_sa table: the
// content of the esp_sa file in a Wireshark profile, or the value of
// tshark's -o uat:esp_sa:… option. The line holds the keys in clear: it is
// written only where the user asks for it.
func WiresharkSA(s *sa.SA) (string, error) {
	enc, ok := wiresharkCipher[s.Suite.Cipher]
	auth, ok2 := wiresharkAuth[s.Suite.Auth]
	if !ok || !ok2 {
		return "", fmt.Errorf("SA %#x: Wireshark has no name for %s", s.SPI, s.Suite)
	}
	family := "IPv4"
	if s.Src.Is6() && !s.Src.Is4In6() {
		family = "IPv6"
	}
	quote := func(v string) string { return `"` + v + `"` }
	fields := []string{
		quote(family), quote(s.Src.String()), quote(s.Dst.String()),
		quote(fmt.Sprintf("0x%08x", s.SPI)),
		quote(enc), quote(hexKey(s.EncKey)),
		quote(auth), quote(hexKey(s.AuthKey)),
	}
	return strings.Join(fields, ","), nil
}

func hexKey(k sa.Key) string {
	if len(k) == 0 {
		return ""
	}
	return "0x" + hex.EncodeToString(k)
}

// WiresharkSAFile returns the esp_sa lines for every SA, one per line.
func WiresharkSAFile(sas []*sa.SA) ([]byte, error) {
	var b strings.Builder
	for _, s := range sas {
		line, err := WiresharkSA(s)
		if err != nil {
			return nil, err
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return []byte(b.String()), nil
}
