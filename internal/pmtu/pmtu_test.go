package pmtu

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

var (
	sender4 = net.ParseIP("192.0.2.10").To4()
	target4 = net.ParseIP("203.0.113.10").To4()
	sender6 = net.ParseIP("2001:db8:a::10")
	target6 = net.ParseIP("2001:db8:b::10")
	gw4     = netip.MustParseAddr("192.0.2.1")
	gw6     = netip.MustParseAddr("2001:db8:a::1")
)

func serialize(t *testing.T, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func udp4(t *testing.T, size int, flags layers.IPv4Flag) []byte {
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: sender4, DstIP: target4, Flags: flags, Id: 77}
	u := &layers.UDP{SrcPort: 40000, DstPort: 9}
	u.SetNetworkLayerForChecksum(ip)
	return serialize(t, ip, u, gopacket.Payload(bytes.Repeat([]byte{0xab}, size-28)))
}

func udp6(t *testing.T, size int) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: sender6, DstIP: target6}
	u := &layers.UDP{SrcPort: 40000, DstPort: 9}
	u.SetNetworkLayerForChecksum(ip)
	return serialize(t, ip, u, gopacket.Payload(bytes.Repeat([]byte{0xcd}, size-48)))
}

func TestFragmentationNeeded(t *testing.T) {
	for _, size := range []int{28, 100, 1500, 9000} {
		orig := udp4(t, size, layers.IPv4DontFragment)
		dst := make([]byte, MaxLen4)
		n, err := FragmentationNeeded(dst, orig, gw4, 1438)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		wantQuote := min(size, MaxLen4-28)
		if n != 28+wantQuote {
			t.Errorf("size %d: length %d, want %d", size, n, 28+wantQuote)
		}
		p := gopacket.NewPacket(dst[:n], layers.LayerTypeIPv4, gopacket.Default)
		if el := p.ErrorLayer(); el != nil {
			t.Fatalf("size %d: gopacket cannot decode: %v", size, el.Error())
		}
		ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		icmp := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
		if !ip.SrcIP.Equal(gw4.AsSlice()) || !ip.DstIP.Equal(sender4) || ip.Protocol != layers.IPProtocolICMPv4 || int(ip.Length) != n {
			t.Errorf("size %d: IP header %v -> %v proto %v len %d", size, ip.SrcIP, ip.DstIP, ip.Protocol, ip.Length)
		}
		if icmp.TypeCode != layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodeFragmentationNeeded) {
			t.Errorf("size %d: type/code %v", size, icmp.TypeCode)
		}
		// Next-hop MTU sits in the low half of the "unused" word (RFC 1191).
		if icmp.Seq != 1438 || icmp.Id != 0 {
			t.Errorf("size %d: next-hop MTU field %d (id %d), want 1438", size, icmp.Seq, icmp.Id)
		}
		if !bytes.Equal(icmp.Payload, orig[:wantQuote]) {
			t.Errorf("size %d: quote differs from the original's first %d bytes", size, wantQuote)
		}
		// Checksums: gopacket recomputes both; they must equal ours.
		re := serialize(t, ip, icmp, gopacket.Payload(icmp.Payload))
		if !bytes.Equal(re, dst[:n]) {
			t.Errorf("size %d: checksums differ from gopacket's:\n got % x\nwant % x", size, dst[:28], re[:28])
		}
	}
}

func TestPacketTooBig(t *testing.T) {
	for _, size := range []int{48, 200, 1500, 9000} {
		orig := udp6(t, size)
		dst := make([]byte, MaxLen6)
		n, err := PacketTooBig(dst, orig, gw6, 1422)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		wantQuote := min(size, MaxLen6-48)
		if n != 48+wantQuote {
			t.Errorf("size %d: length %d, want %d", size, n, 48+wantQuote)
		}
		p := gopacket.NewPacket(dst[:n], layers.LayerTypeIPv6, gopacket.Default)
		if el := p.ErrorLayer(); el != nil {
			t.Fatalf("size %d: gopacket cannot decode: %v", size, el.Error())
		}
		ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		icmp := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
		if !ip.SrcIP.Equal(gw6.AsSlice()) || !ip.DstIP.Equal(sender6) || ip.NextHeader != layers.IPProtocolICMPv6 || int(ip.Length) != n-40 || ip.HopLimit != 64 {
			t.Errorf("size %d: IPv6 header %v -> %v nh %v len %d", size, ip.SrcIP, ip.DstIP, ip.NextHeader, ip.Length)
		}
		if icmp.TypeCode != layers.CreateICMPv6TypeCode(layers.ICMPv6TypePacketTooBig, 0) {
			t.Errorf("size %d: type/code %v", size, icmp.TypeCode)
		}
		// gopacket leaves the 4-byte MTU at the start of the ICMPv6 payload.
		body := icmp.Payload
		if mtu := uint32(body[0])<<24 | uint32(body[1])<<16 | uint32(body[2])<<8 | uint32(body[3]); mtu != 1422 {
			t.Errorf("size %d: MTU %d, want 1422", size, mtu)
		}
		if !bytes.Equal(body[4:], orig[:wantQuote]) {
			t.Errorf("size %d: quote differs from the original's first %d bytes", size, wantQuote)
		}
		ricmp := &layers.ICMPv6{TypeCode: icmp.TypeCode}
		ricmp.SetNetworkLayerForChecksum(ip)
		re := serialize(t, ip, ricmp, gopacket.Payload(body))
		if !bytes.Equal(re, dst[:n]) {
			t.Errorf("size %d: checksum %x differs from gopacket's %x", size, dst[42:44], re[42:44])
		}
	}
}

func TestSuppressed(t *testing.T) {
	dst := make([]byte, MaxLen6)
	icmpErr4 := serialize(t,
		&layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: sender4, DstIP: target4, Flags: layers.IPv4DontFragment},
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeTimeExceeded, 0)},
		gopacket.Payload(make([]byte, 1400)))
	echo4 := serialize(t,
		&layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: sender4, DstIP: target4, Flags: layers.IPv4DontFragment},
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0)},
		gopacket.Payload(make([]byte, 1400)))
	frag4 := serialize(t,
		&layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: sender4, DstIP: target4, FragOffset: 185},
		gopacket.Payload(make([]byte, 1400)))
	mcast4 := serialize(t,
		&layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.ParseIP("224.0.0.5").To4(), DstIP: target4},
		gopacket.Payload(make([]byte, 1400)))
	ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolICMPv6, SrcIP: sender6, DstIP: target6}
	e6 := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeDestinationUnreachable, 0)}
	e6.SetNetworkLayerForChecksum(ip6)
	icmpErr6 := serialize(t, ip6, e6, gopacket.Payload(make([]byte, 1400)))
	// The same error behind a destination-options header is still an error.
	ip6x := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6Destination, SrcIP: sender6, DstIP: target6}
	opts := &layers.IPv6Destination{}
	opts.NextHeader = layers.IPProtocolICMPv6
	opts.Options = []*layers.IPv6DestinationOption{{OptionType: 1, OptionData: make([]byte, 4)}}
	e6x := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeTimeExceeded, 0)}
	e6x.SetNetworkLayerForChecksum(ip6x)
	icmpErr6x := serialize(t, ip6x, opts, e6x, gopacket.Payload(make([]byte, 1400)))
	echo6 := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)}
	echo6.SetNetworkLayerForChecksum(ip6)
	echoReq6 := serialize(t, ip6, echo6, gopacket.Payload(make([]byte, 1400)))

	for _, tt := range []struct {
		name       string
		pkt        []byte
		suppressed bool
	}{
		{"v4 ICMP error", icmpErr4, true},
		{"v4 echo request", echo4, false},
		{"v4 non-first fragment", frag4, true},
		{"v4 multicast source", mcast4, true},
		{"v6 ICMPv6 error", icmpErr6, true},
		{"v6 ICMPv6 error behind dest opts", icmpErr6x, true},
		{"v6 echo request", echoReq6, false},
	} {
		var err error
		if tt.pkt[0]>>4 == 4 {
			_, err = FragmentationNeeded(dst, tt.pkt, gw4, 1400)
		} else {
			_, err = PacketTooBig(dst, tt.pkt, gw6, 1400)
		}
		if got := errors.Is(err, ErrSuppressed); got != tt.suppressed {
			t.Errorf("%s: err = %v, suppressed %v, want %v", tt.name, err, got, tt.suppressed)
		}
	}
}

func TestBadInput(t *testing.T) {
	orig4, orig6 := udp4(t, 1500, layers.IPv4DontFragment), udp6(t, 1500)
	big := make([]byte, MaxLen6)
	for _, tt := range []struct {
		name string
		fn   func() (int, error)
		want string
	}{
		{"v6 source for v4", func() (int, error) { return FragmentationNeeded(big, orig4, gw6, 1400) }, "not IPv4"},
		{"MTU 10", func() (int, error) { return FragmentationNeeded(big, orig4, gw4, 10) }, "outside 68"},
		{"v6 packet to v4 builder", func() (int, error) { return FragmentationNeeded(big, orig6, gw4, 1400) }, "is not IPv4"},
		{"truncated v4", func() (int, error) { return FragmentationNeeded(big, orig4[:10], gw4, 1400) }, "is not IPv4"},
		{"bad IHL", func() (int, error) {
			b := append([]byte(nil), orig4[:40]...)
			b[0] = 0x4f
			return FragmentationNeeded(big, b, gw4, 1400)
		}, "header length 60"},
		{"small dst v4", func() (int, error) { return FragmentationNeeded(big[:40], orig4, gw4, 1400) }, "too small"},
		{"v4 source for v6", func() (int, error) { return PacketTooBig(big, orig6, gw4, 1400) }, "not IPv6"},
		{"v6 MTU 1000", func() (int, error) { return PacketTooBig(big, orig6, gw6, 1000) }, "below IPv6's minimum"},
		{"v4 packet to v6 builder", func() (int, error) { return PacketTooBig(big, orig4, gw6, 1400) }, "is not IPv6"},
		{"small dst v6", func() (int, error) { return PacketTooBig(big[:60], orig6, gw6, 1400) }, "too small"},
	} {
		n, err := tt.fn()
		if err == nil || !strings.Contains(err.Error(), tt.want) || n != 0 {
			t.Errorf("%s: %d, %v; want error mentioning %q", tt.name, n, err, tt.want)
		}
	}
}

func TestBuildersDoNotAllocate(t *testing.T) {
	orig4, orig6 := udp4(t, 1500, layers.IPv4DontFragment), udp6(t, 1500)
	dst := make([]byte, MaxLen6)
	allocs := testing.AllocsPerRun(100, func() {
		FragmentationNeeded(dst, orig4, gw4, 1400)
		PacketTooBig(dst, orig6, gw6, 1400)
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per pair of ICMP errors, want 0", allocs)
	}
}
