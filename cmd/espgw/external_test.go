package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/sa"
)

// TestScenarioExternalDevice points a peer: external scenario at a device
// espgw does not drive: the QEMU guest's Linux kernel, treated as an
// appliance. The test configures the guest the way its owner would — its
// addresses, forwarding, a route, and the `ip xfrm` commands that
// `espgw sa convert --to ip-xfrm --local DUT` wrote from the device's SA
// file — and the scenario reaches it only through the two tap interfaces
// and the addresses its file names. The device is judged by what arrives:
// pings and UDP both ways, TCP, and with 10% of gw1's ESP corrupted on the
// way, exactly the corrupted packets missing.
func TestScenarioExternalDevice(t *testing.T) {
	if testing.Short() {
		t.Skip("boots the QEMU kernel guest as an external device; run without -short")
	}
	labtest.NeedNamespaces(t)
	bin := labtest.Espgw(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// "This machine's interfaces": two taps in a namespace of the test's
	// own, the guest's NICs.
	bed, err := netns.New("scx", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bed.Close()
	home, err := bed.AddNamespace("dut")
	if err != nil {
		t.Fatal(err)
	}
	const wanIf, lanIf, mgmtIf = "dutwan", "dutlan", "dutmgmt"
	dutWAN, dutLAN := netip.MustParsePrefix("198.51.100.129/24"), netip.MustParsePrefix("203.0.113.1/24")
	gw1, near := netip.MustParseAddr("198.51.100.1"), netip.MustParsePrefix("192.0.2.0/24")
	dev, err := kernelpeer.Start(ctx, kernelpeer.Config{
		Netns: home.Name(), Tap: wanIf, ExtraTaps: []string{lanIf, mgmtIf}, GuestAddrs: []netip.Prefix{dutWAN},
		BootTimeout: 5 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()

	// The device's SA file, from its own point of view.
	enc1, auth1, _ := sa.RandomKeys(sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}, 256)
	enc2, auth2, _ := sa.RandomKeys(sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}, 256)
	suite := sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}
	sas := &sa.Config{SAs: []*sa.SA{
		{SPI: 0x3001, Mode: sa.Tunnel, Src: gw1, Dst: dutWAN.Addr(), Suite: suite, EncKey: enc1, AuthKey: auth1, ReplayWindow: 64,
			Selectors: []sa.Selector{{Src: near, Dst: dutLAN.Masked()}}},
		{SPI: 0x3002, Mode: sa.Tunnel, Src: dutWAN.Addr(), Dst: gw1, Suite: suite, EncKey: enc2, AuthKey: auth2, ReplayWindow: 64,
			Selectors: []sa.Selector{{Src: dutLAN.Masked(), Dst: near}}},
	}}
	saFile := filepath.Join(dir, "dut-sas.yaml")
	if err := sa.WriteFile(saFile, sas); err != nil {
		t.Fatal(err)
	}
	script, errOut, code := run(bin, "sa", "convert", "--to", "ip-xfrm", "--local", dutWAN.Addr().String(), saFile)
	if code != 0 {
		t.Fatalf("espgw sa convert --to ip-xfrm: exit %d: %s", code, errOut)
	}
	// A management port (eth2) serving the device's counters over HTTP, as
	// an appliance's web page would: the scenario's counters command
	// fetches them from this machine.
	setup := fmt.Sprintf("set -e\nip link set eth1 up\nip addr add %s dev eth1\necho 1 >/proc/sys/net/ipv4/ip_forward\nip route add %s via %s\n"+
		"ip link set eth2 up\nip addr add 10.99.0.1/30 dev eth2\nmkdir -p /www/cgi-bin\n"+
		"printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\n/sbin/ip -s xfrm state list nokeys\\n' >/www/cgi-bin/xfrm\n"+
		"chmod +x /www/cgi-bin/xfrm\nhttpd -p 10.99.0.1:80 -h /www\n", dutLAN, near, gw1)
	if err := home.AddAddr(mgmtIf, netip.MustParsePrefix("10.99.0.2/30")); err != nil {
		t.Fatal(err)
	}
	counters := fmt.Sprintf(`ip netns exec %s /usr/bin/python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://10.99.0.1/cgi-bin/xfrm', timeout=10).read().decode())"`, home.Name())
	if out, err := dev.Run(ctx, setup); err != nil {
		t.Fatalf("configure the device: %v\n%s", err, out)
	}

	head := fmt.Sprintf(`peer: external
external:
  netns: %s
  wan: {interface: %s, address: %s/24, dut: %s}
  lan: {interface: %s, address: 203.0.113.10/24, dut: %s}
  near: %s
  sa-file: ../dut-sas.yaml
  counters: %q
`, home.Name(), wanIf, gw1, dutWAN.Addr(), lanIf, dutLAN.Addr(), near, counters)
	scenarios := filepath.Join(dir, "scenarios")
	os.Mkdir(scenarios, 0o755)
	os.WriteFile(filepath.Join(scenarios, "1-clean.yaml"), []byte(head+`name: appliance
description: the guest's kernel as an external device, through two interfaces
traffic:
  steps:
    - name: sweep
      ping: {sizes: [56, 1000, 1400], count: 3, interval: 5ms}
    - name: up
      udp: {packets: 300, rate: 1000, size: 400}
    - name: down
      udp: {from: hostB, to: hostA, packets: 300, rate: 1000, size: 400, port: 9001}
    - name: bulk
      iperf3: {protocol: tcp, duration: 1s}
expect:
  delivered: == 1
  exact: true
  steps.bulk.bps: "> 1000000"
  gw1.drops: == 0
  gw2.opened: == gw1.sealed
  gw1.opened: == gw2.sealed
  gw2.drops: == 0
  conservation: true
`), 0o644)
	os.WriteFile(filepath.Join(scenarios, "2-tamper.yaml"), []byte(head+`name: appliance-tamper
description: 10% of gw1's ESP corrupted on the way to the device; it must drop exactly those
impair:
  gw1-to-gw2: {seed: 4, corrupt: {percent: 10, bytes: 2, from: 8, to: 0}}
traffic:
  together: true
  steps:
    - name: up
      udp: {packets: 400, rate: 1000, size: 400}
    - name: down
      udp: {from: hostB, to: hostA, packets: 400, rate: 1000, size: 400, port: 9001}
expect:
  gw1-to-gw2.corrupted: "> 10"
  steps.up.received: == steps.up.sent - gw1-to-gw2.corrupted
  steps.down.delivered: == 1
  gw2.bad-icv: == gw1-to-gw2.corrupted
  mismatched: == 0
  conservation: true
`), 0o644)
	// The device keeps its replay windows from one run to the next while
	// each run's gw1 starts its sequence afresh: its owner installs the
	// SAs again before each run, as one would for a real device.
	for _, f := range []string{"1-clean.yaml", "2-tamper.yaml"} {
		runExternal(t, ctx, bin, dev, script, filepath.Join(scenarios, f))
	}
	// The interfaces are back where they were.
	for _, ifname := range []string{wanIf, lanIf} {
		if _, err := home.Netlink().LinkByName(ifname); err != nil {
			t.Errorf("%s not given back to its namespace: %v", ifname, err)
		}
	}
	st, err := dev.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in := st.State(dutWAN.Addr(), 0x3001); in == nil || in.Packets == 0 || in.IntegrityFailed == 0 || in.ReplayWindowDrops != 0 {
		t.Errorf("the device's inbound SA after the tamper run: %+v, want packets opened and the corrupted ones failed", in)
	}
}

// runExternal installs the device's SAs afresh and runs one scenario file.
func runExternal(t *testing.T, ctx context.Context, bin string, dev *kernelpeer.Peer, script, file string) {
	t.Helper()
	if out, err := dev.Run(ctx, "set -e\nip xfrm policy flush\nip xfrm state flush\n"+script); err != nil {
		t.Fatalf("install the device's SAs: %v\n%s", err, out)
	}
	out, errOut, code := run(bin, "scenario", "run", "--prefix", "scx", "--json", file)
	results := scenarioResults(t, out, errOut, code)
	if len(results) != 1 {
		t.Fatalf("--json (exit %d): %d results\n%s\n%s", code, len(results), out, errOut)
	}
	for _, r := range results {
		for _, v := range r.Verdicts {
			t.Logf("%s: %s %s: got %v want %v pass %v", r.Name, v.Metric, v.Expr, v.Got, v.Want, v.Pass)
		}
		if !r.Pass || r.Peer != "external" {
			t.Errorf("%s: pass %v, peer %q, error %q", r.Name, r.Pass, r.Peer, r.Error)
		}
	}
	if code != 0 {
		t.Errorf("exit %d\n%s", code, errOut)
	}
}
