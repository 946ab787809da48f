package ike

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// espGroup is the DH group of the first ESP proposal (PFS for
// CREATE_CHILD_SA), or 0.
func espGroup(esp []Proposal) DHGroup {
	for _, p := range esp {
		if g, ok := p.Get(TransformDH); ok {
			return DHGroup(g.ID)
		}
	}
	return 0
}

// ErrRekeyed is a rekey refused because the peer rekeyed the SA first
// (its exchange over before this side's began: no collision, the peer
// deletes the old SA).
var ErrRekeyed = errors.New("the peer rekeyed it already")

// RekeyChild replaces a CHILD_SA with a new one (RFC 7296 §1.3.3):
// CREATE_CHILD_SA with REKEY_SA, new nonces and, when the ESP proposals
// name a group, a new key exchange; then the old CHILD_SA is deleted with
// the peer. The new child is returned; the gateway installs it before the
// old one goes.
//
// When the peer rekeyed the same CHILD_SA at once (RFC 7296 §2.8.1), the
// CHILD_SA of the exchange with the lowest nonce is redundant: if it is
// this side's, this side deletes it, leaves the old one to the peer and
// returns the peer's; if the peer's request turns up only after this
// exchange is over, this side deletes its own then, when the nonces say
// so. Children always tells what is in force.
func (s *IKESA) RekeyChild(ctx context.Context, old *Child) (*Child, error) {
	e := s.e
	if s.ChildRekeyed(old) {
		return nil, fmt.Errorf("rekey CHILD_SA %#x: %w", old.InSPI, ErrRekeyed)
	}
	spi, ni, err := e.spiAndNonce(true)
	if err != nil {
		return nil, err
	}
	inSPI := uint32(spi)
	cc, ok := e.cfg.childConfig(old.Name)
	if !ok {
		return nil, fmt.Errorf("rekey CHILD_SA %#x: no CHILD_SA %q configured", old.InSPI, old.Name)
	}
	esp := cc.ESP
	group := espGroup(esp)
	var dh dhKey
	if group == 0 {
		esp = withoutDH(esp)
	} else if dh, err = group.generate(e.cfg.Rand); err != nil {
		return nil, err
	}
	esp = withSPI(esp, binary.BigEndian.AppendUint32(nil, inSPI))
	ps := append([]Payload{&Notify{Protocol: ProtoESP, SPI: binary.BigEndian.AppendUint32(nil, old.InSPI), Kind: NotifyRekeySA}},
		modeRequest(old.Transport)...)
	ps = append(ps, &SA{Proposals: esp}, &Nonce{Data: ni})
	if dh != nil {
		ps = append(ps, &KE{Group: group, Data: dh.Public()})
	}
	ps = append(ps, &TS{Kind: PayloadTSi, Selectors: old.LocalTS}, &TS{Kind: PayloadTSr, Selectors: old.RemoteTS})
	e.expect(inSPI)
	m, err := s.request(ctx, CreateChildSA, ps)
	if err != nil {
		return nil, fmt.Errorf("rekey CHILD_SA %#x: %w", old.InSPI, err)
	}
	if n := m.ErrorNotify(); n != nil {
		if s.ChildRekeyed(old) {
			// The peer's rekey of it crossed this one and was over first:
			// the old CHILD_SA is gone on its side (CHILD_SA_NOT_FOUND)
			// or going (TEMPORARY_FAILURE).
			return nil, fmt.Errorf("rekey CHILD_SA %#x: the peer answered %s: %w", old.InSPI, n.Kind, ErrRekeyed)
		}
		return nil, fmt.Errorf("rekey CHILD_SA %#x: the peer answered %s", old.InSPI, n.Kind)
	}
	nonce, _ := m.Find(PayloadNonce).(*Nonce)
	ke, _ := m.Find(PayloadKE).(*KE)
	switch {
	case nonce == nil:
		return nil, errors.New("rekey: the response lacks a Nonce")
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
	c, err := s.takeChild(m, esp, old.LocalTS, old.RemoteTS, gir, ni, nonce.Data, inSPI)
	if err != nil {
		return nil, fmt.Errorf("rekey CHILD_SA %#x: %w", old.InSPI, err)
	}
	c.Name = old.Name
	if c.Transport != old.Transport {
		e.mu.Lock()
		s.children = append(s.children, c)
		e.mu.Unlock()
		return nil, fmt.Errorf("rekey CHILD_SA %#x: %w", old.InSPI, s.checkMode(ctx, c, old.Transport))
	}
	e.mu.Lock()
	var survivor *Child
	var deleteOurs bool
	s.children = append(s.children, c)
	e.count("CHILD_SA rekeyed")
	old.ours = &rekeyRecord{ni: ni, nr: nonce.Data, child: c}
	survivor = c
	if old.theirs != nil && !old.settled {
		survivor, deleteOurs = s.childCollision(old)
	}
	e.mu.Unlock()
	if deleteOurs {
		if e.cfg.OnRedundant != nil {
			e.cfg.OnRedundant(s, c, survivor)
		}
		if err := s.DeleteChild(ctx, c); err != nil {
			return survivor, fmt.Errorf("simultaneous rekey of CHILD_SA %#x: deleting this side's redundant %#x: %w", old.InSPI, c.InSPI, err)
		}
		return survivor, nil
	}
	if e.cfg.OnRekey != nil {
		e.cfg.OnRekey(s, old, c)
	}
	if err := s.DeleteChild(ctx, old); err != nil {
		return c, fmt.Errorf("rekeyed CHILD_SA %#x to %#x, but the old one's deletion: %w", old.InSPI, c.InSPI, err)
	}
	return c, nil
}

// NewChild sets up another CHILD_SA of the connection on the IKE SA
// (Config.MoreChildren, by name): CREATE_CHILD_SA with new nonces and,
// when its ESP proposals name a group, a key exchange. Config.OnRekey is
// not called: the caller puts it in force.
func (s *IKESA) NewChild(ctx context.Context, name string) (*Child, error) {
	e := s.e
	cc, ok := e.cfg.childConfig(name)
	if !ok {
		return nil, fmt.Errorf("new CHILD_SA: no CHILD_SA %q configured", name)
	}
	spi, ni, err := e.spiAndNonce(true)
	if err != nil {
		return nil, err
	}
	inSPI := uint32(spi)
	esp, group := cc.ESP, espGroup(cc.ESP)
	var dh dhKey
	if group == 0 {
		esp = withoutDH(esp)
	} else if dh, err = group.generate(e.cfg.Rand); err != nil {
		return nil, err
	}
	esp = withSPI(esp, binary.BigEndian.AppendUint32(nil, inSPI))
	ps := append(modeRequest(cc.Transport), &SA{Proposals: esp}, &Nonce{Data: ni})
	if dh != nil {
		ps = append(ps, &KE{Group: group, Data: dh.Public()})
	}
	ps = append(ps, &TS{Kind: PayloadTSi, Selectors: cc.LocalTS}, &TS{Kind: PayloadTSr, Selectors: cc.RemoteTS})
	e.expect(inSPI)
	m, err := s.request(ctx, CreateChildSA, ps)
	if err != nil {
		return nil, fmt.Errorf("new CHILD_SA %s: %w", name, err)
	}
	if n := m.ErrorNotify(); n != nil {
		return nil, fmt.Errorf("new CHILD_SA %s: the peer answered %s", name, n.Kind)
	}
	nonce, _ := m.Find(PayloadNonce).(*Nonce)
	ke, _ := m.Find(PayloadKE).(*KE)
	switch {
	case nonce == nil:
		return nil, fmt.Errorf("new CHILD_SA %s: the response lacks a Nonce", name)
	case (dh != nil) != (ke != nil):
		return nil, fmt.Errorf("new CHILD_SA %s: a KE payload where none was asked for, or none where one was", name)
	}
	var gir []byte
	if dh != nil {
		if ke.Group != group {
			return nil, fmt.Errorf("new CHILD_SA %s: the peer's KE is %s, ours %s", name, ke.Group, group)
		}
		if gir, err = dh.Shared(ke.Data); err != nil {
			return nil, err
		}
	}
	c, err := s.takeChild(m, esp, cc.LocalTS, cc.RemoteTS, gir, ni, nonce.Data, inSPI)
	if err != nil {
		return nil, fmt.Errorf("new CHILD_SA %s: %w", name, err)
	}
	c.Name = name
	e.mu.Lock()
	s.children = append(s.children, c)
	e.count("CHILD_SA created")
	e.mu.Unlock()
	if err := s.checkMode(ctx, c, cc.Transport); err != nil {
		return nil, fmt.Errorf("new CHILD_SA %s: %w", name, err)
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
		if old.closing {
			// RFC 7296 §2.25.1: this side rekeyed it already and is
			// deleting it.
			e.count("rekey of a CHILD_SA being deleted")
			return []Payload{&Notify{Kind: NotifyTemporaryFailure}}
		}
	}
	// With PFS if the peer offers it, else without.
	name := ""
	if old != nil {
		name = old.Name
	}
	cc, chosen, cs, refused := s.pickChild(sap, tsi, tsr, name, true, m.Notify(NotifyUseTransportMode) != nil)
	if refused != nil {
		return []Payload{refused}
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
	myNonce, err := e.nonce()
	if err != nil {
		return []Payload{&Notify{Kind: NotifyTemporaryFailure}}
	}
	c, child, refused := s.giveChild(cc, chosen, cs, tsi, tsr, gir, nonce.Data, myNonce, m.Notify(NotifyUseTransportMode) != nil)
	if refused != nil {
		return []Payload{refused}
	}
	if old != nil {
		e.count("CHILD_SA rekeyed by the peer")
		old.theirs = &rekeyRecord{ni: nonce.Data, nr: myNonce, child: c}
		if old.ours != nil && !old.settled {
			// This side's rekey of the same CHILD_SA is over already.
			if survivor, deleteOurs := s.childCollision(old); deleteOurs {
				s.deleteLater(old.ours.child, survivor, nil)
			}
		}
	} else {
		e.count("CHILD_SA established")
	}
	resp := []Payload{child[0], &Nonce{Data: myNonce}}
	if kePayload != nil {
		resp = append(resp, kePayload)
	}
	return append(resp, child[1:]...)
}

// Rekey replaces the IKE SA with a new one (RFC 7296 §1.3.2): a
// CREATE_CHILD_SA with new SPIs, nonces and key exchange, the new SA's
// SKEYSEED from the old SK_d; the CHILD_SAs move to the new SA and the
// old one is deleted with the peer. The new SA is returned. A
// simultaneous rekey by the peer is settled as for RekeyChild: the IKE SA
// that survives, with the CHILD_SAs, is returned.
func (s *IKESA) Rekey(ctx context.Context) (*IKESA, error) {
	e := s.e
	if s.Rekeyed() {
		return nil, fmt.Errorf("rekey IKE SA: %w", ErrRekeyed)
	}
	spi, ni, err := e.spiAndNonce(false)
	if err != nil {
		return nil, err
	}
	dh, err := s.suite.group.generate(e.cfg.Rand)
	if err != nil {
		return nil, err
	}
	props := withSPI(e.cfg.IKE, binary.BigEndian.AppendUint64(nil, spi))
	m, err := s.request(ctx, CreateChildSA, []Payload{&SA{Proposals: props}, &Nonce{Data: ni}, &KE{Group: s.suite.group, Data: dh.Public()}})
	if err != nil {
		if errors.Is(err, errSAGone) && s.Rekeyed() {
			// The peer's rekey was over first and it deleted the old SA
			// before this request reached it.
			return nil, fmt.Errorf("rekey IKE SA: %w: %w", err, ErrRekeyed)
		}
		return nil, fmt.Errorf("rekey IKE SA: %w", err)
	}
	if n := m.ErrorNotify(); n != nil {
		if s.Rekeyed() {
			return nil, fmt.Errorf("rekey IKE SA: the peer answered %s: %w", n.Kind, ErrRekeyed)
		}
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
	var survivor, redundant *IKESA
	var deleteOurs bool
	if err == nil {
		s.ourRekey = &rekeyRecord{ni: ni, nr: nonce.Data, sa: n}
		if s.peerRekey != nil && !s.settled {
			survivor, redundant, deleteOurs = s.ikeCollision()
		}
	}
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	e.count("IKE SA rekeyed")
	if deleteOurs {
		// The peer's new IKE SA survives, and the peer deletes the old one.
		if err := redundant.Delete(ctx); err != nil {
			return survivor, fmt.Errorf("simultaneous IKE SA rekey: deleting this side's redundant IKE SA: %w", err)
		}
		return survivor, nil
	}
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
	n := &IKESA{gone: make(chan struct{}), e: s.e, initiator: weInitiated, state: StateEstablished, spii: spii, spir: spir, suite: suite, keys: keys,
		ni: ni, nr: nr, local: s.local, remote: s.remote, nat: s.nat, natPeer: s.natPeer, natHere: s.natHere, fragments: s.fragments, peerID: s.peerID, peerCert: s.peerCert,
		peerHashes: s.peerHashes, created: time.Now(), children: s.children}
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
	if s.closing {
		// RFC 7296 §2.25.2: this side rekeyed it already and is
		// deleting it.
		e.count("rekey of an IKE SA being deleted")
		return []Payload{&Notify{Kind: NotifyTemporaryFailure}}
	}
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
	n, err := s.successor(suite, gir, nonce.Data, nr, binary.BigEndian.Uint64(chosen.SPI), spi, false)
	if err != nil {
		e.count("IKE SA rekey failed")
		return []Payload{&Notify{Kind: NotifyTemporaryFailure}}
	}
	e.count("IKE SA rekeyed by the peer")
	s.peerRekey = &rekeyRecord{ni: nonce.Data, nr: nr, sa: n}
	if s.ourRekey != nil && !s.settled {
		// This side's rekey of the same IKE SA is over already.
		if _, redundant, deleteOurs := s.ikeCollision(); deleteOurs {
			s.deleteLater(nil, nil, redundant)
		}
	}
	chosen.SPI = binary.BigEndian.AppendUint64(nil, spi)
	return []Payload{&SA{Proposals: []Proposal{chosen}}, &Nonce{Data: nr}, &KE{Group: suite.group, Data: dh.Public()}}
}
