package wanrelay

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/labtest"
)

// newRoutedBed is the shape of espgw's standard WAN: hostA and hostB on two
// subnets, wan a router with an address on each (forwarding on, as the
// topology leaves it).
func newRoutedBed(t *testing.T) *bed {
	t.Helper()
	b := chain(t, "imr", false)
	labtest.Address(t, b.ns[0], "a0", "198.51.100.1/25", "2001:db8:1::1/64")
	labtest.Address(t, b.ns[1], "wa", "198.51.100.126/25", "2001:db8:1::fe/64")
	labtest.Address(t, b.ns[1], "wb", "198.51.100.254/25", "2001:db8:2::fe/64")
	labtest.Address(t, b.ns[2], "b0", "198.51.100.129/25", "2001:db8:2::1/64")
	for _, r := range []struct {
		ns      int
		dst, gw string
	}{{0, "0.0.0.0/0", "198.51.100.126"}, {0, "::/0", "2001:db8:1::fe"}, {2, "0.0.0.0/0", "198.51.100.254"}, {2, "::/0", "2001:db8:2::fe"}} {
		if err := b.ns[r.ns].AddRoute(netip.MustParsePrefix(r.dst), netip.MustParseAddr(r.gw)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.ns[1].EnableForwarding(); err != nil {
		t.Fatal(err)
	}
	return b
}

func sysctl(t *testing.T, ns, path string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func TestRelayRouteMode(t *testing.T) {
	b := newRoutedBed(t)
	r, stop := startRelay(t, b, Config{Mode: Route, AToB: impairs(func(c *impair.Config) { c.Loss = 10 })})
	if f4, f6 := sysctl(t, b.w, "/proc/sys/net/ipv4/ip_forward"), sysctl(t, b.w, "/proc/sys/net/ipv6/conf/all/forwarding"); f4 != "0" || f6 != "0" {
		t.Fatalf("forwarding %s/%s while the relay routes, want 0/0", f4, f6)
	}

	// ESP first, into cold neighbour tables: the first packets wait for wan
	// to resolve hostB, and none is lost for it.
	const n, size = 500, 100
	tl := count(t, exchange(t, r, b, "ip4:50", "198.51.100.1", "198.51.100.129", n, size, 0), size)
	c := r.Counters().AToB
	t.Logf("a→b: waits %d unresolved %d not routed %d, %+v", c.NeighborWaits, c.NeighborUnresolved, c.NotRouted, c.Impair)
	if c.Impair.Matched != n || uint64(n-tl.distinct) != c.Impair.Lost || c.NeighborUnresolved != 0 || c.NeighborOverflow != 0 {
		t.Fatalf("received %d distinct of %d; relay %+v", tl.distinct, n, c)
	}
	if c.NeighborWaits == 0 {
		t.Error("no frame waited for a neighbour: the cold path was not exercised")
	}

	// Pings cross routed (TTL and hop limit down by one) and wan answers its
	// own.
	for _, args := range [][]string{
		{"-c", "2", "-i", "0.2", "-W", "2", "198.51.100.129"},
		{"-6", "-c", "2", "-i", "0.2", "-W", "2", "2001:db8:2::1"},
	} {
		out, err := exec.Command("ip", append([]string{"netns", "exec", b.a, "ping"}, args...)...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ttl=63") && !strings.Contains(string(out), "hlim=63") {
			t.Fatalf("ping %v: %v\n%s", args, err, out)
		}
	}
	before := r.Counters().AToB.NotRouted
	run(t, "ip", "netns", "exec", b.a, "ping", "-c", "2", "-i", "0.2", "-W", "2", "198.51.100.126")
	if r.Counters().AToB.NotRouted < before+2 {
		t.Error("pings to wan itself were not left to wan's kernel")
	}
	stop()
	if f4 := sysctl(t, b.w, "/proc/sys/net/ipv4/ip_forward"); f4 != "1" {
		t.Fatalf("ip_forward %s after the relay closed, want it restored to 1", f4)
	}
}
