package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/scenario"
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
// way, exactly the corrupted packets missing; and in transport mode, over
// IPv4 and IPv6, gw1's pings of the device itself answered through its SAs.
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

	// The device's SA files, from its own point of view: IPv4 outer, and
	// IPv6 outer (on the same WAN port) carrying the same IPv4 networks.
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
	gw1v6, dutWANv6 := netip.MustParseAddr("2001:db8:5::1"), netip.MustParsePrefix("2001:db8:5::129/64")
	sas6 := &sa.Config{}
	for i, x := range sas.SAs {
		y := *x
		y.SPI = 0x6001 + uint32(i)
		y.Src, y.Dst = gw1v6, dutWANv6.Addr()
		if i == 1 {
			y.Src, y.Dst = dutWANv6.Addr(), gw1v6
		}
		sas6.SAs = append(sas6.SAs, &y)
	}
	if err := sa.WriteFile(filepath.Join(dir, "dut6-sas.yaml"), sas6); err != nil {
		t.Fatal(err)
	}
	// Transport mode: SAs between gw1 and the device itself, over IPv4
	// and over IPv6, without selectors (the run's ip xfrm commands give
	// the device host-to-host policies).
	for _, tr := range []struct {
		file     string
		spi      uint32
		gw1, dut netip.Addr
	}{{"dut-tr-sas.yaml", 0x7001, gw1, dutWAN.Addr()}, {"dut-tr6-sas.yaml", 0x7601, gw1v6, dutWANv6.Addr()}} {
		c := &sa.Config{}
		for i, x := range sas.SAs {
			y := *x
			y.SPI, y.Mode, y.Selectors = tr.spi+uint32(i), sa.Transport, nil
			y.Src, y.Dst = tr.gw1, tr.dut
			if i == 1 {
				y.Src, y.Dst = tr.dut, tr.gw1
			}
			c.SAs = append(c.SAs, &y)
		}
		if err := sa.WriteFile(filepath.Join(dir, tr.file), c); err != nil {
			t.Fatal(err)
		}
	}
	script, errOut, code := run(bin, "sa", "convert", "--to", "ip-xfrm", "--local", dutWAN.Addr().String(), saFile)
	if code != 0 {
		t.Fatalf("espgw sa convert --to ip-xfrm: exit %d: %s", code, errOut)
	}
	// A management port (eth2) serving the device's counters over HTTP, as
	// an appliance's web page would: the scenario's counters command
	// fetches them from this machine.
	setup := fmt.Sprintf("set -e\nip -6 addr add "+dutWANv6.String()+" dev eth0 nodad\nip link set eth1 up\nip addr add %s dev eth1\necho 1 >/proc/sys/net/ipv4/ip_forward\nip route add %s via %s\n"+
		"ip link set eth2 up\nip addr add 10.99.0.1/30 dev eth2\nmkdir -p /www/cgi-bin\n"+
		"printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\n/sbin/ip -s xfrm state list nokeys\\n' >/www/cgi-bin/xfrm\n"+
		"chmod +x /www/cgi-bin/xfrm\n"+
		// install: the POSTed `ip xfrm` commands replace the device's SAs;
		// flush: they are taken off. Each says "done" when it worked.
		"cat >/www/cgi-bin/install <<'EOF'\n"+`#!/bin/sh
echo Content-Type: text/plain
echo
{ echo 'ip() { /sbin/ip "$@"; }'; echo set -e; echo ip xfrm policy flush; echo ip xfrm state flush; head -c "$CONTENT_LENGTH"; } >/tmp/install.sh
sh /tmp/install.sh 2>&1 && echo done
EOF
cat >/www/cgi-bin/flush <<'EOF'
#!/bin/sh
echo Content-Type: text/plain
echo
/sbin/ip xfrm policy flush && /sbin/ip xfrm state flush && echo done
EOF
`+
		"chmod +x /www/cgi-bin/install /www/cgi-bin/flush\nhttpd -p 10.99.0.1:80 -h /www\n", dutLAN, near, gw1)
	if err := home.AddAddr(mgmtIf, netip.MustParsePrefix("10.99.0.2/30")); err != nil {
		t.Fatal(err)
	}
	counters := fmt.Sprintf(`ip netns exec %s /usr/bin/python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://10.99.0.1/cgi-bin/xfrm', timeout=10).read().decode())"`, home.Name())
	// The setup and reset commands reach the device over its management
	// port too: setup sends the run's `ip xfrm` commands (ESPGW_IP_XFRM,
	// fresh SPIs every run), reset flushes them.
	post := func(what, body string) string {
		return fmt.Sprintf(`ip netns exec %s /usr/bin/python3 -c "import urllib.request,sys,os; r=urllib.request.urlopen('http://10.99.0.1/cgi-bin/%s', data=%s, timeout=30).read().decode(); sys.stdout.write(r); sys.exit(0 if r.strip().endswith('done') else 1)"`, home.Name(), what, body)
	}
	setupCmd := post("install", "open(os.environ['ESPGW_IP_XFRM'],'rb').read()")
	resetCmd := post("flush", "b''")
	if out, err := dev.Run(ctx, setup); err != nil {
		t.Fatalf("configure the device: %v\n%s", err, out)
	}

	bare := fmt.Sprintf(`peer: external
external:
  netns: %s
  wan: {interface: %s, address: %s/24, dut: %s}
  lan: {interface: %s, address: 203.0.113.10/24, dut: %s}
  near: %s
  sa-file: ../dut-sas.yaml
  counters: %q
`, home.Name(), wanIf, gw1, dutWAN.Addr(), lanIf, dutLAN.Addr(), near, counters)
	head := bare + fmt.Sprintf("  setup: %q\n  reset: %q\n", setupCmd, resetCmd)
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
  steps.bulk.bytes: "> 0"
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
	os.WriteFile(filepath.Join(scenarios, "3-bare.yaml"), []byte(bare+`name: appliance-bare
description: the device's SAs installed once by hand, no setup
traffic:
  steps:
    - name: sweep
      ping: {sizes: [56, 1000], count: 3, interval: 5ms}
expect:
  delivered: == 1
`), 0o644)

	os.WriteFile(filepath.Join(scenarios, "4-ipv6-outer.yaml"), []byte(strings.Replace(strings.Replace(head,
		"address: "+gw1.String()+"/24, dut: "+dutWAN.Addr().String(), "address: "+gw1v6.String()+"/64, dut: "+dutWANv6.Addr().String(), 1),
		"../dut-sas.yaml", "../dut6-sas.yaml", 1)+`name: appliance-ipv6-outer
description: the same device, its SAs over IPv6
traffic:
  steps:
    # 1400 bytes of ping are 1520 bytes of ESP over IPv6: more than the
    # WAN's 1500.
    - name: sweep
      ping: {sizes: [56, 1000, 1300], count: 3, interval: 5ms}
    - name: up
      udp: {packets: 200, rate: 1000, size: 400}
    - name: down
      udp: {from: hostB, to: hostA, packets: 200, rate: 1000, size: 400, port: 9001}
expect:
  delivered: == 1
  exact: true
  gw2.opened: == gw1.sealed
  gw1.opened: == gw2.sealed
  conservation: true
`), 0o644)

	// Transport mode: gw1 pings the device's own address, which answers
	// through its SAs; no LAN is part of the run.
	transport := func(name, wanLine, saFile string) string {
		return fmt.Sprintf(`peer: external
external:
  netns: %s
  wan: %s
  sa-file: %s
  counters: %q
  setup: %q
  reset: %q
name: %s
description: the device's kernel in transport mode, gw1 to the device itself
traffic:
  steps:
    - name: sweep
      ping: {sizes: [56, 1000], count: 3, interval: 5ms}
    - name: more
      ping: {sizes: [200], count: 50, interval: 2ms}
expect:
  delivered: == 1
  gw1.drops: == 0
  gw2.opened: == gw1.sealed
  gw1.opened: == gw2.sealed
  gw2.drops: == 0
  conservation: true
`, home.Name(), wanLine, saFile, counters, setupCmd, resetCmd, name)
	}
	os.WriteFile(filepath.Join(scenarios, "5-transport.yaml"), []byte(transport("appliance-transport",
		fmt.Sprintf("{interface: %s, address: %s/24, dut: %s}", wanIf, gw1, dutWAN.Addr()), "../dut-tr-sas.yaml")), 0o644)
	os.WriteFile(filepath.Join(scenarios, "6-transport-ipv6.yaml"), []byte(transport("appliance-transport-ipv6",
		fmt.Sprintf("{interface: %s, address: %s/64, dut: %s}", wanIf, gw1v6, dutWANv6.Addr()), "../dut-tr6-sas.yaml")), 0o644)

	// The interfaces as their owner left them: the WAN port up with an
	// address of its own and a larger MTU, the LAN port down.
	for _, c := range [][]string{{"addr", "add", "10.98.0.1/30", "dev", wanIf}, {"link", "set", wanIf, "mtu", "1600", "up"}, {"link", "set", lanIf, "down"}} {
		if out, err := home.Output(ctx, "ip", c...); err != nil {
			t.Fatalf("ip %v: %v: %s", c, err, out)
		}
	}
	found := linkStates(t, home, wanIf, lanIf)

	// With setup and reset every run starts on fresh SAs: the same
	// scenario passes a second time.
	for _, f := range []string{"1-clean.yaml", "2-tamper.yaml", "1-clean.yaml", "4-ipv6-outer.yaml", "5-transport.yaml", "6-transport-ipv6.yaml", "5-transport.yaml"} {
		r := runExternal(t, ctx, bin, filepath.Join(scenarios, f))
		if !r.Pass {
			t.Errorf("%s: pass %v, peer %q, error %q, hint %q", r.Name, r.Pass, r.Peer, r.Error, r.Hint)
		}
		if f == "2-tamper.yaml" && r.Metrics["gw2.bad-icv"] == 0 {
			t.Errorf("%s: the device counted no bad ICV", r.Name)
		}
	}
	// The interfaces are back where they were, as they were.
	if got := linkStates(t, home, wanIf, lanIf); got != found {
		t.Errorf("the interfaces after the runs:\n%s\nbefore:\n%s", got, found)
	}
	if out, err := dev.Run(ctx, "ip xfrm state"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("reset left SAs on the device: %v\n%s", err, out)
	}

	// Without setup the device keeps the SA's replay window from one run
	// to the next while gw1 starts at sequence 1: the second run fails,
	// and says what the device's counters show and what that means.
	if out, err := dev.Run(ctx, "set -e\n"+script); err != nil {
		t.Fatalf("install the device's SAs: %v\n%s", err, out)
	}
	if r := runExternal(t, ctx, bin, filepath.Join(scenarios, "3-bare.yaml")); !r.Pass {
		t.Fatalf("first run on freshly installed SAs: error %q, hint %q", r.Error, r.Hint)
	}
	r := runExternal(t, ctx, bin, filepath.Join(scenarios, "3-bare.yaml"))
	if r.Pass || !strings.Contains(r.Hint, "outside-window=") || !strings.Contains(r.Hint, "kept the SA's replay window from an earlier run") {
		t.Errorf("second run without setup: pass %v, hint %q", r.Pass, r.Hint)
	}
	t.Logf("second run without setup: %s", r.Hint)
}

// linkStates is how ip shows the interfaces' state, MTU and addresses.
func linkStates(t *testing.T, ns *netns.Namespace, ifnames ...string) string {
	t.Helper()
	var b strings.Builder
	for _, ifname := range ifnames {
		out, err := ns.Output(context.Background(), "ip", "-br", "addr", "show", "dev", ifname)
		if err != nil {
			t.Fatalf("ip addr show %s: %v: %s", ifname, err, out)
		}
		mtu, err := ns.Output(context.Background(), "cat", "/sys/class/net/"+ifname+"/mtu")
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(out))
		// name, state, addresses (a link-local address comes back by itself)
		var addrs []string
		for _, a := range f[2:] {
			if !strings.HasPrefix(a, "fe80:") {
				addrs = append(addrs, a)
			}
		}
		state := f[1]
		if state == "UNKNOWN" || state == "LOWERLAYERDOWN" {
			state = "UP" // a tap without its far end's carrier shows these while up
		}
		fmt.Fprintf(&b, "%s %s mtu %s %v\n", f[0], state, strings.TrimSpace(string(mtu)), addrs)
	}
	return b.String()
}

// runExternal runs one scenario file against the device and returns its
// result.
func runExternal(t *testing.T, ctx context.Context, bin, file string) *scenario.Result {
	t.Helper()
	return runExternalAs(t, "scx", bin, file)
}

// runExternalAs is runExternal with the scenario's namespaces named by
// prefix.
func runExternalAs(t *testing.T, prefix, bin, file string) *scenario.Result {
	t.Helper()
	out, errOut, code := run(bin, "scenario", "run", "--prefix", prefix, "--json", file)
	results := scenarioResults(t, out, errOut, code)
	if len(results) != 1 {
		t.Fatalf("--json (exit %d): %d results\n%s\n%s", code, len(results), out, errOut)
	}
	r := results[0]
	for _, v := range r.Verdicts {
		t.Logf("%s: %s %s: got %v want %v pass %v", r.Name, v.Metric, v.Expr, v.Got, v.Want, v.Pass)
	}
	if r.Peer != "external" || (code == 0) != r.Pass {
		t.Errorf("%s: peer %q, exit %d, pass %v\n%s", r.Name, r.Peer, code, r.Pass, errOut)
	}
	return r
}
