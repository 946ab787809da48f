package iketunnel

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/internal/lab/wanrelay"
)

// wanDelay is the one-way delay of the collision test's WAN: each side's
// rekey request is under way that long, the window in which the other
// side's own request makes a collision.
const wanDelay = 100 * time.Millisecond

// TestGatewayPairRekeyCollisions runs the example pair with both gateways
// rekeying, rekey_time nearly equal on the two sides (gw2's longer by the
// WAN's one-way delay of 100ms, the lead it has on gw1 after each exchange
// gw1 started, so both fire at once) and no random part: the two sides
// rekey the same SA at once again and again, the collisions of RFC 7296
// §2.8.1. Once CHILD_SAs (the IKE SA not rekeyed; life_time 8s, so none
// expires unrekeyed), once IKE SAs (the CHILD_SA not rekeyed). Under a counted ping stream across all of it none
// may be lost; both sides must count the same collisions, each settled by
// exactly one side deleting its own new SA (for CHILD_SAs, the redundant
// ones the gateways count add up to the collisions), none left undeleted;
// and between rekeys each side holds one IKE SA with one CHILD_SA, the
// same pair on both sides, two SAs in force.
func TestGatewayPairRekeyCollisions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two espgw gateways in namespaces; run without -short")
	}
	labtest.NeedNamespaces(t)
	for _, c := range []struct {
		name string
		// ikeRekey and childRekey are gw1's; gw2's are longer by wanDelay.
		ikeRekey, childRekey time.Duration
		event                string
	}{
		{"child", 0, 4 * time.Second, ike.EventChildCollision},
		{"ike", 4 * time.Second, 0, ike.EventIKECollision},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rekey := func(d time.Duration, i int) string {
				if d == 0 {
					return "0"
				}
				return (d + time.Duration(i)*wanDelay).String()
			}
			delayed := func(seed uint64) impair.Config {
				cfg := impair.DefaultConfig()
				cfg.Seed, cfg.Match, cfg.Delay.Time = seed, []string{"esp", "udp/500", "udp/4500"}, wanDelay
				return cfg
			}
			relay := &wanrelay.Config{AToB: delayed(1), BToA: delayed(2)}
			p := startPairWith(t, ctx, "ikecol", false, relay, func(i int, conf string) string {
				conf = strings.Replace(conf, "      rekey_time: 4h\n", "      rekey_time: "+rekey(c.ikeRekey, i)+"\n      rand_time: 0\n", 1)
				// life_time well after rekey_time: a rekey that waits for a
				// liveness check of the IKE SA on a loaded machine must not
				// let the CHILD_SA expire.
				life := ""
				if c.childRekey > 0 {
					life = "          life_time: 8s\n"
				}
				return strings.Replace(conf, "          rekey_time: 1h\n", "          rekey_time: "+rekey(c.childRekey, i)+"\n          rand_time: 0\n"+life, 1)
			})
			defer p.close()
			waitChild(t, ctx, p.topo.GW1, p.bin, 1, p.logs)
			waitChild(t, ctx, p.topo.GW2, p.bin, 1, p.logs)
			r, err := testbed.Ping(ctx, p.topo.HostA, p.topo.Addr.HostB4.Addr(), testbed.PingOptions{Count: 1800, Interval: 12 * time.Millisecond, Deadline: 40 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d pings across the rekeys: %d answered", r.Sent, r.Received)
			if r.Sent == 0 || r.Received != r.Sent {
				t.Errorf("rekey collisions under traffic: %d of %d pings answered (%d lost)\n%s", r.Received, r.Sent, r.Sent-r.Received, p.logs())
			}
			// Between two rekeys: the same IKE SA and CHILD_SA on both sides.
			var st [2]gateway.Stats
			var why string
			waitFor(t, 20*time.Second, func() bool {
				for i, ns := range []*netns.Namespace{p.topo.GW1, p.topo.GW2} {
					if st[i], err = testbed.GatewayStats(ctx, ns, p.bin); err != nil || st[i].IKE == nil {
						why = fmt.Sprintf("stats of gw%d: %v", i+1, err)
						return false
					}
				}
				why = settled(st)
				return why == ""
			}, func() string {
				return "the two sides never agreed on one IKE SA and one CHILD_SA: " + why + "\n" + p.logs()
			})
			c1, c2 := st[0].IKE.Connections[0], st[1].IKE.Connections[0]
			t.Logf("gw1: %d CHILD_SA rekeys, %d IKE SA rekeys, %d redundant; events %v", c1.ChildRekeys, c1.IKERekeys, c1.RedundantChildSAs, c1.Events)
			t.Logf("gw2: %d CHILD_SA rekeys, %d IKE SA rekeys, %d redundant; events %v", c2.ChildRekeys, c2.IKERekeys, c2.RedundantChildSAs, c2.Events)
			n := c1.Events[c.event]
			if n == 0 || c2.Events[c.event] != n {
				t.Errorf("%q: gw1 counts %d, gw2 %d: want the same collisions, at least one", c.event, n, c2.Events[c.event])
			}
			if c.event == ike.EventChildCollision && c1.RedundantChildSAs+c2.RedundantChildSAs != n {
				t.Errorf("%d CHILD_SA collisions, but gw1 deleted %d redundant CHILD_SAs and gw2 %d: want one side each time", n, c1.RedundantChildSAs, c2.RedundantChildSAs)
			}
			for i, cs := range []gateway.IKEConnStats{c1, c2} {
				if k := cs.Events["redundant SA not deleted"]; k != 0 {
					t.Errorf("gw%d: %d redundant SAs of collisions not deleted", i+1, k)
				}
				if cs.Expired != 0 {
					t.Errorf("gw%d: %d CHILD_SAs reached their life_time unrekeyed", i+1, cs.Expired)
				}
				if cs.InstallFailures != 0 {
					t.Errorf("gw%d: %d CHILD_SAs not put in force", i+1, cs.InstallFailures)
				}
			}
		})
	}
}

// settled says what keeps two gateways' stats from holding one IKE SA
// with one CHILD_SA, the same on both sides, with its two SAs in force
// and nothing else ("" when they do).
func settled(st [2]gateway.Stats) string {
	var sas [2]gateway.IKESAStats
	for i, s := range st {
		c := s.IKE.Connections[0]
		if len(c.SAs) != 1 || len(c.SAs[0].ChildSAs) != 1 {
			return fmt.Sprintf("gw%d has %d IKE SAs (%+v)", i+1, len(c.SAs), c.SAs)
		}
		if n := inForce(s); n != 2 {
			return fmt.Sprintf("gw%d has %d SAs in force", i+1, n)
		}
		sas[i] = c.SAs[0]
	}
	a, b := sas[0], sas[1]
	switch {
	case a.SPIi != b.SPIi || a.SPIr != b.SPIr:
		return fmt.Sprintf("gw1's IKE SA is %016x_%016x, gw2's %016x_%016x", a.SPIi, a.SPIr, b.SPIi, b.SPIr)
	case a.ChildSAs[0].InSPI != b.ChildSAs[0].OutSPI || a.ChildSAs[0].OutSPI != b.ChildSAs[0].InSPI:
		return fmt.Sprintf("gw1's CHILD_SA is %#x/%#x, gw2's %#x/%#x", a.ChildSAs[0].InSPI, a.ChildSAs[0].OutSPI, b.ChildSAs[0].InSPI, b.ChildSAs[0].OutSPI)
	case !a.ChildSAs[0].Outbound || !b.ChildSAs[0].Outbound:
		return "a side does not send through its CHILD_SA"
	}
	return ""
}
