package gateway_test

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/memnet"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// TestCloseLeavesNothingRunning loads a thousand tunnels with sequence
// persistence on, takes one out of force (its session waits out a long
// retirement), and closes the gateway: the retirement is finished at once,
// no goroutine of the gateway is left, and no reservation is made after.
func TestCloseLeavesNothingRunning(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c, _ := memnet.Pipe(netip.AddrPortFrom(gw1Addr, 0), netip.AddrPortFrom(gw2Addr, 0), 16)
	g := gateway.New(memnet.NewDevice(16, 64), []gateway.Conn{c}, func(*sa.SA) gateway.Conn { return c }, cpu.New(),
		gateway.Options{Local: []netip.Addr{gw1Addr}, StateDir: t.TempDir(), RetireAfter: time.Hour, Log: slog.New(slog.DiscardHandler)})
	var sas []*sa.SA
	for i := range 1000 {
		for dir, spi := range []uint32{uint32(0x100000 + i), uint32(0x200000 + i)} {
			s := &sa.SA{SPI: spi, Src: gw1Addr, Dst: gw2Addr, Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, EncKey: key(20), ReplayWindow: 64}
			if dir == 1 {
				s.Src, s.Dst = gw2Addr, gw1Addr
			}
			sas = append(sas, s)
		}
	}
	if err := g.Load(sas, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range g.SAs() {
		if s.Config.Src == gw1Addr && s.LastSeq() != 0 {
			t.Fatalf("SA %#x numbered packets before any was sent", s.SPI())
		}
	}
	if err := g.Apply(gateway.Change{Del: []gateway.SAID{{SPI: 0x100000, Dst: gw2Addr}}}); err != nil {
		t.Fatal(err)
	}
	retiring := func() int {
		n := 0
		for _, s := range g.Stats().SAs {
			if s.Retired && s.SPI != "retired" {
				n++
			}
		}
		return n
	}
	if n := retiring(); n != 1 {
		t.Fatalf("%d SAs retiring before Close, want 1", n)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if n := retiring(); n != 0 {
		t.Errorf("%d SAs still retiring after Close", n)
	}
}
