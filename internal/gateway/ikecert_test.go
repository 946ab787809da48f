package gateway_test

import (
	"crypto"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/certgen"
	"github.com/espgw/espgw/internal/lab/sim"
)

// certConfig is an ike: section authenticating with certificates, edited
// by the test's replacements.
const certConfig = `local: 192.0.2.1
ike:
  connections:
    a:
      local_addrs: [192.0.2.1]
      remote_addrs: [192.0.2.2]
      local: {auth: pubkey, certs: [gw1.pem]}
      remote: {auth: pubkey, id: "C=CH, O=espgw test, CN=gw2", cacerts: ca.pem}
      children:
        c:
          local_ts: 10.1.0.0/24
          remote_ts: 10.2.0.0/24
  secrets:
    private-gw1:
      file: gw1.key
`

// writePKI writes a CA, gw1's certificate and key, another key and a
// file that is no certificate into dir.
func writePKI(t *testing.T, dir string, kt certgen.KeyType) (*certgen.CA, *certgen.Issued) {
	t.Helper()
	ca, err := certgen.NewCA(kt, "espgw test CA")
	if err != nil {
		t.Fatal(err)
	}
	gw1, err := ca.Issue(kt, "gw1", []string{"gw1.example"}, certgen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := certgen.NewKey(kt)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{certgen.WriteCerts(filepath.Join(dir, "ca.pem"), ca.Cert), certgen.WriteCerts(filepath.Join(dir, "gw1.pem"), gw1.Cert),
		certgen.WriteKey(filepath.Join(dir, "gw1.key"), gw1.Key), certgen.WriteKey(filepath.Join(dir, "other.key"), other),
		os.WriteFile(filepath.Join(dir, "junk.pem"), []byte("not a certificate\n"), 0o600)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return ca, gw1
}

// Certificates, CAs and keys named as swanctl.conf names them are read
// and given to the ike package: the local identity defaults to the
// certificate's subject DN, a DN identity of the peer is taken.
func TestIKEConfigCertificates(t *testing.T) {
	for _, kt := range []certgen.KeyType{certgen.RSA, certgen.ECDSA256} {
		t.Run(string(kt), func(t *testing.T) {
			dir := t.TempDir()
			ca, gw1 := writePKI(t, dir, kt)
			cfg, err := gateway.ParseConfig(filepath.Join(dir, "gw.yaml"), []byte(certConfig), sim.Engines{})
			if err != nil {
				t.Fatal(err)
			}
			c := cfg.IKE.Connections[0]
			if c.LocalAuth != gateway.AuthPubkey || c.RemoteAuth != gateway.AuthPubkey || len(c.PSK) != 0 {
				t.Errorf("auth %s/%s, PSK of %d bytes: want pubkey both ways and no PSK", c.LocalAuth, c.RemoteAuth, len(c.PSK))
			}
			if len(c.Certs) != 1 || !c.Certs[0].Equal(gw1.Cert) || len(c.CAs) != 1 || !c.CAs[0].Equal(ca.Cert) {
				t.Fatalf("certs %v, CAs %v: want gw1's and the CA", c.Certs, c.CAs)
			}
			if c.Key == nil || !c.Key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(gw1.Cert.PublicKey) {
				t.Fatalf("the key of gw1's certificate not found among the secrets")
			}
			if c.LocalID.Kind != 0 {
				t.Errorf("local id %s, want none given (the ike package takes the subject DN)", c.LocalID)
			}
			want, _ := ike.ParseIdentity("C=CH, O=espgw test, CN=gw2")
			if !c.RemoteID.Equal(want) {
				t.Errorf("remote id %s, want %s", c.RemoteID, want)
			}
		})
	}
}

// Bad or missing certificate and key files are refused with file, line
// and field; no key material is shown.
func TestIKEConfigCertificatesRefused(t *testing.T) {
	dir := t.TempDir()
	writePKI(t, dir, certgen.ECDSA256)
	keyPEM, err := os.ReadFile(filepath.Join(dir, "gw1.key"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"missing certificate file", "certs: [gw1.pem]", "certs: [nosuch.pem]", `gw.yaml:7: ike.connections.a.local.certs: read "nosuch.pem": no such file or directory`},
		{"not a certificate", "certs: [gw1.pem]", "certs: [junk.pem]", `gw.yaml:7: ike.connections.a.local.certs: "junk.pem": no PEM CERTIFICATE block`},
		{"a key as certificate", "certs: [gw1.pem]", "certs: [gw1.key]", `ike.connections.a.local.certs: "gw1.key": PEM block 1 is "EC PRIVATE KEY", want CERTIFICATE`},
		{"missing CA file", "cacerts: ca.pem", "cacerts: nosuch.pem", `gw.yaml:8: ike.connections.a.remote.cacerts: read "nosuch.pem"`},
		{"bad CA file", "cacerts: ca.pem", "cacerts: junk.pem", `gw.yaml:8: ike.connections.a.remote.cacerts: "junk.pem": no PEM CERTIFICATE block`},
		{"missing key file", "file: gw1.key", "file: nosuch.key", `gw.yaml:15: ike.secrets.private-gw1.file: read "nosuch.key": no such file or directory`},
		{"not a key", "file: gw1.key", "file: junk.pem", `gw.yaml:15: ike.secrets.private-gw1.file: "junk.pem": no PEM block`},
		{"a certificate as key", "file: gw1.key", "file: ca.pem", `ike.secrets.private-gw1.file: "ca.pem": PEM block "CERTIFICATE", want PRIVATE KEY`},
		{"key of another certificate", "file: gw1.key", "file: other.key", `gw.yaml:7: ike.connections.a.local.certs: no private key in ike.secrets is the key of certificate CN=gw1,O=espgw test,C=CH`},
		{"no certificate", "local: {auth: pubkey, certs: [gw1.pem]}", "local: {auth: pubkey}", "ike.connections.a.local.certs: missing"},
		{"no CA", `cacerts: ca.pem}`, `}`, "ike.connections.a.remote.cacerts: missing"},
		{"certs in remote", "cacerts: ca.pem", "certs: ca.pem", "ike.connections.a.remote.certs: the peer's certificate comes in IKE_AUTH"},
		{"local identity not in the certificate", "local: {auth: pubkey,", "local: {auth: pubkey, id: gw9.example,", `gw.yaml:7: ike.connections.a.local.id: fqdn:"gw9.example" is not in certificate C=CH, O=espgw test, CN=gw1`},
		{"PSK and pubkey both ways", "      children:", "      psk_env: HOME\n      children:", "a pre-shared key, and neither side's auth is psk"},
		{"psk locally without a PSK", "local: {auth: pubkey, certs: [gw1.pem]}", "local: {auth: psk}", "no pre-shared key"},
		{"a PSK as a secret", "private-gw1:", "ike-gw1:", `ike.secrets.ike-gw1: want a private key's name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := strings.Replace(certConfig, tc.from, tc.to, 1)
			if conf == certConfig {
				t.Fatalf("%q not in the configuration", tc.from)
			}
			_, err := gateway.ParseConfig(filepath.Join(dir, "gw.yaml"), []byte(conf), sim.Engines{})
			if err == nil {
				t.Fatalf("accepted, want an error containing %q", tc.want)
			}
			msg := strings.ReplaceAll(err.Error(), dir+"/", "")
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q, want it to contain %q", msg, tc.want)
			}
			for _, line := range strings.Split(string(keyPEM), "\n")[1:3] {
				if strings.Contains(msg, line) {
					t.Errorf("error %q shows the private key", msg)
				}
			}
		})
	}
}
