package charonguest

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// The swanctl.conf the guest gets: the connection as configured, the key
// in its secrets section; a side left out is refused.
func TestSwanctlConf(t *testing.T) {
	cfg := Config{LocalAddr: netip.MustParseAddr("198.51.100.129"), RemoteAddr: netip.MustParseAddr("198.51.100.1"),
		LocalID: "appliance.example", PSK: "an example key only",
		LocalTS: []netip.Prefix{netip.MustParsePrefix("203.0.113.1/24")}, RemoteTS: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")},
		Proposals: "aes128-sha256-x25519", RekeyTime: 90 * time.Second}
	conf, err := cfg.swanctl()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"local_addrs = 198.51.100.129", "remote_addrs = 198.51.100.1", "proposals = aes128-sha256-x25519",
		"id = appliance.example", "id = 198.51.100.1", // the remote's identity defaults to its address
		"local_ts = 203.0.113.0/24", "remote_ts = 192.0.2.0/24", "esp_proposals = default", "rekey_time = 90s",
		`secret = "an example key only"`,
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("swanctl.conf lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "mode = transport") {
		t.Errorf("a transport-mode child without Transport:\n%s", conf)
	}
	cfg.Transport = true
	if conf, _ := cfg.swanctl(); !strings.Contains(conf, "host {\n\t\t\t\tmode = transport") {
		t.Errorf("Transport set, no transport-mode child host:\n%s", conf)
	}
	cfg.Transport = false
	// IPv6 beside IPv4: the connection takes IKE on either pair.
	cfg.LocalAddr6, cfg.RemoteAddr6 = netip.MustParseAddr("2001:db8:5::129"), netip.MustParseAddr("2001:db8:5::1")
	if conf, _ := cfg.swanctl(); !strings.Contains(conf, "local_addrs = 198.51.100.129, 2001:db8:5::129") ||
		!strings.Contains(conf, "remote_addrs = 198.51.100.1, 2001:db8:5::1") {
		t.Errorf("IPv6 addresses set, not in the connection's addresses:\n%s", conf)
	}
	cfg.LocalAddr6, cfg.RemoteAddr6 = netip.Addr{}, netip.Addr{}
	for _, bad := range []func(*Config){
		func(c *Config) { c.PSK = "" },
		func(c *Config) { c.RemoteAddr = netip.Addr{} },
		func(c *Config) { c.LocalTS = nil },
		func(c *Config) { c.LocalAddr6 = netip.MustParseAddr("2001:db8:5::129") },
		func(c *Config) {
			c.LocalAddr6, c.RemoteAddr6 = netip.MustParseAddr("2001:db8:5::129"), netip.MustParseAddr("198.51.100.2")
		},
	} {
		c := cfg
		bad(&c)
		if _, err := c.swanctl(); err == nil || strings.Contains(err.Error(), "an example key") {
			t.Errorf("incomplete config: %v", err)
		}
	}
}
