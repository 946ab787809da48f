package sa

import "net/netip"

// Selector matches traffic by addresses, protocol and ports (RFC 4301 §4.4.1).
// Zero fields match anything.
type Selector struct {
	Src, Dst netip.Prefix
	Proto    uint8 // 0 = any
	SrcPorts PortRange
	DstPorts PortRange
}

// PortRange is an inclusive range; the zero range matches any port.
type PortRange struct{ Lo, Hi uint16 }

// Contains reports whether p falls in the range. Port 0 falls in no range
// but any: it is reserved, and it is what a packet whose ports are OPAQUE
// (RFC 4301 §4.4.1.1: a non-initial fragment, whose ports were never read)
// carries, which only an any-port selector may match — also one written
// 0-1023.
func (r PortRange) Contains(p uint16) bool {
	if r.Lo == 0 && r.Hi == 0 {
		return true
	}
	return p != 0 && p >= r.Lo && p <= r.Hi
}

// Matches reports whether a packet with these fields falls under the selector.
func (s Selector) Matches(src, dst netip.Addr, proto uint8, sport, dport uint16) bool {
	if s.Src.IsValid() && !s.Src.Contains(src) {
		return false
	}
	if s.Dst.IsValid() && !s.Dst.Contains(dst) {
		return false
	}
	if s.Proto != 0 && s.Proto != proto {
		return false
	}
	return s.SrcPorts.Contains(sport) && s.DstPorts.Contains(dport)
}

// Reverse is the selector of the traffic going the other way: sources and
// destinations swapped.
func (s Selector) Reverse() Selector {
	return Selector{Src: s.Dst, Dst: s.Src, Proto: s.Proto, SrcPorts: s.DstPorts, DstPorts: s.SrcPorts}
}
