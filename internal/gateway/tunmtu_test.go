package gateway

import (
	"testing"

	"github.com/espgw/espgw/internal/lab/sim"
)

// The TUN MTU of a config with IKE connections and no SAs is the largest
// inner packet every CHILD_SA they can negotiate carries, UDP-encapsulated.
func TestTUNMTUOfIKEConnections(t *testing.T) {
	t.Setenv("TUNMTU_PSK", "tun mtu test key")
	conf := func(tun, local, remote, esp string) string {
		return `local: ` + local + "\n" + tun + `ike:
  connections:
    a:
      local_addrs: [` + local + `]
      remote_addrs: [` + remote + `]
      psk_env: TUNMTU_PSK
      children:
        c: {local_ts: 10.1.0.0/24, remote_ts: 10.2.0.0/24, esp_proposals: "` + esp + `"}
`
	}
	for _, tc := range []struct {
		name, yaml string
		want       int
	}{
		// 1500 - IPv4 20 - UDP 8 - ESP 8 - IV 8 - ICV 16 = 1440, less 2 trailer bytes.
		{"gcm over IPv4", conf("", "192.0.2.1", "192.0.2.2", "aes128gcm16"), 1438},
		// 1500 - 20 - 8 - 8 - IV 16 - ICV 24 = 1424 (a multiple of 16), less 2.
		{"cbc with sha384", conf("", "192.0.2.1", "192.0.2.2", "aes256-sha384"), 1422},
		// The smallest over the proposals and over each one's transforms.
		{"proposals", conf("", "192.0.2.1", "192.0.2.2", "aes128gcm16,aes128-sha256"), 1422},
		{"transforms", conf("", "192.0.2.1", "192.0.2.2", "aes128-sha256-sha512"), 1406},
		// IPv6 outer header: 40.
		{"gcm over IPv6", conf("", "2001:db8::1", "2001:db8::2", "aes128gcm16"), 1418},
		{"given", conf("tun: {mtu: 1300}\n", "192.0.2.1", "192.0.2.2", "aes128gcm16"), 1300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig("gw.yaml", []byte(tc.yaml), sim.Engines{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := tunMTU(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("TUN MTU %d, want %d", got, tc.want)
			}
		})
	}
}
