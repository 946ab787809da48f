package ike

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/chacha20poly1305"
)

// skPayload is an SK or SKF payload as it arrived: its first inner
// payload type, its offset in the message, the length of its header (4,
// or 8 with an SKF's Fragment Number and Total Fragments) and its body
// after that header (IV, ciphertext, ICV). fragNum is 0 for SK.
type skPayload struct {
	inner              PayloadType
	offset, hdrLen     int
	body               []byte
	fragNum, fragTotal int
}

// skCipher protects the SK payloads sent in one direction (RFC 7296 §3.14,
// RFC 5282 for AES-GCM, RFC 7634 for ChaCha20-Poly1305: the same 4-byte
// salt and 8-byte IV as the nonce, and no padding needed).
type skCipher struct {
	aead     cipher.AEAD // AES-GCM-16, ChaCha20-Poly1305
	salt     []byte
	block    cipher.Block // AES-CBC
	integ    integAlg
	integKey []byte
}

func newSKCipher(e encrAlg, in integAlg, encKey, integKey []byte) (*skCipher, error) {
	if e.id == EncrChaCha20Poly1305 {
		aead, err := chacha20poly1305.New(encKey[:len(encKey)-4])
		if err != nil {
			return nil, fmt.Errorf("SK cipher: %w", err)
		}
		return &skCipher{aead: aead, salt: encKey[len(encKey)-4:]}, nil
	}
	if e.aead {
		block, err := aes.NewCipher(encKey[:len(encKey)-4])
		if err != nil {
			return nil, fmt.Errorf("SK cipher: %w", err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("SK cipher: %w", err)
		}
		return &skCipher{aead: aead, salt: encKey[len(encKey)-4:]}, nil
	}
	block, err := aes.NewCipher(encKey)
	if err != nil {
		return nil, fmt.Errorf("SK cipher: %w", err)
	}
	return &skCipher{block: block, integ: in, integKey: integKey}, nil
}

func (c *skCipher) ivLen() int {
	if c.aead != nil {
		return 8
	}
	return aes.BlockSize
}

func (c *skCipher) icvLen() int {
	if c.aead != nil {
		return c.aead.Overhead()
	}
	return c.integ.icv
}

// seal encodes m with its payloads inside an SK payload.
func (c *skCipher) seal(m *Message, rand io.Reader) ([]byte, error) {
	plain, first, err := appendChain(nil, m.Payloads)
	if err != nil {
		return nil, err
	}
	return c.sealChain(m.Header, first, plain, rand)
}

// sealChain encodes a message whose SK payload holds the encoded payload
// chain plain, starting with a payload of type first.
func (c *skCipher) sealChain(h Header, first PayloadType, plain []byte, rand io.Reader) ([]byte, error) {
	return c.sealSK(h, first, plain, 0, 0, rand)
}

// sealFragment encodes fragment num of total (RFC 7383 §2.5): an SKF
// payload holding part of a message's payload chain; first is the chain's
// first payload type in fragment 1 and 0 in the others.
func (c *skCipher) sealFragment(h Header, first PayloadType, part []byte, num, total int, rand io.Reader) ([]byte, error) {
	return c.sealSK(h, first, part, num, total, rand)
}

// maxFragmentPlain is how much of a payload chain one fragment of size
// bytes (its IKE header to its ICV) carries.
func (c *skCipher) maxFragmentPlain(size int) int {
	avail := size - HeaderLen - 8 - c.ivLen() - c.icvLen()
	if c.aead == nil {
		avail = avail / aes.BlockSize * aes.BlockSize
	}
	return avail - 1 // the pad length byte
}

func (c *skCipher) sealSK(h Header, first PayloadType, chain []byte, num, total int, rand io.Reader) ([]byte, error) {
	pad := 0
	if c.aead == nil {
		pad = (aes.BlockSize - (len(chain)+1)%aes.BlockSize) % aes.BlockSize
	}
	plain := make([]byte, len(chain), len(chain)+pad+1)
	copy(plain, chain)
	plain = append(plain, make([]byte, pad+1)...)
	plain[len(plain)-1] = byte(pad)
	hdrLen := 4
	h.Next = PayloadSK
	if num != 0 {
		hdrLen, h.Next = 8, PayloadSKF
	}
	ivLen, icvLen := c.ivLen(), c.icvLen()
	size := HeaderLen + hdrLen + ivLen + len(plain) + icvLen
	if size > MaxMessageLen {
		return nil, fmt.Errorf("%s message of %d bytes, more than %d", h.Exchange, size, MaxMessageLen)
	}
	b := make([]byte, HeaderLen+hdrLen+ivLen, size)
	h.Version, h.Length = Version, uint32(size)
	h.put(b)
	b[HeaderLen] = byte(first)
	binary.BigEndian.PutUint16(b[HeaderLen+2:], uint16(size-HeaderLen))
	if num != 0 {
		binary.BigEndian.PutUint16(b[HeaderLen+4:], uint16(num))
		binary.BigEndian.PutUint16(b[HeaderLen+6:], uint16(total))
	}
	iv := b[HeaderLen+hdrLen:]
	if _, err := io.ReadFull(rand, iv); err != nil {
		return nil, fmt.Errorf("SK payload IV: %w", err)
	}
	if c.aead != nil {
		nonce := append(append(make([]byte, 0, 12), c.salt...), iv...)
		return c.aead.Seal(b, nonce, plain, b[:HeaderLen+hdrLen]), nil
	}
	cipher.NewCBCEncrypter(c.block, iv).CryptBlocks(plain, plain)
	b = append(b, plain...)
	mac := hmac.New(c.integ.hash, c.integKey)
	mac.Write(b)
	return append(b, mac.Sum(nil)[:icvLen]...), nil
}

// errIntegrity is an SK payload whose ICV does not verify.
var errIntegrity = errors.New("SK payload: integrity check failed")

// open checks and decrypts m's SK payload (raw is the whole message as
// received) and puts the inner payloads in m.Payloads.
func (c *skCipher) open(m *Message, raw []byte) error {
	if m.sk != nil && m.sk.fragNum != 0 {
		return errors.New("an SKF payload (a fragment) where a whole message was expected")
	}
	chain, err := c.decrypt(m, raw)
	if err != nil {
		return err
	}
	ps, _, err := parseChain(m.sk.inner, chain, m.sk.offset+m.sk.hdrLen+c.ivLen(), false)
	if err != nil {
		return fmt.Errorf("inside the SK payload: %w", err)
	}
	m.Payloads, m.Encrypted, m.sk = ps, true, nil
	return nil
}

// decrypt checks and decrypts m's SK or SKF payload and returns the
// payload chain (or the part of it a fragment holds) without the padding.
func (c *skCipher) decrypt(m *Message, raw []byte) ([]byte, error) {
	sk := m.sk
	if sk == nil {
		return nil, errors.New("no SK payload")
	}
	if len(m.Payloads) != 0 {
		return nil, fmt.Errorf("%d payloads before the SK payload", len(m.Payloads))
	}
	ivLen, icvLen := c.ivLen(), c.icvLen()
	if len(sk.body) < ivLen+icvLen+1 {
		return nil, fmt.Errorf("SK payload of %d bytes, shorter than its IV and ICV", len(sk.body))
	}
	iv, ct := sk.body[:ivLen], sk.body[ivLen:]
	var plain []byte
	if c.aead != nil {
		nonce := append(append(make([]byte, 0, 12), c.salt...), iv...)
		var err error
		if plain, err = c.aead.Open(nil, nonce, ct, raw[:sk.offset+sk.hdrLen]); err != nil {
			return nil, errIntegrity
		}
	} else {
		ct, icv := ct[:len(ct)-icvLen], ct[len(ct)-icvLen:]
		mac := hmac.New(c.integ.hash, c.integKey)
		mac.Write(raw[:len(raw)-icvLen])
		if !hmac.Equal(mac.Sum(nil)[:icvLen], icv) {
			return nil, errIntegrity
		}
		if len(ct) == 0 || len(ct)%aes.BlockSize != 0 {
			return nil, fmt.Errorf("SK ciphertext of %d bytes, not a whole number of blocks", len(ct))
		}
		plain = make([]byte, len(ct))
		cipher.NewCBCDecrypter(c.block, iv).CryptBlocks(plain, ct)
	}
	pad := int(plain[len(plain)-1])
	if pad > len(plain)-1 {
		return nil, fmt.Errorf("SK payload: pad length %d in %d bytes", pad, len(plain))
	}
	return plain[:len(plain)-1-pad], nil
}
