package espgw_test

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
	labtest.NeedTools(t, "ping", "iperf3", "tcpdump", "tshark")
}

func startBed(t *testing.T, o testbed.Options) *testbed.Bed {
	t.Helper()
	o.Binary = labtest.Espgw(t)
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
	var flows []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			flows = append(flows, l)
		}
	}
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
					suite, bits, err := testbed.ParseSuite(name)
					if err != nil {
						t.Fatal(err)
					}
					b := startBed(t, testbed.Options{Prefix: "itmx", Suite: suite, AESBits: bits, Encap: encap, OuterV6: v6})
					ctx := context.Background()
					a := b.Topo.Addr
					for _, dst := range []string{a.HostB4.Addr().String(), a.HostB6.Addr().String()} {
						// resolve neighbours first: their first packets may queue in the kernel's ND/ARP and expire
						testbed.Ping(ctx, b.Topo.HostA, netipMust(dst), testbed.PingOptions{Size: 8, Count: 1})
					}
					time.Sleep(300 * time.Millisecond)
					lanCmd := b.Topo.GW1.Command(ctx, "tcpdump", "-i", "lan0", "--immediate-mode", "-U", "-n", "-w", filepath.Join(b.Dir, "lan.pcap"), "icmp or icmp6")
					if err := lanCmd.Start(); err != nil {
						t.Fatal(err)
					}
					wan, err := testbed.StartCapture(b.Topo.WAN, "gw1", filepath.Join(b.Dir, "wan.pcap"), 0)
					if err != nil {
						t.Fatal(err)
					}
					time.Sleep(300 * time.Millisecond)
					for _, dst := range []string{a.HostB4.Addr().String(), a.HostB6.Addr().String()} {
						for _, size := range []int{0, 1, 64, 500, 1000, 1300} {
							r, err := testbed.Ping(ctx, b.Topo.HostA, netipMust(dst), testbed.PingOptions{Size: size, Count: 2})
							if err != nil {
								t.Fatal(err)
							}
							if r.Received != r.Sent {
								t.Errorf("ping %s size %d: %d of %d replies", dst, size, r.Received, r.Sent)
							}
						}
					}
					time.Sleep(200 * time.Millisecond)
					lanCmd.Process.Signal(syscall.SIGINT)
					lanCmd.Wait()
					if err := wan.Stop(); err != nil {
						t.Fatal(err)
					}
					lines := []string{testbed.EspSALine(b.SAs[0]), testbed.EspSALine(b.SAs[1])}
					v, err := testbed.Tshark(ctx, wan.Path, lines)
					if err != nil {
						t.Fatal(err)
					}
					if v.ESP < 48 || v.ICVGood != v.ESP || v.Decrypted != v.ESP {
						t.Errorf("tshark on the WAN: %d ESP packets, %d good ICV, %d decrypted; want at least the 48 echo packets, all good", v.ESP, v.ICVGood, v.Decrypted)
					}
					got, want := icmpFlows(t, wan.Path, lines), icmpFlows(t, filepath.Join(b.Dir, "lan.pcap"), nil)
					if strings.Join(got, "\n") != strings.Join(want, "\n") {
						t.Errorf("decrypted WAN echo packets differ from those on hostA's LAN:\nWAN %v\nLAN %v", got, want)
					}
					ip, err := testbed.Iperf3(ctx, b.Topo.HostB, b.Topo.HostA, a.HostB4.Addr(), testbed.IperfOptions{Duration: time.Second})
					if err != nil {
						t.Fatal(err)
					}
					if ip.Bytes == 0 {
						t.Errorf("iperf3 moved nothing")
					}
					for i := range 2 {
						st, err := b.Stats(ctx, i)
						if err != nil {
							t.Fatal(err)
						}
						for _, s := range st.SAs {
							if len(s.Drops) > 0 {
								t.Errorf("gw%d SA %s drops: %v", i+1, s.SPI, s.Drops)
							}
						}
						if len(st.Drops) > 0 {
							t.Errorf("gw%d drops: %v", i+1, st.Drops)
						}
					}
					t.Logf("%d ESP packets judged by tshark; TCP %.0f Mbit/s", v.ESP, ip.BitsPerSecond/1e6)
				})
			}
		}
	}
}

func netipMust(s string) netip.Addr { return netip.MustParseAddr(s) }

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
	st, err := b.Stats(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.SAs {
		if len(s.Drops) > 0 {
			t.Errorf("gw2 SA %s dropped packets after gw1's restart: %v", s.SPI, s.Drops)
		}
	}
}

// TestGatewayReloadKeepsTunnel sends SIGHUP: the SAs are read again, the
// tunnel carries on, and sequence numbers are not reset.
func TestGatewayReloadKeepsTunnel(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	b := startBed(t, testbed.Options{Prefix: "ithup", Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}})
	pingAll(t, b, 3)
	before, err := b.Stats(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.GW[0].Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	pingAll(t, b, 3)
	after, err := b.Stats(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
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
	ctx := context.Background()
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
		st, err := b.Stats(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
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
				ctx := context.Background()
				wan, err := testbed.StartCapture(b.Topo.WAN, "gw1", filepath.Join(b.Dir, "wan.pcap"), 0)
				if err != nil {
					t.Fatal(err)
				}
				_, gw2 := b.Outer()
				testbed.Ping(ctx, b.GW[0].NS, gw2, testbed.PingOptions{Size: 8, Count: 1}) // neighbour discovery
				for _, size := range []int{0, 100, 1000, 1300} {
					r, err := testbed.Ping(ctx, b.GW[0].NS, gw2, testbed.PingOptions{Size: size, Count: 3})
					if err != nil {
						t.Fatal(err)
					}
					if r.Received != r.Sent {
						t.Errorf("ping gw1→gw2 size %d: %d of %d\n%s", size, r.Received, r.Sent, r.Output)
					}
				}
				if err := wan.Stop(); err != nil {
					t.Fatal(err)
				}
				v, err := testbed.Tshark(ctx, wan.Path, []string{testbed.EspSALine(b.SAs[0]), testbed.EspSALine(b.SAs[1])})
				if err != nil {
					t.Fatal(err)
				}
				if v.ESP < 24 || v.ICVGood != v.ESP {
					t.Errorf("tshark: %d ESP packets, %d with a good ICV; want at least 24, all good", v.ESP, v.ICVGood)
				}
				st, err := b.Stats(ctx, 1)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range st.SAs {
					if len(s.Drops) > 0 {
						t.Errorf("gw2 SA %s drops %v", s.SPI, s.Drops)
					}
				}
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
		name, v6 := c.name, c.v6
		t.Run(fmt.Sprintf("%s/%s/v6=%v", name, c.mode, v6), func(t *testing.T) {
			suite, bits, err := testbed.ParseSuite(name)
			if err != nil {
				t.Fatal(err)
			}
			b := startBed(t, testbed.Options{Prefix: "itxdp", Suite: suite, AESBits: bits, OuterV6: v6, WanIO: "xdp", XDPMode: c.mode})
			ctx := context.Background()
			a := b.Topo.Addr
			for _, dst := range []netip.Addr{a.HostB4.Addr(), a.HostB6.Addr()} {
				testbed.Ping(ctx, b.Topo.HostA, dst, testbed.PingOptions{Size: 8, Count: 1}) // neighbours first
			}
			wan, err := testbed.StartCapture(b.Topo.WAN, "gw1", filepath.Join(b.Dir, "wan.pcap"), 0)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			for _, dst := range []netip.Addr{a.HostB4.Addr(), a.HostB6.Addr()} {
				for _, size := range []int{0, 64, 500, 1300} {
					r, err := testbed.Ping(ctx, b.Topo.HostA, dst, testbed.PingOptions{Size: size, Count: 3})
					if err != nil {
						t.Fatal(err)
					}
					if r.Received != r.Sent {
						t.Errorf("ping %s size %d: %d of %d replies", dst, size, r.Received, r.Sent)
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
			if err := wan.Stop(); err != nil {
				t.Fatal(err)
			}
			v, err := testbed.Tshark(ctx, wan.Path, []string{testbed.EspSALine(b.SAs[0]), testbed.EspSALine(b.SAs[1])})
			if err != nil {
				t.Fatal(err)
			}
			if v.ESP < 48 || v.ICVGood != v.ESP || v.Decrypted != v.ESP {
				t.Errorf("tshark on the WAN: %d ESP packets, %d good ICV, %d decrypted; want at least the 48 echo packets, all good", v.ESP, v.ICVGood, v.Decrypted)
			}
			ip, err := testbed.Iperf3(ctx, b.Topo.HostB, b.Topo.HostA, a.HostB4.Addr(), testbed.IperfOptions{Duration: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if ip.Bytes == 0 {
				t.Errorf("iperf3 moved nothing")
			}
			for i := range 2 {
				st, err := b.Stats(ctx, i)
				if err != nil {
					t.Fatal(err)
				}
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
				for _, s := range st.SAs {
					if len(s.Drops) > 0 {
						t.Errorf("gw%d SA %s drops: %v", i+1, s.SPI, s.Drops)
					}
				}
				if len(st.Drops) > 0 {
					t.Errorf("gw%d drops: %v", i+1, st.Drops)
				}
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
		st, err := b.Stats(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
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
	out, err := exec.Command(labtest.Espgw(t), "sa", "rekey", "--socket", b.ControlSocket(0), "--peer-socket", b.ControlSocket(1), "--grace", "200ms", file).CombinedOutput()
	if err != nil {
		t.Fatalf("espgw sa rekey: %v\n%s", err, out)
	}
	ping(b.Tunnels[57])
	if n := opened(next.Out.SPI); n != 2 {
		t.Errorf("the new SA %#x opened %d packets, want the 2 pings after the rekey", next.Out.SPI, n)
	}
	out, err = exec.Command(labtest.Espgw(t), "sa", "list", "--socket", b.ControlSocket(1)).Output()
	if err != nil {
		t.Fatal(err)
	}
	var list control.Response
	if err := json.Unmarshal(out, &list); err != nil {
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
	out, err = exec.Command(labtest.Espgw(t), "policy", "list", "--socket", b.ControlSocket(0)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), fmt.Sprintf("%#x", next.Out.SPI)) {
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
	run := func(stdin []byte, args ...string) string {
		t.Helper()
		cmd := exec.Command(labtest.Espgw(t), args...)
		cmd.Stdin = bytes.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("espgw %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for i := range 2 {
		run(sas, "sa", "add", "--socket", b.ControlSocket(i), "-")
		run(pols, "policy", "add", "--socket", b.ControlSocket(i), "-")
	}
	ping(extra)
	for i := range 2 {
		run(pols, "policy", "del", "--socket", b.ControlSocket(i), "-")
		run(nil, "sa", "del", "--socket", b.ControlSocket(i), fmt.Sprintf("%#x@%s", extra.Out.SPI, extra.Out.Dst), fmt.Sprintf("%#x@%s", extra.Back.SPI, extra.Back.Dst))
	}
	if out, err := b.Topo.HostA.Output(ctx, "ping", "-n", "-c", "1", "-W", "1", "-I", extra.HostA.String(), extra.HostB.String()); err == nil {
		t.Errorf("ping through a deleted tunnel got through:\n%s", out)
	}
	if out := run(nil, "sa", "list", "--socket", b.ControlSocket(0)); strings.Contains(out, fmt.Sprintf("%#x", extra.Out.SPI)) {
		t.Errorf("the deleted SA is still listed")
	}
}
