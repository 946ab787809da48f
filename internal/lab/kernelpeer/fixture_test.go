package kernelpeer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
)

// The tests share one guest: a boot under TCG costs seconds, and every
// test flushes the guest's XFRM state before it configures its own.
var shared labtest.Shared[*fixture]

// fixture is the shared guest and the namespace of its tap.
type fixture struct {
	*Peer
	bed   *netns.Bed
	netns string
}

func (f *fixture) Close() error { return errors.Join(f.Peer.Close(), f.bed.Close()) }

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
	shared.Close(&code, "kernel peer", (*fixture).Close)
	os.Exit(code)
}

// sharedPeer boots the guest on first use, or fails the test saying how to
// make the boot possible.
func sharedPeer(t *testing.T) *Peer {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a QEMU guest under TCG (seconds idle, minutes on a loaded machine); run without -short")
	}
	labtest.NeedNamespaces(t)
	labtest.NeedTools(t, "qemu-system-x86_64")
	return shared.Get(t, "kernel peer", bootShared).Peer
}

func bootShared() (*fixture, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Offline: never downloads, but rebuilds the agent and initramfs when
	// this tree changed them.
	assets, err := Prepare(ctx, PrepareOptions{Offline: true})
	if err != nil {
		return nil, err
	}
	bed, err := netns.New("kp-test", nil)
	if err != nil {
		return nil, err
	}
	tapNS, err := bed.AddNamespace("tap")
	if err != nil {
		bed.Close()
		return nil, err
	}
	ns := tapNS.Name()
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
		bed.Close()
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "kernel peer %s booted in %v (qemu CPU time %v)\n", assets.KernelRelease, p.BootTime.Round(time.Millisecond), p.BootCPU)
	if _, err := p.Run(ctx, "ip addr add "+guestInner.String()+"/32 dev lo && ip addr add "+guestInner6.String()+"/128 dev lo"); err != nil {
		p.Close()
		bed.Close()
		return nil, fmt.Errorf("add the guest's inner address: %w", err)
	}
	return &fixture{Peer: p, bed: bed, netns: ns}, nil
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
	if !errors.As(err, &ee) || ee.Code != 3 {
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
