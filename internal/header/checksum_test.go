package header

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

// simpleAdd is RFC 1071's loop, 16 bits at a time.
func simpleAdd(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)&1 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return fold32(sum)
}

func FuzzAdd(f *testing.F) {
	f.Add(uint16(0), []byte{})
	f.Add(uint16(0xffff), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint16(1234), make([]byte, 1500))
	f.Fuzz(func(t *testing.T, init uint16, b []byte) {
		if got, want := Add(uint32(init), b), simpleAdd(uint32(init), b); fold32(got) != fold32(want) && !(got == 0xffff && want == 0 || got == 0 && want == 0xffff) {
			t.Fatalf("Add(%#x, % x) = %#x, want %#x", init, b, got, want)
		}
	})
}

func BenchmarkAdd1500(b *testing.B) {
	buf := make([]byte, 1500)
	b.SetBytes(1500)
	for b.Loop() {
		Add(0, buf)
	}
}

func TestUpdate(t *testing.T) {
	h, _ := hex.DecodeString("450000730000400040110000c0a80001c0a800c7")
	IPv4Header(h)
	old := append([]byte(nil), h[8:10]...)
	h[8]-- // the TTL, as a router takes it
	got := Update(uint16(h[10])<<8|uint16(h[11]), old, h[8:10])
	IPv4Header(h)
	if want := uint16(h[10])<<8 | uint16(h[11]); got != want {
		t.Fatalf("incremental %#04x, recomputed %#04x", got, want)
	}
}

func TestHeaderLengths(t *testing.T) {
	v4, _ := hex.DecodeString("450000730000400040110000c0a80001c0a800c7")
	v4 = append(v4, make([]byte, 0x73-20+4)...) // payload and 4 bytes of link padding
	v6 := make([]byte, 40+8+8+20)
	v6[0], v6[4], v6[5], v6[6] = 0x60, 0, 36, 0 // hop-by-hop, then
	v6[40], v6[41] = 44, 0                      // a fragment header, then
	v6[48] = 6                                  // TCP
	for _, tc := range []struct {
		name             string
		b                []byte
		total, hl, at    int
		proto            uint8
		frag, okLen, okH bool
	}{
		{"ipv4", v4, 0x73, 20, 9, 17, false, true, true},
		{"ipv4 options", append([]byte{0x46}, v4[1:]...), 0x73, 24, 9, 17, false, true, true},
		{"ipv4 ihl 4", append([]byte{0x44}, v4[1:]...), 0, 0, 0, 0, false, false, false},
		{"ipv4 cut short", v4[:0x70], 0, 20, 9, 17, false, false, true},
		{"ipv6 extension headers", v6, 76, 56, 48, 6, true, true, true},
		{"ipv6 header cut", v6[:44], 0, 0, 0, 0, false, false, false},
		{"not ip", []byte{0x50, 1, 2, 3}, 0, 0, 0, 0, false, false, false},
		{"empty", nil, 0, 0, 0, 0, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n, ok := PacketLength(tc.b); ok != tc.okLen || ok && n != tc.total {
				t.Errorf("PacketLength %d %v, want %d %v", n, ok, tc.total, tc.okLen)
			}
			hl, proto, at, frag, ok := Header(tc.b)
			if ok != tc.okH || ok && (hl != tc.hl || proto != tc.proto || at != tc.at || frag != tc.frag) {
				t.Errorf("Header %d %d %d %v %v, want %d %d %d %v %v", hl, proto, at, frag, ok, tc.hl, tc.proto, tc.at, tc.frag, tc.okH)
			}
		})
	}
}

func TestEthernetIP(t *testing.T) {
	eth := func(types ...uint16) []byte {
		b := make([]byte, 12)
		for _, et := range types {
			b = append(b, byte(et>>8), byte(et), 0, 7)
		}
		return append(b[:len(b)-2], 0x45, 0)
	}
	tests := []struct {
		frame []byte
		off   int
		ok    bool
	}{
		{eth(0x0800), 14, true},
		{eth(0x86dd), 14, true},
		{eth(0x8100, 0x0800), 18, true},
		{eth(0x88a8, 0x8100, 0x9100, 0x86dd), 26, true},
		{eth(0x8100, 0x8100, 0x8100, 0x8100, 0x0800), 0, false}, // four tags
		{eth(0x0806), 0, false},                                 // ARP
		{eth(0x8100)[:14], 0, false},                            // a tag and nothing after it
		{make([]byte, 13), 0, false},
	}
	for i, tt := range tests {
		if off, ok := EthernetIP(tt.frame); off != tt.off || ok != tt.ok {
			t.Errorf("frame %d (% x): %d %v, want %d %v", i, tt.frame, off, ok, tt.off, tt.ok)
		}
	}
}
