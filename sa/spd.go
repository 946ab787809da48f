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
type SPD struct {
	policies atomic.Pointer[[]Policy]
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
	for i := range ps {
		if err := ps[i].bind(sas); err != nil {
			errs = append(errs, fmt.Errorf("policy %d (%s): %w", i, &ps[i], err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	slices.SortStableFunc(ps, func(a, b Policy) int { return cmp.Compare(a.Priority, b.Priority) })
	s.policies.Store(&ps)
	return nil
}

// bind checks the policy and resolves its SA.
func (p *Policy) bind(sas []*SA) error {
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
		sa, err := findSPI(sas, p.SPI)
		if err != nil {
			return err
		}
		p.SA = sa
	}
	p.SPI = p.SA.SPI
	return checkSelectorFits(p.Selector, p.SA)
}

// findSPI finds the one SA with the SPI.
func findSPI(sas []*SA, spi uint32) (*SA, error) {
	var found *SA
	for _, s := range sas {
		if s == nil || s.SPI != spi {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("SPI %#x is ambiguous: SAs to %s and %s share it", spi, found.Dst, s.Dst)
		}
		found = s
	}
	if found == nil {
		return nil, fmt.Errorf("no SA with SPI %#x", spi)
	}
	return found, nil
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
	ps := s.policies.Load()
	if ps == nil {
		return nil
	}
	for i := range *ps {
		p := &(*ps)[i]
		if p.Selector.Matches(src, dst, proto, sport, dport) {
			return p
		}
	}
	return nil
}

// Policies returns the policies in lookup order. The slice is shared: do not modify it.
func (s *SPD) Policies() []Policy {
	if ps := s.policies.Load(); ps != nil {
		return *ps
	}
	return nil
}
