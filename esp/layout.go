package esp

import (
	"encoding/binary"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/sa"
)

// Layout is where the packets of one SA keep what an engine works on: the
// IV, the payload the cipher runs over, what the ICV covers and the ICV,
// and how the nonce and associated data are built. It is the one place
// that knows ESP's framing on the engine's behalf (offload.Op).
type Layout struct {
	ivLen, icvLen uint8
	saltLen       uint8
	cipher        sa.Cipher
	hmac          bool // the ICV is an HMAC over the packet
	esn           bool
	salt          [4]byte
}

// NewLayout returns the layout of suite's packets. encKey is the SA's
// encryption key material: its trailing salt or nonce (sa.Cipher.SaltLen)
// goes into every nonce. esn says whether the high sequence bits are in
// the ICV; for a cipher-only session (auth none, not an AEAD) there is
// no ICV.
func NewLayout(suite sa.Suite, encKey sa.Key, esn bool) Layout {
	l := Layout{cipher: suite.Cipher, ivLen: uint8(suite.IVLen()), icvLen: uint8(suite.ICVLen()),
		hmac: !suite.Cipher.IsAEAD() && suite.Auth != sa.AuthNone, esn: esn}
	if n := suite.Cipher.SaltLen(); n > 0 && len(encKey) >= n {
		l.saltLen = uint8(n)
		copy(l.salt[:], encKey[len(encKey)-n:])
	}
	return l
}

// MinLen is the shortest packet the layout fits: header, IV and ICV.
func (l *Layout) MinLen() int { return HeaderLen + int(l.ivLen) + int(l.icvLen) }

// Op fills op for the ESP packet pkt — SPI, sequence number, IV, payload,
// padding, pad length, next header, ICV — on session sess. seqHi is the
// high 32 bits of the packet's sequence number. It reports false, and
// leaves op as it was, when pkt is shorter than MinLen.
func (l *Layout) Op(op *offload.Op, sess offload.Session, dir offload.Direction, pkt []byte, seqHi uint32) bool {
	if len(pkt) < l.MinLen() {
		return false
	}
	ivLen, icvLen := int(l.ivLen), int(l.icvLen)
	icvOff := len(pkt) - icvLen
	body := HeaderLen + ivLen
	// Field by field rather than a composite literal: the nonce and AAD
	// arrays count only up to their lengths, so they are not cleared.
	op.Session, op.Dir, op.Buf, op.SeqHi, op.Status = sess, dir, pkt, seqHi, offload.OK
	op.IV = offload.Range{Off: HeaderLen, Len: ivLen}
	op.Cipher = offload.Range{Off: body, Len: icvOff - body}
	op.ICV = offload.Range{Off: icvOff, Len: icvLen}
	switch {
	case l.hmac:
		op.Auth = offload.Range{Len: icvOff}
	case l.cipher == sa.CipherAESGMAC: // RFC 4543 §3.2: the AAD covers the IV and payload too
		op.Auth = offload.Range{Off: HeaderLen, Len: icvOff - HeaderLen}
	default:
		op.Auth = offload.Range{}
	}
	copy(op.AAD[:4], pkt[:4])
	if l.esn {
		binary.BigEndian.PutUint32(op.AAD[4:8], seqHi)
		copy(op.AAD[8:12], pkt[4:8])
		op.AADLen = 12
	} else {
		copy(op.AAD[4:8], pkt[4:8])
		op.AADLen = 8
	}
	iv := pkt[HeaderLen:body]
	switch l.cipher {
	case sa.CipherAESCBC, sa.Cipher3DES:
		op.NonceLen = uint8(copy(op.Nonce[:], iv))
	case sa.CipherAESCTR: // RFC 3686 §4: nonce | IV | block counter from 1
		copy(op.Nonce[:4], l.salt[:4])
		copy(op.Nonce[4:12], iv)
		binary.BigEndian.PutUint32(op.Nonce[12:], 1)
		op.NonceLen = 16
	case sa.CipherNull:
		op.NonceLen = 0
	default: // the AEADs: salt | IV (RFC 4106 §4, RFC 4543 §3.1, RFC 4309 §4, RFC 7634 §2)
		n := int(l.saltLen)
		copy(op.Nonce[:n], l.salt[:n])
		op.NonceLen = uint8(n + copy(op.Nonce[n:], iv))
	}
	return true
}
