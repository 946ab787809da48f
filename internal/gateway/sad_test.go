package gateway_test

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/memnet"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// end is one gateway of a pair built for a test: its addresses, SAs and
// policies.
type end struct {
	local []netip.Addr
	sas   []*sa.SA
	spd   []sa.Policy
}

// runPair runs two gateways, each with SAs of its own, joined in memory;
// arrive is the encapsulation gw2's outer side says its packets came in.
func runPair(t *testing.T, e1, e2 end, arrive sa.Encap) (dev1, dev2 *memnet.Device, gw1, gw2 *gateway.Gateway) {
	t.Helper()
	c1, c2 := memnet.Pipe(netip.AddrPortFrom(e1.local[0], 0), netip.AddrPortFrom(e2.local[0], 0), 1024)
	c2.As = arrive
	dev1, dev2 = memnet.NewDevice(1024, 64), memnet.NewDevice(1024, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	var gws []*gateway.Gateway
	for _, x := range []struct {
		dev *memnet.Device
		c   *memnet.Conn
		e   end
	}{{dev1, c1, e1}, {dev2, c2, e2}} {
		g := gateway.New(x.dev, []gateway.Conn{x.c}, func(*sa.SA) gateway.Conn { return x.c }, cpu.New(),
			gateway.Options{Local: x.e.local, InnerMTU: 1400, Log: slog.New(slog.DiscardHandler)})
		if err := g.Load(x.e.sas, x.e.spd); err != nil {
			t.Fatal(err)
		}
		gws = append(gws, g)
		go func() { done <- g.Run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("gateway run: %v", err)
			}
		}
	})
	return dev1, dev2, gws[0], gws[1]
}

func waitDrop(t *testing.T, g *gateway.Gateway, r gateway.Reason, want uint64) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for g.Counters().Drops[r].Load() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s drops: %d, want %d", r, g.Counters().Drops[r].Load(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSharedSPIByDestination: two SAs with one SPI and different
// destinations (two local addresses of gw2, each with a peer of its own)
// both carry their traffic; inbound lookup by SPI alone let the later
// shadow the earlier, whose packets failed as bad ICV — or the gateway
// refused the pair.
func TestSharedSPIByDestination(t *testing.T) {
	suite := sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}
	peerB, localB := netip.MustParseAddr("198.51.100.4"), netip.MustParseAddr("198.51.100.3")
	mk := func(src, dst netip.Addr) *sa.SA {
		return &sa.SA{SPI: 0x1001, Mode: sa.Tunnel, Src: src, Dst: dst, Suite: suite,
			EncKey: key(16), AuthKey: key(20), ReplayWindow: 64}
	}
	a, b := mk(gw1Addr, gw2Addr), mk(peerB, localB)
	ca, c2a := memnet.Pipe(netip.AddrPortFrom(gw1Addr, 0), netip.AddrPortFrom(gw2Addr, 0), 256)
	cb, c2b := memnet.Pipe(netip.AddrPortFrom(peerB, 0), netip.AddrPortFrom(localB, 0), 256)
	devA, devB, dev2 := memnet.NewDevice(256, 64), memnet.NewDevice(256, 64), memnet.NewDevice(256, 64)
	quiet := slog.New(slog.DiscardHandler)
	gwA := gateway.New(devA, []gateway.Conn{ca}, func(*sa.SA) gateway.Conn { return ca }, cpu.New(), gateway.Options{Local: []netip.Addr{gw1Addr}, Log: quiet})
	gwB := gateway.New(devB, []gateway.Conn{cb}, func(*sa.SA) gateway.Conn { return cb }, cpu.New(), gateway.Options{Local: []netip.Addr{peerB}, Log: quiet})
	gw2 := gateway.New(dev2, []gateway.Conn{c2a, c2b}, func(*sa.SA) gateway.Conn { return c2a }, cpu.New(), gateway.Options{Local: []netip.Addr{gw2Addr, localB}, Log: quiet})
	for _, x := range []struct {
		g   *gateway.Gateway
		sas []*sa.SA
	}{{gwA, []*sa.SA{a}}, {gwB, []*sa.SA{b}}, {gw2, []*sa.SA{a, b}}} {
		if err := x.g.Load(x.sas, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 3)
	for _, g := range []*gateway.Gateway{gwA, gwB, gw2} {
		go func() { done <- g.Run(ctx) }()
	}
	defer func() {
		cancel()
		for range 3 {
			<-done
		}
	}()
	const n = 20
	hostA, hostB := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.20")
	dst := netip.MustParseAddr("203.0.113.10")
	for i := range n {
		devA.Send(udpTo(hostA, dst, 100, uint16(i)))
		devB.Send(udpTo(hostB, dst, 100, uint16(i)))
	}
	bufs, sizes := [][]byte{make([]byte, 2000)}, []int{0}
	got := map[byte]int{}
	for range 2 * n {
		if _, err := dev2.Receive(bufs, sizes); err != nil {
			t.Fatal(err)
		}
		got[bufs[0][15]]++ // the inner source's last byte
	}
	if got[10] != n || got[20] != n {
		t.Errorf("delivered per sender %v, want %d each", got, n)
	}
	for _, s := range gw2.SAs() {
		if snap := s.Snapshot(); snap.OpenedPackets != n || len(snap.Drops) != 0 {
			t.Errorf("%s: opened %d drops %v, want %d and none", s.Config, snap.OpenedPackets, snap.Drops, n)
		}
	}
}

// TestInboundChecksEncapAndSource: a packet whose SPI and destination name
// an SA is still refused, and counted, when it came another way than the
// SA says: in UDP to an encap none SA, or from another source.
func TestInboundChecksEncapAndSource(t *testing.T) {
	suite := sa.Suite{Cipher: sa.CipherAESGCM16}
	k := key(20)
	out := &sa.SA{SPI: 0x1001, Src: gw1Addr, Dst: gw2Addr, Suite: suite, EncKey: k, ReplayWindow: 64}
	udp := *out
	udp.Encap, udp.SrcPort, udp.DstPort = sa.EncapUDP, 4500, 4500
	elsewhere := *out
	elsewhere.Src = netip.MustParseAddr("198.51.100.7")
	for _, tc := range []struct {
		name   string
		in     *sa.SA
		arrive sa.Encap
		reason gateway.Reason
	}{
		{"encap none SA, ESP in UDP", out, sa.EncapUDP, gateway.WrongEncap},
		{"encap udp SA, raw ESP", &udp, sa.EncapNone, gateway.WrongEncap},
		{"SA from another source", &elsewhere, sa.EncapNone, gateway.WrongSource},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev1, _, _, gw2 := runPair(t,
				end{local: []netip.Addr{gw1Addr}, sas: []*sa.SA{out}},
				end{local: []netip.Addr{gw2Addr}, sas: []*sa.SA{tc.in}},
				tc.arrive)
			for i := range 5 {
				dev1.Send(ipv4UDP(50, uint16(i)))
			}
			waitDrop(t, gw2, tc.reason, 5)
			if n := gw2.SAs()[0].Snapshot().OpenedPackets; n != 0 {
				t.Errorf("%d packets opened", n)
			}
		})
	}
}

// TestLoadRefusesSPIsThatCannotBeToldApart: two SAs with one SPI and one
// destination are refused at load, with the reason.
func TestLoadRefusesSPIsThatCannotBeToldApart(t *testing.T) {
	sas := pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16}, 64)
	twin := *sas[1]
	twin.Src = netip.MustParseAddr("198.51.100.9")
	c, _ := memnet.Pipe(netip.AddrPortFrom(gw1Addr, 0), netip.AddrPortFrom(gw2Addr, 0), 1)
	g := gateway.New(memnet.NewDevice(1, 1), nil, func(*sa.SA) gateway.Conn { return c }, cpu.New(), gateway.Options{Local: []netip.Addr{gw1Addr}, Log: slog.New(slog.DiscardHandler)})
	err := g.Load(append(sas, &twin), nil)
	if err == nil || !strings.Contains(err.Error(), "duplicate SPI 0x2001 for dst 198.51.100.1") || !strings.Contains(err.Error(), "could not tell them apart") {
		t.Fatalf("Load: %v", err)
	}
}
