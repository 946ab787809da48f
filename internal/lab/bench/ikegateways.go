package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// IKEGateways is an espgw gateway pair that negotiates its tunnels itself
// over IPv6: gw1 one IKE connection per tunnel (start_action start), each
// to its own address of gw2, where one connection per address answers;
// each tunnel its own inner prefix pair (testbed's tunnel blocks). The
// load goes from hostA to hostB: gw1 sends every tunnel's ESP from its
// one address, as the SAs say.
type IKEGateways struct {
	Tunnels int `json:"gateway_tunnels"`
	// UpSeconds is from gw1's launch until every tunnel's CHILD_SA was
	// in force at gw1; TrafficSeconds until a load spread over every
	// tunnel came out whole at hostB.
	UpSeconds float64 `json:"up_seconds"`
	// Up is how many tunnels had their CHILD_SA in force at gw1 when the
	// bench last looked.
	Up             int     `json:"up"`
	TrafficSeconds float64 `json:"traffic_seconds"`
	// RSS is gw2's resident memory with every tunnel up; RSSPerTunnel its
	// growth per tunnel over gw2 started with the connections but none up.
	RSS          uint64  `json:"gw2_rss_bytes"`
	RSSPerTunnel float64 `json:"gw2_rss_per_tunnel_bytes"`
	// Under a load spread over every tunnel (Rate packets/s), gw1
	// rekeyed each tunnel's CHILD_SA (rekey_time); Rekeys is how many it
	// made, RekeySeconds from the first to the last, RekeySent and
	// RekeyLost the packets of the load.
	Rate         float64 `json:"rate_pps"`
	Rekeys       uint64  `json:"rekeys"`
	RekeySeconds float64 `json:"rekey_seconds"`
	RekeySent    uint64  `json:"rekey_sent"`
	RekeyLost    uint64  `json:"rekey_lost"`
	// KernelLosses are the kernels' loss counters that grew over the
	// rekeys' load, in the five namespaces (testbed.KernelLosses): where
	// packets went that neither gateway counts.
	KernelLosses testbed.KernelLosses `json:"kernel_losses,omitempty"`
	// Counts are each gateway's packet counters at the end: where the
	// packets that did not come out were dropped, and why.
	Counts [2]IKEGatewayCounts `json:"counts"`
	Error  string              `json:"error,omitempty"`
}

// IKEGatewayCounts are one gateway's packet counters: through the TUN and
// the wire, and dropped by reason (the gateway's and its SAs' together);
// and its IKE daemon's counts over every connection, for what a lost
// packet may have met (an IKE SA failed and set up again, a CHILD_SA not
// put in force, retransmissions).
type IKEGatewayCounts struct {
	TunIn   uint64            `json:"tun_in"`
	TunOut  uint64            `json:"tun_out"`
	WireIn  uint64            `json:"wire_in"`
	WireOut uint64            `json:"wire_out"`
	Drops   map[string]uint64 `json:"drops,omitempty"`
	IKE     map[string]uint64 `json:"ike,omitempty"`
}

func countsOf(st gateway.Stats) IKEGatewayCounts {
	c := IKEGatewayCounts{TunIn: st.TunIn, TunOut: st.TunOut, WireIn: st.WireIn, WireOut: st.WireOut, Drops: map[string]uint64{}}
	for k, v := range st.Drops {
		c.Drops[k] += v
	}
	for _, x := range st.SAs {
		for k, v := range x.Drops {
			c.Drops["sa "+k] += v
		}
	}
	if st.IKE != nil {
		c.IKE = map[string]uint64{"queue full": st.IKE.QueueFull, "unknown peer": st.IKE.UnknownPeer}
		for _, x := range st.IKE.Connections {
			for k, v := range map[string]uint64{"initiated": x.Initiated, "established": x.Established, "failed": x.Failed,
				"child rekeys": x.ChildRekeys, "dpd failures": x.DPDFailures, "expired": x.Expired,
				"install failures": x.InstallFailures, "redundant": x.RedundantChildSAs} {
				c.IKE[k] += v
			}
			for k, v := range x.Events {
				c.IKE[k] += v
			}
		}
		for k, v := range c.IKE {
			if v == 0 {
				delete(c.IKE, k)
			}
		}
	}
	return c
}

// gatewayAddr is gw2's outer address of tunnel i, in a /64 of its own
// that the WAN routes to gw2. Had the addresses been on the WAN link, the
// WAN would hold a neighbour entry for each, and the kernel's neighbour
// table (one per host, 1,024 entries by default) would overflow and stop
// IPv6 in every namespace of the machine.
func gatewayAddr(a netns.Addresses, i int) netip.Addr {
	b := tunnelAddrs(a).Addr().As16()
	b[12], b[13], b[14], b[15] = 0, 1, byte(i>>8), byte(i)
	return netip.AddrFrom16(b)
}

// tunnelAddrs is the /64 of gw2's per-tunnel outer addresses: the one
// after gw2's WAN /64.
func tunnelAddrs(a netns.Addresses) netip.Prefix {
	b := a.GW2WAN6.Masked().Addr().As16()
	b[7]++
	return netip.PrefixFrom(netip.AddrFrom16(b), 64)
}

// tunnelPrefixes are tunnel i's inner /24s behind gw1 and gw2.
func tunnelPrefixes(i int) (netip.Prefix, netip.Prefix) {
	p := func(block netip.Prefix) netip.Prefix {
		b := block.Addr().As4()
		b[1] += byte(i >> 8)
		b[2] = byte(i)
		return netip.PrefixFrom(netip.AddrFrom4(b), 24)
	}
	return p(testbed.TunnelBlockA), p(testbed.TunnelBlockB)
}

// tunQueue is the gateways' TUN transmit queue: half a second of
// maxSpreadRate.
const tunQueue = maxSpreadRate / 2

// gatewayConfig is gateway i's configuration (0: gw1, 1: gw2) for n
// tunnels; gw1 rekeys each CHILD_SA rekey after it is in force, less up
// to spread.
func gatewayConfig(a netns.Addresses, i, n int, ikeP, espP string, rekey, spread time.Duration, pprof bool) string {
	var b strings.Builder
	locals := []string{a.GW1WAN6.Addr().String()}
	route := testbed.TunnelBlockB
	if i == 1 {
		locals = locals[:0]
		for k := range n {
			locals = append(locals, gatewayAddr(a, k).String())
		}
		route = testbed.TunnelBlockA
	}
	if pprof {
		fmt.Fprintf(&b, "pprof: %s\n", testbed.PprofAddr)
	}
	// The TUN's queue holds half a second of the load (maxSpreadRate):
	// with thousands of connections rekeying, gw1's reader loses the CPU
	// for longer than the default 1000 packets last.
	fmt.Fprintf(&b, "local: [%s]\nengine: %s\nwan-io: %s\nstate-dir: state-gw%d\ntun:\n  name: espgw0\n  queue: %d\n  routes: [%s]\nike:\n  connections:\n",
		strings.Join(locals, ", "), testbed.DefaultEngine(), testbed.DefaultWanIO(), i+1, tunQueue, route)
	for k := range n {
		pa, pb := tunnelPrefixes(k)
		me, peer, lts, rts := a.GW1WAN6.Addr(), gatewayAddr(a, k), pa, pb
		// life_time far past the rekeys: a CHILD_SA whose rekey the load
		// delays is rekeyed late, never expired (the default, 1.1 times
		// rekey_time, leaves 4 s at 1000 tunnels).
		start, rk := "start", fmt.Sprintf("%dms\n          rand_time: %dms\n          life_time: %dms", rekey.Milliseconds(), spread.Milliseconds(), 3*rekey.Milliseconds())
		if i == 1 {
			me, peer, lts, rts, start, rk = peer, me, pb, pa, "none", "0"
		}
		fmt.Fprintf(&b, `    t%[1]d:
      local_addrs: [%[2]s]
      remote_addrs: [%[3]s]
      local: {id: gw%[4]d-%[1]d.example, auth: psk}
      remote: {id: gw%[5]d-%[1]d.example, auth: psk}
      proposals: %[6]s
      psk_env: ESPGW_BENCH_PSK
      rekey_time: 0
      children:
        net:
          local_ts: [%[7]s]
          remote_ts: [%[8]s]
          esp_proposals: %[9]s
          start_action: %[10]s
          rekey_time: %[11]s
`, k, me, peer, i+1, 2-i, ikeP, lts, rts, espP, start, rk)
	}
	return b.String()
}

// measureGateways runs the gateway pair with o.Tunnels tunnels.
func (b *ikeBed) measureGateways(ctx context.Context, res *IKEGateways) (err error) {
	ctx, cancel := context.WithTimeout(ctx, b.o.Timeout)
	defer cancel()
	topo, a, n := b.topo, b.topo.Addr, res.Tunnels
	var batch strings.Builder
	for k := range n {
		fmt.Fprintf(&batch, "addr add %s/128 dev lo nodad\n", gatewayAddr(a, k))
	}
	addrs := filepath.Join(b.dir, "gw2-addresses")
	if err := os.WriteFile(addrs, []byte(batch.String()), 0o600); err != nil {
		return err
	}
	if out, err := topo.GW2.Output(ctx, "ip", "-batch", addrs); err != nil {
		return fmt.Errorf("gw2's addresses of the tunnels: %w: %s", err, out)
	}
	for _, c := range []struct {
		ns   *netns.Namespace
		args []string
	}{
		{topo.HostA, []string{"route", "add", "local", testbed.TunnelBlockA.String(), "dev", "lo"}},
		{topo.HostB, []string{"route", "add", "local", testbed.TunnelBlockB.String(), "dev", "lo"}},
		{topo.GW1, []string{"route", "add", testbed.TunnelBlockA.String(), "via", a.HostA4.Addr().String()}},
		{topo.GW2, []string{"route", "add", testbed.TunnelBlockB.String(), "via", a.HostB4.Addr().String()}},
		{topo.WAN, []string{"-6", "route", "add", tunnelAddrs(a).String(), "via", a.GW2WAN6.Addr().String()}},
	} {
		if out, err := c.ns.Output(ctx, "ip", c.args...); err != nil {
			return fmt.Errorf("tunnel routes: ip %v in %s: %w: %s", c.args, c.ns.Short(), err, out)
		}
	}
	// gw1 rekeys once every tunnel is up: after a time that grows with
	// the count, spread over a fifth of it.
	rekey := 20*time.Second + time.Duration(n)*20*time.Millisecond
	spread := rekey / 5
	var confs [2]string
	for i := range confs {
		confs[i] = filepath.Join(b.dir, fmt.Sprintf("ike-gw%d.yaml", i+1))
		if err := os.WriteFile(confs[i], []byte(gatewayConfig(a, i, n, b.o.IKE, b.o.ESP, rekey, spread, b.o.ProfileDir != "")), 0o600); err != nil {
			return err
		}
	}
	os.Setenv("ESPGW_BENCH_PSK", ikeSecret)
	defer os.Unsetenv("ESPGW_BENCH_PSK")
	gw2, err := testbed.RunGateway(ctx, topo.GW2, b.o.Binary, confs[1])
	if err != nil {
		return fmt.Errorf("gw2: %w", err)
	}
	defer gw2.Stop(syscall.SIGKILL)
	rss0, _, _ := memory(gw2.PID())
	start := time.Now()
	gw1, err := testbed.RunGateway(ctx, topo.GW1, b.o.Binary, confs[0])
	if err != nil {
		return fmt.Errorf("gw1: %w", err)
	}
	defer gw1.Stop(syscall.SIGKILL)
	defer func() {
		for i, ns := range []*netns.Namespace{topo.GW1, topo.GW2} {
			if st, err := testbed.GatewayStats(context.Background(), ns, b.o.Binary); err == nil {
				res.Counts[i] = countsOf(st)
			}
		}
	}()
	logs := func() string {
		out := gw1.Output()
		if len(out) > 2000 {
			out = out[len(out)-2000:]
		}
		return "\ngw1's last output:\n" + out
	}
	for {
		st, err := testbed.GatewayStats(ctx, topo.GW1, b.o.Binary)
		if err == nil {
			res.Up = childrenInForce(st)
		}
		if err == nil && res.Up >= n {
			res.UpSeconds = time.Since(start).Seconds()
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%d of %d tunnels up at gw1: %w%s", res.Up, n, ctx.Err(), logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	targets := make([]Target, n)
	for k := range targets {
		pa, pb := tunnelPrefixes(k)
		targets[k] = Target{Src: pa.Addr().Next(), Dst: pb.Addr().Next()}
	}
	probe, err := NewSpreadProbe(topo.HostA, topo.HostB, targets)
	if err != nil {
		return err
	}
	defer probe.Close()
	mix := Single(512)
	// Every tunnel gets four packets a trial: eight a second each, up to
	// maxSpreadRate in all, beyond which the trials grow longer.
	res.Rate = min(max(2000, float64(8*n)), maxSpreadRate)
	trial := max(500*time.Millisecond, time.Duration(float64(4*n)/res.Rate*float64(time.Second)))
	for {
		r, err := probe.Run(ctx, mix, res.Rate, trial, false)
		if err != nil {
			return err
		}
		if r.Sent > 0 && r.Received >= r.Sent {
			res.TrafficSeconds = time.Since(start).Seconds()
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("no load came out whole over the %d tunnels (last: %d of %d): %w%s", n, r.Received, r.Sent, ctx.Err(), logs())
		}
	}
	if rss, _, err := memory(gw2.PID()); err == nil {
		res.RSS = rss
		res.RSSPerTunnel = (float64(rss) - float64(rss0)) / float64(n)
	}
	if b.o.ProfileDir != "" {
		if err := os.MkdirAll(b.o.ProfileDir, 0o755); err != nil {
			return fmt.Errorf("the profile folder: %w", err)
		}
		wait := b.profileRekeys(ctx, [2]*testbed.Gateway{gw1, gw2}, time.Until(start.Add(rekey-spread)), min(spread, time.Minute))
		defer func() { err = errors.Join(err, wait()) }()
	}
	// The load runs in trials of a second (or longer, as above) until gw1
	// made a rekey per tunnel (or the time bound), each trial's loss
	// counted.
	var first, last time.Time
	nss := []*netns.Namespace{topo.HostA, topo.GW1, topo.WAN, topo.GW2, topo.HostB}
	before, err := testbed.ReadKernelLosses(nss...)
	if err != nil {
		return err
	}
	for res.Rekeys < uint64(n) {
		if ctx.Err() != nil {
			return fmt.Errorf("%d of %d CHILD_SAs rekeyed: %w%s", res.Rekeys, n, ctx.Err(), logs())
		}
		r, err := probe.Run(ctx, mix, res.Rate, max(time.Second, trial), false)
		if err != nil {
			return err
		}
		res.RekeySent += r.Sent
		res.RekeyLost += r.Sent - min(r.Received, r.Sent)
		st, err := testbed.GatewayStats(ctx, topo.GW1, b.o.Binary)
		if err != nil {
			continue
		}
		if k := childRekeys(st); k > res.Rekeys {
			if res.Rekeys == 0 {
				first = time.Now()
			}
			res.Rekeys, last = k, time.Now()
		}
	}
	// The last rekeys' old CHILD_SAs are deleted after the new ones carry
	// traffic: one more trial covers that.
	r, err := probe.Run(ctx, mix, res.Rate, max(time.Second, trial), false)
	if err != nil {
		return err
	}
	res.RekeySent += r.Sent
	res.RekeyLost += r.Sent - min(r.Received, r.Sent)
	res.RekeySeconds = last.Sub(first).Seconds()
	after, err := testbed.ReadKernelLosses(nss...)
	if err != nil {
		return err
	}
	res.KernelLosses = after.Since(before)
	if res.RekeyLost > 0 {
		var ike [2]map[string]uint64
		for i, ns := range []*netns.Namespace{topo.GW1, topo.GW2} {
			if st, err := testbed.GatewayStats(ctx, ns, b.o.Binary); err == nil {
				ike[i] = countsOf(st).IKE
			}
		}
		return fmt.Errorf("%d of %d packets lost while gw1 rekeyed %d CHILD_SAs; the kernels' loss counters grew: %v; the IKE daemons' counts: gw1 %v, gw2 %v; gw1's warnings:\n%s",
			res.RekeyLost, res.RekeySent, res.Rekeys, res.KernelLosses, ike[0], ike[1], warnings(gw1.Output(), 20))
	}
	return nil
}

// warnings are the first n warning and error lines of a gateway's log.
func warnings(log string, n int) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if len(out) < n && (strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR")) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// profileRekeys writes a CPU profile of each gateway over d, from after
// (when the first rekeys fall due) on; the returned func waits for them.
func (b *ikeBed) profileRekeys(ctx context.Context, gws [2]*testbed.Gateway, after, d time.Duration) (wait func() error) {
	var wg sync.WaitGroup
	var errs [2]error
	for i, g := range gws {
		wg.Go(func() {
			select {
			case <-time.After(after):
			case <-ctx.Done():
				return
			}
			file := filepath.Join(b.o.ProfileDir, fmt.Sprintf("ike-gateways-%d-gw%d-rekeys.pprof", b.o.GatewayTunnels, i+1))
			errs[i] = g.Profile(ctx, d, file)
		})
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs[:]...)
	}
}

// maxSpreadRate is the most packets a second the gateway pair's load
// sends over all its tunnels: about what two CPUs carry through the hosts'
// and both gateways' kernels and the gateways (at 64,000 a second the
// hosts' side lost three quarters while the gateways lost none).
const maxSpreadRate = 16000

// childrenInForce is how many of gw1's connections have a CHILD_SA.
func childrenInForce(st gateway.Stats) int {
	n := 0
	if st.IKE != nil {
		for _, c := range st.IKE.Connections {
			if slices.ContainsFunc(c.SAs, func(s gateway.IKESAStats) bool { return len(s.ChildSAs) > 0 }) {
				n++ // a connection with two IKE SAs is still one tunnel
			}
		}
	}
	return n
}

func childRekeys(st gateway.Stats) uint64 {
	var n uint64
	if st.IKE != nil {
		for _, c := range st.IKE.Connections {
			n += c.ChildRekeys
		}
	}
	return n
}
