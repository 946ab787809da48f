package gateway

import (
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/sim"
)

// A change of the ike: section is refused by a reload, naming it; the
// same section is no change.
func TestIKEChangeNeedsRestart(t *testing.T) {
	t.Setenv("IKEGW_RELOAD_PSK", "reload test key")
	conf := func(dpd string) *Config {
		t.Helper()
		c, err := ParseConfig("gw.yaml", []byte(`local: 192.0.2.1
ike:
  connections:
    a:
      local_addrs: [192.0.2.1]
      remote_addrs: [192.0.2.2]
      psk_env: IKEGW_RELOAD_PSK
      dpd_delay: `+dpd+`
      children:
        c: {local_ts: 10.1.0.0/24, remote_ts: 10.2.0.0/24}
`), sim.Engines{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if err := conf("10s").restartOnly(conf("10s")); err != nil {
		t.Errorf("the same ike: section: %v", err)
	}
	err := conf("10s").restartOnly(conf("20s"))
	if err == nil || !strings.Contains(err.Error(), "ike changed: restart the gateway") {
		t.Errorf("a changed dpd_delay: %v, want the reload refused naming ike", err)
	}
}
