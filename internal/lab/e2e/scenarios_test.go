package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/scenario"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// TestScenarios runs every bundled scenario (scenarios/*.yaml, each matrix
// combination as its own subtest) on its own test bed and fails on any
// failed expectation, printing the scenario's verdict table.
func TestScenarios(t *testing.T) {
	needRoot(t)
	files, err := scenario.Files([]string{"../../../scenarios"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		scs, err := scenario.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range scs {
			t.Run(s.Name, func(t *testing.T) { runScenario(t, s, "") })
		}
	}
}

// runScenario runs s on a test bed of its own, within five minutes (a
// bound for a hang, not a speed limit: a kernel-peer scenario boots a QEMU
// guest, which takes minutes on a loaded machine), and
// fails the test with the verdict table (and what ping said of missing
// echoes) when it does not pass.
func runScenario(t *testing.T, s *scenario.Scenario, captures string) *scenario.Result {
	t.Helper()
	bin := labtest.Espgw(t) // built (once) outside the scenario's time
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := scenario.Run(ctx, s, scenario.Options{Binary: bin, Prefix: "it", Captures: captures})
	if !r.Pass {
		var b strings.Builder
		scenario.PrintTable(&b, []*scenario.Result{r})
		for _, st := range r.Steps {
			b.WriteString(st.Output)
		}
		t.Fatalf("scenario %s (%s) failed:\n%s", s.Name, s.File, b.String())
	}
	return r
}

// TestScenarioVerdictsMatchTshark checks a scenario's verdict against an
// independent judge: tshark decrypts the WAN capture of the tampering
// scenario with its esp_sa file, and the packets whose ICV it cannot
// verify must be exactly the ones the gateways dropped as bad-icv (the
// corrupted ones) or unknown-spi (the SPI-rewritten ones, for which tshark
// has no SA).
func TestScenarioVerdictsMatchTshark(t *testing.T) {
	needRoot(t)
	scs, err := scenario.Load("../../../scenarios/tamper.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := runScenario(t, scs[0], t.TempDir())
	lines, err := os.ReadFile(filepath.Join(r.Captures, "esp_sa"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := testbed.Tshark(context.Background(), filepath.Join(r.Captures, "wan.pcap"), strings.Split(strings.TrimSpace(string(lines)), "\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := r.Metrics
	if bad := float64(v.ESP - v.ICVGood); bad != m["bad-icv"]+m["unknown-spi"] || m["bad-icv"] == 0 || m["unknown-spi"] == 0 {
		t.Errorf("tshark: %d ESP packets, %d with good ICVs; gateways: bad-icv %v, unknown-spi %v", v.ESP, v.ICVGood, m["bad-icv"], m["unknown-spi"])
	}
	// The capture starts with the relay, a moment before the counters'
	// baseline: it may hold a few more (good) packets than were counted.
	if float64(v.ESP) < m["wire_out"] || float64(v.ESP) > m["wire_out"]+8 {
		t.Errorf("tshark saw %d ESP packets on the WAN, the gateways sent %v", v.ESP, m["wire_out"])
	}
}

// TestScenarioPingUnderReorder holds back replies on the WAN so that ping
// has its count of replies — some to requests past the count — before the
// held ones arrive: every reply that came back is counted, none as lost.
func TestScenarioPingUnderReorder(t *testing.T) {
	needRoot(t)
	scs, err := scenario.Parse("ping-reorder.yaml", []byte(`
name: ping-reorder
impair:
  gw2-to-gw1: {seed: 7, reorder: {percent: 40, depth: 2, max_hold: 1s}}
traffic:
  steps:
    - name: sweep
      ping: {sizes: [56, 512], count: 8, interval: 20ms}
expect:
  gw2-to-gw1.reordered: "> 0"
  steps.sweep.delivered: == 1
  drops: == 0
  conservation: true
`))
	if err != nil {
		t.Fatal(err)
	}
	runScenario(t, scs[0], "")
}
