package gateway_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/internal/memnet"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/offload/engines"
	"github.com/espgw/espgw/sa"
)

var (
	gw1Addr = netip.MustParseAddr("198.51.100.1")
	gw2Addr = netip.MustParseAddr("198.51.100.2")
)

func key(n int) sa.Key {
	k := make(sa.Key, n)
	rand.Read(k)
	return k
}

// pairSAs returns the two SAs of a tunnel between gw1 and gw2.
func pairSAs(suite sa.Suite, window int) []*sa.SA {
	mk := func(spi uint32, src, dst netip.Addr) *sa.SA {
		return &sa.SA{SPI: spi, Mode: sa.Tunnel, Src: src, Dst: dst, Suite: suite,
			EncKey: key(suite.EncKeyLens()[0]), AuthKey: key(suite.AuthKeyLen()), ReplayWindow: window}
	}
	return []*sa.SA{mk(0x1001, gw1Addr, gw2Addr), mk(0x2001, gw2Addr, gw1Addr)}
}

type bed struct {
	dev1, dev2 *memnet.Device
	gw1, gw2   *gateway.Gateway
	stop       func()
	// wire1 is gw1's end of the outer link, to put packets on the wire
	// as if gw1 had sent them (a replay).
	wire1 *memnet.Conn
}

// newBed runs two gateways joined by an in-memory outer link.
func newBed(t testing.TB, engine offload.Engine, sas []*sa.SA) *bed {
	t.Helper()
	return newBedEngines(t, [2]offload.Engine{engine, engine}, sas)
}

// newBedEngines is newBed with an engine per gateway, as two boxes have.
func newBedEngines(t testing.TB, engine [2]offload.Engine, sas []*sa.SA) *bed {
	t.Helper()
	return newBedOptions(t, engine, sas, 0)
}

// newBedOptions is newBedEngines with the gateways' Options.Inline.
func newBedOptions(t testing.TB, engine [2]offload.Engine, sas []*sa.SA, inline int) *bed {
	t.Helper()
	return newBedTapped(t, engine, sas, inline, nil)
}

// newBedTapped is newBedOptions with sent called for every ESP packet gw1
// puts on the wire (nil: none).
func newBedTapped(t testing.TB, engine [2]offload.Engine, sas []*sa.SA, inline int, sent func(*esp.Packet)) *bed {
	t.Helper()
	c1, c2 := memnet.Pipe(netip.AddrPortFrom(gw1Addr, 0), netip.AddrPortFrom(gw2Addr, 0), 1024)
	b := &bed{dev1: memnet.NewDevice(1024, 64), dev2: memnet.NewDevice(1024, 64), wire1: c1}
	var out1 gateway.Conn = c1
	if sent != nil {
		out1 = &tapConn{Conn: c1, sent: sent}
	}
	mk := func(dev *memnet.Device, c gateway.Conn, local netip.Addr, engine offload.Engine) *gateway.Gateway {
		g := gateway.New(dev, []gateway.Conn{c}, func(*sa.SA) gateway.Conn { return c }, engine,
			gateway.Options{Local: []netip.Addr{local}, InnerMTU: 1438, Inline: inline, RetireAfter: 10 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
		if err := g.Load(sas, nil); err != nil {
			t.Fatal(err)
		}
		return g
	}
	b.gw1, b.gw2 = mk(b.dev1, out1, gw1Addr, engine[0]), mk(b.dev2, c2, gw2Addr, engine[1])
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- b.gw1.Run(ctx) }()
	go func() { done <- b.gw2.Run(ctx) }()
	b.stop = func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("gateway run: %v", err)
			}
		}
	}
	t.Cleanup(b.stop)
	return b
}

func ipv4UDP(n int, id uint16) []byte {
	pkt := make([]byte, 28+n)
	pkt[0] = 0x45
	pkt[2], pkt[3] = byte((28+n)>>8), byte(28+n)
	pkt[4], pkt[5] = byte(id>>8), byte(id)
	pkt[8], pkt[9] = 64, 17
	copy(pkt[12:], []byte{192, 0, 2, 10})
	copy(pkt[16:], []byte{203, 0, 113, 10})
	pkt[20], pkt[21], pkt[22], pkt[23] = 0x30, 0x39, 0x30, 0x3a
	pkt[24], pkt[25] = byte((8+n)>>8), byte(8+n)
	for i := 28; i < len(pkt); i++ {
		pkt[i] = byte(i * int(id))
	}
	return pkt
}

func TestTunnelCarriesPacketsInOrder(t *testing.T) {
	for _, suite := range []sa.Suite{
		{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96},
		{Cipher: sa.CipherAESGCM16},
		{Cipher: sa.Cipher3DES, Auth: sa.AuthHMACSHA256_128},
	} {
		t.Run(suite.String(), func(t *testing.T) {
			b := newBed(t, cpu.New(), pairSAs(suite, 64))
			const count = 500
			go func() {
				// Bursts of 1 to 40 packets with pauses between them: the
				// gateways run short batches read while idle to completion
				// on their readers and the rest through the workers, and
				// the two must keep one order.
				for i := 0; i < count; {
					for range min(1+i%41, count-i) {
						b.dev1.Send(ipv4UDP(i%1400, uint16(i)))
						i++
					}
					time.Sleep(200 * time.Microsecond)
				}
			}()
			bufs := [][]byte{make([]byte, 2000)}
			sizes := []int{0}
			for i := range count {
				if _, err := b.dev2.Receive(bufs, sizes); err != nil {
					t.Fatal(err)
				}
				if want := ipv4UDP(i%1400, uint16(i)); !bytes.Equal(bufs[0][:sizes[0]], want) {
					t.Fatalf("packet %d differs", i)
				}
			}
			out := b.gw1.SAs()[0].Snapshot()
			in := b.gw2.SAs()[0].Snapshot()
			if out.SealedPackets != count || in.OpenedPackets != count || len(in.Drops) != 0 {
				t.Errorf("counters: sealed %d opened %d drops %v, want %d %d none", out.SealedPackets, in.OpenedPackets, in.Drops, count, count)
			}
		})
	}
}

func TestTooBigAndUnknownCounted(t *testing.T) {
	b := newBed(t, cpu.New(), pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16}, 64))
	big := ipv4UDP(1500, 1) // over the inner MTU, with DF
	big[6] |= 0x40
	b.dev1.Send(big)
	b.dev1.Send([]byte{0x00, 0x01, 0x02}) // not IP
	b.dev1.Send(ipv4UDP(10, 2))
	bufs, sizes := [][]byte{make([]byte, 2000)}, []int{0}
	if _, err := b.dev2.Receive(bufs, sizes); err != nil {
		t.Fatal(err)
	}
	// The sender of the big packet hears ICMP fragmentation needed with the MTU.
	if _, err := b.dev1.Receive(bufs, sizes); err != nil {
		t.Fatal(err)
	}
	icmp := bufs[0][:sizes[0]]
	if icmp[9] != 1 || icmp[20] != 3 || icmp[21] != 4 || int(icmp[26])<<8|int(icmp[27]) != 1438 {
		t.Errorf("want ICMP type 3 code 4 mtu 1438 back, got % x", icmp[:28])
	}
	deadline := time.Now().Add(2 * time.Second)
	c := b.gw1.Counters()
	for c.Drops[gateway.TooBig].Load() != 1 || c.Drops[gateway.NotIP].Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("too-big %d not-ip %d, want 1 1", c.Drops[gateway.TooBig].Load(), c.Drops[gateway.NotIP].Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkPipeline measures the data plane alone: packets through two
// gateways joined in memory (memnet's channel-backed TUN and transport), per
// suite, engine and packet size, each gateway with an engine of its own. It
// reports pkt/s beside Go's B/s (inner bytes delivered).
//
//	go test -run '^$' -bench Pipeline -benchtime 2000x ./internal/gateway/
func BenchmarkPipeline(b *testing.B) {
	for _, suite := range []sa.Suite{
		{Cipher: sa.CipherAESGCM16},
		{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96},
		{Cipher: sa.CipherAESCTR, Auth: sa.AuthHMACSHA256_128},
		{Cipher: sa.Cipher3DES, Auth: sa.AuthHMACSHA1_96},
	} {
		for _, name := range (sim.Engines{}).Software() {
			for _, size := range []int{64, 1400} {
				b.Run(fmt.Sprintf("%s/%s/%d", suite, name, size), func(b *testing.B) {
					var es [2]offload.Engine
					for i := range es {
						e, err := (sim.Engines{}).Open(name, engines.Options{})
						if err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { e.Close() }) // after the bed's own cleanup stops the gateways
						if !supports(e, suite) {
							b.Skipf("engine %s does not do %s", name, suite)
						}
						es[i] = e
					}
					bed := newBedEngines(b, es, pairSAs(suite, 1024))
					benchPipeline(b, bed, ipv4UDP(size-28, 7))
				})
			}
		}
	}
}

// supports reports whether e makes a session for suite s at some key length.
func supports(e offload.Engine, s sa.Suite) bool {
	for _, n := range s.EncKeyLens() {
		sess, err := e.NewSession(offload.SessionConfig{Suite: s, EncKey: make(sa.Key, n), AuthKey: make(sa.Key, s.AuthKeyLen())})
		if err == nil {
			sess.Close()
			return true
		}
	}
	return false
}

// benchPipeline pushes b.N copies of pkt into gw1 and waits for them out of
// gw2.
func benchPipeline(b *testing.B, bed *bed, pkt []byte) {
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	go func() {
		for range b.N {
			if bed.dev1.Send(pkt) != nil {
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
		n, err := bed.dev2.Receive(bufs, sizes)
		if err != nil {
			b.Fatal(err)
		}
		got += n
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkt/s")
	// Per core: the packets over the CPU time the process spent (both
	// gateways, the host side and the Go runtime), so a machine busy with
	// other work does not make the data path look slower than it is.
	if cpu := processCPU() - cpu0; cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "pkt/s/core")
	}
	// How many packets the engine got at a time, each way (/stats).
	b.ReportMetric(bed.gw1.Stats().Batches.Outbound.Mean, "ops/seal-batch")
	b.ReportMetric(bed.gw2.Stats().Batches.Inbound.Mean, "ops/open-batch")
}

// processCPU is the user and system time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var _ = esp.OK

// TestPipelineAllocatesNothing sends packets through two gateways in memory:
// in the steady state the whole data path — TUN read, SPD, seal, send,
// receive, replay check, open, TUN write — allocates nothing per packet.
func TestPipelineAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector; the test runs in the plain build")
	}
	for _, tc := range []struct {
		suite  sa.Suite
		inline int // Options.Inline: -1 sends every batch through the workers, 0 is the default
	}{
		{sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, 0},
		{sa.Suite{Cipher: sa.CipherAESGCM16}, 0},
		{sa.Suite{Cipher: sa.CipherAESGCM16}, 1024}, // every batch on its reader, whatever the CPUs
		{sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, -1},
		{sa.Suite{Cipher: sa.CipherAESGCM16}, -1},
	} {
		suite := tc.suite
		t.Run(fmt.Sprintf("%s/inline=%d", suite, tc.inline), func(t *testing.T) {
			e := cpu.New()
			b := newBedOptions(t, [2]offload.Engine{e, e}, pairSAs(suite, 1024), tc.inline)
			pkt := ipv4UDP(1000, 9)
			bufs, sizes := [][]byte{make([]byte, 2000)}, []int{0}
			round := func() {
				if err := b.dev1.Send(pkt); err != nil {
					t.Fatal(err)
				}
				if _, err := b.dev2.Receive(bufs, sizes); err != nil {
					t.Fatal(err)
				}
			}
			for range 200 { // warm the pools and the batch ring
				round()
			}
			// A real per-packet allocation shows in every run; on a loaded
			// machine the runtime itself (scheduler wake-ups between the
			// pipeline's goroutines) now and then allocates during one, so a
			// run is repeated before it counts.
			var n float64
			for attempt := range 3 {
				runtime.GC()
				if n = testing.AllocsPerRun(500, round); n == 0 {
					break
				}
				t.Logf("attempt %d: %.3f allocations per packet", attempt+1, n)
			}
			if n != 0 {
				t.Errorf("%.3f allocations per packet through the pipeline in three runs, want 0", n)
			}
		})
	}
}

// TestMetricsAndStats reads the counters the way Prometheus and `espgw
// stats` do, after traffic and a drop.
func TestMetricsAndStats(t *testing.T) {
	b := newBed(t, cpu.New(), pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16}, 64))
	b.dev1.Send([]byte{0x00, 0x01, 0x02}) // not IP: a gateway-level drop
	b.dev1.Send(ipv4UDP(100, 1))
	bufs, sizes := [][]byte{make([]byte, 2000)}, []int{0}
	if _, err := b.dev2.Receive(bufs, sizes); err != nil {
		t.Fatal(err)
	}
	metrics := getPage(t, b.gw2, "/metrics")
	for _, want := range []string{
		`espgw_sa_packets_total{direction="in",local="198.51.100.2",op="open",remote="198.51.100.1",spi="0x1001",suite="aes-gcm-16-128"} 1`,
		`espgw_packets_total{place="tun_out"} 1`,
		`espgw_sa_drops_total{direction="in",local="198.51.100.2",reason="bad-icv",remote="198.51.100.1",spi="0x1001",suite="aes-gcm-16-128"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	var st gateway.Stats
	if err := json.Unmarshal([]byte(getPage(t, b.gw2, "/stats")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.SAs) != 2 || st.TunOut != 1 {
		t.Errorf("gw2 /stats: %+v", st)
	}
	var st1 gateway.Stats
	if err := json.Unmarshal([]byte(getPage(t, b.gw1, "/stats")), &st1); err != nil {
		t.Fatal(err)
	}
	if st1.Drops["not-ip"] != 1 {
		t.Errorf("gw1 drops %v, want not-ip=1", st1.Drops)
	}
}

// getPage fetches path from the gateway's metrics handler.
func getPage(t *testing.T, g *gateway.Gateway, path string) string {
	t.Helper()
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(body)
}

// reportingEngine is an engine that says which drivers did its work, as
// afalg does with the kernel's.
type reportingEngine struct{ offload.Engine }

func (reportingEngine) Drivers() []offload.Driver {
	return []offload.Driver{{Algorithm: "rfc4106(gcm(aes))", Driver: "rfc4106(gcm_base(ctr(aes-generic),ghash-generic))", Module: "aes-generic: kernel, ghash-generic: ghash_generic"}}
}

// TestMetricsNameDrivers: /metrics and /stats name the drivers an engine
// reports, and the ops in flight.
func TestMetricsNameDrivers(t *testing.T) {
	b := newBed(t, reportingEngine{cpu.New()}, pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16}, 64))
	body := getPage(t, b.gw2, "/metrics")
	for _, want := range []string{
		`espgw_engine_driver_info{algorithm="rfc4106(gcm(aes))",driver="rfc4106(gcm_base(ctr(aes-generic),ghash-generic))",engine="cpu",module="aes-generic: kernel, ghash-generic: ghash_generic"} 1`,
		`espgw_engine_queue_depth_max{engine="cpu"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if st := b.gw2.Stats(); len(st.Engine.Drivers) != 1 || st.Engine.Drivers[0].Driver != "rfc4106(gcm_base(ctr(aes-generic),ghash-generic))" {
		t.Errorf("stats name drivers %+v", st.Engine.Drivers)
	}
}

// TestTooBigSource: an ICMP too-big error written into the TUN comes from
// an address the gateway holds, of the packet's family — the first in
// Options.ICMPSource, else in Local — and where it holds none of that
// family no error is written rather than one from a made-up address.
func TestTooBigSource(t *testing.T) {
	a := netip.MustParseAddr
	big6 := make([]byte, 40+1460) // IPv6, UDP, over the inner MTU
	big6[0] = 0x60
	big6[4], big6[5] = byte((len(big6)-40)>>8), byte(len(big6)-40)
	big6[6], big6[7] = 17, 64
	copy(big6[8:], a("2001:db8:a::10").AsSlice())
	copy(big6[24:], a("2001:db8:b::10").AsSlice())
	big4 := ipv4UDP(1500, 1)
	big4[6] |= 0x40 // DF
	for _, c := range []struct {
		name          string
		local, source []netip.Addr
		want6, want4  netip.Addr // invalid: no error
	}{
		{"tun addresses first", []netip.Addr{gw1Addr}, []netip.Addr{a("192.0.2.1"), a("2001:db8:a::1"), gw1Addr}, a("2001:db8:a::1"), a("192.0.2.1")},
		{"then local", []netip.Addr{gw1Addr, a("2001:db8:5::1")}, nil, a("2001:db8:5::1"), gw1Addr},
		{"then link-local", []netip.Addr{gw1Addr}, []netip.Addr{gw1Addr, a("fe80::1")}, a("fe80::1"), gw1Addr},
		{"none of the family", []netip.Addr{gw1Addr}, nil, netip.Addr{}, gw1Addr},
	} {
		t.Run(c.name, func(t *testing.T) {
			c1, _ := memnet.Pipe(netip.AddrPortFrom(gw1Addr, 0), netip.AddrPortFrom(gw2Addr, 0), 16)
			dev := memnet.NewDevice(16, 8)
			g := gateway.New(dev, []gateway.Conn{c1}, func(*sa.SA) gateway.Conn { return c1 }, cpu.New(),
				gateway.Options{Local: c.local, ICMPSource: c.source, InnerMTU: 1438, Log: slog.New(slog.DiscardHandler)})
			if err := g.Load(pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16}, 64), nil); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- g.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("gateway run: %v", err)
				}
			}()
			bufs, sizes := [][]byte{make([]byte, 2000)}, []int{0}
			from := func() netip.Addr {
				if _, err := dev.Receive(bufs, sizes); err != nil {
					t.Fatal(err)
				}
				p := bufs[0][:sizes[0]]
				if p[0]>>4 == 6 {
					if p[6] != 58 || p[40] != 2 {
						t.Fatalf("want ICMPv6 packet too big back, got % x", p[:48])
					}
					return netip.AddrFrom16([16]byte(p[8:24]))
				}
				if p[9] != 1 || p[20] != 3 || p[21] != 4 {
					t.Fatalf("want ICMP fragmentation needed back, got % x", p[:28])
				}
				return netip.AddrFrom4([4]byte(p[12:16]))
			}
			// The IPv6 error, if any, comes back before the IPv4 one.
			dev.Send(big6)
			dev.Send(big4)
			if c.want6.IsValid() {
				if got := from(); got != c.want6 {
					t.Errorf("packet too big from %s, want %s", got, c.want6)
				}
			}
			if got := from(); got != c.want4 {
				t.Errorf("fragmentation needed from %s, want %s (an IPv6 error where none was due?)", got, c.want4)
			}
		})
	}
}

// Every ESP packet leaves with its SA's source address for the transport
// to send from (a gateway may have several local addresses).
func TestOutboundCarriesSource(t *testing.T) {
	var mu sync.Mutex
	var sources []netip.Addr
	b := newBedTapped(t, [2]offload.Engine{cpu.New(), cpu.New()}, pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16}, 64), 0, func(p *esp.Packet) {
		mu.Lock()
		sources = append(sources, p.Local)
		mu.Unlock()
	})
	const count = 20
	for i := range count {
		b.dev1.Send(ipv4UDP(100, uint16(i)))
	}
	bufs, sizes := [][]byte{make([]byte, 2000)}, []int{0}
	for range count {
		if _, err := b.dev2.Receive(bufs, sizes); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sources) != count {
		t.Fatalf("%d ESP packets seen on the wire, want %d", len(sources), count)
	}
	for i, src := range sources {
		if src != gw1Addr {
			t.Fatalf("ESP packet %d from %v, want the SA's source %s", i, src, gw1Addr)
		}
	}
}
