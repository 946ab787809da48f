package strongswan

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// TestIKEThroughNATWithCharon puts a real NAT (iptables MASQUERADE in the
// WAN namespace) between espgw on gw1 and charon on gw2, charon without
// forceencaps: `espgw ike initiate` must find the NAT from the
// NAT_DETECTION hashes, float IKE to port 4500 and write ESP-in-UDP SAs;
// charon must see espgw behind the NAT at the NAT's address. Then an espgw
// gateway on those SAs, with nat-keepalive 1s, carries pings both ways
// through the NAT and charon's ESP, and its RFC 3948 keepalives (one 0xff
// byte to port 4500) cross the NAT, counted by an iptables rule.
func TestIKEThroughNATWithCharon(t *testing.T) {
	if testing.Short() {
		t.Skip("runs charon and an espgw gateway in namespaces behind a NAT; run without -short")
	}
	if err := CheckInstalled(); err != nil {
		t.Fatal(err)
	}
	labtest.NeedNamespaces(t)
	labtest.NeedTools(t, "iptables")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := labtest.Espgw(t)
	topo, err := netns.NewTopology("in", netns.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	a := topo.Addr
	public := a.WANToGW24.Addr()
	for _, cmd := range [][]string{
		{"iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "gw2", "-s", a.GW1WAN4.Addr().String(), "-p", "udp", "-j", "MASQUERADE"},
		// Counts the keepalives: UDP to port 4500 with one byte (20 + 8 + 1).
		{"iptables", "-A", "FORWARD", "-i", "gw1", "-p", "udp", "--dport", "4500", "-m", "length", "--length", "29", "-j", "ACCEPT"},
	} {
		if out, err := topo.WAN.Output(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatalf("set up the NAT: %v\n%s", err, out)
		}
	}
	dir := t.TempDir()
	psk := make([]byte, 16)
	rand.Read(psk)
	secret := hex.EncodeToString(psk)
	if err := os.WriteFile(filepath.Join(dir, "psk"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ch, err := Start(ctx, Config{NS: topo.GW2, Dir: filepath.Join(dir, "gw2"), Local: a.GW2WAN4.Addr(), Remote: public,
		LocalNet: a.LANB4, RemoteNet: a.LANA4, ID: "gw2", PeerID: "gw1", PSK: secret, IKE: "aes128-sha256-x25519", ESP: "aes128gcm16",
		RealNAT: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Kill()
	if err := ch.WaitConnection(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	sas := filepath.Join(dir, "sas.yaml")
	out, err := topo.GW1.Output(ctx, bin, "ike", "initiate", "--local", a.GW1WAN4.Addr().String(), "--remote", a.GW2WAN4.Addr().String(),
		"--local-id", "@gw1", "--remote-id", "@gw2", "--psk-file", filepath.Join(dir, "psk"),
		"--local-ts", a.LANA4.String(), "--remote-ts", a.LANB4.String(), "--esp-proposals", "aes128gcm16", "--out", sas)
	if err != nil {
		t.Fatalf("%v\ncharon:\n%s", err, ch.Output())
	}
	t.Logf("espgw ike initiate: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "ESP in UDP 4500 (NAT found)") || !strings.Contains(out, ":4500") {
		t.Errorf("espgw did not find the NAT or did not float to port 4500: %s", out)
	}
	log, err := os.ReadFile(ch.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "remote host is behind NAT") || strings.Contains(string(log), "faking NAT") {
		t.Errorf("charon did not find espgw behind a real NAT:\n%s", log)
	}
	st, err := ch.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st, public.String()+"[gw1]") || !strings.Contains(st, "ESP in UDP SPIs") {
		t.Errorf("charon's IKE SA is not with the NAT's address %s, or its CHILD_SA not ESP in UDP:\n%s", public, st)
	}
	written, err := sa.Load(sas)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range written.SAs {
		if s.Encap != sa.EncapUDP {
			t.Errorf("SA %#x is not ESP in UDP", s.SPI)
		}
	}
	confPath := filepath.Join(dir, "gw1.yaml")
	err = testbed.GatewayConfig{Local: a.GW1WAN4.Addr(), Peer: a.GW2WAN4.Addr(), Engine: testbed.DefaultEngine(), Metrics: "127.0.0.1:9478",
		TUN: "esp0", Routes: []netip.Prefix{a.LANB4}, SAFile: "sas.yaml", StateDir: "gw1-state"}.Write(confPath)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile(confPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(confPath, append(conf, "nat-keepalive: 1s\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	before, err := ch.Child(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	g, err := testbed.RunGateway(ctx, topo.GW1, bin, confPath)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop(syscall.SIGTERM)
	upA := ping(t, ctx, topo.HostA, a.HostB4.Addr(), 5)
	upB := ping(t, ctx, topo.HostB, a.HostA4.Addr(), 5)
	time.Sleep(4 * time.Second) // idle: the gateway sends keepalives when it sends nothing else
	after, err := ch.Child(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if upA != 5 || upB != 5 {
		t.Errorf("through the NAT: hostA → hostB %d of 5 replies, hostB → hostA %d of 5\ngw1:\n%s", upA, upB, g.Output())
	}
	if pin, pout := after.PacketsIn-before.PacketsIn, after.PacketsOut-before.PacketsOut; pin < 10 || pout < 10 {
		t.Errorf("charon counted %d packets in and %d out on the CHILD_SA, want at least 10 each", pin, pout)
	}
	counters, err := topo.WAN.Output(ctx, "iptables", "-L", "FORWARD", "-v", "-x", "-n")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(\d+)\s+\d+\s+ACCEPT\s+17 .*dpt:4500 length 29`).FindStringSubmatch(counters)
	if m == nil {
		t.Fatalf("no keepalive rule in the WAN's FORWARD chain:\n%s", counters)
	}
	if n, _ := strconv.Atoi(m[1]); n < 2 {
		t.Errorf("%d NAT keepalives crossed the NAT, want at least 2:\n%s", n, counters)
	}
	t.Logf("keepalives through the NAT: %s; charon counted %d in, %d out", m[1], after.PacketsIn-before.PacketsIn, after.PacketsOut-before.PacketsOut)
}

// TestIKEResponderToCharonBehindNAT has charon on gw2 behind a real NAT
// (MASQUERADE in the WAN namespace) initiate to espgw's ike endpoint on
// gw1: espgw, responding, must find the NAT, take the CHILD_SA as ESP in
// UDP with charon at the NAT's address, and reach charon through the
// NAT's mapping with its own requests (a liveness check, a CHILD_SA
// rekey, the IKE SA's Delete); charon must find itself behind the NAT.
func TestIKEResponderToCharonBehindNAT(t *testing.T) {
	if testing.Short() {
		t.Skip("runs charon in namespaces behind a NAT; run without -short")
	}
	if err := CheckInstalled(); err != nil {
		t.Fatal(err)
	}
	labtest.NeedNamespaces(t)
	labtest.NeedTools(t, "iptables")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	topo, err := netns.NewTopology("ir", netns.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	a := topo.Addr
	public := a.WANToGW14.Addr()
	if out, err := topo.WAN.Output(ctx, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "gw1", "-s", a.GW2WAN4.Addr().String(),
		"-p", "udp", "-j", "MASQUERADE"); err != nil {
		t.Fatalf("set up the NAT: %v\n%s", err, out)
	}
	psk := make([]byte, 16)
	rand.Read(psk)
	secret := hex.EncodeToString(psk)
	ikeP, err := ike.ParseProposals(ike.ProtoIKE, "aes128-sha256-x25519")
	if err != nil {
		t.Fatal(err)
	}
	espP, err := ike.ParseProposals(ike.ProtoESP, "aes128gcm16")
	if err != nil {
		t.Fatal(err)
	}
	children := make(chan *ike.Child, 4)
	local := a.GW1WAN4.Addr()
	var tr *ike.Transport
	if err := topo.GW1.Do(func() (err error) { tr, err = ike.Listen(local); return err }); err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ep, err := ike.NewEndpoint(ike.Config{LocalID: ike.FQDN("gw1"), RemoteID: ike.FQDN("gw2"), PSK: []byte(secret), IKE: ikeP, ESP: espP,
		LocalTS: []ike.Selector{ike.PrefixSelector(a.LANA4)}, RemoteTS: []ike.Selector{ike.PrefixSelector(a.LANB4)},
		OnChild: func(_ *ike.IKESA, c *ike.Child) { children <- c }}, local, tr.Send)
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- tr.Serve(serveCtx, ep) }()
	defer func() { stop(); <-served }()
	ch, err := Start(ctx, Config{NS: topo.GW2, Dir: filepath.Join(t.TempDir(), "gw2"), Local: a.GW2WAN4.Addr(), Remote: local,
		LocalNet: a.LANB4, RemoteNet: a.LANA4, ID: "gw2", PeerID: "gw1", PSK: secret, Initiate: true,
		IKE: "aes128-sha256-x25519", ESP: "aes128gcm16", RealNAT: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Kill()
	var child *ike.Child
	select {
	case child = <-children:
	case <-time.After(30 * time.Second):
		t.Fatalf("charon's IKE SA did not come up at espgw through the NAT; counts %v\ncharon:\n%s", ep.Counts(), ch.Output())
	}
	s := ep.SAs()[0]
	if !s.NAT() || !child.UDP || child.Remote != public {
		t.Errorf("espgw: NAT %v, ESP in UDP %v, charon at %s; want a NAT, UDP and the NAT's address %s", s.NAT(), child.UDP, child.Remote, public)
	}
	log, err := os.ReadFile(ch.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "local host is behind NAT") {
		t.Errorf("charon did not find itself behind the NAT:\n%s", log)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("liveness check through the NAT: %v", err)
	}
	fresh, err := s.RekeyChild(ctx, child)
	if err != nil {
		t.Fatalf("CHILD_SA rekey through the NAT: %v", err)
	}
	st, err := ch.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if spis := fmt.Sprintf("%08x_i %08x_o", fresh.OutSPI, fresh.InSPI); !strings.Contains(st, spis) || !strings.Contains(st, "ESP in UDP") {
		t.Errorf("charon lacks the rekeyed CHILD_SA %s in UDP:\n%s", spis, st)
	}
	if err := s.Delete(ctx); err != nil {
		t.Fatalf("delete through the NAT: %v", err)
	}
	waitFor(t, 10*time.Second, func() bool { st, _ := ch.Status(ctx); return !strings.Contains(st, "ESTABLISHED") },
		func() string { return "charon keeps the IKE SA espgw deleted" })
}
