package ike

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/espgw/espgw/sa"
)

// Traffic selector types (RFC 7296 §3.13.1).
const (
	tsIPv4 = 7
	tsIPv6 = 8
)

// maxSelectors bounds the selectors of one TS payload.
const maxSelectors = 32

// Selector is one traffic selector: an address range, an IP protocol (0
// for any) and a port range.
type Selector struct {
	Proto              uint8
	StartPort, EndPort uint16
	Start, End         netip.Addr
}

// PrefixSelector is every protocol and port of a prefix.
func PrefixSelector(p netip.Prefix) Selector {
	p = p.Masked()
	return Selector{EndPort: 0xffff, Start: p.Addr(), End: lastAddr(p)}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Prefix returns the selector's address range as a prefix, when it is one.
func (s Selector) Prefix() (netip.Prefix, bool) {
	for bits := 0; bits <= s.Start.BitLen(); bits++ {
		p := netip.PrefixFrom(s.Start, bits)
		if p.Masked().Addr() == s.Start && lastAddr(p) == s.End {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

func (s Selector) String() string {
	r := s.Start.String() + "-" + s.End.String()
	if p, ok := s.Prefix(); ok {
		r = p.String()
	}
	if s.Proto != 0 || s.StartPort != 0 || s.EndPort != 0xffff {
		r += fmt.Sprintf("[%d/%d-%d]", s.Proto, s.StartPort, s.EndPort)
	}
	return r
}

// intersect narrows a to what b also covers (RFC 7296 §2.9).
func (s Selector) intersect(o Selector) (Selector, bool) {
	if s.Start.Is4() != o.Start.Is4() {
		return Selector{}, false
	}
	r := s
	switch {
	case s.Proto == 0:
		r.Proto = o.Proto
	case o.Proto != 0 && o.Proto != s.Proto:
		return Selector{}, false
	}
	r.StartPort, r.EndPort = max(s.StartPort, o.StartPort), min(s.EndPort, o.EndPort)
	if s.Start.Less(o.Start) {
		r.Start = o.Start
	}
	if o.End.Less(s.End) {
		r.End = o.End
	}
	if r.StartPort > r.EndPort || r.End.Less(r.Start) {
		return Selector{}, false
	}
	return r, true
}

// Narrow returns the parts of the proposed selectors that the allowed ones
// cover, in the order proposed.
func Narrow(proposed, allowed []Selector) []Selector {
	var out []Selector
	for _, p := range proposed {
		for _, a := range allowed {
			if n, ok := p.intersect(a); ok {
				out = append(out, n)
			}
		}
	}
	return out
}

// Within reports whether every selector of got lies inside one of allowed.
func Within(got, allowed []Selector) bool {
	for _, g := range got {
		ok := false
		for _, a := range allowed {
			if n, hit := g.intersect(a); hit && n == g {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return len(got) > 0
}

// TS is a TSi or TSr payload.
type TS struct {
	Kind      PayloadType // PayloadTSi or PayloadTSr
	Selectors []Selector
}

func (t *TS) Type() PayloadType { return t.Kind }

func (t *TS) appendBody(b []byte) []byte {
	b = append(b, byte(len(t.Selectors)), 0, 0, 0)
	for _, s := range t.Selectors {
		typ, n := byte(tsIPv4), 16
		if !s.Start.Is4() {
			typ, n = tsIPv6, 40
		}
		b = append(b, typ, s.Proto)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
		b = binary.BigEndian.AppendUint16(b, s.StartPort)
		b = binary.BigEndian.AppendUint16(b, s.EndPort)
		b = append(b, s.Start.AsSlice()...)
		b = append(b, s.End.AsSlice()...)
	}
	return b
}

func parseTS(t PayloadType, body []byte) (*TS, error) {
	if len(body) < 4 {
		return nil, fmt.Errorf("%d bytes, want at least 4", len(body))
	}
	n := int(body[0])
	if n == 0 || n > maxSelectors {
		return nil, fmt.Errorf("%d selectors, want 1 to %d", n, maxSelectors)
	}
	ts := &TS{Kind: t}
	off := 4
	for i := range n {
		if len(body)-off < 8 {
			return nil, fmt.Errorf("selector %d: %d bytes left, want 8", i+1, len(body)-off)
		}
		b := body[off:]
		typ, l := b[0], int(binary.BigEndian.Uint16(b[2:]))
		want := map[byte]int{tsIPv4: 16, tsIPv6: 40}[typ]
		if want == 0 {
			return nil, fmt.Errorf("selector %d: type %d, want 7 (IPv4) or 8 (IPv6)", i+1, typ)
		}
		if l != want || l > len(b) {
			return nil, fmt.Errorf("selector %d: length %d, want %d (%d bytes left)", i+1, l, want, len(b))
		}
		alen := (want - 8) / 2
		s := Selector{Proto: b[1], StartPort: binary.BigEndian.Uint16(b[4:]), EndPort: binary.BigEndian.Uint16(b[6:])}
		s.Start, _ = netip.AddrFromSlice(b[8 : 8+alen])
		s.End, _ = netip.AddrFromSlice(b[8+alen : 8+2*alen])
		if s.End.Less(s.Start) || s.EndPort < s.StartPort {
			return nil, fmt.Errorf("selector %d: empty range %s", i+1, s)
		}
		ts.Selectors = append(ts.Selectors, s)
		off += l
	}
	if off != len(body) {
		return nil, fmt.Errorf("%d bytes after the last selector", len(body)-off)
	}
	return ts, nil
}

// saSelectors turns the negotiated selectors into the SA's inbound
// selectors: traffic from the remote side to the local side. Ranges that
// are not prefixes are refused, since sa.Selector holds prefixes.
func saSelectors(local, remote []Selector) ([]sa.Selector, error) {
	var out []sa.Selector
	for _, r := range remote {
		rp, ok := r.Prefix()
		if !ok {
			return nil, fmt.Errorf("traffic selector %s is not a prefix", r)
		}
		for _, l := range local {
			lp, ok := l.Prefix()
			if !ok {
				return nil, fmt.Errorf("traffic selector %s is not a prefix", l)
			}
			if r.Start.Is4() != l.Start.Is4() {
				continue
			}
			proto := l.Proto
			if proto == 0 {
				proto = r.Proto
			}
			s := sa.Selector{Src: rp, Dst: lp, Proto: proto}
			if r.StartPort != 0 || r.EndPort != 0xffff {
				s.SrcPorts = sa.PortRange{Lo: r.StartPort, Hi: r.EndPort}
			}
			if l.StartPort != 0 || l.EndPort != 0xffff {
				s.DstPorts = sa.PortRange{Lo: l.StartPort, Hi: l.EndPort}
			}
			out = append(out, s)
		}
	}
	return out, nil
}
