package ike

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"

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
	// Name is the connection's CHILD_SA this is (Config.ChildName or
	// one of Config.MoreChildren).
	Name string
	// Local and Remote are the tunnel's outer addresses; UDP is set when
	// a NAT was detected and ESP travels in UDP on port 4500 (RFC 3948).
	Local, Remote netip.Addr
	UDP           bool
	// Transport is set for a CHILD_SA in transport mode: its SAs protect
	// the traffic of Local and Remote themselves.
	Transport bool
	// RemotePort is the peer's UDP port when UDP is set (0: 4500): a NAT
	// in front of the peer maps its port 4500 to another.
	RemotePort uint16
	// FollowPeerPort is set when ESP travels in UDP, the peer is behind a
	// NAT and this side is not: inbound ESP from another port of Remote
	// is taken as the NAT's new mapping of the peer (IKESA.FollowPeerPort).
	FollowPeerPort bool

	// ours and theirs are the exchanges that rekeyed this CHILD_SA, this
	// side's and the peer's; both set means the two collided, settled
	// once.
	ours, theirs *rekeyRecord
	settled      bool
	closing      bool // this side is deleting it
}

// ReplayWindow is the anti-replay window of the SAs a Child makes.
const ReplayWindow = 64

// SAs are the child's two SAs, in tunnel or transport mode: inbound (the
// peer to this side, with the selectors it must carry) and outbound.
func (c *Child) SAs() (in, out *sa.SA, err error) {
	sel, err := saSelectors(c.LocalTS, c.RemoteTS)
	if err != nil {
		return nil, nil, fmt.Errorf("CHILD_SA %#x: %w", c.InSPI, err)
	}
	mode := sa.Tunnel
	if c.Transport {
		mode = sa.Transport
	}
	mk := func(spi uint32, src, dst netip.Addr, enc, auth sa.Key) *sa.SA {
		s := &sa.SA{SPI: spi, Mode: mode, Src: src, Dst: dst, Suite: c.Suite, EncKey: enc, AuthKey: auth,
			ESN: c.ESN, ReplayWindow: ReplayWindow}
		if c.UDP {
			s.Encap, s.SrcPort, s.DstPort = sa.EncapUDP, sa.DefaultNATTPort, sa.DefaultNATTPort
		}
		return s
	}
	peerPort := uint16(sa.DefaultNATTPort)
	if c.RemotePort != 0 {
		peerPort = c.RemotePort
	}
	in = mk(c.InSPI, c.Remote, c.Local, c.InEnc, c.InAuth)
	in.Selectors = sel
	in.FollowSourcePort = c.UDP && c.FollowPeerPort
	out = mk(c.OutSPI, c.Local, c.Remote, c.OutEnc, c.OutAuth)
	if c.UDP {
		in.SrcPort, out.DstPort = peerPort, peerPort
	}
	for _, s := range []*sa.SA{in, out} {
		if err := s.Validate(); err != nil {
			return nil, nil, fmt.Errorf("CHILD_SA %#x/%#x: %w", c.InSPI, c.OutSPI, err)
		}
	}
	return in, out, nil
}

// withSPI is a copy of proposals, each with the SPI.
func withSPI(ps []Proposal, spi []byte) []Proposal {
	out := slices.Clone(ps)
	for i := range out {
		out[i].SPI = spi
	}
	return out
}

// takeChild makes the CHILD_SA this side asked for in a request (IKE_AUTH
// or CREATE_CHILD_SA) from the peer's response: its one chosen proposal
// must be among those offered and its selectors within localTS and
// remoteTS. ni and nr are the exchange's nonces, gir the PFS key exchange's
// result (nil without one). The child is not yet among the SA's; the
// endpoint's lock is not held.
func (s *IKESA) takeChild(m *Message, offered []Proposal, localTS, remoteTS []Selector, gir, ni, nr []byte, inSPI uint32) (*Child, error) {
	sap, _ := m.Find(PayloadSA).(*SA)
	tsi, _ := m.Find(PayloadTSi).(*TS)
	tsr, _ := m.Find(PayloadTSr).(*TS)
	switch {
	case sap == nil || tsi == nil || tsr == nil:
		return nil, errors.New("the response lacks SA, TSi or TSr")
	case len(sap.Proposals) != 1 || len(sap.Proposals[0].SPI) != 4 || !Accepts(offered, sap.Proposals[0]):
		return nil, errors.New("the peer chose an ESP proposal not offered")
	}
	transport := m.Notify(NotifyUseTransportMode) != nil
	gotI, gotR := tsi.Selectors, tsr.Selectors
	if i, r, nat := s.throughNAT(gotI, gotR, transport); nat {
		// Through a NAT the peer may name either address of a side:
		// both become the IKE SA's, which this side proposed.
		gotI, gotR = i, r
	}
	if !Within(gotI, localTS) || !Within(gotR, remoteTS) {
		return nil, fmt.Errorf("the peer's selectors %v === %v exceed ours", tsi.Selectors, tsr.Selectors)
	}
	cs, err := childSuiteFrom(sap.Proposals[0])
	if err != nil {
		return nil, err
	}
	s.e.mu.Lock()
	c, err := s.newChild(cs, sap.Proposals[0], gir, ni, nr, true, inSPI)
	s.e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c.LocalTS, c.RemoteTS = gotI, gotR
	c.Transport = transport
	return c, nil
}

// modeRequest is the notification that asks for transport mode, or
// nothing for tunnel mode.
func modeRequest(transport bool) []Payload {
	if transport {
		return []Payload{&Notify{Kind: NotifyUseTransportMode}}
	}
	return nil
}

// checkMode deletes, with the peer, a CHILD_SA this side asked for whose
// mode is not the one asked for (RFC 7296 §1.3.1: a responder may decline
// transport mode; the initiator then deletes the CHILD_SA). The child is
// among the SA's; the endpoint's lock is not held.
func (s *IKESA) checkMode(ctx context.Context, c *Child, transport bool) error {
	if c.Transport == transport {
		return nil
	}
	s.e.count("CHILD_SA in the wrong mode")
	asked, got := "tunnel", "transport"
	if transport {
		asked, got = got, asked
	}
	err := fmt.Errorf("CHILD_SA %#x: asked for %s mode, the peer gave %s mode", c.InSPI, asked, got)
	if derr := s.DeleteChild(ctx, c); derr != nil {
		return fmt.Errorf("%w; deleting it: %w", err, derr)
	}
	return err
}

// isHost reports whether the selectors are the one address a (any
// protocol and ports): a transport-mode CHILD_SA's.
func isHost(sels []Selector, a netip.Addr) bool {
	return len(sels) == 1 && sels[0].Start == a && sels[0].End == a
}

// throughNAT is the selectors of a transport-mode request through a NAT
// (RFC 7296 §2.23.1) as its SAs have them: a side names the addresses it
// knows (its own behind the NAT, the other's as it reaches it), but the
// packets carry the IKE SA's. This side's one host (ours) is taken as its
// IKE address and the peer's (theirs) as the peer's, protocol and ports
// kept; ok is false when the request is not one (no transport mode asked,
// no NAT, not one host a side).
func (s *IKESA) throughNAT(ours, theirs []Selector, transport bool) (o, t []Selector, ok bool) {
	if !transport || !s.nat || !oneHost(ours) || !oneHost(theirs) {
		return ours, theirs, false
	}
	return withAddrs(ours, s.local.Addr()), withAddrs(theirs, s.remote.Addr()), true
}

// oneHost reports whether sels is one selector of one address.
func oneHost(sels []Selector) bool { return len(sels) == 1 && sels[0].Start == sels[0].End }

// withAddrs is sels with every selector's addresses a.
func withAddrs(sels []Selector, a netip.Addr) []Selector {
	out := slices.Clone(sels)
	for i := range out {
		out[i].Start, out[i].End = a, a
	}
	return out
}

// giveChild makes the CHILD_SA the peer asked for with the chosen
// proposal of the child configuration cc, its selectors narrowed to cc's,
// from the exchange's nonces (and g^ir), adds it to the SA and tells
// Config.OnChild; it returns the child and the response's SA, TSi and TSr
// payloads, or the notification that refuses it (counted).
//
// Transport mode is given when the peer asks for it (transport), cc
// allows it and the narrowed selectors are the two IKE addresses (through
// a NAT, whatever one address a side the peer named: throughNAT); the
// response then carries USE_TRANSPORT_MODE last.
func (s *IKESA) giveChild(cc ChildConfig, chosen Proposal, cs childSuite, tsi, tsr *TS, gir, ni, nr []byte, transport bool) (*Child, []Payload, *Notify) {
	e := s.e
	tr, ti, nat := s.throughNAT(tsr.Selectors, tsi.Selectors, transport && cc.Transport)
	narrowI, narrowR := Narrow(ti, cc.RemoteTS), Narrow(tr, cc.LocalTS)
	if len(narrowI) == 0 || len(narrowR) == 0 {
		e.count("traffic selectors unacceptable")
		return nil, nil, &Notify{Kind: NotifyTSUnacceptable}
	}
	c, err := s.newChild(cs, chosen, gir, ni, nr, false, 0)
	if err != nil {
		e.count("CHILD_SA not made")
		return nil, nil, &Notify{Kind: NotifyTemporaryFailure}
	}
	c.LocalTS, c.RemoteTS, c.Name = narrowR, narrowI, cc.Name
	c.Transport = transport && cc.Transport && isHost(narrowI, c.Remote) && isHost(narrowR, c.Local)
	if transport && !c.Transport {
		e.count("transport mode declined")
	}
	respI, respR := narrowI, narrowR
	if nat && c.Transport {
		// The response names what the peer asked for, narrowed in
		// protocol and ports only.
		respI, respR = withAddrs(narrowI, tsi.Selectors[0].Start), withAddrs(narrowR, tsr.Selectors[0].Start)
		e.count("transport mode through a NAT")
	}
	chosen.SPI = binary.BigEndian.AppendUint32(nil, c.InSPI)
	s.children = append(s.children, c)
	if e.cfg.OnChild != nil {
		e.cfg.OnChild(s, c)
	}
	ps := []Payload{&SA{Proposals: []Proposal{chosen}}, &TS{Kind: PayloadTSi, Selectors: respI}, &TS{Kind: PayloadTSr, Selectors: respR}}
	return c, append(ps, modeRequest(c.Transport)...), nil
}

// pickChild is the child configuration a request for a new CHILD_SA
// fits (its selectors narrow to something of the configuration's), with
// the proposal chosen from the configuration's ESP proposals (cut to
// those without a group by ours when the peer offers no KE), or the
// notification that refuses it (counted). A rekey (name set) fits the
// old CHILD_SA's configuration only.
func (s *IKESA) pickChild(sap *SA, tsi, tsr *TS, name string, pfs, transport bool) (ChildConfig, Proposal, childSuite, *Notify) {
	cands := s.e.cfg.childConfigs()
	if name != "" {
		cc, _ := s.e.cfg.childConfig(name)
		cands = []ChildConfig{cc}
	}
	fits := false
	for _, cc := range cands {
		tr, ti, _ := s.throughNAT(tsr.Selectors, tsi.Selectors, transport && cc.Transport)
		if len(Narrow(ti, cc.RemoteTS)) == 0 || len(Narrow(tr, cc.LocalTS)) == 0 {
			continue
		}
		fits = true
		ours := cc.ESP
		if !pfs {
			ours = withoutDH(ours)
		} else if _, ok := Choose(ours, sap.Proposals); !ok {
			ours = withoutDH(ours)
		}
		if chosen, ok := Choose(ours, sap.Proposals); ok && len(chosen.SPI) == 4 {
			if cs, err := childSuiteFrom(chosen); err == nil {
				return cc, chosen, cs, nil
			}
		}
	}
	if !fits {
		s.e.count("traffic selectors unacceptable")
		return ChildConfig{}, Proposal{}, childSuite{}, &Notify{Kind: NotifyTSUnacceptable}
	}
	s.e.count("no ESP proposal chosen")
	return ChildConfig{}, Proposal{}, childSuite{}, &Notify{Kind: NotifyNoProposalChosen}
}
