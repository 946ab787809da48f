package ike

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"
)

// CertEncoding is a CERT or CERTREQ payload's encoding (RFC 7296 §3.6).
type CertEncoding uint8

// CertX509 is the one encoding this package sends and reads: an X.509
// certificate in DER (a CERTREQ of it lists SHA-1 hashes of CAs' public
// keys).
const CertX509 CertEncoding = 4

// Bounds on CERT and CERTREQ payloads and on a peer's chain.
const (
	maxCertLen    = 16384
	maxCertReqLen = 20 * 64
	maxPeerCerts  = 8
)

// Cert is a CERT payload.
type Cert struct {
	Encoding CertEncoding
	Data     []byte
}

func (*Cert) Type() PayloadType { return PayloadCert }
func (c *Cert) appendBody(b []byte) []byte {
	return append(append(b, byte(c.Encoding)), c.Data...)
}

func parseCert(body []byte) (*Cert, error) {
	if len(body) < 2 || len(body)-1 > maxCertLen {
		return nil, fmt.Errorf("%d bytes, want 2 to %d", len(body), maxCertLen+1)
	}
	return &Cert{Encoding: CertEncoding(body[0]), Data: clone(body[1:])}, nil
}

// CertReq is a CERTREQ payload: for X.509, the SHA-1 hashes of the
// SubjectPublicKeyInfo of the CAs the sender trusts.
type CertReq struct {
	Encoding CertEncoding
	Data     []byte
}

func (*CertReq) Type() PayloadType { return PayloadCertReq }
func (c *CertReq) appendBody(b []byte) []byte {
	return append(append(b, byte(c.Encoding)), c.Data...)
}

func parseCertReq(body []byte) (*CertReq, error) {
	if len(body) < 1 || len(body)-1 > maxCertReqLen {
		return nil, fmt.Errorf("%d bytes, want 1 to %d", len(body), maxCertReqLen+1)
	}
	c := &CertReq{Encoding: CertEncoding(body[0]), Data: clone(body[1:])}
	if c.Encoding == CertX509 && len(c.Data)%sha1.Size != 0 {
		return nil, fmt.Errorf("X.509 CERTREQ of %d bytes, not a whole number of SHA-1 hashes", len(c.Data))
	}
	return c, nil
}

// certReqFor is the CERTREQ naming the CAs.
func certReqFor(cas []*x509.Certificate) *CertReq {
	r := &CertReq{Encoding: CertX509}
	for _, ca := range cas {
		h := sha1.Sum(ca.RawSubjectPublicKeyInfo)
		r.Data = append(r.Data, h[:]...)
	}
	return r
}

// LoadCertificates reads the PEM certificates of a file: this side's
// chain (its own first) or the CAs it trusts.
func LoadCertificates(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	certs, err := ParseCertificates(b)
	if err != nil {
		return nil, fmt.Errorf("certificates in %q: %w", path, err)
	}
	return certs, nil
}

// ParseCertificates reads PEM certificates, in order.
func ParseCertificates(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for n := 1; ; n++ {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is %q, want CERTIFICATE", n, blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return out, nil
}

// LoadPrivateKey reads a PEM private key file (ParsePrivateKey). Errors
// never show the key.
func LoadPrivateKey(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	key, err := ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("private key %q: %w", path, err)
	}
	return key, nil
}

// ParsePrivateKey reads a PEM private key (PKCS #8, PKCS #1 RSA or SEC 1
// EC): RSA, ECDSA (P-256, P-384, P-521) or Ed25519. Errors never show the
// key.
func ParsePrivateKey(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block")
	}
	var key any
	var err error
	switch blk.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(blk.Bytes)
	default:
		return nil, fmt.Errorf("PEM block %q, want PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY", blk.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%s block does not parse", blk.Type)
	}
	s, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T, want RSA, ECDSA or Ed25519", key)
	}
	if err := checkKey(s.Public()); err != nil {
		return nil, err
	}
	return s, nil
}

// checkKey says whether signatures with a public key can be made and
// checked here.
func checkKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return fmt.Errorf("an RSA key of %d bits, want 2048 or more", k.N.BitLen())
		}
		return nil
	case *ecdsa.PublicKey:
		if _, ok := ecdsaMethods[k.Curve.Params().Name]; !ok {
			return fmt.Errorf("an ECDSA key on %s, want P-256, P-384 or P-521", k.Curve.Params().Name)
		}
		return nil
	case ed25519.PublicKey:
		return nil
	}
	return fmt.Errorf("a %T key, want RSA, ECDSA or Ed25519", pub)
}

// checkCredentials checks this side's certificates against its key and
// identity.
func checkCredentials(certs []*x509.Certificate, key crypto.Signer, id Identity) error {
	if len(certs) == 0 || key == nil {
		return errors.New("a certificate needs its private key, and a key its certificate")
	}
	if err := checkKey(certs[0].PublicKey); err != nil {
		return fmt.Errorf("certificate %s: %w", dnString(certs[0].RawSubject), err)
	}
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if pub, ok := key.Public().(equaler); !ok || !pub.Equal(certs[0].PublicKey) {
		return fmt.Errorf("the private key is not the key of certificate %s", dnString(certs[0].RawSubject))
	}
	if err := idInCert(id, certs[0]); err != nil {
		return fmt.Errorf("local identity: %w", err)
	}
	return nil
}

// idInCert checks that a certificate holds an identity: an FQDN, email
// address or IP address among its subject alternative names, a DN equal to
// its subject, or a key id equal to its subject key identifier or the
// SHA-1 of its public key.
func idInCert(id Identity, c *x509.Certificate) error {
	ok := false
	switch id.Kind {
	case IDFQDN:
		ok = slices.ContainsFunc(c.DNSNames, func(n string) bool { return strings.EqualFold(n, string(id.Data)) })
	case IDEmail:
		ok = slices.ContainsFunc(c.EmailAddresses, func(n string) bool { return strings.EqualFold(n, string(id.Data)) })
	case IDIPv4, IDIPv6:
		a, _ := netip.AddrFromSlice(id.Data)
		ok = slices.ContainsFunc(c.IPAddresses, func(ip net.IP) bool { b, _ := netip.AddrFromSlice(ip); return b.Unmap() == a })
	case IDDN:
		ok = dnEqual(id.Data, c.RawSubject)
	case IDKeyID:
		ok = bytes.Equal(id.Data, c.SubjectKeyId) || bytes.Equal(id.Data, pubKeyHash(c)) ||
			bytes.Equal(id.Data, sha1Sum(c.RawSubjectPublicKeyInfo))
	}
	if !ok {
		return fmt.Errorf("%s is not in certificate %s", id, dnString(c.RawSubject))
	}
	return nil
}

func sha1Sum(b []byte) []byte { h := sha1.Sum(b); return h[:] }

// pubKeyHash is the SHA-1 of the certificate's subjectPublicKey bits.
func pubKeyHash(c *x509.Certificate) []byte {
	var spki struct {
		Algorithm asn1.RawValue
		Key       asn1.BitString
	}
	if _, err := asn1.Unmarshal(c.RawSubjectPublicKeyInfo, &spki); err != nil {
		return nil
	}
	return sha1Sum(spki.Key.Bytes)
}

// verifyPeerCerts takes the peer's CERT payloads, checks that the first
// chains to one of the CAs through the others, and returns it.
func verifyPeerCerts(m *Message, cas []*x509.Certificate, now time.Time) (*x509.Certificate, error) {
	var chain []*x509.Certificate
	for _, p := range m.Payloads {
		c, ok := p.(*Cert)
		if !ok {
			continue
		}
		if c.Encoding != CertX509 {
			return nil, fmt.Errorf("CERT of encoding %d, want %d (X.509)", c.Encoding, CertX509)
		}
		if len(chain) == maxPeerCerts {
			return nil, fmt.Errorf("more than %d CERT payloads", maxPeerCerts)
		}
		x, err := x509.ParseCertificate(c.Data)
		if err != nil {
			return nil, fmt.Errorf("CERT payload %d: %w", len(chain)+1, err)
		}
		chain = append(chain, x)
	}
	if len(chain) == 0 {
		return nil, errors.New("no CERT payload")
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, ca := range cas {
		roots.AddCert(ca)
	}
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("certificate %s: %w", dnString(chain[0].RawSubject), err)
	}
	if err := checkKey(chain[0].PublicKey); err != nil {
		return nil, fmt.Errorf("certificate %s: %w", dnString(chain[0].RawSubject), err)
	}
	return chain[0], nil
}

// IdentityInCertificate checks that a certificate holds an identity, as a
// peer's must hold the identity it authenticates as.
func IdentityInCertificate(id Identity, c *x509.Certificate) error { return idInCert(id, c) }
