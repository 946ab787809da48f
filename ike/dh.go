package ike

import (
	"crypto/ecdh"
	"errors"
	"fmt"
	"io"
	"math/big"
)

// DHGroup is a key exchange method (transform type 4).
type DHGroup uint16

// The groups this package implements.
const (
	MODP2048   DHGroup = 14
	MODP3072   DHGroup = 15
	ECP256     DHGroup = 19
	ECP384     DHGroup = 20
	Curve25519 DHGroup = 31
)

func (g DHGroup) String() string { return transformName(TransformDH, uint16(g)) }

// The MODP primes of RFC 3526 §3 and §4; the generator is 2.
const (
	modp2048Hex = "" +
		"ffffffffffffffffc90fdaa22168c234c4c6628b80dc1cd129024e088a67cc74" +
		"020bbea63b139b22514a08798e3404ddef9519b3cd3a431b302b0a6df25f1437" +
		"4fe1356d6d51c245e485b576625e7ec6f44c42e9a637ed6b0bff5cb6f406b7ed" +
		"ee386bfb5a899fa5ae9f24117c4b1fe649286651ece45b3dc2007cb8a163bf05" +
		"98da48361c55d39a69163fa8fd24cf5f83655d23dca3ad961c62f356208552bb" +
		"9ed529077096966d670c354e4abc9804f1746c08ca18217c32905e462e36ce3b" +
		"e39e772c180e86039b2783a2ec07a28fb5c55df06f4c52c9de2bcbf695581718" +
		"3995497cea956ae515d2261898fa051015728e5a8aacaa68ffffffffffffffff"
	modp3072Hex = "" +
		"ffffffffffffffffc90fdaa22168c234c4c6628b80dc1cd129024e088a67cc74" +
		"020bbea63b139b22514a08798e3404ddef9519b3cd3a431b302b0a6df25f1437" +
		"4fe1356d6d51c245e485b576625e7ec6f44c42e9a637ed6b0bff5cb6f406b7ed" +
		"ee386bfb5a899fa5ae9f24117c4b1fe649286651ece45b3dc2007cb8a163bf05" +
		"98da48361c55d39a69163fa8fd24cf5f83655d23dca3ad961c62f356208552bb" +
		"9ed529077096966d670c354e4abc9804f1746c08ca18217c32905e462e36ce3b" +
		"e39e772c180e86039b2783a2ec07a28fb5c55df06f4c52c9de2bcbf695581718" +
		"3995497cea956ae515d2261898fa051015728e5a8aaac42dad33170d04507a33" +
		"a85521abdf1cba64ecfb850458dbef0a8aea71575d060c7db3970f85a6e1e4c7" +
		"abf5ae8cdb0933d71e8c94e04a25619dcee3d2261ad2ee6bf12ffa06d98a0864" +
		"d87602733ec86a64521f2b18177b200cbbe117577a615d6c770988c0bad946e2" +
		"08e24fa074e5ab3143db5bfce0fd108e4b82d120a93ad2caffffffffffffffff"
)

// dhKey is one side's ephemeral key for a group.
type dhKey interface {
	// Public is the KE payload's data.
	Public() []byte
	// Shared computes g^ir from the peer's KE data.
	Shared(peer []byte) ([]byte, error)
}

// Supported reports whether the group is implemented.
func (g DHGroup) Supported() bool {
	switch g {
	case MODP2048, MODP3072, ECP256, ECP384, Curve25519:
		return true
	}
	return false
}

// generate makes an ephemeral key in the group.
func (g DHGroup) generate(rand io.Reader) (dhKey, error) {
	switch g {
	case Curve25519, ECP256, ECP384:
		curve := map[DHGroup]ecdh.Curve{Curve25519: ecdh.X25519(), ECP256: ecdh.P256(), ECP384: ecdh.P384()}[g]
		k, err := curve.GenerateKey(rand)
		if err != nil {
			return nil, fmt.Errorf("generate %s key: %w", g, err)
		}
		return &ecKey{group: g, curve: curve, priv: k}, nil
	case MODP2048, MODP3072:
		hexp := modp2048Hex
		if g == MODP3072 {
			hexp = modp3072Hex
		}
		p, _ := new(big.Int).SetString(hexp, 16)
		n := (p.BitLen() + 7) / 8
		x := make([]byte, n)
		if _, err := io.ReadFull(rand, x); err != nil {
			return nil, fmt.Errorf("generate %s key: %w", g, err)
		}
		k := &modpKey{group: g, p: p, x: new(big.Int).SetBytes(x), size: n}
		k.x.Mod(k.x, p)
		return k, nil
	}
	return nil, fmt.Errorf("key exchange %s is not supported", g)
}

type ecKey struct {
	group DHGroup
	curve ecdh.Curve
	priv  *ecdh.PrivateKey
}

// Public is the public key: the 32 bytes of X25519, or x | y for the NIST
// curves (RFC 5903 §7, without the 0x04 of SEC 1).
func (k *ecKey) Public() []byte {
	b := k.priv.PublicKey().Bytes()
	if k.group != Curve25519 {
		b = b[1:]
	}
	return b
}

// Shared is the X25519 result, or the x coordinate for the NIST curves
// (RFC 5903 §9).
func (k *ecKey) Shared(peer []byte) ([]byte, error) {
	if k.group != Curve25519 {
		peer = append([]byte{4}, peer...)
	}
	pub, err := k.curve.NewPublicKey(peer)
	if err != nil {
		return nil, fmt.Errorf("%s public value of %d bytes: %w", k.group, len(peer), err)
	}
	s, err := k.priv.ECDH(pub)
	if err != nil {
		return nil, fmt.Errorf("%s key exchange: %w", k.group, err)
	}
	return s, nil
}

type modpKey struct {
	group DHGroup
	p, x  *big.Int
	size  int
}

func (k *modpKey) Public() []byte {
	return new(big.Int).Exp(big.NewInt(2), k.x, k.p).FillBytes(make([]byte, k.size))
}

func (k *modpKey) Shared(peer []byte) ([]byte, error) {
	if len(peer) != k.size {
		return nil, fmt.Errorf("%s public value of %d bytes, want %d", k.group, len(peer), k.size)
	}
	y := new(big.Int).SetBytes(peer)
	pm1 := new(big.Int).Sub(k.p, big.NewInt(1))
	if y.Cmp(big.NewInt(1)) <= 0 || y.Cmp(pm1) >= 0 {
		return nil, errors.New(k.group.String() + " public value out of range (not 1 < y < p-1)")
	}
	return new(big.Int).Exp(y, k.x, k.p).FillBytes(make([]byte, k.size)), nil
}
