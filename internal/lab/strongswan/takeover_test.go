package strongswan

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

var pingReplies = regexp.MustCompile(`(\d+) received`)

func ping(t *testing.T, ctx context.Context, from *netns.Namespace, to netip.Addr, count int) int {
	t.Helper()
	out, _ := from.Command(ctx, "ping", "-n", "-q", "-c", strconv.Itoa(count), "-i", "0.2", "-W", "2", to.String()).CombinedOutput()
	m := pingReplies.FindSubmatch(out)
	if m == nil {
		t.Fatalf("ping %s from %s: %s", to, from.Short(), out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestMain removes the espgw command the tests built.
func TestMain(m *testing.M) { labtest.Main(m) }

// TestEspgwTakesOverCharonTunnel has two charon instances (kernel-libipsec)
// negotiate an IKEv2 tunnel between gw1 and gw2, with hostA and hostB
// behind them; reads gw1's SAs from nothing but charon's own log (chd = 4)
// and its sequence number from `ipsec statusall`; kills gw1's charon as a
// crash would (gw2's charon keeps the CHILD_SA); and starts espgw on gw1
// with those SAs. Traffic must keep flowing both ways, now between espgw
// and strongSwan's ESP, and gw2's charon must count it. It runs with
// charon's default proposal (AES-CBC with HMAC-SHA-256) and with
// ChaCha20-Poly1305 (RFC 7634, strongSwan's openssl plugin).
func TestEspgwTakesOverCharonTunnel(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two charon daemons and an espgw gateway in namespaces; run without -short")
	}
	if err := CheckInstalled(); err != nil {
		t.Fatal(err)
	}
	labtest.NeedNamespaces(t)
	for _, tc := range []struct{ esp, suite string }{
		{"aes128-sha256", "aes-cbc+hmac-sha2-256-128"},
		{"chacha20poly1305", "chacha20-poly1305"},
	} {
		t.Run(tc.esp, func(t *testing.T) { takeOver(t, tc.esp, tc.suite) })
	}
}

// takeOver is TestEspgwTakesOverCharonTunnel with the ESP proposal esp,
// which espgw must read from charon's log as suite.
func takeOver(t *testing.T, esp, suite string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := labtest.Espgw(t)
	topo, err := netns.NewTopology("sw", netns.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	a := topo.Addr
	psk := make([]byte, 16)
	rand.Read(psk)
	sides := []Config{
		{NS: topo.GW2, Dir: filepath.Join(dir, "gw2"), Local: a.GW2WAN4.Addr(), Remote: a.GW1WAN4.Addr(),
			LocalNet: a.LANB4, RemoteNet: a.LANA4, ID: "gw2", PeerID: "gw1", PSK: hex.EncodeToString(psk), ESP: esp},
		{NS: topo.GW1, Dir: filepath.Join(dir, "gw1"), Local: a.GW1WAN4.Addr(), Remote: a.GW2WAN4.Addr(),
			LocalNet: a.LANA4, RemoteNet: a.LANB4, ID: "gw1", PeerID: "gw2", PSK: hex.EncodeToString(psk), Initiate: true, ESP: esp},
	}
	var charons [2]*Charon
	for i, c := range sides {
		if charons[i], err = Start(ctx, c); err != nil {
			t.Fatal(err)
		}
		defer charons[i].Kill()
	}
	gw2, gw1 := charons[0], charons[1]
	if _, err := gw1.Child(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	hostA, hostB := a.HostA4.Addr(), a.HostB4.Addr()
	if n := ping(t, ctx, topo.HostA, hostB, 3); n != 3 {
		t.Fatalf("through charon's tunnel, hostA → hostB: %d of 3 replies\n%s", n, gw1.Output())
	}
	if n := ping(t, ctx, topo.HostB, hostA, 3); n != 3 {
		t.Fatalf("through charon's tunnel, hostB → hostA: %d of 3 replies", n)
	}
	before, err := gw1.Child(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	peerBefore, err := gw2.Child(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// gw1's side, from charon's log alone.
	cfg, err := sa.Load(gw1.LogPath())
	if err != nil {
		t.Fatalf("read gw1's charon log: %v", err)
	}
	if len(cfg.SAs) != 2 {
		t.Fatalf("charon's log gave %d SAs, want 2: %v", len(cfg.SAs), cfg.SAs)
	}
	for _, s := range cfg.SAs {
		if s.Suite.String() != suite {
			t.Fatalf("charon's log gave SA %#x with %s, want %s", s.SPI, s.Suite, suite)
		}
	}
	if err := gw1.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, s := range cfg.SAs {
		if s.Src == a.GW1WAN4.Addr() {
			// Continue after the last sequence number charon sent.
			s.InitialSeq = before.PacketsOut
		}
	}
	if err := sa.WriteFile(filepath.Join(dir, "sas.yaml"), cfg); err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(dir, "gw1.yaml")
	err = testbed.GatewayConfig{Local: a.GW1WAN4.Addr(), Peer: a.GW2WAN4.Addr(), Engine: testbed.DefaultEngine(), Metrics: "127.0.0.1:9478",
		TUN: "esp0", Routes: []netip.Prefix{a.LANB4}, SAFile: "sas.yaml", StateDir: "gw1-state"}.Write(confPath)
	if err != nil {
		t.Fatal(err)
	}
	g, err := testbed.RunGateway(ctx, topo.GW1, bin, confPath)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop(syscall.SIGTERM)
	upA := ping(t, ctx, topo.HostA, hostB, 5)
	upB := ping(t, ctx, topo.HostB, hostA, 5)
	st, err := testbed.GatewayStats(ctx, topo.GW1, bin)
	if err != nil {
		t.Fatal(err)
	}
	peerAfter, err := gw2.Child(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("charon on gw1 had sent %d packets; after the takeover gw2's charon received %d and sent %d more; espgw tun in %d out %d, wire in %d out %d, drops %v",
		before.PacketsOut, peerAfter.PacketsIn-peerBefore.PacketsIn, peerAfter.PacketsOut-peerBefore.PacketsOut, st.TunIn, st.TunOut, st.WireIn, st.WireOut, st.Drops)
	if upA != 5 || upB != 5 {
		t.Errorf("through espgw ↔ charon: hostA → hostB %d of 5 replies, hostB → hostA %d of 5\ngw1:\n%s", upA, upB, g.Output())
	}
	// Each ping is a request and a reply each way: 10 packets in each
	// direction, counted by strongSwan on gw2.
	if in, out := peerAfter.PacketsIn-peerBefore.PacketsIn, peerAfter.PacketsOut-peerBefore.PacketsOut; in < 10 || out < 10 {
		t.Errorf("gw2's charon counted %d packets in and %d out since the takeover, want at least 10 each", in, out)
	}
	var sealed, opened uint64
	for _, s := range st.SAs {
		sealed += s.SealedPackets
		opened += s.OpenedPackets
		if len(s.Drops) > 0 {
			t.Errorf("espgw SA %s dropped %v", s.SPI, s.Drops)
		}
	}
	if sealed < 10 || opened < 10 {
		t.Errorf("espgw sealed %d and opened %d packets, want at least 10 each", sealed, opened)
	}
}
