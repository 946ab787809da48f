package sa

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"github.com/espgw/espgw/internal/errlist"
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
//
// Insert, Delete and Retarget change the SPD in place at a cost that does
// not grow with the number of policies either (beyond moving a slice of
// pointers); unlike Replace they are not safe while lookups run: the caller
// excludes them (the gateway holds its tables' lock).
type SPD struct {
	table atomic.Pointer[spdTable]
}

// spdEntry is one policy in force; seq orders equal priorities (the order
// given, then the order added).
type spdEntry struct {
	Policy
	seq uint64
}

func (e *spdEntry) before(o *spdEntry) bool {
	return e.Priority < o.Priority || e.Priority == o.Priority && e.seq < o.seq
}

// spdTable is the policies in lookup order and their index.
type spdTable struct {
	list []*spdEntry
	// any are the policies without a destination prefix, which every
	// packet must be tried against; byDst4 and byDst6 the others by
	// destination prefix, each bucket in lookup order.
	any []*spdEntry
	// byDst4 holds the IPv4 buckets under key4 (address and length in
	// one integer, which a map hashes and compares inline: with 10,000
	// tunnels the generic hashing of a netip.Prefix key was a tenth of
	// the user-space cost of a packet), byDst6 the IPv6 ones.
	byDst4 map[uint64][]*spdEntry
	byDst6 map[netip.Prefix][]*spdEntry
	// count are the policies per family (0: IPv4) and prefix length;
	// lens4 and lens6 the lengths present, longest first.
	count        [2][129]int32
	lens4, lens6 []uint8
	seq          uint64
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
	var errs errlist.List
	idx := NewSPIIndex(sas)
	for i := range ps {
		if err := ps[i].bind(idx); err != nil {
			errs.Add(fmt.Errorf("policy %d (%s): %w", i, &ps[i], err))
		}
	}
	if err := errs.Err(); err != nil {
		return err
	}
	slices.SortStableFunc(ps, func(a, b Policy) int { return cmp.Compare(a.Priority, b.Priority) })
	s.table.Store(newSPDTable(ps))
	return nil
}

func newSPDTable(ps []Policy) *spdTable {
	t := &spdTable{byDst4: map[uint64][]*spdEntry{}, byDst6: map[netip.Prefix][]*spdEntry{}, list: make([]*spdEntry, 0, len(ps))}
	entries := make([]spdEntry, len(ps))
	for i := range ps {
		e := &entries[i]
		e.Policy, e.seq = ps[i], uint64(i)
		t.list = append(t.list, e)
		t.index(e)
	}
	t.seq = uint64(len(ps))
	t.lengths()
	return t
}

// dstKey is where e is indexed: its masked destination prefix, or not
// valid for the any list.
func dstKey(p *Policy) netip.Prefix {
	if d := p.Selector.Dst; d.IsValid() {
		return d.Masked()
	}
	return netip.Prefix{}
}

// key4 is an IPv4 bucket's key: the masked address and the length.
func key4(addr uint32, bits int) uint64 { return uint64(addr)<<8 | uint64(bits) }

func addr4(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

// bucket is the bucket of masked destination prefix d.
func (t *spdTable) bucket(d netip.Prefix) []*spdEntry {
	if d.Addr().Is4() {
		return t.byDst4[key4(addr4(d.Addr()), d.Bits())]
	}
	return t.byDst6[d]
}

// setBucket replaces d's bucket (removing it when b is empty).
func (t *spdTable) setBucket(d netip.Prefix, b []*spdEntry) {
	switch {
	case d.Addr().Is4() && len(b) == 0:
		delete(t.byDst4, key4(addr4(d.Addr()), d.Bits()))
	case d.Addr().Is4():
		t.byDst4[key4(addr4(d.Addr()), d.Bits())] = b
	case len(b) == 0:
		delete(t.byDst6, d)
	default:
		t.byDst6[d] = b
	}
}

func family(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 0
	}
	return 1
}

// index appends e to its bucket (which e must end, in lookup order).
func (t *spdTable) index(e *spdEntry) {
	d := dstKey(&e.Policy)
	if !d.IsValid() {
		t.any = append(t.any, e)
		return
	}
	t.setBucket(d, append(t.bucket(d), e))
	t.count[family(d)][d.Bits()]++
}

// lengths lists the prefix lengths in use, longest first.
func (t *spdTable) lengths() {
	t.lens4, t.lens6 = t.lens4[:0], t.lens6[:0]
	for l := 128; l >= 0; l-- {
		if t.count[0][l] > 0 {
			t.lens4 = append(t.lens4, uint8(l))
		}
		if t.count[1][l] > 0 {
			t.lens6 = append(t.lens6, uint8(l))
		}
	}
}

// insertSorted puts e into list, which is in lookup order, where it belongs.
func insertSorted(list []*spdEntry, e *spdEntry) []*spdEntry {
	i, _ := slices.BinarySearchFunc(list, e, func(x, y *spdEntry) int {
		if x.before(y) {
			return -1
		}
		if y.before(x) {
			return 1
		}
		return 0
	})
	return slices.Insert(list, i, e)
}

// position finds e in list (in lookup order).
func position(list []*spdEntry, e *spdEntry) int {
	i, found := slices.BinarySearchFunc(list, e, func(x, y *spdEntry) int {
		if x.before(y) {
			return -1
		}
		if y.before(x) {
			return 1
		}
		return 0
	})
	if !found || list[i] != e {
		return -1
	}
	return i
}

// Insert adds a bound, valid policy (see Policy.Check) after those of its
// priority, and returns its place in lookup order. Lookups must not run
// meanwhile (see SPD).
func (s *SPD) Insert(p Policy) int {
	t := s.table.Load()
	if t == nil {
		t = newSPDTable(nil)
		s.table.Store(t)
	}
	e := &spdEntry{Policy: p, seq: t.seq}
	t.seq++
	t.list = insertSorted(t.list, e)
	d := dstKey(&e.Policy)
	if !d.IsValid() {
		t.any = insertSorted(t.any, e)
	} else {
		t.setBucket(d, insertSorted(t.bucket(d), e))
		f := family(d)
		if t.count[f][d.Bits()]++; t.count[f][d.Bits()] == 1 {
			t.lengths()
		}
	}
	return position(t.list, e)
}

// Delete removes the policy at place i in lookup order. Lookups must not
// run meanwhile (see SPD).
func (s *SPD) Delete(i int) {
	t := s.table.Load()
	if t == nil || i < 0 || i >= len(t.list) {
		return
	}
	e := t.list[i]
	t.list = slices.Delete(t.list, i, i+1)
	d := dstKey(&e.Policy)
	if !d.IsValid() {
		if j := position(t.any, e); j >= 0 {
			t.any = slices.Delete(t.any, j, j+1)
		}
		return
	}
	b := t.bucket(d)
	if j := position(b, e); j >= 0 {
		b = slices.Delete(b, j, j+1)
	}
	t.setBucket(d, b)
	f := family(d)
	if t.count[f][d.Bits()]--; t.count[f][d.Bits()] == 0 {
		t.lengths()
	}
}

// Retarget makes the protect policies naming from name to instead, and
// returns how many did. Lookups must not run meanwhile (see SPD).
func (s *SPD) Retarget(from uint32, to *SA) int {
	t := s.table.Load()
	if t == nil {
		return 0
	}
	n := 0
	for _, e := range t.list {
		if e.Action == Protect && e.SPI == from {
			e.SPI, e.SA = to.SPI, to
			n++
		}
	}
	return n
}

// Find returns the place in lookup order of the first policy that says
// what p says (priority, selector, action, SPI) at place from or after, or
// -1: only the policies of p's destination prefix are looked at.
func (s *SPD) Find(p Policy, from int) int {
	t := s.table.Load()
	if t == nil {
		return -1
	}
	bucket := t.any
	if d := dstKey(&p); d.IsValid() {
		bucket = t.bucket(d)
	}
	best := -1
	for _, e := range bucket {
		if e.Priority != p.Priority || e.Selector != p.Selector || e.Action != p.Action || (p.Action == Protect && e.SPI != p.SPI) {
			continue
		}
		if i := position(t.list, e); i >= from && (best < 0 || i < best) {
			best = i
		}
	}
	return best
}

// Policy returns the policy at place i in lookup order.
func (s *SPD) Policy(i int) Policy {
	return s.table.Load().list[i].Policy
}

// Check validates a policy whose SA (for protect) is bound, as Replace
// would: its selector, its action, and that its SA can carry it.
func (p *Policy) Check() error {
	if p.Action == Protect && p.SA == nil {
		return fmt.Errorf("no SA with SPI %#x", p.SPI)
	}
	q := *p
	return q.bind(nil)
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
	var best *spdEntry
	// first moves best to the earliest matching policy of a bucket that
	// comes before it; buckets are in lookup order, so the scan stops at
	// the first match or the first policy after best.
	first := func(bucket []*spdEntry) {
		for _, e := range bucket {
			if best != nil && !e.before(best) {
				return
			}
			if e.Selector.Matches(src, dst, proto, sport, dport) {
				best = e
				return
			}
		}
	}
	first(t.any)
	if dst.Is4() {
		a := addr4(dst)
		for _, l := range t.lens4 {
			if bucket, ok := t.byDst4[key4(a&^(0xffffffff>>l), int(l))]; ok {
				first(bucket)
			}
		}
	} else {
		for _, l := range t.lens6 {
			p, err := dst.Prefix(int(l))
			if err != nil {
				continue
			}
			if bucket, ok := t.byDst6[p]; ok {
				first(bucket)
			}
		}
	}
	if best == nil {
		return nil
	}
	return &best.Policy
}

// lookupLinear is Lookup by walking the list: the reference the index is
// tested against.
func (s *SPD) lookupLinear(src, dst netip.Addr, proto uint8, sport, dport uint16) *Policy {
	t := s.table.Load()
	if t == nil {
		return nil
	}
	for _, e := range t.list {
		if e.Selector.Matches(src, dst, proto, sport, dport) {
			return &e.Policy
		}
	}
	return nil
}

// Len is the number of policies.
func (s *SPD) Len() int {
	if t := s.table.Load(); t != nil {
		return len(t.list)
	}
	return 0
}

// Policies returns a copy of the policies in lookup order. The slice is shared: do not modify it.
func (s *SPD) Policies() []Policy {
	t := s.table.Load()
	if t == nil {
		return nil
	}
	out := make([]Policy, len(t.list))
	for i, e := range t.list {
		out[i] = e.Policy
	}
	return out
}
