package impair

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/header"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

func TestECNCE(t *testing.T) {
	for _, k := range []kind{rawESP4, udpESP4, rawESP6, udpESP6} {
		s := newRun(t, cfgWith(func(c *Config) { c.ECNCE = 100 })).s
		s.Push(time.Now(), frame(t, k, 1, 300))
		p := s.Pop(time.Now())
		if p == nil {
			t.Fatalf("kind %d: nothing out", k)
		}
		pkt := gopacket.NewPacket(p.Bytes(), layers.LayerTypeEthernet, gopacket.Default)
		if e := pkt.ErrorLayer(); e != nil {
			t.Fatalf("kind %d: %v", k, e.Error())
		}
		var ecn uint8
		if ip, ok := pkt.NetworkLayer().(*layers.IPv4); ok {
			ecn = ip.TOS & 3
			if !header.Valid(0, p.Bytes()[14:14+int(ip.IHL)*4]) {
				t.Errorf("kind %d: IPv4 header checksum %#x does not verify after marking", k, ip.Checksum)
			}
		} else {
			ecn = pkt.NetworkLayer().(*layers.IPv6).TrafficClass & 3
		}
		if ecn != 3 {
			t.Errorf("kind %d: ECN %d after ecn-ce 100, want CE (3)", k, ecn)
		}
		if c := s.Counters(); c.CEMarked != 1 {
			t.Errorf("kind %d: CEMarked %d", k, c.CEMarked)
		}
	}
}

// TestPMTU: a DF (or IPv6) ESP packet over pmtu is dropped and answered
// with the right ICMP error toward its sender; smaller ones and ones
// without DF pass.
func TestPMTU(t *testing.T) {
	for _, k := range []kind{rawESP4, udpESP4, rawESP6, udpESP6} {
		s := newRun(t, cfgWith(func(c *Config) { c.PMTU = 1280 })).s
		now := time.Now()
		s.Push(now, frame(t, k, 1, 1200)) // fits
		big := frame(t, k, 2, 1400)
		s.Push(now, big)
		if p := s.Pop(now); p == nil || espSeq(t, p.Bytes()) != 1 {
			t.Fatalf("kind %d: the packet that fits did not pass", k)
		}
		if p := s.Pop(now); p != nil {
			t.Fatalf("kind %d: the packet over the MTU passed", k)
		}
		back := s.PopBack()
		if back == nil {
			t.Fatalf("kind %d: no ICMP error", k)
		}
		pkt := gopacket.NewPacket(back.Bytes(), layers.LayerTypeEthernet, gopacket.Default)
		if e := pkt.ErrorLayer(); e != nil {
			t.Fatalf("kind %d: ICMP error does not parse: %v", k, e.Error())
		}
		origSrc := []byte{192, 0, 2, 1}
		if k == rawESP6 || k == udpESP6 {
			ip := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
			ic := pkt.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
			if ic.TypeCode.Type() != 2 || binary.BigEndian.Uint32(ic.Payload[0:4]) != 1280 || !ip.DstIP.Equal(net6("2001:db8::1")) {
				t.Errorf("kind %d: got %v to %v with %x", k, ic.TypeCode, ip.DstIP, ic.Payload[:4])
			}
			if err := ic.SetNetworkLayerForChecksum(ip); err != nil {
				t.Fatal(err)
			}
		} else {
			ip := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			ic := pkt.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
			if ic.TypeCode.Type() != 3 || ic.TypeCode.Code() != 4 || ic.Seq != 1280 || !ip.DstIP.Equal(origSrc) {
				t.Errorf("kind %d: got %v mtu %d to %v", k, ic.TypeCode, ic.Seq, ip.DstIP)
			}
			if len(ic.Payload) < 28 || !bytes.Equal(ic.Payload, big[14:14+len(ic.Payload)]) {
				t.Errorf("kind %d: the quote is not the original packet", k)
			}
			if !header.Valid(0, back.Bytes()[14+20:]) {
				t.Errorf("kind %d: ICMP checksum does not verify", k)
			}
		}
		s.Release(back)
		if c := s.Counters(); c.TooBig != 1 || c.TooBigReported != 1 || c.Received != c.Emitted+c.Dropped() {
			t.Errorf("kind %d: counters %+v", k, c)
		}
	}
	// Without DF the packet passes.
	s := newRun(t, cfgWith(func(c *Config) { c.PMTU = 1000 })).s
	f := frame(t, rawESP4, 1, 1400)
	f[14+6] &^= 0x40
	binary.BigEndian.PutUint16(f[14+10:], 0)
	s.Push(time.Now(), f)
	if p := s.Pop(time.Now()); p == nil || s.PopBack() != nil {
		t.Errorf("a packet without DF was stopped")
	}
}
