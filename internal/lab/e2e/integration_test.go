package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/internal/control"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// TestMain runs the tests and then checks, after a whole run, that they
// left no namespace or gateway behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 && !testing.Short() {
		if leaks := leftovers(); leaks != "" {
			fmt.Fprintln(os.Stderr, "integration tests left resources behind:\n"+leaks)
			code = 1
		}
	}
	labtest.Cleanup()
	os.Exit(code)
}

// leftovers lists namespaces and gateway processes the tests failed to remove.
func leftovers() string {
	var out []string
	if names, err := netns.List("it"); err == nil && len(names) > 0 {
		out = append(out, "namespaces: "+strings.Join(names, " "))
	}
	if bin := labtest.Built(); bin != "" {
		if ps, _ := exec.Command("pgrep", "-f", bin).Output(); len(ps) > 0 {
			out = append(out, "processes: "+strings.TrimSpace(string(ps)))
		}
	}
	return strings.Join(out, "\n")
}

// needRoot fails, with the reason, where the end-to-end tests cannot run.
func needRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: needs root and namespaces (run without -short)")
	}
	labtest.NeedNamespaces(t)
	labtest.NeedTools(t, "ping", "iperf3", "tcpdump", "tshark", "ethtool")
}

func startBed(t *testing.T, o testbed.Options) *testbed.Bed {
	t.Helper()
	o.Binary = labtest.Espgw(t)
	// tshark judges the WAN captures packet by packet: two equal-sized
	// packets sealed in one batch leave as one UDP GSO train, which veth
	// carries whole, so the capture would hold them as one packet that no
	// dissector splits. The gateways still send the trains.
	o.SegmentOnWire = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := testbed.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("tear down: %v", err)
		}
	})
	return b
}

// withSuite is o with the suite named (CIPHER[-BITS][+AUTH]).
func withSuite(t *testing.T, name string, o testbed.Options) testbed.Options {
	t.Helper()
	var err error
	if o.Suite, o.AESBits, err = testbed.ParseSuite(name); err != nil {
		t.Fatal(err)
	}
	return o
}

// icmpFlows lists the echo packets tshark sees, as "type ident seq len",
// sorted: decrypted from the WAN, or in clear on a LAN.
func icmpFlows(t *testing.T, pcap string, espSA []string) []string {
	t.Helper()
	args := []string{"-r", pcap, "-n", "-o", "esp.enable_encryption_decode:TRUE", "-o", "esp.enable_authentication_check:TRUE"}
	args = append(args, "-Y", "icmp.type==8 || icmp.type==0 || icmpv6.type==128 || icmpv6.type==129",
		"-T", "fields", "-E", "separator=/", "-e", "icmp.type", "-e", "icmpv6.type", "-e", "icmp.ident", "-e", "icmpv6.echo.identifier",
		"-e", "icmp.seq", "-e", "icmpv6.echo.sequence_number", "-e", "data.len")
	cmd, done, err := testbed.TsharkCommand(context.Background(), espSA, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark %s: %v", pcap, err)
	}
	flows := strings.Fields(string(out)) // a line each, its fields joined by '/'
	sort.Strings(flows)
	return flows
}

// TestTunnelMatrix carries pings (IPv4 and IPv6 inside, many sizes) and an
// iperf3 TCP transfer across two gateways for every suite, raw ESP and UDP
// encapsulation, IPv4 and IPv6 outside; tshark decrypts the WAN capture with
// the SAs and must find every ICV good and the very echo packets hostA sent.
func TestTunnelMatrix(t *testing.T) {
	needRoot(t)
	suites := []string{
		"aes-cbc-128+hmac-sha1-96", "aes-cbc-256+hmac-sha2-256-128", "aes-cbc-192+hmac-sha2-384-192",
		"3des-cbc+hmac-sha1-96", "aes-ctr-128+hmac-sha2-512-256", "aes-gcm-16", "aes-gcm-16-256",
		"null+hmac-md5-96",
	}
	for _, name := range suites {
		for _, encap := range []sa.Encap{sa.EncapNone, sa.EncapUDP} {
			for _, v6 := range []bool{false, true} {
				outer := "v4"
				if v6 {
					outer = "v6"
				}
				t.Run(fmt.Sprintf("%s/%s/%s", name, encap, outer), func(t *testing.T) {
					b := startBed(t, withSuite(t, name, testbed.Options{Prefix: "itmx", Encap: encap, OuterV6: v6}))
					v, ip := tunnelSweep(t, b, []int{0, 1, 64, 500, 1000, 1300}, 2, true)
					for i := range 2 {
						gatewayDrops(t, saDrops(t, b, i), i)
					}
					t.Logf("%d ESP packets judged by tshark; TCP %.0f Mbit/s", v.ESP, ip.BitsPerSecond/1e6)
				})
			}
		}
	}
}

// tunnelSweep pings hostB from hostA over both inner families at each size
// count times, the WAN captured (and with lan, the echo packets on gw1's
// LAN), then moves TCP with iperf3. tshark must decrypt every ESP packet of
// the capture with a good ICV, at least the echo packets; with lan, the
// echo packets it decrypted must be those hostA's LAN carried.
func tunnelSweep(t *testing.T, b *testbed.Bed, sizes []int, count int, lan bool) (testbed.TsharkVerdict, testbed.IperfResult) {
	t.Helper()
	ctx := context.Background()
	a := b.Topo.Addr
	dsts := []netip.Addr{a.HostB4.Addr(), a.HostB6.Addr()}
	resolve(b.Topo.HostA, dsts...)
	time.Sleep(300 * time.Millisecond)
	var lanCap *testbed.Capture
	if lan {
		lanCap = startTcpdump(t, b.Topo.GW1, "lan0", filepath.Join(b.Dir, "lan.pcap"), "icmp or icmp6")
	}
	wan := startTcpdump(t, b.Topo.WAN, "gw1", filepath.Join(b.Dir, "wan.pcap"), testbed.ESPFilter)
	pingSweep(t, b.Topo.HostA, dsts, sizes, count)
	time.Sleep(200 * time.Millisecond)
	if lanCap != nil {
		if err := lanCap.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	if err := wan.Stop(); err != nil {
		t.Fatal(err)
	}
	want := len(dsts) * len(sizes) * count * 2
	v := judgeWAN(t, b, wan.Path, want, true)
	if lanCap != nil {
		lines := []string{testbed.EspSALine(b.SAs[0]), testbed.EspSALine(b.SAs[1])}
		got, want := icmpFlows(t, wan.Path, lines), icmpFlows(t, lanCap.Path, nil)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("decrypted WAN echo packets differ from those on hostA's LAN:\nWAN %v\nLAN %v", got, want)
		}
	}
	ip, err := testbed.Iperf3(ctx, b.Topo.HostB, b.Topo.HostA, a.HostB4.Addr(), testbed.IperfOptions{Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if ip.Bytes == 0 {
		t.Errorf("iperf3 moved nothing")
	}
	return v, ip
}

// resolve pings each dst once from ns, so that neighbour discovery is done
// before what is measured: a first packet may queue in the kernel's ND/ARP
// and expire.
func resolve(ns *netns.Namespace, dsts ...netip.Addr) {
	for _, dst := range dsts {
		testbed.Ping(context.Background(), ns, dst, testbed.PingOptions{Size: 8, Count: 1})
	}
}

// pingSweep pings each dst from ns count times at each size and fails the
// test for every reply that did not come.
func pingSweep(t *testing.T, ns *netns.Namespace, dsts []netip.Addr, sizes []int, count int) {
	t.Helper()
	for _, dst := range dsts {
		for _, size := range sizes {
			r, err := testbed.Ping(context.Background(), ns, dst, testbed.PingOptions{Size: size, Count: count})
			if err != nil {
				t.Fatal(err)
			}
			if r.Received != r.Sent {
				t.Errorf("ping %s size %d: %d of %d replies\n%s", dst, size, r.Received, r.Sent, r.Output)
			}
		}
	}
}

// startTcpdump captures filter on ifname in ns.
func startTcpdump(t *testing.T, ns *netns.Namespace, ifname, path, filter string) *testbed.Capture {
	t.Helper()
	c, err := testbed.StartTcpdump(ns, ifname, path, filter, 0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// judgeWAN has tshark decrypt the WAN capture with the bed's SAs: at least
// min ESP packets, every ICV good and, in tunnel mode, every one decrypted
// into an inner IP packet.
func judgeWAN(t *testing.T, b *testbed.Bed, path string, min int, tunnel bool) testbed.TsharkVerdict {
	t.Helper()
	v, err := testbed.Tshark(context.Background(), path, []string{testbed.EspSALine(b.SAs[0]), testbed.EspSALine(b.SAs[1])})
	if err != nil {
		t.Fatal(err)
	}
	if v.ESP < min || v.ICVGood != v.ESP || tunnel && v.Decrypted != v.ESP {
		t.Errorf("tshark on the WAN: %d ESP packets, %d good ICV, %d decrypted; want at least %d, all good (and decrypted in tunnel mode)", v.ESP, v.ICVGood, v.Decrypted, min)
	}
	return v
}

// gwStats reads gateway i's counters.
func gwStats(t *testing.T, b *testbed.Bed, i int) gateway.Stats {
	t.Helper()
	st, err := b.Stats(context.Background(), i)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// saDrops reads gateway i's counters and fails the test for every packet
// one of its SAs dropped.
func saDrops(t *testing.T, b *testbed.Bed, i int) gateway.Stats {
	t.Helper()
	st := gwStats(t, b, i)
	for _, s := range st.SAs {
		if len(s.Drops) > 0 {
			t.Errorf("gw%d SA %s drops: %v", i+1, s.SPI, s.Drops)
		}
	}
	return st
}

// gatewayDrops fails the test for the packets gateway i dropped outside
// its SAs.
func gatewayDrops(t *testing.T, st gateway.Stats, i int) {
	t.Helper()
	if len(st.Drops) > 0 {
		t.Errorf("gw%d drops: %v", i+1, st.Drops)
	}
}

func pingAll(t *testing.T, b *testbed.Bed, count int) {
	t.Helper()
	r, err := testbed.Ping(context.Background(), b.Topo.HostA, b.Topo.Addr.HostB4.Addr(), testbed.PingOptions{Size: 100, Count: count})
	if err != nil {
		t.Fatal(err)
	}
	if r.Received != r.Sent {
		t.Fatalf("ping: %d of %d replies\n%s", r.Received, r.Sent, r.Output)
	}
}

// TestGatewayRestartAfterKill kills a gateway with SIGKILL and starts it
// again with the same manual keys: it resumes its sequence numbers above
// its reservation, so the peer's replay window takes its packets.
func TestGatewayRestartAfterKill(t *testing.T) {
	needRoot(t)
	b := startBed(t, testbed.Options{Prefix: "itkill", Suite: sa.Suite{Cipher: sa.CipherAESGCM16}})
	pingAll(t, b, 5)
	if _, err := b.StopGateway(0, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := b.StartGateway(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	pingAll(t, b, 5)
	saDrops(t, b, 1) // none after gw1's restart
}

// TestGatewayReloadKeepsTunnel sends SIGHUP: the SAs are read again, the
// tunnel carries on, and sequence numbers are not reset.
func TestGatewayReloadKeepsTunnel(t *testing.T) {
	needRoot(t)
	b := startBed(t, testbed.Options{Prefix: "ithup", Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}})
	pingAll(t, b, 3)
	before := gwStats(t, b, 0)
	if err := b.GW[0].Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	pingAll(t, b, 3)
	after := gwStats(t, b, 0)
	if out, in := after.SAs[0].LastSeq, before.SAs[0].LastSeq; out < in+3 {
		t.Errorf("after reload the outbound sequence is %d, was %d: it must carry on", out, in)
	}
	if !strings.Contains(b.GW[0].Output(), "SAs loaded") {
		t.Errorf("no reload in the gateway's log:\n%s", b.GW[0].Output())
	}
}

// TestGatewayReloadChangesEncap reloads both gateways of a raw-ESP tunnel
// into UDP encapsulation: each opens the UDP socket it did not have at
// start and closes the raw one no SA uses (a reload that needed a socket
// the gateway had not opened used to crash it on the next packet), and the
// tunnel carries on over UDP. A change only a restart can apply is refused
// whole, with its name.
func TestGatewayReloadChangesEncap(t *testing.T) {
	needRoot(t)
	b := startBed(t, testbed.Options{Prefix: "itenc", Suite: sa.Suite{Cipher: sa.CipherAESGCM16}})
	pingAll(t, b, 2)
	for _, s := range b.SAs {
		s.Encap, s.SrcPort, s.DstPort = sa.EncapUDP, sa.DefaultNATTPort, sa.DefaultNATTPort
	}
	if err := sa.WriteFile(filepath.Join(b.Dir, "sas.yaml"), &sa.Config{SAs: b.SAs[:]}); err != nil {
		t.Fatal(err)
	}
	for _, g := range b.GW {
		if err := g.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	pingAll(t, b, 3)
	for i := range b.GW {
		st := gwStats(t, b, i)
		if len(st.Sockets) != 1 || st.Sockets[0].Kind != "udp-encap" {
			t.Errorf("gw%d sockets after the reload: %+v, want the UDP one only", i+1, st.Sockets)
		}
		for _, s := range st.SAs {
			if s.Retired {
				continue // the raw-ESP SAs the reload replaced
			}
			if s.OpenedPackets+s.SealedPackets < 3 {
				t.Errorf("gw%d SA %s carried %d packets, want the pings", i+1, s.SPI, s.OpenedPackets+s.SealedPackets)
			}
		}
	}
	cfg, err := os.ReadFile(b.GW[0].Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.GW[0].Config, append(cfg, []byte("outer-mtu: 1400\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.GW[0].Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if out := b.GW[0].Output(); !strings.Contains(out, "outer-mtu changed: restart the gateway to apply it") {
		t.Errorf("a reload changing outer-mtu was not refused by name:\n%s", out)
	}
	pingAll(t, b, 2)
}

// TestTransportMode protects the gateways' own traffic to each other in
// transport mode: pings between their outer addresses go through the TUN,
// and the WAN sees only ESP, which tshark opens.
func TestTransportMode(t *testing.T) {
	needRoot(t)
	for _, encap := range []sa.Encap{sa.EncapNone, sa.EncapUDP} {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/v6=%v", encap, v6), func(t *testing.T) {
				b := startBed(t, testbed.Options{Prefix: "ittrs", Mode: sa.Transport, Encap: encap, OuterV6: v6,
					Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}})
				wan := startTcpdump(t, b.Topo.WAN, "gw1", filepath.Join(b.Dir, "wan.pcap"), testbed.ESPFilter)
				_, gw2 := b.Outer()
				resolve(b.GW[0].NS, gw2)
				pingSweep(t, b.GW[0].NS, []netip.Addr{gw2}, []int{0, 100, 1000, 1300}, 3)
				if err := wan.Stop(); err != nil {
					t.Fatal(err)
				}
				judgeWAN(t, b, wan.Path, 24, false)
				saDrops(t, b, 1)
			})
		}
	}
}

// TestTunnelOverXDP runs the tunnel with both gateways' raw ESP on AF_XDP
// (wan-io: xdp; generic mode on the WAN veths, and native mode — the veth
// driver's own XDP, with copies — for aes-gcm-16): pings of every size both
// families inside, a WAN capture every ESP packet of which tshark decrypts
// with a good ICV, a TCP transfer, and the gateways' counters showing the
// packets went through the XSK rings, not the raw sockets.
func TestTunnelOverXDP(t *testing.T) {
	needRoot(t)
	type tc struct {
		name, mode string
		v6         bool
	}
	var cases []tc
	for _, name := range []string{"aes-gcm-16", "aes-cbc-128+hmac-sha1-96"} {
		for _, v6 := range []bool{false, true} {
			cases = append(cases, tc{name, "generic", v6})
		}
	}
	cases = append(cases, tc{"aes-gcm-16", "native", false}, tc{"aes-gcm-16", "native", true})
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s/v6=%v", c.name, c.mode, c.v6), func(t *testing.T) {
			b := startBed(t, withSuite(t, c.name, testbed.Options{Prefix: "itxdp", OuterV6: c.v6, WanIO: "xdp", XDPMode: c.mode}))
			v, ip := tunnelSweep(t, b, []int{0, 64, 500, 1300}, 3, false)
			for i := range 2 {
				st := saDrops(t, b, i)
				if len(st.XDP) != 1 {
					t.Fatalf("gw%d: %d AF_XDP connections, want 1 (stats %+v)", i+1, len(st.XDP), st)
				}
				x := st.XDP[0]
				if x.Mode != c.mode || x.PacketsIn < 24 || x.PacketsOut < 24 || x.Fallback > 16 || x.Malformed != 0 || x.TXRingFull != 0 {
					t.Errorf("gw%d AF_XDP counters %+v: want %s mode, the pings in and out through the rings, only the first packets to each peer (before its next hop was looked up) through the raw socket", i+1, x, c.mode)
				}
				for _, s := range st.Sockets {
					if s.PacketsIn > 0 {
						t.Errorf("gw%d raw socket %s received %d ESP packets the program should have steered", i+1, s.Local, s.PacketsIn)
					}
				}
				gatewayDrops(t, st, i)
				t.Logf("gw%d AF_XDP: %+v", i+1, x)
			}
			t.Logf("%d ESP packets judged by tshark; TCP %.0f Mbit/s over AF_XDP", v.ESP, ip.BitsPerSecond/1e6)
		})
	}
}

// TestManyTunnels runs a bed of 200 tunnels, each its own SA pair and inner
// prefix pair: pings through a sample of them land on their own SAs, and
// `espgw sa rekey` over the two control sockets rolls one tunnel over to new
// SAs that carry its next pings, while `espgw sa list` and `espgw policy
// list` show the change.
func TestManyTunnels(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	b := startBed(t, testbed.Options{Prefix: "itmany", Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, Tunnels: 200})
	ping := func(tn *testbed.Tunnel) {
		t.Helper()
		out, err := b.Topo.HostA.Output(ctx, "ping", "-n", "-c", "2", "-i", "0.05", "-W", "2", "-I", tn.HostA.String(), tn.HostB.String())
		if err != nil {
			t.Fatalf("ping through tunnel %d: %v\n%s", tn.Index, err, out)
		}
	}
	sample := []int{0, 1, 57, 199}
	for _, i := range sample {
		ping(b.Tunnels[i])
	}
	opened := func(spi uint32) uint64 {
		st := gwStats(t, b, 1)
		if s := st.SA(spi); s != nil {
			return s.OpenedPackets
		}
		return 0
	}
	for _, i := range sample {
		if n := opened(b.Tunnels[i].Out.SPI); n != 2 {
			t.Errorf("tunnel %d's SA %#x opened %d packets at gw2, want its 2 pings", i, b.Tunnels[i].Out.SPI, n)
		}
	}
	next, err := b.NewTunnel(57, 1)
	if err != nil {
		t.Fatal(err)
	}
	var entries []any
	for k, s := range []*sa.SA{next.Out, next.Back} {
		data, err := sa.Marshal(&sa.Config{SAs: []*sa.SA{s}})
		if err != nil {
			t.Fatal(err)
		}
		var doc struct{ SA []map[string]any }
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, map[string]any{"replaces": fmt.Sprintf("%#x", []uint32{b.Tunnels[57].Out.SPI, b.Tunnels[57].Back.SPI}[k]), "sa": doc.SA[0]})
	}
	file := filepath.Join(t.TempDir(), "rekey.json")
	data, _ := json.Marshal(entries)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	espgw(t, nil, "sa", "rekey", "--socket", b.ControlSocket(0), "--peer-socket", b.ControlSocket(1), "--grace", "200ms", file)
	ping(b.Tunnels[57])
	if n := opened(next.Out.SPI); n != 2 {
		t.Errorf("the new SA %#x opened %d packets, want the 2 pings after the rekey", next.Out.SPI, n)
	}
	out := espgw(t, nil, "sa", "list", "--socket", b.ControlSocket(1))
	var list control.Response
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("sa list: %v\n%s", err, out)
	}
	if len(list.SAs) != 400 {
		t.Errorf("gw2 lists %d SAs after the rekey, want 400", len(list.SAs))
	}
	for _, s := range list.SAs {
		if s.SPI == fmt.Sprintf("%#x", b.Tunnels[57].Out.SPI) {
			t.Errorf("the old inbound SA %s is still in force after the grace period", s.SPI)
		}
	}
	if out := espgw(t, nil, "policy", "list", "--socket", b.ControlSocket(0)); !strings.Contains(out, fmt.Sprintf("%#x", next.Out.SPI)) {
		t.Errorf("gw1's policies do not name the new SA:\n%s", out)
	}
	// A tunnel added with espgw sa add and espgw policy add on both
	// gateways carries pings; espgw policy del and espgw sa del take it
	// away again, and its pings are then refused (no policy).
	extra, err := b.NewTunnel(200, 0)
	if err != nil {
		t.Fatal(err)
	}
	sas, err := control.SAEntries(extra.Out, extra.Back)
	if err != nil {
		t.Fatal(err)
	}
	pols, err := control.PolicyEntries(extra.Policies()...)
	if err != nil {
		t.Fatal(err)
	}
	// The control socket checks an SA as the file loader does: a
	// tfc-pad beyond what outer-mtu carries is refused, naming it.
	padded := *extra.Out
	padded.TFCPad = 5000
	bad, err := control.SAEntries(&padded)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(labtest.Espgw(t), "sa", "add", "--socket", b.ControlSocket(0), "-")
	cmd.Stdin = bytes.NewReader(bad)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "tfc-pad 5000 pads every packet") {
		t.Errorf("sa add with tfc-pad 5000: %v, %s; want a refusal", err, out)
	}
	for i := range 2 {
		espgw(t, sas, "sa", "add", "--socket", b.ControlSocket(i), "-")
		espgw(t, pols, "policy", "add", "--socket", b.ControlSocket(i), "-")
	}
	ping(extra)
	for i := range 2 {
		espgw(t, pols, "policy", "del", "--socket", b.ControlSocket(i), "-")
		espgw(t, nil, "sa", "del", "--socket", b.ControlSocket(i), fmt.Sprintf("%#x@%s", extra.Out.SPI, extra.Out.Dst), fmt.Sprintf("%#x@%s", extra.Back.SPI, extra.Back.Dst))
	}
	if out, err := b.Topo.HostA.Output(ctx, "ping", "-n", "-c", "1", "-W", "1", "-I", extra.HostA.String(), extra.HostB.String()); err == nil {
		t.Errorf("ping through a deleted tunnel got through:\n%s", out)
	}
	if out := espgw(t, nil, "sa", "list", "--socket", b.ControlSocket(0)); strings.Contains(out, fmt.Sprintf("%#x", extra.Out.SPI)) {
		t.Errorf("the deleted SA is still listed")
	}
	// 400 SAs: espgw stats and the final counters summarise them (the
	// totals, the busiest, every SA with drops); --all lists every one.
	bin := labtest.Espgw(t)
	rows := func(out string) int { return strings.Count(out, " tunnel ") }
	summary, err := b.Topo.GW2.Output(ctx, bin, "stats")
	if err != nil || !strings.Contains(summary, "SAs (out 200, in 200, both 0)") || rows(summary) > 20 {
		t.Errorf("espgw stats on 400 SAs: %d rows, %v\n%s", rows(summary), err, summary)
	}
	if all, err := b.Topo.GW2.Output(ctx, bin, "stats", "--all"); err != nil || rows(all) < 400 {
		t.Errorf("espgw stats --all on 400 SAs: %d rows, %v", rows(all), err)
	}
	final, err := b.StopGateway(0, syscall.SIGTERM)
	if err != nil || !strings.Contains(final, "--all lists every SA") || rows(final) > 20 {
		t.Errorf("gw1's final counters on 400 SAs: %d rows, %v\n%s", rows(final), err, final)
	}
}

// espgw runs the espgw binary with stdin and returns what it printed on
// stdout; a failure fails the test with its output.
func espgw(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command(labtest.Espgw(t), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("espgw %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}
