package scenario

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/sa"
)

// The bundled external example a user copies stays valid: it loads, with
// its SA file, and names the setup, reset and counters commands.
func TestBundledExternalExample(t *testing.T) {
	t.Setenv("ESPGW_DEVICE_PSK", "an example key only")
	files, err := filepath.Glob("../../../scenarios/external/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios/external example: %v", err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "-sas.yaml") {
			continue
		}
		scs, err := Load(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, s := range scs {
			e := s.External
			if s.Peer == PeerExternal && e != nil && e.IKE != nil {
				if e.Counters == "" || e.IKE.PSKEnv == "" {
					t.Errorf("%s: external %+v: want counters and the key from the environment", f, e)
				}
				n++
				continue
			}
			if s.Peer != PeerExternal || e == nil || e.Setup == "" || e.Reset == "" || e.Counters == "" || e.out == nil || e.in == nil {
				t.Errorf("%s: peer %q, external %+v: want setup, reset, counters and both SAs", f, s.Peer, e)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no scenario in scenarios/external")
	}
}

// With a setup command each run gets fresh SPIs (what setup installs);
// without one the SA file's SPIs as they are.
func TestExternalRunSPIs(t *testing.T) {
	scs, err := Load("../../../scenarios/external/my-gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := scs[0].External
	seen := map[uint32]bool{}
	for range 50 {
		x, err := newExternalGW2(e)
		if err != nil {
			t.Fatal(err)
		}
		for _, spi := range []uint32{x.out.SPI, x.in.SPI} {
			if spi < 256 || spi == e.out.SPI || spi == e.in.SPI || seen[spi] {
				t.Fatalf("run SPI %#x: want a fresh one ≥ 256 every run (file's %#x, %#x)", spi, e.out.SPI, e.in.SPI)
			}
			seen[spi] = true
		}
		if x.out.Dst != e.out.Dst || string(x.out.EncKey) != string(e.out.EncKey) {
			t.Fatal("the run's SA differs from the file's in more than its SPI")
		}
		env, err := x.hookEnv()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(env, "\n"), fmt.Sprintf("ESPGW_SPI_OUT=%#08x", x.out.SPI)) {
			t.Fatalf("setup's environment lacks the run's SPI %#x", x.out.SPI)
		}
		x.removeFiles()
	}
	if e.out.SPI != 0x3001 || e.in.SPI != 0x3002 {
		t.Errorf("the scenario's own SAs changed: %#x %#x", e.out.SPI, e.in.SPI)
	}
	bare := *e
	bare.Setup, bare.Reset = "", ""
	x, err := newExternalGW2(&bare)
	if err != nil || x.out.SPI != 0x3001 || x.in.SPI != 0x3002 {
		t.Errorf("without setup: SPIs %#x %#x (%v), want the file's", x.out.SPI, x.in.SPI, err)
	}
}

// A failed run against an external device says what the device's
// counters show and what that usually means.
func TestExternalHint(t *testing.T) {
	scs, err := Load("../../../scenarios/external/my-gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bare := *scs[0].External
	bare.Setup, bare.Reset = "", ""
	x, _ := newExternalGW2(&bare)
	withSetup, _ := newExternalGW2(scs[0].External)
	noCounters := bare
	noCounters.Counters = ""
	blind, _ := newExternalGW2(&noCounters)
	for _, c := range []struct {
		x     *externalGW2
		m     Metrics
		found bool
		want  string
	}{
		{x, Metrics{"gw2.opened": 0, "gw2.replay": 88, "gw2.outside-window": 253}, true,
			"replay=88 outside-window=253 opened=0 on SPI 0x3001: it dropped gw1's packets as replays, which usually means it kept the SA's replay window from an earlier run"},
		{withSetup, Metrics{"gw2.replay": 3}, true, "setup installed fresh SAs, so these are replays within this run"},
		{withSetup, Metrics{}, false, "external.setup did not install this run's SAs"},
		{x, Metrics{}, false, "list no state with SPI 0x3001 toward 198.51.100.129"},
		{x, Metrics{"gw2.bad-icv": 9}, true, "bad-icv=9 and nothing opened on SPI 0x3001: its keys or algorithms differ"},
		{blind, Metrics{}, false, "counters are unknown (no external.counters command); a device keeps each SA's replay window"},
	} {
		if got := c.x.hint(c.m, c.found); !strings.Contains(got, c.want) {
			t.Errorf("hint(%v, %v) = %q, want it to say %q", c.m, c.found, got, c.want)
		}
	}
}

// IPv6 WAN addresses make the tunnel's outer family IPv6 (the traffic stays
// IPv4); a topology that says otherwise is refused.
func TestExternalIPv6Outer(t *testing.T) {
	dir := t.TempDir()
	sas := `sa:
  - {spi: 0x6001, mode: tunnel, src: "2001:db8:5::1", dst: "2001:db8:5::129", enc: aes-cbc, enc-key: 0x000102030405060708090a0b0c0d0e0f, auth: hmac-sha1-96, auth-key: 0x0102030405060708090a0b0c0d0e0f1011121314}
  - {spi: 0x6002, mode: tunnel, src: "2001:db8:5::129", dst: "2001:db8:5::1", enc: aes-cbc, enc-key: 0x000102030405060708090a0b0c0d0e0f, auth: hmac-sha1-96, auth-key: 0x0102030405060708090a0b0c0d0e0f1011121314}
`
	if err := os.WriteFile(filepath.Join(dir, "sas.yaml"), []byte(sas), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := `name: v6
peer: external
external:
  wan: {interface: eth9, address: "2001:db8:5::1/64", dut: "2001:db8:5::129"}
  lan: {interface: eth8, address: 203.0.113.10/24, dut: 203.0.113.1}
  near: 192.0.2.0/24
  sa-file: sas.yaml
traffic:
  steps:
    - {name: sweep, ping: {sizes: [56], count: 1}}
expect:
  delivered: == 1
`
	file := filepath.Join(dir, "v6.yaml")
	scs, err := Parse(file, []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	s := scs[0]
	if s.Topology.Outer != "ipv6" || s.External.out.SPI != 0x6001 {
		t.Fatalf("outer %q, SA out %+v", s.Topology.Outer, s.External.out)
	}
	a := s.External.addresses()
	if a.GW1WAN6.String() != "2001:db8:5::1/64" || a.GW2WAN6.String() != "2001:db8:5::129/64" ||
		a.WANToGW16.String() != "2001:db8:5:0:ffff:ffff:ffff:fffe/64" || a.WANToGW26.String() != "2001:db8:5:0:ffff:ffff:ffff:fffd/64" {
		t.Errorf("addresses: gw1 %s gw2 %s wan %s %s", a.GW1WAN6, a.GW2WAN6, a.WANToGW16, a.WANToGW26)
	}
	for _, bad := range []struct{ topo, want string }{
		{"topology: {outer: ipv4}\n", "topology.outer: outer ipv4, but external.wan's addresses are ipv6"},
		{"topology: {inner: ipv6}\n", "topology.inner: IPv4 traffic only"},
	} {
		_, err := Parse(file, []byte(doc+bad.topo))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", strings.TrimSpace(bad.topo), err, bad.want)
		}
	}
}

// Transport-mode SAs against an external device: the run pings the device
// from gw1 (steps that name no ends get gw1 → gw2 in the outer family), no
// LAN is part of it, other traffic is refused; the run's ip xfrm commands
// give the device host-to-host policies and, over IPv6, let neighbour
// discovery pass in clear before them.
func TestExternalTransport(t *testing.T) {
	dir := t.TempDir()
	for _, fam := range []struct {
		name, gw1, dut, wan string
		v6                  bool
	}{
		{"ipv4", "198.51.100.1", "198.51.100.129", "198.51.100.1/24", false},
		{"ipv6", "2001:db8:5::1", "2001:db8:5::129", "2001:db8:5::1/64", true},
	} {
		t.Run(fam.name, func(t *testing.T) {
			sas := fmt.Sprintf(`sa:
  - {spi: 0x7001, mode: transport, src: "%s", dst: "%s", enc: aes-gcm-16, enc-key: 0x000102030405060708090a0b0c0d0e0f10111213}
  - {spi: 0x7002, mode: transport, src: "%s", dst: "%s", enc: aes-gcm-16, enc-key: 0x1112131415161718191a1b1c1d1e1f2021222324}
`, fam.gw1, fam.dut, fam.dut, fam.gw1)
			if err := os.WriteFile(filepath.Join(dir, fam.name+"-sas.yaml"), []byte(sas), 0o600); err != nil {
				t.Fatal(err)
			}
			head := fmt.Sprintf(`name: tr
peer: external
external:
  wan: {interface: eth9, address: "%s", dut: "%s"}
  sa-file: %s-sas.yaml
  setup: "true"
`, fam.wan, fam.dut, fam.name)
			file := filepath.Join(dir, fam.name+".yaml")
			good := head + "traffic:\n  steps:\n    - {name: a, ping: {sizes: [56], count: 2}}\n    - {name: b, ping: {from: gw1, to: gw2, count: 2}}\nexpect:\n  delivered: == 1\n"
			scs, err := Parse(file, []byte(good))
			if err != nil {
				t.Fatal(err)
			}
			s := scs[0]
			outer := "ipv4"
			if fam.v6 {
				outer = "ipv6"
			}
			for _, st := range s.Traffic.Steps {
				if st.Ping.From != "gw1" || st.Ping.To != "gw2" || st.Ping.Family != outer {
					t.Errorf("step %s: from %s to %s family %s, want gw1 → gw2 over %s", st.Name, st.Ping.From, st.Ping.To, st.Ping.Family, outer)
				}
			}
			if s.SA.mode != sa.Transport || s.SA.Mode != "transport" || s.Topology.Outer != outer {
				t.Errorf("mode %v %q outer %q", s.SA.mode, s.SA.Mode, s.Topology.Outer)
			}
			if a := s.External.addresses(); a.HostB4 != netns.StandardAddresses().HostB4 {
				t.Errorf("hostB %s: want the bed's own without a LAN", a.HostB4)
			}
			x, err := newExternalGW2(s.External)
			if err != nil {
				t.Fatal(err)
			}
			env, err := x.hookEnv()
			if err != nil {
				t.Fatal(err)
			}
			defer x.removeFiles()
			var script []byte
			for _, kv := range env {
				if v, ok := strings.CutPrefix(kv, "ESPGW_IP_XFRM="); ok {
					script, _ = os.ReadFile(v)
				}
			}
			bits := "/32"
			if fam.v6 {
				bits = "/128"
			}
			for _, want := range []string{
				fmt.Sprintf("ip xfrm policy add src %s%s dst %s%s dir out tmpl src %s dst %s proto esp reqid %d mode transport", fam.dut, bits, fam.gw1, bits, fam.dut, fam.gw1, x.in.SPI),
				fmt.Sprintf("ip xfrm policy add src %s%s dst %s%s dir in tmpl src %s dst %s proto esp reqid %d mode transport", fam.gw1, bits, fam.dut, bits, fam.gw1, fam.dut, x.out.SPI),
			} {
				if !strings.Contains(string(script), want) {
					t.Errorf("the run's ip xfrm commands lack %q:\n%s", want, script)
				}
			}
			nd := strings.Index(string(script), fmt.Sprintf("ip xfrm policy add src %s/128 dst %s/128 proto 58 type 136 dir in action allow", fam.gw1, fam.dut))
			if fam.v6 != (nd >= 0) || fam.v6 && nd > strings.Index(string(script), "mode transport") {
				t.Errorf("neighbour discovery bypass (IPv6 only, before the SAs' policies) at %d:\n%s", nd, script)
			}
			for _, bad := range []struct{ doc, want string }{
				{strings.Replace(good, "  setup:", "  lan: {interface: eth8, address: 203.0.113.10/24, dut: 203.0.113.1}\n  setup:", 1), "external.lan: transport-mode SAs carry traffic between gw1 and the device itself"},
				{strings.Replace(good, "  setup:", "  near: 192.0.2.0/24\n  setup:", 1), "external.near: transport-mode SAs"},
				{head + "traffic:\n  steps:\n    - {name: u, udp: {from: gw1, to: gw2, packets: 5}}\nexpect:\n  delivered: == 1\n", "ping steps only"},
				{head + "traffic:\n  steps:\n    - {name: p, ping: {from: hostA, to: hostB}}\nexpect:\n  delivered: == 1\n", "pings from gw1 to gw2"},
			} {
				if _, err := Parse(file, []byte(bad.doc)); err == nil || !strings.Contains(err.Error(), bad.want) {
					t.Errorf("%v, want %q", err, bad.want)
				}
			}
		})
	}
	// One SA of each mode is refused.
	mixed := `sa:
  - {spi: 0x7001, mode: transport, src: 198.51.100.1, dst: 198.51.100.129, enc: aes-gcm-16, enc-key: 0x000102030405060708090a0b0c0d0e0f10111213}
  - {spi: 0x7002, mode: tunnel, src: 198.51.100.129, dst: 198.51.100.1, enc: aes-gcm-16, enc-key: 0x1112131415161718191a1b1c1d1e1f2021222324}
`
	os.WriteFile(filepath.Join(dir, "mixed-sas.yaml"), []byte(mixed), 0o600)
	doc := "name: m\npeer: external\nexternal:\n  wan: {interface: eth9, address: 198.51.100.1/24, dut: 198.51.100.129}\n  sa-file: mixed-sas.yaml\ntraffic:\n  steps:\n    - {name: a, ping: {}}\nexpect:\n  delivered: == 1\n"
	if _, err := Parse(filepath.Join(dir, "m.yaml"), []byte(doc)); err == nil || !strings.Contains(err.Error(), "want both in one mode") {
		t.Errorf("mixed modes: %v", err)
	}
}
