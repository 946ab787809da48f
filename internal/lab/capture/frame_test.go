package capture

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/sa"
)

// TestOpenerClassifies checks what Open makes of packets that are not a
// whole ESP packet of a known SA.
func TestOpenerClassifies(t *testing.T) {
	cfg := randomSA(suiteCase{sa.Suite{Cipher: sa.CipherAESCTR, Auth: sa.AuthHMACSHA1_96}, 20}, sa.Tunnel, false, sa.EncapUDP)
	cfg6 := randomSA(suiteCase{sa.Suite{Cipher: sa.CipherAESGCM16}, 20}, sa.Transport, true, sa.EncapNone)
	sas := newSAs(t, cfg, cfg6)
	o, err := NewOpener(sas)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := NewSealer(sas[0]).Seal(context.Background(), udpPacket(false, 100, 1))
	if err != nil {
		t.Fatal(err)
	}
	good := append([]byte(nil), sealed...)
	sealed6, err := NewSealer(sas[1]).Seal(context.Background(), udpPacket(true, 100, 2))
	if err != nil {
		t.Fatal(err)
	}
	good6 := append([]byte(nil), sealed6...)

	udp := func(payload []byte, dport uint16) []byte {
		p := udpPacket(false, 28+len(payload), 3)
		binary.BigEndian.PutUint16(p[20:], 4500)
		binary.BigEndian.PutUint16(p[22:], dport)
		copy(p[28:], payload)
		return p
	}
	fragment4 := append([]byte(nil), good...)
	fragment4[6] |= 0x20 // more fragments
	// IPv6 with a fragment header in front of ESP.
	fragment6 := append(append(append([]byte(nil), good6[:40]...), 50, 0, 0, 1, 0, 0, 0, 7), good6[40:]...)
	fragment6[6] = 44
	binary.BigEndian.PutUint16(fragment6[4:], uint16(len(fragment6)-40))
	unknown := append([]byte(nil), good...)
	unknown[28] ^= 0x80
	short := udp([]byte{1, 2, 3, 4, 5, 6}, 4500)

	cases := []struct {
		name   string
		pkt    []byte
		skip   Skip
		reject esp.Reason
	}{
		{"good", good, NotSkipped, esp.OK},
		{"good-v6-transport", good6, NotSkipped, esp.OK},
		{"nat-keepalive", udp([]byte{0xff}, 4500), NATKeepalive, esp.OK},
		{"non-esp-marker", udp([]byte{0, 0, 0, 0, 1, 2, 3}, 4500), NonESPMarker, esp.OK},
		{"other-udp", udp([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, 53), NotSkipped, esp.UnknownSPI}, // sport 4500
		{"ipv4-fragment", fragment4, IPFragment, esp.OK},
		{"ipv6-fragment", fragment6, IPFragment, esp.OK},
		{"not-ip", []byte{0x10, 0, 0}, MalformedIP, esp.OK},
		{"ipv4-length-past-data", good[:50], MalformedIP, esp.OK},
		{"unknown-spi", unknown, NotSkipped, esp.UnknownSPI},
		{"too-short-for-an-spi", short[:28+3], NotSkipped, esp.OK},
	}
	// A 3-byte UDP payload is not ESP's 8-byte header: truncated, no SA.
	cases[len(cases)-1].pkt = fixLen(short[:28+3])
	cases[len(cases)-1].reject = esp.Truncated
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := o.Open(context.Background(), c.pkt)
			if err != nil {
				t.Fatal(err)
			}
			if res.Skip != c.skip || res.Reject != c.reject {
				t.Fatalf("skip %q reject %v, want %q %v", res.Skip, res.Reject, c.skip, c.reject)
			}
		})
	}
}

// fixLen sets an IPv4 packet's total and UDP lengths to its size.
func fixLen(p []byte) []byte {
	p = append([]byte(nil), p...)
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	binary.BigEndian.PutUint16(p[24:], uint16(len(p)-20))
	return p
}
