package inetsum

import (
	"encoding/hex"
	"testing"
)

// The IPv4 header of the classic example on Wikipedia's "IPv4 header
// checksum" page, whose checksum is 0xb861.
func TestIPv4Header(t *testing.T) {
	h, _ := hex.DecodeString("450000730000400040110000c0a80001c0a800c7")
	IPv4Header(h)
	if got := uint16(h[10])<<8 | uint16(h[11]); got != 0xb861 {
		t.Fatalf("checksum %#04x, want 0xb861", got)
	}
	if !Valid(0, h) {
		t.Fatal("header with its checksum does not verify")
	}
}

func TestL4RoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		src, dst []byte
		proto    uint8
		field    int
		seg      []byte
	}{
		{"udp4", []byte{192, 0, 2, 1}, []byte{192, 0, 2, 2}, 17, OffsetUDP, []byte{0x11, 0x94, 0x11, 0x94, 0, 13, 0, 0, 1, 2, 3, 4, 5}},
		{"tcp6", make([]byte, 16), append(make([]byte, 15), 1), 6, OffsetTCP, make([]byte, 20)},
		{"icmp4", []byte{192, 0, 2, 1}, []byte{192, 0, 2, 2}, 1, OffsetICMP, []byte{8, 0, 0, 0, 0, 1, 0, 1, 0xaa}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			L4(tt.seg, tt.src, tt.dst, tt.proto, tt.field)
			var p uint32
			if tt.proto != 1 {
				p = Pseudo(tt.src, tt.dst, tt.proto, len(tt.seg))
			}
			if !Valid(p, tt.seg) {
				t.Fatalf("%x does not verify", tt.seg)
			}
			tt.seg[len(tt.seg)-1] ^= 1
			if Valid(p, tt.seg) {
				t.Fatal("a flipped bit still verifies")
			}
		})
	}
}
