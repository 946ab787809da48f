package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/gateway"
)

// espgw stats shows each IKE connection's SAs, their lifetimes and counts.
func TestPrintIKE(t *testing.T) {
	st := gateway.Stats{IKE: &gateway.IKEStats{Connections: []gateway.IKEConnStats{
		{Name: "gw1-gw2", Established: 2, ChildRekeys: 3, Events: map[string]uint64{"retransmitted request": 4, "integrity check failed": 1},
			SAs: []gateway.IKESAStats{{SPIi: 0x1122334455667788, SPIr: 0x99, State: "established", Age: 90 * time.Second, RekeyIn: time.Hour,
				ChildSAs: []gateway.IKEChildStats{{InSPI: 0xc1, OutSPI: 0xc2, Outbound: true, Age: 30 * time.Second, RekeyIn: 50 * time.Minute, ExpiresIn: time.Hour}}}}},
		{Name: "idle"},
	}}}
	var b strings.Builder
	printStats(&b, st, false)
	out := b.String()
	for _, want := range []string{"1122334455667788_0000000000000099", "established", "1m30s", "0xc1/0xc2 *", "50m0s",
		"IKE gw1-gw2: initiated 0, established 2, failed 0; rekeys by this side: CHILD_SA 3, IKE SA 0; retransmits 4",
		"integrity check failed=1", "idle"} {
		if !strings.Contains(out, want) {
			t.Errorf("espgw stats has no %q:\n%s", want, out)
		}
	}
}
