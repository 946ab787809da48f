package iketunnel

import (
	"context"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// TestGatewayPairTransport gives the example pair a second child, host,
// in transport mode between the two gateways' own addresses (selectors
// left out): gw1 sets it up by CREATE_CHILD_SA asking for transport mode,
// gw2 grants it, both put transport-mode SAs in force, and gw1's pings to
// gw2's own address cross them through a rekey every 4 s with none lost,
// while the tunnel child carries hostA's pings to hostB.
func TestGatewayPairTransport(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two espgw gateways in namespaces; run without -short")
	}
	labtest.NeedNamespaces(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const host = "        host:\n          mode: transport\n          esp_proposals: aes128gcm16\n"
	p := startPair(t, ctx, "iketr", false, func(i int, conf string) string {
		if i == 0 {
			return conf + host + "          start_action: start\n          rekey_time: 4s\n          rand_time: 0\n"
		}
		return conf + host
	})
	defer p.close()
	a := p.topo.Addr
	first := waitChild(t, ctx, p.topo.GW1, p.bin, 2, p.logs)
	waitChild(t, ctx, p.topo.GW2, p.bin, 2, p.logs)
	var hostIn uint32
	for _, c := range first.ChildSAs {
		if c.Name == "host" {
			hostIn = c.InSPI
		}
	}
	if hostIn == 0 {
		t.Fatalf("gw1's CHILD_SAs are %+v, want net and host", first.ChildSAs)
	}
	for _, gw := range []struct {
		name string
		i    int
	}{{"gw1", 0}, {"gw2", 1}} {
		ns := p.topo.GW1
		if gw.i == 1 {
			ns = p.topo.GW2
		}
		st, err := testbed.GatewayStats(ctx, ns, p.bin)
		if err != nil {
			t.Fatal(err)
		}
		transport := 0
		for _, s := range st.SAs {
			if s.Mode == "transport" && !s.Retired {
				transport++
			}
		}
		if transport != 2 {
			t.Errorf("%s holds %d transport-mode SAs in force, want 2 (host's in and out)", gw.name, transport)
		}
	}
	before, err := testbed.GatewayStats(ctx, p.topo.GW1, p.bin)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan testbed.PingResult, 1)
	go func() {
		r, err := testbed.Ping(ctx, p.topo.HostA, a.HostB4.Addr(), testbed.PingOptions{Count: 600, Interval: 15 * time.Millisecond, Deadline: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	r, err := testbed.Ping(ctx, p.topo.GW1, a.GW2WAN4.Addr(), testbed.PingOptions{Count: 900, Interval: 10 * time.Millisecond, Deadline: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	net := <-done
	t.Logf("gw1 → gw2 (host, transport): %d of %d answered; hostA → hostB (net, tunnel): %d of %d", r.Received, r.Sent, net.Received, net.Sent)
	if r.Sent == 0 || r.Received != r.Sent || net.Sent == 0 || net.Received != net.Sent {
		t.Errorf("pings lost: transport %d of %d, tunnel %d of %d\n%s", r.Received, r.Sent, net.Received, net.Sent, p.logs())
	}
	// Both kinds of ping went through gw1's ESP: the transport ones did
	// not leave in clear beside the TUN.
	after, err := testbed.GatewayStats(ctx, p.topo.GW1, p.bin)
	if err != nil {
		t.Fatal(err)
	}
	if sent := after.WireOut - before.WireOut; sent < uint64(r.Sent+net.Sent) {
		t.Errorf("gw1 sent %d ESP packets during %d transport and %d tunnel pings", sent, r.Sent, net.Sent)
	}
	now := waitChild(t, ctx, p.topo.GW1, p.bin, 2, p.logs)
	for _, c := range now.ChildSAs {
		if c.Name == "host" && c.InSPI == hostIn {
			t.Errorf("the transport child was not rekeyed (still %#x)", c.InSPI)
		}
	}
}
