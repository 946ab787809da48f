package ike

import (
	"bytes"
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"time"
)

// respondInit answers an IKE_SA_INIT request (RFC 7296 §1.2): a COOKIE
// demand above the half-open threshold, an INVALID_KE_PAYLOAD for the
// wrong group, NO_PROPOSAL_CHOSEN, or SA, KE, Nr and NAT detection.
//
// The Diffie-Hellman work, most of an IKE_SA_INIT's cost, runs without
// the endpoint's lock, so that requests handed to Handle on several
// goroutines (Transport.Serve) share the CPUs; what it decided before is
// checked again after.
func (e *Endpoint) respondInit(d Datagram, h Header) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !h.FromInitiator() || h.MessageID != 0 {
		e.count("IKE_SA_INIT request not from an initiator")
		return
	}
	key := halfOpenKey{d.Remote, h.SPIi}
	if e.answeredInit(key, d) {
		return
	}
	if h.SPIr != 0 {
		e.count("IKE_SA_INIT request with a responder SPI")
		return
	}
	m, err := Parse(d.Data)
	if err != nil {
		e.count("malformed IKE_SA_INIT request")
		e.cfg.Log.Debug("IKE_SA_INIT dropped", "from", d.Remote, "err", err)
		return
	}
	sap, _ := m.Find(PayloadSA).(*SA)
	ke, _ := m.Find(PayloadKE).(*KE)
	nonce, _ := m.Find(PayloadNonce).(*Nonce)
	if sap == nil || ke == nil || nonce == nil {
		e.count("IKE_SA_INIT request without SA, KE or Nonce")
		e.notifyInit(d, h, NotifyInvalidSyntax, nil)
		return
	}
	for _, p := range m.Payloads {
		if u, ok := p.(*Unknown); ok && u.Critical {
			e.count("unsupported critical payload")
			e.notifyInit(d, h, NotifyUnsupportedCriticalPayload, []byte{byte(u.Kind)})
			return
		}
	}
	now := time.Now()
	e.expireHalfOpen(now)
	if len(e.halfOpen) >= e.cfg.CookieThreshold {
		want := e.cookieFor(nonce.Data, d.Remote.Addr(), h.SPIi)
		if c := m.Notify(NotifyCookie); c == nil || !hmac.Equal(c.Data, want) {
			e.count("COOKIE asked for")
			e.notifyInit(d, h, NotifyCookie, want)
			return
		}
	}
	if len(e.halfOpen) >= e.cfg.MaxHalfOpen {
		e.count("half-open limit reached")
		return
	}
	chosen, ok := Choose(e.cfg.IKE, sap.Proposals)
	if !ok {
		e.count("no IKE proposal chosen")
		e.notifyInit(d, h, NotifyNoProposalChosen, nil)
		return
	}
	chosen.SPI = nil
	suite, err := ikeSuiteFrom(chosen)
	if err != nil {
		e.count("no IKE proposal chosen")
		e.notifyInit(d, h, NotifyNoProposalChosen, nil)
		return
	}
	if ke.Group != suite.group {
		e.count("INVALID_KE_PAYLOAD sent")
		e.notifyInit(d, h, NotifyInvalidKEPayload, binary.BigEndian.AppendUint16(nil, uint16(suite.group)))
		return
	}
	fail := func(reason string, err error) {
		e.count(reason)
		e.cfg.Log.Debug("IKE_SA_INIT refused", "from", d.Remote, "reason", reason, "err", err)
	}
	e.mu.Unlock()
	dh, err := suite.group.generate(e.cfg.Rand)
	var gir []byte
	if err == nil {
		gir, err = dh.Shared(ke.Data)
	}
	e.mu.Lock()
	if dh == nil {
		fail("key exchange failed", err)
		return
	}
	if err != nil {
		fail("bad KE payload", err)
		e.notifyInit(d, h, NotifyInvalidSyntax, nil)
		return
	}
	// Meanwhile the same request may have been answered, or others
	// filled the half-open table.
	if e.answeredInit(key, d) {
		return
	}
	if len(e.halfOpen) >= e.cfg.MaxHalfOpen {
		e.count("half-open limit reached")
		return
	}
	spir, err := e.randomSPI()
	if err != nil {
		fail("no SPI", err)
		return
	}
	nr, err := e.nonce()
	if err != nil {
		fail("no nonce", err)
		return
	}
	keys, err := deriveIKEKeys(suite, nonce.Data, nr, gir, h.SPIi, spir)
	if err != nil {
		fail("key derivation failed", err)
		return
	}
	hashes, err := peerSigHashes(m)
	if err != nil {
		fail("malformed SIGNATURE_HASH_ALGORITHMS", err)
		e.notifyInit(d, h, NotifyInvalidSyntax, nil)
		return
	}
	s := &IKESA{gone: make(chan struct{}), e: e, spii: h.SPIi, spir: spir, suite: suite, keys: keys, ni: nonce.Data, nr: nr,
		initReq: d.Data, local: d.Local, remote: d.Remote, halfOpenAt: key, created: now, expectReq: 1, peerHashes: hashes}
	s.natPeer, s.natHere = natDetected(m, h.SPIi, 0, d)
	s.nat = s.natPeer || s.natHere
	if s.send, err = newSKCipher(suite.encr, suite.integ, keys.er, keys.ar); err == nil {
		s.recv, err = newSKCipher(suite.encr, suite.integ, keys.ei, keys.ai)
	}
	if err != nil {
		fail("SK cipher failed", err)
		return
	}
	resp := &Message{Header: Header{SPIi: h.SPIi, SPIr: spir, Exchange: IKESAInit, Flags: FlagResponse}, Payloads: []Payload{
		&SA{Proposals: []Proposal{chosen}}, &KE{Group: suite.group, Data: dh.Public()}, &Nonce{Data: nr},
		&Notify{Kind: NotifyNATDetectionSourceIP, Data: natHash(h.SPIi, spir, d.Local.Addr().AsSlice(), d.Local.Port())},
		&Notify{Kind: NotifyNATDetectionDestIP, Data: natHash(h.SPIi, spir, d.Remote.Addr().AsSlice(), d.Remote.Port())},
	}}
	if len(e.cfg.CAs) > 0 {
		resp.Payloads = append(resp.Payloads, certReqFor(e.cfg.CAs))
	}
	if e.signatures() {
		resp.Payloads = append(resp.Payloads, sigHashNotify())
	}
	if s.fragments = !e.cfg.NoFragmentation && m.Notify(NotifyFragmentationSupported) != nil; s.fragments {
		resp.Payloads = append(resp.Payloads, &Notify{Kind: NotifyFragmentationSupported})
	}
	if s.initResp, err = resp.Marshal(); err != nil {
		fail("response not encoded", err)
		return
	}
	e.sas[spir], e.halfOpen[key] = s, s
	if err := e.send(Datagram{Data: s.initResp, Local: d.Local, Remote: d.Remote}); err != nil {
		e.count("response not sent")
	}
}

// answeredInit answers again a retransmitted IKE_SA_INIT request of a
// half-open SA and drops another request with its SPI: true when the
// request was one of these. e.mu is held.
func (e *Endpoint) answeredInit(key halfOpenKey, d Datagram) bool {
	s := e.halfOpen[key]
	if s == nil {
		return false
	}
	if bytes.Equal(s.initReq, d.Data) {
		e.count("retransmitted request answered again")
		e.send(Datagram{Data: s.initResp, Local: d.Local, Remote: d.Remote})
		return true
	}
	e.count("IKE_SA_INIT request with a used SPI")
	return true
}

// notifyInit answers an IKE_SA_INIT request with one notification and no
// state.
func (e *Endpoint) notifyInit(d Datagram, h Header, n NotifyType, data []byte) {
	resp := &Message{Header: Header{SPIi: h.SPIi, Exchange: IKESAInit, Flags: FlagResponse},
		Payloads: []Payload{&Notify{Kind: n, Data: data}}}
	b, err := resp.Marshal()
	if err == nil {
		err = e.send(Datagram{Data: b, Local: d.Local, Remote: d.Remote})
	}
	if err != nil {
		e.count("response not sent")
	}
}

// natDetected compares the peer's NAT_DETECTION_*_IP hashes of an
// IKE_SA_INIT message with the addresses it arrived with (RFC 7296
// §2.23). A source mismatch means the peer is behind a NAT (peer), a
// destination mismatch that this side is (here); either is a NAT between
// the two.
func natDetected(m *Message, spii, spir uint64, d Datagram) (peer, here bool) {
	src := natHash(spii, spir, d.Remote.Addr().AsSlice(), d.Remote.Port())
	dst := natHash(spii, spir, d.Local.Addr().AsSlice(), d.Local.Port())
	var srcOK, dstOK, srcAny, dstAny bool
	for _, p := range m.Payloads {
		n, ok := p.(*Notify)
		if !ok {
			continue
		}
		switch n.Kind {
		case NotifyNATDetectionSourceIP:
			srcAny = true
			srcOK = srcOK || hmac.Equal(n.Data, src)
		case NotifyNATDetectionDestIP:
			dstAny = true
			dstOK = dstOK || hmac.Equal(n.Data, dst)
		}
	}
	return srcAny && !srcOK, dstAny && !dstOK
}

// respondAuth checks the initiator's IKE_AUTH and builds the response:
// IDr and AUTH, and the first CHILD_SA when the initiator's SA and
// selectors can be met.
func (s *IKESA) respondAuth(m *Message) []Payload {
	e := s.e
	idi, _ := m.Find(PayloadIDi).(*ID)
	auth, _ := m.Find(PayloadAuth).(*Auth)
	failed := func(reason string) []Payload {
		e.count(reason)
		e.cfg.Log.Info("IKE_AUTH refused", "peer", s.remote, "reason", reason)
		s.state = StateDeleted
		return []Payload{&Notify{Kind: NotifyAuthenticationFailed}}
	}
	switch {
	case idi == nil || auth == nil:
		return failed("IKE_AUTH without IDi or AUTH")
	case e.cfg.RemoteID.Kind != 0 && !idi.Identity.Equal(e.cfg.RemoteID):
		return failed("unknown peer identity")
	}
	if err := s.checkPeerAuth(m, idi.Identity, auth); err != nil {
		e.cfg.Log.Info("IKE_AUTH: the initiator's AUTH does not verify", "peer", s.remote, "id", idi.Identity, "err", err)
		reason := "authentication failed"
		if ae := (*authError)(nil); errors.As(err, &ae) {
			reason = ae.reason
		}
		return failed(reason)
	}
	certs, own, err := s.ownAuth()
	if err != nil {
		e.cfg.Log.Warn("IKE_AUTH: no AUTH of this side", "peer", s.remote, "err", err)
		return failed("no AUTH of this side")
	}
	s.state, s.peerID = StateEstablished, idi.Identity
	delete(e.halfOpen, s.halfOpenAt)
	resp := append(append([]Payload{&ID{Kind: PayloadIDr, Identity: e.cfg.LocalID}}, certs...), own)
	e.count("IKE SA established")
	sap, _ := m.Find(PayloadSA).(*SA)
	tsi, _ := m.Find(PayloadTSi).(*TS)
	tsr, _ := m.Find(PayloadTSr).(*TS)
	if sap == nil || tsi == nil || tsr == nil {
		return resp
	}
	cc, chosen, cs, refused := s.pickChild(sap, tsi, tsr, "", false, m.Notify(NotifyUseTransportMode) != nil)
	if refused != nil {
		return append(resp, refused)
	}
	_, child, refused := s.giveChild(cc, chosen, cs, tsi, tsr, nil, s.ni, s.nr, m.Notify(NotifyUseTransportMode) != nil)
	if refused != nil {
		return append(resp, refused)
	}
	e.count("CHILD_SA established")
	return append(resp, child...)
}

// newChild derives a CHILD_SA's keys for the chosen proposal (whose SPI
// is the peer's) from the nonces of the exchange that made it, whose
// initiator's keys come first; inSPI is this side's SPI, or 0 to pick one.
func (s *IKESA) newChild(cs childSuite, chosen Proposal, gir, ni, nr []byte, weInitiated bool, inSPI uint32) (*Child, error) {
	k, err := deriveChildKeys(s.suite.prf, s.keys.d, cs, gir, ni, nr)
	if err != nil {
		return nil, err
	}
	c := &Child{OutSPI: binary.BigEndian.Uint32(chosen.SPI), Suite: cs.suite, ESN: cs.esn,
		Local: s.local.Addr(), Remote: s.remote.Addr(), UDP: s.nat, FollowPeerPort: s.nat && s.natPeer && !s.natHere}
	if s.nat {
		c.RemotePort = s.remote.Port()
	}
	if c.InSPI = inSPI; c.InSPI == 0 {
		c.InSPI, err = s.e.childSPI()
	}
	if err != nil {
		return nil, err
	}
	if weInitiated {
		c.OutEnc, c.OutAuth, c.InEnc, c.InAuth = k.encI, k.authI, k.encR, k.authR
	} else {
		c.InEnc, c.InAuth, c.OutEnc, c.OutAuth = k.encI, k.authI, k.encR, k.authR
	}
	return c, nil
}
