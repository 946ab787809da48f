package wanrelay

import (
	"encoding/json"
	"net"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/lab/impair"
)

// BenchmarkRelay measures UDP/4500 ESP-like datagrams delivered from hostA
// to hostB per second: over a plain veth pair (the reference), through the
// relay impairing nothing, and through the relay with loss, reorder and
// corruption on. The sender writes 40 datagrams of 1400 bytes per UDP GSO
// call, as a gateway with GSO would; what reaches hostB's interface is counted.
// Compare the relay's rates with the reference's, measured in the same run.
func BenchmarkRelay(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		bd := &bed{a: "im-ba-direct", b: "im-bb-direct"}
		for _, ns := range []string{bd.a, bd.b} {
			run(b, "ip", "netns", "add", ns)
			b.Cleanup(func() { run(b, "ip", "netns", "del", ns) })
		}
		run(b, "ip", "link", "add", "a0", "netns", bd.a, "type", "veth", "peer", "name", "b0", "netns", bd.b)
		run(b, "ip", "-n", bd.a, "link", "set", "a0", "up")
		run(b, "ip", "-n", bd.b, "link", "set", "b0", "up")
		run(b, "ip", "-n", bd.a, "addr", "add", "192.0.2.1/24", "dev", "a0")
		run(b, "ip", "-n", bd.b, "addr", "add", "192.0.2.2/24", "dev", "b0")
		blast(b, bd, nil)
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
