package e2e_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// TestUDPZeroChecksumCrossesTheTunnel sends, from hostA to hostB through
// the tunnel, UDP datagrams whose checksum computes to zero (RFC 768 sends
// it as 0xffff). hostA's kernel leaves the checksum to the offload, so gw1
// completes it when it reads the TUN: every datagram must arrive with
// 0xffff in the field (seen by a raw socket in hostB), over IPv4 and IPv6,
// and hostB's kernel count no UDP checksum error — a zero in the field is
// refused over IPv6 (counted as Udp6InCsumErrors) and taken as "no
// checksum" over IPv4.
func TestUDPZeroChecksumCrossesTheTunnel(t *testing.T) {
	needRoot(t)
	b := startBed(t, testbed.Options{Prefix: "itzsum", Suite: sa.Suite{Cipher: sa.CipherAESGCM16}})
	a := b.Topo.Addr
	const sport, dport, n, size = 7200, 9200, 20, 300
	for _, fam := range []struct {
		name     string
		src, dst netip.Addr
	}{
		{"ipv4", a.HostA4.Addr(), a.HostB4.Addr()},
		{"ipv6", a.HostA6.Addr(), a.HostB6.Addr()},
	} {
		t.Run(fam.name, func(t *testing.T) {
			resolve(b.Topo.HostA, fam.dst)
			before := udpCsumErrors(t, b.Topo.HostB, fam.name == "ipv6")
			var rx *net.UDPConn
			if err := b.Topo.HostB.Do(func() (err error) {
				rx, err = net.ListenUDP("udp", &net.UDPAddr{IP: fam.dst.AsSlice(), Port: dport})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer rx.Close()
			// A raw socket sees each datagram's UDP header as it came.
			var raw *net.IPConn
			if err := b.Topo.HostB.Do(func() (err error) {
				network := "ip4:udp"
				if fam.name == "ipv6" {
					network = "ip6:udp"
				}
				raw, err = net.ListenIP(network, &net.IPAddr{IP: fam.dst.AsSlice()})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			sums := make(chan []uint16, 1)
			go func() {
				var seen []uint16
				buf := make([]byte, 2048)
				raw.SetReadDeadline(time.Now().Add(10 * time.Second))
				for len(seen) < n {
					k, _, err := raw.ReadFrom(buf)
					if err != nil {
						break
					}
					if k >= 8 && binary.BigEndian.Uint16(buf[2:]) == dport {
						seen = append(seen, binary.BigEndian.Uint16(buf[6:]))
					}
				}
				sums <- seen
			}()
			got := make(chan int, 1)
			go func() {
				buf, k := make([]byte, 2048), 0
				rx.SetReadDeadline(time.Now().Add(10 * time.Second))
				for k < n {
					if _, err := rx.Read(buf); err != nil {
						break
					}
					k++
				}
				got <- k
			}()
			err := b.Topo.HostA.Do(func() error {
				c, err := net.DialUDP("udp", &net.UDPAddr{IP: fam.src.AsSlice(), Port: sport}, &net.UDPAddr{IP: fam.dst.AsSlice(), Port: dport})
				if err != nil {
					return err
				}
				defer c.Close()
				for i := range n {
					if _, err := c.Write(zeroSumPayload(fam.src, fam.dst, sport, dport, size+2*i, byte(i))); err != nil {
						return err
					}
					time.Sleep(2 * time.Millisecond)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			k := <-got
			errs := udpCsumErrors(t, b.Topo.HostB, fam.name == "ipv6") - before
			if k != n || errs != 0 {
				t.Errorf("%d of %d datagrams whose checksum is zero arrived, hostB counted %d UDP checksum errors", k, n, errs)
			}
			seen := <-sums
			for i, c := range seen {
				if c != 0xffff {
					t.Errorf("datagram %d reached hostB with UDP checksum %#04x, want 0xffff", i+1, c)
				}
			}
			if len(seen) != n {
				t.Errorf("hostB's raw socket saw %d of %d datagrams", len(seen), n)
			}
		})
	}
	saDrops(t, b, 0)
	saDrops(t, b, 1)
}

// zeroSumPayload is a UDP payload of n bytes (n even), starting with
// seed, whose datagram from src:sport to dst:dport has a checksum that
// computes to zero.
func zeroSumPayload(src, dst netip.Addr, sport, dport uint16, n int, seed byte) []byte {
	seg := make([]byte, 8+n)
	binary.BigEndian.PutUint16(seg[0:], sport)
	binary.BigEndian.PutUint16(seg[2:], dport)
	binary.BigEndian.PutUint16(seg[4:], uint16(8+n))
	for i := 8; i < len(seg)-2; i++ {
		seg[i] = seed + byte(i*13)
	}
	sum := header.Add(header.Pseudo(src.AsSlice(), dst.AsSlice(), 17, len(seg)), seg)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(seg[len(seg)-2:], uint16(0xffff-sum))
	return seg[8:]
}

// udpCsumErrors is ns's kernel count of UDP checksum errors (InCsumErrors)
// of one family.
func udpCsumErrors(t *testing.T, ns *netns.Namespace, v6 bool) int {
	t.Helper()
	if v6 {
		out, err := ns.Output(t.Context(), "cat", "/proc/net/snmp6")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "Udp6InCsumErrors" {
				v, _ := strconv.Atoi(f[1])
				return v
			}
		}
		t.Fatal("no Udp6InCsumErrors in /proc/net/snmp6")
	}
	out, err := ns.Output(t.Context(), "cat", "/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, name := range names {
			if name == "InCsumErrors" && i < len(f) {
				v, _ := strconv.Atoi(f[i])
				return v
			}
		}
	}
	t.Fatalf("no Udp InCsumErrors in /proc/net/snmp:\n%s", out)
	return 0
}
