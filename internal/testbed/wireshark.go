package testbed

import (
	"encoding/hex"
	"fmt"

	"github.com/espgw/espgw/sa"
)

// EspSALine is an SA as a line of Wireshark's esp_sa table (the value of
// tshark's -o uat:esp_sa: option). It holds the keys in clear.
func EspSALine(s *sa.SA) string {
	family := "IPv4"
	if s.Src.Is6() {
		family = "IPv6"
	}
	enc := map[sa.Cipher]string{
		sa.CipherNull: "NULL", sa.CipherAESCBC: "AES-CBC [RFC3602]", sa.Cipher3DES: "TripleDES-CBC [RFC2451]",
		sa.CipherAESCTR: "AES-CTR [RFC3686]", sa.CipherAESGCM16: "AES-GCM with 16 octet ICV [RFC4106]",
	}[s.Suite.Cipher]
	auth := map[sa.Auth]string{
		sa.AuthNone: "NULL", sa.AuthHMACSHA1_96: "HMAC-SHA-1-96 [RFC2404]", sa.AuthHMACSHA256_128: "HMAC-SHA-256-128 [RFC4868]",
		sa.AuthHMACSHA384_192: "HMAC-SHA-384-192 [RFC4868]", sa.AuthHMACSHA512_256: "HMAC-SHA-512-256 [RFC4868]",
		sa.AuthHMACMD5_96: "HMAC-MD5-96 [RFC2403]",
	}[s.Suite.Auth]
	return fmt.Sprintf(`"%s","%s","%s","0x%08x","%s","0x%s","%s","0x%s"`, family, s.Src, s.Dst, s.SPI,
		enc, hex.EncodeToString(s.EncKey), auth, hex.EncodeToString(s.AuthKey))
}
