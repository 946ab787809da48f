package sa

import (
	"fmt"
	"net/netip"
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
