package sa

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/espgw/espgw/internal/secret"
)

// Action is what the SPD does with an outbound packet (RFC 4301 §4.4.1).
type Action uint8

const (
	// Discard drops the packet. It is also the answer when no policy matches.
	Discard Action = iota
	// Bypass sends the packet without IPsec.
	Bypass
	// Protect sends the packet through the policy's SA.
	Protect
)

var actionNames = [...]string{Discard: "discard", Bypass: "bypass", Protect: "protect"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// ParseAction reads protect, bypass or discard.
func ParseAction(s string) (Action, error) {
	for a, n := range actionNames {
		if n == s {
			return Action(a), nil
		}
	}
	return 0, fmt.Errorf("unknown action %s (want protect, bypass or discard)", secret.Word(s, actionNames[:]...))
}

// Policy is one SPD entry: traffic matching Selector gets Action.
type Policy struct {
	// Priority orders the SPD: the lowest value is consulted first (as in
	// Linux xfrm); equal priorities keep the order given.
	Priority int
	Selector Selector
	Action   Action
	// SPI names the outbound SA of a Protect policy; SA is that SA, filled
	// in by NewSPD when left nil.
	SPI uint32
	SA  *SA
}

func (p *Policy) String() string {
	s := fmt.Sprintf("priority %d %s %s", p.Priority, p.Selector, p.Action)
	if p.Action == Protect {
		s += fmt.Sprintf(" sa %#x", p.SPI)
	}
	return s
}

// SPD is the outbound security policy database: an ordered list of policies
// searched first match wins. Lookups are lock-free and safe during Replace.
//
// A lookup does not walk the list: policies are indexed by their destination
// prefix, one map per prefix length in use, so a packet costs one map probe
// per distinct length (and a scan of the few policies sharing its prefix)
// however many policies there are. The answer is exactly the linear
// search's: among the candidates the one earliest in lookup order wins.
type SPD struct {
	table atomic.Pointer[spdTable]
}

// spdTable is immutable once published.
type spdTable struct {
	list []Policy
	// any are the positions of the policies without a destination prefix,
	// which every packet must be tried against.
	any []int32
	// byDst are the positions of the other policies by destination prefix,
	// in lookup order within a prefix; lens4 and lens6 are the prefix
	// lengths present, longest first.
	byDst        map[netip.Prefix][]int32
	lens4, lens6 []uint8
}

// NewSPD orders the policies by priority and binds each Protect policy to its
// SA among sas (by SPI, when the policy's SA is not already set).
func NewSPD(policies []Policy, sas []*SA) (*SPD, error) {
	s := new(SPD)
	if err := s.Replace(policies, sas); err != nil {
		return nil, err
	}
	return s, nil
}

// Replace installs a new policy list; on error the SPD keeps its current one.
func (s *SPD) Replace(policies []Policy, sas []*SA) error {
	ps := slices.Clone(policies)
	var errs []error
	idx := NewSPIIndex(sas)
	for i := range ps {
		if err := ps[i].bind(idx); err != nil {
			errs = append(errs, fmt.Errorf("policy %d (%s): %w", i, &ps[i], err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	slices.SortStableFunc(ps, func(a, b Policy) int { return cmp.Compare(a.Priority, b.Priority) })
	s.table.Store(newSPDTable(ps))
	return nil
}

func newSPDTable(ps []Policy) *spdTable {
	t := &spdTable{list: ps, byDst: make(map[netip.Prefix][]int32)}
	var seen4, seen6 [129]bool
	for i := range ps {
		d := ps[i].Selector.Dst
		if !d.IsValid() {
			t.any = append(t.any, int32(i))
			continue
		}
		d = d.Masked()
		t.byDst[d] = append(t.byDst[d], int32(i))
		if d.Addr().Is4() {
			seen4[d.Bits()] = true
		} else {
			seen6[d.Bits()] = true
		}
	}
	for l := 128; l >= 0; l-- {
		if seen4[l] {
			t.lens4 = append(t.lens4, uint8(l))
		}
		if seen6[l] {
			t.lens6 = append(t.lens6, uint8(l))
		}
	}
	return t
}

// bind checks the policy and resolves its SA.
func (p *Policy) bind(sas SPIIndex) error {
	if err := p.Selector.Validate(); err != nil {
		return err
	}
	switch p.Action {
	case Bypass, Discard:
		if p.SA != nil || p.SPI != 0 {
			return fmt.Errorf("%s policy names an SA", p.Action)
		}
		return nil
	case Protect:
	default:
		return fmt.Errorf("unknown action %s", p.Action)
	}
	if p.SA == nil {
		sa, err := sas.Find(p.SPI)
		if err != nil {
			return err
		}
		p.SA = sa
	}
	p.SPI = p.SA.SPI
	return checkSelectorFits(p.Selector, p.SA)
}

// SPIIndex finds SAs by SPI for binding policies, in constant time: a protect
// policy names its SA by SPI alone, which must then be unambiguous.
type SPIIndex map[uint32][]*SA

// NewSPIIndex indexes sas by SPI.
func NewSPIIndex(sas []*SA) SPIIndex {
	idx := make(SPIIndex, len(sas))
	for _, s := range sas {
		if s != nil {
			idx[s.SPI] = append(idx[s.SPI], s)
		}
	}
	return idx
}

// Find returns the one SA with the SPI.
func (idx SPIIndex) Find(spi uint32) (*SA, error) {
	switch found := idx[spi]; len(found) {
	case 0:
		return nil, fmt.Errorf("no SA with SPI %#x", spi)
	case 1:
		return found[0], nil
	default:
		return nil, fmt.Errorf("SPI %#x is ambiguous: SAs to %s and %s share it", spi, found[0].Dst, found[1].Dst)
	}
}

// checkSelectorFits rejects a transport-mode policy whose traffic cannot be
// carried by the SA: transport mode keeps the packet's own addresses, so they
// must be of the SA's family.
func checkSelectorFits(sel Selector, s *SA) error {
	if s.Mode != Transport {
		return nil
	}
	for _, p := range []netip.Prefix{sel.Src, sel.Dst} {
		if p.IsValid() && p.Addr().Is4() != s.Dst.Is4() {
			return fmt.Errorf("selector %s is of another address family than transport-mode SA %#x", p, s.SPI)
		}
	}
	return nil
}

// Lookup finds the first policy, in priority order, whose selector matches an
// outbound packet, or nil if none does (RFC 4301: then discard). The policy is
// shared: do not modify it. Lookup does not allocate.
func (s *SPD) Lookup(src, dst netip.Addr, proto uint8, sport, dport uint16) *Policy {
	t := s.table.Load()
	if t == nil {
		return nil
	}
	best := int32(len(t.list))
	// first moves best to the earliest matching policy of a bucket that
	// comes before it; buckets are in lookup order, so the scan stops at
	// the first match or the first position past best.
	first := func(bucket []int32) {
		for _, i := range bucket {
			if i >= best {
				return
			}
			if t.list[i].Selector.Matches(src, dst, proto, sport, dport) {
				best = i
				return
			}
		}
	}
	first(t.any)
	lens := t.lens6
	if dst.Is4() {
		lens = t.lens4
	}
	for _, l := range lens {
		p, err := dst.Prefix(int(l))
		if err != nil {
			continue
		}
		if bucket, ok := t.byDst[p]; ok {
			first(bucket)
		}
	}
	if best == int32(len(t.list)) {
		return nil
	}
	return &t.list[best]
}

// lookupLinear is Lookup by walking the list: the reference the index is
// tested against.
func (s *SPD) lookupLinear(src, dst netip.Addr, proto uint8, sport, dport uint16) *Policy {
	t := s.table.Load()
	if t == nil {
		return nil
	}
	for i := range t.list {
		if t.list[i].Selector.Matches(src, dst, proto, sport, dport) {
			return &t.list[i]
		}
	}
	return nil
}

// Len is the number of policies.
func (s *SPD) Len() int { return len(s.Policies()) }

// Policies returns the policies in lookup order. The slice is shared: do not modify it.
func (s *SPD) Policies() []Policy {
	if t := s.table.Load(); t != nil {
		return t.list
	}
	return nil
}
