package pmtu

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/tun"
)

// TestKernelAcceptsReport uses the Linux kernel as the judge: ping with DF
// sends a too-big packet into a TUN; the test writes back the ICMP error
// built here; ping must report it and the kernel must lower its path MTU
// to the destination.
func TestKernelAcceptsReport(t *testing.T) {
	if err := netns.CheckPrerequisites(); err != nil {
		t.Fatalf("kernel judge test needs namespaces: %v", err)
	}
	for _, tt := range []struct {
		name, dst, size string
		from            netip.Addr
		mtu             int
		pingOut         string
	}{
		{"ipv4", "203.0.113.10", "1472", netip.MustParseAddr("192.0.2.254"), 1438, "mtu = 1438"},
		{"ipv6", "2001:db8:b::10", "1452", netip.MustParseAddr("2001:db8:a::fe"), 1422, "mtu=1422"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bed, err := netns.New("ni-t-", nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { bed.Close() })
			ns, err := bed.AddNamespace("pmtu")
			if err != nil {
				t.Fatal(err)
			}
			dev, err := tun.Create("esp0", tun.Options{Namespace: ns.Handle()})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			for _, p := range []string{"192.0.2.1/24", "2001:db8:a::1/64"} {
				if err := dev.AddAddress(netip.MustParsePrefix(p)); err != nil {
					t.Fatal(err)
				}
			}
			if err := dev.Up(); err != nil {
				t.Fatal(err)
			}
			for _, r := range []string{"203.0.113.0/24", "2001:db8:b::/64"} {
				if err := dev.AddRoute(tun.Route{Dst: netip.MustParsePrefix(r)}); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ping := ns.Command(ctx, "ping", "-M", "do", "-c", "1", "-W", "3", "-s", tt.size, tt.dst)
			var out strings.Builder
			ping.Stdout, ping.Stderr = &out, &out
			if err := ping.Start(); err != nil {
				t.Fatal(err)
			}
			req := readPacketTo(t, dev, netip.MustParseAddr(tt.dst))
			if len(req) <= tt.mtu || req[0]>>4 == 4 && req[6]&0x40 == 0 {
				t.Fatalf("%d-byte packet at MTU %d: want one too big to be fragmented", len(req), tt.mtu)
			}
			const off = 16
			buf := make([]byte, off+MaxLen6)
			var n int
			if tt.from.Is4() {
				n, err = FragmentationNeeded(buf[off:], req, tt.from, tt.mtu)
			} else {
				n, err = PacketTooBig(buf[off:], req, tt.from, tt.mtu)
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := dev.Write([][]byte{buf[:off+n]}, off); err != nil {
				t.Fatal(err)
			}
			ping.Wait() // exits non-zero: no echo reply
			if !strings.Contains(out.String(), tt.pingOut) {
				t.Errorf("ping did not report the ICMP error (want %q):\n%s", tt.pingOut, out.String())
			}
			route, err := ns.Output(ctx, "ip", "route", "get", tt.dst)
			if err != nil || !strings.Contains(route, "mtu "+itoa(tt.mtu)) {
				t.Errorf("kernel path MTU to %s not lowered to %d: %q, %v", tt.dst, tt.mtu, route, err)
			}
		})
	}
}

func itoa(n int) string {
	var b [8]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// readPacketTo reads from dev until a packet to dst arrives.
func readPacketTo(t *testing.T, dev *tun.Device, dst netip.Addr) []byte {
	t.Helper()
	const off = 16
	bufs := make([][]byte, dev.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, off+tun.MaxSegment)
	}
	sizes := make([]int, len(bufs))
	dev.File().SetReadDeadline(time.Now().Add(5 * time.Second))
	defer dev.File().SetReadDeadline(time.Time{})
	for {
		n, err := dev.Read(bufs, sizes, off)
		if err != nil {
			t.Fatalf("read TUN: %v", err)
		}
		for i := range n {
			p := bufs[i][off : off+sizes[i]]
			var d netip.Addr
			switch {
			case len(p) >= 20 && p[0]>>4 == 4:
				d = netip.AddrFrom4([4]byte(p[16:20]))
			case len(p) >= 40 && p[0]>>4 == 6:
				d = netip.AddrFrom16([16]byte(p[24:40]))
			}
			if d == dst {
				return append([]byte(nil), p...)
			}
		}
	}
}
