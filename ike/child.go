package ike

import (
	"fmt"
	"net/netip"

	"github.com/espgw/espgw/sa"
)

// Child is a negotiated CHILD_SA: what the gateway installs.
type Child struct {
	// InSPI is the SPI this side chose (the peer sends with it); OutSPI
	// the peer's.
	InSPI, OutSPI uint32
	Suite         sa.Suite
	ESN           bool
	// InEnc/InAuth open what the peer sends; OutEnc/OutAuth seal what
	// this side sends. The AES-GCM salt ends the encryption key.
	InEnc, InAuth, OutEnc, OutAuth sa.Key
	// LocalTS and RemoteTS are the narrowed traffic selectors of this
	// side and of the peer.
	LocalTS, RemoteTS []Selector
	// Local and Remote are the tunnel's outer addresses; UDP is set when
	// a NAT was detected and ESP travels in UDP on port 4500 (RFC 3948).
	Local, Remote netip.Addr
	UDP           bool

	// ours and theirs are the exchanges that rekeyed this CHILD_SA, this
	// side's and the peer's; both set means the two collided, settled
	// once.
	ours, theirs *rekeyRecord
	settled      bool
}

// ReplayWindow is the anti-replay window of the SAs a Child makes.
const ReplayWindow = 64

// SAs are the child's two SAs in tunnel mode: inbound (the peer to this
// side, with the selectors it must carry) and outbound.
func (c *Child) SAs() (in, out *sa.SA, err error) {
	sel, err := saSelectors(c.LocalTS, c.RemoteTS)
	if err != nil {
		return nil, nil, fmt.Errorf("CHILD_SA %#x: %w", c.InSPI, err)
	}
	mk := func(spi uint32, src, dst netip.Addr, enc, auth sa.Key) *sa.SA {
		s := &sa.SA{SPI: spi, Mode: sa.Tunnel, Src: src, Dst: dst, Suite: c.Suite, EncKey: enc, AuthKey: auth,
			ESN: c.ESN, ReplayWindow: ReplayWindow}
		if c.UDP {
			s.Encap, s.SrcPort, s.DstPort = sa.EncapUDP, sa.DefaultNATTPort, sa.DefaultNATTPort
		}
		return s
	}
	in = mk(c.InSPI, c.Remote, c.Local, c.InEnc, c.InAuth)
	in.Selectors = sel
	out = mk(c.OutSPI, c.Local, c.Remote, c.OutEnc, c.OutAuth)
	for _, s := range []*sa.SA{in, out} {
		if err := s.Validate(); err != nil {
			return nil, nil, fmt.Errorf("CHILD_SA %#x/%#x: %w", c.InSPI, c.OutSPI, err)
		}
	}
	return in, out, nil
}
