package gateway

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/espgw/espgw/sa"
)

// ip4 is a 20-byte IPv4 header with the given TOS and DF, checksummed.
func ip4(tos uint8, df bool) []byte {
	h := make([]byte, 28)
	h[0], h[1] = 0x45, tos
	binary.BigEndian.PutUint16(h[2:], 28)
	if df {
		h[6] = 0x40
	}
	h[8], h[9] = 64, 17
	copy(h[12:], []byte{192, 0, 2, 10, 203, 0, 113, 10})
	binary.BigEndian.PutUint16(h[10:], ^sum16(h[:20]))
	return h
}

func ip6(tc uint8) []byte {
	h := make([]byte, 48)
	binary.BigEndian.PutUint32(h, 6<<28|uint32(tc)<<20|0x12345)
	binary.BigEndian.PutUint16(h[4:], 8)
	h[6], h[7] = 17, 64
	return h
}

func sum16(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

func TestOuterFor(t *testing.T) {
	tunnel4 := func(mod func(*sa.SA)) *saHeader {
		c := &sa.SA{Mode: sa.Tunnel}
		if mod != nil {
			mod(c)
		}
		c.Dst = mustAddr("198.51.100.2")
		return newSAHeader(c, nil)
	}
	tunnel6 := newSAHeader(&sa.SA{Mode: sa.Tunnel, Dst: mustAddr("2001:db8::2")}, nil)
	cases := []struct {
		name string
		h    *saHeader
		pkt  []byte
		want outer
	}{
		{"copy DSCP and ECN, DF set", tunnel4(nil), ip4(46<<2|ect0, true), outer{tos: 46<<2 | ect0, ttl: 64}},
		{"copy CE (RFC 6040 normal mode)", tunnel4(nil), ip4(10<<2|ce, true), outer{tos: 10<<2 | ce, ttl: 64}},
		{"copy DF clear", tunnel4(nil), ip4(0, false), outer{ttl: 64, fragment: true}},
		{"IPv6 inner gets DF", tunnel4(nil), ip6(34<<2 | ect1), outer{tos: 34<<2 | ect1, ttl: 64}},
		{"fixed DSCP keeps ECN", tunnel4(func(c *sa.SA) { c.DSCP = sa.DSCP{Fixed: true, Value: 8} }), ip4(46<<2|ect1, true), outer{tos: 8<<2 | ect1, ttl: 64}},
		{"fixed DSCP 0", tunnel4(func(c *sa.SA) { c.DSCP = sa.DSCP{Fixed: true} }), ip6(46<<2 | ce), outer{tos: ce, ttl: 64}},
		{"df set", tunnel4(func(c *sa.SA) { c.DF = sa.DFSet }), ip4(0, false), outer{ttl: 64}},
		{"df clear", tunnel4(func(c *sa.SA) { c.DF = sa.DFClear }), ip4(0, true), outer{ttl: 64, fragment: true}},
		{"ttl", tunnel4(func(c *sa.SA) { c.TTL = 7 }), ip4(0, true), outer{ttl: 7}},
		{"IPv6 outer has no DF", tunnel6, ip4(ect0, false), outer{tos: ect0, ttl: 64}},
		{"transport keeps its own", newSAHeader(&sa.SA{Mode: sa.Transport, Dst: mustAddr("198.51.100.2")}, nil), ip4(12<<2|ect1, false), outer{tos: 12<<2 | ect1, ttl: 64, fragment: true}},
	}
	for _, tc := range cases {
		if got := tc.h.outerFor(tc.pkt); got != tc.want {
			t.Errorf("%s: outer %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestDecapsulateECN walks RFC 6040 §4.2's table, every cell, for IPv4
// and IPv6 inner packets, with the DSCP kept and copied.
func TestDecapsulateECN(t *testing.T) {
	names := [4]string{"Not-ECT", "ECT(1)", "ECT(0)", "CE"}
	// table[inner][outer]; -1 is drop.
	table := [4][4]int{
		notECT: {notECT, notECT, notECT, -1},
		ect1:   {ect1, ect1, ect1, ce},
		ect0:   {ect0, ect1, ect0, ce},
		ce:     {ce, ce, ce, ce},
	}
	for _, copyDSCP := range []bool{false, true} {
		c := &sa.SA{Mode: sa.Tunnel, Dst: mustAddr("198.51.100.2")}
		if copyDSCP {
			c.DecapDSCP = sa.DecapCopy
		}
		h := newSAHeader(c, nil)
		for in := range 4 {
			for out := range 4 {
				for _, v := range []int{4, 6} {
					name := fmt.Sprintf("IPv%d inner %s, outer %s, copy DSCP %v", v, names[in], names[out], copyDSCP)
					var pkt []byte
					if v == 4 {
						pkt = ip4(20<<2|uint8(in), true)
					} else {
						pkt = ip6(20<<2 | uint8(in))
					}
					outerTC := uint8(40<<2 | out)
					ok := h.decapsulate(pkt, outerTC)
					want := table[in][out]
					if want < 0 {
						if ok {
							t.Errorf("%s: forwarded, want drop", name)
						}
						continue
					}
					if !ok {
						t.Errorf("%s: dropped, want %s", name, names[want])
						continue
					}
					wantDSCP := uint8(20)
					if copyDSCP {
						wantDSCP = 40
					}
					if got := trafficClass(pkt); got != wantDSCP<<2|uint8(want) {
						t.Errorf("%s: inner TC %#x, want %#x", name, got, wantDSCP<<2|uint8(want))
					}
					if v == 4 && sum16(pkt[:20]) != 0xffff {
						t.Errorf("%s: IPv4 header checksum wrong after the rewrite", name)
					}
					if v == 6 && binary.BigEndian.Uint32(pkt)&0xfffff != 0x12345 {
						t.Errorf("%s: flow label changed", name)
					}
				}
			}
		}
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
