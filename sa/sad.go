package sa

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
)

// SAD is the security association database: it finds the SA of an inbound
// packet by SPI (and destination). Lookups are lock-free and safe while
// Replace swaps in a new set of SAs (the gateway reloads on SIGHUP): each
// lookup sees either the old set or the new one, never a mix.
type SAD struct {
	table atomic.Pointer[sadTable]
}

// sadTable is immutable once published.
type sadTable struct {
	all      []*SA
	bySPI    map[uint32]*SA // the first SA with the SPI, in the order given
	bySPIDst map[spiDst]*SA
}

type spiDst struct {
	spi uint32
	dst netip.Addr
}

// NewSAD validates the SAs and indexes them. Two SAs may share an SPI only if
// their destinations differ.
func NewSAD(sas []*SA) (*SAD, error) {
	d := new(SAD)
	if err := d.Replace(sas); err != nil {
		return nil, err
	}
	return d, nil
}

// Replace validates and indexes a new set of SAs and makes it the one lookups
// see. On error the SAD keeps its current set.
func (d *SAD) Replace(sas []*SA) error {
	t, err := newSADTable(sas)
	if err != nil {
		return err
	}
	d.table.Store(t)
	return nil
}

func newSADTable(sas []*SA) (*sadTable, error) {
	t := &sadTable{
		all:      append([]*SA(nil), sas...),
		bySPI:    make(map[uint32]*SA, len(sas)),
		bySPIDst: make(map[spiDst]*SA, len(sas)),
	}
	var errs []error
	for _, s := range sas {
		if s == nil {
			errs = append(errs, errors.New("nil SA"))
			continue
		}
		if err := s.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("SA %#x: %w", s.SPI, err))
			continue
		}
		k := spiDst{s.SPI, s.Dst}
		if prev, dup := t.bySPIDst[k]; dup {
			errs = append(errs, fmt.Errorf("SA %#x: duplicate SPI for dst %s (also %s)", s.SPI, s.Dst, prev))
			continue
		}
		t.bySPIDst[k] = s
		if _, ok := t.bySPI[s.SPI]; !ok {
			t.bySPI[s.SPI] = s
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return t, nil
}

// Lookup returns the SA with the SPI, or nil. When several SAs share the SPI
// (for different destinations) it returns the first one given; use LookupDst
// to tell them apart.
func (d *SAD) Lookup(spi uint32) *SA {
	t := d.table.Load()
	if t == nil {
		return nil
	}
	return t.bySPI[spi]
}

// LookupDst returns the SA with the SPI and outer destination, or nil.
func (d *SAD) LookupDst(spi uint32, dst netip.Addr) *SA {
	t := d.table.Load()
	if t == nil {
		return nil
	}
	return t.bySPIDst[spiDst{spi, dst}]
}

// All returns the SAs in the order given. The slice is shared: do not modify it.
func (d *SAD) All() []*SA {
	if t := d.table.Load(); t != nil {
		return t.all
	}
	return nil
}

// Len is the number of SAs.
func (d *SAD) Len() int { return len(d.All()) }
