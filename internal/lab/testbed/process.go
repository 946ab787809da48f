package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/netns"
)

// Gateway is one espgw run process: a Bed's two, or one RunGateway
// started for a bed whose far side is not espgw.
type Gateway struct {
	Name   string
	NS     *netns.Namespace
	Config string
	// StartTook is how long its last start took, from the process's
	// launch until its stats answered: reading and loading its SAs,
	// sockets, TUN device and all.
	StartTook time.Duration
	cmd       *exec.Cmd
	out       LockedBuffer
	done      chan error
}

// LockedBuffer collects a process's output while others read it.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Reset empties the buffer.
func (b *LockedBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

// RunGateway starts `binary run -c config` in ns, outside any Bed, and waits
// until its stats endpoint answers: a single gateway for test beds whose far
// side is not espgw (the Linux kernel, scapy). The caller stops it with
// Stop; a process still running when ns is removed is killed with it.
func RunGateway(ctx context.Context, ns *netns.Namespace, binary, config string) (*Gateway, error) {
	g := &Gateway{Name: ns.Short(), NS: ns, Config: config}
	if err := g.start(ctx, binary, ns.Command(context.Background(), binary, "run", "-c", config), (*exec.Cmd).Start); err != nil {
		return nil, err
	}
	return g, nil
}

// start launches cmd as the gateway's process and waits (up to startWait)
// until `binary stats` answers in its namespace. A gateway that exits, does not
// come up or is given up on (ctx) is not left running.
func (g *Gateway) start(ctx context.Context, binary string, cmd *exec.Cmd, launch func(*exec.Cmd) error) error {
	g.out.Reset()
	t0 := time.Now()
	cmd.Stdout, cmd.Stderr = &g.out, &g.out
	if err := launch(cmd); err != nil {
		return fmt.Errorf("start gateway %s in %s: %w", g.Name, g.NS.Name(), err)
	}
	g.cmd = cmd
	g.done = make(chan error, 1)
	go func() { g.done <- cmd.Wait() }()
	deadline := time.Now().Add(startWait)
	for {
		if _, err := GatewayStats(ctx, g.NS, binary); err == nil {
			g.StartTook = time.Since(t0)
			return nil
		}
		select {
		case err := <-g.done:
			g.cmd = nil
			return fmt.Errorf("gateway %s exited at start (%v):\n%s", g.Name, err, g.out.String())
		case <-ctx.Done():
			g.Stop(syscall.SIGKILL)
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			out, _ := g.Stop(syscall.SIGKILL)
			return fmt.Errorf("gateway %s did not come up in %v:\n%s", g.Name, startWait, out)
		}
	}
}

// startWait bounds a gateway's start. It is no measure of speed (a gateway
// with one tunnel is up in milliseconds): a thousand tunnels' SAs under the
// race detector on a loaded 2-core machine have taken 8.5 s.
const startWait = 30 * time.Second

// Stop signals the gateway, waits up to 10 s for it to exit (then kills
// it) and returns what it logged. Stopping a stopped gateway does nothing.
func (g *Gateway) Stop(sig syscall.Signal) (string, error) {
	if g.cmd == nil {
		return g.out.String(), nil
	}
	g.cmd.Process.Signal(sig)
	defer func() { g.cmd = nil }()
	select {
	case err := <-g.done:
		var ee *exec.ExitError
		if err != nil && !(sig == syscall.SIGKILL && errors.As(err, &ee)) {
			return g.out.String(), fmt.Errorf("gateway %s: %w", g.Name, err)
		}
		return g.out.String(), nil
	case <-time.After(10 * time.Second):
		g.cmd.Process.Kill()
		<-g.done
		return g.out.String(), fmt.Errorf("gateway %s did not stop within 10s of %s", g.Name, sig)
	}
}

// Signal sends sig to the gateway process.
func (g *Gateway) Signal(sig syscall.Signal) error {
	if g.cmd == nil || g.cmd.Process == nil {
		return fmt.Errorf("gateway %s is not running", g.Name)
	}
	return g.cmd.Process.Signal(sig)
}

// PID is the gateway process's id (0 when it is not running); `ip netns
// exec` execs in place, so it is espgw's own.
func (g *Gateway) PID() int {
	if g.cmd == nil || g.cmd.Process == nil {
		return 0
	}
	return g.cmd.Process.Pid
}

// Output is what the gateway has logged so far.
func (g *Gateway) Output() string { return g.out.String() }

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

// Profile takes a CPU profile of the gateway over d and writes it to path
// (pprof's format, for go tool pprof). The gateway serves its profiler on
// PprofAddr (pprof: in its configuration).
func (g *Gateway) Profile(ctx context.Context, d time.Duration, path string) error {
	client := &http.Client{Timeout: d + 10*time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := g.NS.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}}
	defer client.CloseIdleConnections()
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", PprofAddr, max(1, int(d.Seconds())))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s: %w", g.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: %s", g.Name, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("profile %s: %w", g.Name, err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("profile %s: %w", g.Name, err)
	}
	return f.Close()
}
