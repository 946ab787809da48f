package netns

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"testing"
	"time"
)

// A NAT in front of a namespace: home's UDP reaches a namespace beyond it
// from the NAT's outside address and a port of the range, and the answer
// comes back through the mapping.
func TestAddNAT(t *testing.T) {
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("needs iptables")
	}
	bed, nss := newBed(t, "nat", "home", "far")
	home, far := nss[0], nss[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nat, err := bed.AddNAT(ctx, home, NAT{Name: "nat", HomeIf: "wan0", InsideIf: "inside0",
		Home: netip.MustParsePrefix("198.51.100.253/30"), Inside: netip.MustParsePrefix("198.51.100.254/30"), OutIf: "out0", Ports: "40000-40099"})
	if err != nil {
		t.Fatal(err)
	}
	if err := bed.Connect(nat, "out0", far, "in0", LinkOptions{}); err != nil {
		t.Fatal(err)
	}
	public, farAddr := netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("192.0.2.2/24")
	if err := nat.AddAddr("out0", public); err != nil {
		t.Fatal(err)
	}
	if err := far.AddAddr("in0", farAddr); err != nil {
		t.Fatal(err)
	}
	var srv *net.UDPConn
	if err := far.Do(func() (err error) {
		srv, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(farAddr.Addr(), 4500)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var c *net.UDPConn
	if err := home.Do(func() (err error) {
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("198.51.100.253"), 4500)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WriteToUDPAddrPort([]byte("ping"), netip.AddrPortFrom(farAddr.Addr(), 4500)); err != nil {
		t.Fatal(err)
	}
	srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	_, from, err := srv.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("nothing came through the NAT: %v", err)
	}
	if from.Addr() != public.Addr() || from.Port() < 40000 || from.Port() > 40099 {
		t.Errorf("the datagram came from %s, want %s and a port of 40000-40099", from, public.Addr())
	}
	if _, err := srv.WriteToUDPAddrPort([]byte("pong"), from); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _, err := c.ReadFromUDPAddrPort(buf); err != nil || string(buf[:n]) != "pong" {
		t.Errorf("the answer did not come back through the mapping: %q %v", buf[:n], err)
	}
}
