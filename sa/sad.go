package sa

import (
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/espgw/espgw/internal/errlist"
)

// SAD is the security association database: it finds the SA of an inbound
// packet by SPI and outer destination, and checks that the packet arrived
// the way that SA says (RFC 4301 §4.1, §4.4.2). Lookups are lock-free,
// allocation-free and O(1) in the number of SAs, and safe while Replace
// swaps in a new set of SAs (the gateway reloads on SIGHUP): each lookup sees
// either the old set or the new one, never a mix.
//
// The rules, which the SA file documents too:
//   - An inbound ESP packet's SA is the one with its SPI and its outer
//     destination address. Two SAs may share an SPI only if their
//     destinations differ; two with one SPI and one destination cannot be
//     told apart and are refused.
//   - The packet must then have arrived as that SA says: raw ESP for encap
//     none, ESP in UDP for encap udp (so an encap none SA never takes ESP
//     from UDP 4500, nor the reverse), from the SA's src address and, with
//     udp, from its sport. Anything else is a mismatch, not a match: the
//     packet is dropped and counted, never handed to another SA.
type SAD struct {
	table atomic.Pointer[sadTable]
}

// sadTable is immutable once published: the SAs in the order given and
// their indices in all, indexed by the SAD's rules.
type sadTable struct {
	all []*SA
	in  *Index[int32]
}

type spiDst struct {
	spi uint32
	dst netip.Addr
}

// Index finds inbound SAs by the SAD's rules; SAD is one published whole,
// and the gateway keeps one per state, edited under its own lock. T is what
// the caller keeps per SA (an index, its working state). An SPI maps to the
// SAs that share it, in the order added: almost always one, held in the map
// itself with the fields the rules compare, so that a lookup among many SAs
// touches one map slot and nothing else; the others, a handful at most,
// follow in a short list. An Index is not safe for concurrent edits;
// lookups allocate nothing.
type Index[T comparable] struct {
	bySPI map[uint32]indexRun[T]
	n     int
}

// indexRun is the SAs with one SPI: first, then more.
type indexRun[T comparable] struct {
	first indexed[T]
	more  []indexed[T]
}

// indexed is one SA: how an inbound packet of it arrives, and the
// caller's value.
type indexed[T comparable] struct {
	cfg *SA
	arr Arrival // Dst, Src, Encap and SrcPort (EncapUDP only; 0: any) of the SA
	v   T
}

// arrivalOf is how the SA's inbound packets arrive.
func arrivalOf(s *SA) Arrival {
	a := Arrival{Dst: s.Dst, Src: s.Src, Encap: s.Encap}
	if s.Encap == EncapUDP && !s.FollowSourcePort {
		a.SrcPort = s.SrcPort
	}
	return a
}

// NewIndex returns an empty Index with room for n SAs.
func NewIndex[T comparable](n int) *Index[T] {
	return &Index[T]{bySPI: make(map[uint32]indexRun[T], n)}
}

// Add indexes v as the SA cfg describes. The caller keeps SPI and
// destination unique (NewSAD refuses duplicates).
func (x *Index[T]) Add(cfg *SA, v T) {
	e := indexed[T]{cfg, arrivalOf(cfg), v}
	r, ok := x.bySPI[cfg.SPI]
	if !ok {
		r.first = e
	} else {
		r.more = append(r.more, e)
	}
	x.bySPI[cfg.SPI] = r
	x.n++
}

// Remove takes v, indexed under spi, out; it reports whether it was there.
func (x *Index[T]) Remove(spi uint32, v T) bool {
	r, ok := x.bySPI[spi]
	if !ok {
		return false
	}
	switch i := slices.IndexFunc(r.more, func(e indexed[T]) bool { return e.v == v }); {
	case r.first.v == v && len(r.more) == 0:
		delete(x.bySPI, spi)
		x.n--
		return true
	case r.first.v == v:
		r.first = r.more[0]
		r.more = slices.Delete(r.more, 0, 1)
	case i >= 0:
		r.more = slices.Delete(r.more, i, i+1)
	default:
		return false
	}
	if len(r.more) == 0 {
		r.more = nil
	}
	x.bySPI[spi] = r
	x.n--
	return true
}

// Find returns what was indexed for the SA an inbound packet with the SPI
// that arrived as a belongs to, or why there is none. It does not allocate.
func (x *Index[T]) Find(spi uint32, a Arrival) (T, Miss) {
	var zero T
	r, ok := x.bySPI[spi]
	if !ok {
		return zero, NoSA
	}
	if m := receives(&r.first.arr, a); m != NoSA {
		if m != Found {
			return zero, m
		}
		return r.first.v, Found
	}
	for i := range r.more {
		switch m := receives(&r.more[i].arr, a); m {
		case Found:
			return r.more[i].v, Found
		case NoSA:
		default:
			// SPI and destination name one SA: the packet is this
			// one's or nobody's.
			return zero, m
		}
	}
	return zero, NoSA
}

// Has reports whether v is indexed under spi.
func (x *Index[T]) Has(spi uint32, v T) bool {
	for _, w := range x.WithSPI(spi) {
		if w == v {
			return true
		}
	}
	return false
}

// WithSPI yields the SAs with the SPI, in the order added.
func (x *Index[T]) WithSPI(spi uint32) iter.Seq2[*SA, T] {
	return func(yield func(*SA, T) bool) {
		r, ok := x.bySPI[spi]
		if !ok || !yield(r.first.cfg, r.first.v) {
			return
		}
		for _, e := range r.more {
			if !yield(e.cfg, e.v) {
				return
			}
		}
	}
}

// Len is the number of SAs indexed.
func (x *Index[T]) Len() int { return x.n }

// Arrival is how an inbound ESP packet reached the host: what the SAD
// matches besides its SPI.
type Arrival struct {
	// Dst and Src are the outer destination and source addresses.
	Dst, Src netip.Addr
	// Encap is whether the packet came as raw ESP or in UDP.
	Encap Encap
	// SrcPort is the UDP source port (EncapUDP only).
	SrcPort uint16
}

// Miss says why the SAD found no SA for an inbound packet.
type Miss uint8

const (
	// Found: the packet's SA was found.
	Found Miss = iota
	// NoSA: no SA has the SPI, or none with it is for the destination.
	NoSA
	// WrongEncap: the SA for the SPI and destination is of another
	// encapsulation (raw ESP against UDP).
	WrongEncap
	// WrongSource: the SA for the SPI and destination expects another
	// outer source address (or, with UDP, source port).
	WrongSource
)

func (m Miss) String() string {
	switch m {
	case Found:
		return "found"
	case NoSA:
		return "no SA with this SPI for this destination"
	case WrongEncap:
		return "the SA is of another encapsulation"
	case WrongSource:
		return "the SA is from another source"
	}
	return fmt.Sprintf("miss(%d)", uint8(m))
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
	var errs errlist.List
	seen := make(map[spiDst]*SA, len(sas))
	for _, s := range sas {
		if s == nil {
			errs.Add(errors.New("nil SA"))
			continue
		}
		if err := s.Validate(); err != nil {
			errs.Add(fmt.Errorf("SA %#x: %w", s.SPI, err))
			continue
		}
		k := spiDst{s.SPI, s.Dst}
		if prev, dup := seen[k]; dup {
			errs.Add(fmt.Errorf("SA %#x: duplicate SPI for dst %s (also %s): an inbound packet could not tell them apart", s.SPI, s.Dst, prev))
			continue
		}
		seen[k] = s
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	if len(sas) > 1<<31-1 {
		return nil, fmt.Errorf("%d SAs: too many for one SAD", len(sas))
	}
	t := &sadTable{all: slices.Clone(sas), in: NewIndex[int32](len(sas))}
	for i, s := range sas {
		t.in.Add(s, int32(i))
	}
	return t, nil
}

// Find returns the index in All of the SA an inbound packet with the SPI
// that arrived as a says belongs to, or -1 and why there is none. It does
// not allocate.
func (d *SAD) Find(spi uint32, a Arrival) (int, Miss) {
	t := d.table.Load()
	if t == nil {
		return -1, NoSA
	}
	i, m := t.in.Find(spi, a)
	if m != Found {
		return -1, m
	}
	return int(i), Found
}

// Receives applies the SAD's rules to one SA: whether an inbound packet
// with the SPI that arrived as a is this SA's (Found), is for no SA here
// (NoSA: another SPI or destination), or names this SA but came the wrong
// way (WrongEncap, WrongSource). Since SPI and destination are unique in a
// set, a miss other than NoSA is final. It does not allocate.
func (s *SA) Receives(spi uint32, a Arrival) Miss {
	if s.SPI != spi {
		return NoSA
	}
	want := arrivalOf(s)
	return receives(&want, a)
}

// receives applies the rules past the SPI: want is how the SA's packets
// arrive, a how this one did.
func receives(want *Arrival, a Arrival) Miss {
	switch {
	case want.Dst != a.Dst:
		return NoSA
	case want.Encap != a.Encap:
		return WrongEncap
	case want.Src != a.Src, want.Encap == EncapUDP && want.SrcPort != 0 && want.SrcPort != a.SrcPort:
		return WrongSource
	}
	return Found
}

// LookupInbound is Find returning the SA itself (nil on a miss).
func (d *SAD) LookupInbound(spi uint32, a Arrival) (*SA, Miss) {
	t := d.table.Load()
	if t == nil {
		return nil, NoSA
	}
	i, m := t.in.Find(spi, a)
	if m != Found {
		return nil, m
	}
	return t.all[i], Found
}

// Lookup returns the SA with the SPI, or nil, looking at nothing else. When
// several SAs share the SPI (for different destinations) it returns the
// first one given. It is for offline tools that know no more of a packet
// than its SPI; a receiver uses Find.
func (d *SAD) Lookup(spi uint32) *SA {
	t := d.table.Load()
	if t == nil {
		return nil
	}
	for s := range t.in.WithSPI(spi) {
		return s
	}
	return nil
}

// LookupDst returns the SA with the SPI and outer destination, or nil,
// whatever the encapsulation and source.
func (d *SAD) LookupDst(spi uint32, dst netip.Addr) *SA {
	t := d.table.Load()
	if t == nil {
		return nil
	}
	for s := range t.in.WithSPI(spi) {
		if s.Dst == dst {
			return s
		}
	}
	return nil
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
