package ike

import "crypto/sha1"

// keyPad is the constant of the shared-key AUTH (RFC 7296 §2.15).
const keyPad = "Key Pad for IKEv2"

// idBody is the ID payload's body, RestOfInitIDPayload in RFC 7296 §2.15.
func idBody(id Identity) []byte { return append([]byte{byte(id.Kind), 0, 0, 0}, id.Data...) }

// pskAuth is the AUTH data of a shared key: prf(prf(PSK, "Key Pad for
// IKEv2"), <message> | <peer's nonce> | prf(SK_p, <ID body>)), where the
// message is the sender's own IKE_SA_INIT message as sent.
func pskAuth(p prfAlg, psk, message, peerNonce, skp []byte, id Identity) []byte {
	maced := p.sum(skp, idBody(id))
	return p.sum(p.sum(psk, []byte(keyPad)), message, peerNonce, maced)
}

// natHash is a NAT_DETECTION_*_IP notification's data:
// SHA1(SPIi | SPIr | IP | port) (RFC 7296 §2.23).
func natHash(spii, spir uint64, ip []byte, port uint16) []byte {
	h := sha1.New()
	var b [16]byte
	for i := range 8 {
		b[i] = byte(spii >> (56 - 8*i))
		b[8+i] = byte(spir >> (56 - 8*i))
	}
	h.Write(b[:])
	h.Write(ip)
	h.Write([]byte{byte(port >> 8), byte(port)})
	return h.Sum(nil)
}
