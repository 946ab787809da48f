package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/espgw/espgw/internal/lab/netns"
)

// natPorts are the source port ranges the NAT maps gw1's datagrams to,
// one after another at each rebinding: at start, the ports as they are
// while free (MASQUERADE keeps them), then these.
var natPorts = []string{"", "20000-20999", "30000-30999"}

// natRule is the wan namespace's MASQUERADE of gw1's UDP toward gw2,
// onto the ports of natPorts[i].
func natRule(t *netns.Topology, i int) []string {
	a := t.Addr
	rule := []string{"POSTROUTING", "-o", "gw2", "-s", a.GW1WAN4.Addr().String(), "-p", "udp", "-j", "MASQUERADE"}
	if p := natPorts[i%len(natPorts)]; p != "" {
		rule = append(rule, "--to-ports", p)
	}
	return rule
}

// startNAT makes the wan namespace gw1's NAT before the gateways start:
// it routes between them (no relay) and masquerades gw1's UDP toward
// gw2 behind its own address on gw2's side.
func startNAT(t *netns.Topology) error {
	if out, err := t.WAN.Output(context.Background(), "iptables", append([]string{"-t", "nat", "-A"}, natRule(t, 0)...)...); err != nil {
		return fmt.Errorf("topology.nat: iptables MASQUERADE in %s: %w: %s", t.WAN.Short(), err, out)
	}
	return nil
}

// natAddr is the address gw2 sees gw1 at behind the NAT.
func natAddr(a netns.Addresses) string { return a.WANToGW24.Addr().String() }

// rebindNAT changes the NAT's mapping of gw1: the MASQUERADE rule moves
// to the next port range and the connection tracking table is flushed,
// so gw1's next datagram leaves from another port (a home router that
// restarted). With sa.ike the action ends when gw2 has followed gw1 to
// its new port (RFC 7296 §2.23), at most a minute.
func (r *runner) rebindNAT(ctx context.Context, res *ActionResult) error {
	wan := r.bed.Topo.WAN
	before, err := r.bed.Stats(ctx, 1)
	if err != nil {
		return fmt.Errorf("nat-rebind: %w", err)
	}
	moved0 := ikeCountsOf(before).moved
	r.natGen++
	// The new rule goes in before the old one goes, so that no datagram
	// leaves unmasqueraded, from gw1's own address, in between.
	for _, op := range [][]string{append([]string{"-t", "nat", "-A"}, natRule(r.bed.Topo, r.natGen)...), append([]string{"-t", "nat", "-D"}, natRule(r.bed.Topo, r.natGen-1)...)} {
		if out, err := wan.Output(ctx, "iptables", op...); err != nil {
			return fmt.Errorf("nat-rebind: iptables %v: %w: %s", op, err, out)
		}
	}
	if err := wan.Netlink().ConntrackTableFlush(netlink.ConntrackTable); err != nil {
		return fmt.Errorf("nat-rebind: flush the connection tracking of %s: %w", wan.Short(), err)
	}
	t0 := time.Now()
	for deadline := t0.Add(time.Minute); ; {
		st, err := r.bed.Stats(ctx, 1)
		if err == nil && ikeCountsOf(st).moved > moved0 {
			res.Recovered = time.Since(t0).Round(time.Millisecond)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nat-rebind: gw2 did not follow gw1 to its new port within a minute\n%s", r.gatewayLogs())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
