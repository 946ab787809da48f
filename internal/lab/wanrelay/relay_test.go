package wanrelay

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	captures "github.com/espgw/espgw/internal/lab/capture"
	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
)

// bed is hostA — wan — hostB (labtest.Chain): the relay joins wan's ports
// wa and wb.
type bed struct {
	a, w, b string              // the namespaces' names
	ns      [3]*netns.Namespace // hostA, wan, hostB
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func chain(t testing.TB, prefix string, silentWAN bool) *bed {
	t.Helper()
	a, w, b := labtest.Chain(t, prefix, silentWAN)
	return &bed{a: a.Name(), w: w.Name(), b: b.Name(), ns: [3]*netns.Namespace{a, w, b}}
}

// newBed is the bridging bed: hostA and hostB on one TEST-NET subnet that
// only the relay joins, wan with no addresses.
func newBed(t testing.TB) *bed {
	t.Helper()
	b := chain(t, "im", true)
	labtest.Address(t, b.ns[0], "a0", "192.0.2.1/24", "2001:db8::1/64")
	labtest.Address(t, b.ns[2], "b0", "192.0.2.2/24", "2001:db8::2/64")
	return b
}

// startRelay runs a relay on the bed until the test ends or stop is called.
func startRelay(t testing.TB, b *bed, cfg Config) (r *Running, stop func()) {
	t.Helper()
	cfg.Netns, cfg.A, cfg.B = b.w, "wa", "wb"
	r, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop = func() {
		if err := r.Close(); err != nil {
			t.Errorf("relay: %v", err)
		}
	}
	t.Cleanup(stop)
	return r, stop
}

func espPayload(seq uint32, n int) []byte {
	b := make([]byte, n)
	binary.BigEndian.PutUint32(b, 0x1001)
	binary.BigEndian.PutUint32(b[4:], seq)
	for i := 8; i < n; i++ {
		b[i] = byte(seq*7) ^ byte(i)
	}
	return b
}

// inNetns opens a packet conn in a namespace.
func listen(t testing.TB, ns, network, addr string) net.PacketConn {
	t.Helper()
	var c net.PacketConn
	err := withNetns(ns, func() (err error) {
		c, err = net.ListenPacket(network, addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen %s %s in %s: %v", network, addr, ns, err)
	}
	t.Cleanup(func() { c.Close() })
	// A receive buffer deep enough that a slow test reader (the race
	// detector, a loaded machine) loses nothing the relay delivered.
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20) })
		}
	}
	return c
}

// collect reads payloads on c until it has been idle for a while.
func collect(c net.PacketConn) <-chan [][]byte {
	out := make(chan [][]byte, 1)
	go func() {
		var got [][]byte
		buf := make([]byte, 65536)
		for {
			c.SetReadDeadline(time.Now().Add(700 * time.Millisecond))
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				out <- got
				return
			}
			got = append(got, bytes.Clone(buf[:n]))
		}
	}()
	return out
}

// tally sorts received ESP payloads by sequence number: how many distinct
// were seen, how many copies beyond the first, how many distinct ones were
// damaged (differ from the pattern) and how many copies were short.
type tally struct{ distinct, extra, damaged, short int }

func count(t *testing.T, got [][]byte, n int) tally {
	t.Helper()
	var tl tally
	seen := map[uint32]bool{}
	for _, p := range got {
		if len(p) < 8 {
			t.Fatalf("received %d-byte payload %x", len(p), p)
		}
		seq := binary.BigEndian.Uint32(p[4:])
		want := espPayload(seq, n)
		if len(p) < n {
			tl.short++
			if !bytes.Equal(p, want[:len(p)]) {
				t.Fatalf("seq %d: truncated and changed", seq)
			}
		}
		if seen[seq] {
			tl.extra++
			continue
		}
		seen[seq] = true
		tl.distinct++
		if len(p) == n && !bytes.Equal(p, want) {
			tl.damaged++
		}
	}
	return tl
}

// settle waits until the relay has nothing in flight in either direction
// (Running.Settle) and checks its accounting.
func settle(t *testing.T, r *Running) {
	t.Helper()
	r.Settle(20*time.Millisecond, 5*time.Second)
	c := r.Counters()
	if c.AToB.InFlight != 0 || c.BToA.InFlight != 0 {
		t.Fatalf("relay still holds packets: %+v", c)
	}
	for _, d := range []Direction{c.AToB, c.BToA} {
		if err := d.Conserved(); err != nil {
			t.Fatal(err)
		}
	}
}

func impairs(f func(*impair.Config)) impair.Config {
	c := impair.DefaultConfig()
	c.Seed = 7
	f(&c)
	return c
}

func TestRelay(t *testing.T) {
	b := newBed(t)

	t.Run("ping passes untouched", func(t *testing.T) {
		all := impairs(func(c *impair.Config) { c.Loss = 100 })
		r, _ := startRelay(t, b, Config{AToB: all, BToA: all})
		run(t, "ip", "netns", "exec", b.a, "ping", "-c", "3", "-i", "0.2", "-W", "2", "192.0.2.2")
		run(t, "ip", "netns", "exec", b.a, "ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", "2001:db8::2")
		c := r.Counters()
		if c.AToB.Impair.Matched != 0 || c.AToB.TxFrames < 6 || c.BToA.TxFrames < 6 {
			t.Fatalf("pings were matched or not forwarded: %+v", c)
		}
	})

	t.Run("udp4500 loss dup corrupt", func(t *testing.T) {
		cfg := impairs(func(c *impair.Config) {
			c.Loss, c.Duplicate = 10, 5
			c.Corrupt = impair.Corrupt{Percent: 10, Bytes: 2, From: 8}
		})
		pcap := filepath.Join(t.TempDir(), "wan.pcap")
		r, stop := startRelay(t, b, Config{AToB: cfg, Pcap: pcap})
		const n, size = 1000, 200
		tl := count(t, exchange(t, r, b, "udp4", "192.0.2.1:4500", "192.0.2.2:4500", n, size, 0), size)
		c := r.Counters().AToB
		ic := c.Impair
		t.Logf("relay a→b: %+v", ic)
		if ic.Matched != n || ic.Lost == 0 || ic.Duplicated == 0 || ic.Corrupted == 0 {
			t.Fatalf("counters %+v: want all %d matched and each impairment used", ic, n)
		}
		if uint64(n-tl.distinct) != ic.Lost || uint64(tl.extra) != ic.Duplicated || uint64(tl.damaged) != ic.Corrupted {
			t.Fatalf("received %d distinct (%d extra, %d damaged) of %d; relay lost %d, duplicated %d, corrupted %d",
				tl.distinct, tl.extra, tl.damaged, n, ic.Lost, ic.Duplicated, ic.Corrupted)
		}
		if c.ChecksumsCompleted == 0 {
			t.Error("no checksum completed: expected the sender's UDP checksums left to veth")
		}
		stop() // flushes the capture
		assertCapture(t, pcap, r.Counters())
	})

	t.Run("raw esp loss replay truncate", func(t *testing.T) {
		cfg := impairs(func(c *impair.Config) {
			c.Loss = 5
			c.Replay = impair.Replay{Percent: 10, After: 5 * time.Millisecond, History: 1024}
			c.Truncate = impair.Truncate{Percent: 5, By: 10}
		})
		r, _ := startRelay(t, b, Config{AToB: cfg})
		const n, size = 1000, 120
		tl := count(t, exchange(t, r, b, "ip4:50", "192.0.2.1", "192.0.2.2", n, size, 0), size)
		ic := r.Counters().AToB.Impair
		t.Logf("relay a→b: %+v", ic)
		if ic.Matched != n || ic.Lost == 0 || ic.Replayed == 0 || ic.Truncated == 0 {
			t.Fatalf("counters %+v: want all %d matched and each impairment used", ic, n)
		}
		if uint64(n-tl.distinct) != ic.Lost || uint64(tl.extra) != ic.Replayed || uint64(tl.short) != ic.Truncated {
			t.Fatalf("received %d distinct (%d extra, %d short) of %d; relay lost %d, replayed %d, truncated %d",
				tl.distinct, tl.extra, tl.short, n, ic.Lost, ic.Replayed, ic.Truncated)
		}
	})

	t.Run("ipv6 esp spi rewrite", func(t *testing.T) {
		r, _ := startRelay(t, b, Config{AToB: impairs(func(c *impair.Config) {
			c.RewriteSPI = impair.RewriteSPI{Percent: 10, SPI: 0xbad}
			c.Corrupt = impair.Corrupt{Percent: 10, Bytes: 1, From: 8, To: -4}
		})})
		const n, size = 600, 100
		payloads := exchange(t, r, b, "ip6:50", "2001:db8::1", "2001:db8::2", n, size, 0)
		ic := r.Counters().AToB.Impair
		rewritten, damaged := 0, 0
		for _, p := range payloads {
			if binary.BigEndian.Uint32(p) == 0xbad {
				rewritten++
				binary.BigEndian.PutUint32(p, 0x1001)
			}
			if want := espPayload(binary.BigEndian.Uint32(p[4:]), size); !bytes.Equal(p, want) {
				damaged++
				if !bytes.Equal(p[size-4:], want[size-4:]) {
					t.Fatal("corruption reached the last 4 bytes, outside to: -4")
				}
			}
		}
		t.Logf("relay a→b: %+v", ic)
		if len(payloads) != n || uint64(rewritten) != ic.Rewritten || uint64(damaged) != ic.Corrupted || ic.Rewritten == 0 || ic.Corrupted == 0 {
			t.Fatalf("received %d of %d, %d rewritten, %d damaged; relay %+v", len(payloads), n, rewritten, damaged, ic)
		}
	})

	for _, fam := range []struct{ name, network, src, dst string }{
		{"udp4", "udp4", "192.0.2.1:4500", "192.0.2.2:4500"},
		{"udp6", "udp6", "[2001:db8::1]:4500", "[2001:db8::2]:4500"},
	} {
		t.Run("gso segmented "+fam.name, func(t *testing.T) {
			r, _ := startRelay(t, b, Config{AToB: impairs(func(c *impair.Config) { c.Loss = 10 })})
			const n, size = 400, 300
			tl := count(t, exchange(t, r, b, fam.network, fam.src, fam.dst, n, size, 10), size)
			c := r.Counters().AToB
			t.Logf("relay a→b: gso %d → %d segments, %+v", c.GSOSegmented, c.GSOSegments, c.Impair)
			if c.GSOSegmented == 0 {
				t.Fatal("no GSO super-packet reached the relay: the test did not exercise segmentation")
			}
			if c.Impair.Matched != n || uint64(n-tl.distinct) != c.Impair.Lost || tl.extra != 0 || tl.damaged != 0 {
				t.Fatalf("received %d distinct (%d extra, %d damaged) of %d; relay %+v", tl.distinct, tl.extra, tl.damaged, n, c.Impair)
			}
		})
	}

	t.Run("delay and reorder in real time", func(t *testing.T) {
		d := impair.Delay{Time: 5 * time.Millisecond, Jitter: time.Millisecond}
		r, _ := startRelay(t, b, Config{AToB: impairs(func(c *impair.Config) {
			c.Delay = d
			c.Reorder = impair.Reorder{Percent: 5, Depth: 2, MaxHold: 50 * time.Millisecond}
		})})
		rx := listen(t, b.b, "ip4:50", "192.0.2.2")
		type arrival struct {
			seq     uint32
			latency time.Duration
		}
		done := make(chan []arrival, 1)
		go func() {
			var got []arrival
			buf := make([]byte, 2048)
			for {
				rx.SetReadDeadline(time.Now().Add(700 * time.Millisecond))
				n, _, err := rx.ReadFrom(buf)
				if err != nil {
					done <- got
					return
				}
				if n >= 16 {
					sent := time.Unix(0, int64(binary.BigEndian.Uint64(buf[8:])))
					got = append(got, arrival{binary.BigEndian.Uint32(buf[4:]), time.Since(sent)})
				}
			}
		}()
		tx := listen(t, b.a, "ip4:50", "192.0.2.1")
		const n = 500
		for i := 1; i <= n; i++ {
			p := espPayload(uint32(i), 64)
			binary.BigEndian.PutUint64(p[8:], uint64(time.Now().UnixNano()))
			tx.WriteTo(p, &net.IPAddr{IP: net.IPv4(192, 0, 2, 2)})
			if i%20 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		got := <-done
		settle(t, r)
		ic := r.Counters().AToB.Impair
		t.Logf("relay a→b: %+v", ic)
		if len(got) != n || ic.Delayed != n {
			t.Fatalf("%d of %d received, %d delayed", len(got), n, ic.Delayed)
		}
		late, maxSeq := 0, uint32(0)
		var sum time.Duration
		for _, a := range got {
			if a.seq < maxSeq {
				late++
			}
			maxSeq = max(maxSeq, a.seq)
			sum += a.latency
			if a.latency < d.Time-d.Jitter {
				t.Fatalf("seq %d arrived after %v, want ≥ %v", a.seq, a.latency, d.Time-d.Jitter)
			}
		}
		if uint64(late) != ic.Reordered || ic.Reordered == 0 {
			t.Fatalf("%d packets arrived late, relay reordered %d", late, ic.Reordered)
		}
		t.Logf("mean latency %v through a %v±%v delay", sum/n, d.Time, d.Jitter)
	})

	t.Run("tcp crosses whole", func(t *testing.T) {
		drop := impairs(func(c *impair.Config) { c.Loss = 100 })
		r, _ := startRelay(t, b, Config{AToB: drop, BToA: drop})
		var ln net.Listener
		if err := withNetns(b.b, func() (err error) { ln, err = net.Listen("tcp4", "192.0.2.2:8080"); return err }); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		const size = 8 << 20
		sum := make(chan []byte, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				sum <- nil
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			b, _ := io.ReadAll(c)
			sum <- b
		}()
		var c net.Conn
		if err := withNetns(b.a, func() (err error) {
			c, err = net.DialTimeout("tcp4", "192.0.2.2:8080", 5*time.Second)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i * 13)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Write(data); err != nil {
			t.Fatal(err)
		}
		c.Close()
		if got := <-sum; !bytes.Equal(got, data) {
			t.Fatalf("received %d bytes, not the %d sent", len(got), size)
		}
		cs := r.Counters()
		t.Logf("a→b: %d frames, %d GSO frames passed whole, %d checksums completed", cs.AToB.TxFrames, cs.AToB.GSOPassed, cs.AToB.ChecksumsCompleted)
		if cs.AToB.Impair.Matched != 0 || cs.AToB.Impair.Lost != 0 {
			t.Fatalf("TCP was matched: %+v", cs.AToB.Impair)
		}
	})
}

// assertCapture checks the relay's pcap holds exactly the frames it sent.
func assertCapture(t *testing.T, path string, c Counters) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, st, err := captures.ReadAll(f, path)
	if err != nil {
		t.Fatal(err)
	}
	if want := c.AToB.TxFrames + c.BToA.TxFrames; uint64(st.Frames) != want {
		t.Fatalf("capture holds %d frames, relay sent %d", st.Frames, want)
	}
}

// exchange sends n ESP payloads of size bytes, sequence numbers 1..n, from
// hostA's address from to hostB's address to (an address and port for udp
// networks), and returns what hostB received once r holds nothing more.
// With gso > 0 the payloads go gso at a time in UDP GSO writes
// (UDP_SEGMENT), a millisecond apart; else one by one, pausing every 50 to
// stay below the receiver's socket buffer.
func exchange(t *testing.T, r *Running, b *bed, network, from, to string, n, size, gso int) [][]byte {
	t.Helper()
	got := collect(listen(t, b.b, network, to))
	tx := listen(t, b.a, network, from)
	var dst net.Addr = &net.IPAddr{IP: net.ParseIP(to)}
	if ap, err := netip.ParseAddrPort(to); err == nil {
		dst = net.UDPAddrFromAddrPort(ap)
	}
	per, every, pause := 1, 50, 2*time.Millisecond
	if gso > 0 {
		per, every, pause = gso, gso, time.Millisecond
		sc, err := tx.(*net.UDPConn).SyscallConn()
		var serr error
		if err == nil {
			err = sc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, size) })
		}
		if err != nil || serr != nil {
			t.Fatalf("UDP_SEGMENT: %v %v", err, serr)
		}
	}
	for i := 1; i <= n; i += per {
		var buf []byte
		for j := i; j < i+per && j <= n; j++ {
			buf = append(buf, espPayload(uint32(j), size)...)
		}
		if _, err := tx.WriteTo(buf, dst); err != nil {
			t.Fatal(err)
		}
		if (i+per-1)%every == 0 {
			time.Sleep(pause)
		}
	}
	payloads := <-got
	settle(t, r)
	return payloads
}
