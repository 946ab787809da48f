package gateway

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/sa"
)

// state is the SAs and policies in force. The data path reads it holding
// Gateway.tables for reading, once per batch; a change holds it for writing
// only while it swaps or edits the maps, after everything the change needs
// (engine sessions, the new SPD) was built, so an edit is atomic for every
// packet and costs the data path a few microseconds at most.
type state struct {
	spd *sa.SPD
	out map[uint32]*esp.SA // outbound SAs by SPI: policies name them so
	// in are the inbound SAs, found by the SAD's rules (sa.Index).
	in *sa.Index[*esp.SA]
	// all is every SA by (SPI, destination), its identity (RFC 4301 §4.1).
	all map[saKey]*esp.SA
	// only is the outbound SA used when there is no SPD and exactly one
	// outbound tunnel SA: the common two-gateway test bed needs no policy.
	only *esp.SA
	// byPeer are the outbound transport-mode SAs by destination, which
	// without an SPD protect the gateway's own traffic to that peer.
	byPeer map[netip.Addr]*esp.SA
	// named counts the policies naming each outbound SPI, so an SA still
	// in use is not deleted from under them.
	named map[uint32]int
}

// saKey is an SA's identity: SPI and destination.
type saKey struct {
	spi uint32
	dst netip.Addr
}

func keyOf(s *sa.SA) saKey { return saKey{s.SPI, s.Dst} }

func newState() *state {
	return &state{spd: new(sa.SPD), out: map[uint32]*esp.SA{}, in: sa.NewIndex[*esp.SA](0),
		all: map[saKey]*esp.SA{}, byPeer: map[netip.Addr]*esp.SA{}, named: map[uint32]int{}}
}

// headerOf is an SA's outer-header state (newSA makes it).
func headerOf(s *esp.SA) *saHeader {
	h, _ := s.Aux.(*saHeader)
	return h
}

// DefaultRetireAfter is Options.RetireAfter's default: long enough for any
// batch that looked up a removed SA to have left the engine.
const DefaultRetireAfter = time.Second

// Load puts a set of SAs and policies in force, whole or not at all. SAs
// whose configuration is unchanged (sa.SA.Equal) keep their working state —
// sequence numbers, replay windows, counters — so a reload does not drop
// the tunnel; an SA changed in anything but its SPI, addresses, suite and
// keys continues the sequence numbers and replay window of the one it
// replaces (newSA); every other SA starts afresh, and the sessions of the
// SAs no longer in force are closed once nothing in flight can use them.
func (g *Gateway) Load(sas []*sa.SA, policies []sa.Policy) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.current()
	next := newState()
	var fresh []*esp.SA
	undo := func() {
		for _, s := range fresh {
			s.Close()
		}
	}
	for _, cfg := range sas {
		if err := g.admit(next, cfg); err != nil {
			undo()
			return fmt.Errorf("load %s: %w", cfg, err)
		}
		s := old.all[keyOf(cfg)]
		if s == nil || !s.Config.Equal(cfg) {
			var err error
			if s, err = g.newSA(cfg, s); err != nil {
				undo()
				return fmt.Errorf("load: %w", err)
			}
			fresh = append(fresh, s)
		}
		next.insert(s, g.isLocal(cfg.Src), g.isLocal(cfg.Dst), len(policies) == 0)
	}
	// The policies bind by SPI to the SAs of the set being loaded. A
	// policy naming an SA that is inbound here (one SA file for both
	// gateways) stays: its packets count as no-sa.
	spd, err := sa.NewSPD(unbound(policies), sas)
	if err != nil {
		undo()
		return fmt.Errorf("load policies: %w", err)
	}
	next.spd = spd
	for _, p := range spd.Policies() {
		if p.Action == sa.Protect {
			next.named[p.SPI]++
		}
	}
	next.pickOnly(len(policies) == 0)
	g.reserveFirst(fresh)
	g.swap(next)
	g.takeOver(fresh)
	var gone []*esp.SA
	for k, s := range old.all {
		if next.all[k] != s {
			gone = append(gone, s)
		}
	}
	g.retire(gone)
	g.log.Info("SAs loaded", "sas", len(sas), "policies", len(policies), "outbound", len(next.out), "inbound", next.inbound(),
		"new", len(fresh), "kept", len(next.all)-len(fresh), "removed", len(gone))
	return nil
}

// unbound copies policies without their SA pointers, so that each binds by
// SPI to the SA of the set it is loaded with, not one it was parsed with.
func unbound(policies []sa.Policy) []sa.Policy {
	ps := slices.Clone(policies)
	for i := range ps {
		ps[i].SA = nil
	}
	return ps
}

// admit checks that cfg can join the SAs of st.
func (g *Gateway) admit(st *state, cfg *sa.SA) error {
	if cfg.IfID != 0 || !cfg.OutputMark.IsZero() {
		return fmt.Errorf("if-id and output-mark belong to a Linux kernel's xfrm interfaces and packet marks, which espgw's data path does not have (sa convert carries them)")
	}
	outbound, inbound := g.isLocal(cfg.Src), g.isLocal(cfg.Dst)
	if !outbound && !inbound {
		return fmt.Errorf("neither %s nor %s is a local address of this gateway", cfg.Src, cfg.Dst)
	}
	if prev := st.all[keyOf(cfg)]; prev != nil {
		return fmt.Errorf("duplicate SPI %#x for dst %s (also %s): an inbound packet could not tell them apart", cfg.SPI, cfg.Dst, prev.Config)
	}
	if prev := st.out[cfg.SPI]; outbound && prev != nil {
		return fmt.Errorf("outbound SPI %#x is also that of %s: policies name outbound SAs by SPI", cfg.SPI, prev.Config)
	}
	if outbound {
		if c := g.pick(cfg); c == nil {
			return fmt.Errorf("no outer socket for %s over IPv%d (encap %s): the runtime must open one first", cfg, ipVersion(cfg.Dst), cfg.Encap)
		}
	}
	return nil
}

func ipVersion(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// newSA builds the working state of an SA that replaces prev (nil: none).
// An SA whose SPI, addresses, suite and keys are prev's is prev under a
// changed configuration: it continues prev's sequence numbers and replay
// window (esp.Options.Continue). Any other is a new SA, and one with
// prev's SPI and destination but other keys is logged as such.
func (g *Gateway) newSA(cfg *sa.SA, prev *esp.SA) (*esp.SA, error) {
	opts := esp.Options{OnSoftExpire: g.onSoftExpire, IVKey: g.ivKey}
	if prev != nil && esp.SameIdentity(prev.Config, cfg) {
		opts.Continue = prev
		if g.isLocal(cfg.Src) && g.seq != nil {
			opts.Reserve = g.reserveSeq
		}
		s, err := esp.NewSA(cfg, g.engine, opts)
		if err != nil {
			return nil, err
		}
		s.Aux = newSAHeader(cfg)
		g.log.Info("SA changed: it keeps its sequence numbers and replay window", "spi", fmt.Sprintf("%#x", cfg.SPI), "dst", cfg.Dst,
			"last-sent", s.LastSeq(), "highest-received", s.HighestAccepted())
		return s, nil
	}
	if prev != nil {
		g.log.Info("SA keys changed: a new SA, its sequence numbers and replay window start afresh", "spi", fmt.Sprintf("%#x", cfg.SPI), "dst", cfg.Dst)
	}
	run := cfg
	if g.isLocal(cfg.Src) && g.seq != nil {
		if err := g.seq.open(); err != nil {
			return nil, err
		}
		var err error
		if run, err = g.seq.resume(cfg); err != nil {
			return nil, err
		}
		if err := run.Validate(); err != nil {
			// A bound at the end of the sequence space (2^32-1 without
			// ESN) would make every packet seq-exhausted.
			return nil, fmt.Errorf("SA %#x resumed from %s: %w (that bound is of an SA which used its sequence numbers up: a new SA needs a new SPI, or its record removed if its peer starts afresh too)", cfg.SPI, g.seq.source(cfg), err)
		}
		opts.Reserve = g.reserveSeq
	}
	s, err := esp.NewSA(run, g.engine, opts)
	if err != nil {
		return nil, err
	}
	// The outer-header options and the path MTU learned for the SA live
	// with it, for its whole life (a change of them is a new SA).
	s.Aux = newSAHeader(cfg)
	if g.isLocal(cfg.Dst) && cfg.InitialSeq != 0 {
		// The peer's first packet is InitialSeq+1 (sa.SA): start the
		// window there, as the kernel's replay-seq does, so that ESN high
		// bits are inferred from it and not from 0.
		s.StartReceiveAfter(cfg.InitialSeq)
	}
	return s, nil
}

// takeOver applies, once a change is in force, what its SAs that continue
// others change in the history they share (esp.SA.TakeOver), and an
// inbound SA's initial sequence above what it has seen.
func (g *Gateway) takeOver(fresh []*esp.SA) {
	for _, s := range fresh {
		s.TakeOver()
		if g.isLocal(s.Config.Dst) && s.Config.InitialSeq != 0 {
			s.StartReceiveAfter(s.Config.InitialSeq)
		}
	}
}

// reserveFirst makes the first sequence reservations of the new outbound
// SAs of a change before they go in force, all in one write to the
// journal: the data path never waits for them.
func (g *Gateway) reserveFirst(fresh []*esp.SA) {
	if g.seq == nil {
		return
	}
	var out []*esp.SA
	for _, s := range fresh {
		if g.isLocal(s.Config.Src) {
			out = append(out, s)
		}
	}
	g.seq.reserveFirst(out)
}

// insert adds s to the maps of st. Without policies, an outbound
// transport-mode SA protects the traffic to its peer.
func (st *state) insert(s *esp.SA, outbound, inbound, noPolicies bool) {
	cfg := s.Config
	st.all[keyOf(cfg)] = s
	if outbound {
		st.out[cfg.SPI] = s
		if cfg.Mode == sa.Transport && noPolicies {
			st.byPeer[cfg.Dst] = s
		}
	}
	if inbound {
		st.in.Add(cfg, s)
	}
}

// remove takes s out of the maps of st.
func (st *state) remove(s *esp.SA) {
	cfg := s.Config
	delete(st.all, keyOf(cfg))
	if st.out[cfg.SPI] == s {
		delete(st.out, cfg.SPI)
	}
	st.in.Remove(cfg.SPI, s)
	if st.byPeer[cfg.Dst] == s {
		delete(st.byPeer, cfg.Dst)
	}
}

// inbound counts the inbound SAs.
func (st *state) inbound() int { return st.in.Len() }

// receiver finds the SA of an inbound packet with the SPI that arrived as
// a, or why there is none. It does not allocate.
func (st *state) receiver(spi uint32, a sa.Arrival) (*esp.SA, sa.Miss) {
	return st.in.Find(spi, a)
}

// pickOnly sets the single-tunnel shortcut: with no policies and exactly one
// outbound tunnel SA, everything routed into the TUN goes through it.
func (st *state) pickOnly(noPolicies bool) {
	st.only = nil
	if !noPolicies {
		return
	}
	for _, s := range st.out {
		if s.Config.Mode != sa.Tunnel {
			continue
		}
		if st.only != nil {
			st.only = nil
			return
		}
		st.only = s
	}
}

// current is the state in force. Callers hold mu (changes) or tables.
func (g *Gateway) current() *state { return g.st }

// view gives the data path the state in force for one batch; release ends
// the batch's hold on it.
func (g *Gateway) view() *state {
	g.tables.RLock()
	return g.st
}

func (g *Gateway) release() { g.tables.RUnlock() }

// swap puts next in force.
func (g *Gateway) swap(next *state) {
	g.tables.Lock()
	g.st = next
	g.tables.Unlock()
}

// retire closes the engine sessions of SAs taken out of force, once every
// batch that may have looked them up has left the engine. Until then they
// are listed as retiring; after, their counts join the retired totals, so
// that what an SA carried is never lost from the gateway's counters.
func (g *Gateway) retire(gone []*esp.SA) {
	if len(gone) == 0 {
		return
	}
	after := g.opts.RetireAfter
	if after == 0 {
		after = DefaultRetireAfter
	}
	r := &retirement{gone: gone}
	g.retired.mu.Lock()
	defer g.retired.mu.Unlock()
	for _, s := range gone {
		g.retired.live[s] = direction(g.isLocal(s.Config.Src), g.isLocal(s.Config.Dst))
	}
	g.retired.pending[r] = struct{}{}
	r.timer = time.AfterFunc(after, func() { g.finishRetire(r) })
}

// retirement is SAs taken out of force together, waiting for their time.
type retirement struct {
	gone  []*esp.SA
	timer *time.Timer
}

// finishRetire closes the sessions of r's SAs and adds their counts to the
// retired totals, once (the timer or Close, whichever comes first).
func (g *Gateway) finishRetire(r *retirement) {
	g.retired.mu.Lock()
	_, pending := g.retired.pending[r]
	delete(g.retired.pending, r)
	g.retired.mu.Unlock()
	if !pending {
		return
	}
	for _, s := range r.gone {
		if err := s.Close(); err != nil {
			g.log.Warn("close a retired SA's session", "spi", fmt.Sprintf("%#x", s.SPI()), "err", err)
		}
	}
	g.retired.mu.Lock()
	defer g.retired.mu.Unlock()
	for _, s := range r.gone {
		dir := g.retired.live[s]
		delete(g.retired.live, s)
		sum := g.retired.totals[dir]
		if sum == nil {
			sum = &esp.Snapshot{Drops: map[string]uint64{}}
			g.retired.totals[dir] = sum
		}
		sum.Add(s.Snapshot())
	}
}

// retiredSAs are the SAs taken out of force: those whose sessions are still
// open for packets in flight, and the sums of those closed, by direction.
type retiredSAs struct {
	mu     sync.Mutex
	live   map[*esp.SA]string
	totals map[string]*esp.Snapshot
	// pending are the retirements waiting for their time (Close finishes
	// them at once).
	pending map[*retirement]struct{}
}

func direction(out, in bool) string {
	switch {
	case out && in:
		return "both"
	case out:
		return "out"
	}
	return "in"
}

// SAID names an SA: its SPI and, when several SAs share the SPI, its
// destination.
type SAID struct {
	SPI uint32
	Dst netip.Addr // zero: the one SA with SPI
}

func (id SAID) String() string {
	if id.Dst.IsValid() {
		return fmt.Sprintf("SA %#x to %s", id.SPI, id.Dst)
	}
	return fmt.Sprintf("SA %#x", id.SPI)
}

// PolicyID names a policy in force by what it says (priority, selector,
// action, SA) and, when Index is not negative, by its place in lookup order
// as Policies lists them: a deletion meant for one policy never removes
// another after the list moved.
type PolicyID struct {
	Index  int
	Policy sa.Policy
}

// Change is one edit of the SAs and policies in force, applied whole or not
// at all: the control socket's unit of work.
type Change struct {
	// Del are the SAs taken out of force; Add the new ones. An SA both
	// deleted and added is replaced (an update): with the same SPI,
	// addresses, suite and keys it continues the sequence numbers and
	// replay window of the one in force (Equal to it, it stays that SA);
	// with other keys it starts afresh.
	Del []SAID
	Add []*sa.SA
	// Retarget moves the protect policies naming one outbound SPI to
	// another (a rekey's switch of outbound).
	Retarget map[uint32]uint32
	// DelPolicies and AddPolicies edit the SPD; added policies go after
	// the policies of equal priority already in force.
	DelPolicies []PolicyID
	AddPolicies []sa.Policy
}

// Apply makes a change. Everything is checked and every new SA's engine
// session is built before the data path sees any of it; then the change
// takes effect between two batches.
func (g *Gateway) Apply(c Change) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	cur := g.current()
	// Work on copies of what the change touches: an error leaves the
	// state in force untouched.
	gone := map[saKey]*esp.SA{}
	for _, id := range c.Del {
		s, err := cur.find(id)
		if err != nil {
			return fmt.Errorf("delete %s: %w", id, err)
		}
		if _, twice := gone[keyOf(s.Config)]; twice {
			return fmt.Errorf("delete %s: named twice", id)
		}
		gone[keyOf(s.Config)] = s
	}
	// A scratch state holds the SAs that stay, for admit's checks: only
	// the keys that can clash are copied, never the whole table.
	scratch := &state{all: map[saKey]*esp.SA{}, out: map[uint32]*esp.SA{}, in: sa.NewIndex[*esp.SA](0)}
	var added []*esp.SA
	var fresh []*esp.SA
	undo := func() {
		for _, s := range fresh {
			s.Close()
		}
	}
	noPolicies := cur.spd.Len() == 0 && len(c.AddPolicies) == 0
	for _, cfg := range c.Add {
		if err := cfg.Validate(); err != nil {
			undo()
			return fmt.Errorf("add %s: %w", cfg, err)
		}
		if k := keyOf(cfg); cur.all[k] != nil && gone[k] == nil {
			scratch.all[k] = cur.all[k]
		}
		if s := cur.out[cfg.SPI]; s != nil && gone[keyOf(s.Config)] == nil {
			scratch.out[cfg.SPI] = s
		}
		if err := g.admit(scratch, cfg); err != nil {
			undo()
			return fmt.Errorf("add %s: %w", cfg, err)
		}
		s := gone[keyOf(cfg)]
		if s == nil || !s.Config.Equal(cfg) {
			var err error
			if s, err = g.newSA(cfg, s); err != nil {
				undo()
				return fmt.Errorf("add: %w", err)
			}
			fresh = append(fresh, s)
		}
		scratch.insert(s, g.isLocal(cfg.Src), g.isLocal(cfg.Dst), noPolicies)
		added = append(added, s)
	}
	// outAfter is the SA a policy naming spi binds to after the change:
	// the outbound one, or (as Load binds) an inbound one.
	outAfter := func(spi uint32) *esp.SA {
		alive := func(s *esp.SA) bool {
			return s != nil && (gone[keyOf(s.Config)] == nil || slices.Contains(added, s))
		}
		for _, m := range []map[uint32]*esp.SA{scratch.out, cur.out} {
			if s := m[spi]; alive(s) {
				return s
			}
		}
		for _, in := range []*sa.Index[*esp.SA]{scratch.in, cur.in} {
			for _, s := range in.WithSPI(spi) {
				if alive(s) {
					return s
				}
			}
		}
		return nil
	}
	// The policy edits are resolved and checked here and made in place
	// under the lock, at a cost that does not grow with the SPD.
	edit, err := planPolicies(cur, c, outAfter)
	if err != nil {
		undo()
		return err
	}
	for _, s := range gone {
		spi := s.Config.SPI
		if n := cur.named[spi] + edit.named[spi]; cur.out[spi] == s && n > 0 && outAfter(spi) == nil {
			undo()
			return fmt.Errorf("delete %s: %d policies still name it (delete or retarget them in the same change)", s.Config, n)
		}
	}
	// The new outbound SAs' first reservations, in one write: the first
	// packet on them (a rekey's switch under load) does not wait for one.
	g.reserveFirst(fresh)
	// Everything is checked: edit the state in force.
	g.tables.Lock()
	st := g.st
	hadPolicies := st.spd.Len() > 0
	edit.apply(st)
	noPolicies = st.spd.Len() == 0
	for _, s := range gone {
		if !slices.Contains(added, s) {
			st.remove(s)
		}
	}
	for _, s := range added {
		st.insert(s, g.isLocal(s.Config.Src), g.isLocal(s.Config.Dst), noPolicies)
	}
	switch {
	case !noPolicies:
		st.only = nil
		clear(st.byPeer)
	case hadPolicies:
		// The last policy went: the gateway's own traffic to its
		// transport-mode peers is protected again.
		for _, s := range st.out {
			if s.Config.Mode == sa.Transport {
				st.byPeer[s.Config.Dst] = s
			}
		}
		fallthrough
	default:
		st.pickOnly(true)
	}
	g.tables.Unlock()
	g.takeOver(fresh)
	var retired []*esp.SA
	for _, s := range gone {
		if !slices.Contains(added, s) {
			retired = append(retired, s)
		}
	}
	g.retire(retired)
	return nil
}

// Find returns the configuration of the SA in force that id names.
func (g *Gateway) Find(id SAID) (*sa.SA, error) {
	st := g.view()
	defer g.release()
	s, err := st.find(id)
	if err != nil {
		return nil, err
	}
	return s.Config, nil
}

// IsLocal reports whether a is one of the gateway's outer addresses.
func (g *Gateway) IsLocal(a netip.Addr) bool { return g.isLocal(a) }

// find resolves an SA's name.
func (st *state) find(id SAID) (*esp.SA, error) {
	if id.Dst.IsValid() {
		if s := st.all[saKey{id.SPI, id.Dst}]; s != nil {
			return s, nil
		}
		return nil, errors.New("no such SA")
	}
	found := st.out[id.SPI]
	for _, s := range st.in.WithSPI(id.SPI) {
		if found != nil && s != found {
			return nil, fmt.Errorf("SPI %#x is shared by SAs to %s and %s: give the destination", id.SPI, found.Config.Dst, s.Config.Dst)
		}
		found = s
	}
	if found == nil {
		// Neither in nor out by SPI alone: an SA to another destination
		// with an SPI shared by both maps' SAs; a scan finds it.
		for k, s := range st.all {
			if k.spi == id.SPI {
				if found != nil {
					return nil, fmt.Errorf("SPI %#x is shared by SAs to %s and %s: give the destination", id.SPI, found.Config.Dst, s.Config.Dst)
				}
				found = s
			}
		}
	}
	if found == nil {
		return nil, errors.New("no such SA")
	}
	return found, nil
}

// policyEdit is a change's policy edits, resolved and checked: the places
// of the policies to delete, the retargets, the bound policies to add, and
// what each SPI's count of naming policies moves by.
type policyEdit struct {
	del      []int // places in lookup order, highest first
	retarget map[uint32]*sa.SA
	add      []sa.Policy
	named    map[uint32]int
}

// planPolicies resolves a change's policy edits against the policies in
// force; outAfter is the SA a protect policy naming an SPI binds to after
// the change.
func planPolicies(cur *state, c Change, outAfter func(uint32) *esp.SA) (*policyEdit, error) {
	e := &policyEdit{named: map[uint32]int{}}
	taken := map[int]bool{}
	for _, id := range c.DelPolicies {
		i := id.Index
		if i < 0 {
			for i = cur.spd.Find(id.Policy, 0); i >= 0 && taken[i]; {
				i = cur.spd.Find(id.Policy, i+1)
			}
			if i < 0 {
				return nil, fmt.Errorf("delete policy %s: no such policy in force", &id.Policy)
			}
		} else if i >= cur.spd.Len() {
			return nil, fmt.Errorf("delete policy %d: there are %d policies", i, cur.spd.Len())
		} else if p := cur.spd.Policy(i); !samePolicy(&p, &id.Policy) {
			return nil, fmt.Errorf("delete policy %d: it is %s, not %s", i, &p, &id.Policy)
		}
		if taken[i] {
			return nil, fmt.Errorf("delete policy %d: named twice", i)
		}
		taken[i] = true
		e.del = append(e.del, i)
		if p := cur.spd.Policy(i); p.Action == sa.Protect {
			e.named[p.SPI]--
		}
	}
	slices.SortFunc(e.del, func(a, b int) int { return b - a })
	for from, to := range c.Retarget {
		s := outAfter(to)
		if s == nil {
			return nil, fmt.Errorf("retarget policies from SA %#x: no SA with SPI %#x", from, to)
		}
		if e.retarget == nil {
			e.retarget = map[uint32]*sa.SA{}
		}
		e.retarget[from] = s.Config
		// Every policy naming from that stays moves to to.
		n := cur.named[from] + e.named[from]
		e.named[from] -= n
		e.named[to] += n
	}
	for _, p := range unbound(c.AddPolicies) {
		if p.Action == sa.Protect {
			s := outAfter(p.SPI)
			if s == nil {
				return nil, fmt.Errorf("policy %s: no SA with SPI %#x", &p, p.SPI)
			}
			p.SA = s.Config
			e.named[p.SPI]++
		}
		if err := p.Check(); err != nil {
			return nil, fmt.Errorf("policy %s: %w", &p, err)
		}
		e.add = append(e.add, p)
	}
	return e, nil
}

// apply makes the edits in st; the caller holds the tables' lock.
func (e *policyEdit) apply(st *state) {
	for _, i := range e.del {
		st.spd.Delete(i)
	}
	for from, to := range e.retarget {
		st.spd.Retarget(from, to)
	}
	for _, p := range e.add {
		st.spd.Insert(p)
	}
	for spi, d := range e.named {
		if st.named[spi] += d; st.named[spi] <= 0 {
			delete(st.named, spi)
		}
	}
}

// samePolicy compares what two policies say (not which SA value they hold).
func samePolicy(a, b *sa.Policy) bool {
	return a.Priority == b.Priority && a.Selector == b.Selector && a.Action == b.Action && a.SPI == b.SPI
}

// Policies returns the policies in force, in lookup order.
func (g *Gateway) Policies() []sa.Policy {
	st := g.view()
	defer g.release()
	return slices.Clone(st.spd.Policies())
}

// SAs returns the working SAs in force, by SPI and destination.
func (g *Gateway) SAs() []*esp.SA {
	st := g.view()
	out := make([]*esp.SA, 0, len(st.all))
	for _, s := range st.all {
		out = append(out, s)
	}
	g.release()
	slices.SortFunc(out, func(a, b *esp.SA) int {
		if c := cmp.Compare(a.SPI(), b.SPI()); c != 0 {
			return c
		}
		return a.Config.Dst.Compare(b.Config.Dst)
	})
	return out
}
