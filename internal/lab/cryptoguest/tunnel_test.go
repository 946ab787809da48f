package cryptoguest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// guestGateway is an espgw gateway run inside the guest from /tmp/gw, its
// PID kept so that it can be signalled and waited for (the guest has no
// pkill, and its init reaps nothing: an exited gateway stays a zombie).
type guestGateway struct{ g *Guest }

// alive is a guest shell function: whether process $1 runs.
const alive = "alive() { [ -e /proc/$1 ] && ! grep -q '^State:[[:space:]]*Z' /proc/$1/status; }; "

func (gw guestGateway) start(ctx context.Context) error {
	out, err := gw.g.RunFor(ctx, 2*time.Minute, "cd /tmp/gw && ("+Espgw+" run -c gw.yaml </dev/null >>log 2>&1 & echo $! >pid) </dev/null >/dev/null 2>&1; "+
		alive+"i=0; until "+Espgw+" stats --json >/dev/null 2>&1; do alive $(cat pid) || { cat log; exit 1; }; "+
		"i=$((i+1)); [ $i -gt 150 ] && { cat log; exit 1; }; sleep 0.2; done")
	if err != nil {
		return fmt.Errorf("start the guest's gateway: %w\n%s", err, out)
	}
	return nil
}

// stop signals the gateway and waits until it is gone, its files (the
// device's among them) closed; after 10 s it kills it.
func (gw guestGateway) stop(ctx context.Context, sig string) error {
	_, err := gw.g.RunFor(ctx, time.Minute, alive+"p=$(cat /tmp/gw/pid) || exit 1; kill -"+sig+" $p; "+
		"i=0; while alive $p && [ $i -lt 50 ]; do sleep 0.2; i=$((i+1)); done; "+
		"alive $p && kill -KILL $p; while alive $p; do sleep 0.2; done; rm -f /tmp/gw/pid")
	if err != nil {
		return fmt.Errorf("stop the guest's gateway: %w", err)
	}
	return nil
}

func (gw guestGateway) stats(ctx context.Context) (gateway.Stats, error) {
	var st gateway.Stats
	raw, err := gw.g.Run(ctx, Espgw+" stats --json")
	if err != nil {
		return st, fmt.Errorf("guest gateway stats: %w", err)
	}
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return st, fmt.Errorf("guest gateway stats: %w: %s", err, raw)
	}
	return st, nil
}

// tunnelSAs is the SA file of a tunnel between the host and the guest:
// 0x1001 host → guest and 0x2001 guest → host, tunnel mode, fresh keys of
// the lengths given, a replay window of 64; set, when not nil, changes
// them further.
func tunnelSAs(t *testing.T, suite sa.Suite, encKey, authKey int, set func(out, in *sa.SA)) []byte {
	t.Helper()
	key := func(n int) sa.Key {
		k := make(sa.Key, n)
		rand.Read(k)
		return k
	}
	host, guest := HostAddr.Addr(), GuestAddr.Addr()
	out := &sa.SA{SPI: 0x1001, Mode: sa.Tunnel, Src: host, Dst: guest, Suite: suite, EncKey: key(encKey), AuthKey: key(authKey), ReplayWindow: 64}
	in := &sa.SA{SPI: 0x2001, Mode: sa.Tunnel, Src: guest, Dst: host, Suite: suite, EncKey: key(encKey), AuthKey: key(authKey), ReplayWindow: 64}
	if set != nil {
		set(out, in)
	}
	sas, err := sa.Marshal(&sa.Config{SAs: []*sa.SA{out, in}})
	if err != nil {
		t.Fatal(err)
	}
	return sas
}

// startGuestGateway writes the guest gateway's SA file sas and its config
// (engine, the guest's side of the tunnel) to /tmp/gw and starts it; when
// the test ends it is stopped and waited for (the next test may take the
// device), its log shown if the test failed.
func startGuestGateway(ctx context.Context, t *testing.T, g *Guest, sas []byte, engine string) guestGateway {
	t.Helper()
	// The SA file travels over the control port, which logs no command.
	if out, err := g.Run(ctx, fmt.Sprintf("rm -rf /tmp/gw && mkdir -p /tmp/gw && cd /tmp/gw && umask 077 && echo %s | base64 -d > sas.yaml && cat > gw.yaml <<'EOF2'\n%sEOF2",
		base64.StdEncoding.EncodeToString(sas), gatewayConfig(GuestAddr.Addr(), HostAddr.Addr(), engine, guestInner, hostInner))); err != nil {
		t.Fatalf("write the guest gateway's files: %v\n%s", err, out)
	}
	gw := guestGateway{g}
	if err := gw.start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := gw.stop(context.Background(), "INT"); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			out, _ := g.Run(context.Background(), "tail -30 /tmp/gw/log")
			t.Logf("guest gateway:\n%s", out)
		}
	})
	return gw
}

// tunnelCounters reads both gateways' counters and checks that they agree
// (what one side sealed the other opened, something was) and that no SA
// dropped a packet. It returns the SAs host→guest and guest→host as the
// host and the guest count them, and the guest's stats.
func tunnelCounters(ctx context.Context, t *testing.T, g *Guest, gw guestGateway) (hOut, hIn, gOut, gIn gateway.SAStats, guestSt gateway.Stats) {
	t.Helper()
	hostSt, err := testbed.GatewayStats(ctx, g.NS, g.Binary())
	if err != nil {
		t.Fatal(err)
	}
	if guestSt, err = gw.stats(ctx); err != nil {
		t.Fatal(err)
	}
	find := func(st gateway.Stats, spi uint32) gateway.SAStats {
		if s := st.SA(spi); s != nil {
			return *s
		}
		t.Fatalf("no SA %#x in %+v", spi, st.SAs)
		return gateway.SAStats{}
	}
	hOut, hIn, gOut, gIn = find(hostSt, 0x1001), find(hostSt, 0x2001), find(guestSt, 0x2001), find(guestSt, 0x1001)
	if hOut.SealedPackets == 0 || hOut.SealedPackets != gIn.OpenedPackets || gOut.SealedPackets != hIn.OpenedPackets {
		t.Errorf("counters disagree: host sealed %d, guest opened %d; guest sealed %d, host opened %d",
			hOut.SealedPackets, gIn.OpenedPackets, gOut.SealedPackets, hIn.OpenedPackets)
	}
	for name, st := range map[string]gateway.Stats{"host": hostSt, "guest": guestSt} {
		for _, s := range st.SAs {
			for r, v := range s.Drops {
				if v != 0 {
					t.Errorf("%s gateway SA %s dropped %d packets: %s", name, s.SPI, v, r)
				}
			}
		}
	}
	return hOut, hIn, gOut, gIn, guestSt
}

// gatewayConfig is a gateway's configuration on the guest's link: its TUN
// with the inner address tun and a route to the far side's network. The
// state directory keeps the sequence numbers across a restart (the far
// gateway would take a restart from 0 for a replay).
func gatewayConfig(local, peer netip.Addr, engine string, tun, route netip.Prefix) string {
	return testbed.GatewayConfig{Local: local, Peer: peer, Engine: engine, OuterMTU: 1600, StateDir: "state", TUN: "esp0",
		TUNAddrs: []netip.Prefix{tun}, Routes: []netip.Prefix{route.Masked()}, SAFile: "sas.yaml"}.String()
}

// pingBothWays pings count times with each size from the host's inner
// address to the guest's and back, through the tunnel, and fails the test
// for every size that did not get all its replies.
func pingBothWays(ctx context.Context, t *testing.T, g *Guest, sizes []int, count int) {
	t.Helper()
	for _, size := range sizes {
		r, err := testbed.Ping(ctx, g.NS, guestInner.Addr(), testbed.PingOptions{Size: size, Count: count})
		if err != nil || r.Received != r.Sent {
			t.Errorf("host → guest ping of %d bytes: %d of %d answered (%v)\n%s", size, r.Received, r.Sent, err, r.Output)
		}
		o, err := g.Run(ctx, fmt.Sprintf("ping -c %d -W 5 -s %d -I %s %s", count, size, guestInner.Addr(), hostInner.Addr()))
		if err != nil || !strings.Contains(o, fmt.Sprintf("%d packets received", count)) {
			t.Errorf("guest → host ping of %d bytes: %v\n%s", size, err, o)
		}
	}
}

// startHostGateway runs the host's side of a tunnel with the guest: an
// espgw gateway on the cpu engine in the namespace of the guest's tap,
// with the SA file sas; it is stopped when the test ends.
func startHostGateway(ctx context.Context, t *testing.T, g *Guest, sas []byte) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sas.yaml"), sas, 0o600); err != nil {
		t.Fatal(err)
	}
	hostCfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(hostCfg, []byte(gatewayConfig(HostAddr.Addr(), GuestAddr.Addr(), "cpu", hostInner, guestInner)), 0o600); err != nil {
		t.Fatal(err)
	}
	hostGW, err := testbed.RunGateway(ctx, g.NS, g.Binary(), hostCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := hostGW.Stop(syscall.SIGTERM); err != nil || t.Failed() {
			t.Logf("host gateway: %v\n%s", err, tail(out, 3000))
		}
	})
}

// TestVirtioGatewayInGuest: an espgw gateway in the guest on the virtio
// engine forms a tunnel with an espgw gateway on the host (cpu engine):
// pings of 0 to 1400 bytes both ways, a TCP transfer each way checked by
// sha256, the two sides' counters agreeing and every packet of the guest's
// a request to the device. Then the guest's gateway is killed (kill -9)
// and started again: the new one takes the device back (the reset at open)
// and carries the tunnel on.
func TestVirtioGatewayInGuest(t *testing.T) {
	g := iommuGuest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sas := tunnelSAs(t, sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, 16, 20, nil)
	startHostGateway(ctx, t, g, sas)
	gw := startGuestGateway(ctx, t, g, sas, "virtio")

	pings := func() {
		t.Helper()
		if pingBothWays(ctx, t, g, []int{0, 1, 56, 100, 500, 1000, 1400}, 1); t.Failed() {
			t.FailNow()
		}
	}
	pings()
	const n = 1 << 20
	if err := sendToGuest(ctx, g, n); err != nil {
		t.Fatal(err)
	}
	if err := receiveFromGuest(ctx, g, n); err != nil {
		t.Fatal(err)
	}

	hOut, hIn, gOut, gIn, guestSt := tunnelCounters(ctx, t, g, gw)
	e := guestSt.Engine
	if want := gOut.SealedPackets + gIn.OpenedPackets; e.Name != "virtio" || e.Records != want || e.Completions != e.Records {
		t.Errorf("guest engine %q: %d requests and %d completions for %d packets", e.Name, e.Records, e.Completions, want)
	}
	t.Logf("host sealed %d opened %d; guest engine: %d requests to the device, %d doorbells, deepest queue %d",
		hOut.SealedPackets, hIn.OpenedPackets, e.Records, e.Doorbells, e.MaxQueue)

	// kill -9 and a restart: the device is the new gateway's to take.
	if err := gw.stop(ctx, "KILL"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Run(ctx, Espgw+" stats --json >/dev/null 2>&1"); err == nil {
		t.Fatal("the killed gateway still answers")
	}
	if err := gw.start(ctx); err != nil {
		t.Fatal(err)
	}
	pings()
	after, err := gw.stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Engine.Records == 0 {
		t.Fatal("the restarted gateway did no work on the device")
	}
}

// TestVirtioWithoutDevice is the negative control: in a guest started
// without the device, the engine refuses with a clear error and nothing
// runs.
func TestVirtioWithoutDevice(t *testing.T) {
	g := noDeviceGuest(t)
	out, err := g.Run(context.Background(), Espgw+" speed -engine virtio -evp aes-128-cbc -seconds 1 2>&1")
	if err == nil || !strings.Contains(out, "no virtio-crypto device") {
		t.Fatalf("virtio engine in a guest without the device: %v\n%s", err, out)
	}
	t.Logf("without the device: %s", strings.TrimSpace(out))
}
