package ike

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// TransformType is the kind of a transform (RFC 7296 §3.3.2).
type TransformType uint8

// The transform types.
const (
	TransformENCR  TransformType = 1
	TransformPRF   TransformType = 2
	TransformINTEG TransformType = 3
	TransformDH    TransformType = 4
	TransformESN   TransformType = 5
)

var transformTypeNames = map[TransformType]string{TransformENCR: "ENCR", TransformPRF: "PRF", TransformINTEG: "INTEG",
	TransformDH: "DH", TransformESN: "ESN"}

func (t TransformType) String() string { return nameOf(transformTypeNames, t, "transform-type") }

// Transform is one algorithm of a proposal. KeyLen is the Key Length
// attribute in bits, 0 when absent.
type Transform struct {
	Type   TransformType
	ID     uint16
	KeyLen uint16
	// Unreadable is set when the transform carried an attribute this
	// package does not know: RFC 7296 §3.3.6 says such a transform is
	// never chosen.
	Unreadable bool
}

func (t Transform) String() string {
	name := transformName(t.Type, t.ID)
	if t.KeyLen != 0 {
		name += fmt.Sprintf("_%d", t.KeyLen)
	}
	return name
}

// Proposal is one proposal of an SA payload.
type Proposal struct {
	Num        uint8
	Protocol   ProtocolID
	SPI        []byte
	Transforms []Transform
}

// Get returns the first transform of type t.
func (p *Proposal) Get(t TransformType) (Transform, bool) {
	for _, tr := range p.Transforms {
		if tr.Type == t {
			return tr, true
		}
	}
	return Transform{}, false
}

func (p *Proposal) String() string {
	names := make([]string, len(p.Transforms))
	for i, t := range p.Transforms {
		names[i] = t.String()
	}
	return p.Protocol.String() + ":" + strings.Join(names, "/")
}

// SA is a Security Association payload.
type SA struct{ Proposals []Proposal }

func (*SA) Type() PayloadType { return PayloadSA }

func (s *SA) appendBody(b []byte) []byte {
	for i, p := range s.Proposals {
		start := len(b)
		last := byte(2)
		if i == len(s.Proposals)-1 {
			last = 0
		}
		b = append(b, last, 0, 0, 0, p.Num, byte(p.Protocol), byte(len(p.SPI)), byte(len(p.Transforms)))
		b = append(b, p.SPI...)
		for j, t := range p.Transforms {
			ts := len(b)
			more := byte(3)
			if j == len(p.Transforms)-1 {
				more = 0
			}
			b = append(b, more, 0, 0, 0, byte(t.Type), 0)
			b = binary.BigEndian.AppendUint16(b, t.ID)
			if t.KeyLen != 0 {
				b = append(b, 0x80, 14)
				b = binary.BigEndian.AppendUint16(b, t.KeyLen)
			}
			binary.BigEndian.PutUint16(b[ts+2:], uint16(len(b)-ts))
		}
		binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	}
	return b
}

// Bounds on an SA payload.
const (
	maxProposals  = 32
	maxTransforms = 64
)

func parseSA(body []byte) (*SA, error) {
	s := &SA{}
	for off, last := 0, false; !last; {
		if len(s.Proposals) == maxProposals {
			return nil, fmt.Errorf("more than %d proposals", maxProposals)
		}
		if len(body)-off < 8 {
			return nil, fmt.Errorf("proposal at byte %d: %d bytes left, want 8", off, len(body)-off)
		}
		b := body[off:]
		more, n := b[0], int(binary.BigEndian.Uint16(b[2:]))
		if more != 0 && more != 2 {
			return nil, fmt.Errorf("proposal at byte %d: last-substructure %d, want 0 or 2", off, more)
		}
		if n < 8 || n > len(b) {
			return nil, fmt.Errorf("proposal at byte %d: length %d, %d bytes left", off, n, len(b))
		}
		p, err := parseProposal(b[:n])
		if err != nil {
			return nil, fmt.Errorf("proposal %d: %w", len(s.Proposals)+1, err)
		}
		s.Proposals = append(s.Proposals, p)
		off += n
		last = more == 0
		if last && off != len(body) {
			return nil, fmt.Errorf("%d bytes after the last proposal", len(body)-off)
		}
	}
	return s, nil
}

func parseProposal(b []byte) (Proposal, error) {
	p := Proposal{Num: b[4], Protocol: ProtocolID(b[5])}
	spiLen, count := int(b[6]), int(b[7])
	if spiLen != 0 && spiLen != 4 && spiLen != 8 {
		return p, fmt.Errorf("SPI size %d, want 0, 4 or 8", spiLen)
	}
	if len(b) < 8+spiLen {
		return p, fmt.Errorf("%d bytes, shorter than its SPI", len(b))
	}
	if count > maxTransforms {
		return p, fmt.Errorf("%d transforms, more than %d", count, maxTransforms)
	}
	p.SPI = clone(b[8 : 8+spiLen])
	off := 8 + spiLen
	for i := range count {
		if len(b)-off < 8 {
			return p, fmt.Errorf("transform %d: %d bytes left, want 8", i+1, len(b)-off)
		}
		t := b[off:]
		more, n := t[0], int(binary.BigEndian.Uint16(t[2:]))
		if (more != 0 && more != 3) || (more == 0) != (i == count-1) {
			return p, fmt.Errorf("transform %d of %d: last-substructure %d", i+1, count, more)
		}
		if n < 8 || n > len(t) {
			return p, fmt.Errorf("transform %d: length %d, %d bytes left", i+1, n, len(t))
		}
		tr := Transform{Type: TransformType(t[4]), ID: binary.BigEndian.Uint16(t[6:])}
		if err := parseAttributes(&tr, t[8:n]); err != nil {
			return p, fmt.Errorf("transform %d: %w", i+1, err)
		}
		p.Transforms = append(p.Transforms, tr)
		off += n
	}
	if off != len(b) {
		return p, fmt.Errorf("%d bytes after the last transform", len(b)-off)
	}
	return p, nil
}

// parseAttributes reads a transform's attributes: the Key Length (TV,
// type 14) is the one IKEv2 defines; any other makes the transform
// unreadable.
func parseAttributes(tr *Transform, b []byte) error {
	for len(b) > 0 {
		if len(b) < 4 {
			return fmt.Errorf("attribute of %d bytes, want at least 4", len(b))
		}
		typ := binary.BigEndian.Uint16(b)
		if typ&0x8000 != 0 {
			if typ&0x7fff == 14 {
				tr.KeyLen = binary.BigEndian.Uint16(b[2:])
			} else {
				tr.Unreadable = true
			}
			b = b[4:]
			continue
		}
		n := int(binary.BigEndian.Uint16(b[2:]))
		if n > len(b)-4 {
			return fmt.Errorf("attribute %d: length %d, %d bytes left", typ, n, len(b)-4)
		}
		tr.Unreadable = true
		b = b[4+n:]
	}
	return nil
}

// Choose picks, from the peer's proposals, the first that one of ours
// accepts, trying ours in order (the local preference wins). The result
// has one transform of each type, the peer's proposal number and SPI.
func Choose(ours, theirs []Proposal) (Proposal, bool) {
	for _, o := range ours {
		for _, t := range theirs {
			if c, ok := match(o, t); ok {
				return c, true
			}
		}
	}
	return Proposal{}, false
}

// match picks one transform of each type that both proposals hold; every
// type one of them has the other must have too.
func match(ours, theirs Proposal) (Proposal, bool) {
	if ours.Protocol != theirs.Protocol {
		return Proposal{}, false
	}
	types := func(p Proposal) map[TransformType]bool {
		m := map[TransformType]bool{}
		for _, t := range p.Transforms {
			m[t.Type] = true
		}
		return m
	}
	ot, tt := types(ours), types(theirs)
	if len(ot) != len(tt) {
		return Proposal{}, false
	}
	c := Proposal{Num: theirs.Num, Protocol: theirs.Protocol, SPI: theirs.SPI}
	for _, typ := range []TransformType{TransformENCR, TransformPRF, TransformINTEG, TransformDH, TransformESN} {
		if !ot[typ] {
			if tt[typ] {
				return Proposal{}, false
			}
			continue
		}
		found := false
		for _, o := range ours.Transforms {
			if o.Type != typ || found {
				continue
			}
			for _, t := range theirs.Transforms {
				if t.Type == typ && !t.Unreadable && t.ID == o.ID && t.KeyLen == o.KeyLen {
					c.Transforms = append(c.Transforms, t)
					found = true
					break
				}
			}
		}
		if !found {
			return Proposal{}, false
		}
	}
	for typ := range tt {
		if typ < TransformENCR || typ > TransformESN {
			return Proposal{}, false
		}
	}
	return c, true
}

// Accepts reports whether a proposal the peer chose is one of ours: one
// transform of each of our types, each one we offered.
func Accepts(ours []Proposal, chosen Proposal) bool {
	for _, o := range ours {
		if c, ok := match(o, chosen); ok && len(c.Transforms) == len(chosen.Transforms) {
			return true
		}
	}
	return false
}
