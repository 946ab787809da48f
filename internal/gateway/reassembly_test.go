package gateway_test

import (
	"encoding/binary"
	"maps"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/netns"
)

// TestReassemblyCountersAndBounds: outer fragments reach a gateway's
// namespace; the kernel reassembles a whole set (reqds, oks) and times out
// a set missing its last fragment (timeout, fails) within the bound the
// gateway set, and ReadReassembly reports both and the bounds.
func TestReassemblyCountersAndBounds(t *testing.T) {
	if err := netns.CheckPrerequisites(); err != nil {
		t.Fatalf("needs namespaces: %v", err)
	}
	bed, err := netns.New("gw-ra-", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bed.Close()
	a, err := bed.AddNamespace("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := bed.AddNamespace("b")
	if err != nil {
		t.Fatal(err)
	}
	if err := bed.Connect(a, "veth0", b, "veth0", netns.LinkOptions{}); err != nil {
		t.Fatal(err)
	}
	src, dst := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")
	if err := a.AddAddr("veth0", netip.MustParsePrefix("198.51.100.1/24")); err != nil {
		t.Fatal(err)
	}
	if err := b.AddAddr("veth0", netip.MustParsePrefix("198.51.100.2/24")); err != nil {
		t.Fatal(err)
	}
	limits := gateway.ReassemblyLimits{Memory: 256 << 10, Timeout: time.Second}
	var before gateway.ReassemblyStats
	if err := b.Do(func() error {
		if err := limits.Apply(); err != nil {
			return err
		}
		before, err = gateway.ReadReassembly()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if before.IPv4.Memory != 256<<10 || before.IPv4.Seconds != 1 || before.IPv6.Memory != 256<<10 || before.IPv6.Seconds != 1 {
		t.Errorf("bounds read back %+v, want 256 KiB and 1 s", before)
	}
	// Fragments of ESP packets (protocol 50) of 2 × 504 bytes: id 1 whole,
	// id 2 without its last fragment.
	frag := func(id uint16, off int, more bool) []byte {
		p := make([]byte, 20+504)
		p[0] = 0x45
		binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
		binary.BigEndian.PutUint16(p[4:], id)
		f := uint16(off / 8)
		if more {
			f |= 0x2000
		}
		binary.BigEndian.PutUint16(p[6:], f)
		p[8], p[9] = 64, 50
		s, d := src.As4(), dst.As4()
		copy(p[12:], s[:])
		copy(p[16:], d[:])
		header.IPv4Header(p[:20])
		return p
	}
	if err := a.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		to := &unix.SockaddrInet4{Addr: dst.As4()}
		for _, p := range [][]byte{frag(1, 0, true), frag(1, 504, false), frag(2, 0, true)} {
			if err := unix.Sendto(fd, p, 0, to); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var after gateway.ReassemblyStats
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err := b.Do(func() error { after, err = gateway.ReadReassembly(); return err }); err != nil {
			t.Fatal(err)
		}
		if after.IPv4.Timeout > before.IPv4.Timeout {
			break
		}
	}
	d := func(x, y uint64) uint64 { return x - y }
	if got := d(after.IPv4.Reqds, before.IPv4.Reqds); got != 3 {
		t.Errorf("reassembly requests %d, want 3 fragments", got)
	}
	if got := d(after.IPv4.OKs, before.IPv4.OKs); got != 1 {
		t.Errorf("reassembled %d, want 1", got)
	}
	if got := d(after.IPv4.Timeout, before.IPv4.Timeout); got != 1 {
		t.Errorf("timed out %d within 5 s of a 1 s bound, want 1", got)
	}
	if got := d(after.IPv4.Fails, before.IPv4.Fails); got < 1 {
		t.Errorf("failures %d, want the timed-out one counted", got)
	}
}

// ParseSNMP keys each counter by protocol and name, for every protocol of
// snmp (a names line, then a values line) and every line of snmp6.
func TestParseSNMP(t *testing.T) {
	snmp := "Ip: Forwarding DefaultTTL ReasmReqds ReasmOKs\nIp: 1 64 7 3\n" +
		"IcmpMsg: InType3 OutType3\nIcmpMsg: 2 5\n" +
		"Udp: InDatagrams NoPorts RcvbufErrors\nUdp: 10 1 4\n"
	snmp6 := "Ip6ReasmOKs                     \t9\nUdp6RcvbufErrors\t2\n"
	got := gateway.ParseSNMP([]byte(snmp), []byte(snmp6))
	want := map[string]uint64{"IpForwarding": 1, "IpDefaultTTL": 64, "IpReasmReqds": 7, "IpReasmOKs": 3,
		"IcmpMsgInType3": 2, "IcmpMsgOutType3": 5, "UdpInDatagrams": 10, "UdpNoPorts": 1, "UdpRcvbufErrors": 4,
		"Ip6ReasmOKs": 9, "Udp6RcvbufErrors": 2}
	if !maps.Equal(got, want) {
		t.Errorf("ParseSNMP = %v, want %v", got, want)
	}
	if r := gateway.ParseReassembly([]byte(snmp), []byte(snmp6)); r.IPv4.Reqds != 7 || r.IPv4.OKs != 3 || r.IPv6.OKs != 9 {
		t.Errorf("ParseReassembly = %+v", r)
	}
}
