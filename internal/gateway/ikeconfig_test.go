package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/sim"
)

// The README's example pair loads, with the PSK from the environment.
func TestIKEConfigExamples(t *testing.T) {
	t.Setenv("ESPGW_PSK", "example pre-shared key")
	for _, name := range []string{"ike-gw1.yaml", "ike-gw2.yaml"} {
		cfg, err := gateway.LoadConfig(filepath.Join("..", "..", "docs", "examples", name), sim.Engines{})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.IKE == nil || len(cfg.IKE.Connections) != 1 || len(cfg.IKE.Connections[0].Children) != 1 || len(cfg.SAs) != 0 {
			t.Fatalf("%s: ike %+v, SAs %d: want one connection with one child and no SAs", name, cfg.IKE, len(cfg.SAs))
		}
		// Both rekey (swanctl's default lifetimes follow from rekey_time).
		ikeRekey, childRekey, life, rand := 4*time.Hour, time.Hour, 66*time.Minute, 6*time.Minute
		c := cfg.IKE.Connections[0]
		if string(c.PSK) != "example pre-shared key" || c.DPDDelay != 10*time.Second || c.RekeyTime != ikeRekey || c.RandTime != ikeRekey/10 {
			t.Errorf("%s: connection %s: dpd %s, rekey %s, or the PSK not read", name, c.Name, c.DPDDelay, c.RekeyTime)
		}
		ch := c.Children[0]
		if ch.RekeyTime != childRekey || ch.LifeTime != life || ch.RandTime != rand {
			t.Errorf("%s: child %s: rekey %s life %s rand %s, want %s, %s, %s", name, ch.Name, ch.RekeyTime, ch.LifeTime, ch.RandTime, childRekey, life, rand)
		}
	}
}

// An ike: section that cannot work is refused with file, line and field;
// the PSK is never in the message.
func TestIKEConfigRefused(t *testing.T) {
	dir := t.TempDir()
	psk := filepath.Join(dir, "psk")
	if err := os.WriteFile(psk, []byte("s3cret-psk-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("IKEGW_TEST_PSK", "s3cret-psk-value")
	conn := func(conn, child string) string {
		return `local: 192.0.2.1
ike:
  connections:
    a:
      local_addrs: [192.0.2.1]
      remote_addrs: [192.0.2.2]
      psk_file: psk
` + conn + `      children:
        c:
          local_ts: 10.1.0.0/24
          remote_ts: 10.2.0.0/24
` + child
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"ESP proposal espgw cannot do", conn("", "          esp_proposals: camellia256ccm16\n"),
			`gw.yaml:12: ike.connections.a.children.c.esp_proposals: ESP proposal 1 "camellia256ccm16": unknown or unsupported algorithm "camellia256ccm16"`},
		{"ESP proposal of an algorithm espgw has not", conn("", "          esp_proposals: 3des-sha1\n"),
			`esp_proposals: ESP proposal 1 "3des-sha1": unknown or unsupported algorithm "3des"`},
		{"key pasted into a proposal", conn("", "          esp_proposals: deadbeefdeadbeefdeadbeef\n"), "esp_proposals: ESP proposal 1 (a value, not shown): unknown or unsupported algorithm (a value, not shown)"},
		{"IKE proposal espgw cannot do", conn("      proposals: aes128-sha256-modp1024\n", ""),
			`gw.yaml:8: ike.connections.a.proposals: IKE proposal 1 "aes128-sha256-modp1024": unknown or unsupported algorithm "modp1024"`},
		{"AEAD with integrity", conn("", "          esp_proposals: aes128gcm16-sha256\n"), "an integrity algorithm with an AEAD cipher"},
		{"unknown connection setting", conn("      rekey: 1h\n", ""), `gw.yaml:8: ike.connections.a: unknown setting "rekey"`},
		{"unknown child setting", conn("", "          lifetime: 1h\n"), `ike.connections.a.children.c: unknown setting "lifetime"`},
		{"unknown mode", conn("", "          mode: beet\n"), `gw.yaml:12: ike.connections.a.children.c.mode: "beet": want tunnel or transport`},
		{"transport mode of networks", conn("", "          mode: transport\n"), "gw.yaml:10: ike.connections.a.children.c.local_ts: [10.1.0.0/24]: transport mode protects the hosts' own traffic, want 192.0.2.1/32"},
		{"transport mode without a peer", strings.Replace(conn("", "          mode: transport\n"), "remote_addrs: [192.0.2.2]", "remote_addrs: [\"%any\"]", 1), "children.c.mode: transport mode needs local_addrs and the peer's address in remote_addrs"},
		{"trap without a peer", strings.Replace(conn("", "          start_action: trap\n"), "remote_addrs: [192.0.2.2]", "remote_addrs: [\"%any\"]", 1), "start_action: trap needs the peer's address"},
		{"unknown start action", conn("", "          start_action: route\n"), `start_action: "route": want start, trap or none`},
		{"bad duration", conn("", "          rekey_time: soon\n"), `gw.yaml:12: ike.connections.a.children.c.rekey_time: "soon": want a duration`},
		{"life before rekey", conn("", "          rekey_time: 1h\n          life_time: 30m\n"), "life_time: 30m0s is not after rekey_time 1h0m0s"},
		{"dpd_delay", conn("      dpd_delay: -1s\n", ""), "ike.connections.a.dpd_delay"},
		{"local address not the gateway's", strings.Replace(conn("", ""), "local_addrs: [192.0.2.1]", "local_addrs: [192.0.2.9]", 1), "192.0.2.9 is not one of the gateway's local addresses"},
		{"bad remote address", strings.Replace(conn("", ""), "remote_addrs: [192.0.2.2]", "remote_addrs: [gw2]", 1), `gw.yaml:6: ike.connections.a.remote_addrs: "gw2" is not an IP address`},
		{"missing PSK file", strings.Replace(conn("", ""), "psk_file: psk", "psk_file: nosuch", 1), `ike.connections.a.psk_file: read "nosuch": no such file or directory`},
		{"empty PSK file", strings.Replace(conn("", ""), "psk_file: psk", "psk_file: empty", 1), `psk_file: "empty" is empty`},
		{"PSK variable unset", strings.Replace(conn("", ""), "psk_file: psk", "psk_env: IKEGW_NOT_SET", 1), `psk_env: the environment variable "IKEGW_NOT_SET" is not set or empty`},
		{"two PSKs", conn("      psk_env: IKEGW_TEST_PSK\n", ""), "give one of psk_file and psk_env, not both"},
		{"no PSK", strings.Replace(conn("", ""), "      psk_file: psk\n", "", 1), "no pre-shared key"},
		{"no children", strings.Split(conn("", ""), "      children:")[0], "ike.connections.a.children: missing"},
		{"two children, one without selectors", conn("", "        d:\n          local_ts: 10.3.0.0/24\n"), "gw.yaml:13: ike.connections.a.children.d: want local_ts and remote_ts"},
		{"no selectors", strings.Replace(conn("", ""), "          remote_ts: 10.2.0.0/24\n", "", 1), "want local_ts and remote_ts"},
		{"start without a peer", strings.Replace(conn("", "          start_action: start\n"), "remote_addrs: [192.0.2.2]", "remote_addrs: [\"%any\"]", 1), "start needs the peer's address"},
		{"auth neither psk nor pubkey", conn("      local: {id: a.example, auth: eap}\n", ""), `ike.connections.a.local.auth: "eap": want psk or pubkey`},
		{"IKEv1", conn("      version: 1\n", ""), "espgw speaks IKEv2 only"},
		{"no connections", "local: 192.0.2.1\nike: {}\n", "gw.yaml:2: ike.connections: missing"},
		{"ike not a mapping", "local: 192.0.2.1\nike: yes\n", "gw.yaml:2: ike: want a mapping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gateway.ParseConfig(filepath.Join(dir, "gw.yaml"), []byte(tc.yaml), sim.Engines{})
			if err == nil {
				t.Fatalf("accepted, want an error containing %q", tc.want)
			}
			msg := strings.ReplaceAll(err.Error(), dir+"/", "")
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q, want it to contain %q", msg, tc.want)
			}
			if strings.Contains(msg, "s3cret") {
				t.Errorf("error %q shows the PSK", msg)
			}
		})
	}
	good := conn("      psk_file: psk\n", "")
	good = strings.Replace(good, "      psk_file: psk\n", "", 1)
	cfg, err := gateway.ParseConfig(filepath.Join(dir, "gw.yaml"), []byte(good), sim.Engines{})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(cfg.IKE.Connections[0].PSK); got != "s3cret-psk-value" {
		t.Errorf("PSK %q from the file, want it without its newline", got)
	}
}

// mode: transport with the selectors left out protects the two IKE
// addresses; the peer's traffic is routed into the TUN.
func TestIKEConfigTransport(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "psk"), []byte("s3cret-psk-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, selectors string }{
		{"selectors left out", ""},
		{"selectors the hosts", "          local_ts: 192.0.2.1/32\n          remote_ts: 192.0.2.2/32\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := `local: 192.0.2.1
ike:
  connections:
    a:
      local_addrs: [192.0.2.1]
      remote_addrs: [192.0.2.2]
      psk_file: psk
      children:
        c:
          mode: transport
` + tc.selectors
			cfg, err := gateway.ParseConfig(filepath.Join(dir, "gw.yaml"), []byte(yaml), sim.Engines{})
			if err != nil {
				t.Fatal(err)
			}
			ch := cfg.IKE.Connections[0].Children[0]
			if !ch.Transport || fmt.Sprint(ch.LocalTS, ch.RemoteTS) != "[192.0.2.1/32] [192.0.2.2/32]" {
				t.Errorf("child: transport %v, selectors %v %v", ch.Transport, ch.LocalTS, ch.RemoteTS)
			}
		})
	}
}
