package ike

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
)

// espGroup is the DH group of the first ESP proposal (PFS for
// CREATE_CHILD_SA), or 0.
func (e *Endpoint) espGroup() DHGroup {
	for _, p := range e.cfg.ESP {
		if g, ok := p.Get(TransformDH); ok {
			return DHGroup(g.ID)
		}
	}
	return 0
}

// RekeyChild replaces a CHILD_SA with a new one (RFC 7296 §1.3.3):
// CREATE_CHILD_SA with REKEY_SA, new nonces and, when the ESP proposals
// name a group, a new key exchange; then the old CHILD_SA is deleted with
// the peer. The new child is returned; the gateway installs it before the
// old one goes.
func (s *IKESA) RekeyChild(ctx context.Context, old *Child) (*Child, error) {
	e := s.e
	e.mu.Lock()
	inSPI, err := e.childSPI()
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ni, err := e.nonce()
	if err != nil {
		return nil, err
	}
	esp := e.cfg.ESP
	group := e.espGroup()
	var dh dhKey
	if group == 0 {
		esp = withoutDH(esp)
	} else if dh, err = group.generate(e.cfg.Rand); err != nil {
		return nil, err
	}
	esp = slices.Clone(esp)
	for i := range esp {
		esp[i].SPI = binary.BigEndian.AppendUint32(nil, inSPI)
	}
	ps := []Payload{&Notify{Protocol: ProtoESP, SPI: binary.BigEndian.AppendUint32(nil, old.InSPI), Kind: NotifyRekeySA},
		&SA{Proposals: esp}, &Nonce{Data: ni}}
	if dh != nil {
		ps = append(ps, &KE{Group: group, Data: dh.Public()})
	}
	ps = append(ps, &TS{Kind: PayloadTSi, Selectors: old.LocalTS}, &TS{Kind: PayloadTSr, Selectors: old.RemoteTS})
	m, err := s.request(ctx, CreateChildSA, ps)
	if err != nil {
		return nil, fmt.Errorf("rekey CHILD_SA %#x: %w", old.InSPI, err)
	}
	if n := m.ErrorNotify(); n != nil {
		return nil, fmt.Errorf("rekey CHILD_SA %#x: the peer answered %s", old.InSPI, n.Kind)
	}
	sap, _ := m.Find(PayloadSA).(*SA)
	nonce, _ := m.Find(PayloadNonce).(*Nonce)
	tsi, _ := m.Find(PayloadTSi).(*TS)
	tsr, _ := m.Find(PayloadTSr).(*TS)
	ke, _ := m.Find(PayloadKE).(*KE)
	switch {
	case sap == nil || nonce == nil || tsi == nil || tsr == nil:
		return nil, errors.New("rekey: the response lacks SA, Nonce, TSi or TSr")
	case len(sap.Proposals) != 1 || len(sap.Proposals[0].SPI) != 4 || !Accepts(esp, sap.Proposals[0]):
		return nil, errors.New("rekey: the peer chose an ESP proposal not offered")
	case !Within(tsi.Selectors, old.LocalTS) || !Within(tsr.Selectors, old.RemoteTS):
		return nil, errors.New("rekey: the peer's selectors exceed the old CHILD_SA's")
	case (dh != nil) != (ke != nil):
		return nil, errors.New("rekey: a KE payload where none was asked for, or none where one was")
	}
	var gir []byte
	if dh != nil {
		if ke.Group != group {
			return nil, fmt.Errorf("rekey: the peer's KE is %s, ours %s", ke.Group, group)
		}
		if gir, err = dh.Shared(ke.Data); err != nil {
			return nil, err
		}
	}
	cs, err := childSuiteFrom(sap.Proposals[0])
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	c, err := s.newChild(cs, sap.Proposals[0], gir, ni, nonce.Data, true, inSPI)
	if err == nil {
		c.LocalTS, c.RemoteTS = tsi.Selectors, tsr.Selectors
		s.children = append(s.children, c)
		e.count("CHILD_SA rekeyed")
	}
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if e.cfg.OnRekey != nil {
		e.cfg.OnRekey(s, old, c)
	}
	if err := s.DeleteChild(ctx, old); err != nil {
		return c, fmt.Errorf("rekeyed CHILD_SA %#x to %#x, but the old one's deletion: %w", old.InSPI, c.InSPI, err)
	}
	return c, nil
}

// respondCreateChild answers CREATE_CHILD_SA: a CHILD_SA rekey
// (REKEY_SA), a new CHILD_SA (with PFS when a KE is sent), or an IKE SA
// rekey.
func (s *IKESA) respondCreateChild(m *Message) []Payload {
	e := s.e
	sap, _ := m.Find(PayloadSA).(*SA)
	nonce, _ := m.Find(PayloadNonce).(*Nonce)
	tsi, _ := m.Find(PayloadTSi).(*TS)
	tsr, _ := m.Find(PayloadTSr).(*TS)
	ke, _ := m.Find(PayloadKE).(*KE)
	if sap != nil && nonce != nil && len(sap.Proposals) > 0 && sap.Proposals[0].Protocol == ProtoIKE {
		return s.respondRekeyIKE(sap, nonce, ke)
	}
	if sap == nil || nonce == nil || tsi == nil || tsr == nil {
		e.count("CREATE_CHILD_SA without SA, Nonce, TSi or TSr")
		return []Payload{&Notify{Kind: NotifyInvalidSyntax}}
	}
	var old *Child
	if n := m.Notify(NotifyRekeySA); n != nil {
		if len(n.SPI) != 4 {
			return []Payload{&Notify{Kind: NotifyInvalidSyntax}}
		}
		spi := binary.BigEndian.Uint32(n.SPI)
		for _, c := range s.children {
			if c.OutSPI == spi {
				old = c
			}
		}
		if old == nil {
			e.count("rekey of an unknown CHILD_SA")
			return []Payload{&Notify{Protocol: ProtoESP, SPI: n.SPI, Kind: NotifyChildSANotFound}}
		}
	}
	chosen, ok := Choose(e.cfg.ESP, sap.Proposals)
	if !ok {
		chosen, ok = Choose(withoutDH(e.cfg.ESP), sap.Proposals)
	}
	if !ok || len(chosen.SPI) != 4 {
		e.count("no ESP proposal chosen")
		return []Payload{&Notify{Kind: NotifyNoProposalChosen}}
	}
	cs, err := childSuiteFrom(chosen)
	if err != nil {
		e.count("no ESP proposal chosen")
		return []Payload{&Notify{Kind: NotifyNoProposalChosen}}
	}
	var gir []byte
	var kePayload *KE
	if g, ok := chosen.Get(TransformDH); ok {
		group := DHGroup(g.ID)
		if ke == nil || ke.Group != group {
			e.count("INVALID_KE_PAYLOAD sent")
			return []Payload{&Notify{Kind: NotifyInvalidKEPayload, Data: binary.BigEndian.AppendUint16(nil, uint16(group))}}
		}
		dh, err := group.generate(e.cfg.Rand)
		if err == nil {
			gir, err = dh.Shared(ke.Data)
		}
		if err != nil {
			e.count("bad KE payload")
			return []Payload{&Notify{Kind: NotifyInvalidSyntax}}
		}
		kePayload = &KE{Group: group, Data: dh.Public()}
	}
	ni, nr := Narrow(tsi.Selectors, e.cfg.RemoteTS), Narrow(tsr.Selectors, e.cfg.LocalTS)
	if len(ni) == 0 || len(nr) == 0 {
		e.count("traffic selectors unacceptable")
		return []Payload{&Notify{Kind: NotifyTSUnacceptable}}
	}
	myNonce, err := e.nonce()
	if err != nil {
		return []Payload{&Notify{Kind: NotifyTemporaryFailure}}
	}
	c, err := s.newChild(cs, chosen, gir, nonce.Data, myNonce, false, 0)
	if err != nil {
		e.count("CHILD_SA not made")
		return []Payload{&Notify{Kind: NotifyTemporaryFailure}}
	}
	c.LocalTS, c.RemoteTS = nr, ni
	chosen.SPI = binary.BigEndian.AppendUint32(nil, c.InSPI)
	s.children = append(s.children, c)
	if old != nil {
		e.count("CHILD_SA rekeyed by the peer")
	} else {
		e.count("CHILD_SA established")
	}
	if e.cfg.OnChild != nil {
		e.cfg.OnChild(s, c)
	}
	resp := []Payload{&SA{Proposals: []Proposal{chosen}}, &Nonce{Data: myNonce}}
	if kePayload != nil {
		resp = append(resp, kePayload)
	}
	return append(resp, &TS{Kind: PayloadTSi, Selectors: ni}, &TS{Kind: PayloadTSr, Selectors: nr})
}

// Rekey replaces the IKE SA with a new one (RFC 7296 §1.3.2): a
// CREATE_CHILD_SA with new SPIs, nonces and key exchange, the new SA's
// SKEYSEED from the old SK_d; the CHILD_SAs move to the new SA and the
// old one is deleted with the peer. The new SA is returned.
func (s *IKESA) Rekey(ctx context.Context) (*IKESA, error) {
	e := s.e
	e.mu.Lock()
	spi, err := e.randomSPI()
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ni, err := e.nonce()
	if err != nil {
		return nil, err
	}
	dh, err := s.suite.group.generate(e.cfg.Rand)
	if err != nil {
		return nil, err
	}
	props := slices.Clone(e.cfg.IKE)
	for i := range props {
		props[i].SPI = binary.BigEndian.AppendUint64(nil, spi)
	}
	m, err := s.request(ctx, CreateChildSA, []Payload{&SA{Proposals: props}, &Nonce{Data: ni}, &KE{Group: s.suite.group, Data: dh.Public()}})
	if err != nil {
		return nil, fmt.Errorf("rekey IKE SA: %w", err)
	}
	if n := m.ErrorNotify(); n != nil {
		return nil, fmt.Errorf("rekey IKE SA: the peer answered %s", n.Kind)
	}
	sap, _ := m.Find(PayloadSA).(*SA)
	nonce, _ := m.Find(PayloadNonce).(*Nonce)
	ke, _ := m.Find(PayloadKE).(*KE)
	switch {
	case sap == nil || nonce == nil || ke == nil:
		return nil, errors.New("rekey IKE SA: the response lacks SA, Nonce or KE")
	case len(sap.Proposals) != 1 || len(sap.Proposals[0].SPI) != 8 || !Accepts(props, sap.Proposals[0]):
		return nil, errors.New("rekey IKE SA: the peer chose a proposal not offered")
	}
	suite, err := ikeSuiteFrom(sap.Proposals[0])
	if err != nil {
		return nil, err
	}
	if ke.Group != suite.group {
		return nil, fmt.Errorf("rekey IKE SA: the peer's KE is %s, its proposal %s", ke.Group, suite.group)
	}
	gir, err := dh.Shared(ke.Data)
	if err != nil {
		return nil, err
	}
	peer := binary.BigEndian.Uint64(sap.Proposals[0].SPI)
	e.mu.Lock()
	n, err := s.successor(suite, gir, ni, nonce.Data, spi, peer, true)
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	e.count("IKE SA rekeyed")
	if err := s.Delete(ctx); err != nil {
		return n, fmt.Errorf("rekeyed the IKE SA, but the old one's deletion: %w", err)
	}
	return n, nil
}

// successor makes the IKE SA that replaces s and moves the CHILD_SAs to
// it: the initiator of the rekey is the new SA's initiator.
func (s *IKESA) successor(suite ikeSuite, gir, ni, nr []byte, spii, spir uint64, weInitiated bool) (*IKESA, error) {
	keys, err := deriveRekeyedIKEKeys(suite, s.suite.prf, s.keys.d, ni, nr, gir, spii, spir)
	if err != nil {
		return nil, err
	}
	n := &IKESA{e: s.e, initiator: weInitiated, state: StateEstablished, spii: spii, spir: spir, suite: suite, keys: keys,
		ni: ni, nr: nr, local: s.local, remote: s.remote, nat: s.nat, peerID: s.peerID, created: time.Now(), children: s.children}
	send, recv := [2][]byte{keys.ei, keys.ai}, [2][]byte{keys.er, keys.ar}
	if !weInitiated {
		send, recv = recv, send
	}
	if n.send, err = newSKCipher(suite.encr, suite.integ, send[0], send[1]); err == nil {
		n.recv, err = newSKCipher(suite.encr, suite.integ, recv[0], recv[1])
	}
	if err != nil {
		return nil, err
	}
	s.children = nil
	s.e.sas[n.ourSPI()] = n
	return n, nil
}

// respondRekeyIKE answers a CREATE_CHILD_SA that rekeys the IKE SA.
func (s *IKESA) respondRekeyIKE(sap *SA, nonce *Nonce, ke *KE) []Payload {
	e := s.e
	chosen, ok := Choose(e.cfg.IKE, sap.Proposals)
	if !ok || len(chosen.SPI) != 8 {
		e.count("no IKE proposal chosen")
		return []Payload{&Notify{Kind: NotifyNoProposalChosen}}
	}
	suite, err := ikeSuiteFrom(chosen)
	if err != nil {
		e.count("no IKE proposal chosen")
		return []Payload{&Notify{Kind: NotifyNoProposalChosen}}
	}
	if ke == nil || ke.Group != suite.group {
		e.count("INVALID_KE_PAYLOAD sent")
		return []Payload{&Notify{Kind: NotifyInvalidKEPayload, Data: binary.BigEndian.AppendUint16(nil, uint16(suite.group))}}
	}
	dh, err := suite.group.generate(e.cfg.Rand)
	var gir []byte
	if err == nil {
		gir, err = dh.Shared(ke.Data)
	}
	if err != nil {
		e.count("bad KE payload")
		return []Payload{&Notify{Kind: NotifyInvalidSyntax}}
	}
	spi, err := e.randomSPI()
	if err != nil {
		return []Payload{&Notify{Kind: NotifyTemporaryFailure}}
	}
	nr, err := e.nonce()
	if err != nil {
		return []Payload{&Notify{Kind: NotifyTemporaryFailure}}
	}
	if _, err := s.successor(suite, gir, nonce.Data, nr, binary.BigEndian.Uint64(chosen.SPI), spi, false); err != nil {
		e.count("IKE SA rekey failed")
		return []Payload{&Notify{Kind: NotifyTemporaryFailure}}
	}
	e.count("IKE SA rekeyed by the peer")
	chosen.SPI = binary.BigEndian.AppendUint64(nil, spi)
	return []Payload{&SA{Proposals: []Proposal{chosen}}, &Nonce{Data: nr}, &KE{Group: suite.group, Data: dh.Public()}}
}
