package esp

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"time"

	"github.com/espgw/espgw/sa"
)

// Fragments and selectors with ports (RFC 4301 §7).
//
// Only the first fragment of an IP packet carries the upper-layer header;
// the bytes at the start of a later fragment are payload, so reading ports
// there judges a packet by its data: a fragmented flow to an allowed port
// is refused, and a forbidden flow whose payload looks like an allowed port
// gets through. espgw never reads ports from a non-initial fragment. Its
// choice among §7's options is stateful fragment checking (§7.3) with the
// §7.1 rule as the fallback:
//
//   - An initial fragment (offset 0, more fragments) is judged by its own
//     ports, like any packet, and its ports are remembered under its
//     fragment identity (source, destination, protocol, IP ID / IPv6
//     fragment ID) for FragmentTimeout.
//   - A non-initial fragment is judged by the ports remembered for its
//     identity: it goes exactly where its initial fragment went.
//   - A non-initial fragment whose initial fragment was not seen (it came
//     later, or the table overflowed) has OPAQUE ports (§4.4.1.1): port 0,
//     which only a selector with any ports matches. It is refused by a
//     selector that names ports, and counted (policy inbound, no-policy or
//     the matching entry's action outbound) — failing closed.
//   - An initial fragment too short to hold the ports is OPAQUE too.
//
// Outbound the SPD applies this (gateway), inbound an SA's selectors (Open).
// The table is fixed-size and allocated on the first fragment seen, so
// unfragmented traffic pays nothing and no packet allocates.

// FragmentTimeout is how long an initial fragment's ports are remembered
// for the fragments after it (the reassembly timeout of IPv4 stacks).
const FragmentTimeout = 30 * time.Second

// fragmentSlots is the size of a fragment table (a power of two).
const fragmentSlots = 256

// Fragment is where an IP packet stands in a fragmented datagram.
type Fragment struct {
	// Is: the packet is a fragment (IPv4 MF or offset, or an IPv6
	// fragment header).
	Is bool
	// Initial: offset 0 — the fragment that holds the upper-layer header.
	Initial bool
	// ID is the IPv4 identification or the IPv6 fragment identification.
	ID uint32
}

// FragmentOf reads the fragment fields of an IPv4 or IPv6 packet.
func FragmentOf(pkt []byte) Fragment {
	if len(pkt) >= 20 && pkt[0]>>4 == 4 {
		ff := binary.BigEndian.Uint16(pkt[6:8])
		off, more := ff&0x1fff, ff&0x2000 != 0
		if !more && off == 0 {
			return Fragment{}
		}
		return Fragment{Is: true, Initial: off == 0, ID: uint32(binary.BigEndian.Uint16(pkt[4:6]))}
	}
	if len(pkt) < 40 || pkt[0]>>4 != 6 {
		return Fragment{}
	}
	hl, next := 40, pkt[6]
	for next == 0 || next == 43 || next == 60 || next == 44 {
		if len(pkt) < hl+8 {
			return Fragment{}
		}
		if next == 44 {
			fo := binary.BigEndian.Uint16(pkt[hl+2 : hl+4])
			return Fragment{Is: true, Initial: fo>>3 == 0, ID: binary.BigEndian.Uint32(pkt[hl+4 : hl+8])}
		}
		next = pkt[hl]
		hl += (int(pkt[hl+1]) + 1) * 8
	}
	return Fragment{}
}

// Fragments remembers initial fragments' ports so the fragments after them
// are judged by the same ports. Safe for concurrent use; the zero value is
// ready.
type Fragments struct {
	mu    sync.Mutex
	slots *[fragmentSlots]fragmentEntry // allocated on the first fragment
}

type fragmentEntry struct {
	src, dst     netip.Addr
	id           uint32
	proto        uint8
	sport, dport uint16
	expires      int64 // unix ns; 0: empty
}

// FlowOf is esp.FlowOf for a packet that may be a fragment: an initial
// fragment's ports are recorded, a non-initial one gets those of its
// initial fragment, or 0 (OPAQUE) if it was not seen. It allocates nothing
// but the table, once.
func (f *Fragments) FlowOf(pkt []byte) (src, dst netip.Addr, proto uint8, sport, dport uint16, ok bool) {
	src, dst, proto, sport, dport, ok = FlowOf(pkt)
	if !ok {
		return
	}
	fr := FragmentOf(pkt)
	if !fr.Is || !sa.HasPorts(proto) {
		return
	}
	now := time.Now().UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.slots == nil {
		f.slots = new([fragmentSlots]fragmentEntry)
	}
	e := &f.slots[fragmentHash(src, dst, proto, fr.ID)]
	same := e.expires > now && e.id == fr.ID && e.proto == proto && e.src == src && e.dst == dst
	if fr.Initial {
		// A later initial fragment of the same identity (a retransmit, or
		// an attempt to rewrite the ports) replaces the record: every
		// initial fragment is judged by its own ports.
		*e = fragmentEntry{src: src, dst: dst, id: fr.ID, proto: proto, sport: sport, dport: dport, expires: now + int64(FragmentTimeout)}
		return
	}
	if same {
		return src, dst, proto, e.sport, e.dport, true
	}
	return src, dst, proto, 0, 0, true
}

func fragmentHash(src, dst netip.Addr, proto uint8, id uint32) int {
	s, d := src.As16(), dst.As16()
	h := uint64(id)*0x9e3779b97f4a7c15 ^ uint64(proto)<<56
	h ^= binary.LittleEndian.Uint64(s[8:]) * 0xff51afd7ed558ccd
	h ^= binary.LittleEndian.Uint64(d[8:]) * 0xc4ceb9fe1a85ec53
	h ^= h >> 29
	return int(h & (fragmentSlots - 1))
}

// nonInitial reports whether pkt is a fragment other than the first.
func nonInitial(pkt []byte) bool {
	if len(pkt) >= 20 && pkt[0]>>4 == 4 {
		return binary.BigEndian.Uint16(pkt[6:8])&0x1fff != 0 // the common case, without the IPv6 walk
	}
	fr := FragmentOf(pkt)
	return fr.Is && !fr.Initial
}
