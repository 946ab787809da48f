package esp_test

import (
	"bytes"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// TestLayoutEverySuite: for every suite, with ESN off and on, the op's
// ranges, nonce and AAD are where RFC 4303 and the suite's RFC put them.
func TestLayoutEverySuite(t *testing.T) {
	const payload = 48 // whole blocks of every cipher
	for _, suite := range cpu.AllSuites() {
		for _, esn := range []bool{false, true} {
			ivLen, icvLen := suite.IVLen(), suite.ICVLen()
			key := make(sa.Key, suite.EncKeyLens()[0])
			for i := range key {
				key[i] = byte(0xa0 + i)
			}
			pkt := make([]byte, esp.HeaderLen+ivLen+payload+icvLen)
			for i := range pkt {
				pkt[i] = byte(i)
			}
			layout := esp.NewLayout(suite, key, esn)
			var op offload.Op
			if !layout.Op(&op, nil, offload.Seal, pkt, 0x01020304) {
				t.Fatalf("%s: a %d-byte packet does not fit", suite, len(pkt))
			}
			icvOff := len(pkt) - icvLen
			want := offload.Op{
				Dir: offload.Seal, Buf: pkt, SeqHi: 0x01020304,
				IV:     offload.Range{Off: 8, Len: ivLen},
				Cipher: offload.Range{Off: 8 + ivLen, Len: payload},
				ICV:    offload.Range{Off: icvOff, Len: icvLen},
			}
			switch {
			case suite.Cipher == sa.CipherAESGMAC: // RFC 4543 §3.2: IV and payload in the AAD
				want.Auth = offload.Range{Off: 8, Len: icvOff - 8}
			case !suite.Cipher.IsAEAD(): // RFC 4303 §2.8: the ICV covers SPI to next header
				want.Auth = offload.Range{Len: icvOff}
			}
			// AAD: SPI | [seq high] | seq low (RFC 4106 §5).
			aad := append([]byte(nil), pkt[:4]...)
			if esn {
				aad = append(aad, 1, 2, 3, 4)
			}
			aad = append(aad, pkt[4:8]...)
			want.AADLen = uint8(copy(want.AAD[:], aad))
			iv := pkt[8 : 8+ivLen]
			salt := key[len(key)-suite.Cipher.SaltLen():]
			var nonce []byte
			switch suite.Cipher {
			case sa.CipherAESCBC, sa.Cipher3DES:
				nonce = iv
			case sa.CipherAESCTR: // RFC 3686 §4: nonce | IV | counter 1
				nonce = append(append(append([]byte(nil), salt...), iv...), 0, 0, 0, 1)
			case sa.CipherNull:
			default: // salt | IV: 12 bytes, 11 for CCM (RFC 4309 §4)
				nonce = append(append([]byte(nil), salt...), iv...)
			}
			want.NonceLen = uint8(copy(want.Nonce[:], nonce))
			if op.IV != want.IV || op.Cipher != want.Cipher || op.Auth != want.Auth || op.ICV != want.ICV {
				t.Errorf("%s esn=%v: ranges IV %v Cipher %v Auth %v ICV %v, want %v %v %v %v", suite, esn,
					op.IV, op.Cipher, op.Auth, op.ICV, want.IV, want.Cipher, want.Auth, want.ICV)
			}
			if !bytes.Equal(op.NonceBytes(), want.NonceBytes()) || !bytes.Equal(op.AADBytes(), want.AADBytes()) {
				t.Errorf("%s esn=%v: nonce %x AAD %x, want %x %x", suite, esn, op.NonceBytes(), op.AADBytes(), want.NonceBytes(), want.AADBytes())
			}
			if op.SeqHi != want.SeqHi || op.Dir != want.Dir || !op.Fits() {
				t.Errorf("%s esn=%v: op %+v", suite, esn, op)
			}
		}
	}
}

// TestLayoutTooShort: a packet shorter than header, IV and ICV is not laid
// out, and the op is left as it was.
func TestLayoutTooShort(t *testing.T) {
	suite := sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}
	layout := esp.NewLayout(suite, nil, false)
	if got := layout.MinLen(); got != 8+16+16 {
		t.Fatalf("MinLen %d, want 40", got)
	}
	op := offload.Op{SeqHi: 7}
	if layout.Op(&op, nil, offload.Open, make([]byte, layout.MinLen()-1), 0) || op.SeqHi != 7 || op.Buf != nil {
		t.Fatalf("a 39-byte packet was laid out: %+v", op)
	}
}
