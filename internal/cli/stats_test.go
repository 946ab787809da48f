package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/gateway"
)

// TestStatsSummarizeBigGateways: beyond saRowLimit SAs the counters show
// the totals, the SAs with the most traffic and every SA with drops, in a
// few lines whatever the gateway's size; --all and small gateways list
// every SA.
func TestStatsSummarizeBigGateways(t *testing.T) {
	sas := func(n int) gateway.Stats {
		var st gateway.Stats
		for i := range n {
			s := gateway.SAStats{SPI: fmt.Sprintf("%#x", 0x1000+i), Direction: "out", Src: "198.51.100.1", Dst: "198.51.100.2",
				Suite: "aes-gcm-16-128", Mode: "tunnel", Snapshot: esp.Snapshot{Drops: map[string]uint64{}}}
			s.SealedPackets = uint64(i % 7)
			if i == n/2 {
				s.SealedPackets = 1_000_000 // the busiest
			}
			if i == n/3 || i == n-1 {
				s.Drops["replay"] = 2 // the only ones with drops
			}
			st.SAs = append(st.SAs, s)
		}
		return st
	}
	for _, c := range []struct {
		n        int
		all      bool
		rows     int
		maxBytes int
	}{
		{saRowLimit, false, saRowLimit, 0},
		{100_000, false, topSAs + 2, 4000},
		{2_000, true, 2_000, 0},
	} {
		var b bytes.Buffer
		st := sas(c.n)
		printStats(&b, st, c.all)
		out := b.String()
		if got := strings.Count(out, " tunnel "); got != c.rows {
			t.Errorf("%d SAs, all %v: %d rows, want %d\n%s", c.n, c.all, got, c.rows, out)
		}
		if c.maxBytes > 0 && len(out) > c.maxBytes {
			t.Errorf("%d SAs: %d bytes printed, want at most %d", c.n, len(out), c.maxBytes)
		}
		if c.n > saRowLimit && !c.all {
			for _, want := range []string{
				fmt.Sprintf("%d SAs (out %d, in 0, both 0), 2 with drops", c.n, c.n),
				"drops: replay=4",
				st.SAs[c.n/2].SPI + " ", st.SAs[c.n/3].SPI + " ", st.SAs[c.n-1].SPI + " ",
				fmt.Sprintf("(%d more SAs, none with drops: --all lists every SA)", c.n-c.rows),
			} {
				if !strings.Contains(out, want) {
					t.Errorf("%d SAs: the summary lacks %q\n%s", c.n, want, out)
				}
			}
		}
	}
}
