package tun

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"
)

const headroom = 64 // what the tests leave in front of packets, like the gateway's ESP headroom

func newBed(t *testing.T) *netns.Namespace {
	t.Helper()
	if err := netns.CheckPrerequisites(); err != nil {
		t.Fatalf("TUN tests need namespaces: %v", err)
	}
	bed, err := netns.New("ni-t-", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bed.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	ns, err := bed.AddNamespace("tun")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func newTUN(t *testing.T, ns *netns.Namespace, mode OffloadMode) *Device {
	t.Helper()
	dev, err := Create("esp0", Options{MTU: 1400, Offloads: mode, Namespace: ns.Handle()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	for _, p := range []string{"192.0.2.1/24", "2001:db8:a::1/64"} {
		if err := dev.AddAddress(netip.MustParsePrefix(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := dev.Up(); err != nil {
		t.Fatal(err)
	}
	return dev
}

func buffers(n, size int) ([][]byte, []int) {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	return bufs, make([]int, n)
}

// readUntil reads batches from dev until match accepts a packet, returning
// that packet and the size of the batch it came in.
func readUntil(t *testing.T, dev *Device, match func([]byte) bool) ([]byte, int) {
	t.Helper()
	bufs, sizes := buffers(dev.BatchSize(), headroom+MaxSegment)
	deadline := time.Now().Add(5 * time.Second)
	if err := dev.File().SetReadDeadline(deadline); err != nil {
		t.Fatalf("set read deadline: %v", err)
	}
	defer dev.File().SetReadDeadline(time.Time{})
	for time.Now().Before(deadline) {
		n, err := dev.Read(bufs, sizes, headroom)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		for i := range n {
			pkt := bufs[i][headroom : headroom+sizes[i]]
			if match(pkt) {
				return append([]byte(nil), pkt...), n
			}
		}
	}
	t.Fatal("no matching packet read from TUN within 5s")
	return nil, 0
}

func echoTo(dst netip.Addr) func([]byte) bool {
	return func(b []byte) bool {
		p := decode(b)
		if p == nil {
			return false
		}
		if ip4, ok := p.NetworkLayer().(*layers.IPv4); ok {
			icmp, _ := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
			return icmp != nil && icmp.TypeCode.Type() == layers.ICMPv4TypeEchoRequest && ip4.DstIP.Equal(dst.AsSlice())
		}
		if ip6, ok := p.NetworkLayer().(*layers.IPv6); ok {
			icmp, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
			return icmp != nil && icmp.TypeCode.Type() == layers.ICMPv6TypeEchoRequest && ip6.DstIP.Equal(dst.AsSlice())
		}
		return false
	}
}

func decode(b []byte) gopacket.Packet {
	if len(b) == 0 {
		return nil
	}
	first := layers.LayerTypeIPv4
	if b[0]>>4 == 6 {
		first = layers.LayerTypeIPv6
	}
	return gopacket.NewPacket(b, first, gopacket.Default)
}

// echoReply builds the reply to an echo request with gopacket.
func echoReply(t *testing.T, req []byte) []byte {
	t.Helper()
	p := decode(req)
	opts := gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}
	buf := gopacket.NewSerializeBuffer()
	switch ip := p.NetworkLayer().(type) {
	case *layers.IPv4:
		icmp := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
		if len(icmp.Payload) == 0 {
			t.Fatalf("echo request without data: % x", req)
		}
		rip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: ip.DstIP, DstIP: ip.SrcIP}
		ricmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoReply, 0), Id: icmp.Id, Seq: icmp.Seq}
		if err := gopacket.SerializeLayers(buf, opts, rip, ricmp, gopacket.Payload(icmp.Payload)); err != nil {
			t.Fatal(err)
		}
	case *layers.IPv6:
		// The ICMPv6 layer's payload is the echo identifier, sequence
		// number and data: the reply carries them all back.
		icmp := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
		rip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolICMPv6, SrcIP: ip.DstIP, DstIP: ip.SrcIP}
		ricmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoReply, 0)}
		ricmp.SetNetworkLayerForChecksum(rip)
		if err := gopacket.SerializeLayers(buf, opts, rip, ricmp, gopacket.Payload(icmp.Payload)); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("not an IP packet: % x", req)
	}
	return buf.Bytes()
}

// TestPingThroughTUN: ping in the namespace goes out of the TUN; the test
// reads it with a batch read at an offset and writes the echo reply back,
// which ping must accept.
func TestPingThroughTUN(t *testing.T) {
	for _, mode := range []OffloadMode{OffloadAuto, OffloadOff} {
		for _, dst := range []string{"192.0.2.2", "2001:db8:a::2"} {
			t.Run(fmt.Sprintf("offloads=%v/%s", mode == OffloadAuto, dst), func(t *testing.T) {
				ns := newBed(t)
				dev := newTUN(t, ns, mode)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				ping := ns.Command(ctx, "ping", "-c", "1", "-W", "5", "-s", "1000", dst)
				var out strings.Builder
				ping.Stdout, ping.Stderr = &out, &out
				if err := ping.Start(); err != nil {
					t.Fatal(err)
				}
				req, _ := readUntil(t, dev, echoTo(netip.MustParseAddr(dst)))
				if len(req) < 1000 {
					t.Errorf("echo request %d bytes, want ≥ 1000", len(req))
				}
				reply := echoReply(t, req)
				if len(reply) != len(req) {
					t.Fatalf("reply %d bytes for a %d-byte request", len(reply), len(req))
				}
				wbuf := make([]byte, headroom+len(reply), headroom+MaxSegment)
				copy(wbuf[headroom:], reply)
				if _, err := dev.Write([][]byte{wbuf}, headroom); err != nil {
					t.Fatalf("write reply: %v", err)
				}
				if err := ping.Wait(); err != nil {
					t.Fatalf("ping did not get the reply written to the TUN: %v\n%s", err, out.String())
				}
			})
		}
	}
}

func TestOffloadModes(t *testing.T) {
	ns := newBed(t)
	on, err := Create("esp0", Options{Namespace: ns.Handle(), Offloads: OffloadRequired})
	if err != nil {
		t.Fatalf("offloads required on this kernel: %v", err)
	}
	if !on.Offloads() || on.BatchSize() < 2 || on.UDPOffloads() != kernelAtLeast(6, 2) {
		t.Errorf("offloads on: Offloads()=%v BatchSize()=%d UDPOffloads()=%v", on.Offloads(), on.BatchSize(), on.UDPOffloads())
	}
	if mtu, err := on.MTU(); err != nil || mtu != 1500 {
		t.Errorf("default MTU = %d, %v; want 1500", mtu, err)
	}
	on.Close()
	off, err := Create("esp1", Options{Namespace: ns.Handle(), Offloads: OffloadOff, MTU: 1438})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if off.Offloads() || off.BatchSize() != 1 || off.UDPOffloads() {
		t.Errorf("offloads off: Offloads()=%v BatchSize()=%d", off.Offloads(), off.BatchSize())
	}
	if mtu, err := off.MTU(); err != nil || mtu != 1438 {
		t.Errorf("MTU = %d, %v; want 1438", mtu, err)
	}
	if err := off.SetMTU(1300); err != nil {
		t.Fatal(err)
	}
	if mtu, _ := off.MTU(); mtu != 1300 {
		t.Errorf("MTU after SetMTU(1300) = %d", mtu)
	}
	// The devices live in the namespace, not in ours.
	if _, err := net.InterfaceByName("esp1"); err == nil {
		t.Error("esp1 visible in the test's own namespace")
	}
}

func TestCreateErrors(t *testing.T) {
	ns := newBed(t)
	for _, tt := range []struct {
		name string
		opt  Options
		want string
	}{
		{"", Options{Namespace: ns.Handle()}, "name must be"},
		{"way-too-long-name0", Options{Namespace: ns.Handle()}, "name must be"},
		{"esp0", Options{Namespace: ns.Handle(), MTU: 20}, "MTU 20"},
		{"esp0", Options{Namespace: ns.Handle(), QueueLen: -1}, "queue -1"},
		{"esp0", Options{Namespace: ns.Handle(), QueueLen: MaxQueueLen + 1}, "queue 65537"},
	} {
		if _, err := Create(tt.name, tt.opt); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Create(%q, MTU %d) = %v, want error mentioning %q", tt.name, tt.opt.MTU, err, tt.want)
		}
	}
	dev := newTUN(t, ns, OffloadAuto)
	if _, err := dev.Write([][]byte{make([]byte, 100)}, 4); err == nil {
		t.Error("Write with offset 4 accepted")
	}
	// A route out of the device lands in the namespace's table.
	if err := dev.AddRoute(Route{Dst: netip.MustParsePrefix("203.0.113.0/24"), MTU: 1300}); err != nil {
		t.Fatal(err)
	}
	out, err := ns.Output(context.Background(), "ip", "route", "show", "203.0.113.0/24")
	if err != nil || !strings.Contains(out, "dev esp0") || !strings.Contains(out, "mtu lock 1300") {
		t.Errorf("route not as added: %q, %v", out, err)
	}
}

// TestQueueLen: a device gets DefaultQueueLen packets of transmit queue
// unless told, and what it is told, as the kernel reports it.
func TestQueueLen(t *testing.T) {
	ns := newBed(t)
	for _, tc := range []struct {
		name      string
		ask, want int
	}{{"esp0", 0, DefaultQueueLen}, {"esp1", 3000, 3000}} {
		dev, err := Create(tc.name, Options{Namespace: ns.Handle(), QueueLen: tc.ask})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		out, err := ns.Output(context.Background(), "cat", "/sys/class/net/"+tc.name+"/tx_queue_len")
		if err != nil || strings.TrimSpace(out) != strconv.Itoa(tc.want) {
			t.Errorf("%s asked for %d: tx_queue_len %q (%v), want %d", tc.name, tc.ask, out, err, tc.want)
		}
	}
}

// TestGSOSplit sends one UDP GSO super-packet (8 segments in one sendmsg)
// through the TUN: with offloads and a kernel that offers USO to TUN devices
// (Linux ≥ 6.2) one Read returns all 8 segments; otherwise the kernel
// segments before the TUN. Either way all 8 arrive with their payloads.
func TestGSOSplit(t *testing.T) {
	ns := newBed(t)
	dev := newTUN(t, ns, OffloadAuto)
	const segs, segLen = 8, 1000
	payload := make([]byte, segs*segLen)
	for i := range payload {
		payload[i] = byte(i / segLen)
	}
	err := ns.Do(func() error {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1)})
		if err != nil {
			return err
		}
		defer c.Close()
		oob := make([]byte, unix.CmsgSpace(2))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], segLen)
		_, _, err = c.WriteMsgUDP(payload, oob, &net.UDPAddr{IP: net.IPv4(192, 0, 2, 2), Port: 9})
		return err
	})
	if err != nil {
		t.Fatalf("send UDP GSO: %v", err)
	}
	isSeg := func(b []byte) bool {
		p := decode(b)
		u, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		return u != nil && u.DstPort == 9
	}
	bufs, sizes := buffers(dev.BatchSize(), headroom+MaxSegment)
	dev.File().SetReadDeadline(time.Now().Add(5 * time.Second))
	got, batch := 0, 0
	for got < segs {
		n, err := dev.Read(bufs, sizes, headroom)
		if err != nil {
			t.Fatalf("read after %d of %d segments: %v", got, segs, err)
		}
		inBatch := 0
		for i := range n {
			pkt := bufs[i][headroom : headroom+sizes[i]]
			if !isSeg(pkt) {
				continue
			}
			u := decode(pkt).Layer(layers.LayerTypeUDP).(*layers.UDP)
			if len(u.Payload) != segLen || u.Payload[0] != byte(got) {
				t.Fatalf("segment %d: %d bytes starting %d, want %d bytes of %d", got, len(u.Payload), u.Payload[0], segLen, got)
			}
			got++
			inBatch++
		}
		batch = max(batch, inBatch)
	}
	if uso := kernelAtLeast(6, 2); uso != dev.UDPOffloads() {
		t.Errorf("UDPOffloads() = %v on a kernel where USO support is %v", dev.UDPOffloads(), uso)
	}
	if dev.UDPOffloads() && batch != segs {
		t.Errorf("with UDP offloads one Read returned %d segments, want all %d of the super-packet", batch, segs)
	}
	if !dev.UDPOffloads() && batch != 1 {
		t.Errorf("without UDP offloads one Read returned %d segments, want 1", batch)
	}
	t.Logf("offloads=%v: largest batch %d of %d segments", dev.Offloads(), batch, segs)
}

func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	var ma, mi int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi)
	return ma > major || ma == major && mi >= minor
}

// TestCreateInCurrentNamespace: a caller that already runs inside the
// namespace (locked thread, or a process started by `ip netns exec`) creates
// the device without naming the namespace.
func TestCreateInCurrentNamespace(t *testing.T) {
	ns := newBed(t)
	var dev *Device
	err := ns.Do(func() error {
		var err error
		dev, err = Create("esp9", Options{MTU: 1422})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	// Configured from another thread: the device's netlink handle is bound
	// to its namespace, not to whichever thread runs this.
	if err := dev.AddAddress(netip.MustParsePrefix("192.0.2.1/24")); err != nil {
		t.Fatal(err)
	}
	if err := dev.Up(); err != nil {
		t.Fatal(err)
	}
	out, err := ns.Output(context.Background(), "ip", "-o", "addr", "show", "dev", "esp9")
	if err != nil || !strings.Contains(out, "192.0.2.1/24") {
		t.Errorf("esp9 in namespace: %q, %v", out, err)
	}
	if _, err := net.InterfaceByName("esp9"); err == nil {
		t.Error("esp9 visible in the test's own namespace")
	}
}

// TestGROOnWrite writes 8 consecutive segments of one TCP flow in one Write.
// With offloads and buffers that have room, they reach the kernel as one
// coalesced super-packet: the device counts one received packet, not 8.
// Without the room (or without offloads) they go one by one.
func TestGROOnWrite(t *testing.T) {
	const segs, segLen = 8, 1000
	for _, tt := range []struct {
		name   string
		mode   OffloadMode
		roomy  bool
		wantRx uint64
	}{
		{"offloads+capacity", OffloadAuto, true, 1},
		{"offloads, exact-size buffers", OffloadAuto, false, segs},
		{"no offloads", OffloadOff, true, segs},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ns := newBed(t)
			dev := newTUN(t, ns, tt.mode)
			bufs := make([][]byte, segs)
			for i := range bufs {
				ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, Flags: layers.IPv4DontFragment,
					SrcIP: net.IPv4(192, 0, 2, 2).To4(), DstIP: net.IPv4(192, 0, 2, 1).To4(), Id: uint16(100 + i)}
				tcp := &layers.TCP{SrcPort: 40000, DstPort: 5001, Seq: uint32(1000 + i*segLen), Ack: 1, ACK: true, Window: 512}
				tcp.SetNetworkLayerForChecksum(ip)
				b := gopacket.NewSerializeBuffer()
				if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ip, tcp, gopacket.Payload(make([]byte, segLen))); err != nil {
					t.Fatal(err)
				}
				c := headroom + len(b.Bytes())
				if tt.roomy {
					c = headroom + MaxSegment
				}
				bufs[i] = make([]byte, headroom+len(b.Bytes()), c)
				copy(bufs[i][headroom:], b.Bytes())
			}
			before := rxPackets(t, ns)
			if _, err := dev.Write(bufs, headroom); err != nil {
				t.Fatal(err)
			}
			if got := rxPackets(t, ns) - before; got != tt.wantRx {
				t.Errorf("device counted %d received packets for %d segments, want %d", got, segs, tt.wantRx)
			}
		})
	}
}

func rxPackets(t *testing.T, ns *netns.Namespace) uint64 {
	t.Helper()
	l, err := ns.Netlink().LinkByName("esp0")
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Statistics.RxPackets
}

// TestReadWriteDoNotAllocate: batch Read and Write cost no allocation per
// call, with offloads and without. UDP datagrams go from a socket in the
// namespace out through the TUN (Read) and back in to it (Write).
func TestReadWriteDoNotAllocate(t *testing.T) {
	for _, mode := range []OffloadMode{OffloadAuto, OffloadOff} {
		t.Run(fmt.Sprintf("offloads=%v", mode == OffloadAuto), func(t *testing.T) {
			ns := newBed(t)
			dev := newTUN(t, ns, mode)
			var sock *net.UDPConn
			if err := ns.Do(func() error {
				var err error
				sock, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 7000})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer sock.Close()
			// Inbound: UDP 192.0.2.2:7001 -> 192.0.2.1:7000, written to the TUN.
			ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IPv4(192, 0, 2, 2).To4(), DstIP: net.IPv4(192, 0, 2, 1).To4()}
			u := &layers.UDP{SrcPort: 7001, DstPort: 7000}
			u.SetNetworkLayerForChecksum(ip)
			sb := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(sb, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ip, u, gopacket.Payload(make([]byte, 100))); err != nil {
				t.Fatal(err)
			}
			pkt := sb.Bytes()
			wbufs := make([][]byte, 1)
			wbufs[0] = make([]byte, headroom+len(pkt), headroom+MaxSegment)
			rbufs, sizes := buffers(dev.BatchSize(), headroom+MaxSegment)
			dst := netip.MustParseAddrPort("192.0.2.2:7001")
			payload := make([]byte, 100)
			in := make([]byte, 2048)
			sock.SetDeadline(time.Now().Add(30 * time.Second))
			dev.File().SetReadDeadline(time.Now().Add(30 * time.Second))
			round := func() {
				copy(wbufs[0][headroom:], pkt) // Write may rewrite the buffer
				if _, err := dev.Write(wbufs, headroom); err != nil {
					t.Fatalf("write: %v", err)
				}
				if _, _, err := sock.ReadFromUDPAddrPort(in); err != nil {
					t.Fatalf("socket read: %v", err)
				}
				if _, err := sock.WriteToUDPAddrPort(payload, dst); err != nil {
					t.Fatalf("socket write: %v", err)
				}
				for {
					n, err := dev.Read(rbufs, sizes, headroom)
					if err != nil {
						t.Fatalf("read: %v", err)
					}
					found := false
					for i := range n {
						p := rbufs[i][headroom : headroom+sizes[i]]
						if len(p) == 128 && p[9] == 17 {
							found = true
						}
					}
					if found {
						return
					}
				}
			}
			round() // settle: IPv6 router solicitations and the like drain first
			if allocs := testing.AllocsPerRun(50, round); allocs != 0 {
				t.Errorf("%.1f allocations per Write+Read round, want 0", allocs)
			}
		})
	}
}
