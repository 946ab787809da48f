package e2e_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/control"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/internal/xdp"
	"github.com/espgw/espgw/sa"
)

// TestDualStackOverXDP runs a tunnel pair whose gateways hold an IPv4 and an
// IPv6 WAN address, the IPv4 LANs' traffic in IPv4-outer ESP and the IPv6
// LANs' in IPv6-outer ESP, with wan-io xdp and auto: pings of both families
// answered, a WAN capture every ESP packet of which (both outer families)
// tshark decrypts with a good ICV, and each gateway's one AF_XDP connection
// (one program and socket set for both families) counting both families'
// packets in and out through its rings while the raw sockets receive none.
func TestDualStackOverXDP(t *testing.T) {
	needRoot(t)
	for _, wanIO := range []string{"xdp", "auto"} {
		t.Run(wanIO, func(t *testing.T) {
			b := startBed(t, testbed.Options{Prefix: "itdual", DualStack: true, WanIO: wanIO, Suite: sa.Suite{Cipher: sa.CipherAESGCM16}})
			a := b.Topo.Addr
			dsts := []netip.Addr{a.HostB4.Addr(), a.HostB6.Addr()}
			resolve(b.Topo.HostA, dsts...)
			time.Sleep(300 * time.Millisecond)
			wan := startTcpdump(t, b.Topo.WAN, "gw1", filepath.Join(b.Dir, "wan.pcap"), testbed.ESPFilter)
			const count = 5
			sizes := []int{0, 500, 1300}
			pingSweep(t, b.Topo.HostA, dsts, sizes, count)
			time.Sleep(200 * time.Millisecond)
			if err := wan.Stop(); err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, s := range []*sa.SA{b.SAs[0], b.SAs[1], b.SAs6[0], b.SAs6[1]} {
				lines = append(lines, testbed.EspSALine(s))
			}
			v, err := testbed.Tshark(context.Background(), wan.Path, lines)
			if err != nil {
				t.Fatal(err)
			}
			want := len(dsts) * len(sizes) * count * 2
			if v.ESP < want || v.ICVGood != v.ESP || v.Decrypted != v.ESP {
				t.Errorf("tshark on the WAN: %d ESP packets, %d good ICV, %d decrypted; want at least %d, all good and decrypted", v.ESP, v.ICVGood, v.Decrypted, want)
			}
			perFamily := uint64(len(sizes) * count)
			for i := range 2 {
				st := saDrops(t, b, i)
				gatewayDrops(t, st, i)
				for _, spi := range []uint32{0x1001, 0x2001, 0x1006, 0x2006} {
					s := st.SA(spi)
					if s == nil || s.SealedPackets+s.OpenedPackets < perFamily {
						t.Errorf("gw%d SA %#x: %+v, want ≥ %d packets through it", i+1, spi, s, perFamily)
					}
				}
				if len(st.XDP) != 1 {
					t.Fatalf("gw%d: %d AF_XDP connections, want 1 serving both families (stats %+v)", i+1, len(st.XDP), st.XDP)
				}
				x := st.XDP[0]
				t.Logf("gw%d AF_XDP: %+v", i+1, x)
				if len(x.Local) != 2 {
					t.Errorf("gw%d AF_XDP serves %v, want an IPv4 and an IPv6 address", i+1, x.Local)
				}
				// The first packet to each peer may leave through the raw
				// socket while its next hop is looked up.
				for _, f := range []struct {
					name string
					c    uint64
				}{{"IPv4 in", x.IPv4.PacketsIn}, {"IPv4 out", x.IPv4.PacketsOut}, {"IPv6 in", x.IPv6.PacketsIn}, {"IPv6 out", x.IPv6.PacketsOut}} {
					if f.c < perFamily-1 {
						t.Errorf("gw%d AF_XDP: %d %s packets through the rings, want ≥ %d", i+1, f.c, f.name, perFamily-1)
					}
				}
				if x.Malformed != 0 || x.TXRingFull != 0 || x.Fallback > 16 {
					t.Errorf("gw%d AF_XDP counters %+v", i+1, x)
				}
				for _, s := range st.Sockets {
					if s.PacketsIn > 0 {
						t.Errorf("gw%d raw socket %s received %d ESP packets the program should have steered", i+1, s.Local, s.PacketsIn)
					}
				}
			}
			if t.Failed() {
				return
			}

			// IPv6 taken away through the control sockets: the connection
			// stays, serving IPv4 alone; IPv6 given back on new SPIs: it
			// serves both again.
			v6Policies := func(out, back uint32) []sa.Policy {
				return []sa.Policy{
					{Priority: 10, Selector: sa.Selector{Dst: a.LANB6}, Action: sa.Protect, SPI: out},
					{Priority: 10, Selector: sa.Selector{Dst: a.LANA6}, Action: sa.Protect, SPI: back},
				}
			}
			pol, err := control.PolicyEntries(v6Policies(0x1006, 0x2006)...)
			if err != nil {
				t.Fatal(err)
			}
			change(t, b, control.Request{Op: "policy.del", SPD: pol}, control.Request{Op: "sa.del", IDs: []control.SAID{{SPI: "0x1006"}, {SPI: "0x2006"}}})
			before := [2]xdp.Stats{}
			for i := range 2 {
				st := gwStats(t, b, i)
				if len(st.XDP) != 1 || len(st.XDP[0].Local) != 1 || st.XDP[0].Local[0] != []netip.Addr{a.GW1WAN4.Addr(), a.GW2WAN4.Addr()}[i].String() {
					t.Fatalf("gw%d after IPv6's SAs went: AF_XDP %+v, want one connection serving IPv4 alone", i+1, st.XDP)
				}
				before[i] = st.XDP[0]
			}
			pingSweep(t, b.Topo.HostA, dsts[:1], []int{56}, count)
			out6, back6 := *b.SAs6[0], *b.SAs6[1]
			out6.SPI, back6.SPI = 0x1016, 0x2016
			sas6, err := control.SAEntries(&out6, &back6)
			if err != nil {
				t.Fatal(err)
			}
			if pol, err = control.PolicyEntries(v6Policies(0x1016, 0x2016)...); err != nil {
				t.Fatal(err)
			}
			change(t, b, control.Request{Op: "sa.add", SA: sas6}, control.Request{Op: "policy.add", SPD: pol})
			pingSweep(t, b.Topo.HostA, dsts, []int{56}, count)
			for i := range 2 {
				x := gwStats(t, b, i).XDP
				if len(x) != 1 || len(x[0].Local) != 2 {
					t.Fatalf("gw%d after IPv6's SAs came back: AF_XDP %+v, want one connection serving both", i+1, x)
				}
				if in4, in6 := x[0].IPv4.PacketsIn-before[i].IPv4.PacketsIn, x[0].IPv6.PacketsIn-before[i].IPv6.PacketsIn; in4 < 2*count || in6 < count {
					t.Errorf("gw%d AF_XDP since IPv6 went: %d IPv4 and %d IPv6 packets in through the rings, want ≥ %d and ≥ %d", i+1, in4, in6, 2*count, count)
				}
			}
		})
	}
}

// change sends each request to gw1's control socket, then to gw2's.
func change(t *testing.T, b *testbed.Bed, reqs ...control.Request) {
	t.Helper()
	for _, req := range reqs {
		for i := range 2 {
			c, err := control.Dial(b.ControlSocket(i))
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Do(req)
			c.Close()
			if err != nil {
				t.Fatalf("%s on gw%d: %v", req.Op, i+1, err)
			}
		}
	}
}
