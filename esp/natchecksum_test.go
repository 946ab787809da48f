package esp_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/sa"
)

// innerPacket is an IPv4 or IPv6 packet of protocol proto whose
// upper-layer segment seg gets a valid checksum at field (-1: none).
func innerPacket(v6 bool, proto uint8, seg []byte, field int) []byte {
	pkt := udpPacket(v6, 0)
	hl := 20
	if v6 {
		hl = 40
		pkt[6] = proto
	} else {
		pkt[9] = proto
	}
	pkt = append(pkt[:hl], seg...)
	header.SetLength(pkt[:hl], len(pkt))
	if field >= 0 {
		src, dst := pkt[12:16], pkt[16:20]
		if v6 {
			src, dst = pkt[8:24], pkt[24:40]
		}
		header.L4(pkt[hl:], src, dst, proto, field)
	}
	return pkt
}

// A transport-mode packet in UDP through a NAT: the sender's TCP, UDP and
// ICMPv6 checksums cover an address the NAT changed, and the opened
// packet's are made anew over the addresses it arrived with (RFC 3948
// §3.1.2). Fragments, and an IPv4 UDP checksum of zero, are left alone; so
// is every checksum of a transport SA without UDP.
func TestTransportInUDPRecomputesChecksums(t *testing.T) {
	tcp := make([]byte, 20+32)
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 1701)
	tcp[12] = 5 << 4
	udp := func(n int) []byte {
		b := make([]byte, 8+n)
		binary.BigEndian.PutUint16(b[0:], 1701)
		binary.BigEndian.PutUint16(b[2:], 1701)
		binary.BigEndian.PutUint16(b[4:], uint16(8+n))
		for i := range n {
			b[8+i] = byte(i)
		}
		return b
	}
	icmp6 := []byte{128, 0, 0, 0, 0, 1, 0, 1, 'p', 'i', 'n', 'g'}
	for _, c := range []struct {
		name      string
		v6        bool
		proto     uint8
		seg       []byte
		field     int
		fragment  bool
		wantFixed bool
	}{
		{"tcp4", false, 6, tcp, 16, false, true},
		{"udp4", false, 17, udp(33), 6, false, true},
		{"udp4-no-checksum", false, 17, udp(33), -1, false, false},
		{"udp4-fragment", false, 17, udp(33), 6, true, false},
		{"tcp6", true, 6, tcp, 16, false, true},
		{"udp6", true, 17, udp(33), 6, false, true},
		{"icmp6", true, 58, icmp6, 2, false, true},
	} {
		for _, encap := range []sa.Encap{sa.EncapUDP, sa.EncapNone} {
			t.Run(fmt.Sprintf("%s/%s", c.name, encap), func(t *testing.T) {
				cfg := testSA(t, sa.Suite{Cipher: sa.CipherAESGCM16}, sa.Transport, c.v6)
				if encap == sa.EncapUDP {
					cfg.Encap, cfg.SrcPort, cfg.DstPort = sa.EncapUDP, sa.DefaultNATTPort, sa.DefaultNATTPort
				}
				out, in := newPair(t, cfg)
				inner := innerPacket(c.v6, c.proto, append([]byte(nil), c.seg...), c.field)
				if c.fragment {
					binary.BigEndian.PutUint16(inner[6:], 0x2000) // MF
					header.IPv4Header(inner[:20])
				}
				hl := 20
				if c.v6 {
					hl = 40
				}
				sent := append([]byte(nil), inner[hl:]...)
				buf := make([]byte, esp.Headroom+len(inner)+esp.Tailroom)
				copy(buf[esp.Headroom:], inner)
				pr := esp.NewProcessor(out.Engine())
				p := &esp.Packet{Buf: buf, Off: esp.Headroom, Len: len(inner), SA: out}
				if err := pr.Seal(context.Background(), []*esp.Packet{p}); err != nil || p.Drop != esp.OK {
					t.Fatalf("seal: %v %v", err, p.Drop)
				}
				// The NAT rewrites the source address (and, for IPv4,
				// the header checksum) of the packet carrying the ESP.
				wire := buf[p.Off : p.Off+hl]
				if c.v6 {
					wire[23] ^= 0x55
				} else {
					wire[15] ^= 0x55
					header.IPv4Header(wire)
				}
				q := &esp.Packet{Buf: buf, Off: p.Off + hl, Len: p.Len - hl, HdrLen: hl, SA: in}
				if err := pr.Open(context.Background(), []*esp.Packet{q}); err != nil || q.Drop != esp.OK {
					t.Fatalf("open: %v %v", err, q.Drop)
				}
				got := q.Data()
				seg := got[hl:]
				src, dst := got[12:16], got[16:20]
				if c.v6 {
					src, dst = got[8:24], got[24:40]
				}
				valid := header.Valid(header.Pseudo(src, dst, c.proto, len(seg)), seg)
				fixed := c.wantFixed && encap == sa.EncapUDP
				switch {
				case fixed && !valid:
					t.Errorf("the checksum does not verify over the addresses the packet arrived with: %x", seg[:min(len(seg), 24)])
				case !fixed && string(seg) != string(sent):
					t.Errorf("the segment changed:\n got %x\nwant %x", seg, sent)
				case fixed && string(seg[c.field+2:]) != string(sent[c.field+2:]):
					t.Errorf("more than the checksum changed:\n got %x\nwant %x", seg, sent)
				}
			})
		}
	}
}
