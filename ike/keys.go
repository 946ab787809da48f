package ike

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/espgw/espgw/sa"
)

// ikeSuite is the algorithms of a chosen IKE proposal.
type ikeSuite struct {
	prf   prfAlg
	encr  encrAlg
	integ integAlg // zero with an AEAD cipher
	group DHGroup
}

func ikeSuiteFrom(p Proposal) (ikeSuite, error) {
	var s ikeSuite
	e, ok1 := p.Get(TransformENCR)
	pr, ok2 := p.Get(TransformPRF)
	g, ok3 := p.Get(TransformDH)
	if !ok1 || !ok2 || !ok3 {
		return s, fmt.Errorf("IKE proposal %s lacks an encryption, PRF or DH transform", &p)
	}
	var err error
	if s.encr, err = encrFor(e); err != nil {
		return s, err
	}
	if s.prf, err = prfFor(pr.ID); err != nil {
		return s, err
	}
	in, ok := p.Get(TransformINTEG)
	if s.encr.aead == ok {
		return s, fmt.Errorf("IKE proposal %s: integrity must be present exactly when the cipher is not AEAD", &p)
	}
	if ok {
		if s.integ, err = integFor(in.ID); err != nil {
			return s, err
		}
	}
	s.group = DHGroup(g.ID)
	if !s.group.Supported() {
		return s, fmt.Errorf("key exchange %s is not supported", s.group)
	}
	return s, nil
}

// ikeKeys are the keys of an IKE SA (RFC 7296 §2.14).
type ikeKeys struct {
	d, ai, ar, ei, er, pi, pr []byte
}

// deriveIKEKeys computes SKEYSEED = prf(Ni | Nr, g^ir) and from it
// {SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr} =
// prf+(SKEYSEED, Ni | Nr | SPIi | SPIr).
func deriveIKEKeys(s ikeSuite, ni, nr, gir []byte, spii, spir uint64) (ikeKeys, error) {
	seed := s.prf.sum(append(append([]byte(nil), ni...), nr...), gir)
	return expandIKEKeys(s, seed, ni, nr, spii, spir)
}

// deriveRekeyedIKEKeys computes the keys of an IKE SA that replaces one
// with SK_d oldD: SKEYSEED = prf(SK_d (old), g^ir (new) | Ni | Nr)
// (RFC 7296 §2.18).
func deriveRekeyedIKEKeys(s ikeSuite, oldPRF prfAlg, oldD, ni, nr, gir []byte, spii, spir uint64) (ikeKeys, error) {
	seed := oldPRF.sum(oldD, gir, ni, nr)
	return expandIKEKeys(s, seed, ni, nr, spii, spir)
}

func expandIKEKeys(s ikeSuite, seed, ni, nr []byte, spii, spir uint64) (ikeKeys, error) {
	in := append(append([]byte(nil), ni...), nr...)
	in = binary.BigEndian.AppendUint64(in, spii)
	in = binary.BigEndian.AppendUint64(in, spir)
	p, i, e := s.prf.size, s.integ.keyLen, s.encr.keyLen
	km, err := s.prf.plus(seed, in, 3*p+2*i+2*e)
	if err != nil {
		return ikeKeys{}, err
	}
	var k ikeKeys
	for _, f := range []struct {
		dst *[]byte
		n   int
	}{{&k.d, p}, {&k.ai, i}, {&k.ar, i}, {&k.ei, e}, {&k.er, e}, {&k.pi, p}, {&k.pr, p}} {
		*f.dst, km = km[:f.n:f.n], km[f.n:]
	}
	return k, nil
}

// childSuite is the algorithms of a chosen ESP proposal, as espgw's suite.
type childSuite struct {
	suite          sa.Suite
	encLen, intLen int
	esn            bool
}

// childSuiteFrom maps an ESP proposal to an espgw suite; a proposal espgw
// cannot carry is an error.
func childSuiteFrom(p Proposal) (childSuite, error) {
	var c childSuite
	e, ok := p.Get(TransformENCR)
	if !ok {
		return c, fmt.Errorf("ESP proposal %s has no encryption transform", &p)
	}
	enc, err := encrFor(e)
	if err != nil {
		return c, err
	}
	c.encLen = enc.keyLen
	switch {
	case enc.id == EncrChaCha20Poly1305:
		c.suite.Cipher = sa.CipherChaCha20Poly1305
	case enc.aead:
		c.suite.Cipher = sa.CipherAESGCM16
	default:
		c.suite.Cipher = sa.CipherAESCBC
	}
	if in, ok := p.Get(TransformINTEG); ok {
		auth, ok := map[uint16]sa.Auth{IntegHMACSHA1_96: sa.AuthHMACSHA1_96, IntegHMACSHA256_128: sa.AuthHMACSHA256_128,
			IntegHMACSHA384_192: sa.AuthHMACSHA384_192, IntegHMACSHA512_256: sa.AuthHMACSHA512_256}[in.ID]
		if !ok {
			return c, fmt.Errorf("ESP integrity %s is not one espgw has", in)
		}
		c.suite.Auth = auth
		c.intLen = c.suite.AuthKeyLen()
	}
	if err := c.suite.Validate(); err != nil {
		return c, fmt.Errorf("ESP proposal %s: %w", &p, err)
	}
	if es, ok := p.Get(TransformESN); ok {
		c.esn = es.ID == ESNYes
	}
	return c, nil
}

// ESPSuites are the suites an ESP proposal can negotiate: each of its
// encryption transforms with each of its integrity transforms, or alone
// where none fits it (an AEAD), each suite once (key lengths aside).
// Those espgw cannot carry are left out.
func ESPSuites(p Proposal) []sa.Suite {
	var encrs, integs []Transform
	for _, t := range p.Transforms {
		switch t.Type {
		case TransformENCR:
			encrs = append(encrs, t)
		case TransformINTEG:
			integs = append(integs, t)
		}
	}
	var out []sa.Suite
	add := func(ts ...Transform) bool {
		c, err := childSuiteFrom(Proposal{Protocol: p.Protocol, Transforms: ts})
		if err == nil && !slices.Contains(out, c.suite) {
			out = append(out, c.suite)
		}
		return err == nil
	}
	for _, e := range encrs {
		paired := false
		for _, i := range integs {
			paired = add(e, i) || paired
		}
		if !paired {
			add(e)
		}
	}
	return out
}

// childKeys are one CHILD_SA's keys, each direction's encryption (salt
// included) and integrity key.
type childKeys struct {
	encI, authI, encR, authR sa.Key // I: initiator to responder
}

// deriveChildKeys computes KEYMAT = prf+(SK_d, [g^ir (new) |] Ni | Nr)
// (RFC 7296 §2.17), taken in the order initiator-to-responder encryption
// and integrity, then responder-to-initiator.
func deriveChildKeys(p prfAlg, skd []byte, c childSuite, gir, ni, nr []byte) (childKeys, error) {
	seed := append(append(append([]byte(nil), gir...), ni...), nr...)
	km, err := p.plus(skd, seed, 2*(c.encLen+c.intLen))
	if err != nil {
		return childKeys{}, err
	}
	var k childKeys
	for _, f := range []struct {
		dst *sa.Key
		n   int
	}{{&k.encI, c.encLen}, {&k.authI, c.intLen}, {&k.encR, c.encLen}, {&k.authR, c.intLen}} {
		*f.dst, km = sa.Key(km[:f.n:f.n]), km[f.n:]
	}
	return k, nil
}
