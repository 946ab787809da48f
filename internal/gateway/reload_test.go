package gateway_test

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/memnet"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// closeCounter is the cpu engine with its sessions' Close calls counted, to
// see which SAs a change retires.
type closeCounter struct {
	offload.Engine
	closed atomic.Int64
}

type countedSession struct {
	offload.Session
	e *closeCounter
}

func (s countedSession) Close() error { s.e.closed.Add(1); return s.Session.Close() }

func (e *closeCounter) NewSession(c offload.SessionConfig) (offload.Session, error) {
	s, err := e.Engine.NewSession(c)
	if err != nil {
		return nil, err
	}
	return countedSession{s, e}, nil
}

// Submit unwraps the sessions for the cpu engine, which checks its own type.
func (e *closeCounter) Submit(ctx context.Context, b *offload.Batch) error {
	for i := range b.Ops {
		if s, ok := b.Ops[i].Session.(countedSession); ok {
			b.Ops[i].Session = s.Session
		}
	}
	return e.Engine.Submit(ctx, b)
}

// sink counts what a device delivers to its host, by inner destination.
type sink struct {
	mu    sync.Mutex
	total int
	byDst map[netip.Addr]int
}

func newSink(dev *memnet.Device) *sink {
	s := &sink{byDst: map[netip.Addr]int{}}
	go func() {
		bufs, sizes := make([][]byte, 64), make([]int, 64)
		for i := range bufs {
			bufs[i] = make([]byte, 2000)
		}
		for {
			n, err := dev.Receive(bufs, sizes)
			if err != nil {
				return
			}
			s.mu.Lock()
			for i := range n {
				p := bufs[i][:sizes[i]]
				if len(p) >= 20 && p[0]>>4 == 4 {
					s.byDst[netip.AddrFrom4([4]byte(p[16:20]))]++
				}
			}
			s.total += n
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

func (s *sink) to(dst netip.Addr) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byDst[dst]
}

// waitFor polls cond for up to two seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // a bound for a loaded machine, not a speed check
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// udpTo is ipv4UDP from src to dst.
func udpTo(src, dst netip.Addr, n int, id uint16) []byte {
	p := ipv4UDP(n, id)
	s4, d4 := src.As4(), dst.As4()
	copy(p[12:16], s4[:])
	copy(p[16:20], d4[:])
	return p
}

var (
	hostA = netip.MustParseAddr("192.0.2.10")
	hostB = netip.MustParseAddr("203.0.113.10")
)

// reloadBed is two gateways in memory with their SAs in the test's hands.
type reloadBed struct {
	*bed
	e1, e2 *closeCounter
	sas    []*sa.SA
	got    *sink
}

func newReloadBed(t *testing.T, sas []*sa.SA) *reloadBed {
	t.Helper()
	r := &reloadBed{e1: &closeCounter{Engine: cpu.New()}, e2: &closeCounter{Engine: cpu.New()}, sas: sas}
	r.bed = newBedEngines(t, [2]offload.Engine{r.e1, r.e2}, sas)
	r.got = newSink(r.dev2)
	return r
}

// send puts n packets from hostA to dst into gw1 and waits until gw2 has
// delivered want more than before.
func (r *reloadBed) send(t *testing.T, dst netip.Addr, n, want int) {
	t.Helper()
	before := r.got.count()
	for i := range n {
		if err := r.dev1.Send(udpTo(hostA, dst, 100, uint16(i))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "delivery", func() bool { return r.got.count() >= before+want })
	if want < n {
		time.Sleep(50 * time.Millisecond) // let any stray packet arrive, to be seen
	}
	if got := r.got.count() - before; got != want {
		t.Fatalf("delivered %d of %d, want %d", got, n, want)
	}
}

// clone copies SAs as a reload reads them again: equal values, new pointers.
func clone(sas []*sa.SA) []*sa.SA {
	out := make([]*sa.SA, len(sas))
	for i, s := range sas {
		c := *s
		c.EncKey, c.AuthKey = append(sa.Key(nil), s.EncKey...), append(sa.Key(nil), s.AuthKey...)
		c.Selectors = append([]sa.Selector(nil), s.Selectors...)
		out[i] = &c
	}
	return out
}

func loadBoth(t *testing.T, r *reloadBed, sas []*sa.SA, policies []sa.Policy) {
	t.Helper()
	for _, g := range []*gateway.Gateway{r.gw1, r.gw2} {
		if err := g.Load(clone(sas), policies); err != nil {
			t.Fatal(err)
		}
	}
}

func findSA(g *gateway.Gateway, spi uint32) *esp.SA {
	for _, s := range g.SAs() {
		if s.SPI() == spi {
			return s
		}
	}
	return nil
}

func TestReloadKeepsUnchangedSAs(t *testing.T) {
	r := newReloadBed(t, pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16}, 64))
	r.send(t, hostB, 10, 10)
	out, in := findSA(r.gw1, 0x1001), findSA(r.gw2, 0x1001)
	extra := &sa.SA{SPI: 0x3001, Src: gw1Addr, Dst: gw2Addr, Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, EncKey: key(20)}
	loadBoth(t, r, append(clone(r.sas), extra), nil)
	if findSA(r.gw1, 0x1001) != out || findSA(r.gw2, 0x1001) != in {
		t.Fatal("an unchanged SA lost its working state on reload")
	}
	// Two outbound tunnel SAs and no policy: nothing is protected any
	// more, and every packet says why.
	r.send(t, hostB, 3, 0)
	waitFor(t, "3 no-policy drops", func() bool { return r.gw1.Counters().Drops[gateway.NoPolicy].Load() == 3 })
	loadBoth(t, r, r.sas, nil)
	r.send(t, hostB, 10, 10)
	if s := out.LastSeq(); s != 20 {
		t.Errorf("outbound sequence %d after two reloads, want 20 (it restarted)", s)
	}
	if s := in.HighestAccepted(); s != 20 {
		t.Errorf("inbound window at %d, want 20", s)
	}
	if d := in.Snapshot().Drops; len(d) != 0 {
		t.Errorf("inbound drops %v across reloads", d)
	}
	// The extra SA was removed: its sessions (one per gateway) are closed.
	waitFor(t, "the removed SA's sessions closed", func() bool { return r.e1.closed.Load() == 1 && r.e2.closed.Load() == 1 })
}

// TestReloadAppliesEveryChange edits one field of the tunnel's SAs per case
// and checks that the edit is in force after the reload (never the old
// value kept), that the edited SA starts afresh and the old session closes.
func TestReloadAppliesEveryChange(t *testing.T) {
	other := netip.MustParseAddr("203.0.113.200")
	cases := []struct {
		name  string
		edit  func(out, in *sa.SA)
		check func(t *testing.T, r *reloadBed)
	}{
		{"tightened selector", func(_, in *sa.SA) {
			in.Selectors = []sa.Selector{{Dst: netip.MustParsePrefix("203.0.113.0/25")}}
		}, func(t *testing.T, r *reloadBed) {
			r.send(t, hostB, 5, 5)
			r.send(t, other, 5, 0)
			waitFor(t, "5 policy drops", func() bool { return findSA(r.gw2, 0x1001).Snapshot().Drops["policy"] == 5 })
		}},
		{"hard lifetime", func(out, _ *sa.SA) { out.Hard = sa.Lifetime{Packets: 3} }, func(t *testing.T, r *reloadBed) {
			r.send(t, hostB, 5, 3)
			waitFor(t, "2 sa-expired drops", func() bool { return findSA(r.gw1, 0x1001).Snapshot().Drops["sa-expired"] == 2 })
		}},
		{"initial sequence", func(out, in *sa.SA) { out.InitialSeq, in.InitialSeq = 1000, 1000 }, func(t *testing.T, r *reloadBed) {
			r.send(t, hostB, 5, 5)
			if s := findSA(r.gw1, 0x1001).LastSeq(); s != 1005 {
				t.Errorf("sequence %d, want 1005", s)
			}
		}},
		{"TFC padding", func(out, _ *sa.SA) { out.TFCPad = 900 }, func(t *testing.T, r *reloadBed) {
			r.send(t, hostB, 5, 5)
			if b := findSA(r.gw1, 0x1001).Snapshot().SealedBytes; b < 5*900 {
				t.Errorf("sealed %d bytes for 5 packets, want them padded to 900", b)
			}
		}},
		{"keys", func(out, in *sa.SA) { out.EncKey = key(20); in.EncKey = append(sa.Key(nil), out.EncKey...) }, func(t *testing.T, r *reloadBed) {
			r.send(t, hostB, 5, 5)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newReloadBed(t, pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16}, 64))
			r.send(t, hostB, 10, 10)
			before := findSA(r.gw1, 0x1001)
			next := clone(r.sas)
			// Both gateways load the same set: SA 0x1001 is gw1's outbound
			// and gw2's inbound.
			c.edit(next[0], next[0])
			loadBoth(t, r, next, nil)
			if findSA(r.gw1, 0x1001) == before {
				t.Fatal("the edited SA kept its old working state")
			}
			c.check(t, r)
			waitFor(t, "the replaced sessions closed", func() bool { return r.e1.closed.Load() == 1 && r.e2.closed.Load() == 1 })
		})
	}
}

// TestReloadRefusedWhole: a set that cannot go in force changes nothing.
func TestReloadRefusedWhole(t *testing.T) {
	r := newReloadBed(t, pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16}, 64))
	r.send(t, hostB, 3, 3)
	before := r.gw1.SAs()
	bad := clone(r.sas)
	bad = append(bad, &sa.SA{SPI: 0x4001, Src: netip.MustParseAddr("192.0.2.77"), Dst: netip.MustParseAddr("192.0.2.78"),
		Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, EncKey: key(20)})
	bad[0].TFCPad = 500 // an edit that must not half-apply
	err := r.gw1.Load(bad, nil)
	if err == nil || !strings.Contains(err.Error(), "neither 192.0.2.77 nor 192.0.2.78 is a local address") {
		t.Fatalf("got %v, want a refusal naming the foreign SA", err)
	}
	if after := r.gw1.SAs(); len(after) != len(before) || after[0] != before[0] {
		t.Fatal("a refused reload changed the SAs in force")
	}
	r.send(t, hostB, 3, 3)
	if r.e1.closed.Load() != 1 {
		// The edited SA's fresh session was built and must be closed
		// again when the whole set is refused.
		t.Errorf("%d sessions closed after a refused reload, want the one built for it", r.e1.closed.Load())
	}
}

// TestLoadRefusesKernelOnlySettings: an SA with an xfrm interface's if-id
// or an output-mark is refused, not run without them.
func TestLoadRefusesKernelOnlySettings(t *testing.T) {
	r := newReloadBed(t, pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16}, 64))
	for name, set := range map[string]func(*sa.SA){
		"if-id":       func(s *sa.SA) { s.IfID = 7 },
		"output-mark": func(s *sa.SA) { s.OutputMark = sa.Mark{Value: 1, Mask: 0xff} },
	} {
		next := clone(r.sas)
		set(next[0])
		if err := r.gw1.Load(next, nil); err == nil || !strings.Contains(err.Error(), "if-id and output-mark") {
			t.Errorf("%s: got %v, want a refusal naming if-id and output-mark", name, err)
		}
	}
}

// TestReloadOpensAConnection is the runtime's reload in memory: an SA
// needing an outer connection the gateway lacks (the first encap: udp SA on
// a raw-ESP gateway) is refused with a clear error while there is none;
// once the connection is added to the running gateway the same reload goes
// in force and traffic flows over it.
func TestReloadOpensAConnection(t *testing.T) {
	raw1, raw2 := memnet.Pipe(netip.AddrPortFrom(gw1Addr, 0), netip.AddrPortFrom(gw2Addr, 0), 256)
	udp1, udp2 := memnet.Pipe(netip.AddrPortFrom(gw1Addr, 4500), netip.AddrPortFrom(gw2Addr, 4500), 256)
	udp1.As, udp2.As = sa.EncapUDP, sa.EncapUDP
	dev1, dev2 := memnet.NewDevice(256, 64), memnet.NewDevice(256, 64)
	var haveUDP atomic.Bool
	mk := func(dev *memnet.Device, raw, udp *memnet.Conn, local netip.Addr) *gateway.Gateway {
		pick := func(s *sa.SA) gateway.Conn {
			if s.Encap == sa.EncapUDP {
				if !haveUDP.Load() {
					return nil
				}
				return udp
			}
			return raw
		}
		return gateway.New(dev, []gateway.Conn{raw}, pick, cpu.New(),
			gateway.Options{Local: []netip.Addr{local}, InnerMTU: 1400, Log: slog.New(slog.DiscardHandler)})
	}
	g1, g2 := mk(dev1, raw1, udp1, gw1Addr), mk(dev2, raw2, udp2, gw2Addr)
	sas := pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16}, 64)
	for _, g := range []*gateway.Gateway{g1, g2} {
		if err := g.Load(clone(sas), nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- g1.Run(ctx) }()
	go func() { done <- g2.Run(ctx) }()
	defer func() {
		cancel()
		<-done
		<-done
	}()
	got := newSink(dev2)
	dev1.Send(udpTo(hostA, hostB, 100, 1))
	waitFor(t, "raw ESP delivery", func() bool { return got.count() == 1 })

	udpSAs := clone(sas)
	for _, s := range udpSAs {
		s.Encap, s.SrcPort, s.DstPort = sa.EncapUDP, 4500, 4500
	}
	err := g1.Load(clone(udpSAs), nil)
	if err == nil || !strings.Contains(err.Error(), "no outer socket") {
		t.Fatalf("got %v, want the SA refused for want of a socket", err)
	}
	dev1.Send(udpTo(hostA, hostB, 100, 2))
	waitFor(t, "raw ESP delivery after the refused reload", func() bool { return got.count() == 2 })

	haveUDP.Store(true)
	g1.AddConn(udp1)
	g2.AddConn(udp2)
	for _, g := range []*gateway.Gateway{g1, g2} {
		if err := g.Load(clone(udpSAs), nil); err != nil {
			t.Fatal(err)
		}
	}
	g1.RemoveConn(raw1)
	g2.RemoveConn(raw2)
	for i := range 20 {
		dev1.Send(udpTo(hostA, hostB, 100, uint16(10+i)))
	}
	waitFor(t, "delivery over the added connection", func() bool { return got.count() == 22 })
	if n := len(g1.Conns()); n != 1 {
		t.Errorf("gw1 receives on %d connections, want 1", n)
	}
	if n := g1.Counters().Drops[gateway.SendError].Load(); n != 0 {
		t.Errorf("%d send errors", n)
	}
}

// TestSPDRoutesTunnels: with policies, each inner destination goes through
// its own SA, and a change of the policies moves traffic at once.
func TestSPDRoutesTunnels(t *testing.T) {
	suite := sa.Suite{Cipher: sa.CipherAESGCM16}
	var sas []*sa.SA
	var policies []sa.Policy
	const tunnels = 50
	dst := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}) }
	for i := range tunnels {
		k := key(20)
		sas = append(sas, &sa.SA{SPI: uint32(0x10000 + i), Src: gw1Addr, Dst: gw2Addr, Suite: suite, EncKey: k, ReplayWindow: 64,
			Selectors: []sa.Selector{{Dst: netip.PrefixFrom(dst(i), 32)}}})
		policies = append(policies, sa.Policy{Priority: 10, Selector: sa.Selector{Dst: netip.PrefixFrom(dst(i), 32)}, Action: sa.Protect, SPI: uint32(0x10000 + i)})
	}
	policies = append(policies, sa.Policy{Priority: 5, Selector: sa.Selector{Dst: netip.PrefixFrom(dst(7), 32), Proto: 6}, Action: sa.Discard})
	r := newReloadBed(t, nil)
	loadBoth(t, r, sas, policies)
	for i := range tunnels {
		r.send(t, dst(i), 2, 2)
	}
	for i := range tunnels {
		s := findSA(r.gw2, uint32(0x10000+i))
		if n := s.Snapshot().OpenedPackets; n != 2 || r.got.to(dst(i)) != 2 {
			t.Errorf("tunnel %d: opened %d, delivered %d, want 2 and 2", i, n, r.got.to(dst(i)))
		}
		if d := s.Snapshot().Drops; len(d) > 0 {
			t.Errorf("tunnel %d: drops %v (its selector must admit its traffic)", i, d)
		}
	}
	tcp := udpTo(hostA, dst(7), 100, 1)
	tcp[9] = 6
	r.dev1.Send(tcp)
	waitFor(t, "the discard policy", func() bool { return r.gw1.Counters().Drops[gateway.PolicyDiscard].Load() == 1 })
	// A policy for tunnel 3's destination that sends it through tunnel 4
	// instead: tunnel 4's inbound selector refuses it at gw2.
	err := r.gw1.Apply(gateway.Change{AddPolicies: []sa.Policy{{Priority: 1, Selector: sa.Selector{Dst: netip.PrefixFrom(dst(3), 32)}, Action: sa.Protect, SPI: 0x10004}}})
	if err != nil {
		t.Fatal(err)
	}
	r.send(t, dst(3), 3, 0)
	waitFor(t, "3 policy drops on tunnel 4", func() bool { return findSA(r.gw2, 0x10004).Snapshot().Drops["policy"] == 3 })
}

// TestRetiredSAsKeepTheirCounts: what a removed SA carried stays in the
// gateway's counters, listed while its session is open and summed after,
// and /metrics still scrapes with an SA and its replacement sharing an SPI.
func TestRetiredSAsKeepTheirCounts(t *testing.T) {
	r := newReloadBed(t, pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16}, 64))
	r.send(t, hostB, 7, 7)
	next := clone(r.sas)
	next[0].EncKey = key(20)
	loadBoth(t, r, next, nil)
	sealed := func() (live, retired uint64) {
		for _, s := range r.gw1.Stats().SAs {
			if s.Retired {
				retired += s.SealedPackets
			} else {
				live += s.SealedPackets
			}
		}
		return
	}
	if live, retired := sealed(); live != 0 || retired != 7 {
		t.Errorf("sealed live %d retired %d right after the reload, want 0 and 7", live, retired)
	}
	body := getPage(t, r.gw1, "/metrics")
	if !strings.Contains(body, `espgw_sa_packets_total{direction="out",local="",op="seal",remote="",spi="retired",suite=""} 7`) {
		t.Errorf("/metrics lacks the retired SA's packets:\n%s", body)
	}
	waitFor(t, "the retired SA folded into the totals", func() bool {
		for _, s := range r.gw1.Stats().SAs {
			if s.SPI == "retired" && s.SealedPackets == 7 {
				return true
			}
		}
		return false
	})
	if live, retired := sealed(); live != 0 || retired != 7 {
		t.Errorf("sealed live %d retired %d after the close, want 0 and 7", live, retired)
	}
}

// TestManyPeers: each tunnel's SA has its own outer destination (a gateway
// with many peers, here all answered by gw2), chosen by the SPD from the
// inner destination; every packet leaves for its SA's peer and is opened
// by that SA, found by SPI and destination.
func TestManyPeers(t *testing.T) {
	const peers = 64
	peer := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 200, byte(i >> 8), byte(i)}) }
	inner := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}) }
	var sas []*sa.SA
	var policies []sa.Policy
	local2 := []netip.Addr{gw2Addr}
	for i := range peers {
		sas = append(sas, &sa.SA{SPI: uint32(0x5000 + i), Src: gw1Addr, Dst: peer(i), Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, EncKey: key(20), ReplayWindow: 64})
		policies = append(policies, sa.Policy{Priority: 10, Selector: sa.Selector{Dst: netip.PrefixFrom(inner(i), 32)}, Action: sa.Protect, SPI: uint32(0x5000 + i)})
		local2 = append(local2, peer(i))
	}
	c1, c2 := memnet.Pipe(netip.AddrPortFrom(gw1Addr, 0), netip.AddrPortFrom(gw2Addr, 0), 1024)
	dev1, dev2 := memnet.NewDevice(1024, 64), memnet.NewDevice(1024, 64)
	// The wire between them records where each ESP packet was sent.
	var mu sync.Mutex
	sentTo := map[netip.Addr]int{}
	tap := &tapConn{Conn: c1, sent: func(p *esp.Packet) { mu.Lock(); sentTo[p.Peer.Addr()]++; mu.Unlock() }}
	quiet := slog.New(slog.DiscardHandler)
	g1 := gateway.New(dev1, []gateway.Conn{tap}, func(*sa.SA) gateway.Conn { return tap }, cpu.New(), gateway.Options{Local: []netip.Addr{gw1Addr}, InnerMTU: 1400, Log: quiet})
	g2 := gateway.New(dev2, []gateway.Conn{c2}, func(*sa.SA) gateway.Conn { return c2 }, cpu.New(), gateway.Options{Local: local2, InnerMTU: 1400, Log: quiet})
	for _, g := range []*gateway.Gateway{g1, g2} {
		if err := g.Load(clone(sas), policies); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- g1.Run(ctx) }()
	go func() { done <- g2.Run(ctx) }()
	defer func() { cancel(); <-done; <-done }()
	got := newSink(dev2)
	for round := range 3 {
		for i := range peers {
			dev1.Send(udpTo(hostA, inner(i), 64, uint16(round*peers+i)))
		}
	}
	waitFor(t, "every packet delivered", func() bool { return got.count() == 3*peers })
	for i := range peers {
		mu.Lock()
		n := sentTo[peer(i)]
		mu.Unlock()
		if n != 3 {
			t.Errorf("peer %s was sent %d ESP packets, want 3", peer(i), n)
		}
		if s := findSA(g2, uint32(0x5000+i)); s == nil || s.Snapshot().OpenedPackets != 3 || got.to(inner(i)) != 3 {
			t.Errorf("tunnel %d: its SA at gw2 did not open its 3 packets", i)
		}
	}
}

// tapConn is a Conn that reports each message it sends.
type tapConn struct {
	gateway.Conn
	sent func(*esp.Packet)
}

func (c *tapConn) Send(pkts []*esp.Packet) (int, error) {
	for _, p := range pkts {
		c.sent(p)
	}
	return c.Conn.Send(pkts)
}

// wireLog keeps a copy of every ESP packet gw1 sent, to replay them.
type wireLog struct {
	mu    sync.Mutex
	pkts  [][]byte
	peers []netip.AddrPort
}

func (w *wireLog) sent(p *esp.Packet) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pkts = append(w.pkts, append([]byte(nil), p.Data()...))
	w.peers = append(w.peers, p.Peer)
}

// replay puts every packet logged so far on the wire again, as gw1 sent it.
func (w *wireLog) replay(t *testing.T, c *memnet.Conn) int {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, data := range w.pkts {
		p := new(esp.Packet)
		p.Reset(append([]byte(nil), data...), 0, len(data))
		p.Peer = w.peers[i]
		if _, err := c.Send([]*esp.Packet{p}); err != nil {
			t.Fatal(err)
		}
	}
	return len(w.pkts)
}

// TestChangeKeepsWhatAnSASaw changes an SA without changing its SPI,
// addresses or keys — by a reload and by an update of the control
// socket's kind — and replays on the wire the packets sent under it
// before: the receiver refuses every one as a replay, and the sender
// numbers on from where it was. With new keys it is a new SA: numbering
// starts again, and the old packets fail their ICV.
func TestChangeKeepsWhatAnSASaw(t *testing.T) {
	reload := func(t *testing.T, r *reloadBed, next []*sa.SA) { loadBoth(t, r, next, nil) }
	update := func(t *testing.T, r *reloadBed, next []*sa.SA) {
		for _, g := range []*gateway.Gateway{r.gw1, r.gw2} {
			c := gateway.Change{Del: []gateway.SAID{{SPI: 0x1001, Dst: gw2Addr}}, Add: clone(next[:1])}
			if err := g.Apply(c); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name   string
		change func(*testing.T, *reloadBed, []*sa.SA)
		edit   func(*sa.SA)
		newKey bool
	}{
		{"reload: a soft lifetime added", reload, func(s *sa.SA) { s.Soft = sa.Lifetime{Packets: 1 << 20} }, false},
		{"reload: a selector and a larger window", reload, func(s *sa.SA) {
			s.Selectors = []sa.Selector{{Dst: netip.MustParsePrefix("203.0.113.0/24")}}
			s.ReplayWindow = 1024
		}, false},
		{"reload: a smaller window", reload, func(s *sa.SA) { s.ReplayWindow = 16 }, false},
		{"update: a soft lifetime added", update, func(s *sa.SA) { s.Soft = sa.Lifetime{Packets: 1 << 20} }, false},
		{"update: TFC padding", update, func(s *sa.SA) { s.TFCPad = 300 }, false},
		{"reload: new keys", reload, func(s *sa.SA) { s.EncKey = key(20) }, true},
		{"update: new keys", update, func(s *sa.SA) { s.EncKey = key(20) }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			wire := &wireLog{}
			sas := pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16}, 64)
			r := &reloadBed{e1: &closeCounter{Engine: cpu.New()}, e2: &closeCounter{Engine: cpu.New()}, sas: sas}
			r.bed = newBedTapped(t, [2]offload.Engine{r.e1, r.e2}, sas, 0, wire.sent)
			r.got = newSink(r.dev2)
			r.send(t, hostB, 10, 10)
			next := clone(sas)
			c.edit(next[0])
			c.change(t, r, next)
			in := findSA(r.gw2, 0x1001)
			if in == nil || in == findSA(r.gw2, 0x2001) {
				t.Fatal("gw2 lost SA 0x1001")
			}
			before := r.got.count()
			n := wire.replay(t, r.wire1)
			reason := "replay"
			if c.newKey {
				reason = "bad-icv"
			}
			waitFor(t, "the replayed packets refused", func() bool { return in.Snapshot().Drops[reason] == uint64(n) })
			if got := r.got.count(); got != before {
				t.Errorf("%d replayed packets delivered after the change", got-before)
			}
			r.send(t, hostB, 10, 10)
			wantSeq := uint64(20)
			if c.newKey {
				wantSeq = 10
			}
			if s := findSA(r.gw1, 0x1001).LastSeq(); s != wantSeq {
				t.Errorf("gw1's sequence after the change and 10 more packets: %d, want %d", s, wantSeq)
			}
			if h := in.HighestAccepted(); h != wantSeq {
				t.Errorf("gw2's highest accepted: %d, want %d", h, wantSeq)
			}
		})
	}
}
