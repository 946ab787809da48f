package capture

// Rewriting prepares any capture for replay through the test bed: it maps
// the capture's hosts onto the two hosts of the topology (hostA behind one
// gateway, hostB behind the other), fixes the IP, TCP, UDP, ICMP and ICMPv6
// checksums, and gives each packet its send time (kept, scaled or dropped).
// Every frame that yields no packet is counted under a named reason in
// Stats.

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/espgw/espgw/internal/header"
)

// Side is one end of the replay topology.
type Side uint8

const (
	// A is hostA, behind the first gateway; the capture's first sender
	// lands here.
	A Side = iota
	// B is hostB, behind the second gateway.
	B
)

func (s Side) String() string {
	if s == A {
		return "A"
	}
	return "B"
}

func (s Side) other() Side { return 1 - s }

// Hosts are the addresses of one side; an invalid (zero) address means the
// side has none of that family, and packets that need it are skipped.
type Hosts struct {
	IPv4 netip.Addr `yaml:"ipv4" json:"ipv4"`
	IPv6 netip.Addr `yaml:"ipv6" json:"ipv6"`
}

// Topology is where a capture's hosts go. Each capture address goes to one
// side: an address in Pin where it says; otherwise, the first time an
// address is seen, opposite to the other end of its packet if that end
// already has a side, else the source to A and the destination to B. So the
// capture's first sender becomes hostA and its peer hostB. Several capture
// hosts on one side all become that side's one address.
type Topology struct {
	A, B Hosts
	Pin  map[netip.Addr]Side
}

// The packet quoted in an ICMP or ICMPv6 error is mapped too. The limits of
// the mapping: addresses in IPv4 options and IPv6 routing headers are left
// as captured, and ESP or AH in the capture keep their (now wrong) integrity
// values.

func (t *Topology) hosts(s Side) Hosts {
	if s == A {
		return t.A
	}
	return t.B
}

// Timing says when the packets are due.
type Timing uint8

const (
	// KeepTiming keeps the capture's gaps, divided by Options.Speed.
	KeepTiming Timing = iota
	// AsFast makes every packet due at once.
	AsFast
)

// RewriteOptions tune Rewrite.
type RewriteOptions struct {
	Timing Timing `yaml:"timing" json:"timing"`
	// Speed divides the capture's gaps under KeepTiming: 2 replays twice as
	// fast. 0 means 1.
	Speed float64 `yaml:"speed" json:"speed"`
}

// Packet is one rewritten packet ready to send.
type Packet struct {
	From Side          // the host that sends it
	At   time.Duration // when, from the start of the replay
	Data []byte        // the IP packet, addresses and checksums rewritten
}

// Load reads a capture and rewrites it onto topo.
func Load(r io.Reader, name string, topo Topology, opt RewriteOptions) ([]Packet, Stats, error) {
	frames, st, err := ReadAll(r, name)
	if err != nil {
		return nil, st, err
	}
	pkts, st2, err := Rewrite(frames, topo, opt)
	st.Packets, st.Hosts = st2.Packets, st2.Hosts
	for k, v := range st2.Skipped {
		st.skip(k, v)
	}
	if err != nil {
		return nil, st, fmt.Errorf("capture %s: %w", name, err)
	}
	return pkts, st, nil
}

// Rewrite maps frames onto topo: it replaces both addresses of each packet
// by its sides' addresses of the same family, fixes the checksums and sets
// the due times. The frames' data is rewritten in place.
func Rewrite(frames []Frame, topo Topology, opt RewriteOptions) ([]Packet, Stats, error) {
	var st Stats
	speed := cmp.Or(opt.Speed, 1)
	if speed < 0 {
		return nil, st, fmt.Errorf("replay speed %v: want a factor > 0", opt.Speed)
	}
	sides := map[netip.Addr]Side{}
	for a, s := range topo.Pin {
		sides[a] = s
	}
	var out []Packet
	var t0 time.Time
	var last time.Duration
	for i, f := range frames {
		st.Frames++
		d := f.IP
		v6 := header.Version(d) == 6
		src, dst := header.Addrs(d)
		from, okS := sides[src]
		to, okD := sides[dst]
		switch {
		case !okS && !okD:
			from, to = A, B
		case !okS:
			from = to.other()
		case !okD:
			to = from.other()
		}
		if from == to {
			st.skip(fmt.Sprintf("both hosts on side %v", from), 1)
			continue
		}
		sides[src], sides[dst] = from, to
		newSrc, newDst := topo.hosts(from).IPv4, topo.hosts(to).IPv4
		if v6 {
			newSrc, newDst = topo.hosts(from).IPv6, topo.hosts(to).IPv6
		}
		if !newSrc.IsValid() || !newDst.IsValid() {
			st.skip(fmt.Sprintf("no IPv%d address on the topology", map[bool]int{false: 4, true: 6}[v6]), 1)
			continue
		}
		mapInner := func(old []byte) []byte {
			a, _ := netip.AddrFromSlice(old)
			side, ok := sides[a]
			if !ok {
				return nil
			}
			if a.Is4() {
				return topo.hosts(side).IPv4.AsSlice()
			}
			return topo.hosts(side).IPv6.AsSlice()
		}
		if err := readdress(d, newSrc.AsSlice(), newDst.AsSlice(), mapInner); err != nil {
			return nil, st, fmt.Errorf("packet %d: %w", i+1, err)
		}
		var at time.Duration
		if opt.Timing == KeepTiming {
			if len(out) == 0 {
				t0 = f.CI.Timestamp
			}
			at = max(time.Duration(float64(f.CI.Timestamp.Sub(t0))/speed), last)
			last = at
		}
		out = append(out, Packet{From: from, At: at, Data: d})
		st.Packets++
	}
	st.Hosts = map[string]string{}
	for a, s := range sides {
		st.Hosts[a.String()] = s.String()
	}
	if len(out) == 0 {
		return nil, st, fmt.Errorf("no packet could be mapped onto the topology (skipped: %v)", st.Skipped)
	}
	return out, st, nil
}

// readdress writes new addresses into the IP packet d and fixes every
// checksum they enter: the IPv4 header's, and the TCP, UDP or ICMPv6 one
// (recomputed in full for a whole packet; for a first fragment, whose
// payload is incomplete, adjusted for the address change as RFC 1624 says).
// ICMPv4 is recomputed too, for captures taken before checksum offload.
func readdress(d, src, dst []byte, mapInner func(old []byte) []byte) error {
	srcAt, dstAt := header.AddrBytes(d)
	n := len(srcAt)
	v6 := n == 16
	var old [32]byte
	copy(old[:], srcAt)
	copy(old[n:], dstAt)
	copy(srcAt, src)
	copy(dstAt, dst)
	l4, proto, f, ok := header.Upper(d)
	if v6 && (!ok || l4+8 > len(d)) {
		return fmt.Errorf("IPv6 extension header past the end of the packet")
	}
	if !v6 {
		header.IPv4Header(d[:l4])
	}
	laterFrag := f.Offset != 0
	firstFrag := !laterFrag && f.More
	if laterFrag {
		return nil
	}
	field := map[uint8]int{6: header.OffsetTCP, 17: header.OffsetUDP, 1: header.OffsetICMP, 58: header.OffsetICMPv6}
	off, ok := field[proto]
	if !ok || (proto == 1 && v6) || (proto == 58 && !v6) || l4+off+2 > len(d) {
		return nil
	}
	if !firstFrag && l4+8 < len(d) && isICMPError(proto, d[l4]) {
		rewriteQuoted(d[l4+8:], mapInner)
	}
	sum := binary.BigEndian.Uint16(d[l4+off:])
	if proto == 17 && !v6 && sum == 0 {
		return nil // no UDP checksum: stays none
	}
	if firstFrag {
		if proto == 1 {
			return nil // no pseudo-header: the addresses do not enter it
		}
		binary.BigEndian.PutUint16(d[l4+off:], header.Update(header.Update(sum, old[:n], srcAt), old[n:2*n], dstAt))
		return nil
	}
	header.L4(d[l4:], src, dst, proto, off)
	return nil
}

// isICMPError reports whether an ICMP or ICMPv6 message of this type quotes
// the packet that caused it.
func isICMPError(proto, typ uint8) bool {
	switch proto {
	case 1: // destination unreachable, source quench, redirect, time exceeded, parameter problem
		return typ == 3 || typ == 4 || typ == 5 || typ == 11 || typ == 12
	case 58: // destination unreachable, packet too big, time exceeded, parameter problem
		return typ >= 1 && typ <= 4
	}
	return false
}

// rewriteQuoted maps the addresses of the packet quoted in an ICMP error
// (as much of it as the error carries) the way the outer packets are
// mapped, fixing the quoted IPv4 header checksum and, when the quote reaches
// it (past any IPv6 extension headers, in a packet that is no later
// fragment), the quoted UDP or TCP checksum, so the error matches the
// rewritten flow it reports on. An address with no side yet is left as
// captured.
func rewriteQuoted(q []byte, mapInner func(old []byte) []byte) {
	srcAt, dstAt := header.AddrBytes(q)
	hl, proto, f, ok := header.Upper(q)
	n := len(srcAt)
	if srcAt == nil || n == 4 && !ok {
		return
	}
	var old [32]byte
	copy(old[:], srcAt)
	copy(old[n:], dstAt)
	for _, a := range [][]byte{srcAt, dstAt} {
		if m := mapInner(a); len(m) == n {
			copy(a, m)
		}
	}
	if n == 4 {
		header.IPv4Header(q[:hl])
	}
	off := map[uint8]int{6: header.OffsetTCP, 17: header.OffsetUDP}[proto]
	if !ok || f.Offset != 0 || off == 0 || hl+off+2 > len(q) {
		return
	}
	if c := binary.BigEndian.Uint16(q[hl+off:]); c != 0 || n == 16 {
		binary.BigEndian.PutUint16(q[hl+off:], header.Update(header.Update(c, old[:n], srcAt), old[n:2*n], dstAt))
	}
}

// String names the timing as UnmarshalText reads it.
func (t Timing) String() string {
	if t == AsFast {
		return "fast"
	}
	return "keep"
}

// UnmarshalText reads "keep" (the capture's timing) or "fast" (as fast as
// possible), so a Timing can sit in a YAML scenario.
func (t *Timing) UnmarshalText(b []byte) error {
	switch string(b) {
	case "keep", "":
		*t = KeepTiming
	case "fast":
		*t = AsFast
	default:
		return fmt.Errorf("timing %q: want keep or fast", b)
	}
	return nil
}

// MarshalText writes the timing's name.
func (t Timing) MarshalText() ([]byte, error) { return []byte(t.String()), nil }
