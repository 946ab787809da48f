package gateway_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/memnet"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// scaleFile writes the SA file of a gateway with n tunnels to n peers: per
// tunnel an outbound and an inbound SA, each peer its own outer address,
// and a protect policy for the tunnel's own inner prefix pair.
func scaleFile(n int) []byte {
	var b bytes.Buffer
	b.WriteString("sa:\n")
	peer := func(i int) string { return fmt.Sprintf("10.%d.%d.%d", 64+i>>16, byte(i>>8), byte(i)) }
	for i := range n {
		for dir := range 2 {
			src, dst := "198.51.100.1", peer(i)
			if dir == 1 {
				src, dst = dst, src
			}
			fmt.Fprintf(&b, "  - {spi: %#x, src: %s, dst: %s, enc: aes-gcm-16, enc-key: 0x%040x, replay-window: 64}\n",
				0x100000+2*i+dir, src, dst, uint64(i)*0x9e3779b97f4a7c15+uint64(dir))
		}
	}
	b.WriteString("spd:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {priority: 10, src: 172.16.%d.%d/32, dst: 172.%d.%d.%d/32, action: protect, sa: %#x}\n",
			byte(i>>8), byte(i), 20+i>>16, byte(i>>8), byte(i), 0x100000+2*i)
	}
	return b.Bytes()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func rssBytes(t testing.TB) int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(data))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// BenchmarkLoadTunnels reads and loads the SA file of a gateway with many
// tunnels (2 SAs and a policy each) and reports the time to put them in
// force, SAs loaded per second and the resident memory each SA costs (with
// its share of the policies), measured as the RSS growth of the process.
// The sequence reservations go to a journal in a temporary directory, as a
// gateway's go to its state directory.
//
//	go test -run '^$' -bench LoadTunnels -benchtime 1x ./internal/gateway/
func BenchmarkLoadTunnels(b *testing.B) {
	for _, n := range []int{1000, 10000, 50000} {
		file := scaleFile(n)
		b.Run(fmt.Sprintf("sas=%d", 2*n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				dev := memnet.NewDevice(16, 64)
				c, _ := memnet.Pipe(netip.AddrPortFrom(gw1Addr, 0), netip.AddrPortFrom(gw2Addr, 0), 16)
				// With sequence persistence on, as a gateway has it by
				// default: the load includes the outbound SAs' first
				// reservations (one journal write).
				g := gateway.New(dev, []gateway.Conn{c}, func(*sa.SA) gateway.Conn { return c }, cpu.New(),
					gateway.Options{Local: []netip.Addr{netip.MustParseAddr("198.51.100.1")}, StateDir: b.TempDir(), Log: slog.New(slog.DiscardHandler)})
				runtime.GC()
				debug.FreeOSMemory()
				before := rssBytes(b)
				b.StartTimer()
				cpu0 := cpuTime()
				start := time.Now()
				cfg, err := sa.ParseConfig("scale.yaml", file)
				if err != nil {
					b.Fatal(err)
				}
				parsed := time.Since(start)
				if err := g.Load(cfg.SAs, cfg.SPD); err != nil {
					b.Fatal(err)
				}
				took := time.Since(start)
				cpuUsed := cpuTime() - cpu0
				b.StopTimer()
				cfg = nil
				runtime.GC()
				debug.FreeOSMemory()
				per := float64(rssBytes(b)-before) / float64(2*n)
				if got := len(g.SAs()); got != 2*n {
					b.Fatalf("%d SAs in force, want %d", got, 2*n)
				}
				b.ReportMetric(took.Seconds(), "s/load")
				// On a shared machine the wall time is inflated by whoever
				// else runs; the process's CPU time says what loading costs.
				b.ReportMetric(cpuUsed.Seconds(), "cpu-s/load")
				b.ReportMetric(parsed.Seconds(), "s/parse")
				b.ReportMetric(float64(2*n)/took.Seconds(), "SAs/s")
				b.ReportMetric(per, "RSS-B/SA")
				g.Close()
				b.StartTimer()
			}
		})
	}
}

// BenchmarkPipelineTunnels is the in-memory pipeline with the load spread
// round-robin over n tunnels, each its own SA pair and a policy for its own
// inner destination, against one tunnel (also through a policy) in the same
// run: what many SAs cost the data path alone (SPD index, SAD, per-SA state
// out of cache), with no kernel in the way.
//
//	go test -run '^$' -bench PipelineTunnels -benchtime 200000x ./internal/gateway/
func BenchmarkPipelineTunnels(b *testing.B) {
	for _, n := range []int{1, 100, 10000} {
		b.Run(fmt.Sprintf("tunnels=%d", n), func(b *testing.B) {
			inner := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 128 + byte(i>>16), byte(i >> 8), byte(i)}) }
			var sas []*sa.SA
			var policies []sa.Policy
			for i := range n {
				for dir, spi := range []uint32{uint32(0x100000 + i), uint32(0x200000 + i)} {
					s := &sa.SA{SPI: spi, Src: gw1Addr, Dst: gw2Addr, Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, EncKey: key(20), ReplayWindow: 1024}
					if dir == 1 {
						s.Src, s.Dst = gw2Addr, gw1Addr
					}
					sas = append(sas, s)
				}
				policies = append(policies, sa.Policy{Priority: 10, Selector: sa.Selector{Dst: netip.PrefixFrom(inner(i), 32)}, Action: sa.Protect, SPI: uint32(0x100000 + i)})
			}
			e := cpu.New()
			bed := newBedEngines(b, [2]offload.Engine{e, e}, sas)
			for _, g := range []*gateway.Gateway{bed.gw1, bed.gw2} {
				if err := g.Load(clone(sas), policies); err != nil {
					b.Fatal(err)
				}
			}
			// As many distinct packets whatever the tunnel count, so
			// that what differs between the runs is the tunnels, not
			// whether the packets' own bytes stay in cache.
			pkts := make([][]byte, 10000)
			for i := range pkts {
				pkts[i] = udpTo(hostA, inner(i%n), 512-28, uint16(i))
			}
			b.SetBytes(512)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			go func() {
				for i := range b.N {
					if bed.dev1.Send(pkts[i%len(pkts)]) != nil {
						return
					}
				}
			}()
			bufs := make([][]byte, 64)
			for i := range bufs {
				bufs[i] = make([]byte, 2000)
			}
			sizes := make([]int, 64)
			for got := 0; got < b.N; {
				k, err := bed.dev2.Receive(bufs, sizes)
				if err != nil {
					b.Fatal(err)
				}
				got += k
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkt/s")
			// The process's CPU per packet (both gateways and the host
			// side): on a shared machine the wall time is mostly waiting.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/pkt")
		})
	}
}

// BenchmarkApplyTunnel adds one tunnel (its SA pair, then its policy) next
// to n live ones and deletes it again, as the control socket does: the cost
// of one reconfiguration, which the data path shares the CPU with.
//
//	go test -run '^$' -bench ApplyTunnel -benchtime 200x ./internal/gateway/
func BenchmarkApplyTunnel(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run(fmt.Sprintf("live=%d", n), func(b *testing.B) {
			dev := memnet.NewDevice(16, 64)
			c, _ := memnet.Pipe(netip.AddrPortFrom(gw1Addr, 0), netip.AddrPortFrom(gw2Addr, 0), 16)
			g := gateway.New(dev, []gateway.Conn{c}, func(*sa.SA) gateway.Conn { return c }, cpu.New(),
				gateway.Options{Local: []netip.Addr{gw1Addr}, Log: slog.New(slog.DiscardHandler)})
			mk := func(i int) ([]*sa.SA, []sa.Policy) {
				dst := netip.AddrFrom4([4]byte{10, 128 + byte(i>>16), byte(i >> 8), byte(i)})
				out := &sa.SA{SPI: uint32(0x100000 + i), Src: gw1Addr, Dst: gw2Addr, Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, EncKey: key(20), ReplayWindow: 64}
				in := &sa.SA{SPI: uint32(0x200000 + i), Src: gw2Addr, Dst: gw1Addr, Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, EncKey: key(20), ReplayWindow: 64}
				return []*sa.SA{out, in}, []sa.Policy{{Priority: 10, Selector: sa.Selector{Dst: netip.PrefixFrom(dst, 32)}, Action: sa.Protect, SPI: out.SPI}}
			}
			var sas []*sa.SA
			var pols []sa.Policy
			for i := range n {
				s, p := mk(i)
				sas, pols = append(sas, s...), append(pols, p...)
			}
			if err := g.Load(sas, pols); err != nil {
				b.Fatal(err)
			}
			extra, extraPol := mk(n)
			cpu0 := cpuTime()
			b.ResetTimer()
			for range b.N {
				if err := g.Apply(gateway.Change{Add: extra}); err != nil {
					b.Fatal(err)
				}
				if err := g.Apply(gateway.Change{AddPolicies: extraPol}); err != nil {
					b.Fatal(err)
				}
				if err := g.Apply(gateway.Change{DelPolicies: []gateway.PolicyID{{Index: -1, Policy: extraPol[0]}}}); err != nil {
					b.Fatal(err)
				}
				if err := g.Apply(gateway.Change{Del: []gateway.SAID{{SPI: extra[0].SPI, Dst: extra[0].Dst}, {SPI: extra[1].SPI, Dst: extra[1].Dst}}}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e3, "cpu-µs/add+del")
		})
	}
}
