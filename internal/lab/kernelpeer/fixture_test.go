package kernelpeer

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests share one guest: a boot under TCG costs seconds, and every
// test flushes the guest's XFRM state before it configures its own.
var shared struct {
	once  sync.Once
	peer  *Peer
	netns string
	err   error
}

// Test-bed addresses (TEST-NET): the tap side of the namespace, the guest,
// and the inner networks behind each for tunnel mode.
var (
	hostAddr   = netip.MustParsePrefix("192.0.2.1/24")
	guestAddr  = netip.MustParsePrefix("192.0.2.2/24")
	hostInner  = netip.MustParseAddr("198.51.100.1")
	guestInner = netip.MustParseAddr("203.0.113.2")

	hostAddr6   = netip.MustParsePrefix("2001:db8:1::1/64")
	guestAddr6  = netip.MustParsePrefix("2001:db8:1::2/64")
	hostInner6  = netip.MustParseAddr("2001:db8:2::1")
	guestInner6 = netip.MustParseAddr("2001:db8:3::2")
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.peer != nil {
		if err := shared.peer.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close kernel peer:", err)
			code = 1
		}
	}
	if shared.netns != "" {
		exec.Command("ip", "netns", "del", shared.netns).Run()
	}
	os.Exit(code)
}

// sharedPeer boots the guest on first use, or fails the test saying how to
// make the boot possible.
func sharedPeer(t *testing.T) *Peer {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a QEMU guest under TCG (seconds idle, minutes on a loaded machine); run without -short")
	}
	shared.once.Do(func() { shared.peer, shared.err = bootShared() })
	if shared.err != nil {
		t.Fatalf("kernel peer unavailable: %v", shared.err)
	}
	return shared.peer
}

func bootShared() (*Peer, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("needs root (network namespaces, tap devices)")
	}
	for tool, pkg := range map[string]string{"qemu-system-x86_64": "qemu-system-x86", "ip": "iproute2"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s not found: apt-get install %s", tool, pkg)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Offline: never downloads, but rebuilds the agent and initramfs when
	// this tree changed them.
	assets, err := Prepare(ctx, PrepareOptions{Offline: true})
	if err != nil {
		return nil, err
	}
	ns := fmt.Sprintf("kp-test-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", ns, err, out)
	}
	shared.netns = ns
	exec.Command("ip", "-n", ns, "link", "set", "lo", "up").Run()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p, err := Start(ctx, Config{
		Netns:      ns,
		Tap:        "kptap0",
		HostAddrs:  []netip.Prefix{hostAddr, hostAddr6},
		GuestAddrs: []netip.Prefix{guestAddr, guestAddr6},
		GuestRoutes: []Route{
			{Dst: netip.PrefixFrom(hostInner, 24).Masked(), Via: hostAddr.Addr()},
			{Dst: netip.PrefixFrom(hostInner6, 64).Masked(), Via: hostAddr6.Addr()},
		},
		Assets:      assets,
		Logger:      log,
		BootTimeout: 5 * time.Minute,
		MTU:         9000,
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "kernel peer %s booted in %v (qemu CPU time %v)\n", assets.KernelRelease, p.BootTime.Round(time.Millisecond), p.BootCPU)
	if _, err := p.Run(ctx, "ip addr add "+guestInner.String()+"/32 dev lo && ip addr add "+guestInner6.String()+"/128 dev lo"); err != nil {
		p.Close()
		return nil, fmt.Errorf("add the guest's inner address: %w", err)
	}
	return p, nil
}

func TestPeerRunsCommands(t *testing.T) {
	p := sharedPeer(t)
	ctx := context.Background()
	out, err := p.Run(ctx, "uname -r; ip -V")
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(out, "iproute2") {
		t.Errorf("ip in the guest is not iproute2's: %q", out)
	}
	_, err = p.Run(ctx, "exit 3")
	var ee *ExitError
	if !errorAs(err, &ee) || ee.Code != 3 {
		t.Errorf("exit 3: got %v, want an ExitError with code 3", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := p.Run(tctx, "sleep 10"); err == nil {
		t.Errorf("sleep 10 with a 2 s deadline: no error")
	}
	// The agent survives a timed-out command.
	if _, err := p.Run(ctx, "true"); err != nil {
		t.Errorf("command after a timeout: %v", err)
	}
	out, err = p.Run(ctx, "ip xfrm state list nokeys; cat /proc/net/xfrm_stat")
	if err != nil || !strings.Contains(out, "XfrmInError") {
		t.Errorf("xfrm in the guest: %v: %q", err, out)
	}
}

func errorAs(err error, target **ExitError) bool {
	e, ok := err.(*ExitError)
	if ok {
		*target = e
	}
	return ok
}
