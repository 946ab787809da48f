package sa

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/internal/secret"
)

// The outer-header options of an SA: what a tunnel-mode SA writes into the
// IP header it puts around the inner packet, and what it carries back into
// the inner packet when it takes that header off (RFC 4301 §5.1.2, RFC 6040).
// The zero values are the defaults, which are the Linux kernel's: copy the
// inner DSCP, copy the inner DF, TTL 64, leave the inner DSCP alone on the
// way in.

// DSCP is what an SA writes into the outer header's DSCP field.
type DSCP struct {
	// Fixed, when set, writes Value into every outer header; otherwise
	// the inner packet's DSCP is copied (RFC 4301 §5.1.2.1).
	Fixed bool
	Value uint8 // 0..63
}

func (d DSCP) String() string {
	if d.Fixed {
		return strconv.Itoa(int(d.Value))
	}
	return "copy"
}

// ParseDSCP reads "copy" or a DSCP value 0..63 (decimal, or 0x hex).
func ParseDSCP(s string) (DSCP, error) {
	if s == "copy" {
		return DSCP{}, nil
	}
	v, err := strconv.ParseUint(s, 0, 8)
	if err != nil || v > 63 {
		return DSCP{}, fmt.Errorf("%q, want copy or a DSCP value 0..63", s)
	}
	return DSCP{Fixed: true, Value: uint8(v)}, nil
}

// DF is what an SA writes into an IPv4 outer header's don't-fragment bit.
type DF uint8

const (
	// DFCopy copies the inner packet's DF bit; an inner IPv6 packet, which
	// routers never fragment, gets DF set (Linux's xfrm does the same).
	DFCopy DF = iota
	// DFSet always sets DF: no outer packet is ever fragmented; an inner
	// packet that does not fit the path is refused with an ICMP error.
	DFSet
	// DFClear never sets DF: outer packets too big for the path are sent
	// as fragments (Linux's "nopmtudisc" state flag).
	DFClear
)

func (d DF) String() string {
	switch d {
	case DFCopy:
		return "copy"
	case DFSet:
		return "set"
	case DFClear:
		return "clear"
	}
	return fmt.Sprintf("df(%d)", uint8(d))
}

// ParseDF reads copy, set or clear.
func ParseDF(s string) (DF, error) {
	for d := DFCopy; d <= DFClear; d++ {
		if d.String() == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("%q, want copy, set or clear", s)
}

// DecapDSCP is what an SA does with the outer DSCP when it decapsulates.
type DecapDSCP uint8

const (
	// DecapKeep leaves the inner packet's DSCP as its sender wrote it
	// (RFC 4301 §5.1.2.1; Linux's default).
	DecapKeep DecapDSCP = iota
	// DecapCopy copies the outer DSCP into the inner header (Linux's
	// "decap-dscp" state flag), for WANs that re-mark traffic.
	DecapCopy
)

func (d DecapDSCP) String() string {
	switch d {
	case DecapKeep:
		return "keep"
	case DecapCopy:
		return "copy"
	}
	return fmt.Sprintf("decap-dscp(%d)", uint8(d))
}

// ParseDecapDSCP reads keep or copy.
func ParseDecapDSCP(s string) (DecapDSCP, error) {
	switch s {
	case "keep":
		return DecapKeep, nil
	case "copy":
		return DecapCopy, nil
	}
	return 0, fmt.Errorf("%q, want keep or copy", s)
}

// DefaultTTL is the outer TTL (IPv6: hop limit) when an SA sets none.
const DefaultTTL = 64

// OuterTTL is the TTL or hop limit the SA's outer headers carry.
func (s *SA) OuterTTL() uint8 {
	if s.TTL == 0 {
		return DefaultTTL
	}
	return s.TTL
}

// validateHeader checks the outer-header options.
func (s *SA) validateHeader() error {
	var errs []error
	if s.DSCP.Fixed && s.DSCP.Value > 63 {
		errs = append(errs, fmt.Errorf("dscp: %d, want copy or 0..63", s.DSCP.Value))
	}
	if s.DF > DFClear {
		errs = append(errs, fmt.Errorf("df: %s is not copy, set or clear", s.DF))
	}
	if s.DecapDSCP > DecapCopy {
		errs = append(errs, fmt.Errorf("decap-dscp: %s is not keep or copy", s.DecapDSCP))
	}
	if s.Mode == Transport && (s.DSCP != DSCP{} || s.DecapDSCP != DecapKeep || s.DF != DFCopy || s.TTL != 0) {
		// A transport-mode packet keeps its own header: there is no outer
		// one to write, so an option here would be silently ignored.
		var set []string
		if s.DSCP != (DSCP{}) {
			set = append(set, "dscp")
		}
		if s.DecapDSCP != DecapKeep {
			set = append(set, "decap-dscp")
		}
		if s.DF != DFCopy {
			set = append(set, "df")
		}
		if s.TTL != 0 {
			set = append(set, "ttl")
		}
		errs = append(errs, fmt.Errorf("%s: transport mode has no outer header (tunnel mode only)", strings.Join(set, ", ")))
	}
	if s.DF != DFCopy && s.Dst.Is6() {
		errs = append(errs, errors.New("df: IPv6 outer headers have no DF bit (IPv4 outer only)"))
	}
	return errors.Join(errs...)
}

// header reads the outer-header options of an SA entry.
func (p *yamlParser) header(str func(string) (field, string, bool), entry string, s *SA) {
	if f, v, ok := str("dscp"); ok {
		d, err := ParseDSCP(v)
		if err != nil {
			p.failf(f.Val, entry, "dscp", "%s, want copy or a DSCP value 0..63", secret.Word(v, "copy"))
		}
		s.DSCP = d
	}
	if f, v, ok := str("decap-dscp"); ok {
		d, err := ParseDecapDSCP(v)
		if err != nil {
			p.failf(f.Val, entry, "decap-dscp", "%s, want keep or copy", secret.Word(v, "keep", "copy"))
		}
		s.DecapDSCP = d
	}
	if f, v, ok := str("df"); ok {
		d, err := ParseDF(v)
		if err != nil {
			p.failf(f.Val, entry, "df", "%s, want copy, set or clear", secret.Word(v, "copy", "set", "clear"))
		}
		s.DF = d
	}
	if f, v, ok := str("ttl"); ok {
		t, err := strconv.ParseUint(v, 10, 8)
		if err != nil || t == 0 {
			p.failf(f.Val, entry, "ttl", "%s, want an outer TTL 1..255", secret.Number(v))
		}
		s.TTL = uint8(t)
	}
	if f, v, ok := str("if-id"); ok {
		id, err := strconv.ParseUint(v, 0, 32)
		if err != nil || id == 0 {
			p.failf(f.Val, entry, "if-id", "%s, want an xfrm interface's if_id 1..4294967295", secret.Number(v))
		}
		s.IfID = uint32(id)
	}
	if f, v, ok := str("output-mark"); ok {
		m, err := ParseMark(v)
		if err == nil && m.IsZero() {
			err = errors.New("sets no bit: leave output-mark out")
		}
		if err != nil {
			p.fail(f.Val, entry, "output-mark", err)
		}
		s.OutputMark = m
	}
}

// marshalHeader writes the outer-header options that differ from the
// defaults.
func marshalHeader(m *yaml.Node, s *SA) {
	if s.DSCP != (DSCP{}) {
		addStr(m, "dscp", s.DSCP.String())
	}
	if s.DecapDSCP != DecapKeep {
		addStr(m, "decap-dscp", s.DecapDSCP.String())
	}
	if s.DF != DFCopy {
		addStr(m, "df", s.DF.String())
	}
	if s.TTL != 0 {
		addStr(m, "ttl", strconv.Itoa(int(s.TTL)))
	}
	if s.IfID != 0 {
		addStr(m, "if-id", strconv.FormatUint(uint64(s.IfID), 10))
	}
	if !s.OutputMark.IsZero() {
		addStr(m, "output-mark", s.OutputMark.String())
	}
}
