package sa

import (
	"fmt"
	"net/netip"
	"testing"
)

// BenchmarkSADLookup sets the SAD's atomic, two-index lookup against the
// reference: a plain map from SPI to SA.
func BenchmarkSADLookup(b *testing.B) {
	sas := make([]*SA, 256)
	ref := make(map[uint32]*SA, len(sas))
	for i := range sas {
		sas[i] = saTo(uint32(0x1000+i), "192.0.2.2")
		ref[sas[i].SPI] = sas[i]
	}
	d, err := NewSAD(sas)
	if err != nil {
		b.Fatal(err)
	}
	dst := netip.MustParseAddr("192.0.2.2")
	b.Run("map-reference", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if ref[uint32(0x1000+i%256)] == nil {
				b.Fatal("miss")
			}
		}
	})
	b.Run("Lookup", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if d.Lookup(uint32(0x1000+i%256)) == nil {
				b.Fatal("miss")
			}
		}
	})
	b.Run("LookupDst", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if d.LookupDst(uint32(0x1000+i%256), dst) == nil {
				b.Fatal("miss")
			}
		}
	})
}

// BenchmarkSPDLookup finds the last of 16 policies (the worst case of the
// linear, first-match search).
func BenchmarkSPDLookup(b *testing.B) {
	var ps []Policy
	for i := range 15 {
		ps = append(ps, Policy{Priority: i, Selector: Selector{
			Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16), Proto: 6,
			DstPorts: PortRange{1000, 2000}}, Action: Bypass})
	}
	ps = append(ps, Policy{Priority: 100, Action: Discard})
	spd, err := NewSPD(ps, nil)
	if err != nil {
		b.Fatal(err)
	}
	src, dst := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("203.0.113.1")
	for b.Loop() {
		if spd.Lookup(src, dst, 17, 1, 2).Action != Discard {
			b.Fatal("wrong policy")
		}
	}
}

// BenchmarkParseLargeSAFile reads 67,873 SAs (the size of a file that
// took 11.6 s when setkey's duplicate check scanned every SA before),
// as setkey statements, against the same SAs as YAML as the reference.
func BenchmarkParseLargeSAFile(b *testing.B) {
	const n = 67873
	setkey := setkeySAs(n)
	c, err := ParseSetkey("ref", setkey)
	if err != nil {
		b.Fatal(err)
	}
	yamlData, err := Marshal(c)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("yaml-reference", func(b *testing.B) {
		b.SetBytes(int64(len(yamlData)))
		for b.Loop() {
			if _, err := ParseYAML("ref", yamlData); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("setkey", func(b *testing.B) {
		b.SetBytes(int64(len(setkey)))
		for b.Loop() {
			if _, err := ParseSetkey("t", setkey); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSADFind is the inbound lookup (SPI and destination, then
// encapsulation and source) with 256 and 100,000 SAs, every SPI shared by
// two destinations, beside the reference: a plain map from SPI to SA of
// the same size. Read the ratios, not the times.
func BenchmarkSADFind(b *testing.B) {
	for _, n := range []int{256, 100_000} {
		sas := make([]*SA, n)
		ref := make(map[uint32]*SA, n)
		for i := range sas {
			sas[i] = saTo(uint32(0x10000+i/2), []string{"192.0.2.2", "192.0.2.3"}[i%2])
			ref[uint32(i)] = sas[i]
		}
		d, err := NewSAD(sas)
		if err != nil {
			b.Fatal(err)
		}
		arrivals := make([]Arrival, n)
		for i, s := range sas {
			arrivals[i] = Arrival{Dst: s.Dst, Src: s.Src}
		}
		b.Run(fmt.Sprintf("%d/map-reference", n), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if ref[uint32(i%n)] == nil {
					b.Fatal("miss")
				}
			}
		})
		b.Run(fmt.Sprintf("%d/Find", n), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				k := i % n
				if at, _ := d.Find(sas[k].SPI, arrivals[k]); at != k {
					b.Fatal("miss")
				}
			}
		})
	}
}
