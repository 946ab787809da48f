package header

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// IPv4 headers written by Marshal are the known bytes, verify, and parse
// back to the same fields.
func TestIPv4RoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    IPv4
		want string
	}{
		{"wikipedia example", IPv4{TotalLen: 0x73, DF: true, TTL: 64, Protocol: 17,
			Src: netip.MustParseAddr("192.168.0.1"), Dst: netip.MustParseAddr("192.168.0.199")},
			"45000073 00004000 40110000 c0a80001 c0a800c7"},
		{"ESP with TOS, ID", IPv4{TOS: 0xb8, TotalLen: 1420, ID: 0x1234, TTL: 7, Protocol: 50,
			Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("198.51.100.2")},
			"45b8058c 12340000 07320000 c0000201 c6336402"},
		{"fragment, more follow", IPv4{TotalLen: 1500, ID: 9, MF: true, FragOff: 1480, TTL: 64, Protocol: 17,
			Src: netip.MustParseAddr("203.0.113.5"), Dst: netip.MustParseAddr("::ffff:203.0.113.6")},
			"450005dc 000920b9 40110000 cb007105 cb007106"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, IPv4Len)
			tc.h.Marshal(b)
			if !Valid(0, b) {
				t.Errorf("% x: checksum does not verify", b)
			}
			want := mustHex(t, strings.ReplaceAll(tc.want, " ", ""))
			got := append([]byte(nil), b...)
			got[10], got[11] = 0, 0 // the checksum aside
			if !bytes.Equal(got, want) {
				t.Errorf("Marshal = % x, want % x (checksum aside)", got, want)
			}
			back, hl, err := ParseIPv4(b)
			if err != nil || hl != IPv4Len {
				t.Fatalf("ParseIPv4 = %d, %v", hl, err)
			}
			w := tc.h
			w.Dst = w.Dst.Unmap()
			if back != w {
				t.Errorf("ParseIPv4 = %+v, want %+v", back, w)
			}
		})
	}
	// The Wikipedia page's checksum.
	b := make([]byte, IPv4Len)
	h := IPv4{TotalLen: 0x73, DF: true, TTL: 64, Protocol: 17, Src: netip.MustParseAddr("192.168.0.1"), Dst: netip.MustParseAddr("192.168.0.199")}
	h.Marshal(b)
	if b[10] != 0xb8 || b[11] != 0x61 {
		t.Errorf("checksum %02x%02x, want b861", b[10], b[11])
	}
	// Put leaves the checksum and an unset source to the kernel.
	h.Src = netip.Addr{}
	h.Put(b)
	if !bytes.Equal(b[10:16], make([]byte, 6)) {
		t.Errorf("Put: checksum and source % x, want zeros", b[10:16])
	}
}

func TestIPv6RoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    IPv6
		want string
	}{
		{"ESP", IPv6{TrafficClass: 0xb8, FlowLabel: 0x12345, PayloadLen: 1400, NextHeader: 50, HopLimit: 64,
			Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2")},
			"6b812345057832402001 0db8000000000000000000000001 20010db8000000000000000000000002"},
		{"hop-by-hop first", IPv6{NextHeader: 0, HopLimit: 1, PayloadLen: 8,
			Src: netip.MustParseAddr("2001:db8:1::a"), Dst: netip.MustParseAddr("2001:db8:2::b")},
			"6000000000080001 20010db80001000000000000 0000000a 20010db80002000000000000 0000000b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, IPv6Len)
			tc.h.Marshal(b)
			if want := mustHex(t, strings.ReplaceAll(tc.want, " ", "")); !bytes.Equal(b, want) {
				t.Errorf("Marshal = % x, want % x", b, want)
			}
			back, err := ParseIPv6(b)
			if err != nil || back != tc.h {
				t.Errorf("ParseIPv6 = %+v, %v, want %+v", back, err, tc.h)
			}
		})
	}
}

func TestICMPRoundTrip(t *testing.T) {
	for _, h := range []ICMP{
		{Type: ICMPUnreachable, Code: ICMPFragNeeded, Rest: 1400},
		{Type: ICMPv6PacketTooBig, Rest: 1280},
		{Type: 8, Rest: 0x00010002}, // echo request, id 1 seq 2
	} {
		b := make([]byte, ICMPLen+4)
		h.Marshal(b)
		copy(b[ICMPLen:], "ping")
		ICMPChecksum(b)
		if !Valid(0, b) {
			t.Errorf("%+v: checksum does not verify", h)
		}
		if back, err := ParseICMP(b); err != nil || back != h {
			t.Errorf("ParseICMP = %+v, %v, want %+v", back, err, h)
		}
	}
}

// Malformed headers are refused with an error that says what is wrong.
func TestParseMalformed(t *testing.T) {
	v4 := mustHex(t, "450000730000400040110000c0a80001c0a800c7")
	for _, tc := range []struct {
		name  string
		parse func() error
		want  error
	}{
		{"IPv4 short", func() error { _, _, err := ParseIPv4(v4[:19]); return err }, ErrShort},
		{"IPv4 version 6", func() error { _, _, err := ParseIPv4(append([]byte{0x65}, v4[1:]...)); return err }, ErrVersion},
		{"IPv4 IHL 4", func() error { _, _, err := ParseIPv4(append([]byte{0x44}, v4[1:]...)); return err }, ErrLength},
		{"IPv4 IHL past the bytes", func() error { _, _, err := ParseIPv4(append([]byte{0x46}, v4[1:]...)); return err }, ErrLength},
		{"IPv4 total below header", func() error {
			b := append([]byte(nil), v4...)
			b[2], b[3] = 0, 19
			_, _, err := ParseIPv4(b)
			return err
		}, ErrLength},
		{"IPv6 short", func() error { _, err := ParseIPv6(make([]byte, 39)); return err }, ErrShort},
		{"IPv6 version 4", func() error { _, err := ParseIPv6(append(v4, make([]byte, 20)...)); return err }, ErrVersion},
		{"ICMP short", func() error { _, err := ParseICMP(make([]byte, 7)); return err }, ErrShort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse()
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			t.Log(err)
		})
	}
}

// SetTrafficClass keeps an IPv4 checksum right by RFC 1624's update, and
// rewrites only IPv6's traffic class bits.
func TestSetTrafficClass(t *testing.T) {
	for _, tc := range []uint8{0, 1, 3, 0xb8, 0xbb, 0xff} {
		b := make([]byte, IPv4Len)
		h := IPv4{TOS: 0x02, TotalLen: 100, TTL: 64, Protocol: 6, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")}
		h.Marshal(b)
		SetTrafficClass(b, tc)
		if TrafficClass(b) != tc || !Valid(0, b) {
			t.Errorf("IPv4 TOS %#x: got %#x, checksum valid %v", tc, TrafficClass(b), Valid(0, b))
		}
		b6 := make([]byte, IPv6Len)
		h6 := IPv6{TrafficClass: 0x02, FlowLabel: 0xfffff, NextHeader: 17, HopLimit: 9}
		h6.Marshal(b6)
		SetTrafficClass(b6, tc)
		if back, _ := ParseIPv6(b6); back.TrafficClass != tc || back.FlowLabel != 0xfffff || TrafficClass(b6) != tc {
			t.Errorf("IPv6 traffic class %#x: got %+v", tc, back)
		}
	}
}

// WriteIP writes the minimal header a gateway gives an opened packet,
// and SetLength keeps lengths and the IPv4 checksum right after a change.
func TestWriteIPAndSetLength(t *testing.T) {
	buf := make([]byte, 64)
	n := WriteIP(buf, 60, netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), 50, 100)
	h, _, err := ParseIPv4(buf[40:60])
	if n != IPv4Len || err != nil || h.TotalLen != 120 || h.TTL != 64 || h.Protocol != 50 || h.DF || !Valid(0, buf[40:60]) {
		t.Errorf("WriteIP v4 = %d %+v %v", n, h, err)
	}
	SetLength(buf[40:60], 90)
	if h, _, _ := ParseIPv4(buf[40:60]); h.TotalLen != 90 || !Valid(0, buf[40:60]) {
		t.Errorf("SetLength v4: %+v", h)
	}
	n = WriteIP(buf, 60, netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"), 50, 100)
	h6, err := ParseIPv6(buf[20:60])
	if n != IPv6Len || err != nil || h6.PayloadLen != 100 || h6.HopLimit != 64 || h6.NextHeader != 50 {
		t.Errorf("WriteIP v6 = %d %+v %v", n, h6, err)
	}
	SetLength(buf[20:60], 140)
	if h6, _ := ParseIPv6(buf[20:60]); h6.PayloadLen != 100 {
		t.Errorf("SetLength v6: payload %d, want 100", h6.PayloadLen)
	}
}
