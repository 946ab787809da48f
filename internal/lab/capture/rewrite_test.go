package capture

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/pcapgen"
)

// source returns the IP packets of the bundled captures named (all of them
// when none is), in pcapgen's order, with their times.
func source(t *testing.T, names ...string) []Frame {
	t.Helper()
	var out []Frame
	for _, c := range pcapgen.Captures() {
		if len(names) > 0 && !slices.Contains(names, c.Name) {
			continue
		}
		b, err := c.Generate()
		if err != nil {
			t.Fatal(err)
		}
		f, _, err := ReadAll(bytes.NewReader(b), c.Name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f...)
	}
	return out
}

var arp = serialize(&layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
	&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: 1, SourceHwAddress: []byte{2, 0, 0, 0, 0, 1}, SourceProtAddress: []byte{192, 0, 2, 10},
		DstHwAddress: make([]byte, 6), DstProtAddress: []byte{192, 0, 2, 1}})

// writeGo writes frames as a capture of link type lt, framing each IP
// packet as that link type does, with an ARP frame first on Ethernet.
func writeGo(t *testing.T, path string, lt layers.LinkType, frames []Frame) {
	t.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65535, lt); err != nil {
		t.Fatal(err)
	}
	put := func(ts time.Time, b []byte) {
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(b), Length: len(b)}, b); err != nil {
			t.Fatal(err)
		}
	}
	if lt == layers.LinkTypeEthernet {
		put(frames[0].CI.Timestamp, arp)
	}
	for i, f := range frames {
		v6 := header.Version(f.IP) == 6
		et := []byte{0x08, 0x00}
		if v6 {
			et = []byte{0x86, 0xdd}
		}
		var hdr []byte
		switch lt {
		case layers.LinkTypeEthernet:
			hdr = append([]byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1}, et...)
			if i%3 == 1 { // an 802.1Q tag on some frames
				hdr = append([]byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x81, 0, 0, 7}, et...)
			}
		case layers.LinkTypeLinuxSLL:
			hdr = append([]byte{0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0}, et...)
		case layers.LinkTypeNull:
			hdr = binary.LittleEndian.AppendUint32(nil, map[bool]uint32{false: 2, true: 30}[v6])
		}
		data := append(hdr, f.IP...)
		if lt == layers.LinkTypeEthernet && len(data) < 60 {
			data = append(data, make([]byte, 60-len(data))...) // Ethernet padding
		}
		put(f.CI.Timestamp, data)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

const scapyWriter = `
import sys
from scapy.all import rdpcap, wrpcap, wrpcapng, Ether, Dot1Q, ARP, CookedLinux, CookedLinuxV2, IP, IPv6
src, out = sys.argv[1], sys.argv[2]
ips = []
for p in rdpcap(src):
    b = bytes(p)
    ip = IP(b) if b[0] >> 4 == 4 else IPv6(b)
    ip.time = p.time
    ips.append(ip)
def framed(mk):
    out = []
    for ip in ips:
        f = mk(ip) / ip
        f.time = ip.time
        out.append(f)
    return out
et = lambda ip: 0x0800 if ip.version == 4 else 0x86dd
eth = framed(lambda ip: Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=5))
a = Ether(src="02:00:00:00:00:01", dst="ff:ff:ff:ff:ff:ff") / ARP(psrc="192.0.2.10", pdst="192.0.2.1")
a.time = ips[0].time
wrpcap(out + "/scapy-eth.pcap", [a] + eth)
wrpcapng(out + "/scapy-eth.pcapng", [a] + eth)
wrpcap(out + "/scapy-sll.pcap", framed(lambda ip: CookedLinux(pkttype=0, lladdrtype=1, lladdrlen=6, src=b"\x02\x00\x00\x00\x00\x01\x00\x00", proto=et(ip))))
wrpcap(out + "/scapy-sll2.pcap", framed(lambda ip: CookedLinuxV2(proto=et(ip), ifindex=2, lladdrtype=1, pkttype=0, lladdrlen=6, src=b"\x02\x00\x00\x00\x00\x01\x00\x00")))
wrpcap(out + "/scapy-raw.pcap", ips, linktype=101)
`

// Every writer and link type yields the same IP packets at the same times.
func TestReadLinkTypes(t *testing.T) {
	want := source(t, "http.pcap", "ipv6.pcap", "dns.pcap")
	dir := t.TempDir()
	writeGo(t, filepath.Join(dir, "raw.pcap"), layers.LinkTypeRaw, want)
	writeGo(t, filepath.Join(dir, "eth.pcap"), layers.LinkTypeEthernet, want)
	writeGo(t, filepath.Join(dir, "sll.pcap"), layers.LinkTypeLinuxSLL, want)
	writeGo(t, filepath.Join(dir, "null.pcap"), layers.LinkTypeNull, want)
	labtest.NeedTools(t, "/usr/bin/python3", "tshark")
	if out, err := exec.Command("/usr/bin/python3", "-c", scapyWriter, filepath.Join(dir, "raw.pcap"), dir).CombinedOutput(); err != nil {
		t.Fatalf("scapy: %v\n%s", err, out)
	}
	// tshark writes pcapng by default; -F pcap with nanosecond timestamps.
	for _, c := range [][]string{
		{"-r", filepath.Join(dir, "eth.pcap"), "-w", filepath.Join(dir, "tshark-eth.pcapng")},
		{"-r", filepath.Join(dir, "scapy-sll2.pcap"), "-w", filepath.Join(dir, "tshark-sll2.pcapng")},
		{"-r", filepath.Join(dir, "sll.pcap"), "-F", "nsecpcap", "-w", filepath.Join(dir, "tshark-sll-ns.pcap")},
	} {
		if out, err := exec.Command("tshark", c...).CombinedOutput(); err != nil {
			t.Fatalf("tshark %v: %v\n%s", c, err, out)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.pcap*"))
	if len(files) != 12 {
		t.Fatalf("%d captures written, want 12: %v", len(files), files)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			got, st := readCapture(t, path)
			if len(got) != len(want) {
				t.Fatalf("%d packets, want %d (stats %+v)", len(got), len(want), st)
			}
			arps := 0
			if strings.Contains(path, "eth") {
				arps = 1
			}
			if st.Skipped["not-ip"] != arps || st.Frames != len(want)+arps {
				t.Errorf("stats %+v: want %d ARP frame(s) skipped by name", st, arps)
			}
			for i := range want {
				if !bytes.Equal(got[i].IP, want[i].IP) {
					t.Fatalf("packet %d differs:\n%x\n%x", i, got[i].IP, want[i].IP)
				}
				if d := got[i].CI.Timestamp.Sub(want[i].CI.Timestamp).Abs(); d > time.Microsecond {
					t.Fatalf("packet %d time off by %v", i, d)
				}
			}
		})
	}
}

var topo = Topology{
	A: Hosts{IPv4: netip.MustParseAddr("192.0.2.1"), IPv6: netip.MustParseAddr("2001:db8:1::1")},
	B: Hosts{IPv4: netip.MustParseAddr("198.51.100.2"), IPv6: netip.MustParseAddr("2001:db8:2::2")},
}

// checkPacket verifies the addresses and every checksum of a rewritten
// packet.
func checkPacket(t *testing.T, p Packet) {
	t.Helper()
	d := p.Data
	from, to := topo.A, topo.B
	if p.From == B {
		from, to = to, from
	}
	src, dst := header.AddrBytes(d)
	l4, proto, _, ok := header.Upper(d)
	if !ok {
		t.Fatalf("% x: no IP header", d)
	}
	if len(src) == 16 {
		if !bytes.Equal(src, from.IPv6.AsSlice()) || !bytes.Equal(dst, to.IPv6.AsSlice()) {
			t.Fatalf("IPv6 %x → %x, want side %v → other", src, dst, p.From)
		}
	} else {
		if !bytes.Equal(src, from.IPv4.AsSlice()) || !bytes.Equal(dst, to.IPv4.AsSlice()) {
			t.Fatalf("IPv4 %x → %x, want side %v → other", src, dst, p.From)
		}
		if !header.Valid(0, d[:l4]) {
			t.Fatal("IPv4 header checksum does not verify")
		}
	}
	var pseudo uint32
	if proto != 1 {
		pseudo = header.Pseudo(src, dst, proto, len(d)-l4)
	}
	if !header.Valid(pseudo, d[l4:]) {
		t.Fatalf("protocol %d checksum does not verify", proto)
	}
}

func TestRewrite(t *testing.T) {
	frames := source(t, "http.pcap", "ipv6.pcap", "icmp.pcap", "dns.pcap", "sizes.pcap")
	first := frames[0].CI.Timestamp
	times := make([]time.Duration, len(frames))
	for i, f := range frames {
		times[i] = f.CI.Timestamp.Sub(first)
	}
	// Break every checksum first, as a capture taken with offload has them.
	for _, f := range frames {
		f.IP[len(f.IP)-1] ^= 0xff
	}
	pkts, st, err := Rewrite(frames, topo, RewriteOptions{Speed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkts) != len(frames) || st.Packets != len(frames) || len(st.Skipped) != 0 {
		t.Fatalf("%d of %d packets, stats %+v", len(pkts), len(frames), st)
	}
	want := map[string]string{"192.0.2.10": "A", "203.0.113.80": "B", "198.51.100.53": "B",
		"2001:db8:a::10": "A", "2001:db8:b::80": "B", "2001:db8:b::53": "B"}
	for k, v := range want {
		if st.Hosts[k] != v {
			t.Errorf("host %s on side %q, want %s (all: %v)", k, st.Hosts[k], v, st.Hosts)
		}
	}
	inOrder := true // the source captures start over at the same instant
	for i, p := range pkts {
		checkPacket(t, p)
		inOrder = inOrder && (i == 0 || times[i] >= times[i-1])
		if inOrder && p.At != times[i]/2 {
			t.Fatalf("packet %d due at %v, want %v (half the capture's %v)", i, p.At, times[i]/2, times[i])
		}
		if i > 0 && p.At < pkts[i-1].At {
			t.Fatalf("packet %d due before packet %d", i, i-1)
		}
	}
	fast, _, err := Rewrite(source(t, "icmp.pcap"), topo, RewriteOptions{Timing: AsFast})
	if err != nil || fast[len(fast)-1].At != 0 {
		t.Fatalf("as fast as possible: last due %v, %v", fast[len(fast)-1].At, err)
	}
	tsharkClean(t, pkts)
}

// tsharkClean writes pkts as a raw-IP capture and has tshark check it.
func tsharkClean(t *testing.T, pkts []Packet) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "out.pcap")
	var fr []Frame
	for _, p := range pkts {
		fr = append(fr, Frame{CI: gopacket.CaptureInfo{Timestamp: time.Unix(0, 0).Add(p.At)}, IP: p.Data})
	}
	writeGo(t, path, layers.LinkTypeRaw, fr)
	if s := labtest.TsharkFlags(t, path, ""); s != "" {
		t.Fatalf("tshark flags rewritten packets:\n%s", s)
	}
}

// The client and server of the hand-made flows, IPv4 and IPv6 (by v6).
var (
	cli = map[bool]net.IP{false: {192, 0, 2, 10}, true: net.ParseIP("2001:db8:a::10")}
	srv = map[bool]net.IP{false: {203, 0, 113, 80}, true: net.ParseIP("2001:db8:b::80")}
)

// ipLayer is an IPv4 (ID 99) or IPv6 header from src to dst carrying p.
func ipLayer(v6 bool, src, dst net.IP, p layers.IPProtocol) gopacket.SerializableLayer {
	if v6 {
		return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: p, SrcIP: src, DstIP: dst}
	}
	return &layers.IPv4{Version: 4, TTL: 64, Protocol: p, Id: 99, SrcIP: src, DstIP: dst}
}

// fragments splits a UDP datagram of n payload bytes into IP fragments of
// at most mtu bytes, IPv4 or IPv6.
func fragments(t *testing.T, v6 bool, n, mtu int) []Frame {
	t.Helper()
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	whole := serialize(ipLayer(v6, cli[v6], srv[v6], layers.IPProtocolUDP), &layers.UDP{SrcPort: 1000, DstPort: 2000}, gopacket.Payload(payload))
	hl := 20
	if v6 {
		hl = 40
	}
	data := whole[hl:] // UDP header and payload
	step := (mtu - hl - 8) &^ 7
	var out []Frame
	for off := 0; off < len(data); off += step {
		chunk := data[off:min(off+step, len(data))]
		more := off+step < len(data)
		var f []byte
		if v6 {
			f = append([]byte(nil), whole[:40]...)
			f[6] = 44
			fh := []byte{17, 0, 0, 0, 0, 0, 0, 99}
			binary.BigEndian.PutUint16(fh[2:], uint16(off)|map[bool]uint16{true: 1}[more])
			f = append(append(f, fh...), chunk...)
			binary.BigEndian.PutUint16(f[4:], uint16(len(f)-40))
		} else {
			f = append(append([]byte(nil), whole[:20]...), chunk...)
			binary.BigEndian.PutUint16(f[2:], uint16(len(f)))
			binary.BigEndian.PutUint16(f[6:], uint16(off/8)|map[bool]uint16{true: 0x2000}[more])
			header.IPv4Header(f[:20])
		}
		out = append(out, Frame{CI: gopacket.CaptureInfo{Timestamp: time.Unix(100, 0)}, IP: f})
	}
	return out
}

// A fragmented datagram's UDP checksum is right once reassembled.
func TestRewriteFragments(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		frames := fragments(t, v6, 3000, 1280)
		if len(frames) < 3 {
			t.Fatalf("%d fragments", len(frames))
		}
		pkts, _, err := Rewrite(frames, topo, RewriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var udp, src, dst []byte
		for _, p := range pkts {
			hl, _, _, _ := header.Upper(p.Data)
			src, dst = header.AddrBytes(p.Data)
			if !v6 && !header.Valid(0, p.Data[:hl]) {
				t.Fatal("fragment header checksum does not verify")
			}
			udp = append(udp, p.Data[hl:]...)
		}
		if !bytes.Equal(src, topo.A.IPv4.AsSlice()) && !bytes.Equal(src, topo.A.IPv6.AsSlice()) {
			t.Fatalf("fragment source %x not host A", src)
		}
		if !header.Valid(header.Pseudo(src, dst, 17, len(udp)), udp) {
			t.Fatalf("v6=%v: reassembled UDP checksum does not verify after rewriting", v6)
		}
	}
}

func TestRewritePinsAndSkips(t *testing.T) {
	frames := source(t, "ipv6.pcap", "dns.pcap")
	pinned := topo
	pinned.Pin = map[netip.Addr]Side{netip.MustParseAddr("198.51.100.53"): A}
	pinned.B.IPv6 = netip.Addr{}
	pkts, st, err := Rewrite(frames, pinned, RewriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Hosts["192.0.2.10"] != "B" || st.Skipped["no IPv6 address on the topology"] == 0 {
		t.Fatalf("pin or skip not honoured: %+v", st)
	}
	if st.Packets+st.Skipped["no IPv6 address on the topology"] != len(frames) || len(pkts) != st.Packets {
		t.Fatalf("packets %d + skipped %v != %d frames", st.Packets, st.Skipped, len(frames))
	}
	for _, p := range pkts {
		if src, _ := header.AddrBytes(p.Data); len(src) != 4 || p.From == A && !bytes.Equal(src, topo.A.IPv4.AsSlice()) {
			t.Fatalf("packet from %v: %x", p.From, p.Data[:20])
		}
	}
}

func TestReadErrors(t *testing.T) {
	var wifi bytes.Buffer
	w := pcapgo.NewWriter(&wifi)
	w.WriteFileHeader(65535, layers.LinkTypeIEEE802_11)
	w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: 30, Length: 30}, make([]byte, 30))
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"text", []byte("hello world, not a capture"), "not a pcap or pcapng file"},
		{"wifi.pcap", wifi.Bytes(), "unsupported link type"},
	}
	for _, tt := range tests {
		_, st, err := ReadAll(bytes.NewReader(tt.data), tt.name)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.name) || st.Frames != 0 {
			t.Errorf("%s: %v, %+v; want an error naming the file with %q, no frame read", tt.name, err, st, tt.want)
		}
	}
}

func TestTimingText(t *testing.T) {
	var tm Timing
	if err := tm.UnmarshalText([]byte("fast")); err != nil || tm != AsFast {
		t.Fatalf("fast: %v %v", tm, err)
	}
	if err := tm.UnmarshalText([]byte("slow")); err == nil || !strings.Contains(err.Error(), "keep or fast") {
		t.Fatalf("slow: %v", err)
	}
}

// An ICMP error quotes the packet it answers: the quote is mapped like the
// flow, with its checksums kept right.
func TestRewriteICMPErrors(t *testing.T) {
	var frames []Frame
	for _, v6 := range []bool{false, true} {
		query := serialize(ipLayer(v6, cli[v6], srv[v6], layers.IPProtocolUDP), &layers.UDP{SrcPort: 5000, DstPort: 9}, gopacket.Payload([]byte("query")))
		var reply []byte
		if v6 {
			reply = serialize(ipLayer(v6, srv[v6], cli[v6], layers.IPProtocolICMPv6), &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(1, 4)},
				gopacket.Payload(append(make([]byte, 4), query...)))
		} else {
			reply = serialize(ipLayer(v6, srv[v6], cli[v6], layers.IPProtocolICMPv4),
				&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 3)}, gopacket.Payload(query[:28]))
		}
		frames = append(frames, Frame{CI: gopacket.CaptureInfo{Timestamp: time.Unix(1, 0)}, IP: query}, Frame{CI: gopacket.CaptureInfo{Timestamp: time.Unix(2, 0)}, IP: reply})
	}
	pkts, _, err := Rewrite(frames, topo, RewriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 3} {
		p := pkts[i]
		checkPacket(t, p)
		if p.From != B {
			t.Fatalf("error %d sent from side %v, want B", i, p.From)
		}
		hl, _, _, _ := header.Upper(p.Data)
		q := p.Data[hl+header.ICMPLen:]
		src, dst := header.AddrBytes(q)
		if header.Version(q) == 4 {
			if !bytes.Equal(src, topo.A.IPv4.AsSlice()) || !bytes.Equal(dst, topo.B.IPv4.AsSlice()) || !header.Valid(0, q[:header.IPv4Len]) {
				t.Fatalf("quoted IPv4 header % x", q[:header.IPv4Len])
			}
		} else {
			if !bytes.Equal(src, topo.A.IPv6.AsSlice()) || !bytes.Equal(dst, topo.B.IPv6.AsSlice()) {
				t.Fatalf("quoted IPv6 header % x", q[:header.IPv6Len])
			}
			if !header.Valid(header.Pseudo(src, dst, 17, len(q)-header.IPv6Len), q[header.IPv6Len:]) {
				t.Fatal("quoted UDP checksum does not verify after the mapping")
			}
		}
	}
	tsharkClean(t, pkts)
}
