package iketunnel

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// TestGatewayPairWithTwoChildren runs the example pair with a second
// CHILD_SA in the connection: net6, the IPv6 LANs (over the IPv4 outer
// addresses), with proposals of its own, set up by gw1 with
// CREATE_CHILD_SA after IKE_AUTH's net. Both must be in force on both
// sides, each sending through its own SAs; counted IPv4 and IPv6 ping
// streams at once must lose nothing while gw1 rekeys each child on its own
// timer (net every 7s, net6 every 5s), and both children must have been
// rekeyed.
func TestGatewayPairWithTwoChildren(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two espgw gateways in namespaces; run without -short")
	}
	labtest.NeedNamespaces(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	child := `        net6:
          local_ts: [%s]
          remote_ts: [%s]
          esp_proposals: aes256gcm16
          start_action: %s
          rekey_time: %s
          rand_time: 0
`
	p := startPair(t, ctx, "ikech", false, func(i int, conf string) string {
		a := netns.StandardAddresses()
		if i == 0 {
			conf = strings.Replace(conf, "routes: [203.0.113.0/24]", "routes: [203.0.113.0/24, "+a.LANB6.String()+"]", 1)
			conf = strings.Replace(conf, "          rekey_time: 1h\n", "          rekey_time: 7s\n          rand_time: 0\n", 1)
			return conf + fmt.Sprintf(child, a.LANA6, a.LANB6, "start", "5s")
		}
		conf = strings.Replace(conf, "routes: [192.0.2.0/24]", "routes: [192.0.2.0/24, "+a.LANA6.String()+"]", 1)
		return conf + fmt.Sprintf(child, a.LANB6, a.LANA6, "none", "1h")
	})
	defer p.close()
	a := p.topo.Addr
	first := waitChild(t, ctx, p.topo.GW1, p.bin, 2, p.logs)
	waitChild(t, ctx, p.topo.GW2, p.bin, 2, p.logs)
	names := map[string]gateway.IKEChildStats{}
	for _, c := range first.ChildSAs {
		names[c.Name] = c
		if !c.Outbound {
			t.Errorf("gw1 does not send through child %s (%#x)", c.Name, c.OutSPI)
		}
	}
	if len(names) != 2 || names["net"].InSPI == 0 || names["net6"].InSPI == 0 {
		t.Fatalf("gw1's CHILD_SAs are %+v, want net and net6", first.ChildSAs)
	}
	var wg sync.WaitGroup
	results := make([]testbed.PingResult, 2)
	for i, dst := range []struct {
		from *netns.Namespace
		to   netip.Addr
	}{{p.topo.HostA, a.HostB4.Addr()}, {p.topo.HostA, a.HostB6.Addr()}} {
		wg.Go(func() {
			r, err := testbed.Ping(ctx, dst.from, dst.to, testbed.PingOptions{Count: 1300, Interval: 12 * time.Millisecond, Deadline: 30 * time.Second})
			if err != nil {
				t.Error(err)
			}
			results[i] = r
		})
	}
	wg.Wait()
	for i, fam := range []string{"IPv4 (net)", "IPv6 (net6)"} {
		r := results[i]
		t.Logf("%s: %d pings across the rekeys, %d answered", fam, r.Sent, r.Received)
		if r.Sent == 0 || r.Received != r.Sent {
			t.Errorf("%s: %d of %d pings answered\n%s", fam, r.Received, r.Sent, p.logs())
		}
	}
	now := waitChild(t, ctx, p.topo.GW1, p.bin, 2, p.logs)
	for _, c := range now.ChildSAs {
		if c.InSPI == names[c.Name].InSPI {
			t.Errorf("gw1's child %s was not rekeyed (still %#x)", c.Name, c.InSPI)
		}
	}
	st, err := testbed.GatewayStats(ctx, p.topo.GW1, p.bin)
	if err != nil {
		t.Fatal(err)
	}
	c := st.IKE.Connections[0]
	t.Logf("gw1: %d children set up by CREATE_CHILD_SA, %d CHILD_SA rekeys; events %v", c.ChildrenCreated, c.ChildRekeys, c.Events)
	// net at 7s and 14s, net6 at 5s, 10s and 15s.
	if c.ChildrenCreated != 1 || c.ChildRekeys < 4 {
		t.Errorf("gw1 set up %d children by CREATE_CHILD_SA and rekeyed %d: want 1, and at least 4 rekeys", c.ChildrenCreated, c.ChildRekeys)
	}
}
