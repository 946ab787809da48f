package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/internal/secret"
)

// Action is a change made to the running gateways, through their control
// sockets, at a time during the traffic steps: a make-before-break rekey of
// one tunnel, or tunnels added or removed next to the live ones.
type Action struct {
	// At is when, from the start of the traffic.
	At time.Duration `yaml:"at" json:"at"`
	// Rekey is the index of the tunnel to roll over to new SAs (0 on a
	// one-tunnel bed).
	Rekey *int `yaml:"rekey" json:"rekey,omitempty"`
	// Add is a number of tunnels to add after the last one (SAs and
	// policies on both gateways, as one change each).
	Add int `yaml:"add" json:"add,omitempty"`
	// Del is a number of tunnels to delete, the last ones first.
	Del int `yaml:"del" json:"del,omitempty"`
	// Grace is how long a rekey keeps the old inbound SAs (default 200ms).
	Grace time.Duration `yaml:"grace" json:"grace,omitempty"`
	// Restart kills a gateway's process (gw1 or gw2, SIGKILL: a crash)
	// and starts it again after Down; with sa.ike the action ends when
	// the tunnel is back up on both gateways.
	Restart string        `yaml:"restart" json:"restart,omitempty"`
	Down    time.Duration `yaml:"down" json:"down,omitempty"`
	// NATRebind changes the NAT's mapping of gw1 (topology.nat): another
	// source port from then on.
	NATRebind bool `yaml:"nat-rebind" json:"nat_rebind,omitempty"`
}

func (a *Action) kind() string {
	switch {
	case a.Rekey != nil:
		return fmt.Sprintf("rekey %d", *a.Rekey)
	case a.Add > 0:
		return fmt.Sprintf("add %d", a.Add)
	case a.Del > 0:
		return fmt.Sprintf("del %d", a.Del)
	case a.Restart != "":
		return "restart " + a.Restart
	case a.NATRebind:
		return "nat-rebind"
	}
	return "action"
}

// ActionResult is what an action did.
type ActionResult struct {
	Action string        `json:"action"`
	At     time.Duration `json:"at"`
	// Took is how long the change took, all phases and gateways.
	Took time.Duration `json:"took"`
	// Recovered is, for a restart with sa.ike, the time from the kill
	// until the tunnel was up again on both gateways.
	Recovered time.Duration `json:"recovered,omitempty"`
	Error     string        `json:"error,omitempty"`
}

// tunnelsMetrics are the per-tunnel metrics (topology.tunnels).
var tunnelsMetrics = []string{"count", "carried", "min_opened", "max_opened"}

// actionMetrics are the metrics of the actions.
var actionMetrics = []string{"done", "failed", "rekeys", "added", "deleted", "restarts", "rebinds", "recovered_in"}

// validateTunnels checks topology.tunnels, the spread steps and the actions.
func (s *Scenario) validateTunnels(perr func(int, string, error) error) error {
	at := func(path ...string) int { return lineOf(s.root, path...) }
	n := s.Topology.Tunnels
	if n < 0 || n > testbed.MaxTunnels {
		return perr(at("topology", "tunnels"), "topology.tunnels", fmt.Errorf("%d: want 1..%d", n, testbed.MaxTunnels))
	}
	if n >= 1 && s.SA.Mode != "tunnel" {
		return perr(at("topology", "tunnels"), "topology.tunnels", errors.New("many tunnels need sa.mode: tunnel"))
	}
	for i, st := range s.Traffic.Steps {
		if u := st.UDP; u != nil && u.Spread {
			if u.From != "hostA" || u.To != "hostB" || u.Family != "ipv4" {
				return perr(stepLine(s.root, i), fmt.Sprintf("traffic.steps[%d].udp.spread", i), errors.New("spread traffic goes from hostA to hostB over IPv4"))
			}
		}
	}
	live := max(n, 1)
	for i := range s.Traffic.Actions {
		a := &s.Traffic.Actions[i]
		field := fmt.Sprintf("traffic.actions[%d]", i)
		line := at("traffic", "actions")
		kinds := 0
		for _, set := range []bool{a.Rekey != nil, a.Add != 0, a.Del != 0, a.Restart != "", a.NATRebind} {
			if set {
				kinds++
			}
		}
		switch {
		case kinds != 1:
			return perr(line, field, errors.New("want exactly one of rekey, add, del, restart, nat-rebind"))
		case a.NATRebind && !s.Topology.NAT:
			return perr(line, field+".nat-rebind", errors.New("needs topology.nat: true"))
		case a.Restart != "" && a.Restart != "gw1" && a.Restart != "gw2":
			return perr(line, field+".restart", fmt.Errorf("%s: want gw1 or gw2", secret.Word(a.Restart, "gw1", "gw2")))
		case a.Down < 0 || a.Down > time.Minute:
			return perr(line, field+".down", fmt.Errorf("%v: want 0..1m", a.Down))
		case a.Down != 0 && a.Restart == "":
			return perr(line, field+".down", errors.New("only with restart"))
		case a.At < 0 || a.At > s.Timeout:
			return perr(line, field+".at", fmt.Errorf("%v: want a time from 0 within the timeout (%v)", a.At, s.Timeout))
		case a.Grace < 0 || a.Grace > time.Minute:
			return perr(line, field+".grace", fmt.Errorf("%v: want 0..1m", a.Grace))
		case a.Rekey != nil && (*a.Rekey < 0 || *a.Rekey >= live):
			return perr(line, field+".rekey", fmt.Errorf("tunnel %d: the scenario starts with tunnels 0..%d", *a.Rekey, live-1))
		case a.Add < 0 || a.Add > 10000:
			return perr(line, field+".add", fmt.Errorf("%d: want 1..10000 tunnels", a.Add))
		case a.Del < 0 || a.Del > testbed.MaxTunnels:
			return perr(line, field+".del", fmt.Errorf("%d: want a number of tunnels", a.Del))
		}
		a.Grace = cmp.Or(a.Grace, 200*time.Millisecond)
	}
	for i, st := range s.Traffic.Steps {
		if st.AfterActions && len(s.Traffic.Actions) == 0 {
			return perr(stepLine(s.root, i), fmt.Sprintf("traffic.steps[%d].after-actions", i), errors.New("the scenario has no actions to wait for"))
		}
	}
	return nil
}

// restart kills a gateway (SIGKILL) and starts it again, keeping what
// its dead process counted; with sa.ike it waits for the tunnel.
func (r *runner) restart(ctx context.Context, a *Action, res *ActionResult) error {
	i := 0
	if a.Restart == "gw2" {
		i = 1
	}
	pre, err := r.rawSnapshot(ctx)
	if err != nil {
		return fmt.Errorf("restart %s: counters before: %w", a.Restart, err)
	}
	if _, err := r.bed.StopGateway(i, syscall.SIGKILL); err != nil {
		return fmt.Errorf("restart %s: kill: %w", a.Restart, err)
	}
	killed := time.Now()
	g := pre.GW[i]
	if b := r.base.gw[i]; b != nil {
		g = statsPlus(*b, g)
	}
	r.base.gw[i] = &g
	r.base.tun[i] += pre.TUNDrops[i]
	r.base.tunRx[i] += pre.tunRx[i]
	r.restarted[i] = append(r.restarted[i], pre.GW[i])
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(a.Down):
	}
	if err := r.bed.StartGateway(ctx, i); err != nil {
		return fmt.Errorf("restart %s: %w", a.Restart, err)
	}
	if r.ike != nil {
		if _, err := r.waitIKE(ctx, time.Minute); err != nil {
			return fmt.Errorf("restart %s: %w", a.Restart, err)
		}
		res.Recovered = time.Since(killed).Round(time.Millisecond)
	}
	return nil
}

// tunnelSet is the tunnels in force during a run, as the actions change it.
type tunnelSet struct {
	mu      sync.Mutex
	live    []*testbed.Tunnel
	gen     map[int]int // rekeys per tunnel index
	next    int         // the index an added tunnel gets
	results []ActionResult
	// spis are the gw1→gw2 SPIs each tunnel index has had, for the
	// per-tunnel counts.
	spis map[int][]uint32
}

func newTunnelSet(b *testbed.Bed) *tunnelSet {
	ts := &tunnelSet{gen: map[int]int{}, spis: map[int][]uint32{}}
	ts.live = append(ts.live, b.Tunnels...)
	if len(ts.live) == 0 && b.SAs[0] != nil {
		// A one-tunnel bed: its SAs are tunnel 0.
		ts.live = []*testbed.Tunnel{{Index: 0, Out: b.SAs[0], Back: b.SAs[1]}}
	}
	for _, t := range ts.live {
		ts.spis[t.Index] = []uint32{t.Out.SPI}
	}
	ts.next = len(ts.live)
	return ts
}

// runActions performs the scenario's actions at their times, from start.
func (r *runner) runActions(ctx context.Context, start time.Time) {
	acts := append([]Action(nil), r.s.Traffic.Actions...)
	sort.SliceStable(acts, func(i, j int) bool { return acts[i].At < acts[j].At })
	for _, a := range acts {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(a.At))):
		}
		r.opts.progress("%s: %s at %v", r.s.Name, a.kind(), a.At)
		t0 := time.Now()
		res := ActionResult{Action: a.kind(), At: t0.Sub(start).Round(time.Millisecond)}
		var err error
		switch {
		case a.Restart != "":
			err = r.restart(ctx, &a, &res)
		case a.NATRebind:
			err = r.rebindNAT(ctx, &res)
		default:
			err = r.act(&a)
		}
		res.Took = time.Since(t0).Round(time.Microsecond)
		if err != nil {
			res.Error = err.Error()
		}
		r.tunnels.mu.Lock()
		r.tunnels.results = append(r.tunnels.results, res)
		r.tunnels.mu.Unlock()
	}
}

// act makes one action's changes on both gateways.
func (r *runner) act(a *Action) error {
	ts := r.tunnels
	ts.mu.Lock()
	defer ts.mu.Unlock()
	switch {
	case a.Rekey != nil:
		pos := slices.IndexFunc(ts.live, func(t *testbed.Tunnel) bool { return t.Index == *a.Rekey })
		if pos < 0 {
			return fmt.Errorf("rekey: tunnel %d is not in force", *a.Rekey)
		}
		old := ts.live[pos]
		ts.gen[old.Index]++
		next, err := r.bed.NewTunnel(old.Index, ts.gen[old.Index])
		if err != nil {
			return err
		}
		// The tunnel set stays usable for the metrics during the grace.
		ts.mu.Unlock()
		err = r.bed.RekeyTunnel(old, next, a.Grace)
		ts.mu.Lock()
		if err != nil {
			return err
		}
		ts.live[pos] = next
		ts.spis[next.Index] = append(ts.spis[next.Index], next.Out.SPI)
	case a.Add > 0:
		var added []*testbed.Tunnel
		for range a.Add {
			t, err := r.bed.NewTunnel(ts.next, 0)
			if err != nil {
				return err
			}
			ts.next++
			added = append(added, t)
		}
		if err := r.bed.AddTunnels(added...); err != nil {
			return err
		}
		ts.live = append(ts.live, added...)
	case a.Del > 0:
		if a.Del >= len(ts.live) {
			return fmt.Errorf("del %d: only %d tunnels are in force (the first stays)", a.Del, len(ts.live))
		}
		if err := r.bed.DelTunnels(ts.live[len(ts.live)-a.Del:]...); err != nil {
			return err
		}
		ts.live = ts.live[:len(ts.live)-a.Del]
	}
	return nil
}

// spreadTargets are the tunnels spread traffic goes through: those in force
// when the step starts.
func (r *runner) spreadTargets() []*testbed.Tunnel {
	r.tunnels.mu.Lock()
	defer r.tunnels.mu.Unlock()
	return append([]*testbed.Tunnel(nil), r.tunnels.live[:min(len(r.tunnels.live), max(r.s.Topology.Tunnels, 1))]...)
}

// tunnelMetrics are the per-tunnel counts: how many tunnels gw2 opened
// packets on (each tunnel's gw1→gw2 SAs, every generation, counted), and
// the fewest and most one tunnel opened.
func (r *runner) tunnelMetrics(m Metrics, gw2 gateway.Stats) {
	ts := r.tunnels
	ts.mu.Lock()
	defer ts.mu.Unlock()
	opened := map[string]uint64{}
	for _, s := range gw2.SAs {
		opened[s.SPI] += s.OpenedPackets
	}
	m["tunnels.count"] = float64(len(ts.live))
	var lo, hi uint64
	carried := 0
	first := true
	for idx, spis := range ts.spis {
		if idx >= max(r.s.Topology.Tunnels, 1) {
			continue
		}
		var n uint64
		for _, spi := range spis {
			n += opened[fmt.Sprintf("%#x", spi)]
		}
		if n > 0 {
			carried++
		}
		if first || n < lo {
			lo = n
		}
		if first || n > hi {
			hi = n
		}
		first = false
	}
	m["tunnels.carried"], m["tunnels.min_opened"], m["tunnels.max_opened"] = float64(carried), float64(lo), float64(hi)
	for _, a := range ts.results {
		if a.Error != "" {
			m["actions.failed"]++
			continue
		}
		m["actions.done"]++
		switch strings.Fields(a.Action)[0] {
		case "rekey":
			m["actions.rekeys"]++
		case "add":
			m["actions.added"]++
		case "del":
			m["actions.deleted"]++
		case "restart", "nat-rebind":
			if a.Action == "nat-rebind" {
				m["actions.rebinds"]++
			} else {
				m["actions.restarts"]++
			}
			m["actions.recovered_in"] = max(m["actions.recovered_in"], a.Recovered.Seconds())
		}
	}
	for _, k := range actionMetrics {
		m["actions."+k] += 0
	}
}

// spreadAddr is the tunnel a spread packet goes through.
func spreadAddr(ts []*testbed.Tunnel, i int) (src, dst netip.Addr) {
	t := ts[i%len(ts)]
	return t.HostA, t.HostB
}
