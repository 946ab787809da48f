package gateway_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/sim"
)

const goodSA = `
sa:
  - spi: 0x1001
    src: 198.51.100.1
    dst: 198.51.100.129
    enc: aes-gcm-16
    enc-key: 0x00112233445566778899aabbccddeeff00112233
`

func TestParseConfig(t *testing.T) {
	c, err := gateway.ParseConfig("gw.yaml", []byte(`local: 198.51.100.1
engine: ring
workers: 4
tun: {name: esp1, routes: [203.0.113.0/24], mtu: auto, offloads: false}
`+goodSA), sim.Engines{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Engine != "ring" || c.Workers != 4 || c.TUN.Name != "esp1" || c.TUN.Offloads || len(c.TUN.Routes) != 1 || len(c.SAs) != 1 {
		t.Errorf("parsed %+v", c)
	}
	if c.Metrics != gateway.DefaultMetrics || c.OuterMTU != 1500 {
		t.Errorf("defaults: metrics %q outer-mtu %d", c.Metrics, c.OuterMTU)
	}
	c, err = gateway.ParseConfig("gw.yaml", []byte("local: 198.51.100.1\npmtu-expires: 90s\nreassembly: {memory: 4M, timeout: 20s}\n"+goodSA), sim.Engines{})
	if err != nil {
		t.Fatal(err)
	}
	if c.PMTUExpiry != 90*time.Second || c.Reassembly.Memory != 4<<20 || c.Reassembly.Timeout != 20*time.Second {
		t.Errorf("pmtu-expires %v reassembly %+v", c.PMTUExpiry, c.Reassembly)
	}
	for _, nk := range []struct {
		setting string
		want    gateway.NATKeepalive
	}{
		{"", gateway.NATKeepalive{Every: gateway.DefaultNATKeepalive}},
		{"nat-keepalive: auto\n", gateway.NATKeepalive{Every: gateway.DefaultNATKeepalive}},
		{"nat-keepalive: off\n", gateway.NATKeepalive{}},
		{"nat-keepalive: 5s\n", gateway.NATKeepalive{Every: 5 * time.Second, All: true}},
	} {
		c, err := gateway.ParseConfig("gw.yaml", []byte("local: 198.51.100.1\n"+nk.setting+goodSA), sim.Engines{})
		if err != nil {
			t.Fatal(err)
		}
		if c.NATKeepalive != nk.want {
			t.Errorf("%q: nat-keepalive %+v, want %+v", nk.setting, c.NATKeepalive, nk.want)
		}
	}
}

// TestBehindNAT: the local addresses that reach a peer only through a NAT.
func TestBehindNAT(t *testing.T) {
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"10.1.2.3", true}, {"172.16.0.1", true}, {"192.168.1.1", true}, {"100.64.0.1", true}, {"169.254.1.1", true},
		{"fd00::1", true}, {"fe80::1", true},
		{"198.51.100.1", false}, {"203.0.113.1", false}, {"2001:db8::1", false}, {"100.128.0.1", false},
	} {
		if got := gateway.BehindNAT(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("BehindNAT(%s) = %v, want %v", c.addr, got, c.want)
		}
	}
}

// TestConfigErrors checks that every mistake is named by file, line and field.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"missing local", "engine: cpu\n" + goodSA, "gw.yaml:1: local: missing"},
		{"bad address", "local: 198.51.100.999\n" + goodSA, `gw.yaml:1: local: "198.51.100.999" is not an IP address`},
		{"unknown setting", "local: 198.51.100.1\nenigne: ring\n" + goodSA, `gw.yaml:2: unknown setting "enigne"`},
		{"bad mtu", "local: 198.51.100.1\ntun: {mtu: 10}\n" + goodSA, `gw.yaml:2: tun.mtu: "10" is not a whole number`},
		{"bad route", "local: 198.51.100.1\ntun: {routes: [nowhere]}\n" + goodSA, `gw.yaml:2: tun.routes: "nowhere" is not an address/prefix-length`},
		{"no SAs", "local: 198.51.100.1\n", "gw.yaml:1: sa: give exactly one of sa:, sa-file: or setkey-file:"},
		{"bad key length", "local: 198.51.100.1\n" + strings.Replace(goodSA, "0x00112233445566778899aabbccddeeff00112233", "0x0011", 1), "gw.yaml:8: sa[0] (spi 0x1001): enc-key"},
		{"missing SA file", "local: 198.51.100.1\nsa-file: nowhere.yaml\n", "nowhere.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gateway.ParseConfig("gw.yaml", []byte(tc.yaml), sim.Engines{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "00112233") {
				t.Errorf("error shows key material: %v", err)
			}
		})
	}
}

func TestConfigSAFileRelative(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sas.yaml"), []byte(goodSA), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(path, []byte("local: 198.51.100.1\nsa-file: sas.yaml\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := gateway.LoadConfig(path, sim.Engines{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.SAs) != 1 || c.SAs[0].SPI != 0x1001 {
		t.Errorf("SAs from the relative sa-file: %v", c.SAs)
	}
}

// A configuration of nothing but empty SA entries is refused before it is
// decoded.
func TestConfigNodeBomb(t *testing.T) {
	data := []byte("local: 198.51.100.1\nsa:\n" + strings.Repeat("- {}\n", 1<<20))
	if _, err := gateway.ParseConfig("gw.yaml", data, sim.Engines{}); err == nil || !strings.Contains(err.Error(), "gw.yaml holds more than 2000000 YAML nodes") {
		t.Fatalf("a million empty SA entries: %v", err)
	}
}
