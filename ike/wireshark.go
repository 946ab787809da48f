package ike

import (
	"encoding/hex"
	"fmt"
)

// WiresharkLine is the IKE SA as one line of Wireshark's
// ikev2_decryption_table (the file of a Wireshark profile, or tshark's
// -o "uat:ikev2_decryption_table:…"): SPIs, SK_ei, SK_er, the cipher,
// SK_ai, SK_ar and the integrity algorithm, keys in clear (bytes as bare
// hex, names quoted, as Wireshark writes the table).
func (s *IKESA) WiresharkLine() (string, error) {
	var encr, integ string
	switch {
	case s.suite.encr.id == EncrAESCBC:
		encr = fmt.Sprintf("AES-CBC-%d [RFC3602]", s.suite.encr.keyLen*8)
	case s.suite.encr.id == EncrAESGCM16:
		encr = fmt.Sprintf("AES-GCM-%d with 16 octet ICV [RFC5282]", (s.suite.encr.keyLen-4)*8)
	default:
		return "", fmt.Errorf("%s: Wireshark's table has no name for encryption %s", s, transformName(TransformENCR, s.suite.encr.id))
	}
	switch s.suite.integ.keyLen {
	case 0:
		integ = "NONE [RFC4306]"
	case 20:
		integ = "HMAC_SHA1_96 [RFC2404]"
	case 32:
		integ = "HMAC_SHA2_256_128 [RFC4868]"
	case 48:
		integ = "HMAC_SHA2_384_192 [RFC4868]"
	case 64:
		integ = "HMAC_SHA2_512_256 [RFC4868]"
	default:
		return "", fmt.Errorf("%s: Wireshark's table has no name for its integrity algorithm", s)
	}
	x := hex.EncodeToString
	return fmt.Sprintf("%016x,%016x,%s,%s,\"%s\",%s,%s,\"%s\"", s.spii, s.spir,
		x(s.keys.ei), x(s.keys.er), encr, x(s.keys.ai), x(s.keys.ar), integ), nil
}
