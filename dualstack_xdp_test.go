package espgw_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/testbed"
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
		})
	}
}
