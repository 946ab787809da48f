package testbed

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/espgw/espgw/internal/lab/wanrelay"
)

// Relay is a wanrelay running inside the bed's wan namespace, bridging the
// two gateways' WAN links through its impairment stages.
type Relay struct {
	*wanrelay.Relay
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// StartRelay turns the wan namespace from a router into a bump in the wire
// and starts a relay there: wan loses its addresses and stops forwarding,
// each gateway reaches the other's outer addresses straight out of its wan0
// (on-link routes), and every frame between them crosses the relay, gw1→gw2
// through cfg.AToB and gw2→gw1 through cfg.BToA. cfg's Netns, A and B are
// filled in. Close stops the relay; Bed.Close does not.
func (b *Bed) StartRelay(cfg wanrelay.Config) (*Relay, error) {
	t := b.Topo
	a := t.Addr
	ctx := context.Background()
	for _, port := range []string{"gw1", "gw2"} {
		if out, err := t.WAN.Output(ctx, "ip", "addr", "flush", "dev", port); err != nil {
			return nil, fmt.Errorf("bridge the wan namespace: %w: %s", err, out)
		}
	}
	err := t.WAN.Sysctl(map[string]string{
		"net/ipv4/ip_forward":                "0",
		"net/ipv6/conf/all/forwarding":       "0",
		"net/ipv6/conf/gw1/disable_ipv6":     "1",
		"net/ipv6/conf/gw2/disable_ipv6":     "1",
		"net/ipv6/conf/all/disable_ipv6":     "1",
		"net/ipv6/conf/default/disable_ipv6": "1",
	})
	if err != nil {
		return nil, fmt.Errorf("bridge the wan namespace: %w", err)
	}
	for _, r := range []struct {
		gw   int
		dsts []netip.Prefix
	}{
		{0, []netip.Prefix{a.GW2WAN4, a.GW2WAN6}},
		{1, []netip.Prefix{a.GW1WAN4, a.GW1WAN6}},
	} {
		ns := t.GW1
		if r.gw == 1 {
			ns = t.GW2
		}
		for _, d := range r.dsts {
			host := netip.PrefixFrom(d.Addr(), d.Addr().BitLen())
			if err := ns.AddDeviceRoute(host, "wan0"); err != nil {
				return nil, fmt.Errorf("bridge the wan namespace: %w", err)
			}
		}
	}
	cfg.Netns, cfg.A, cfg.B = t.WAN.Name(), "gw1", "gw2"
	if cfg.Logger == nil {
		cfg.Logger = b.log
	}
	rl, err := wanrelay.New(cfg)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r := &Relay{Relay: rl, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- rl.Run(runCtx) }()
	return r, nil
}

// Settle waits until the relay holds no packet (delays, reorders, replays
// all released) and its counters stopped moving for quiet, or until max.
func (r *Relay) Settle(quiet, max time.Duration) {
	deadline := time.Now().Add(max)
	last := r.Counters()
	stable := time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		c := r.Counters()
		if c != last {
			last, stable = c, time.Now()
			continue
		}
		if c.AToB.InFlight == 0 && c.BToA.InFlight == 0 && time.Since(stable) >= quiet {
			return
		}
	}
}

// Close stops the relay and releases its sockets; it flushes the relay's
// pcap, if any.
func (r *Relay) Close() error {
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil && !errors.Is(err, context.Canceled) {
				r.err = err
			}
		case <-time.After(5 * time.Second):
			r.err = errors.New("wan relay did not stop within 5s")
		}
		if err := r.Relay.Close(); err != nil && r.err == nil {
			r.err = err
		}
	})
	return r.err
}
