package scenario

import (
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/wanrelay"
)

func TestCheckEval(t *testing.T) {
	m := Metrics{"replay": 14, "wan.replayed": 10, "wan.duplicated": 4, "delivered": 0.995, "latency.p99": 0.012, "sent": 100, "wan.lost": 3, "received": 97}
	for _, tc := range []struct {
		metric, value, tag string
		pass               bool
		want               float64
	}{
		{"replay", "== wan.replayed + wan.duplicated", "!!str", true, 14},
		{"replay", "== wan.replayed - wan.duplicated", "!!str", false, 6},
		{"replay", "==wan.replayed", "!!str", false, 10},
		{"replay", "!= wan.replayed", "!!str", true, 10},
		{"delivered", ">= 0.99", "!!str", true, 0.99},
		{"delivered", "> 99.6%", "!!str", false, 0.996},
		{"latency.p99", "< 20ms", "!!str", true, 0.02},
		{"latency.p99", "<= 12000us", "!!str", true, 0.012},
		{"latency.p99", "< 0.01s", "!!str", false, 0.01},
		{"received", "sent - wan.lost", "!!str", true, 97},
		{"received", "97", "!!int", true, 97},
		{"sent", "0x64", "!!str", true, 100},
		{"missing", "0", "!!int", true, 0},
		{"conservation", "true", "!!bool", false, 1},
	} {
		c, err := parseCheck(tc.metric, tc.value, tc.tag)
		if err != nil {
			t.Errorf("%s: %s: %v", tc.metric, tc.value, err)
			continue
		}
		_, want, pass := c.eval(m)
		if pass != tc.pass || want != tc.want {
			t.Errorf("%s %s: pass %v want %v, expected pass %v want %v", tc.metric, tc.value, pass, want, tc.pass, tc.want)
		}
	}
}

func TestCheckErrors(t *testing.T) {
	for _, v := range []string{"", "==", "== a +", "== a b", "== 3x", "== a + + b"} {
		if _, err := parseCheck("m", v, "!!str"); err == nil {
			t.Errorf("%q parsed", v)
		}
	}
}

// TestMetricsAndBalances feeds the evaluator counters whose right answers
// are known: a gw1→gw2 flow of 100 packets, 4 duplicated and 3 lost on the
// WAN, the duplicates dropped as replays, and one packet the gateways never
// explain.
func TestMetricsAndBalances(t *testing.T) {
	gw1 := gateway.Stats{TunIn: 100, WireOut: 100, Drops: map[string]uint64{}, SAs: []gateway.SAStats{
		{SPI: "0x1001", Direction: "out", LastSeq: 100, Snapshot: esp.Snapshot{SealedPackets: 100}},
		{SPI: "0x2001", Direction: "in"},
	}}
	gw2 := gateway.Stats{WireIn: 101, TunOut: 96, Drops: map[string]uint64{}, SAs: []gateway.SAStats{
		{SPI: "0x1001", Direction: "in", Snapshot: esp.Snapshot{OpenedPackets: 97, Drops: map[string]uint64{"replay": 4}}},
		{SPI: "0x2001", Direction: "out"},
	}}
	var wan wanrelay.Counters
	wan.AToB.Impair = impair.Counters{Received: 100, Matched: 100, Duplicated: 4, Lost: 3}
	d := snapshot{GW: [2]gateway.Stats{gw1, gw2}, WAN: wan}
	r := &runner{s: &Scenario{}}
	steps := []StepResult{{Name: "flow", Sent: 100, Received: 96, Latencies: []float64{0.001, 0.002, 0.003}}}
	m, bal := r.metrics(d, steps)
	for k, want := range map[string]float64{
		"replay": 4, "gw2.replay": 4, "wan.duplicated": 4, "gw1-to-gw2.lost": 3, "wan.lost": 3, "sealed": 100, "opened": 97,
		"delivered": 0.96, "steps.flow.delivered": 0.96, "gw1.last_seq": 100, "latency.p50": 0.002, "latency.max": 0.003,
		"unaccounted": 1, "conservation": 0, "drops": 4,
	} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v", k, m[k], want)
		}
	}
	var unbalanced []string
	for _, b := range bal {
		if b.In != b.Out {
			unbalanced = append(unbalanced, b.Where)
		}
	}
	if len(unbalanced) != 1 || unbalanced[0] != "gw2 delivery" {
		t.Errorf("unbalanced %v, want just gw2 delivery (opened 97, tun_out 96)", unbalanced)
	}
}
