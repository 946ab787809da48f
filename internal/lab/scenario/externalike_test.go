package scenario

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/certgen"
	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/internal/lab/testbed"
)

const ikeDoc = `name: by-ike
peer: external
external:
  wan: {interface: eth9, address: 198.51.100.1/24, dut: 198.51.100.129}
  lan: {interface: eth8, address: 203.0.113.10/24, dut: 203.0.113.1}
  near: 192.0.2.0/24
  ike:
    local: {id: gw1.example}
    remote: {id: appliance.example}
    psk_file: psk
    proposals: aes128-sha256-x25519
    esp_proposals: aes128gcm16
    rekey_time: 5s
traffic:
  steps:
    - {name: up, udp: {packets: 10}}
expect:
  delivered: == 1
  ike.rekeys: ">= 1"
`

// external.ike: the defaults come from the links, and the ike: section
// gw1 runs with is one the gateway accepts.
func TestExternalIKE(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "psk"), []byte("an example key only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "ike.yaml")
	scs, err := Parse(file, []byte(ikeDoc))
	if err != nil {
		t.Fatal(err)
	}
	s := scs[0]
	x := s.External.IKE
	if len(x.remoteAddrs) != 1 || x.remoteAddrs[0] != netip.MustParseAddr("198.51.100.129") ||
		x.localTS[0].String() != "192.0.2.0/24" || x.remoteTS[0].String() != "203.0.113.0/24" {
		t.Errorf("defaults: remote %v, ts %v ↔ %v", x.remoteAddrs, x.localTS, x.remoteTS)
	}
	if s.SA.Mode != "tunnel" || s.SA.Suite != "ike" || x.pskPath != filepath.Join(dir, "psk") {
		t.Errorf("mode %q suite %q psk %q", s.SA.Mode, s.SA.Suite, x.pskPath)
	}
	c := gw1Config(t, x)
	conn := c.IKE.Connections[0]
	gw1ID, _ := ike.ParseIdentity("gw1.example")
	ch := conn.Children[0]
	if conn.RemoteAddrs[0].String() != "198.51.100.129" || !conn.LocalID.Equal(gw1ID) || string(conn.PSK) != "an example key only" ||
		ch.StartAction != "start" || ch.RekeyTime.String() != "5s" || ch.ESPText != "aes128gcm16" || ch.LocalTS[0].String() != "192.0.2.0/24" {
		t.Errorf("gw1's connection: %+v %s %q, child %+v", conn, conn.LocalID, conn.PSK, ch)
	}
	withCounters := *s.External
	withCounters.Counters = "true"
	x2 := &externalGW2{e: &withCounters}
	x2.setChild(0xc0000001, 0xc0000002)
	x2.refreshChild(t.Context())
	x2.refreshChild(t.Context())
	if x2.rekeyed() {
		t.Error("one CHILD_SA seen twice counted as a rekey")
	}
	if h := x2.hint(Metrics{}, false); !strings.Contains(h, "list no state with SPI 0xc0000001, which gw1 negotiated") {
		t.Errorf("hint without the device's state: %q", h)
	}
	x2.current = func(context.Context) (uint32, uint32, bool) { return 0xc0000003, 0xc0000004, true }
	x2.refreshChild(t.Context())
	if !x2.rekeyed() || x2.out.SPI != 0xc0000003 || x2.in.SPI != 0xc0000004 {
		t.Errorf("after a rekey: rekeyed %v, SAs %#x/%#x, seen %v", x2.rekeyed(), x2.out.SPI, x2.in.SPI, x2.spis)
	}
	if h := x2.hint(Metrics{}, false); !strings.Contains(h, "a rekey replaced the CHILD_SA during the run (0xc0000001/0xc0000002 then") {
		t.Errorf("hint after a rekey: %q", h)
	}
}

// What external.ike cannot take is refused at load, at its line.
func TestExternalIKERefused(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "psk"), []byte("an example key only\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "empty"), nil, 0o600)
	os.WriteFile(filepath.Join(dir, "sas.yaml"), []byte("sa: []\n"), 0o600)
	file := filepath.Join(dir, "ike.yaml")
	for _, c := range []struct{ from, to, want string }{
		{"  ike:\n", "  sa-file: sas.yaml\n  ike:\n", "external.sa-file: give the SA file or ike, not both"},
		{"  ike:\n", "  setup: \"true\"\n  ike:\n", "external.setup: with ike the device's IKE daemon installs the SAs"},
		{"    psk_file: psk\n", "", "external.ike: no pre-shared key"},
		{"psk_file: psk", "psk_file: missing", "external.ike.psk_file: the pre-shared key: no such file"},
		{"psk_file: psk", "psk_file: empty", "external.ike.psk_file: \"empty\" is empty"},
		{"psk_file: psk", "psk_env: ESPGW_TEST_UNSET_PSK", "external.ike.psk_env: the environment variable \"ESPGW_TEST_UNSET_PSK\" is not set"},
		{"proposals: aes128-sha256-x25519", "proposals: aes128-md4-x25519", "external.ike.proposals:"},
		{"esp_proposals: aes128gcm16", "esp_proposals: rot13", "external.ike.esp_proposals:"},
		{"  ike:\n", "  ike:\n    remote_addrs: [\"2001:db8::1\"]\n", "external.ike.remote_addrs: \"2001:db8::1\": want the device's IKE address, of wan's family"},
		{"  ike:\n", "  ike:\n    local_ts: [192.0.2.0]\n", "external.ike.local_ts: \"192.0.2.0\": want a prefix"},
		{"rekey_time: 5s", "rekey_time: soon", "external.ike.rekey_time:"},
		{"  lan: {interface: eth8, address: 203.0.113.10/24, dut: 203.0.113.1}\n", "", "external.lan.interface"},
		{"    rekey_time: 5s\n", "    rekey_time: 5s\n    lifetime: 1h\n", "lifetime"},
	} {
		doc := strings.Replace(ikeDoc, c.from, c.to, 1)
		if doc == ikeDoc {
			t.Fatalf("%q is not in the document", c.from)
		}
		_, err := Parse(file, []byte(doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q → %q: %v, want %q", c.from, c.to, err, c.want)
		}
	}
	// ike.* metrics need external.ike.
	if _, err := Parse(file, []byte("traffic: {steps: [{ping: {}}]}\nexpect: {ike.rekeys: \">= 1\"}\n")); err == nil || !strings.Contains(err.Error(), "unknown metric") {
		t.Errorf("ike.rekeys without external.ike: %v", err)
	}
}

// external.ike with mode: transport: the selectors are gw1's and the
// device's addresses, no LAN, pings from gw1 to the device; gw1's child
// asks for transport mode. What does not fit is refused.
func TestExternalIKETransport(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "psk"), []byte("an example key only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "ike.yaml")
	transport := strings.NewReplacer(
		"  lan: {interface: eth8, address: 203.0.113.10/24, dut: 203.0.113.1}\n", "",
		"  near: 192.0.2.0/24\n", "",
		"    rekey_time: 5s\n", "    mode: transport\n",
		"    - {name: up, udp: {packets: 10}}\n", "    - {name: sweep, ping: {count: 3}}\n",
		"  ike.rekeys: \">= 1\"\n", "").Replace(ikeDoc)
	scs, err := Parse(file, []byte(transport))
	if err != nil {
		t.Fatal(err)
	}
	s := scs[0]
	x := s.External.IKE
	if s.SA.Mode != "transport" || x.localTS[0].String() != "198.51.100.1/32" || x.remoteTS[0].String() != "198.51.100.129/32" {
		t.Errorf("mode %q, selectors %v ↔ %v", s.SA.Mode, x.localTS, x.remoteTS)
	}
	if st := s.Traffic.Steps[0].Ping; st.From != "gw1" || st.To != "gw2" {
		t.Errorf("the ping goes from %s to %s, want gw1 to gw2 (the device)", st.From, st.To)
	}
	c := gw1Config(t, x)
	if ch := c.IKE.Connections[0].Children[0]; !ch.Transport {
		t.Errorf("gw1's child is not transport mode: %+v", ch)
	}
	for _, c := range []struct{ from, to, want string }{
		{"    mode: transport\n", "    mode: beet\n", `external.ike.mode: "beet": want tunnel or transport`},
		{"    mode: transport\n", "    mode: transport\n    local_ts: [192.0.2.0/24]\n", "transport mode protects gw1's and the device's own traffic"},
		{"  ike:\n", "  near: 192.0.2.0/24\n  ike:\n", "external.near: transport-mode SAs carry traffic between gw1 and the device itself"},
		{"    - {name: sweep, ping: {count: 3}}\n", "    - {name: up, udp: {packets: 10}}\n", "ping steps only"},
	} {
		doc := strings.Replace(transport, c.from, c.to, 1)
		if doc == transport {
			t.Fatalf("%q is not in the document", c.from)
		}
		if _, err := Parse(file, []byte(doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q → %q: %v, want %q", c.from, c.to, err, c.want)
		}
	}
}

// external.ike with certificates instead of a PSK: the files resolved
// beside the scenario, gw1's section taken by the gateway; a missing
// file, no PSK without certificates and a key that is not the
// certificate's are refused at load.
func TestExternalIKECertificates(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA(certgen.ECDSA256, "test CA")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gw1", "other"} {
		is, err := ca.Issue(certgen.ECDSA256, "gw1.example", []string{"gw1.example"}, certgen.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := certgen.WriteCerts(filepath.Join(dir, name+".pem"), is.Cert); err != nil {
			t.Fatal(err)
		}
		if err := certgen.WriteKey(filepath.Join(dir, name+".key"), is.Key); err != nil {
			t.Fatal(err)
		}
	}
	if err := certgen.WriteCerts(filepath.Join(dir, "ca.pem"), ca.Cert); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "ike.yaml")
	doc := strings.NewReplacer("    local: {id: gw1.example}\n", "    local: {id: gw1.example, auth: pubkey, certs: [gw1.pem]}\n",
		"    remote: {id: appliance.example}\n", "    remote: {id: appliance.example, auth: pubkey, cacerts: [ca.pem]}\n",
		"    psk_file: psk\n", "    secrets: {ecdsa-gw1: {file: gw1.key}}\n").Replace(ikeDoc)
	scs, err := Parse(file, []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	x := scs[0].External.IKE
	c := gw1Config(t, x)
	if conn := c.IKE.Connections[0]; conn.LocalAuth != "pubkey" || len(conn.Certs) != 1 || conn.Key == nil || len(conn.CAs) != 1 || len(conn.PSK) != 0 {
		t.Errorf("gw1's connection: auth %s, %d certificates, key %v, %d CAs, PSK %d bytes", conn.LocalAuth, len(conn.Certs), conn.Key != nil, len(conn.CAs), len(conn.PSK))
	}
	for _, c := range []struct{ from, to, want string }{
		{"certs: [gw1.pem]", "certs: [nosuch.pem]", `external.ike.local.certs: "nosuch.pem": no such file`},
		{"cacerts: [ca.pem]", "cacerts: [nosuch.pem]", `external.ike.remote.cacerts: "nosuch.pem": no such file`},
		{"auth: pubkey, certs: [gw1.pem]", "certs: [gw1.pem]", "external.ike: no pre-shared key"},
		{"file: gw1.key", "file: other.key", "gw1's connection to the device (ike.connections.device) would be refused"},
	} {
		bad := strings.Replace(doc, c.from, c.to, 1)
		if bad == doc {
			t.Fatalf("%q is not in the document", c.from)
		}
		if _, err := Parse(file, []byte(bad)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q → %q: %v, want %q", c.from, c.to, err, c.want)
		}
	}
}

// gw1Config is gw1's configuration with the ike: section x makes for it,
// as the gateway reads it.
func gw1Config(t *testing.T, x *ExternalIKE) *gateway.Config {
	t.Helper()
	section, err := x.gatewayIKE(netip.MustParseAddr("198.51.100.1"), "")
	if err != nil {
		t.Fatal(err)
	}
	conf := testbed.GatewayConfig{Local: netip.MustParseAddr("198.51.100.1"), TUN: "esp0", Extra: section}.String()
	c, err := gateway.ParseConfig(filepath.Join(t.TempDir(), "gw1.yaml"), []byte(conf), sim.Engines{})
	if err != nil {
		t.Fatalf("gw1's config:\n%s\n%v", conf, err)
	}
	return c
}
