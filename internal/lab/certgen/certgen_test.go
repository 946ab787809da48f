package certgen

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestChainVerifies(t *testing.T) {
	for _, kt := range []KeyType{RSA, ECDSA256, ECDSA384, Ed25519} {
		t.Run(string(kt), func(t *testing.T) {
			root, err := NewCA(kt, "root")
			if err != nil {
				t.Fatal(err)
			}
			sub, err := root.SubCA(kt, "sub")
			if err != nil {
				t.Fatal(err)
			}
			peer, err := sub.Issue(kt, "gw1", []string{"198.51.100.1", "gw1@example.org", "gw1.example.org"}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			roots, inter := x509.NewCertPool(), x509.NewCertPool()
			roots.AddCert(root.Cert)
			inter.AddCert(sub.Cert)
			if _, err := peer.Cert.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: "gw1.example.org",
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				t.Fatalf("chain does not verify: %v", err)
			}
			if got := len(peer.Cert.IPAddresses) + len(peer.Cert.EmailAddresses) + len(peer.Cert.DNSNames); got != 3 {
				t.Errorf("subject alternative names: got %d, want 3", got)
			}
			if peer.Cert.Subject.CommonName != "gw1" || !sub.Cert.IsCA || peer.Cert.IsCA {
				t.Errorf("subject %v, CA flags sub=%v peer=%v", peer.Cert.Subject, sub.Cert.IsCA, peer.Cert.IsCA)
			}
		})
	}
}

func TestExpiredWindowRefusedByVerify(t *testing.T) {
	root, err := NewCA(ECDSA256, "root")
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour)
	peer, err := root.Issue(ECDSA256, "gw2", nil, Options{NotBefore: old, NotAfter: old.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(root.Cert)
	if _, err := peer.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
		t.Fatal("a certificate whose window ended verifies")
	}
}

func TestWritten(t *testing.T) {
	for _, tc := range []struct {
		kt    KeyType
		block string
	}{{RSA, "RSA PRIVATE KEY"}, {ECDSA256, "EC PRIVATE KEY"}, {Ed25519, "PRIVATE KEY"}} {
		t.Run(string(tc.kt), func(t *testing.T) {
			ca, err := NewCA(tc.kt, "root")
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			certs, key := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca.key")
			if err := WriteCerts(certs, ca.Cert, ca.Cert); err != nil {
				t.Fatal(err)
			}
			if err := WriteKey(key, ca.Key); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(certs)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for blk, rest := pem.Decode(b); blk != nil; blk, rest = pem.Decode(rest) {
				if c, err := x509.ParseCertificate(blk.Bytes); err != nil || !c.Equal(ca.Cert) {
					t.Fatalf("certificate %d does not read back: %v", n, err)
				}
				n++
			}
			if n != 2 {
				t.Errorf("read back %d certificates, want 2", n)
			}
			fi, err := os.Stat(key)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("key mode %v, want 0600", fi.Mode().Perm())
			}
			kb, _ := os.ReadFile(key)
			if blk, _ := pem.Decode(kb); blk == nil || blk.Type != tc.block {
				t.Errorf("key block %v, want %q", blk, tc.block)
			}
		})
	}
	if _, err := NewKey("dsa"); err == nil {
		t.Error("an unknown key type is accepted")
	}
}
