package wanrelay

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/impair"
)

// newRoutedBed is the shape of espgw's standard WAN: hostA and hostB on two
// subnets, wan a router with an address on each (forwarding on, as the
// topology leaves it).
func newRoutedBed(t *testing.T) *bed {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the relay tests need root: they create network namespaces, veths and packet sockets")
	}
	id := fmt.Sprintf("%d%03d", os.Getpid()%10000, rand.IntN(1000))
	b := &bed{a: "im-ra-" + id, w: "im-rw-" + id, b: "im-rb-" + id}
	for _, ns := range []string{b.a, b.w, b.b} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(t, "ip", "link", "add", "a0", "netns", b.a, "type", "veth", "peer", "name", "wa", "netns", b.w)
	run(t, "ip", "link", "add", "b0", "netns", b.b, "type", "veth", "peer", "name", "wb", "netns", b.w)
	for _, a := range [][3]string{
		{b.a, "a0", "198.51.100.1/25"}, {b.a, "a0", "2001:db8:1::1/64"},
		{b.w, "wa", "198.51.100.126/25"}, {b.w, "wa", "2001:db8:1::fe/64"},
		{b.w, "wb", "198.51.100.254/25"}, {b.w, "wb", "2001:db8:2::fe/64"},
		{b.b, "b0", "198.51.100.129/25"}, {b.b, "b0", "2001:db8:2::1/64"},
	} {
		run(t, "ip", "-n", a[0], "addr", "add", a[2], "dev", a[1], "nodad")
		run(t, "ip", "-n", a[0], "link", "set", a[1], "up")
	}
	run(t, "ip", "-n", b.a, "route", "add", "default", "via", "198.51.100.126")
	run(t, "ip", "-n", b.a, "-6", "route", "add", "default", "via", "2001:db8:1::fe")
	run(t, "ip", "-n", b.b, "route", "add", "default", "via", "198.51.100.254")
	run(t, "ip", "-n", b.b, "-6", "route", "add", "default", "via", "2001:db8:2::fe")
	run(t, "ip", "netns", "exec", b.w, "sh", "-c",
		"echo 1 > /proc/sys/net/ipv4/ip_forward && echo 1 > /proc/sys/net/ipv6/conf/all/forwarding")
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
	rx := listen(t, b.b, "ip4:50", "198.51.100.129")
	got := collect(rx)
	tx := listen(t, b.a, "ip4:50", "198.51.100.1")
	const n, size = 500, 100
	sendESP(t, tx, &net.IPAddr{IP: net.IPv4(198, 51, 100, 129)}, n, size)
	tl := count(t, <-got, size)
	settle(t, r)
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
