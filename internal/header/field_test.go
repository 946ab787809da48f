package header

import (
	"bytes"
	"net/netip"
	"testing"
)

func TestFields(t *testing.T) {
	v4 := make([]byte, IPv4Len+8)
	h4 := IPv4{TotalLen: IPv4Len + 8, ID: 0x1234, TTL: 64, Protocol: 17,
		Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("198.51.100.2")}
	h4.Marshal(v4)
	copy(v4[IPv4Len:], []byte{0x11, 0x94, 0x01, 0xf4, 0, 8, 0, 0})
	v6 := make([]byte, IPv6Len)
	h6 := IPv6{NextHeader: 59, HopLimit: 9,
		Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2")}
	h6.Marshal(v6)
	for _, tc := range []struct {
		name     string
		b        []byte
		version  uint8
		src, dst []byte // nil: no fixed header
		ttl      uint8
	}{
		{"ipv4", v4, 4, []byte{192, 0, 2, 1}, []byte{198, 51, 100, 2}, 64},
		{"ipv6", v6, 6, h6.Src.AsSlice(), h6.Dst.AsSlice(), 9},
		{"ipv4 cut", v4[:19], 4, nil, nil, 0},
		{"ipv6 cut", v6[:39], 6, nil, nil, 0},
		{"not ip", []byte{0x50, 0, 0, 0}, 5, nil, nil, 0},
		{"empty", nil, 0, nil, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if v := Version(tc.b); v != tc.version {
				t.Errorf("Version = %d, want %d", v, tc.version)
			}
			src, dst := AddrBytes(tc.b)
			if !bytes.Equal(src, tc.src) || !bytes.Equal(dst, tc.dst) || (src == nil) != (tc.src == nil) {
				t.Errorf("AddrBytes = % x, % x, want % x, % x", src, dst, tc.src, tc.dst)
			}
			if tc.src == nil {
				return
			}
			if got := TTL(tc.b); got != tc.ttl {
				t.Errorf("TTL = %d, want %d", got, tc.ttl)
			}
			b := append([]byte(nil), tc.b...)
			for _, ttl := range []uint8{tc.ttl - 1, 0, 255, 1} {
				SetTTL(b, ttl)
				if TTL(b) != ttl || tc.version == 4 && !Valid(0, b[:IPv4Len]) {
					t.Errorf("SetTTL(%d): TTL %d, checksum valid %v", ttl, TTL(b), Valid(0, b[:IPv4Len]))
				}
			}
		})
	}
	if id := IPv4ID(v4); id != 0x1234 {
		t.Errorf("IPv4ID = %#x, want 0x1234", id)
	}
	for _, id := range []uint16{0, 1, 0xffff, 0x8000} {
		SetIPv4ID(v4, id)
		if h, _, err := ParseIPv4(v4); err != nil || h.ID != id || !Valid(0, v4[:IPv4Len]) {
			t.Errorf("SetIPv4ID(%#x): %+v %v, checksum valid %v", id, h, err, Valid(0, v4[:IPv4Len]))
		}
	}
	if s, d := Ports(v4[IPv4Len:]); s != 4500 || d != 500 {
		t.Errorf("Ports = %d %d, want 4500 500", s, d)
	}
	df := append([]byte(nil), v4...)
	df[6] |= 0x40
	for _, c := range []struct {
		name string
		b    []byte
		want bool
	}{{"ipv4", v4, false}, {"ipv4 df", df, true}, {"ipv6", v6, false}} {
		if got := DF(c.b); got != c.want {
			t.Errorf("DF(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}

// fragPkt builds an IPv6 packet of the extension headers exts (next header
// values, each 8 bytes long; 44 a fragment header with offset fo, 51 AH)
// and then a UDP header.
func fragPkt(fo uint16, exts ...uint8) []byte {
	b := make([]byte, IPv6Len, IPv6Len+8*len(exts)+UDPLen)
	b[0] = 0x60
	at := 6
	for _, e := range exts {
		b[at] = e
		at = len(b)
		hdr := make([]byte, 8)
		switch e {
		case 44:
			hdr[2], hdr[3] = byte(fo>>8), byte(fo)
			hdr[4], hdr[5], hdr[6], hdr[7] = 0xca, 0xfe, 0, 1
		case 51:
			hdr[1] = 0 // (0 + 2) × 4 bytes
		}
		b = append(b, hdr...)
	}
	b[at] = 17
	return append(b, make([]byte, UDPLen)...)
}

func TestFragmentAndUpper(t *testing.T) {
	v4 := make([]byte, IPv4Len+UDPLen)
	h := IPv4{TotalLen: uint16(len(v4)), ID: 7, MF: true, FragOff: 1480, TTL: 64, Protocol: 17,
		Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")}
	h.Marshal(v4)
	whole4 := append([]byte(nil), v4...)
	whole4[6], whole4[7] = 0x40, 0 // DF only
	frag := func(off int, more bool, proto uint8) Frag {
		return Frag{Is: true, Offset: off, More: more, ID: 0xcafe0001, Proto: proto}
	}
	for _, tc := range []struct {
		name    string
		b       []byte
		f       Frag // of Fragment and Upper
		fOK     bool
		hl      int
		proto   uint8
		upperOK bool
		upperF  *Frag // Upper's, when it differs from Fragment's
	}{
		{"ipv4 fragment", v4, Frag{Is: true, Offset: 1480, More: true, ID: 7, Proto: 17}, true, IPv4Len, 17, true, nil},
		{"ipv4 whole", whole4, Frag{ID: 7, DF: true, Proto: 17}, true, IPv4Len, 17, true, nil},
		{"ipv6 whole", fragPkt(0), Frag{}, true, IPv6Len, 17, true, nil},
		{"ipv6 first fragment", fragPkt(1, 0, 44), frag(0, true, 17), true, 56, 17, true, nil},
		{"ipv6 atomic fragment", fragPkt(0, 44), frag(0, false, 17), true, 48, 17, true, nil},
		{"ipv6 later fragment stops", fragPkt(185<<3, 44, 60), frag(1480, false, 60), true, 48, 60, true, nil},
		{"ipv6 AH then UDP", fragPkt(0, 51), Frag{}, true, 48, 17, true, nil},
		{"ipv6 routing, destination options, fragment", fragPkt(1, 43, 60, 44), Frag{}, true, 64, 17, true, &Frag{Is: true, More: true, ID: 0xcafe0001, Proto: 17}},
		{"ipv6 extension header cut", fragPkt(0, 0)[:44], Frag{}, false, 0, 0, false, nil},
		{"not ip", []byte{0x50, 0, 0, 0}, Frag{}, false, 0, 0, false, nil},
		{"empty", nil, Frag{}, false, 0, 0, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if f, ok := Fragment(tc.b); f != tc.f || ok != tc.fOK {
				t.Errorf("Fragment = %+v %v, want %+v %v", f, ok, tc.f, tc.fOK)
			}
			want := tc.f
			if tc.upperF != nil {
				want = *tc.upperF
			}
			if !tc.upperOK {
				want = Frag{}
			}
			hl, proto, f, ok := Upper(tc.b)
			if hl != tc.hl || proto != tc.proto || f != want || ok != tc.upperOK {
				t.Errorf("Upper = %d %d %+v %v, want %d %d %+v %v", hl, proto, f, ok, tc.hl, tc.proto, want, tc.upperOK)
			}
		})
	}
}

// The field readers and writers allocate nothing.
func TestFieldsAllocate(t *testing.T) {
	p := fragPkt(1, 0, 44)
	v4 := make([]byte, IPv4Len)
	h := IPv4{TotalLen: IPv4Len, TTL: 3, Protocol: 50, Dst: netip.MustParseAddr("192.0.2.9")}
	h.Marshal(v4)
	if n := testing.AllocsPerRun(100, func() {
		Fragment(p)
		Upper(p)
		AddrBytes(p)
		SetTTL(v4, TTL(v4)+1)
		SetIPv4ID(v4, IPv4ID(v4)+1)
	}); n != 0 {
		t.Errorf("%v allocations a run, want 0", n)
	}
}
