package strongswan

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/lab/certgen"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/sa"
)

// testCerts are a CA made for one test and the certificates of gw1
// (espgw) and gw2 (charon), which hold the DNS names gw1 and gw2.
type testCerts struct {
	ca       *certgen.CA
	gw1, gw2 *certgen.Issued
}

// useCertificates makes the test's CA and certificates, writes charon's
// as PEM files in its directory and sets both configurations to
// authenticate with them instead of the PSK.
func useCertificates(t *testing.T, n negotiation, cfg *ike.Config, ch *Config) *testCerts {
	t.Helper()
	ca, err := certgen.NewCA(n.keyType, "espgw test CA")
	if err != nil {
		t.Fatal(err)
	}
	c := &testCerts{ca: ca}
	if c.gw1, err = ca.Issue(n.keyType, "gw1", []string{"gw1"}, certgen.Options{}); err != nil {
		t.Fatal(err)
	}
	if c.gw2, err = ca.Issue(n.keyType, "gw2", []string{"gw2"}, certgen.Options{}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ch.Cert, ch.Key, ch.CA = filepath.Join(dir, "gw2.pem"), filepath.Join(dir, "gw2.key"), filepath.Join(dir, "ca.pem")
	for _, err := range []error{certgen.WriteCerts(ch.Cert, c.gw2.Cert), certgen.WriteKey(ch.Key, c.gw2.Key), certgen.WriteCerts(ch.CA, ca.Cert)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	ch.KeyType = map[certgen.KeyType]string{certgen.RSA: "RSA", certgen.Ed25519: "PKCS8"}[n.keyType]
	if ch.KeyType == "" {
		ch.KeyType = "ECDSA"
	}
	ch.PSK = ""
	if n.classic {
		ch.Options = append(ch.Options, "signature_authentication = no")
	}
	if n.pss {
		ch.Options = append(ch.Options, "rsa_pss = yes")
	}
	cfg.PSK, cfg.Certs, cfg.Key, cfg.CAs = nil, []*x509.Certificate{c.gw1.Cert}, c.gw1.Key, []*x509.Certificate{ca.Cert}
	cfg.ClassicSignatures, cfg.RSAPSS = n.classic, n.pss
	return c
}

// TestIKECertificatesWithCharon authenticates espgw and charon to each
// other with X.509 certificates from a CA made at test time, RSA, ECDSA
// and Ed25519, each side initiating, with RFC 7427 Digital Signatures
// (PKCS #1 v1.5 and PSS), and with the classic RSA and ECDSA methods 1, 9
// and 10 (charon's signature_authentication = no). charon must log that it
// verified espgw's AUTH with the expected scheme and hold the IKE SA
// and CHILD_SA; espgw must hold charon's certificate, and the CHILD_SA
// keys must be charon's. Then a liveness check, an IKE SA rekey and a
// Delete.
func TestIKECertificatesWithCharon(t *testing.T) {
	if testing.Short() {
		t.Skip("runs charon in namespaces; run without -short")
	}
	if err := CheckInstalled(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		n    negotiation
		// scheme is how charon names the signature it verified.
		scheme string
	}{
		{"rsa/espgw-initiates", negotiation{keyType: certgen.RSA}, "RSA_EMSA_PKCS1_SHA2_256"},
		{"rsa/charon-initiates", negotiation{keyType: certgen.RSA, charonInitiates: true}, "RSA_EMSA_PKCS1_SHA2_256"},
		{"ecdsa-p256/espgw-initiates", negotiation{keyType: certgen.ECDSA256}, "ECDSA_WITH_SHA256_DER"},
		{"ecdsa-p384/charon-initiates", negotiation{keyType: certgen.ECDSA384, charonInitiates: true}, "ECDSA_WITH_SHA384_DER"},
		{"rsa-pss/espgw-initiates", negotiation{keyType: certgen.RSA, pss: true}, "RSA_EMSA_PSS"},
		{"rsa-classic/espgw-initiates", negotiation{keyType: certgen.RSA, classic: true}, "RSA signature"},
		{"ecdsa-p256-classic/charon-initiates", negotiation{keyType: certgen.ECDSA256, classic: true, charonInitiates: true}, "ECDSA-256"},
		{"ecdsa-p384-classic/espgw-initiates", negotiation{keyType: certgen.ECDSA384, classic: true}, "ECDSA-384"},
		{"ed25519/espgw-initiates", negotiation{keyType: certgen.Ed25519}, "ED25519"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			c.n.ike, c.n.charonIKE, c.n.esp = "aes128-sha256-x25519", "aes128-sha256-x25519", "aes128gcm16"
			r := negotiateWith(t, ctx, c.n)
			if got := r.s.PeerCertificate(); got == nil || !bytes.Equal(got.Raw, r.certs.gw2.Cert.Raw) {
				t.Fatalf("espgw does not hold charon's certificate")
			}
			if !r.s.PeerID().Equal(ike.FQDN("gw2")) {
				t.Errorf("espgw authenticated %s, want fqdn gw2", r.s.PeerID())
			}
			in, out, err := r.child.SAs()
			if err != nil {
				t.Fatal(err)
			}
			sameKeys(t, r.charon.LogPath(), in, out)
			log, err := os.ReadFile(r.charon.LogPath())
			if err != nil {
				t.Fatal(err)
			}
			verified := regexp.MustCompile(`authentication of 'gw1' with (.+?) successful`).FindSubmatch(log)
			if verified == nil {
				t.Fatalf("charon's log says nothing of verifying gw1:\n%s", log)
			}
			if got := string(verified[1]); !strings.HasPrefix(got, c.scheme) {
				t.Errorf("charon verified espgw's AUTH with %s, want %s", got, c.scheme)
			}
			if !bytes.Contains(log, []byte(`"C=CH, O=espgw test, CN=gw1"`)) {
				t.Errorf("charon's log does not name espgw's certificate")
			}
			if err := r.s.Ping(ctx); err != nil {
				t.Fatalf("liveness check: %v", err)
			}
			s, err := r.s.Rekey(ctx)
			if err != nil {
				t.Fatalf("IKE SA rekey: %v", err)
			}
			if err := s.Delete(ctx); err != nil {
				t.Fatalf("delete: %v", err)
			}
			waitFor(t, 10*time.Second, func() bool { st, _ := r.charon.Status(ctx); return !strings.Contains(st, "ESTABLISHED") },
				func() string { return fmt.Sprintf("charon keeps the IKE SA espgw deleted; counts %v", r.ep.Counts()) })
			t.Logf("charon verified espgw with %s; espgw counts %v", verified[1], r.ep.Counts())
		})
	}
}

// TestIKEInitiateWithCertificates has `espgw ike initiate --cert --key
// --ca` on gw1 authenticate to charon on gw2 with an ECDSA certificate,
// its identity its subject DN (no --local-id), and check charon's
// certificate: the SA file it writes must hold charon's CHILD_SA keys.
func TestIKEInitiateWithCertificates(t *testing.T) {
	if testing.Short() {
		t.Skip("runs charon in namespaces; run without -short")
	}
	if err := CheckInstalled(); err != nil {
		t.Fatal(err)
	}
	labtest.NeedNamespaces(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bin := labtest.Espgw(t)
	topo, err := netns.NewTopology("ic", netns.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	a := topo.Addr
	dir := t.TempDir()
	ch := Config{NS: topo.GW2, Dir: filepath.Join(dir, "gw2"), Local: a.GW2WAN4.Addr(), Remote: a.GW1WAN4.Addr(),
		LocalNet: a.LANB4, RemoteNet: a.LANA4, ID: "gw2", PeerID: "C=CH, O=espgw test, CN=gw1", IKE: "aes128-sha256-x25519", ESP: "aes128gcm16"}
	var cfg ike.Config
	certs := useCertificates(t, negotiation{keyType: certgen.ECDSA256}, &cfg, &ch)
	// charon's rightid is a DN: the @ of an FQDN would not fit.
	ch.PeerID = ""
	ch.PeerDN = "C=CH, O=espgw test, CN=gw1"
	gw1Cert, gw1Key, caFile := filepath.Join(dir, "gw1.pem"), filepath.Join(dir, "gw1.key"), filepath.Join(dir, "ca.pem")
	for _, err := range []error{certgen.WriteCerts(gw1Cert, certs.gw1.Cert), certgen.WriteKey(gw1Key, certs.gw1.Key), certgen.WriteCerts(caFile, certs.ca.Cert)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	c, err := Start(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	if err := c.WaitConnection(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	sas := filepath.Join(dir, "sas.yaml")
	out, err := topo.GW1.Output(ctx, bin, "ike", "initiate", "--local", a.GW1WAN4.Addr().String(), "--remote", a.GW2WAN4.Addr().String(),
		"--remote-id", "@gw2", "--cert", gw1Cert, "--key", gw1Key, "--ca", caFile,
		"--local-ts", a.LANA4.String(), "--remote-ts", a.LANB4.String(), "--esp-proposals", "aes128gcm16", "--out", sas)
	if err != nil {
		t.Fatalf("%v\ncharon:\n%s", err, c.Output())
	}
	t.Logf("espgw ike initiate: %s", strings.TrimSpace(out))
	if _, err := c.Child(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	written, err := sa.Load(sas)
	if err != nil {
		t.Fatal(err)
	}
	if len(written.SAs) != 2 {
		t.Fatalf("the SA file has %d SAs, want 2", len(written.SAs))
	}
	sameKeys(t, c.LogPath(), written.SAs...)
	log, err := os.ReadFile(c.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(log, []byte("authentication of 'C=CH, O=espgw test, CN=gw1' with ECDSA_WITH_SHA256_DER successful")) {
		t.Errorf("charon did not log verifying espgw's DN identity with ECDSA-SHA256:\n%s", log)
	}
}

// TestIKEFragmentationWithCharon authenticates with RSA certificates,
// whose IKE_AUTH messages are larger than both sides' fragment sizes
// (espgw's 500 bytes, charon's fragment_size = 576), each side
// initiating: both announce IKEV2_FRAGMENTATION_SUPPORTED, send IKE_AUTH
// in SKF fragments and reassemble the other's; charon's log says it split
// and reassembled messages, espgw counts the same, and then the SAs carry
// a rekey and a Delete as usual.
func TestIKEFragmentationWithCharon(t *testing.T) {
	if testing.Short() {
		t.Skip("runs charon in namespaces; run without -short")
	}
	if err := CheckInstalled(); err != nil {
		t.Fatal(err)
	}
	for _, charonInitiates := range []bool{false, true} {
		name := "espgw-initiates"
		if charonInitiates {
			name = "charon-initiates"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			r := negotiateWith(t, ctx, negotiation{ike: "aes128-sha256-x25519", charonIKE: "aes128-sha256-x25519", esp: "aes128gcm16",
				charonInitiates: charonInitiates, keyType: certgen.RSA, fragmentSize: 500, charonOptions: []string{"fragment_size = 576"}})
			log, err := os.ReadFile(r.charon.LogPath())
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"splitting IKE message", "reassembled fragmented IKE message"} {
				if !bytes.Contains(log, []byte(want)) {
					t.Errorf("charon's log lacks %q:\n%s", want, log)
				}
			}
			counts := r.ep.Counts()
			if counts["message sent in fragments"] < 1 || counts["fragmented message reassembled"] < 1 {
				t.Errorf("espgw neither sent nor reassembled fragments: %v", counts)
			}
			in, out, err := r.child.SAs()
			if err != nil {
				t.Fatal(err)
			}
			sameKeys(t, r.charon.LogPath(), in, out)
			if _, err := r.s.RekeyChild(ctx, r.child); err != nil {
				t.Fatalf("CHILD_SA rekey: %v", err)
			}
			if err := r.s.Delete(ctx); err != nil {
				t.Fatalf("delete: %v", err)
			}
			t.Logf("espgw counts %v", r.ep.Counts())
		})
	}
}
