package ike

import (
	"bytes"
	"context"
	"crypto/x509"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/certgen"
)

// certConfigs are the test configs with certificates of key type kt from
// one CA instead of the PSK: gw1's certificate holds the DNS name gw1,
// gw1@example.org and 192.0.2.1; gw2's the DNS name gw2.
func certConfigs(t testing.TB, kt certgen.KeyType) (Config, Config, *certgen.CA) {
	t.Helper()
	ca, err := certgen.NewCA(kt, "espgw test CA")
	if err != nil {
		t.Fatal(err)
	}
	ic, rc := testConfigs(t, "aes128-sha256-x25519", "aes128gcm16")
	for _, c := range []struct {
		cfg   *Config
		cn    string
		names []string
	}{{&ic, "gw1", []string{"gw1", "gw1@example.org", "192.0.2.1"}}, {&rc, "gw2", []string{"gw2"}}} {
		leaf, err := ca.Issue(kt, c.cn, c.names, certgen.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c.cfg.PSK, c.cfg.Certs, c.cfg.Key, c.cfg.CAs = nil, []*x509.Certificate{leaf.Cert}, leaf.Key, []*x509.Certificate{ca.Cert}
	}
	return ic, rc, ca
}

// TestCertificateAuth runs IKE_AUTH with certificates between two
// endpoints for each key type and signature method: RFC 7427 Digital
// Signatures (PKCS #1 v1.5 and PSS for RSA) and the classic methods 1
// and 9/10; each side checks the other's chain, identity and AUTH, and
// the CHILD_SA comes up with the same keys on both.
func TestCertificateAuth(t *testing.T) {
	for _, c := range []struct {
		name       string
		kt         certgen.KeyType
		classic    bool
		pss        bool
		wantMethod AuthMethod
	}{
		{"rsa/digital-signature", certgen.RSA, false, false, AuthDigSig},
		{"rsa-pss/digital-signature", certgen.RSA, false, true, AuthDigSig},
		{"ecdsa-p256/digital-signature", certgen.ECDSA256, false, false, AuthDigSig},
		{"ecdsa-p384/digital-signature", certgen.ECDSA384, false, false, AuthDigSig},
		{"ed25519/digital-signature", certgen.Ed25519, false, false, AuthDigSig},
		{"rsa/classic", certgen.RSA, true, false, AuthRSASig},
		{"ecdsa-p256/classic", certgen.ECDSA256, true, false, AuthECDSA256},
		{"ecdsa-p384/classic", certgen.ECDSA384, true, false, AuthECDSA384},
	} {
		t.Run(c.name, func(t *testing.T) {
			ic, rc, _ := certConfigs(t, c.kt)
			ic.ClassicSignatures, rc.ClassicSignatures = c.classic, c.classic
			ic.RSAPSS, rc.RSAPSS = c.pss, c.pss
			p := newPair(t, ic, rc, 0)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := p.i.Initiate(ctx, netip.AddrPortFrom(p.rAddr, Port))
			if err != nil {
				t.Fatalf("%v; responder counts %v", err, p.r.Counts())
			}
			checkChildren(t, s.Children()[0], <-p.responderChild)
			if got := s.PeerCertificate(); got == nil || !bytes.Equal(got.Raw, rc.Certs[0].Raw) {
				t.Error("the initiator does not hold the responder's certificate")
			}
			if !s.PeerID().Equal(FQDN("gw2")) {
				t.Errorf("peer identity %s", s.PeerID())
			}
			// The methods used: sign again with the same inputs and
			// compare the method.
			s.e.mu.Lock()
			_, a, err := s.ownAuth()
			s.e.mu.Unlock()
			if err != nil || a.Method != c.wantMethod {
				t.Errorf("AUTH method %v (%v), want %d", a, err, c.wantMethod)
			}
			rs := p.r.SAs()
			if len(rs) != 1 || rs[0].PeerCertificate() == nil || !rs[0].PeerID().Equal(FQDN("gw1")) {
				t.Errorf("the responder's SA has no certificate or identity gw1")
			}
			// The rekeyed IKE SA keeps what was authenticated.
			n, err := s.Rekey(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n.PeerCertificate() == nil || !n.PeerID().Equal(FQDN("gw2")) {
				t.Error("the rekeyed IKE SA lost the peer's certificate or identity")
			}
		})
	}
}

// TestCertificateIdentities authenticates gw1 as each identity type its
// certificate holds, and fails with one it does not.
func TestCertificateIdentities(t *testing.T) {
	ic0, rc0, _ := certConfigs(t, certgen.ECDSA256)
	dn := DN(ic0.Certs[0].RawSubject)
	text, err := ParseIdentity("C=CH, O=espgw test, CN=gw1")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		id   Identity
		ok   bool
	}{
		{"fqdn", FQDN("gw1"), true},
		{"email", Email("gw1@example.org"), true},
		{"ipv4", Addr(netip.MustParseAddr("192.0.2.1")), true},
		{"dn", dn, true},
		{"dn written as text", text, true},
		{"keyid", KeyID(ic0.Certs[0].SubjectKeyId), true},
		{"fqdn not in the certificate", FQDN("gw3"), false},
		{"ipv6 not in the certificate", Addr(netip.MustParseAddr("2001:db8::1")), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ic, rc := ic0, rc0
			ic.LocalID, rc.RemoteID = c.id, Identity{}
			if !c.ok {
				// The initiator's own check refuses the configuration;
				// the responder must refuse it too when it comes anyway.
				if _, err := NewEndpoint(ic, netip.MustParseAddr("192.0.2.1"), func(Datagram) error { return nil }); err == nil ||
					!strings.Contains(err.Error(), "is not in certificate") {
					t.Fatalf("config with %s accepted: %v", c.id, err)
				}
				return
			}
			p := newPair(t, ic, rc, 0)
			if _, err := p.i.Initiate(context.Background(), netip.AddrPortFrom(p.rAddr, Port)); err != nil {
				t.Fatalf("%v; responder counts %v", err, p.r.Counts())
			}
			<-p.responderChild
			if rs := p.r.SAs(); len(rs) != 1 || !rs[0].PeerID().Equal(c.id) {
				t.Errorf("responder sees identity %v", rs[0].PeerID())
			}
		})
	}
}

// TestCertificateRefused has the responder refuse the initiator's
// certificate: from another CA, expired, or naming an identity it does not
// hold (an initiator whose own check was skipped), and an AUTH signed by
// another key. Each is counted by reason and leaves no SA.
func TestCertificateRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(t *testing.T, ic, rc *Config, ca *certgen.CA)
		reason string
	}{
		{"other CA", func(t *testing.T, ic, rc *Config, _ *certgen.CA) {
			other, err := certgen.NewCA(certgen.ECDSA256, "espgw test CA")
			if err != nil {
				t.Fatal(err)
			}
			rc.CAs = []*x509.Certificate{other.Cert}
		}, "certificate not trusted"},
		{"expired", func(t *testing.T, ic, rc *Config, ca *certgen.CA) {
			old, err := ca.Issue(certgen.ECDSA256, "gw1", []string{"gw1"}, certgen.Options{NotBefore: time.Now().Add(-48 * time.Hour),
				NotAfter: time.Now().Add(-24 * time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			ic.Certs, ic.Key = []*x509.Certificate{old.Cert}, old.Key
		}, "certificate not trusted"},
		{"psk expected, signature sent", func(t *testing.T, ic, rc *Config, _ *certgen.CA) {
			rc.CAs, rc.PSK = nil, []byte("a pre-shared key of some length")
		}, "authentication method not configured"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ic, rc, ca := certConfigs(t, certgen.ECDSA256)
			c.change(t, &ic, &rc, ca)
			p := newPair(t, ic, rc, 0)
			_, err := p.i.Initiate(context.Background(), netip.AddrPortFrom(p.rAddr, Port))
			if err == nil || !strings.Contains(err.Error(), "AUTHENTICATION_FAILED") {
				t.Fatalf("initiate: %v, want AUTHENTICATION_FAILED", err)
			}
			if n := p.r.Counts()[c.reason]; n != 1 {
				t.Errorf("responder counts %v, want %q once", p.r.Counts(), c.reason)
			}
			if len(p.i.SAs())+len(p.r.SAs()) != 0 {
				t.Error("IKE SAs left after a refused certificate")
			}
		})
	}
}

// TestCertificateIdentityForged has an initiator claim an identity its
// certificate does not hold (its config check bypassed): the responder
// refuses it.
func TestCertificateIdentityForged(t *testing.T) {
	ic, rc, _ := certConfigs(t, certgen.ECDSA256)
	rc.RemoteID = Identity{}
	p := newPair(t, ic, rc, 0)
	p.i.cfg.LocalID = FQDN("gw3")
	_, err := p.i.Initiate(context.Background(), netip.AddrPortFrom(p.rAddr, Port))
	if err == nil || !strings.Contains(err.Error(), "AUTHENTICATION_FAILED") {
		t.Fatalf("initiate as gw3 with gw1's certificate: %v", err)
	}
	if n := p.r.Counts()["identity not in the certificate"]; n != 1 {
		t.Errorf("responder counts %v", p.r.Counts())
	}
}

// TestCertificateChain has the initiator's certificate issued by an
// intermediate CA it sends along; the responder trusts the root alone.
func TestCertificateChain(t *testing.T) {
	ic, rc, ca := certConfigs(t, certgen.RSA)
	sub, err := ca.SubCA(certgen.ECDSA256, "espgw test intermediate")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := sub.Issue(certgen.ECDSA256, "gw1", []string{"gw1"}, certgen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ic.Certs, ic.Key = []*x509.Certificate{leaf.Cert, sub.Cert}, leaf.Key
	p := newPair(t, ic, rc, 0)
	if _, err := p.i.Initiate(context.Background(), netip.AddrPortFrom(p.rAddr, Port)); err != nil {
		t.Fatalf("%v; responder counts %v", err, p.r.Counts())
	}
	// Without the intermediate the chain does not verify.
	ic.Certs = ic.Certs[:1]
	q := newPairAt(t, ic, rc, "127.83.76.1", "127.83.76.2")
	if _, err := q.i.Initiate(context.Background(), netip.AddrPortFrom(q.rAddr, Port)); err == nil {
		t.Fatal("a chain without its intermediate verified")
	}
	if n := q.r.Counts()["certificate not trusted"]; n != 1 {
		t.Errorf("responder counts %v", q.r.Counts())
	}
}

// TestLoadCredentials reads what certgen writes, and refuses a key that
// is not the certificate's.
func TestLoadCredentials(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA(certgen.ECDSA256, "espgw test CA")
	if err != nil {
		t.Fatal(err)
	}
	for _, kt := range []certgen.KeyType{certgen.RSA, certgen.ECDSA256, certgen.Ed25519} {
		leaf, err := ca.Issue(kt, "gw1", []string{"gw1"}, certgen.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cp, kp := filepath.Join(dir, string(kt)+".pem"), filepath.Join(dir, string(kt)+".key")
		if err := certgen.WriteCerts(cp, leaf.Cert, ca.Cert); err != nil {
			t.Fatal(err)
		}
		if err := certgen.WriteKey(kp, leaf.Key); err != nil {
			t.Fatal(err)
		}
		certs, err := LoadCertificates(cp)
		if err != nil || len(certs) != 2 {
			t.Fatalf("%s: %d certificates, %v", kt, len(certs), err)
		}
		key, err := LoadPrivateKey(kp)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkCredentials(certs, key, FQDN("gw1")); err != nil {
			t.Errorf("%s: %v", kt, err)
		}
		if err := checkCredentials([]*x509.Certificate{ca.Cert}, key, FQDN("gw1")); err == nil || !strings.Contains(err.Error(), "not the key of") {
			t.Errorf("%s: a key with another's certificate: %v", kt, err)
		}
	}
	if _, err := LoadCertificates(filepath.Join(dir, "rsa.key")); err == nil || !strings.Contains(err.Error(), "want CERTIFICATE") {
		t.Errorf("a key read as certificates: %v", err)
	}
}
