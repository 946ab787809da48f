package ike

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"slices"
)

// The hash algorithms of SIGNATURE_HASH_ALGORITHMS (RFC 7427 §4).
const (
	HashSHA1     uint16 = 1
	HashSHA256   uint16 = 2
	HashSHA384   uint16 = 3
	HashSHA512   uint16 = 4
	HashIdentity uint16 = 5
)

// ourSigHashes are the hashes this side announces and accepts in a
// Digital Signature AUTH (method 14).
var ourSigHashes = []uint16{HashSHA256, HashSHA384, HashSHA512, HashIdentity}

// The authentication methods of RFC 4754 (ECDSA with a fixed hash).
const (
	AuthECDSA256 AuthMethod = 9
	AuthECDSA384 AuthMethod = 10
	AuthECDSA521 AuthMethod = 11
)

// ecdsaMethods are, by curve, the classic ECDSA method, its hash and the
// size of r and s.
var ecdsaMethods = map[string]struct {
	method AuthMethod
	hash   crypto.Hash
	size   int
}{
	"P-256": {AuthECDSA256, crypto.SHA256, 32},
	"P-384": {AuthECDSA384, crypto.SHA384, 48},
	"P-521": {AuthECDSA521, crypto.SHA512, 66},
}

func sigHashNotify() *Notify {
	var b []byte
	for _, h := range ourSigHashes {
		b = binary.BigEndian.AppendUint16(b, h)
	}
	return &Notify{Kind: NotifySignatureHashAlgs, Data: b}
}

// peerSigHashes reads a SIGNATURE_HASH_ALGORITHMS notification; nil
// when the message has none.
func peerSigHashes(m *Message) ([]uint16, error) {
	n := m.Notify(NotifySignatureHashAlgs)
	if n == nil {
		return nil, nil
	}
	if len(n.Data) == 0 || len(n.Data)%2 != 0 {
		return nil, fmt.Errorf("SIGNATURE_HASH_ALGORITHMS of %d bytes, want a non-zero even number", len(n.Data))
	}
	hs := []uint16{}
	for i := 0; i < len(n.Data); i += 2 {
		hs = append(hs, binary.BigEndian.Uint16(n.Data[i:]))
	}
	return hs, nil
}

// signedOctets is what an AUTH payload proves (RFC 7296 §2.15): the
// sender's IKE_SA_INIT message as sent, the peer's nonce and
// prf(SK_p, <the sender's ID body>).
func signedOctets(p prfAlg, message, peerNonce, skp []byte, id Identity) []byte {
	return append(append(append([]byte(nil), message...), peerNonce...), p.sum(skp, idBody(id))...)
}

var (
	oidSHA1       = asn1.ObjectIdentifier{1, 3, 14, 3, 2, 26}
	oidSHA256     = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}
	oidSHA384     = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 2}
	oidSHA512     = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 3}
	oidRSAPSS     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 10}
	oidMGF1       = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 8}
	oidEd25519    = asn1.ObjectIdentifier{1, 3, 101, 112}
	oidRSAWithSHA = map[crypto.Hash]asn1.ObjectIdentifier{
		crypto.SHA1:   {1, 2, 840, 113549, 1, 1, 5},
		crypto.SHA256: {1, 2, 840, 113549, 1, 1, 11},
		crypto.SHA384: {1, 2, 840, 113549, 1, 1, 12},
		crypto.SHA512: {1, 2, 840, 113549, 1, 1, 13},
	}
	oidECDSAWithSHA = map[crypto.Hash]asn1.ObjectIdentifier{
		crypto.SHA1:   {1, 2, 840, 10045, 4, 1},
		crypto.SHA256: {1, 2, 840, 10045, 4, 3, 2},
		crypto.SHA384: {1, 2, 840, 10045, 4, 3, 3},
		crypto.SHA512: {1, 2, 840, 10045, 4, 3, 4},
	}
	hashOIDs = map[crypto.Hash]asn1.ObjectIdentifier{crypto.SHA1: oidSHA1, crypto.SHA256: oidSHA256,
		crypto.SHA384: oidSHA384, crypto.SHA512: oidSHA512}
	hashIDs = map[crypto.Hash]uint16{crypto.SHA1: HashSHA1, crypto.SHA256: HashSHA256, crypto.SHA384: HashSHA384,
		crypto.SHA512: HashSHA512}
)

// pssParams are RSASSA-PSS's parameters (RFC 4055 §3.1).
type pssParams struct {
	Hash         pkix.AlgorithmIdentifier `asn1:"explicit,tag:0,optional"`
	MGF          pkix.AlgorithmIdentifier `asn1:"explicit,tag:1,optional"`
	SaltLength   int                      `asn1:"explicit,tag:2,optional,default:20"`
	TrailerField int                      `asn1:"explicit,tag:3,optional,default:1"`
}

// pickHash is the hash a Digital Signature uses: want if the peer
// announced it, else the first of SHA2-256/384/512 it did.
func pickHash(want crypto.Hash, peer []uint16) (crypto.Hash, error) {
	if slices.Contains(peer, hashIDs[want]) {
		return want, nil
	}
	for _, h := range []crypto.Hash{crypto.SHA256, crypto.SHA384, crypto.SHA512} {
		if slices.Contains(peer, hashIDs[h]) {
			return h, nil
		}
	}
	return 0, fmt.Errorf("the peer's SIGNATURE_HASH_ALGORITHMS %v has no SHA-2 hash", peer)
}

func digest(h crypto.Hash, b []byte) []byte {
	d := h.New()
	d.Write(b)
	return d.Sum(nil)
}

// signAuth makes this side's AUTH payload over octets: a Digital
// Signature (method 14) when the peer announced SIGNATURE_HASH_ALGORITHMS
// (peer is not nil), else RSA with SHA-1 (method 1) or ECDSA with the
// curve's hash (methods 9 to 11). pss signs RSA with RSASSA-PSS.
func signAuth(key crypto.Signer, octets []byte, peer []uint16, pss bool) (*Auth, error) {
	if peer == nil {
		switch k := key.Public().(type) {
		case *rsa.PublicKey:
			sig, err := key.Sign(rand.Reader, digest(crypto.SHA1, octets), crypto.SHA1)
			if err != nil {
				return nil, fmt.Errorf("RSA signature: %w", err)
			}
			return &Auth{Method: AuthRSASig, Data: sig}, nil
		case *ecdsa.PublicKey:
			em := ecdsaMethods[k.Curve.Params().Name]
			der, err := key.Sign(rand.Reader, digest(em.hash, octets), em.hash)
			if err != nil {
				return nil, fmt.Errorf("ECDSA signature: %w", err)
			}
			var rs struct{ R, S *big.Int }
			if _, err := asn1.Unmarshal(der, &rs); err != nil {
				return nil, fmt.Errorf("ECDSA signature: %w", err)
			}
			raw := make([]byte, 2*em.size)
			rs.R.FillBytes(raw[:em.size])
			rs.S.FillBytes(raw[em.size:])
			return &Auth{Method: em.method, Data: raw}, nil
		}
		return nil, errors.New("an Ed25519 key signs only with RFC 7427 Digital Signatures, which the peer did not announce")
	}
	var alg pkix.AlgorithmIdentifier
	var sig []byte
	var err error
	switch k := key.Public().(type) {
	case *rsa.PublicKey:
		var h crypto.Hash
		if h, err = pickHash(crypto.SHA256, peer); err != nil {
			return nil, err
		}
		if pss {
			hashAlg := pkix.AlgorithmIdentifier{Algorithm: hashOIDs[h], Parameters: asn1.NullRawValue}
			mgf, _ := asn1.Marshal(hashAlg)
			params, perr := asn1.Marshal(pssParams{Hash: hashAlg, MGF: pkix.AlgorithmIdentifier{Algorithm: oidMGF1,
				Parameters: asn1.RawValue{FullBytes: mgf}}, SaltLength: h.Size(), TrailerField: 1})
			if perr != nil {
				return nil, perr
			}
			alg = pkix.AlgorithmIdentifier{Algorithm: oidRSAPSS, Parameters: asn1.RawValue{FullBytes: params}}
			sig, err = key.Sign(rand.Reader, digest(h, octets), &rsa.PSSOptions{SaltLength: h.Size(), Hash: h})
		} else {
			alg = pkix.AlgorithmIdentifier{Algorithm: oidRSAWithSHA[h], Parameters: asn1.NullRawValue}
			sig, err = key.Sign(rand.Reader, digest(h, octets), h)
		}
	case *ecdsa.PublicKey:
		var h crypto.Hash
		if h, err = pickHash(ecdsaMethods[k.Curve.Params().Name].hash, peer); err != nil {
			return nil, err
		}
		alg = pkix.AlgorithmIdentifier{Algorithm: oidECDSAWithSHA[h]}
		sig, err = key.Sign(rand.Reader, digest(h, octets), h)
	case ed25519.PublicKey:
		if !slices.Contains(peer, HashIdentity) {
			return nil, errors.New("an Ed25519 signature needs the Identity hash, which the peer did not announce")
		}
		alg = pkix.AlgorithmIdentifier{Algorithm: oidEd25519}
		sig, err = key.Sign(rand.Reader, octets, crypto.Hash(0))
	}
	if err != nil {
		return nil, fmt.Errorf("signature: %w", err)
	}
	algDER, err := asn1.Marshal(alg)
	if err != nil {
		return nil, err
	}
	return &Auth{Method: AuthDigSig, Data: append(append([]byte{byte(len(algDER))}, algDER...), sig...)}, nil
}

// verifyAuth checks a signature AUTH over octets with the peer
// certificate's public key.
func verifyAuth(pub crypto.PublicKey, a *Auth, octets []byte) error {
	switch a.Method {
	case AuthRSASig:
		k, ok := pub.(*rsa.PublicKey)
		if !ok {
			return fmt.Errorf("RSA signature (method 1) with a %s key", keyName(pub))
		}
		if rsa.VerifyPKCS1v15(k, crypto.SHA1, digest(crypto.SHA1, octets), a.Data) != nil {
			return errors.New("the RSA signature (method 1) does not verify")
		}
		return nil
	case AuthECDSA256, AuthECDSA384, AuthECDSA521:
		k, ok := pub.(*ecdsa.PublicKey)
		if !ok || ecdsaMethods[k.Curve.Params().Name].method != a.Method {
			return fmt.Errorf("ECDSA signature (method %d) with a %s key", a.Method, keyName(pub))
		}
		em := ecdsaMethods[k.Curve.Params().Name]
		if len(a.Data) != 2*em.size {
			return fmt.Errorf("ECDSA signature (method %d) of %d bytes, want %d", a.Method, len(a.Data), 2*em.size)
		}
		r, s := new(big.Int).SetBytes(a.Data[:em.size]), new(big.Int).SetBytes(a.Data[em.size:])
		if !ecdsa.Verify(k, digest(em.hash, octets), r, s) {
			return fmt.Errorf("the ECDSA signature (method %d) does not verify", a.Method)
		}
		return nil
	case AuthDigSig:
		return verifyDigSig(pub, a.Data, octets)
	}
	return fmt.Errorf("authentication method %d is not supported", a.Method)
}

// verifyDigSig checks an RFC 7427 Digital Signature: the length of the
// AlgorithmIdentifier, the AlgorithmIdentifier (DER), the signature.
func verifyDigSig(pub crypto.PublicKey, data, octets []byte) error {
	if len(data) == 0 {
		return errors.New("empty digital signature AUTH")
	}
	n := int(data[0])
	if n == 0 || len(data) < 1+n+1 {
		return fmt.Errorf("digital signature AUTH of %d bytes with a %d-byte AlgorithmIdentifier", len(data), n)
	}
	var alg pkix.AlgorithmIdentifier
	if rest, err := asn1.Unmarshal(data[1:1+n], &alg); err != nil || len(rest) != 0 {
		return fmt.Errorf("digital signature AUTH: its AlgorithmIdentifier does not decode")
	}
	sig := data[1+n:]
	hashOf := func(m map[crypto.Hash]asn1.ObjectIdentifier) crypto.Hash {
		for h, oid := range m {
			if oid.Equal(alg.Algorithm) {
				return h
			}
		}
		return 0
	}
	offered := func(h crypto.Hash) error {
		if !slices.Contains(ourSigHashes, hashIDs[h]) {
			return fmt.Errorf("digital signature with %s, which this side did not announce", h)
		}
		return nil
	}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if alg.Algorithm.Equal(oidRSAPSS) {
			var p pssParams
			if rest, err := asn1.Unmarshal(alg.Parameters.FullBytes, &p); err != nil || len(rest) != 0 {
				return errors.New("RSASSA-PSS signature: its parameters do not decode")
			}
			var h crypto.Hash
			for hh, oid := range hashOIDs {
				if oid.Equal(p.Hash.Algorithm) {
					h = hh
				}
			}
			var mgfHash pkix.AlgorithmIdentifier
			if _, err := asn1.Unmarshal(p.MGF.Parameters.FullBytes, &mgfHash); err != nil || !p.MGF.Algorithm.Equal(oidMGF1) ||
				!mgfHash.Algorithm.Equal(p.Hash.Algorithm) {
				return errors.New("RSASSA-PSS signature: its mask generation is not MGF1 with its hash")
			}
			if h == 0 || offered(h) != nil || p.TrailerField != 1 {
				return fmt.Errorf("RSASSA-PSS signature with hash %v, trailer %d", p.Hash.Algorithm, p.TrailerField)
			}
			if rsa.VerifyPSS(k, h, digest(h, octets), sig, &rsa.PSSOptions{SaltLength: p.SaltLength, Hash: h}) != nil {
				return errors.New("the RSASSA-PSS signature does not verify")
			}
			return nil
		}
		h := hashOf(oidRSAWithSHA)
		if h == 0 {
			return fmt.Errorf("digital signature algorithm %v with an RSA key", alg.Algorithm)
		}
		if err := offered(h); err != nil {
			return err
		}
		if rsa.VerifyPKCS1v15(k, h, digest(h, octets), sig) != nil {
			return fmt.Errorf("the RSA %s signature does not verify", h)
		}
		return nil
	case *ecdsa.PublicKey:
		h := hashOf(oidECDSAWithSHA)
		if h == 0 {
			return fmt.Errorf("digital signature algorithm %v with an ECDSA key", alg.Algorithm)
		}
		if err := offered(h); err != nil {
			return err
		}
		if !ecdsa.VerifyASN1(k, digest(h, octets), sig) {
			return fmt.Errorf("the ECDSA %s signature does not verify", h)
		}
		return nil
	case ed25519.PublicKey:
		if !alg.Algorithm.Equal(oidEd25519) {
			return fmt.Errorf("digital signature algorithm %v with an Ed25519 key", alg.Algorithm)
		}
		if !ed25519.Verify(k, octets, sig) {
			return errors.New("the Ed25519 signature does not verify")
		}
		return nil
	}
	return fmt.Errorf("a %s key", keyName(pub))
}

func keyName(pub crypto.PublicKey) string {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return "RSA"
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return fmt.Sprintf("%T", pub)
}
