// Package pcapgen writes the captures the bundled scenarios replay.
//
// It writes the small captures that espgw's bundled scenarios replay
// (scenarios/pcaps/): DNS over UDP, HTTP-like TCP flows with their
// handshakes and FINs, ICMP echo, a sweep of packet sizes and an IPv6 mix.
// Every capture is deterministic (fixed timestamps, seeded payloads), so the
// committed files can be checked against the generator byte for byte.
//
// The files are classic pcap with link type LINKTYPE_RAW (101): each record
// is one IPv4 or IPv6 packet with no link header, as a TUN device carries
// it. Addresses are TEST-NET (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24,
// 2001:db8::/32); a replay maps them onto its topology (internal/lab/capture).
//
//go:generate go test -run TestBundledCurrent -update .
package pcapgen

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Capture is one bundled capture: its file name and what it holds.
type Capture struct {
	Name        string
	Description string
	build       func(g *gen) error
}

// Captures lists the bundled captures.
func Captures() []Capture {
	return []Capture{
		{"dns.pcap", "DNS queries and answers over UDP/53 (A, AAAA, TXT, an NXDOMAIN), IPv4", dnsCapture},
		{"http.pcap", "two HTTP-like TCP flows: handshake with MSS, GET, a multi-segment response, ACKs, FIN both ways, IPv4", httpCapture},
		{"icmp.pcap", "ICMP echo requests and replies (ping), IPv4", icmpCapture},
		{"sizes.pcap", "UDP datagrams whose IP packets are 64 to 1500 bytes, both ways, IPv4", sizesCapture},
		{"ipv6.pcap", "ICMPv6 echo, DNS over UDP and an HTTP-like TCP flow over IPv6", ipv6Capture},
		{"qos.pcap", "UDP flows marked with DSCP and ECN (EF, AF41 + ECT(0), CS1 + ECT(1), AF11 + CE), IPv4 and IPv6, both ways", qosCapture},
	}
}

// Start is the timestamp of every capture's first packet.
var start = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// Hosts of the captures.
var (
	client4   = net.IP{192, 0, 2, 10}
	resolver4 = net.IP{198, 51, 100, 53}
	server4   = net.IP{203, 0, 113, 80}
	client6   = net.ParseIP("2001:db8:a::10")
	server6   = net.ParseIP("2001:db8:b::80")
	resolver6 = net.ParseIP("2001:db8:b::53")
)

// Generate returns the bytes of capture c.
func (c Capture) Generate() ([]byte, error) {
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65535, layers.LinkTypeRaw); err != nil {
		return nil, err
	}
	g := &gen{w: w, now: start, rnd: rand.New(rand.NewPCG(1, uint64(len(c.Name))))}
	if err := c.build(g); err != nil {
		return nil, fmt.Errorf("generate %s: %w", c.Name, err)
	}
	return buf.Bytes(), nil
}

// WriteAll writes every bundled capture into dir.
func WriteAll(dir string) error {
	for _, c := range Captures() {
		b, err := c.Generate()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, c.Name), b, 0o644); err != nil {
			return fmt.Errorf("write capture: %w", err)
		}
	}
	return nil
}

// gen writes packets at a clock that only moves forward.
type gen struct {
	w    *pcapgo.Writer
	now  time.Time
	rnd  *rand.Rand
	ipID uint16
}

func (g *gen) after(d time.Duration) { g.now = g.now.Add(d) }

// jitter is a small deterministic spread added to the clock between packets.
func (g *gen) jitter(base time.Duration) time.Duration {
	return base + time.Duration(g.rnd.Int64N(int64(base)/4+1))
}

func (g *gen) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.rnd.Uint32())
	}
	return b
}

// text returns n bytes of printable filler, as an HTTP body would hold.
func (g *gen) text(n int) []byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789\n"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[g.rnd.IntN(len(alphabet))]
	}
	return b
}

// ip returns the network layer from src to dst for protocol p.
func (g *gen) ip(src, dst net.IP, p layers.IPProtocol) gopacket.NetworkLayer {
	if src.To4() == nil {
		return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: p, SrcIP: src, DstIP: dst,
			FlowLabel: uint32(g.rnd.IntN(1 << 20))}
	}
	g.ipID++
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: g.ipID, Flags: layers.IPv4DontFragment,
		Protocol: p, SrcIP: src.To4(), DstIP: dst.To4()}
}

// packet serializes one IP packet and writes it at the current time.
func (g *gen) packet(nl gopacket.NetworkLayer, ls ...gopacket.SerializableLayer) error {
	b, err := Serialize(append([]gopacket.SerializableLayer{nl.(gopacket.SerializableLayer)}, ls...)...)
	if err != nil {
		return err
	}
	return g.w.WritePacket(gopacket.CaptureInfo{Timestamp: g.now, CaptureLength: len(b), Length: len(b)}, b)
}

// Serialize builds one packet of the layers given, lengths and checksums
// computed, the transport checksums over the network layer among them: the
// lab's one way to make a packet from gopacket layers (the captures here,
// the packets of the capture and impairment tests).
func Serialize(ls ...gopacket.SerializableLayer) ([]byte, error) {
	var nl gopacket.NetworkLayer
	for _, l := range ls {
		if n, ok := l.(gopacket.NetworkLayer); ok {
			nl = n
		}
	}
	for _, l := range ls {
		if c, ok := l.(interface {
			SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
		}); ok && nl != nil {
			if err := c.SetNetworkLayerForChecksum(nl); err != nil {
				return nil, err
			}
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func dnsCapture(g *gen) error {
	return dnsExchanges(g, client4, resolver4, []question{
		{"www.example.com", layers.DNSTypeA}, {"www.example.com", layers.DNSTypeAAAA},
		{"mail.example.org", layers.DNSTypeA}, {"example.net", layers.DNSTypeTXT},
		{"ns1.example.com", layers.DNSTypeA}, {"cdn.example.com", layers.DNSTypeA},
		{"nonexistent.example.com", layers.DNSTypeA}, {"api.example.org", layers.DNSTypeAAAA},
		{"www.example.org", layers.DNSTypeA}, {"time.example.net", layers.DNSTypeA},
	})
}

type question struct {
	name string
	typ  layers.DNSType
}

func dnsExchanges(g *gen, cli, srv net.IP, qs []question) error {
	for i, q := range qs {
		id := uint16(0x1000 + i*37)
		port := layers.UDPPort(40000 + g.rnd.IntN(20000))
		query := &layers.DNS{ID: id, RD: true, OpCode: layers.DNSOpCodeQuery,
			Questions: []layers.DNSQuestion{{Name: []byte(q.name), Type: q.typ, Class: layers.DNSClassIN}}}
		if err := g.packet(g.ip(cli, srv, layers.IPProtocolUDP), &layers.UDP{SrcPort: port, DstPort: 53}, query); err != nil {
			return err
		}
		g.after(g.jitter(3 * time.Millisecond))
		answer := *query
		answer.QR, answer.RA = true, true
		if q.name == "nonexistent.example.com" {
			answer.ResponseCode = layers.DNSResponseCodeNXDomain
		} else {
			answer.Answers = dnsAnswers(g, q)
		}
		answer.ANCount = uint16(len(answer.Answers))
		if err := g.packet(g.ip(srv, cli, layers.IPProtocolUDP), &layers.UDP{SrcPort: 53, DstPort: port}, &answer); err != nil {
			return err
		}
		g.after(g.jitter(40 * time.Millisecond))
	}
	return nil
}

func dnsAnswers(g *gen, q question) []layers.DNSResourceRecord {
	rr := layers.DNSResourceRecord{Name: []byte(q.name), Type: q.typ, Class: layers.DNSClassIN, TTL: 300}
	switch q.typ {
	case layers.DNSTypeA:
		var out []layers.DNSResourceRecord
		for i := 0; i < 1+g.rnd.IntN(3); i++ {
			rr.IP = net.IP{203, 0, 113, byte(1 + g.rnd.IntN(250))}
			out = append(out, rr)
		}
		return out
	case layers.DNSTypeAAAA:
		rr.IP = net.ParseIP(fmt.Sprintf("2001:db8:b::%x", 1+g.rnd.IntN(0xfff)))
		return []layers.DNSResourceRecord{rr}
	default:
		rr.TXTs = [][]byte{[]byte("v=spf1 -all"), g.text(40)}
		return []layers.DNSResourceRecord{rr}
	}
}

// tcpFlow is one TCP connection, its sequence numbers kept as a stack would.
type tcpFlow struct {
	g            *gen
	cli, srv     net.IP
	cport, sport layers.TCPPort
	cseq, sseq   uint32 // next sequence number each side sends
	cwin, swin   uint16
	mss          int
	rtt          time.Duration
}

func newFlow(g *gen, cli, srv net.IP, sport layers.TCPPort) *tcpFlow {
	mss := 1460
	if cli.To4() == nil {
		mss = 1440
	}
	return &tcpFlow{g: g, cli: cli, srv: srv, cport: layers.TCPPort(32768 + g.rnd.IntN(28000)), sport: sport,
		cseq: g.rnd.Uint32(), sseq: g.rnd.Uint32(), cwin: 64240, swin: 65160, mss: mss, rtt: 12 * time.Millisecond}
}

// seg sends one segment from the client (fromClient) or the server, with
// data, advancing that side's sequence number by the data and by SYN/FIN.
func (f *tcpFlow) seg(fromClient bool, data []byte, syn, ack, psh, fin bool) error {
	t := &layers.TCP{SYN: syn, ACK: ack, PSH: psh, FIN: fin}
	src, dst := f.srv, f.cli
	seq, peer := &f.sseq, f.cseq
	t.SrcPort, t.DstPort, t.Window = f.sport, f.cport, f.swin
	if fromClient {
		src, dst = f.cli, f.srv
		seq, peer = &f.cseq, f.sseq
		t.SrcPort, t.DstPort, t.Window = f.cport, f.sport, f.cwin
	}
	if !syn {
		t.Window >>= 7 // both SYNs offered window scale 7
	}
	t.Seq = *seq
	if ack {
		t.Ack = peer
	}
	if syn {
		t.Options = []layers.TCPOption{
			{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{byte(f.mss >> 8), byte(f.mss)}},
			{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2},
			{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}},
		}
	}
	*seq += uint32(len(data))
	if syn || fin {
		*seq++
	}
	return f.g.packet(f.g.ip(src, dst, layers.IPProtocolTCP), t, gopacket.Payload(data))
}

func (f *tcpFlow) handshake() error {
	if err := f.seg(true, nil, true, false, false, false); err != nil {
		return err
	}
	f.g.after(f.rtt / 2)
	if err := f.seg(false, nil, true, true, false, false); err != nil {
		return err
	}
	f.g.after(f.rtt / 2)
	return f.seg(true, nil, false, true, false, false)
}

// send sends data from one side in MSS-sized segments, the other side
// acknowledging every second segment and the last.
func (f *tcpFlow) send(fromClient bool, data []byte) error {
	for n := 0; len(data) > 0; n++ {
		k := min(f.mss, len(data))
		last := k == len(data)
		if err := f.seg(fromClient, data[:k], false, true, last, false); err != nil {
			return err
		}
		data = data[k:]
		f.g.after(f.g.jitter(100 * time.Microsecond))
		if n%2 == 1 || last {
			f.g.after(f.rtt / 2)
			if err := f.seg(!fromClient, nil, false, true, false, false); err != nil {
				return err
			}
			f.g.after(f.rtt / 4)
		}
	}
	return nil
}

// close is the client's FIN, the server's FIN+ACK and the client's last ACK.
func (f *tcpFlow) close() error {
	if err := f.seg(true, nil, false, true, false, true); err != nil {
		return err
	}
	f.g.after(f.rtt / 2)
	if err := f.seg(false, nil, false, true, false, true); err != nil {
		return err
	}
	f.g.after(f.rtt / 2)
	return f.seg(true, nil, false, true, false, false)
}

func httpExchange(g *gen, cli, srv net.IP, path string, body int) error {
	f := newFlow(g, cli, srv, 80)
	if err := f.handshake(); err != nil {
		return err
	}
	g.after(time.Millisecond)
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: www.example.com\r\nUser-Agent: espgw-pcapgen\r\nAccept: */*\r\n\r\n", path)
	if err := f.send(true, []byte(req)); err != nil {
		return err
	}
	g.after(2 * time.Millisecond)
	head := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", body)
	if err := f.send(false, append([]byte(head), g.text(body)...)); err != nil {
		return err
	}
	g.after(5 * time.Millisecond)
	return f.close()
}

func httpCapture(g *gen) error {
	if err := httpExchange(g, client4, server4, "/index.html", 900); err != nil {
		return err
	}
	g.after(200 * time.Millisecond)
	return httpExchange(g, client4, server4, "/data/report.txt", 24000)
}

func echo(g *gen, cli, srv net.IP, n int) error {
	v6 := cli.To4() == nil
	id := uint16(0x4242)
	for seq := uint16(1); seq <= uint16(n); seq++ {
		payload := g.bytes(56)
		for reply, ends := range [][2]net.IP{{cli, srv}, {srv, cli}} {
			src, dst := ends[0], ends[1]
			var err error
			if v6 {
				typ := []uint8{layers.ICMPv6TypeEchoRequest, layers.ICMPv6TypeEchoReply}[reply]
				err = g.packet(g.ip(src, dst, layers.IPProtocolICMPv6),
					&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)},
					&layers.ICMPv6Echo{Identifier: id, SeqNumber: seq}, gopacket.Payload(payload))
			} else {
				typ := []uint8{layers.ICMPv4TypeEchoRequest, layers.ICMPv4TypeEchoReply}[reply]
				err = g.packet(g.ip(src, dst, layers.IPProtocolICMPv4),
					&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0), Id: id, Seq: seq}, gopacket.Payload(payload))
			}
			if err != nil {
				return err
			}
			g.after(g.jitter(800 * time.Microsecond))
		}
		g.after(time.Second - 2*time.Millisecond)
	}
	return nil
}

func icmpCapture(g *gen) error { return echo(g, client4, server4, 10) }

// udpEnds is one direction of a UDP flow.
type udpEnds struct {
	src, dst     net.IP
	sport, dport layers.UDPPort
}

// sizesCapture sends UDP datagrams whose IP packets take every size of the
// sweep, client to server and back.
func sizesCapture(g *gen) error {
	sizes := []int{64, 65, 128, 256, 512, 576, 1024, 1280, 1400, 1499, 1500}
	for round := 0; round < 3; round++ {
		for _, n := range sizes {
			for _, u := range []udpEnds{{client4, server4, 5001, 9}, {server4, client4, 9, 5001}} {
				payload := g.bytes(n - 20 - 8)
				if err := g.packet(g.ip(u.src, u.dst, layers.IPProtocolUDP), &layers.UDP{SrcPort: u.sport, DstPort: u.dport}, gopacket.Payload(payload)); err != nil {
					return err
				}
				g.after(g.jitter(time.Millisecond))
			}
		}
	}
	return nil
}

func ipv6Capture(g *gen) error {
	if err := echo(g, client6, server6, 4); err != nil {
		return err
	}
	if err := dnsExchanges(g, client6, resolver6, []question{
		{"www.example.com", layers.DNSTypeAAAA}, {"api.example.org", layers.DNSTypeAAAA}, {"example.net", layers.DNSTypeTXT},
	}); err != nil {
		return err
	}
	return httpExchange(g, client6, server6, "/v6.html", 6000)
}

// qosCapture sends UDP flows whose packets carry QoS marks, DSCP and ECN,
// the way voice, video, bulk and a congested flow would, IPv4 and IPv6.
func qosCapture(g *gen) error {
	marks := []uint8{46 << 2, 34<<2 | 2, 8<<2 | 1, 10<<2 | 3}
	for round := 0; round < 4; round++ {
		for i, tos := range marks {
			for _, fam := range [][2]net.IP{{client4, server4}, {client6, server6}} {
				port := layers.UDPPort(20000 + i)
				for _, u := range []udpEnds{{fam[0], fam[1], port, 5004}, {fam[1], fam[0], 5004, port}} {
					nl := g.ip(u.src, u.dst, layers.IPProtocolUDP)
					switch ip := nl.(type) {
					case *layers.IPv4:
						ip.TOS = tos
					case *layers.IPv6:
						ip.TrafficClass = tos
					}
					if err := g.packet(nl, &layers.UDP{SrcPort: u.sport, DstPort: u.dport}, gopacket.Payload(g.bytes(160))); err != nil {
						return err
					}
					g.after(g.jitter(2 * time.Millisecond))
				}
			}
		}
	}
	return nil
}
