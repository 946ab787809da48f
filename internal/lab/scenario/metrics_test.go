package scenario

import (
	"slices"
	"testing"

	"github.com/espgw/espgw/internal/gateway"
)

// An ESP drop reason and a WAN impairment counter of the same name stay
// apart at the run level: truncated ESP packets the gateways dropped, and
// packets the WAN truncated, are two numbers.
func TestMetricNamesApart(t *testing.T) {
	var d snapshot
	in := gateway.SAStats{SPI: "0x2001", Direction: "in"}
	in.Drops = map[string]uint64{"truncated": 2, "bad-icv": 3}
	d.GW[1] = gateway.Stats{WireIn: 5, SAs: []gateway.SAStats{in}}
	d.GW[0].WireOut = 5
	d.WAN.AToB.Impair.Truncated = 4
	d.WAN.AToB.Impair.Corrupted = 1
	m, _ := (&runner{}).metrics(d, nil)
	for name, want := range map[string]float64{
		"truncated": 2, "gw2.truncated": 2, "wan.truncated": 4, "gw1-to-gw2.truncated": 4,
		"bad-icv": 3, "wan.corrupted": 1,
	} {
		if m[name] != want {
			t.Errorf("%s = %v, want %v", name, m[name], want)
		}
	}
	s := &Scenario{}
	for _, name := range []string{"truncated", "gw1.truncated", "wan.truncated", "wan.lost", "gw2-to-gw1.truncated"} {
		if !s.knownMetric(name) {
			t.Errorf("%s unknown", name)
		}
	}
	// Every name means one thing: the impairment counters are wan.X, and a
	// bare name is a gateway's or the steps', never also the WAN's.
	for _, n := range impairCounters {
		if !s.knownMetric("wan." + n) {
			t.Errorf("wan.%s unknown", n)
		}
		if s.knownMetric(n) && !slices.Contains(dropReasons(), n) {
			t.Errorf("the impairment counter %s is also known by its bare name", n)
		}
	}
}
