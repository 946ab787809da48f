package iketunnel

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// TestGatewayPairLifetimes runs the example pair with gw1's IKE SA
// rekeyed every 3s and its CHILD_SA never rekeyed but given a life_time
// of 25s: the IKE SA rekeys (the CHILD_SA moving to the new one) under a
// counted ping stream that must lose nothing; at life_time the CHILD_SA
// is taken out of force and deleted, and gw1 (start_action: start)
// negotiates the connection afresh, which carries traffic again.
func TestGatewayPairLifetimes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two espgw gateways in namespaces; run without -short")
	}
	labtest.NeedNamespaces(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startPair(t, ctx, "ikelt", false, func(i int, conf string) string {
		if i == 0 {
			conf = strings.Replace(conf, "rekey_time: 4h", "rekey_time: 3s", 1)
			conf = strings.Replace(conf, "rekey_time: 1h", "rekey_time: 0\n          life_time: 25s", 1)
		}
		return conf
	})
	defer p.close()
	first := waitChild(t, ctx, p.topo.GW1, p.bin, 1, p.logs)
	hostB := p.topo.Addr.HostB4.Addr()
	r, err := testbed.Ping(ctx, p.topo.HostA, hostB, testbed.PingOptions{Count: 500, Interval: 12 * time.Millisecond, Deadline: 12 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st, err := testbed.GatewayStats(ctx, p.topo.GW1, p.bin)
	if err != nil {
		t.Fatal(err)
	}
	c := st.IKE.Connections[0]
	t.Logf("%d pings across IKE SA rekeys: %d answered; %d IKE SA rekeys", r.Sent, r.Received, c.IKERekeys)
	if c.IKERekeys == 0 {
		t.Errorf("gw1 rekeyed no IKE SA in 6s with rekey_time 3s\n%s", p.logs())
	}
	if r.Sent == 0 || r.Received != r.Sent {
		t.Errorf("IKE SA rekey under traffic: %d of %d pings answered\n%s", r.Received, r.Sent, p.logs())
	}
	if len(c.SAs) != 1 || c.SAs[0].SPIi == first.SPIi || len(c.SAs[0].ChildSAs) != 1 || c.SAs[0].ChildSAs[0].InSPI != first.ChildSAs[0].InSPI {
		t.Errorf("after the IKE SA rekey gw1 has %+v, want one new IKE SA holding CHILD_SA %#x", c.SAs, first.ChildSAs[0].InSPI)
	}
	waitFor(t, 30*time.Second, func() bool {
		st, err := testbed.GatewayStats(ctx, p.topo.GW1, p.bin)
		return err == nil && st.IKE.Connections[0].Expired >= 1
	}, func() string { return "gw1's CHILD_SA did not expire at life_time\n" + p.logs() })
	again := waitChild(t, ctx, p.topo.GW1, p.bin, 1, p.logs)
	if again.ChildSAs[0].InSPI == first.ChildSAs[0].InSPI {
		t.Fatalf("the expired CHILD_SA %#x is still in force", first.ChildSAs[0].InSPI)
	}
	if r, err := testbed.Ping(ctx, p.topo.HostA, hostB, testbed.PingOptions{Count: 5}); err != nil || r.Received < 5 {
		t.Fatalf("after the connection started afresh: %d of 5 replies (%v)\n%s", r.Received, err, p.logs())
	}
}
