package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/netns"
)

// RunGateway starts `binary run -c config` in ns, outside any Bed, and waits
// until its stats endpoint answers: a single gateway for test beds whose far
// side is not espgw (the Linux kernel, scapy). The caller stops it with
// Stop; a process still running when ns is removed is killed with it.
func RunGateway(ctx context.Context, ns *netns.Namespace, binary, config string) (*Gateway, error) {
	g := &Gateway{Name: ns.Short(), NS: ns, Config: config}
	cmd := ns.Command(context.Background(), binary, "run", "-c", config)
	cmd.Stdout, cmd.Stderr = &g.out, &g.out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start gateway in %s: %w", ns.Name(), err)
	}
	g.cmd = cmd
	g.done = make(chan error, 1)
	go func() { g.done <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := GatewayStats(ctx, ns, binary); err == nil {
			return g, nil
		}
		select {
		case err := <-g.done:
			g.done <- err
			g.cmd = nil
			return nil, fmt.Errorf("gateway %s exited at start (%v):\n%s", g.Name, err, g.out.String())
		case <-ctx.Done():
			g.Stop(syscall.SIGKILL)
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			out, _ := g.Stop(syscall.SIGKILL)
			return nil, fmt.Errorf("gateway %s did not come up in 10s:\n%s", g.Name, out)
		}
	}
}

// Stop signals the gateway, waits up to 10 s for it to exit (then kills
// it) and returns what it logged. Stopping a stopped gateway does nothing.
func (g *Gateway) Stop(sig syscall.Signal) (string, error) {
	if g.cmd == nil {
		return g.out.String(), nil
	}
	g.cmd.Process.Signal(sig)
	select {
	case err := <-g.done:
		g.cmd = nil
		if err != nil && sig != syscall.SIGKILL {
			return g.out.String(), fmt.Errorf("gateway %s: %w", g.Name, err)
		}
		return g.out.String(), nil
	case <-time.After(10 * time.Second):
		g.cmd.Process.Kill()
		<-g.done
		g.cmd = nil
		return g.out.String(), fmt.Errorf("gateway %s did not stop within 10s of %s", g.Name, sig)
	}
}

// GatewayStats reads the counters of the gateway running in ns through
// `binary stats --json`.
func GatewayStats(ctx context.Context, ns *netns.Namespace, binary string) (gateway.Stats, error) {
	var st gateway.Stats
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := ns.Command(ctx, binary, "stats", "--json").Output()
	if err != nil {
		return st, fmt.Errorf("stats of the gateway in %s: %w", ns.Name(), err)
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("stats of the gateway in %s: %w", ns.Name(), err)
	}
	return st, nil
}
