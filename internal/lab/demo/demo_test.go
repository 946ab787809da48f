package demo

import (
	"context"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/labtest"
)

// A suite tshark 4.0 cannot decrypt is refused before anything is built:
// the demo's verdict rests on tshark agreeing.
func TestRefusesSuitesTsharkCannotJudge(t *testing.T) {
	labtest.NeedNamespaces(t)
	labtest.NeedTools(t, "ip", "ping", "iperf3", "tcpdump", "tshark", "ethtool")
	for _, s := range []string{"chacha20-poly1305", "aes-gmac-128", "aes-ccm-8-256"} {
		_, err := Run(context.Background(), Options{Suite: s, Binary: "/nonexistent"})
		if err == nil || !strings.Contains(err.Error(), "tshark 4.0 cannot decrypt "+s) {
			t.Errorf("%s: %v, want a refusal naming it", s, err)
		}
	}
}
