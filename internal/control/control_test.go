package control_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/control"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/memnet"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

var (
	gw1 = netip.MustParseAddr("198.51.100.1")
	gw2 = netip.MustParseAddr("198.51.100.2")
)

// target drives an in-memory gateway's Apply as the runtime drives its own.
type target struct{ *gateway.Gateway }

func (t target) ApplyChange(c gateway.Change) error { return t.Apply(c) }

// pair is two gateways in memory, each with a control socket.
type pair struct {
	dev1, dev2 *memnet.Device
	g1, g2     *gateway.Gateway
	c1, c2     *control.Client
	sock       [2]string
	delivered  atomic.Int64
}

func newPair(t *testing.T) *pair {
	t.Helper()
	conn1, conn2 := memnet.Pipe(netip.AddrPortFrom(gw1, 0), netip.AddrPortFrom(gw2, 0), 4096)
	p := &pair{dev1: memnet.NewDevice(4096, 64), dev2: memnet.NewDevice(4096, 64)}
	mk := func(dev *memnet.Device, c *memnet.Conn, local netip.Addr) *gateway.Gateway {
		return gateway.New(dev, []gateway.Conn{c}, func(*sa.SA) gateway.Conn { return c }, cpu.New(),
			gateway.Options{Local: []netip.Addr{local}, InnerMTU: 1400, RetireAfter: 10 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	}
	p.g1, p.g2 = mk(p.dev1, conn1, gw1), mk(p.dev2, conn2, gw2)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	dir := t.TempDir()
	for i, g := range []*gateway.Gateway{p.g1, p.g2} {
		wg.Add(1)
		go func() { defer wg.Done(); g.Run(ctx) }()
		p.sock[i] = filepath.Join(dir, fmt.Sprintf("gw%d.sock", i+1))
		srv, err := control.Listen(p.sock[i], target{g}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); srv.Serve(ctx) }()
	}
	var err error
	if p.c1, err = control.Dial(p.sock[0]); err != nil {
		t.Fatal(err)
	}
	if p.c2, err = control.Dial(p.sock[1]); err != nil {
		t.Fatal(err)
	}
	go func() {
		bufs, sizes := make([][]byte, 64), make([]int, 64)
		for i := range bufs {
			bufs[i] = make([]byte, 2000)
		}
		for {
			n, err := p.dev2.Receive(bufs, sizes)
			if err != nil {
				return
			}
			p.delivered.Add(int64(n))
		}
	}()
	t.Cleanup(func() {
		p.c1.Close()
		p.c2.Close()
		cancel()
		wg.Wait()
	})
	return p
}

// both sends a request to both gateways.
func (p *pair) both(t *testing.T, req control.Request) {
	t.Helper()
	for _, c := range []*control.Client{p.c1, p.c2} {
		if _, err := c.Do(req); err != nil {
			t.Fatalf("%s: %v", req.Op, err)
		}
	}
}

func saJSON(spi uint32, src, dst netip.Addr, key []byte) map[string]any {
	return map[string]any{"spi": fmt.Sprintf("%#x", spi), "src": src.String(), "dst": dst.String(),
		"enc": "aes-gcm-16", "enc-key": "0x" + hex.EncodeToString(key), "replay-window": 1024}
}

func raw(t testing.TB, v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func packet(id uint16) []byte {
	pkt := make([]byte, 128)
	pkt[0], pkt[3], pkt[8], pkt[9] = 0x45, 128, 64, 17
	pkt[4], pkt[5] = byte(id>>8), byte(id)
	copy(pkt[12:], []byte{192, 0, 2, 10})
	copy(pkt[16:], []byte{203, 0, 113, 10})
	pkt[20], pkt[21], pkt[22], pkt[23], pkt[25] = 0x30, 0x39, 0x30, 0x3a, 108
	return pkt
}

func (p *pair) waitDelivered(t *testing.T, n int64) {
	t.Helper()
	// A bound for a packet that never comes, not for speed: on a loaded
	// machine memnet's goroutines may wait seconds for a core.
	deadline := time.Now().Add(30 * time.Second)
	for p.delivered.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("delivered %d, want %d", p.delivered.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func key20() []byte {
	k := make([]byte, 20)
	for i := range k {
		k[i] = byte(i*7 + 3)
	}
	return k
}

func TestControlChanges(t *testing.T) {
	p := newPair(t)
	k := key20()
	p.both(t, control.Request{Op: "sa.add", SA: raw(t, []any{saJSON(0x1001, gw1, gw2, k), saJSON(0x2001, gw2, gw1, k)})})
	p.dev1.Send(packet(1))
	p.waitDelivered(t, 1)

	resp, err := p.c1.Do(control.Request{Op: "sa.list"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.SAs) != 2 || resp.SAs[0].SPI != "0x1001" || resp.SAs[0].Direction != "out" || resp.SAs[0].SealedPackets != 1 {
		t.Errorf("sa list: %+v", resp.SAs)
	}
	line, _ := json.Marshal(resp)
	if strings.Contains(string(line), hex.EncodeToString(k)) {
		t.Error("sa list shows a key")
	}

	// A change with one bad SA is refused whole, with the entry, the
	// field and no key in the reason.
	bad := saJSON(0x3001, gw1, gw2, k)
	bad["enc-key"] = "0x" + hex.EncodeToString(k[:7])
	_, err = p.c1.Do(control.Request{Op: "sa.add", SA: raw(t, []any{saJSON(0x3002, gw1, gw2, k), bad})})
	if err == nil || !strings.Contains(err.Error(), "sa[1]") || !strings.Contains(err.Error(), "enc-key") || strings.Contains(err.Error(), hex.EncodeToString(k[:7])) {
		t.Errorf("bad SA: %v", err)
	}
	if n := len(p.g1.SAs()); n != 2 {
		t.Errorf("%d SAs after a refused add, want 2", n)
	}
	for _, c := range []struct {
		req  control.Request
		want string
	}{
		{control.Request{Op: "sa.add", SA: raw(t, []any{saJSON(0x1001, gw1, gw2, k)})}, "duplicate SPI 0x1001"},
		{control.Request{Op: "sa.del", IDs: []control.SAID{{SPI: "0x9999"}}}, "no such SA"},
		{control.Request{Op: "sa.frobnicate"}, "unknown op"},
		{control.Request{Op: "policy.add", SPD: raw(t, []any{map[string]any{"action": "protect", "sa": "0x7777"}})}, "no SA with SPI 0x7777"},
		{control.Request{Op: "sa.add", SA: raw(t, []any{map[string]any{"spi": "0x5", "bogus": 1}})}, "unknown field"},
	} {
		if _, err := p.c1.Do(c.req); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.req.Op, err, c.want)
		}
	}

	// Policies: protect the tunnel's traffic, discard one port; list, then
	// delete the discard as listed.
	p.both(t, control.Request{Op: "policy.add", SPD: raw(t, []any{
		map[string]any{"priority": 10, "dst": "203.0.113.0/24", "action": "protect", "sa": "0x1001"},
		map[string]any{"priority": 5, "dst": "203.0.113.10", "proto": "udp", "dport": 12346, "action": "discard"},
	})})
	before := p.delivered.Load()
	drops := func() uint64 { return p.g1.Counters().Drops[gateway.PolicyDiscard].Load() }
	p.dev1.Send(packet(2))
	deadline := time.Now().Add(2 * time.Second)
	for drops() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if drops() != 1 || p.delivered.Load() != before {
		t.Fatalf("discard policy: %d drops, %d delivered", drops(), p.delivered.Load()-before)
	}
	resp, err = p.c1.Do(control.Request{Op: "policy.list"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Policies) != 2 || resp.Policies[0].Action != "discard" || resp.Policies[1].SA != "0x1001" {
		t.Fatalf("policy list: %+v", resp.Policies)
	}
	if _, err := p.c1.Do(control.Request{Op: "sa.del", IDs: []control.SAID{{SPI: "0x1001"}}}); err == nil || !strings.Contains(err.Error(), "policies still name it") {
		t.Errorf("deleting an SA a policy names: %v", err)
	}
	p.both(t, control.Request{Op: "policy.del", SPD: raw(t, []any{map[string]any{"priority": 5, "dst": "203.0.113.10/32", "proto": "udp", "dport": 12346, "action": "discard"}})})
	p.dev1.Send(packet(3))
	p.waitDelivered(t, before+1)

	// Update: new keys on both sides, a fresh SA (sequence from 0).
	k2 := append([]byte(nil), k...)
	k2[0] ^= 0xff
	p.both(t, control.Request{Op: "sa.update", SA: raw(t, []any{saJSON(0x1001, gw1, gw2, k2)})})
	if s, _ := p.g1.Find(gateway.SAID{SPI: 0x1001}); string(s.EncKey) != string(k2) {
		t.Error("sa update did not take the new key")
	}
	p.dev1.Send(packet(4))
	p.waitDelivered(t, before+2)
	p.both(t, control.Request{Op: "policy.del", SPD: raw(t, []any{map[string]any{"priority": 10, "dst": "203.0.113.0/24", "action": "protect", "sa": "0x1001"}})})
	p.both(t, control.Request{Op: "sa.del", IDs: []control.SAID{{SPI: "0x1001"}, {SPI: "0x2001"}}})
	if n := len(p.g1.SAs()); n != 0 {
		t.Errorf("%d SAs after deleting all", n)
	}
	fi, err := os.Stat(p.sock[0])
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("control socket mode %o, want 600", m)
	}
}

// TestControlRekeyZeroLoss rolls the tunnel's SAs over, phase by phase on
// both gateways, while packets flow: not one is lost or dropped.
func TestControlRekeyZeroLoss(t *testing.T) {
	p := newPair(t)
	k := key20()
	p.both(t, control.Request{Op: "sa.add", SA: raw(t, []any{saJSON(0x1001, gw1, gw2, k), saJSON(0x2001, gw2, gw1, k)})})
	p.both(t, control.Request{Op: "policy.add", SPD: raw(t, []any{map[string]any{"priority": 10, "dst": "203.0.113.0/24", "action": "protect", "sa": "0x1001"}})})
	var sent atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 200000; i++ { // bounded
			select {
			case <-stop:
				return
			default:
			}
			if p.dev1.Send(packet(uint16(i))) != nil {
				return
			}
			sent.Add(1)
			if i%16 == 0 {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	k2 := append([]byte(nil), k...)
	k2[5] ^= 0x55
	req := control.Request{Op: "sa.rekey", SA: raw(t, []any{saJSON(0x1002, gw1, gw2, k2), saJSON(0x2002, gw2, gw1, k2)}), Replaces: []string{"0x1001", "0x2001"}}
	for _, phase := range []string{control.PhaseInstall, control.PhaseSwitch, control.PhaseRetire} {
		if phase == control.PhaseRetire {
			time.Sleep(50 * time.Millisecond)
		}
		req.Phase = phase
		p.both(t, req)
		time.Sleep(30 * time.Millisecond)
	}
	close(stop)
	<-done
	p.waitDelivered(t, sent.Load())
	if got := p.delivered.Load(); got != sent.Load() {
		t.Errorf("delivered %d of %d across the rekey", got, sent.Load())
	}
	resp, err := p.c2.Do(control.Request{Op: "sa.list"})
	if err != nil {
		t.Fatal(err)
	}
	var spis []string
	var opened uint64
	for _, s := range resp.SAs {
		spis = append(spis, s.SPI)
		opened += s.OpenedPackets
		if len(s.Drops) > 0 {
			t.Errorf("SA %s drops %v", s.SPI, s.Drops)
		}
	}
	if strings.Join(spis, ",") != "0x1002,0x2002" {
		t.Errorf("gw2's SAs after the rekey: %v, want the new pair only", spis)
	}
	if opened == 0 {
		t.Error("the new inbound SA carried nothing: the switch did not happen under traffic")
	}
	if d := p.g1.Stats().Drops; len(d) > 0 {
		t.Errorf("gw1 drops %v", d)
	}
	t.Logf("%d packets across the rekey, %d on the new SA", sent.Load(), opened)
}

// BenchmarkControlSAAdd adds SAs one request each over one connection,
// pipelined, and reports adds per second.
func BenchmarkControlSAAdd(b *testing.B) {
	dir := b.TempDir()
	dev := memnet.NewDevice(16, 64)
	c1, _ := memnet.Pipe(netip.AddrPortFrom(gw1, 0), netip.AddrPortFrom(gw2, 0), 16)
	g := gateway.New(dev, []gateway.Conn{c1}, func(*sa.SA) gateway.Conn { return c1 }, cpu.New(),
		gateway.Options{Local: []netip.Addr{gw1}, Log: slog.New(slog.DiscardHandler)})
	srv, err := control.Listen(filepath.Join(dir, "c.sock"), target{g}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Serve(ctx)
	c, err := control.Dial(srv.Path())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	k := key20()
	reqs := make([]control.Request, b.N)
	for i := range reqs {
		dst := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		reqs[i] = control.Request{Op: "sa.add", SA: raw(b, []any{saJSON(uint32(0x10000+i), gw1, dst, k)})}
	}
	b.ResetTimer()
	errs := make(chan error, 1)
	go func() {
		for range b.N {
			r, err := c.Receive()
			if err == nil && !r.OK {
				err = fmt.Errorf("%s", r.Error)
			}
			if err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	for i := range reqs {
		c.Send(reqs[i])
		if i%64 == 63 {
			c.Flush()
		}
	}
	c.Flush()
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "adds/s")
}
