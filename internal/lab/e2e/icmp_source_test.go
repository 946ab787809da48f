package e2e_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// TestTooBigComesFromTheGateway runs the README's own gateway
// configuration — an IPv4 tunnel whose TUN routes IPv6 too, with no IPv6
// address on the TUN or outside — with a TUN MTU above what the tunnel
// carries: a too-large IPv6 packet from hostA gets an ICMPv6 Packet Too Big,
// and a too-large IPv4 packet a fragmentation-needed, each captured on
// hostA's interface and each from an address gw1 holds (RFC 4443 §2.2).
func TestTooBigComesFromTheGateway(t *testing.T) {
	needRoot(t)
	b := startBed(t, testbed.Options{Prefix: "itptb", Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, TUNMTU: 1500})
	// The source of every too-big error hostA received.
	sources := sniffed(t, b.Topo.HostA, "eth0", func(d []byte) (netip.Addr, bool) {
		hl, proto, _, ok := header.Upper(d)
		if !ok {
			return netip.Addr{}, false
		}
		m, err := header.ParseICMP(d[hl:])
		src, _ := header.Addrs(d)
		return src, err == nil && (proto == 58 && m.Type == header.ICMPv6PacketTooBig ||
			proto == 1 && m.Type == header.ICMPUnreachable && m.Code == header.ICMPFragNeeded)
	})
	a := b.Topo.Addr
	for _, c := range []struct {
		dst  netip.Addr
		size string
	}{{a.HostB6.Addr(), "1452"}, {a.HostB4.Addr(), "1472"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, _ := b.Topo.HostA.Command(ctx, "ping", "-M", "do", "-c", "1", "-W", "2", "-s", c.size, c.dst.String()).CombinedOutput()
		cancel()
		t.Logf("ping %s: %s", c.dst, strings.TrimSpace(string(out)))
	}
	time.Sleep(200 * time.Millisecond) // the sniffer's last packets
	from := sources()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	held, err := b.Topo.GW1.Command(ctx, "ip", "-o", "addr", "show").Output()
	if err != nil {
		t.Fatalf("list gw1's addresses: %v", err)
	}
	own := map[netip.Addr]bool{}
	for _, f := range strings.Fields(string(held)) {
		if p, err := netip.ParsePrefix(f); err == nil {
			own[p.Addr()] = true
		}
	}
	var v4, v6 int
	for _, src := range from {
		if src.Is4() {
			v4++
		} else {
			v6++
		}
		if !own[src] {
			t.Errorf("a too-big error came from %s, an address gw1 does not hold (it holds %v)", src, own)
		}
	}
	if v4 == 0 || v6 == 0 {
		t.Errorf("hostA received %d ICMPv6 Packet Too Big and %d fragmentation-needed, want both", v6, v4)
	}
}
