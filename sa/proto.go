package sa

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/espgw/espgw/internal/secret"
)

// protoNames are the upper-layer protocols selectors may name; any other
// protocol is written by number.
var protoNames = map[string]uint8{
	"any": 0, "icmp": 1, "igmp": 2, "ipip": 4, "ip4": 4, "tcp": 6, "udp": 17,
	"ipv6": 41, "gre": 47, "esp": 50, "ah": 51,
	"icmp6": 58, "icmpv6": 58, "ipv6-icmp": 58,
	"sctp": 132, "udplite": 136,
}

// ParseProto reads an upper-layer protocol by name (tcp, udp, icmp, icmp6,
// sctp, gre, esp, ah, any …) or number (0..255; 0 means any).
func ParseProto(s string) (uint8, error) {
	if p, ok := protoNames[strings.ToLower(s)]; ok {
		return p, nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("unknown protocol %s (want a name such as tcp, udp, icmp, icmp6, any, or a number 0..255)", secret.Value(s, protoWords()...))
	}
	return uint8(n), nil
}

// ProtoName is the conventional name of an upper-layer protocol, or its number.
func ProtoName(p uint8) string {
	switch p {
	case 0:
		return "any"
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 47:
		return "gre"
	case 50:
		return "esp"
	case 51:
		return "ah"
	case 58:
		return "icmp6"
	case 132:
		return "sctp"
	case 136:
		return "udplite"
	}
	return strconv.Itoa(int(p))
}

// HasPorts reports whether the protocol's header starts with two ports
// (TCP, UDP, SCTP, UDP-Lite).
func HasPorts(p uint8) bool { return p == 6 || p == 17 || p == 132 || p == 136 }

// ParsePortRange reads "any", a port "443" or an inclusive range "1024-65535".
func ParsePortRange(s string) (PortRange, error) {
	if s == "any" || s == "" {
		return PortRange{}, nil
	}
	lo, hi, isRange := strings.Cut(s, "-")
	l, err := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
	if err != nil {
		return PortRange{}, fmt.Errorf("port %s: want a port, a range lo-hi or any", secret.Number(s))
	}
	h := l
	if isRange {
		if h, err = strconv.ParseUint(strings.TrimSpace(hi), 10, 16); err != nil {
			return PortRange{}, fmt.Errorf("port range %s: want lo-hi", secret.Number(s))
		}
	}
	switch {
	case l > h:
		return PortRange{}, fmt.Errorf("port range %d-%d is backwards", l, h)
	case h == 0:
		return PortRange{}, fmt.Errorf("port 0 matches nothing (write any for every port)")
	}
	return PortRange{uint16(l), uint16(h)}, nil
}

func (r PortRange) String() string {
	switch {
	case r.Lo == 0 && r.Hi == 0:
		return "any"
	case r.Lo == r.Hi:
		return strconv.Itoa(int(r.Lo))
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

// ParsePrefix reads an address prefix; a bare address is a host prefix.
func ParsePrefix(s string) (netip.Prefix, error) {
	if s == "any" {
		return netip.Prefix{}, nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%s is not an address prefix", secret.Number(s))
		}
		if p != p.Masked() {
			return netip.Prefix{}, fmt.Errorf("%s has host bits set (did you mean %s?)", p, p.Masked())
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%s is not an address or prefix", secret.Number(s))
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func (s Selector) String() string {
	pfx := func(p netip.Prefix) string {
		if !p.IsValid() {
			return "any"
		}
		return p.String()
	}
	return fmt.Sprintf("%s[%s] -> %s[%s] %s", pfx(s.Src), s.SrcPorts, pfx(s.Dst), s.DstPorts, ProtoName(s.Proto))
}

// protoWords are the protocol names an error may suggest.
func protoWords() []string { return mapKeys(protoNames) }
