package xdp

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
)

// TestDualStack: one Conn, one program and one socket per queue serve IPv4
// and IPv6 on one interface: ESP of both families from a reaches the Conn
// (b's raw sockets see none), one mixed batch from the Conn reaches a's
// raw sockets of both families through the ring, the counters say so per
// family; a family served already is refused, and a dropped family's ESP
// goes back to the kernel's raw socket while the other stays on the ring.
func TestDualStack(t *testing.T) {
	p := newBed(t)
	for _, m := range modes {
		t.Run(string(m.mode), func(t *testing.T) { dualStack(t, p, m.mode, m.want) })
	}
}

func dualStack(t *testing.T, p *bed, mode Mode, wantMode string) {
	c, raw4 := openXDP(t, p, p.b4, mode)
	raw6 := rawConn(t, p.b, netip.IPv6Unspecified())
	if err := c.Serve(p.b6, raw6); err != nil {
		t.Fatalf("serve IPv6 beside IPv4: %v", err)
	}
	if c.Mode() != wantMode {
		t.Errorf("mode %q, want %s", c.Mode(), wantMode)
	}
	if err := c.Serve(netip.MustParseAddr("2001:db8:1::3"), raw6); err == nil || !strings.Contains(err.Error(), "steered here already") {
		t.Errorf("a second IPv6 address: %v", err)
	}
	a4, a6 := rawConn(t, p.a, netip.IPv4Unspecified()), rawConn(t, p.a, netip.IPv6Unspecified())

	// a → b, both families: all on the Conn.
	want := map[string]int{}
	var sent4, sent6 []*esp.Packet
	for i := range 50 {
		sent4 = append(sent4, out(espPacket(0x1004, uint32(i+1), 60+i), p.b4))
		sent6 = append(sent6, out(espPacket(0x1006, uint32(i+1), 70+i), p.b6))
	}
	for _, x := range []struct {
		conn interface {
			Send([]*esp.Packet) (int, error)
		}
		pkts []*esp.Packet
	}{{a4, sent4}, {a6, sent6}} {
		if n, err := x.conn.Send(x.pkts); err != nil || n != len(x.pkts) {
			t.Fatalf("send to b: %d, %v", n, err)
		}
		for _, q := range x.pkts {
			want[string(q.Data())]++
		}
	}
	for _, g := range receive(t, c, len(sent4)+len(sent6), 5*time.Second) {
		if want[string(g)] == 0 {
			t.Fatalf("a packet not sent, or twice: SPI %x", g[:4])
		}
		want[string(g)]--
	}
	if n4, n6 := raw4.Stats().PacketsIn, raw6.Stats().PacketsIn; n4+n6 != 0 {
		t.Errorf("b's raw sockets received %d IPv4 and %d IPv6 steered packets", n4, n6)
	}

	// b → a: one batch alternating the families, once both next hops
	// are known.
	var back []*esp.Packet
	for i := range 100 {
		peer, spi := p.a4, uint32(0x2004)
		if i%2 == 1 {
			peer, spi = p.a6, 0x2006
		}
		back = append(back, out(espPacket(spi, uint32(i+1), 64+i), peer))
	}
	if n, err := c.Send(back[:2]); err != nil || n != 2 {
		t.Fatalf("first send: %d, %v", n, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		h := *c.hops.Load()
		if _, ok := h[p.a4]; ok {
			if _, ok := h[p.a6]; ok {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n, err := c.Send(back[2:]); err != nil || n != len(back)-2 {
		t.Fatalf("send the mixed batch: %d, %v", n, err)
	}
	got4, got6 := receive(t, a4, len(back)/2, 5*time.Second), receive(t, a6, len(back)/2, 5*time.Second)
	for i, g := range got4 {
		if string(g) != string(back[2*i].Data()) {
			t.Fatalf("IPv4 packet %d back differs", i)
		}
	}
	for i, g := range got6 {
		if string(g) != string(back[2*i+1].Data()) {
			t.Fatalf("IPv6 packet %d back differs", i)
		}
	}
	st := c.Stats()
	t.Logf("stats %+v", st)
	if st.IPv4.PacketsIn != 50 || st.IPv6.PacketsIn != 50 {
		t.Errorf("in through the ring: IPv4 %d, IPv6 %d, want 50 each", st.IPv4.PacketsIn, st.IPv6.PacketsIn)
	}
	if st.IPv4.PacketsOut < 49 || st.IPv6.PacketsOut < 49 || st.Fallback > 2 {
		t.Errorf("out: IPv4 %d, IPv6 %d through the ring, %d through the raw sockets: want ≥ 49 each, ≤ 2", st.IPv4.PacketsOut, st.IPv6.PacketsOut, st.Fallback)
	}
	if strings.Join(st.Local, ",") != p.b4.String()+","+p.b6.String() {
		t.Errorf("local %v", st.Local)
	}

	// IPv6 dropped: its ESP goes to b's kernel again, IPv4's still here.
	if left, err := c.Drop(true); err != nil || left != 1 {
		t.Fatalf("drop IPv6: %d left, %v", left, err)
	}
	if _, err := a6.Send([]*esp.Packet{out(espPacket(0x3006, 1, 100), p.b6)}); err != nil {
		t.Fatal(err)
	}
	if _, err := a4.Send([]*esp.Packet{out(espPacket(0x3004, 1, 100), p.b4)}); err != nil {
		t.Fatal(err)
	}
	if g := receive(t, raw6, 1, 5*time.Second); string(g[0][:4]) != "\x00\x00\x30\x06" {
		t.Errorf("b's IPv6 raw socket got SPI %x", g[0][:4])
	}
	if g := receive(t, c, 1, 5*time.Second); string(g[0][:4]) != "\x00\x00\x30\x04" {
		t.Errorf("the Conn got SPI %x", g[0][:4])
	}
	if n, err := c.Send([]*esp.Packet{out(espPacket(0x3006, 2, 100), p.a6)}); n != 0 || err == nil {
		t.Errorf("send of a dropped family: %d, %v", n, err)
	}
}
