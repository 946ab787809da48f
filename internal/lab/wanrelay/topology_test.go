package wanrelay

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
)

// The relay drops into espgw's standard topology as it is: in Route mode on
// wan's ports, hostA reaches hostB across gw1 — wan — gw2 (three hops), and
// ESP between the gateways' WAN addresses gets the impairments, counted to
// the packet.
func TestRelayStandardTopology(t *testing.T) {
	labtest.NeedNamespaces(t)
	topo, err := netns.NewTopology("im-t", netns.TopologyOptions{PlainRouting: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.Close() })
	for _, ns := range []*netns.Namespace{topo.GW1, topo.GW2} {
		if err := ns.EnableForwarding(); err != nil {
			t.Fatal(err)
		}
	}
	b := &bed{a: topo.GW1.Name(), w: topo.WAN.Name(), b: topo.GW2.Name()}
	r, err := Start(Config{Netns: b.w, A: "gw1", B: "gw2", Mode: Route,
		AToB: impairs(func(c *impair.Config) { c.Loss, c.Duplicate = 5, 5 })})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Close(); err != nil {
			t.Errorf("relay: %v", err)
		}
	}()

	a := topo.Addr
	for _, dst := range []string{a.HostB4.Addr().String(), a.HostB6.Addr().String()} {
		out, err := exec.Command("ip", "netns", "exec", topo.HostA.Name(), "ping", "-c", "2", "-i", "0.2", "-W", "2", dst).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ttl=61") && !strings.Contains(string(out), "hlim=61") {
			t.Fatalf("hostA ping %s through the relay: %v\n%s", dst, err, out)
		}
	}

	const n, size = 400, 200
	tl := count(t, exchange(t, r, b, "ip4:50", a.GW1WAN4.Addr().String(), a.GW2WAN4.Addr().String(), n, size, 0), size)
	c := r.Counters().AToB
	t.Logf("gw1→gw2: %+v", c.Impair)
	if c.Impair.Matched != n || uint64(n-tl.distinct) != c.Impair.Lost || uint64(tl.extra) != c.Impair.Duplicated {
		t.Fatalf("gw2 got %d distinct + %d extra of %d; relay %+v", tl.distinct, tl.extra, n, c)
	}
}
