package e2e_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// TestOuterHeaderOptions: the outer-header options of the SA file reach
// the wire through `espgw run` — a fixed DSCP with the inner ECN kept, the
// SA's TTL, DF set over an inner packet without it — and the far gateway
// delivers the inner packet's own TOS.
func TestOuterHeaderOptions(t *testing.T) {
	needRoot(t)
	b := startBed(t, testbed.Options{Prefix: "ithdr", Suite: sa.Suite{Cipher: sa.CipherAESGCM16},
		Customize: func(c *sa.Config) error {
			for _, s := range c.SAs {
				s.DSCP, s.TTL, s.DF = sa.DSCP{Fixed: true, Value: 10}, 9, sa.DFSet
			}
			return nil
		}})
	const tos = 46<<2 | 1 // EF, ECT(1)
	// The outer header of each ESP packet from gw1.
	outers := sniffed(t, b.Topo.WAN, "gw1", func(ip []byte) (header.IPv4, bool) {
		h, _, err := header.ParseIPv4(ip)
		return h, err == nil && h.Protocol == 50
	})
	dst := netip.AddrPortFrom(b.Topo.Addr.HostB4.Addr(), 9100)
	var rx *net.UDPConn
	if err := b.Topo.HostB.Do(func() error {
		var err error
		if rx, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(dst)); err != nil {
			return err
		}
		rc, _ := rx.SyscallConn()
		rc.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1) })
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	const count = 20
	if err := b.Topo.HostA.Do(func() error {
		tx, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst))
		if err != nil {
			return err
		}
		defer tx.Close()
		rc, _ := tx.SyscallConn()
		rc.Control(func(fd uintptr) {
			if err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos); err == nil {
				err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DONT)
			}
		})
		if err != nil {
			return err
		}
		for range count {
			if _, err := tx.Write(make([]byte, 300)); err != nil {
				return err
			}
			time.Sleep(2 * time.Millisecond)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rx.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf, oob := make([]byte, 2048), make([]byte, 128)
	for got := 0; got < count; got++ {
		_, oobn, _, _, err := rx.ReadMsgUDP(buf, oob)
		if err != nil {
			t.Fatalf("hostB received %d of %d datagrams: %v", got, count, err)
		}
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) > 0 && m.Data[0] != tos {
				t.Fatalf("hostB got TOS %#x, hostA sent %#x", m.Data[0], tos)
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	outer := outers()
	if len(outer) < count {
		t.Fatalf("saw %d ESP packets from gw1 on the WAN, want %d", len(outer), count)
	}
	for i, o := range outer {
		if o.TOS != 10<<2|1 || o.TTL != 9 || !o.DF {
			t.Errorf("ESP packet %d: outer TOS %#x TTL %d DF %v, want DSCP 10 with ECT(1) (%#x), TTL 9, DF", i, o.TOS, o.TTL, o.DF, 10<<2|1)
		}
	}
}
