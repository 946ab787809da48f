package gateway_test

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/sa"
)

// keyLike matches what may be key material: 16 or more hex digits.
var keyLike = regexp.MustCompile(`[0-9a-fA-F]{16,}`)

// namesAFile reports whether a document names an SA file, which the
// parser would read: the fuzzer must not have it read /dev/stdin.
func namesAFile(data []byte) bool {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return false
	}
	var walk func(n *yaml.Node) bool
	walk = func(n *yaml.Node) bool {
		for i, c := range n.Content {
			if n.Kind == yaml.MappingNode && i%2 == 0 && (strings.HasSuffix(c.Value, "-file") || strings.HasSuffix(c.Value, "_file")) {
				return true
			}
			if walk(c) {
				return true
			}
		}
		return false
	}
	return walk(&doc)
}

// FuzzParseConfig: any gateway configuration yields a config or an error,
// never a panic; an error never repeats key-like input; what parses has an
// outer address, SAs, and no outbound tunnel SA whose TFC padding alone
// exceeds what the outer MTU carries. (A TUN MTU above an SA's inner MTU is
// allowed: those packets get ICMP errors or leave as outer fragments.)
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("local: 198.51.100.1\nengine: ring\nworkers: 4\ntun: {name: esp1, routes: [203.0.113.0/24], mtu: auto, offloads: false}\n" + goodSA))
	f.Add([]byte("local: [198.51.100.1, 2001:db8::1]\npeer: 198.51.100.129\nmetrics: off\npprof: 127.0.0.1:6060\nouter-mtu: 1400\ntun: {mtu: 1300}\n" + goodSA))
	f.Add([]byte("local: 198.51.100.1\nengine: cpu\nengine: ring\n" + goodSA))
	f.Add([]byte("local: 198.51.100.1\nmetrics: {a: 1}\n" + goodSA + "spd:\n  - {action: discard}\n"))
	f.Add([]byte("local: 198.51.100.1\ntun: {mtu: 1500}\n" + strings.Replace(goodSA, "enc: aes-gcm-16", "enc: aes-cbc\n    tfc-pad: 1500", 1)))
	f.Add([]byte("local: 198.51.100.1\nwan-io: xdp\nxdp-mode: native\n" + goodSA))
	f.Add([]byte("local: 198.51.100.1\nike:\n  connections:\n    a:\n      local_addrs: [198.51.100.1]\n      remote_addrs: [198.51.100.129]\n      psk_env: HOME\n      proposals: aes128-sha256-x25519\n      children:\n        c: {local_ts: 10.1.0.0/16, remote_ts: 10.2.0.0/16, esp_proposals: aes256gcm16, start_action: start, rekey_time: 1h}\n"))
	f.Add([]byte("local: 198.51.100.1\nike: {retransmit_timeout: 2s, connections: {a: {local_addrs: 198.51.100.1, psk_env: HOME, proposals: deadbeefdeadbeef00, children: {c: {local_ts: 10.1.0.0/16, remote_ts: 10.2.0.0/16, esp_proposals: chacha20poly1305}}}}}\n"))
	f.Add([]byte(""))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if namesAFile(data) {
			return
		}
		c, err := gateway.ParseConfig("gw.yaml", data, sim.Engines{})
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "gw.yaml") {
				t.Fatalf("error does not name the file: %s", msg)
			}
			for _, run := range keyLike.FindAllString(msg, -1) {
				if strings.ContainsAny(run, "abcdefABCDEF") && bytes.Contains(data, []byte(run)) {
					t.Fatalf("error repeats key-like input %q: %s", run, msg)
				}
			}
			return
		}
		if len(c.Local) == 0 || (len(c.SAs) == 0 && c.IKE == nil) {
			t.Fatalf("parsed without local addresses, or without SAs and IKE: %+v", c)
		}
		if c.IKE != nil {
			for _, conn := range c.IKE.Connections {
				if len(conn.PSK) == 0 || len(conn.Proposals) == 0 || len(conn.Children) != 1 || len(conn.Children[0].ESPProposals) == 0 {
					t.Fatalf("parsed IKE connection %s without a PSK, proposals or its one child", conn.Name)
				}
			}
		}
		for _, s := range c.SAs {
			if err := s.Validate(); err != nil {
				t.Fatalf("parsed an invalid SA: %v", err)
			}
			if !containsAddr(c, s.Src) {
				continue
			}
			inner, err := gateway.InnerMTU(c.OuterMTU, s)
			if err != nil {
				t.Fatalf("parsed an outbound SA %#x outer-mtu %d cannot carry: %v", s.SPI, c.OuterMTU, err)
			}
			if s.Mode == sa.Tunnel && s.TFCPad > inner {
				t.Fatalf("parsed SA %#x with tfc-pad %d above the %d bytes it carries", s.SPI, s.TFCPad, inner)
			}
		}
	})
}

func containsAddr(c *gateway.Config, a interface{ String() string }) bool {
	for _, l := range c.Local {
		if l.String() == a.String() {
			return true
		}
	}
	return false
}
