package iketunnel

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// TestGatewayPairTrap runs the example pair with gw1's child on
// start_action trap and a life_time of 12s, never rekeyed: gw1 negotiates
// nothing until hostA sends to hostB; that packet (and what follows while
// IKE runs) is dropped and counted as acquire, one negotiation starts, and
// once the CHILD_SA is in force the pings pass. When the CHILD_SA reaches
// its life_time and goes, the IKE SA stays; the next packet traps again
// and gw1 sets the CHILD_SA up anew by CREATE_CHILD_SA on that IKE SA.
func TestGatewayPairTrap(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two espgw gateways in namespaces; run without -short")
	}
	labtest.NeedNamespaces(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startPair(t, ctx, "iketr", false, func(i int, conf string) string {
		if i == 0 {
			conf = strings.Replace(conf, "start_action: start", "start_action: trap", 1)
			conf = strings.Replace(conf, "          rekey_time: 1h\n", "          rekey_time: 0\n          life_time: 12s\n", 1)
		}
		return conf
	})
	defer p.close()
	stats := func() (uint64, uint64, uint64, uint64, uint64) {
		t.Helper()
		st, err := testbed.GatewayStats(ctx, p.topo.GW1, p.bin)
		if err != nil {
			t.Fatal(err)
		}
		c := st.IKE.Connections[0]
		return c.Initiated, c.Acquires, st.Drops["acquire"], c.ChildrenCreated, c.Expired
	}
	time.Sleep(3 * time.Second)
	if ini, acq, _, _, _ := stats(); ini != 0 || acq != 0 {
		t.Fatalf("gw1 initiated %d times (%d acquires) before any packet: a trap waits for one\n%s", ini, acq, p.logs())
	}
	hostB := p.topo.Addr.HostB4.Addr()
	// The first pings go while IKE runs; then they pass.
	r, err := testbed.Ping(ctx, p.topo.HostA, hostB, testbed.PingOptions{Count: 40, Interval: 50 * time.Millisecond, Deadline: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ini, acq, dropped, _, _ := stats()
	t.Logf("first packets: %d of %d pings answered; gw1 initiated %d, %d acquires, %d packets dropped as acquire", r.Received, r.Sent, ini, acq, dropped)
	if ini != 1 || acq != 1 || dropped == 0 || dropped != uint64(r.Sent-r.Received) {
		t.Errorf("gw1 initiated %d times on %d acquires and dropped %d packets as acquire; %d of %d pings lost: want one negotiation, every lost ping counted as acquire\n%s",
			ini, acq, dropped, r.Sent-r.Received, r.Sent, p.logs())
	}
	if r.Received == 0 {
		t.Fatalf("no ping passed once the trap fired\n%s", p.logs())
	}
	first := waitChild(t, ctx, p.topo.GW1, p.bin, 1, p.logs)
	if r, err := testbed.Ping(ctx, p.topo.HostA, hostB, testbed.PingOptions{Count: 5}); err != nil || r.Received < 5 {
		t.Fatalf("after the trap: %d of 5 replies (%v)\n%s", r.Received, err, p.logs())
	}
	// life_time: the CHILD_SA goes, the IKE SA stays, the trap is back.
	waitFor(t, 20*time.Second, func() bool { _, _, _, _, exp := stats(); return exp >= 1 },
		func() string { return "gw1's CHILD_SA did not reach its life_time\n" + p.logs() })
	if r, err = testbed.Ping(ctx, p.topo.HostA, hostB, testbed.PingOptions{Count: 40, Interval: 50 * time.Millisecond, Deadline: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	ini, acq, dropped2, created, _ := stats()
	t.Logf("after life_time: %d of %d pings answered; gw1 initiated %d, %d acquires, %d more dropped as acquire, %d CHILD_SAs by CREATE_CHILD_SA", r.Received, r.Sent, ini, acq, dropped2-dropped, created)
	if ini != 1 || acq != 2 || created != 1 || r.Received == 0 {
		t.Errorf("the second trap: %d initiations, %d acquires, %d CHILD_SAs by CREATE_CHILD_SA, %d pings answered: want 1, 2, 1 and some\n%s", ini, acq, created, r.Received, p.logs())
	}
	again := waitChild(t, ctx, p.topo.GW1, p.bin, 1, p.logs)
	if again.SPIi != first.SPIi || again.ChildSAs[0].InSPI == first.ChildSAs[0].InSPI {
		t.Errorf("after the second trap gw1 has IKE SA %016x CHILD_SA %#x; want IKE SA %016x kept with a new CHILD_SA", again.SPIi, again.ChildSAs[0].InSPI, first.SPIi)
	}
}
