package wanrelay

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/pcapgen"
)

// socketLink is a link over one end of a Unix datagram socket pair: the
// same recvmmsg/sendmmsg path as a packet socket, with the test holding the
// other end.
func socketLink(t *testing.T, name string) (*link, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := newLink(name, fds[0], 1500)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.close(); unix.Close(fds[1]) })
	return l, fds[1]
}

// The relay's per-packet path — read a batch, impair, send a batch —
// allocates nothing once warm.
func TestDirectionNoAllocs(t *testing.T) {
	for _, mode := range []Mode{Bridge, Route} {
		t.Run(string(mode), func(t *testing.T) { directionNoAllocs(t, mode) })
	}
}

func directionNoAllocs(t *testing.T, mode Mode) {
	from, in := socketLink(t, "from")
	to, out := socketLink(t, "to")
	cfg := impairs(func(c *impair.Config) {
		c.Loss = 5
		c.Corrupt = impair.Corrupt{Percent: 20, Bytes: 2, From: 8}
		c.Reorder = impair.Reorder{Percent: 10, Depth: 2, MaxHold: time.Second}
	})
	st, err := impair.New(cfg, impair.Ethernet, 1500+22)
	if err != nil {
		t.Fatal(err)
	}
	d := newDirection(from, to, st, 1500+22, nil)
	from.mac, to.mac = []byte{2, 0, 0, 0, 0, 0xaa}, []byte{2, 0, 0, 0, 0, 0xbb}
	// A virtio-net header (no offloads), then Ethernet, IPv4, UDP/4500, ESP.
	e, err := pcapgen.Serialize(&layers.Ethernet{SrcMAC: make([]byte, 6), DstMAC: make([]byte, 6), EthernetType: layers.EthernetTypeIPv4},
		&layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: []byte{192, 0, 2, 1}, DstIP: []byte{192, 0, 2, 2}},
		&layers.UDP{SrcPort: 4500, DstPort: 4500}, gopacket.Payload(espPayload(1, 1400)))
	if err != nil {
		t.Fatal(err)
	}
	frame := append(make([]byte, vnetHdrLen), e...)
	e = frame[vnetHdrLen:]
	if mode == Route {
		// Addressed to the relay's port, the next hop already known.
		copy(e, from.mac)
		d.router = &router{in: from, out: to, local: map[netip.Addr]bool{},
			hops: map[netip.Addr][6]byte{netip.AddrFrom4([4]byte{192, 0, 2, 2}): {2, 0, 0, 0, 0, 0xcc}}}
	}
	sink := make([]byte, 65536)
	step := func() {
		for i := 0; i < 8; i++ {
			if _, err := unix.Write(in, frame); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.from.raw.Read(d.readFn); err != nil || d.rxErr != nil {
			t.Fatal(err, d.rxErr)
		}
		now := time.Now()
		for i := 0; i < d.rxN; i++ {
			d.ingest(now, i)
		}
		if err := d.flush(now); err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := unix.Read(out, sink); err != nil {
				break
			}
		}
	}
	for i := 0; i < 200; i++ {
		step()
	}
	if a := testing.AllocsPerRun(500, step); a != 0 {
		t.Fatalf("%v allocations per batch of 8 frames, want 0", a)
	}
	c := d.counters()
	if err := c.Conserved(); err != nil {
		t.Fatal(err)
	}
	if mode == Route {
		if _, err := unix.Write(in, frame); err != nil {
			t.Fatal(err)
		}
		d.from.raw.Read(d.readFn)
		d.ingest(time.Now(), 0)
		d.flush(time.Now())
		n, err := unix.Read(out, sink)
		for err == nil && n < len(frame) { // skip whatever the stage released before
			n, err = unix.Read(out, sink)
		}
		o := sink[vnetHdrLen:n]
		if err != nil || o[14+8] != 63 || o[5] != 0xcc || o[11] != 0xbb || !header.Valid(0, o[14:34]) {
			t.Fatalf("routed frame: %v, TTL %d, MACs % x, header checksum ok %v", err, o[14+8], o[:12], header.Valid(0, o[14:34]))
		}
	}
	if c.RxFrames == 0 || c.TxFrames == 0 || c.Impair.Corrupted == 0 || c.Impair.Reordered == 0 {
		t.Fatalf("the path did not do its work: %+v", c)
	}
}
