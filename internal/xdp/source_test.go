package xdp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
)

// TestSendsFromThePacketsSource: a packet that names its source (its SA's
// local address, esp.Packet.Local) leaves the ring from it, one that does
// not from the route's; within one batch, on an interface with two
// addresses per family.
func TestSendsFromThePacketsSource(t *testing.T) {
	p := newBed(t)
	second4, second6 := netip.MustParseAddr("198.51.100.3"), netip.MustParseAddr("2001:db8:1::3")
	for _, a := range []string{"198.51.100.3/24", "2001:db8:1::3/64"} {
		if err := p.b.AddAddr("veth0", netip.MustParsePrefix(a)); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range modes {
		for _, fam := range []struct {
			name                string
			local, second, peer netip.Addr
			unspecA             netip.Addr
		}{
			{"ipv4", p.b4, second4, p.a4, netip.IPv4Unspecified()},
			{"ipv6", p.b6, second6, p.a6, netip.IPv6Unspecified()},
		} {
			t.Run(string(m.mode)+"/"+fam.name, func(t *testing.T) {
				c, _ := openXDP(t, p, fam.local, m.mode)
				a := rawConn(t, p.a, fam.unspecA)
				// The first packet to an unresolved peer takes the raw
				// socket; the batch goes once the next hop is known.
				if n, err := c.Send([]*esp.Packet{out(espPacket(0x4001, 1, 80), fam.peer)}); err != nil || n != 1 {
					t.Fatalf("first send: %d, %v", n, err)
				}
				receive(t, a, 1, 5*time.Second)
				deadline := time.Now().Add(5 * time.Second)
				var h hop
				for {
					var ok bool
					if h, ok = (*c.hops.Load())[fam.peer]; ok {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the peer's next hop was not resolved")
					}
					time.Sleep(20 * time.Millisecond)
				}
				froms := []netip.Addr{{}, fam.local, fam.second, fam.second, {}}
				var batch []*esp.Packet
				for i := range 60 {
					q := out(espPacket(0x4001, uint32(i+2), 64+i), fam.peer)
					q.Local = froms[i%len(froms)]
					batch = append(batch, q)
				}
				before := c.Stats().PacketsOut
				if n, err := c.Send(batch); err != nil || n != len(batch) {
					t.Fatalf("send: %d, %v", n, err)
				}
				if through := c.Stats().PacketsOut - before; through != uint64(len(batch)) {
					t.Errorf("%d of %d through the ring", through, len(batch))
				}
				for i, g := range receivePackets(t, a, len(batch), 5*time.Second) {
					want := froms[i%len(froms)]
					if !want.IsValid() {
						want = h.from
					}
					if string(g.data) != string(batch[i].Data()) || g.from != want {
						t.Errorf("packet %d from %s, want %s (data same: %v)", i, g.from, want, string(g.data) == string(batch[i].Data()))
					}
				}
			})
		}
	}
}
