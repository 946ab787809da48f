package ike

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// State is where an IKE SA stands.
type State uint8

// The IKE SA states.
const (
	StateHalfOpen    State = iota // IKE_SA_INIT done, IKE_AUTH not yet
	StateEstablished              // authenticated
	StateDeleted                  // deleted by either side
)

var stateNames = map[State]string{StateHalfOpen: "half-open", StateEstablished: "established", StateDeleted: "deleted"}

func (s State) String() string { return nameOf(stateNames, s, "state") }

// IKESA is one IKE SA, initiated or responded to. Its fields change under
// the endpoint's lock.
type IKESA struct {
	e          *Endpoint
	gone       chan struct{} // closed when the SA is forgotten
	initiator  bool
	state      State
	spii, spir uint64
	suite      ikeSuite
	keys       ikeKeys
	send, recv *skCipher
	ni, nr     []byte
	// initReq and initResp are the IKE_SA_INIT messages as sent, which
	// the AUTH payloads sign.
	initReq, initResp []byte
	local, remote     netip.AddrPort
	halfOpenAt        halfOpenKey // where a responder's half-open SA is kept
	// nat is a NAT between the two sides: in front of the peer (natPeer),
	// of this side (natHere) or both.
	nat, natPeer, natHere bool
	peerID                Identity
	peerCert              *x509.Certificate
	// peerHashes are the peer's SIGNATURE_HASH_ALGORITHMS, nil when it
	// sent none.
	peerHashes []uint16
	created    time.Time
	// nextReq is the ID of this side's next request; expectReq the ID
	// the peer's next request must have.
	nextReq, expectReq uint32
	// lastReq is the peer's last request as it arrived (its fragments,
	// or one datagram), lastResp this side's response as sent.
	lastReq, lastResp [][]byte
	// fragments is set when both sides announced IKE fragmentation;
	// reqFrags and respFrags collect the peer's fragmented request and
	// response.
	fragments           bool
	reqFrags, respFrags *reassembly
	// ourRekey and peerRekey are the exchanges that rekeyed this IKE SA;
	// both set means a collision, settled once.
	ourRekey, peerRekey *rekeyRecord
	settled             bool
	closing             bool // this side is deleting it
	children            []*Child
	// reqMu keeps one request of this side outstanding (a window of one).
	reqMu sync.Mutex
}

// String names the SA by its SPIs and peer, never its keys.
func (s *IKESA) String() string {
	return fmt.Sprintf("IKE SA %016x_i %016x_r with %s", s.spii, s.spir, s.remote)
}

// GoString hides the keys from %#v as well.
func (s *IKESA) GoString() string { return s.String() }

// Format hides the keys from every fmt verb.
func (s *IKESA) Format(f fmt.State, _ rune) { fmt.Fprint(f, s.String()) }

// State is where the SA stands.
func (s *IKESA) State() State {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.state
}

// SPIs are the initiator's and responder's IKE SPIs.
func (s *IKESA) SPIs() (spii, spir uint64) { return s.spii, s.spir }

// Created is when the IKE SA was made (for a rekeyed one, when the
// exchange that made it was answered or its answer arrived).
func (s *IKESA) Created() time.Time { return s.created }

// Rekeyed reports whether the peer has rekeyed the IKE SA already: this
// side must not start a rekey of it (RekeyIKE refuses with ErrRekeyed).
func (s *IKESA) Rekeyed() bool {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.peerRekey != nil
}

// ChildRekeyed reports whether the peer has rekeyed a CHILD_SA already:
// this side must not start a rekey of it (RekeyChild refuses with
// ErrRekeyed).
func (s *IKESA) ChildRekeyed(c *Child) bool {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return c.theirs != nil
}

// Children are the CHILD_SAs in force.
func (s *IKESA) Children() []*Child {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return append([]*Child(nil), s.children...)
}

// NAT reports whether a NAT was detected between the two sides (and so
// IKE and ESP use port 4500).
func (s *IKESA) NAT() bool { return s.nat }

// flags are the header flags of this side's messages.
func (s *IKESA) flags(response bool) Flags {
	var f Flags
	if s.initiator {
		f |= FlagInitiator
	}
	if response {
		f |= FlagResponse
	}
	return f
}

func (s *IKESA) ourSPI() uint64 {
	if s.initiator {
		return s.spii
	}
	return s.spir
}

// forget removes the SA from the endpoint, keeping its last response
// for a while (rememberClosed). The endpoint's lock is held.
func (s *IKESA) forget() {
	select {
	case <-s.gone:
	default:
		close(s.gone)
		s.e.rememberClosed(s, time.Now())
	}
	s.state = StateDeleted
	delete(s.e.sas, s.ourSPI())
	delete(s.e.halfOpen, s.halfOpenAt)
}

// handleRequest answers a request of the peer on an SA that exists:
// a retransmitted one gets the same response again (RFC 7296 §2.1).
func (s *IKESA) handleRequest(d Datagram, h Header) {
	e := s.e
	if s.lastResp != nil && h.MessageID+1 == s.expectReq {
		// The first fragment again gets the whole response again; the
		// others go unanswered (RFC 7383 §2.6.1).
		switch {
		case len(s.lastReq) > 0 && bytes.Equal(d.Data, s.lastReq[0]):
			e.count("retransmitted request answered again")
			for _, r := range s.lastResp {
				e.send(Datagram{Data: r, Local: d.Local, Remote: d.Remote})
			}
		case slices.ContainsFunc(s.lastReq, func(r []byte) bool { return bytes.Equal(r, d.Data) }):
			e.count("retransmitted fragment")
		default:
			e.count("request with a used message ID")
		}
		return
	}
	if h.MessageID != s.expectReq {
		e.count("request with an unexpected message ID")
		return
	}
	parsed, err := Parse(d.Data)
	if err != nil {
		e.count("malformed request")
		e.cfg.Log.Debug("IKE request dropped", "from", d.Remote, "err", err)
		return
	}
	m, err := s.open(parsed, d.Data, &s.reqFrags)
	if err != nil {
		if errors.Is(err, errIntegrity) {
			e.count("integrity check failed")
		} else {
			e.count("malformed SK payload")
			e.cfg.Log.Debug("IKE request dropped", "from", d.Remote, "err", err)
		}
		return
	}
	if m == nil {
		return // a fragment; more to come
	}
	req := [][]byte{d.Data}
	if m.fragments != nil {
		req = m.fragments
	}
	for _, p := range m.Payloads {
		if u, ok := p.(*Unknown); ok && u.Critical {
			s.reply(d, h, req, []Payload{&Notify{Kind: NotifyUnsupportedCriticalPayload, Data: []byte{byte(u.Kind)}}})
			return
		}
	}
	s.follow(d)
	var resp []Payload
	switch h.Exchange {
	case IKEAuth:
		if s.initiator || s.state != StateHalfOpen {
			e.count("IKE_AUTH on an established SA")
			return
		}
		resp = s.respondAuth(m)
	case Informational:
		if s.state != StateEstablished {
			e.count("INFORMATIONAL before IKE_AUTH")
			return
		}
		resp = s.respondInformational(m)
	case CreateChildSA:
		if s.state != StateEstablished {
			e.count("CREATE_CHILD_SA before IKE_AUTH")
			return
		}
		resp = s.respondCreateChild(m)
	default:
		e.count("request of an unknown exchange")
		return
	}
	s.reply(d, h, req, resp)
	if s.state == StateDeleted {
		s.forget()
	}
}

// follow takes the addresses an authenticated request came from and to
// as the SA's. With a NAT between the two sides, a request from another
// address or port is the NAT's new mapping of the peer (RFC 7296 §2.23):
// the CHILD_SAs follow it too (moveTo). The endpoint's lock is held.
func (s *IKESA) follow(d Datagram) {
	moved := s.nat && s.state == StateEstablished && d.Remote != s.remote
	s.local = d.Local
	if !moved {
		s.remote = d.Remote
		return
	}
	s.moveTo(d.Remote, "an IKE message")
}

// moveTo makes to the peer's address, of the SA and its CHILD_SAs, and
// has Config.OnPeerMoved put the CHILD_SAs in force so. The endpoint's
// lock is held.
func (s *IKESA) moveTo(to netip.AddrPort, by string) {
	s.remote = to
	for _, c := range s.children {
		c.Remote, c.RemotePort = to.Addr(), to.Port()
	}
	s.e.count("peer moved behind its NAT")
	s.e.cfg.Log.Info("IKE peer moved behind its NAT: the SA and its CHILD_SAs follow", "sa", s, "to", to, "found-by", by)
	if s.e.cfg.OnPeerMoved != nil {
		s.e.cfg.OnPeerMoved(s, slices.Clone(s.children))
	}
}

// FollowPeerPort takes a new port of the peer that an ESP packet of one
// of the SA's CHILD_SAs, which passed its integrity check, came from: the
// peer's NAT mapped it anew (RFC 7296 §2.23). It is followed, as an IKE
// message from there would be, only when the peer is behind a NAT and
// this side is not, the address is the peer's and the SA is established;
// it reports whether it was.
func (s *IKESA) FollowPeerPort(to netip.AddrPort) bool {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	if s.state != StateEstablished || !s.natPeer || s.natHere || to.Addr() != s.remote.Addr() || to == s.remote {
		return false
	}
	s.e.count("peer's new NAT port found by ESP")
	s.moveTo(to, "an ESP packet")
	return true
}

// reply seals and sends the response to request h, which arrived as req.
func (s *IKESA) reply(d Datagram, h Header, req [][]byte, payloads []Payload) {
	out, err := s.sealOut(Header{SPIi: s.spii, SPIr: s.spir, Exchange: h.Exchange, Flags: s.flags(true), MessageID: h.MessageID}, payloads)
	if err != nil {
		s.e.count("response not sealed")
		s.e.cfg.Log.Warn("IKE response not sealed", "err", err)
		return
	}
	s.expectReq = h.MessageID + 1
	s.lastReq, s.lastResp = req, out
	for _, b := range out {
		if err := s.e.send(Datagram{Data: b, Local: d.Local, Remote: d.Remote}); err != nil {
			s.e.count("response not sent")
		}
	}
}

// respondInformational handles a Delete or a liveness check.
func (s *IKESA) respondInformational(m *Message) []Payload {
	var resp []Payload
	for _, p := range m.Payloads {
		del, ok := p.(*Delete)
		if !ok {
			continue
		}
		if del.Protocol == ProtoIKE {
			s.e.count("IKE SA deleted by the peer")
			s.state = StateDeleted
			return nil
		}
		var ours []uint32
		for _, spi := range del.SPIs {
			for i, c := range s.children {
				if c.OutSPI == spi {
					ours = append(ours, c.InSPI)
					s.children = append(s.children[:i], s.children[i+1:]...)
					break
				}
			}
		}
		if len(ours) > 0 {
			s.e.count("CHILD_SA deleted by the peer")
			resp = append(resp, &Delete{Protocol: ProtoESP, SPIs: ours})
		}
	}
	return resp
}

// request runs one exchange this side starts: sealed, retransmitted,
// and its response opened.
func (s *IKESA) request(ctx context.Context, exch ExchangeType, payloads []Payload) (*Message, error) {
	e := s.e
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	e.mu.Lock()
	if s.state == StateDeleted {
		e.mu.Unlock()
		return nil, errors.New("the IKE SA is deleted")
	}
	id := s.nextReq
	out, err := s.sealOut(Header{SPIi: s.spii, SPIr: s.spir, Exchange: exch, Flags: s.flags(false), MessageID: id}, payloads)
	local, remote := s.local, s.remote
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	reqs := make([]Datagram, len(out))
	for i, b := range out {
		reqs[i] = Datagram{Data: b, Local: local, Remote: remote}
	}
	var resp *Message
	deleting := len(payloads) == 1 && isIKEDelete(payloads[0])
	err = e.exchange(ctx, s.ourSPI(), s.gone, deleting, reqs, id, func(d Datagram) (bool, error) {
		m, err := Parse(d.Data)
		if err != nil {
			return false, err
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if m, err = s.open(m, d.Data, &s.respFrags); err != nil || m == nil {
			return false, err
		}
		if m.Exchange != exch {
			e.count("response of another exchange")
			return false, nil
		}
		s.nextReq, resp = id+1, m
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", exch, err)
	}
	return resp, nil
}

func reasonOf(err error) string {
	if errors.Is(err, errIntegrity) {
		return "integrity check failed"
	}
	return "malformed"
}

// Ping is a liveness check: an empty INFORMATIONAL request, answered.
func (s *IKESA) Ping(ctx context.Context) error {
	_, err := s.request(ctx, Informational, nil)
	return err
}

// Delete deletes the IKE SA, and with it its CHILD_SAs, with the peer.
func (s *IKESA) Delete(ctx context.Context) error {
	s.e.mu.Lock()
	s.closing = true
	s.e.mu.Unlock()
	_, err := s.request(ctx, Informational, []Payload{&Delete{Protocol: ProtoIKE}})
	if errors.Is(err, errSAGone) {
		err = nil // the peer deleted it at the same time
	}
	s.e.mu.Lock()
	s.forget()
	s.e.mu.Unlock()
	return err
}

// DeleteChild deletes one CHILD_SA with the peer, which answers with its
// own SPI of the pair.
func (s *IKESA) DeleteChild(ctx context.Context, c *Child) error {
	s.e.mu.Lock()
	c.closing = true
	s.e.mu.Unlock()
	m, err := s.request(ctx, Informational, []Payload{&Delete{Protocol: ProtoESP, SPIs: []uint32{c.InSPI}}})
	if err != nil {
		return err
	}
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	held := false
	for i, have := range s.children {
		if have == c {
			s.children = append(s.children[:i], s.children[i+1:]...)
			held = true
		}
	}
	for _, p := range m.Payloads {
		if d, ok := p.(*Delete); ok && d.Protocol == ProtoESP && len(d.SPIs) == 1 && d.SPIs[0] == c.OutSPI {
			return nil
		}
	}
	if !held {
		// The peer deleted it meanwhile: both sides deleted it at once,
		// and the peer's answer rightly names nothing (RFC 7296 §1.4.1).
		s.e.count("CHILD_SA deleted by both sides at once")
		return nil
	}
	return fmt.Errorf("the peer's response deletes no SA %#x", c.OutSPI)
}

// isIKEDelete reports whether p deletes the IKE SA.
func isIKEDelete(p Payload) bool {
	d, ok := p.(*Delete)
	return ok && d.Protocol == ProtoIKE
}
