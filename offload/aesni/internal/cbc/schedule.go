package cbc

import (
	"crypto/aes"
	"encoding/binary"
	"fmt"
)

// BlockSize is the AES block size in bytes.
const BlockSize = 16

// maxRounds is the round count of AES-256; the schedules hold maxRounds+1
// round keys.
const maxRounds = 14

// Key is one AES key expanded for CBC: the encryption schedule for AESENC and
// the decryption schedule of the Equivalent Inverse Cipher (FIPS 197 §5.3.5,
// the round keys passed through InvMixColumns, as AESIMC would) for AESDEC.
// Build it once per SA and share it between goroutines: CBC calls only read it.
//
// The assembly reads enc at offset 0 of the struct; keep it first.
type Key struct {
	enc [(maxRounds + 1) * BlockSize]byte
	dec [(maxRounds + 1) * BlockSize]byte
	// enc2 is enc with every round key twice, the schedule of a YMM
	// register holding two lanes under this key (encryptLanesVAES).
	enc2   [(maxRounds + 1) * 2 * BlockSize]byte
	rounds int
	// block is the standard library's cipher for the same key, the engine of
	// the pure-Go fallback.
	block interface {
		Encrypt(dst, src []byte)
		Decrypt(dst, src []byte)
	}
}

// NewKey expands a 16-, 24- or 32-byte AES key.
func NewKey(key []byte) (*Key, error) {
	k := new(Key)
	if err := k.Init(key); err != nil {
		return nil, err
	}
	return k, nil
}

// Init expands key into k, replacing what k held before.
func (k *Key) Init(key []byte) error {
	switch len(key) {
	case 16, 24, 32:
	default:
		return fmt.Errorf("expand AES key: %d bytes, want 16, 24 or 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return fmt.Errorf("expand AES key: %w", err)
	}
	*k = Key{block: block}
	k.rounds = expandEncrypt(&k.enc, key)
	expandDecrypt(&k.dec, &k.enc, k.rounds)
	for r := 0; r <= k.rounds; r++ {
		rk := k.enc[r*BlockSize : (r+1)*BlockSize]
		copy(k.enc2[2*r*BlockSize:], rk)
		copy(k.enc2[(2*r+1)*BlockSize:], rk)
	}
	return nil
}

// Rounds is the number of AES rounds: 10, 12 or 14.
func (k *Key) Rounds() int { return k.rounds }

// expandEncrypt is the key expansion of FIPS 197 §5.2. It writes the round
// keys as bytes in the order AESENC takes them and returns the round count.
func expandEncrypt(enc *[(maxRounds + 1) * BlockSize]byte, key []byte) int {
	nk := len(key) / 4
	rounds := nk + 6
	var w [4 * (maxRounds + 1)]uint32
	for i := 0; i < nk; i++ {
		w[i] = binary.BigEndian.Uint32(key[4*i:])
	}
	rcon := uint32(1)
	for i := nk; i < 4*(rounds+1); i++ {
		t := w[i-1]
		switch {
		case i%nk == 0:
			t = subWord(t<<8|t>>24) ^ rcon<<24
			rcon = uint32(xtime(byte(rcon)))
		case nk > 6 && i%nk == 4:
			t = subWord(t)
		}
		w[i] = w[i-nk] ^ t
	}
	for i := 0; i < 4*(rounds+1); i++ {
		binary.BigEndian.PutUint32(enc[4*i:], w[i])
	}
	return rounds
}

// expandDecrypt builds the AESDEC schedule: the encryption round keys in
// reverse order, the inner ones through InvMixColumns.
func expandDecrypt(dec, enc *[(maxRounds + 1) * BlockSize]byte, rounds int) {
	copy(dec[0:BlockSize], enc[rounds*BlockSize:])
	for i := 1; i < rounds; i++ {
		rk := enc[(rounds-i)*BlockSize : (rounds-i+1)*BlockSize]
		out := dec[i*BlockSize : (i+1)*BlockSize]
		for c := 0; c < 4; c++ {
			a0, a1, a2, a3 := rk[4*c], rk[4*c+1], rk[4*c+2], rk[4*c+3]
			out[4*c] = gmul(a0, 14) ^ gmul(a1, 11) ^ gmul(a2, 13) ^ gmul(a3, 9)
			out[4*c+1] = gmul(a0, 9) ^ gmul(a1, 14) ^ gmul(a2, 11) ^ gmul(a3, 13)
			out[4*c+2] = gmul(a0, 13) ^ gmul(a1, 9) ^ gmul(a2, 14) ^ gmul(a3, 11)
			out[4*c+3] = gmul(a0, 11) ^ gmul(a1, 13) ^ gmul(a2, 9) ^ gmul(a3, 14)
		}
	}
	copy(dec[rounds*BlockSize:(rounds+1)*BlockSize], enc[0:BlockSize])
}

func subWord(w uint32) uint32 {
	return uint32(sbox[w>>24])<<24 | uint32(sbox[w>>16&0xff])<<16 |
		uint32(sbox[w>>8&0xff])<<8 | uint32(sbox[w&0xff])
}

// xtime multiplies by x in GF(2^8) modulo the AES polynomial.
func xtime(b byte) byte {
	if b&0x80 != 0 {
		return b<<1 ^ 0x1b
	}
	return b << 1
}

// gmul multiplies a by b in GF(2^8).
func gmul(a, b byte) byte {
	var p byte
	for ; b != 0; b >>= 1 {
		if b&1 != 0 {
			p ^= a
		}
		a = xtime(a)
	}
	return p
}

// sbox is the AES S-box (FIPS 197 Figure 7).
var sbox = [256]byte{
	0x63, 0x7c, 0x77, 0x7b, 0xf2, 0x6b, 0x6f, 0xc5, 0x30, 0x01, 0x67, 0x2b, 0xfe, 0xd7, 0xab, 0x76,
	0xca, 0x82, 0xc9, 0x7d, 0xfa, 0x59, 0x47, 0xf0, 0xad, 0xd4, 0xa2, 0xaf, 0x9c, 0xa4, 0x72, 0xc0,
	0xb7, 0xfd, 0x93, 0x26, 0x36, 0x3f, 0xf7, 0xcc, 0x34, 0xa5, 0xe5, 0xf1, 0x71, 0xd8, 0x31, 0x15,
	0x04, 0xc7, 0x23, 0xc3, 0x18, 0x96, 0x05, 0x9a, 0x07, 0x12, 0x80, 0xe2, 0xeb, 0x27, 0xb2, 0x75,
	0x09, 0x83, 0x2c, 0x1a, 0x1b, 0x6e, 0x5a, 0xa0, 0x52, 0x3b, 0xd6, 0xb3, 0x29, 0xe3, 0x2f, 0x84,
	0x53, 0xd1, 0x00, 0xed, 0x20, 0xfc, 0xb1, 0x5b, 0x6a, 0xcb, 0xbe, 0x39, 0x4a, 0x4c, 0x58, 0xcf,
	0xd0, 0xef, 0xaa, 0xfb, 0x43, 0x4d, 0x33, 0x85, 0x45, 0xf9, 0x02, 0x7f, 0x50, 0x3c, 0x9f, 0xa8,
	0x51, 0xa3, 0x40, 0x8f, 0x92, 0x9d, 0x38, 0xf5, 0xbc, 0xb6, 0xda, 0x21, 0x10, 0xff, 0xf3, 0xd2,
	0xcd, 0x0c, 0x13, 0xec, 0x5f, 0x97, 0x44, 0x17, 0xc4, 0xa7, 0x7e, 0x3d, 0x64, 0x5d, 0x19, 0x73,
	0x60, 0x81, 0x4f, 0xdc, 0x22, 0x2a, 0x90, 0x88, 0x46, 0xee, 0xb8, 0x14, 0xde, 0x5e, 0x0b, 0xdb,
	0xe0, 0x32, 0x3a, 0x0a, 0x49, 0x06, 0x24, 0x5c, 0xc2, 0xd3, 0xac, 0x62, 0x91, 0x95, 0xe4, 0x79,
	0xe7, 0xc8, 0x37, 0x6d, 0x8d, 0xd5, 0x4e, 0xa9, 0x6c, 0x56, 0xf4, 0xea, 0x65, 0x7a, 0xae, 0x08,
	0xba, 0x78, 0x25, 0x2e, 0x1c, 0xa6, 0xb4, 0xc6, 0xe8, 0xdd, 0x74, 0x1f, 0x4b, 0xbd, 0x8b, 0x8a,
	0x70, 0x3e, 0xb5, 0x66, 0x48, 0x03, 0xf6, 0x0e, 0x61, 0x35, 0x57, 0xb9, 0x86, 0xc1, 0x1d, 0x9e,
	0xe1, 0xf8, 0x98, 0x11, 0x69, 0xd9, 0x8e, 0x94, 0x9b, 0x1e, 0x87, 0xe9, 0xce, 0x55, 0x28, 0xdf,
	0x8c, 0xa1, 0x89, 0x0d, 0xbf, 0xe6, 0x42, 0x68, 0x41, 0x99, 0x2d, 0x0f, 0xb0, 0x54, 0xbb, 0x16,
}

// ScheduleLen is the length of the largest encryption schedule, AES-256's.
const ScheduleLen = (maxRounds + 1) * BlockSize

// ExpandEncrypt writes the AESENC round keys of a 16-, 24- or 32-byte key
// into enc and returns the round count: the schedule alone, for callers
// that only encrypt a block now and then (GMAC's tag mask).
func ExpandEncrypt(enc *[ScheduleLen]byte, key []byte) (rounds int, err error) {
	switch len(key) {
	case 16, 24, 32:
	default:
		return 0, fmt.Errorf("expand AES key: %d bytes, want 16, 24 or 32", len(key))
	}
	return expandEncrypt(enc, key), nil
}

// EncryptBlock encrypts src into dst with the schedule enc in pure Go
// (FIPS 197 §5.1, byte by byte): for the fallback of callers that hold only
// the schedule. It is not constant-time; the assembly is.
func EncryptBlock(enc *[ScheduleLen]byte, rounds int, dst, src *[BlockSize]byte) {
	var s [BlockSize]byte
	for i := range s {
		s[i] = src[i] ^ enc[i]
	}
	for r := 1; r <= rounds; r++ {
		var t [BlockSize]byte
		for c := 0; c < 4; c++ {
			for row := 0; row < 4; row++ {
				t[row+4*c] = sbox[s[row+4*((c+row)%4)]]
			}
		}
		if r < rounds {
			for c := 0; c < 4; c++ {
				a0, a1, a2, a3 := t[4*c], t[4*c+1], t[4*c+2], t[4*c+3]
				t[4*c] = xtime(a0) ^ xtime(a1) ^ a1 ^ a2 ^ a3
				t[4*c+1] = a0 ^ xtime(a1) ^ xtime(a2) ^ a2 ^ a3
				t[4*c+2] = a0 ^ a1 ^ xtime(a2) ^ xtime(a3) ^ a3
				t[4*c+3] = xtime(a0) ^ a0 ^ a1 ^ a2 ^ xtime(a3)
			}
		}
		rk := enc[r*BlockSize : (r+1)*BlockSize]
		for i := range s {
			s[i] = t[i] ^ rk[i]
		}
	}
	*dst = s
}
