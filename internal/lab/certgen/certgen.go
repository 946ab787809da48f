// Package certgen makes a CA and the certificates of IKE peers at test time.
package certgen

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"strings"
	"time"
)

// KeyType is the kind of key a certificate gets.
type KeyType string

// The key types.
const (
	RSA      KeyType = "rsa"
	ECDSA256 KeyType = "ecdsa-p256"
	ECDSA384 KeyType = "ecdsa-p384"
	Ed25519  KeyType = "ed25519"
)

// NewKey makes a key of the type (RSA of 2048 bits).
func NewKey(t KeyType) (crypto.Signer, error) {
	switch t {
	case RSA:
		return rsa.GenerateKey(rand.Reader, 2048)
	case ECDSA256:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case ECDSA384:
		return ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case Ed25519:
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	}
	return nil, fmt.Errorf("key type %q: want rsa, ecdsa-p256, ecdsa-p384 or ed25519", t)
}

// Issued is a certificate and its key.
type Issued struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// CA is a certificate authority: an Issued that signs others.
type CA Issued

// Options shape a certificate: its lifetime (from an hour ago; a day when
// zero) or an explicit window.
type Options struct {
	NotBefore, NotAfter time.Time
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 63))
	return n
}

func window(o Options) (time.Time, time.Time) {
	nb, na := o.NotBefore, o.NotAfter
	if nb.IsZero() {
		nb = time.Now().Add(-time.Hour)
	}
	if na.IsZero() {
		na = time.Now().Add(24 * time.Hour)
	}
	return nb, na
}

func skid(pub crypto.PublicKey) []byte {
	b, _ := x509.MarshalPKIXPublicKey(pub)
	h := sha1.Sum(b)
	return h[:]
}

// NewCA makes a self-signed CA with the subject "C=CH, O=espgw test,
// CN=<name>".
func NewCA(t KeyType, name string) (*CA, error) {
	key, err := NewKey(t)
	if err != nil {
		return nil, err
	}
	nb, na := window(Options{})
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: subject(name), NotBefore: nb, NotAfter: na.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, SubjectKeyId: skid(key.Public())}
	c, err := sign(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", name, err)
	}
	return &CA{Cert: c, Key: key}, nil
}

func subject(cn string) pkix.Name {
	return pkix.Name{Country: []string{"CH"}, Organization: []string{"espgw test"}, CommonName: cn}
}

// SubCA makes an intermediate CA that this CA signs.
func (ca *CA) SubCA(t KeyType, name string) (*CA, error) {
	key, err := NewKey(t)
	if err != nil {
		return nil, err
	}
	nb, na := window(Options{})
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: subject(name), NotBefore: nb, NotAfter: na,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, SubjectKeyId: skid(key.Public())}
	c, err := sign(tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", name, err)
	}
	return &CA{Cert: c, Key: key}, nil
}

// Issue makes an end-entity certificate with the subject CN=<cn> and the
// subject alternative names: IP addresses, email addresses (with an @) and
// DNS names.
func (ca *CA) Issue(t KeyType, cn string, names []string, o Options) (*Issued, error) {
	key, err := NewKey(t)
	if err != nil {
		return nil, err
	}
	nb, na := window(o)
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: subject(cn), NotBefore: nb, NotAfter: na,
		KeyUsage: x509.KeyUsageDigitalSignature, SubjectKeyId: skid(key.Public())}
	for _, n := range names {
		switch ip := net.ParseIP(n); {
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		case strings.Contains(n, "@"):
			tmpl.EmailAddresses = append(tmpl.EmailAddresses, n)
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	c, err := sign(tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("certificate %s: %w", cn, err)
	}
	return &Issued{Cert: c, Key: key}, nil
}

// sign makes the certificate tmpl describes for pub, signed by parent's
// key, and parses it back.
func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, parentKey crypto.Signer) (*x509.Certificate, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// WriteCerts writes certificates as PEM, in order.
func WriteCerts(path string, certs ...*x509.Certificate) error {
	var b []byte
	for _, c := range certs {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write certificates: %w", err)
	}
	return nil
}

// WriteKey writes a private key as PEM, mode 0600: PKCS #1 for RSA, SEC 1
// for ECDSA (the forms strongSwan's pkcs1 and openssl plugins and
// libreswan's tools read), PKCS #8 for Ed25519.
func WriteKey(path string, key crypto.Signer) error {
	var blk *pem.Block
	switch k := key.(type) {
	case *rsa.PrivateKey:
		blk = &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return err
		}
		blk = &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
	default:
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		blk = &pem.Block{Type: "PRIVATE KEY", Bytes: der}
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	return nil
}
