package wanrelay

import (
	"encoding/json"
	"net"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
)

// BenchmarkRelay measures UDP/4500 ESP-like datagrams delivered from hostA
// to hostB per second: over a plain veth pair (the reference), through the
// relay impairing nothing, and through the relay with loss, reorder and
// corruption on. The sender writes 40 datagrams of 1400 bytes per UDP GSO
// call, as a gateway with GSO would; what reaches hostB's interface is counted.
// Compare the relay's rates with the reference's, measured in the same run.
func BenchmarkRelay(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		// hostA and hostB on one veth pair: what the relay's bed carries
		// with no relay and no wan namespace in between.
		labtest.NeedNamespaces(b)
		nb, err := netns.New("im-bd", nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { nb.Close() })
		var ns [2]*netns.Namespace
		for i, name := range []string{"a", "b"} {
			if ns[i], err = nb.AddNamespace(name); err != nil {
				b.Fatal(err)
			}
		}
		if err := nb.Connect(ns[0], "a0", ns[1], "b0", netns.LinkOptions{}); err != nil {
			b.Fatal(err)
		}
		labtest.Address(b, ns[0], "a0", "192.0.2.1/24")
		labtest.Address(b, ns[1], "b0", "192.0.2.2/24")
		blast(b, &bed{a: ns[0].Name(), b: ns[1].Name()}, nil)
	})
	b.Run("relay", func(b *testing.B) {
		bd := newBed(b)
		r, _ := startRelay(b, bd, Config{})
		blast(b, bd, r)
	})
	b.Run("relay-impaired", func(b *testing.B) {
		bd := newBed(b)
		r, _ := startRelay(b, bd, Config{AToB: impairs(func(c *impair.Config) {
			c.Loss, c.Reorder.Percent, c.Corrupt.Percent = 1, 1, 1
		})})
		blast(b, bd, r)
	})
}

// rxBytes reads the bytes received by hostB's interface.
func rxBytes(b *testing.B, ns string) int64 {
	out, err := exec.Command("ip", "-n", ns, "-j", "-s", "link", "show", "b0").Output()
	if err != nil {
		b.Fatal(err)
	}
	var links []struct {
		Stats64 struct {
			RX struct {
				Bytes int64 `json:"bytes"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		b.Fatalf("ip -j -s link: %v %s", err, out)
	}
	return links[0].Stats64.RX.Bytes
}

// blast sends GSO writes from hostA as fast as it can and reports what
// reached hostB's interface: the sink is the kernel, not a reader.
func blast(b *testing.B, bd *bed, r *Running) {
	const per, size = 40, 1400
	rx := listen(b, bd.b, "udp4", "192.0.2.2:4500") // a sink, so B sends no port unreachables
	rc, _ := rx.(*net.UDPConn).SyscallConn()
	rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1) })
	go func() {
		buf := make([]byte, 65536)
		for {
			if _, _, err := rx.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	tx := listen(b, bd.a, "udp4", "192.0.2.1:4500")
	sc, _ := tx.(*net.UDPConn).SyscallConn()
	sc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, size) })
	msg := make([]byte, 0, per*size)
	for i := 0; i < per; i++ {
		msg = append(msg, espPayload(uint32(i+1), size)...)
	}
	dst := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 2), Port: 4500}
	tx.WriteTo(msg, dst) // resolve ARP before timing
	time.Sleep(100 * time.Millisecond)
	before := rxBytes(b, bd.b)
	start := time.Now()
	b.SetBytes(per * size)
	for b.Loop() {
		if _, err := tx.WriteTo(msg, dst); err != nil {
			b.Fatal(err)
		}
	}
	// The relay may still be working through its socket buffer: time ends
	// at the last delivery.
	got, end := rxBytes(b, bd.b)-before, time.Now()
	for {
		time.Sleep(20 * time.Millisecond)
		n := rxBytes(b, bd.b) - before
		if n == got {
			break
		}
		got, end = n, time.Now()
	}
	elapsed := end.Sub(start)
	// Each datagram crosses as 1400 bytes of payload plus 42 of headers.
	delivered := float64(got) / float64(size+42)
	sent := float64(b.N * per)
	b.ReportMetric(delivered/elapsed.Seconds(), "delivered/s")
	b.ReportMetric(100*(1-min(delivered/sent, 1)), "%lost")
	if r != nil {
		b.ReportMetric(float64(r.Counters().AToB.RxKernelDrops), "kernel-drops")
	}
}
