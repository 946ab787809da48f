package sa

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestSPDPriorityOrder(t *testing.T) {
	out := saTo(0x1001, "192.0.2.2")
	other := saTo(0x1002, "192.0.2.3")
	pfx := netip.MustParsePrefix
	policies := []Policy{
		{Priority: 100, Action: Discard}, // catch-all, last
		{Priority: 10, Selector: Selector{Dst: pfx("203.0.113.0/24")}, Action: Protect, SPI: 0x1001},
		{Priority: 5, Selector: Selector{Dst: pfx("203.0.113.0/24"), Proto: 6, DstPorts: PortRange{22, 22}}, Action: Bypass},
		{Priority: 10, Selector: Selector{Dst: pfx("203.0.113.128/25")}, Action: Protect, SA: other}, // same priority, later: shadowed
		{Priority: -1, Selector: Selector{Src: pfx("2001:db8::/32")}, Action: Protect, SPI: 0x1002},
	}
	spd, err := NewSPD(policies, []*SA{out, other})
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	cases := []struct {
		name         string
		src, dst     string
		proto        uint8
		sport, dport uint16
		action       Action
		sa           *SA
	}{
		{"ssh bypasses", "198.51.100.1", "203.0.113.5", 6, 40000, 22, Bypass, nil},
		{"udp 22 protected", "198.51.100.1", "203.0.113.5", 17, 40000, 22, Protect, out},
		{"tcp 80 protected", "198.51.100.1", "203.0.113.5", 6, 40000, 80, Protect, out},
		{"equal priority keeps file order", "198.51.100.1", "203.0.113.200", 6, 1, 443, Protect, out},
		{"rest discarded", "198.51.100.1", "192.0.2.99", 1, 0, 0, Discard, nil},
		{"ipv6 first", "2001:db8::1", "203.0.113.5", 6, 1, 22, Protect, other},
	}
	for _, c := range cases {
		p := spd.Lookup(a(c.src), a(c.dst), c.proto, c.sport, c.dport)
		if p == nil {
			t.Errorf("%s: no policy", c.name)
			continue
		}
		if p.Action != c.action || p.SA != c.sa {
			t.Errorf("%s: %v, want %s with %v", c.name, p, c.action, c.sa)
		}
	}
	var prios []int
	for _, p := range spd.Policies() {
		prios = append(prios, p.Priority)
	}
	if want := []int{-1, 5, 10, 10, 100}; !equalInts(prios, want) {
		t.Errorf("order %v, want %v", prios, want)
	}
	if p := spd.Policies()[3]; p.SA != other {
		t.Errorf("equal priorities reordered: %v", &p)
	}
	// The caller's slice is not reordered.
	if policies[0].Priority != 100 {
		t.Error("NewSPD sorted the caller's slice")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSPDNoMatchIsNil(t *testing.T) {
	spd, err := NewSPD([]Policy{{Selector: Selector{Dst: netip.MustParsePrefix("203.0.113.0/24")}, Action: Bypass}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := spd.Lookup(netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), 6, 1, 2); p != nil {
		t.Errorf("got %v, want nil (discard)", p)
	}
	var empty SPD
	if empty.Lookup(netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), 6, 1, 2) != nil {
		t.Error("zero SPD matched")
	}
}

func TestSPDBindErrors(t *testing.T) {
	s := saTo(0x1001, "192.0.2.2")
	dup := saTo(0x1001, "192.0.2.3")
	tr := saTo(0x3003, "192.0.2.2")
	tr.Mode = Transport
	cases := []struct {
		p    Policy
		sas  []*SA
		want string
	}{
		{Policy{Action: Protect, SPI: 0x9999}, []*SA{s}, "no SA with SPI 0x9999"},
		{Policy{Action: Protect, SPI: 0x1001}, []*SA{s, dup}, "SPI 0x1001 is ambiguous"},
		{Policy{Action: Bypass, SPI: 0x1001}, []*SA{s}, "bypass policy names an SA"},
		{Policy{Action: Action(9)}, nil, "unknown action action(9)"},
		{Policy{Action: Protect, SPI: 0x3003, Selector: Selector{Dst: netip.MustParsePrefix("2001:db8::/32")}}, []*SA{tr}, "another address family than transport-mode SA 0x3003"},
		{Policy{Action: Discard, Selector: Selector{Proto: 1, DstPorts: PortRange{1, 2}}}, nil, "dport: ports need proto"},
	}
	for _, c := range cases {
		_, err := NewSPD([]Policy{c.p}, c.sas)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", &c.p, err, c.want)
		}
	}
}

func TestSPDLookupDoesNotAllocate(t *testing.T) {
	spd, _ := NewSPD([]Policy{
		{Priority: 1, Selector: Selector{Dst: netip.MustParsePrefix("203.0.113.0/24"), Proto: 6}, Action: Bypass},
		{Priority: 2, Action: Discard},
	}, nil)
	src, dst := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("203.0.113.1")
	if n := testing.AllocsPerRun(1000, func() { spd.Lookup(src, dst, 17, 1, 2) }); n != 0 {
		t.Errorf("%v allocations per lookup", n)
	}
}

// TestSPDIndexMatchesLinearSearch builds random SPDs — overlapping prefixes
// of every length in both families, policies without a destination, equal
// priorities, protocols and port ranges — and asks the indexed Lookup and
// the plain first-match walk of the list the same random questions.
func TestSPDIndexMatchesLinearSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 4301))
	// Addresses come from a small pool so prefixes overlap and packets hit.
	addr := func(v6 bool) netip.Addr {
		if v6 {
			return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(rng.IntN(4)), 14: byte(rng.IntN(3)), 7: byte(rng.IntN(2))})
		}
		return netip.AddrFrom4([4]byte{203, 0, byte(rng.IntN(3)), byte(rng.IntN(8))})
	}
	prefix := func(v6 bool) netip.Prefix {
		switch rng.IntN(5) {
		case 0:
			return netip.Prefix{} // any
		}
		bits := rng.IntN(33)
		if v6 {
			bits = rng.IntN(129)
		}
		p, _ := addr(v6).Prefix(bits)
		return p
	}
	ports := func() PortRange {
		if rng.IntN(2) == 0 {
			return PortRange{}
		}
		lo := uint16(1 + rng.IntN(8))
		return PortRange{lo, lo + uint16(rng.IntN(4))}
	}
	for round := range 200 {
		var ps []Policy
		for range 1 + rng.IntN(60) {
			v6 := rng.IntN(3) == 0
			sel := Selector{Src: prefix(v6), Dst: prefix(v6)}
			if rng.IntN(2) == 0 {
				sel.Proto = []uint8{6, 17}[rng.IntN(2)]
				sel.SrcPorts, sel.DstPorts = ports(), ports()
			}
			ps = append(ps, Policy{Priority: rng.IntN(5), Selector: sel, Action: Action(rng.IntN(2))})
		}
		spd, err := NewSPD(ps, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 500 {
			v6 := rng.IntN(3) == 0
			src, dst := addr(v6), addr(v6)
			proto := []uint8{1, 6, 17}[rng.IntN(3)]
			sport, dport := uint16(rng.IntN(12)), uint16(rng.IntN(12))
			got, want := spd.Lookup(src, dst, proto, sport, dport), spd.lookupLinear(src, dst, proto, sport, dport)
			if got != want {
				t.Fatalf("round %d: %s → %s proto %d ports %d→%d: index gives %v, the list %v", round, src, dst, proto, sport, dport, got, want)
			}
		}
	}
}

// BenchmarkSPDScale finds a tunnel's policy among n, one destination /24
// each (the many-tunnel gateway) behind a catch-all discard, indexed and by
// walking the list.
func BenchmarkSPDScale(b *testing.B) {
	for _, n := range []int{1, 100, 10000} {
		var ps []Policy
		for i := range n {
			ps = append(ps, Policy{Priority: 10, Selector: Selector{
				Src: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24),
				Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 128 | byte(i>>8), byte(i), 0}), 24)}, Action: Bypass})
		}
		ps = append(ps, Policy{Priority: 100, Action: Discard})
		spd, err := NewSPD(ps, nil)
		if err != nil {
			b.Fatal(err)
		}
		i := n - 1
		src, dst := netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}), netip.AddrFrom4([4]byte{10, 128 | byte(i>>8), byte(i), 1})
		for _, m := range []struct {
			name   string
			lookup func(src, dst netip.Addr, proto uint8, sport, dport uint16) *Policy
		}{{"index", spd.Lookup}, {"linear", spd.lookupLinear}} {
			b.Run(fmt.Sprintf("%d/%s", n, m.name), func(b *testing.B) {
				for b.Loop() {
					if m.lookup(src, dst, 17, 1, 2).Action != Bypass {
						b.Fatal("wrong policy")
					}
				}
			})
		}
	}
}

// TestSPDEditsKeepFirstMatch inserts, deletes and retargets policies in
// place at random and checks after every edit that the order is the one a
// fresh stable sort by priority gives (new policies after their equals) and
// that every lookup is the first match of that list.
func TestSPDEditsKeepFirstMatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(4301, 15))
	a, b := saTo(0x1001, "192.0.2.2"), saTo(0x1002, "192.0.2.3")
	pfx := func() netip.Prefix {
		if rng.IntN(4) == 0 {
			return netip.Prefix{}
		}
		p, _ := netip.AddrFrom4([4]byte{203, 0, byte(rng.IntN(3)), byte(rng.IntN(8))}).Prefix(rng.IntN(33))
		return p
	}
	policy := func() Policy {
		p := Policy{Priority: rng.IntN(4), Selector: Selector{Src: pfx(), Dst: pfx()}, Action: Action(rng.IntN(3))}
		if p.Action == Protect {
			p.SA = a
			p.SPI = a.SPI
		}
		return p
	}
	var ref []Policy
	for range 20 {
		ref = append(ref, policy())
	}
	spd, err := NewSPD(ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(ref, func(x, y Policy) int { return cmp.Compare(x.Priority, y.Priority) })
	for step := range 2000 {
		switch k := rng.IntN(5); {
		case k < 2:
			p := policy()
			if err := p.Check(); err != nil {
				t.Fatal(err)
			}
			at := spd.Insert(p)
			i := 0
			for i < len(ref) && ref[i].Priority <= p.Priority {
				i++
			}
			if at != i {
				t.Fatalf("step %d: inserted at %d, want %d", step, at, i)
			}
			ref = slices.Insert(ref, i, p)
		case k < 4 && len(ref) > 0:
			i := rng.IntN(len(ref))
			if f := spd.Find(ref[i], 0); f < 0 || f > i {
				t.Fatalf("step %d: Find(%v) = %d, want at most %d", step, &ref[i], f, i)
			}
			spd.Delete(i)
			ref = slices.Delete(ref, i, i+1)
		default:
			from, to := a, b
			if rng.IntN(2) == 0 {
				from, to = b, a
			}
			n := spd.Retarget(from.SPI, to)
			m := 0
			for i := range ref {
				if ref[i].Action == Protect && ref[i].SPI == from.SPI {
					ref[i].SPI, ref[i].SA = to.SPI, to
					m++
				}
			}
			if n != m {
				t.Fatalf("step %d: retargeted %d, want %d", step, n, m)
			}
		}
		got := spd.Policies()
		if len(got) != len(ref) {
			t.Fatalf("step %d: %d policies, want %d", step, len(got), len(ref))
		}
		for i := range ref {
			if got[i].Priority != ref[i].Priority || got[i].Selector != ref[i].Selector || got[i].SPI != ref[i].SPI || got[i].Action != ref[i].Action {
				t.Fatalf("step %d: policy %d is %v, want %v", step, i, &got[i], &ref[i])
			}
		}
		for range 20 {
			src := netip.AddrFrom4([4]byte{203, 0, byte(rng.IntN(3)), byte(rng.IntN(8))})
			dst := netip.AddrFrom4([4]byte{203, 0, byte(rng.IntN(3)), byte(rng.IntN(8))})
			var want *Policy
			for i := range ref {
				if ref[i].Selector.Matches(src, dst, 17, 1, 2) {
					want = &ref[i]
					break
				}
			}
			p := spd.Lookup(src, dst, 17, 1, 2)
			if (p == nil) != (want == nil) || p != nil && (p.Priority != want.Priority || p.Selector != want.Selector || p.SPI != want.SPI || p.Action != want.Action) {
				t.Fatalf("step %d: %s → %s: got %v, want %v", step, src, dst, p, want)
			}
		}
	}
}

// TestOpaquePortsMatchOnlyAny: a packet whose ports are OPAQUE (a
// non-initial fragment: port 0, as esp.FlowOf gives it) matches a selector
// with any ports and no range, not even one that starts at 0.
func TestOpaquePortsMatchOnlyAny(t *testing.T) {
	src, dst := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("203.0.113.1")
	for _, tc := range []struct {
		r    PortRange
		want bool
	}{
		{PortRange{}, true},
		{PortRange{0, 1023}, false},
		{PortRange{1, 65535}, false},
		{PortRange{5000, 5000}, false},
	} {
		sel := Selector{Proto: 17, DstPorts: tc.r}
		if got := sel.Matches(src, dst, 17, 0, 0); got != tc.want {
			t.Errorf("dport %s against opaque ports: %v, want %v", tc.r, got, tc.want)
		}
		if tc.r.Lo <= 80 && 80 <= tc.r.Hi && tc.r != (PortRange{}) && !sel.Matches(src, dst, 17, 1234, 80) {
			t.Errorf("dport %s does not match port 80", tc.r)
		}
	}
}
