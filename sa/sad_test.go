package sa

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func saTo(spi uint32, dst string) *SA {
	s := testSA()
	s.SPI = spi
	s.Dst = netip.MustParseAddr(dst)
	return s
}

func TestSADLookup(t *testing.T) {
	a := saTo(0x1001, "192.0.2.2")
	b := saTo(0x1001, "192.0.2.3") // same SPI, another destination
	c := saTo(0x2002, "192.0.2.2")
	d, err := NewSAD([]*SA{a, b, c})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		spi  uint32
		dst  string
		want *SA
		any  *SA
	}{
		{0x1001, "192.0.2.2", a, a},
		{0x1001, "192.0.2.3", b, a},
		{0x2002, "192.0.2.2", c, c},
		{0x2002, "192.0.2.3", nil, c},
		{0x3003, "192.0.2.2", nil, nil},
	}
	for _, tc := range cases {
		if got := d.LookupDst(tc.spi, netip.MustParseAddr(tc.dst)); got != tc.want {
			t.Errorf("LookupDst(%#x, %s) = %v, want %v", tc.spi, tc.dst, got, tc.want)
		}
		if got := d.Lookup(tc.spi); got != tc.any {
			t.Errorf("Lookup(%#x) = %v, want %v", tc.spi, got, tc.any)
		}
	}
	if d.Len() != 3 {
		t.Errorf("Len = %d", d.Len())
	}
	if _, err := NewSAD([]*SA{a, saTo(0x1001, "192.0.2.2")}); err == nil || !strings.Contains(err.Error(), "duplicate SPI for dst 192.0.2.2") {
		t.Errorf("duplicate: %v", err)
	}
	// A failed Replace keeps the SAD as it was.
	if err := d.Replace([]*SA{a, a}); err == nil {
		t.Error("Replace took duplicates")
	}
	if d.Lookup(0x2002) != c {
		t.Error("failed Replace changed the SAD")
	}
	var empty SAD
	if empty.Lookup(1) != nil || empty.LookupDst(1, a.Dst) != nil || empty.Len() != 0 {
		t.Error("zero SAD is not empty")
	}
}

func TestSADLookupDoesNotAllocate(t *testing.T) {
	d, _ := NewSAD([]*SA{saTo(0x1001, "192.0.2.2")})
	dst := netip.MustParseAddr("192.0.2.2")
	if n := testing.AllocsPerRun(1000, func() {
		d.Lookup(0x1001)
		d.LookupDst(0x1001, dst)
	}); n != 0 {
		t.Errorf("%v allocations per lookup", n)
	}
}

// Readers never see a mix of two generations while SAs are replaced: each
// generation g holds SPIs g*100+i pointing to SAs that say generation g.
// Run with -race.
func TestSADConcurrentReplace(t *testing.T) {
	const n = 16
	gen := func(g int) []*SA {
		sas := make([]*SA, n)
		for i := range sas {
			s := saTo(uint32(0x1000+i), "192.0.2.2")
			s.InitialSeq = uint64(g) // the generation, read back by readers
			sas[i] = s
		}
		return sas
	}
	d, err := NewSAD(gen(0))
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var lookups atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for i := 0; !stop.Load(); i++ {
				all := d.All()
				g := all[0].InitialSeq
				for _, s := range all {
					if s.InitialSeq != g {
						errs <- fmt.Errorf("reader %d: generations %d and %d in one table", r, g, s.InitialSeq)
						return
					}
				}
				s := d.Lookup(uint32(0x1000 + i%n))
				if s == nil {
					errs <- fmt.Errorf("reader %d: SPI %#x missing during replace", r, 0x1000+i%n)
					return
				}
				if s.InitialSeq < last {
					errs <- fmt.Errorf("reader %d: generation went back from %d to %d", r, last, s.InitialSeq)
					return
				}
				last = s.InitialSeq
				lookups.Add(1)
			}
		}()
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for g := 1; g <= 2000 && time.Now().Before(deadline); g++ {
		if err := d.Replace(gen(g)); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if lookups.Load() == 0 {
		t.Error("no lookups ran")
	}
}

// TestSADFind is the inbound lookup of RFC 4301 §4.1 as the SA file states
// it: SPI and destination find the SA; encapsulation and source must then be
// the SA's, and a packet that matches neither is nobody's — never the other
// SA's with the same SPI.
func TestSADFind(t *testing.T) {
	peer, other := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.9")
	d1, d2 := netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")
	raw := saTo(0x1001, "192.0.2.2") // raw ESP from 192.0.2.1
	udp := saTo(0x1001, "192.0.2.3") // the same SPI, another destination, UDP from 4500
	udp.Encap, udp.SrcPort, udp.DstPort = EncapUDP, 4500, 4500
	lone := saTo(0x2002, "192.0.2.2")
	follows := saTo(0x4004, "192.0.2.3") // UDP from 4500, following its peer's NAT port
	follows.Encap, follows.SrcPort, follows.DstPort, follows.FollowSourcePort = EncapUDP, 4500, 4500, true
	d, err := NewSAD([]*SA{raw, udp, lone, follows})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		spi  uint32
		a    Arrival
		want *SA
		miss Miss
	}{
		{"raw to its destination", 0x1001, Arrival{Dst: d1, Src: peer}, raw, Found},
		{"udp to its destination", 0x1001, Arrival{Dst: d2, Src: peer, Encap: EncapUDP, SrcPort: 4500}, udp, Found},
		{"the first SA's SPI at the second's destination is the second's", 0x1001, Arrival{Dst: d2, Src: peer}, nil, WrongEncap},
		{"encap none SA given ESP in UDP 4500", 0x1001, Arrival{Dst: d1, Src: peer, Encap: EncapUDP, SrcPort: 4500}, nil, WrongEncap},
		{"encap none SA given ESP in UDP 4500 from anywhere", 0x2002, Arrival{Dst: d1, Src: other, Encap: EncapUDP, SrcPort: 4500}, nil, WrongEncap},
		{"raw from another source", 0x1001, Arrival{Dst: d1, Src: other}, nil, WrongSource},
		{"udp from another port", 0x1001, Arrival{Dst: d2, Src: peer, Encap: EncapUDP, SrcPort: 4501}, nil, WrongSource},
		{"udp from another address", 0x1001, Arrival{Dst: d2, Src: other, Encap: EncapUDP, SrcPort: 4500}, nil, WrongSource},
		{"following SA from its port", 0x4004, Arrival{Dst: d2, Src: peer, Encap: EncapUDP, SrcPort: 4500}, follows, Found},
		{"following SA from another port", 0x4004, Arrival{Dst: d2, Src: peer, Encap: EncapUDP, SrcPort: 31000}, follows, Found},
		{"following SA from another address", 0x4004, Arrival{Dst: d2, Src: other, Encap: EncapUDP, SrcPort: 4500}, nil, WrongSource},
		{"following SA given raw ESP", 0x4004, Arrival{Dst: d2, Src: peer}, nil, WrongEncap},
		{"SPI at a destination none of its SAs has", 0x2002, Arrival{Dst: d2, Src: peer}, nil, NoSA},
		{"unknown SPI", 0x3003, Arrival{Dst: d1, Src: peer}, nil, NoSA},
		{"no destination known", 0x2002, Arrival{Src: peer}, nil, NoSA},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, miss := d.LookupInbound(tc.spi, tc.a)
			if got != tc.want || miss != tc.miss {
				t.Errorf("LookupInbound(%#x, %+v) = %v, %v; want %v, %v", tc.spi, tc.a, got, miss, tc.want, tc.miss)
			}
			i, miss := d.Find(tc.spi, tc.a)
			if (i < 0) != (tc.want == nil) || (i >= 0 && d.All()[i] != tc.want) || miss != tc.miss {
				t.Errorf("Find = %d, %v", i, miss)
			}
		})
	}
}

// TestSADFindScales: a lookup among many SAs, some sharing SPIs, stays a
// map access and allocates nothing.
func TestSADFindScales(t *testing.T) {
	const n = 100_000
	sas := make([]*SA, 0, n)
	for i := range n {
		// Every SPI is shared by two destinations.
		s := saTo(uint32(0x10000+i/2), fmt.Sprintf("198.51.100.%d", 1+i%2))
		sas = append(sas, s)
	}
	d, err := NewSAD(sas)
	if err != nil {
		t.Fatal(err)
	}
	src := sas[0].Src
	for _, i := range []int{0, 1, n / 2, n - 1} {
		s := sas[i]
		if got, miss := d.LookupInbound(s.SPI, Arrival{Dst: s.Dst, Src: src}); got != s || miss != Found {
			t.Errorf("SA %d: got %v, %v", i, got, miss)
		}
	}
	a := Arrival{Dst: sas[n-1].Dst, Src: src}
	if allocs := testing.AllocsPerRun(1000, func() { d.Find(sas[n-1].SPI, a) }); allocs != 0 {
		t.Errorf("%v allocations per Find", allocs)
	}
}

// Index keeps the SAs sharing an SPI in the order added through removals
// of the first, a middle and an absent one, and finds by the SAD's rules.
func TestIndexEdits(t *testing.T) {
	mk := func(dst string) *SA {
		return &SA{SPI: 0x100, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr(dst)}
	}
	a, b, c := mk("198.51.100.1"), mk("198.51.100.2"), mk("198.51.100.3")
	order := func(x *Index[string]) (got []string) {
		for _, v := range x.WithSPI(0x100) {
			got = append(got, v)
		}
		return got
	}
	for _, tc := range []struct {
		name   string
		remove []string
		want   []string
	}{
		{"none", nil, []string{"a", "b", "c"}},
		{"first", []string{"a"}, []string{"b", "c"}},
		{"middle", []string{"b"}, []string{"a", "c"}},
		{"last", []string{"c"}, []string{"a", "b"}},
		{"all", []string{"b", "a", "c"}, nil},
		{"absent", []string{"x"}, []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := NewIndex[string](0)
			x.Add(a, "a")
			x.Add(b, "b")
			x.Add(c, "c")
			for _, v := range tc.remove {
				if got := x.Remove(0x100, v); got != (v != "x") {
					t.Errorf("Remove(%s) = %v", v, got)
				}
			}
			if got := order(x); !slices.Equal(got, tc.want) || x.Len() != len(tc.want) {
				t.Errorf("left %v (Len %d), want %v", got, x.Len(), tc.want)
			}
			for _, s := range []*SA{a, b, c} {
				v, m := x.Find(0x100, Arrival{Dst: s.Dst, Src: s.Src})
				kept := slices.Contains(tc.want, map[*SA]string{a: "a", b: "b", c: "c"}[s])
				if kept != (m == Found) || kept && !x.Has(0x100, v) {
					t.Errorf("Find %s = %q, %v", s.Dst, v, m)
				}
				if kept {
					if _, m := x.Find(0x100, Arrival{Dst: s.Dst, Src: netip.MustParseAddr("192.0.2.9")}); m != WrongSource {
						t.Errorf("Find %s from another source: %v, want WrongSource", s.Dst, m)
					}
				}
			}
		})
	}
}
