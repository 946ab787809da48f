package gateway_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/sa"
)

// A configuration that is ambiguous, malformed or can never carry a packet
// is refused at load with the reason, never accepted to fail later.
func TestConfigRefused(t *testing.T) {
	const local = "local: 198.51.100.1\n"
	cbcSA := func(extra string) string {
		return `
sa:
  - spi: 0x1001
    src: 198.51.100.1
    dst: 198.51.100.129
    enc: aes-cbc
    enc-key: 0x00112233445566778899aabbccddeeff
    auth: hmac-sha1-96
    auth-key: 0x0011223344556677889900112233445566778899` + extra + "\n"
	}
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"empty file", "", "gw.yaml: empty file"},
		{"only a comment", "# nothing\n", "gw.yaml: empty file"},
		{"duplicate setting", local + "engine: cpu\nengine: ring\n" + goodSA, "gw.yaml:3: engine: given twice (first on line 2)"},
		{"duplicate local", local + local + goodSA, "gw.yaml:2: local: given twice (first on line 1)"},
		{"duplicate tun setting", local + "tun: {mtu: 1400, mtu: 1300}\n" + goodSA, "tun.mtu: given twice"},
		{"metrics mapping", local + "metrics: {a: 1}\n" + goodSA, "gw.yaml:2: metrics: want a single value, got a mapping"},
		{"metrics garbage", local + "metrics: everywhere\n" + goodSA, `metrics: "everywhere": want ADDRESS:PORT`},
		{"engine list", local + "engine: [cpu]\n" + goodSA, "engine: want a single value, got a list"},
		{"unknown engine", local + "engine: turbo\n" + goodSA, `engine: "turbo": unknown offload engine`},
		{"unknown emul profile", local + "engine: emul:nosuchcard\n" + goodSA, "unknown offload engine"},
		{"two documents", local + goodSA + "---\nlocal: 198.51.100.2\n", "more than one YAML document"},
		{"pmtu-expires not a duration", local + "pmtu-expires: soon\n" + goodSA, "pmtu-expires: \"soon\": want a duration from 1s to 24h"},
		{"nat-keepalive not a duration", local + "nat-keepalive: of\n" + goodSA, `nat-keepalive: "of" (did you mean "off"?): want auto, off or a duration from 1s to 1h`},
		{"nat-keepalive too short", local + "nat-keepalive: 100ms\n" + goodSA, "nat-keepalive"},
		{"pmtu-expires too short", local + "pmtu-expires: 10ms\n" + goodSA, "pmtu-expires"},
		{"reassembly memory too small", local + "reassembly: {memory: 1K}\n" + goodSA, "reassembly.memory: \"1K\": want bytes from 64K to 1G"},
		{"reassembly unknown setting", local + "reassembly: {size: 4M}\n" + goodSA, "unknown setting"},
		{"reassembly not a mapping", local + "reassembly: 4M\n" + goodSA, "reassembly: want a mapping"},
		{"tfc-pad above what the outer MTU carries", local + cbcSA("\n    tfc-pad: 1480"), "tfc-pad 1480 pads every packet beyond the 1438 bytes outer-mtu 1500 carries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gateway.ParseConfig("gw.yaml", []byte(tc.yaml), sim.Engines{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	// What is allowed still loads: the largest TUN MTU and tfc-pad.
	for _, ok := range []string{local + "tun: {mtu: 1438}\n" + cbcSA(""), local + cbcSA("\n    tfc-pad: 1438"), local + "pprof: 127.0.0.1:6060\n" + goodSA} {
		if _, err := gateway.ParseConfig("gw.yaml", []byte(ok), sim.Engines{}); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// A key pasted into any setting of the gateway configuration is never
// printed in the error.
func TestConfigErrorsHideKeys(t *testing.T) {
	const key = "randomSecretValue42"
	const hexKey = "0xa1b2c3d4e5f6a7b8c9dad1e2f3a4b5c6"
	for _, setting := range []string{"local", "peer", "engine: [x]\nx", "outer-mtu", "workers", "batch", "inline", "metrics", "pprof", "tun: {name: %s}", "tun: {mtu: %s}", "tun: {routes: [%s]}", "tun: {offloads: %s}", "tun: {%s: 1}", "%s"} {
		for _, v := range []string{key, hexKey} {
			line := setting + ": " + v
			if strings.Contains(setting, "%s") {
				line = strings.ReplaceAll(setting, "%s", v)
				if setting == "%s" {
					line = v + ": 1"
				}
			}
			_, err := gateway.ParseConfig("gw.yaml", []byte("local: 198.51.100.1\n"+line+"\n"+goodSA), sim.Engines{})
			if err == nil {
				if setting == "engine: [x]\nx" {
					continue
				}
				t.Errorf("%q: no error", line)
				continue
			}
			if strings.Contains(err.Error(), v[:10]) || strings.Contains(err.Error(), "a1b2c3d4") {
				t.Errorf("%q: the error shows the key: %v", line, err)
			}
		}
	}
	// Inline SAs go through the SA parser's rule.
	_, err := gateway.ParseConfig("gw.yaml", []byte("local: 198.51.100.1\n"+strings.Replace(goodSA, "enc: aes-gcm-16", "enc: "+key, 1)), sim.Engines{})
	if err == nil || strings.Contains(err.Error(), key[:10]) {
		t.Errorf("inline SA with a key as enc: %v", err)
	}
}

// A configuration file beyond sa.MaxFileSize is refused before it is read.
func TestConfigFileSizeBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(sa.MaxFileSize + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := gateway.LoadConfig(path, sim.Engines{}); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("LoadConfig of a file over the bound: %v", err)
	}
}
