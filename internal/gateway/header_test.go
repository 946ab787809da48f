package gateway

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/offload/cpu"

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
		return newSAHeader(c)
	}
	tunnel6 := newSAHeader(&sa.SA{Mode: sa.Tunnel, Dst: mustAddr("2001:db8::2")})
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
		{"transport keeps its own", newSAHeader(&sa.SA{Mode: sa.Transport, Dst: mustAddr("198.51.100.2")}), ip4(12<<2|ect1, false), outer{tos: 12<<2 | ect1, ttl: 64, fragment: true}},
	}
	for _, tc := range cases {
		if got := outerOf(tc.h, tc.pkt); got != tc.want {
			t.Errorf("%s: outer %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// outer is the outer header setOuter gives a packet.
type outer struct {
	tos, ttl uint8
	fragment bool
}

func outerOf(h *saHeader, pkt []byte) outer {
	var p esp.Packet
	p.Reset(pkt, 0, len(pkt))
	p.Fragment = true // setOuter decides it, whatever was there
	h.setOuter(&p)
	return outer{p.TOS, p.TTL, p.Fragment}
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
		h := newSAHeader(c)
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
					if got := header.TrafficClass(pkt); got != wantDSCP<<2|uint8(want) {
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

// TestHandleICMP: a fragmentation-needed quoting one of an outbound SA's
// ESP packets lowers that SA's path MTU (never below the floor, never up),
// the inner limit follows, reports about other packets are ignored, and
// the learned value expires.
func TestHandleICMP(t *testing.T) {
	cfg := &sa.SA{SPI: 0x1001, Mode: sa.Tunnel, Src: mustAddr("198.51.100.1"), Dst: mustAddr("198.51.100.129"),
		Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, EncKey: make(sa.Key, 20), ReplayWindow: 64}
	g := New(nopDevice{}, nil, func(*sa.SA) Conn { return nopConn{} }, cpu.New(), Options{Local: []netip.Addr{cfg.Src}, InnerMTU: 1438, OuterMTU: 1500, Log: slog.New(slog.DiscardHandler)})
	if err := g.Load([]*sa.SA{cfg}, nil); err != nil {
		t.Fatal(err)
	}
	st := g.current()
	s := st.out[0x1001]
	h := headerOf(s)
	report := func(mtu uint16, spi uint32, dst string) []byte {
		m := make([]byte, 8+20+8)
		m[0], m[1] = 3, 4
		binary.BigEndian.PutUint16(m[6:], mtu)
		q := m[8:]
		q[0], q[9] = 0x45, 50
		binary.BigEndian.PutUint16(q[2:], 1500)
		copy(q[12:], cfg.Src.AsSlice())
		copy(q[16:], mustAddr(dst).AsSlice())
		binary.BigEndian.PutUint32(q[20:], spi)
		return m
	}
	now := time.Now()
	steps := []struct {
		name  string
		msg   []byte
		mtu   int // the SA's learned path MTU after it
		count *atomic.Uint64
	}{
		{"unknown SPI", report(1200, 0x9999, "198.51.100.129"), 0, &g.pmtu.Ignored},
		{"other peer", report(1200, 0x1001, "198.51.100.200"), 0, &g.pmtu.Ignored},
		{"lowers", report(1200, 0x1001, "198.51.100.129"), 1200, &g.pmtu.Updates},
		{"not higher", report(1400, 0x1001, "198.51.100.129"), 1200, &g.pmtu.Ignored},
		{"floor", report(300, 0x1001, "198.51.100.129"), minPMTU4, &g.pmtu.Updates},
	}
	for _, st := range steps {
		before := st.count.Load()
		g.HandleICMP(st.msg, false, now)
		if got := int(h.path.mtu.Load()); got != st.mtu {
			t.Errorf("%s: path MTU %d, want %d", st.name, got, st.mtu)
		}
		if st.count.Load() != before+1 {
			t.Errorf("%s: not counted where expected", st.name)
		}
	}
	want, _ := InnerMTU(minPMTU4, cfg)
	if got := g.innerLimit(h); got != want {
		t.Errorf("inner limit %d at path MTU %d, want %d", got, minPMTU4, want)
	}
	g.expirePMTU(g.current(), now.Add(DefaultPMTUExpiry-time.Second))
	if h.path.mtu.Load() == 0 {
		t.Errorf("path MTU expired early")
	}
	g.expirePMTU(g.current(), now.Add(DefaultPMTUExpiry+time.Second))
	if h.path.mtu.Load() != 0 || g.innerLimit(h) != 1438 {
		t.Errorf("path MTU did not expire: %d, inner limit %d", h.path.mtu.Load(), g.innerLimit(h))
	}
	// A reload keeps what was learned for an SA it keeps.
	g.HandleICMP(report(1000, 0x1001, "198.51.100.129"), false, now)
	if err := g.Load([]*sa.SA{cfg}, nil); err != nil {
		t.Fatal(err)
	}
	st2 := g.current()
	if got := headerOf(st2.out[0x1001]).path.mtu.Load(); got != 1000 {
		t.Errorf("after reload path MTU %d, want 1000", got)
	}
}

type nopDevice struct{}

func (nopDevice) Read([][]byte, []int, int) (int, error) { return 0, io.EOF }
func (nopDevice) Write(b [][]byte, _ int) (int, error)   { return len(b), nil }
func (nopDevice) BatchSize() int                         { return 1 }
func (nopDevice) Close() error                           { return nil }

type nopConn struct{}

func (nopConn) Receive([]*esp.Packet) (int, error) { return 0, io.EOF }
func (nopConn) Send(p []*esp.Packet) (int, error)  { return len(p), nil }
func (nopConn) Close() error                       { return nil }

// BenchmarkHeaderWork is what the tunnel header costs a packet — the outer
// header decided on the way out, RFC 6040's folding (with a rewrite) on the
// way in — beside the copy of a 1400-byte packet as the reference in the
// same run.
func BenchmarkHeaderWork(b *testing.B) {
	h := newSAHeader(&sa.SA{Mode: sa.Tunnel, Dst: mustAddr("198.51.100.2"), DecapDSCP: sa.DecapCopy})
	pkt := ip4(34<<2|ect0, true)
	b.Run("outer+decapsulate", func(b *testing.B) {
		var p esp.Packet
		p.Reset(pkt, 0, len(pkt))
		for range b.N {
			h.setOuter(&p)
			pkt[1] = 34<<2 | ect0
			h.decapsulate(pkt, 10<<2|ce)
		}
	})
	src, dst := make([]byte, 1400), make([]byte, 1400)
	b.Run("reference-copy-1400B", func(b *testing.B) {
		for range b.N {
			copy(dst, src)
		}
	})
}

// TestSAHeaderIsOneLine checks that an SA's outer-header state, which
// every packet reads, is one 64-byte object (a size class whose objects
// start on a cache line).
func TestSAHeaderIsOneLine(t *testing.T) {
	if n := unsafe.Sizeof(saHeader{}); n != 64 {
		t.Errorf("saHeader is %d bytes, want 64", n)
	}
}
