package ike

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// maxInitTries bounds the IKE_SA_INIT restarts (COOKIE, INVALID_KE_PAYLOAD).
const maxInitTries = 4

// Initiate sets up an IKE SA with the responder at remote (port 500, or
// 4500 after a NAT is detected) and its first CHILD_SA. The SA is
// returned with an error when the IKE SA came up but its CHILD_SA did not.
func (e *Endpoint) Initiate(ctx context.Context, remote netip.AddrPort) (*IKESA, error) {
	s, err := e.initSA(ctx, remote)
	if err != nil {
		return nil, fmt.Errorf("IKE_SA_INIT with %s: %w", remote, err)
	}
	c, err := s.authenticate(ctx)
	if err != nil {
		if s.State() != StateEstablished {
			e.mu.Lock()
			s.forget()
			e.mu.Unlock()
			return nil, fmt.Errorf("IKE_AUTH with %s: %w", remote, err)
		}
		return s, fmt.Errorf("IKE_AUTH with %s: %w", remote, err)
	}
	e.cfg.Log.Info("IKE SA established", "peer", remote, "child-in", fmt.Sprintf("%#x", c.InSPI), "child-out", fmt.Sprintf("%#x", c.OutSPI))
	return s, nil
}

func (e *Endpoint) initSA(ctx context.Context, remote netip.AddrPort) (*IKESA, error) {
	g, _ := e.cfg.IKE[0].Get(TransformDH)
	group := DHGroup(g.ID)
	local := netip.AddrPortFrom(e.local, Port)
	// A retry keeps the SPI, the nonce and, unless the group changes, the
	// KE: RFC 7296 §2.6 wants the other payloads unchanged after a COOKIE.
	spii, ni, err := e.spiAndNonce(false)
	if err != nil {
		return nil, err
	}
	var cookie []byte
	var dh dhKey
	for try := 1; ; try++ {
		if try > maxInitTries {
			return nil, fmt.Errorf("gave up after %d IKE_SA_INIT requests", maxInitTries)
		}
		if dh == nil {
			if dh, err = group.generate(e.cfg.Rand); err != nil {
				return nil, err
			}
		}
		var ps []Payload
		if cookie != nil {
			ps = append(ps, &Notify{Kind: NotifyCookie, Data: cookie})
		}
		ps = append(ps, &SA{Proposals: e.cfg.IKE}, &KE{Group: group, Data: dh.Public()}, &Nonce{Data: ni},
			&Notify{Kind: NotifyNATDetectionSourceIP, Data: natHash(spii, 0, local.Addr().AsSlice(), local.Port())},
			&Notify{Kind: NotifyNATDetectionDestIP, Data: natHash(spii, 0, remote.Addr().AsSlice(), remote.Port())})
		if e.signatures() {
			ps = append(ps, sigHashNotify())
		}
		if !e.cfg.NoFragmentation {
			ps = append(ps, &Notify{Kind: NotifyFragmentationSupported})
		}
		req, err := (&Message{Header: Header{SPIi: spii, Exchange: IKESAInit, Flags: FlagInitiator}, Payloads: ps}).Marshal()
		if err != nil {
			return nil, err
		}
		var d Datagram
		if err := e.exchange(ctx, spii, nil, false, []Datagram{{Data: req, Local: local, Remote: remote}}, 0,
			func(r Datagram) (bool, error) { d = r; return true, nil }); err != nil {
			return nil, err
		}
		m, err := Parse(d.Data)
		if err != nil {
			e.count("malformed IKE_SA_INIT response")
			return nil, err
		}
		if n := m.Notify(NotifyCookie); n != nil {
			if len(n.Data) < 1 || len(n.Data) > 64 {
				return nil, fmt.Errorf("COOKIE of %d bytes, want 1 to 64", len(n.Data))
			}
			e.count("COOKIE returned")
			cookie = n.Data
			continue
		}
		if n := m.Notify(NotifyInvalidKEPayload); n != nil {
			if len(n.Data) != 2 {
				return nil, fmt.Errorf("INVALID_KE_PAYLOAD with %d bytes of data, want 2", len(n.Data))
			}
			want := DHGroup(binary.BigEndian.Uint16(n.Data))
			if want == group || !e.offersGroup(want) {
				return nil, fmt.Errorf("the responder wants %s, which this side does not offer", want)
			}
			e.count("INVALID_KE_PAYLOAD received")
			group, dh = want, nil
			continue
		}
		if n := m.ErrorNotify(); n != nil {
			return nil, fmt.Errorf("the responder answered %s", n.Kind)
		}
		return e.initResponse(m, d, req, ni, dh, group, local, remote)
	}
}

func (e *Endpoint) offersGroup(g DHGroup) bool {
	for _, p := range e.cfg.IKE {
		if slices.Contains(p.Transforms, Transform{Type: TransformDH, ID: uint16(g)}) {
			return true
		}
	}
	return false
}

// initResponse takes the responder's IKE_SA_INIT and makes the IKE SA.
func (e *Endpoint) initResponse(m *Message, d Datagram, req, ni []byte, dh dhKey, group DHGroup, local, remote netip.AddrPort) (*IKESA, error) {
	sap, _ := m.Find(PayloadSA).(*SA)
	ke, _ := m.Find(PayloadKE).(*KE)
	nonce, _ := m.Find(PayloadNonce).(*Nonce)
	switch {
	case sap == nil || ke == nil || nonce == nil:
		return nil, errors.New("the response lacks SA, KE or Nonce")
	case m.SPIr == 0:
		return nil, errors.New("the response has no responder SPI")
	case len(sap.Proposals) != 1 || !Accepts(e.cfg.IKE, sap.Proposals[0]):
		return nil, fmt.Errorf("the responder chose %d proposals, not one of ours", len(sap.Proposals))
	}
	suite, err := ikeSuiteFrom(sap.Proposals[0])
	if err != nil {
		return nil, err
	}
	if ke.Group != group || suite.group != group {
		return nil, fmt.Errorf("the responder's KE is %s and its proposal %s, but ours was %s", ke.Group, suite.group, group)
	}
	hashes, err := peerSigHashes(m)
	if err != nil {
		return nil, err
	}
	gir, err := dh.Shared(ke.Data)
	if err != nil {
		return nil, err
	}
	keys, err := deriveIKEKeys(suite, ni, nonce.Data, gir, m.SPIi, m.SPIr)
	if err != nil {
		return nil, err
	}
	s := &IKESA{gone: make(chan struct{}), e: e, initiator: true, spii: m.SPIi, spir: m.SPIr, suite: suite, keys: keys, ni: ni, nr: nonce.Data,
		initReq: req, initResp: d.Data, local: local, remote: remote, created: time.Now(), nextReq: 1, peerHashes: hashes}
	if s.send, err = newSKCipher(suite.encr, suite.integ, keys.ei, keys.ai); err == nil {
		s.recv, err = newSKCipher(suite.encr, suite.integ, keys.er, keys.ar)
	}
	if err != nil {
		return nil, err
	}
	s.natPeer, s.natHere = natDetected(m, m.SPIi, m.SPIr, d)
	s.nat = s.natPeer || s.natHere
	s.fragments = !e.cfg.NoFragmentation && m.Notify(NotifyFragmentationSupported) != nil
	if s.nat && remote.Port() == Port {
		// RFC 7296 §2.23: float to port 4500 for IKE_AUTH.
		s.local, s.remote = netip.AddrPortFrom(local.Addr(), NATTPort), netip.AddrPortFrom(remote.Addr(), NATTPort)
	}
	e.mu.Lock()
	e.sas[s.spii] = s
	e.mu.Unlock()
	return s, nil
}

// authenticate runs IKE_AUTH with the first CHILD_SA.
func (s *IKESA) authenticate(ctx context.Context) (*Child, error) {
	e := s.e
	e.mu.Lock()
	inSPI, err := e.childSPI()
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	esp := withSPI(withoutDH(e.cfg.ESP), binary.BigEndian.AppendUint32(nil, inSPI))
	certs, auth, err := s.ownAuth()
	if err != nil {
		return nil, err
	}
	ps := append([]Payload{&ID{Kind: PayloadIDi, Identity: e.cfg.LocalID}}, certs...)
	if len(e.cfg.CAs) > 0 {
		ps = append(ps, certReqFor(e.cfg.CAs))
	}
	if e.cfg.RemoteID.Kind != 0 {
		ps = append(ps, &ID{Kind: PayloadIDr, Identity: e.cfg.RemoteID})
	}
	ps = append(append(ps, auth), modeRequest(e.cfg.Transport)...)
	ps = append(ps, &SA{Proposals: esp}, &TS{Kind: PayloadTSi, Selectors: e.cfg.LocalTS}, &TS{Kind: PayloadTSr, Selectors: e.cfg.RemoteTS})
	e.expect(inSPI)
	m, err := s.request(ctx, IKEAuth, ps)
	if err != nil {
		return nil, err
	}
	if n := m.Notify(NotifyAuthenticationFailed); n != nil {
		e.count("AUTHENTICATION_FAILED received")
		return nil, errors.New("the responder answered AUTHENTICATION_FAILED")
	}
	idr, _ := m.Find(PayloadIDr).(*ID)
	peerAuth, _ := m.Find(PayloadAuth).(*Auth)
	switch {
	case idr == nil || peerAuth == nil:
		if n := m.ErrorNotify(); n != nil {
			e.count(n.Kind.String() + " received")
			return nil, fmt.Errorf("the responder answered %s", n.Kind)
		}
		return nil, errors.New("the response lacks IDr or AUTH")
	case e.cfg.RemoteID.Kind != 0 && !idr.Identity.Equal(e.cfg.RemoteID):
		return nil, fmt.Errorf("the responder is %s, want %s", idr.Identity, e.cfg.RemoteID)
	}
	e.mu.Lock()
	err = s.checkPeerAuth(m, idr.Identity, peerAuth)
	e.mu.Unlock()
	if err != nil {
		var ae *authError
		if errors.As(err, &ae) {
			e.count(ae.reason)
		}
		return nil, fmt.Errorf("the responder %s: %w", idr.Identity, err)
	}
	e.mu.Lock()
	s.state, s.peerID = StateEstablished, idr.Identity
	e.mu.Unlock()
	e.count("IKE SA established")
	if n := m.ErrorNotify(); n != nil {
		return nil, fmt.Errorf("IKE SA up, no CHILD_SA: the responder answered %s", n.Kind)
	}
	c, err := s.takeChild(m, esp, e.cfg.LocalTS, e.cfg.RemoteTS, nil, s.ni, s.nr, inSPI)
	if err != nil {
		return nil, fmt.Errorf("IKE SA up, no CHILD_SA: %w", err)
	}
	c.Name = e.cfg.ChildName
	e.mu.Lock()
	s.children = append(s.children, c)
	e.count("CHILD_SA established")
	e.mu.Unlock()
	if err := s.checkMode(ctx, c, e.cfg.Transport); err != nil {
		return nil, fmt.Errorf("IKE SA up, no CHILD_SA: %w", err)
	}
	return c, nil
}
