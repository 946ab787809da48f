package ike

import (
	"fmt"
	"strings"
)

// strongSwan's keywords (its proposal_keywords) for the transforms this
// package has.
var (
	encrWords = map[string]Transform{
		"aes": {TransformENCR, EncrAESCBC, 128, false}, "aes128": {TransformENCR, EncrAESCBC, 128, false},
		"aes192": {TransformENCR, EncrAESCBC, 192, false}, "aes256": {TransformENCR, EncrAESCBC, 256, false},
		"aes128gcm16": {TransformENCR, EncrAESGCM16, 128, false}, "aes128gcm128": {TransformENCR, EncrAESGCM16, 128, false},
		"aes192gcm16": {TransformENCR, EncrAESGCM16, 192, false}, "aes192gcm128": {TransformENCR, EncrAESGCM16, 192, false},
		"aes256gcm16": {TransformENCR, EncrAESGCM16, 256, false}, "aes256gcm128": {TransformENCR, EncrAESGCM16, 256, false},
		"aes128gcm": {TransformENCR, EncrAESGCM16, 128, false}, "aes256gcm": {TransformENCR, EncrAESGCM16, 256, false},
		"chacha20poly1305": {TransformENCR, EncrChaCha20Poly1305, 0, false},
	}
	integWords = map[string]uint16{
		"sha1": IntegHMACSHA1_96, "sha": IntegHMACSHA1_96, "sha256": IntegHMACSHA256_128, "sha2_256": IntegHMACSHA256_128,
		"sha384": IntegHMACSHA384_192, "sha2_384": IntegHMACSHA384_192, "sha512": IntegHMACSHA512_256, "sha2_512": IntegHMACSHA512_256,
	}
	prfWords = map[string]uint16{
		"prfsha1": PRFHMACSHA1, "prfsha256": PRFHMACSHA256, "prfsha384": PRFHMACSHA384, "prfsha512": PRFHMACSHA512,
	}
	// integToPRF is the PRF strongSwan proposes for an integrity
	// algorithm when the proposal names no PRF.
	integToPRF = map[uint16]uint16{IntegHMACSHA1_96: PRFHMACSHA1, IntegHMACSHA256_128: PRFHMACSHA256,
		IntegHMACSHA384_192: PRFHMACSHA384, IntegHMACSHA512_256: PRFHMACSHA512}
	dhWords = map[string]DHGroup{
		"modp2048": MODP2048, "modp3072": MODP3072, "ecp256": ECP256, "ecp384": ECP384,
		"x25519": Curve25519, "curve25519": Curve25519,
	}
)

// ParseProposals reads proposals written as in strongSwan's swanctl.conf
// (`proposals`, `esp_proposals`): proposals separated by commas, each a
// dash-separated list of algorithm keywords, such as
// "aes128-sha256-x25519" or "aes256gcm16,aes128-sha1". Only algorithms
// this package implements (and, for ESP, that espgw's data plane carries)
// are accepted; any other keyword is an error naming it.
//
// For IKE, a proposal that names no PRF gets the PRFs of its integrity
// algorithms, or PRF-HMAC-SHA2-256 with an AEAD cipher. ESP proposals
// offer no extended sequence numbers unless they say "esn"; their DH
// groups are kept for CREATE_CHILD_SA's PFS and left out of IKE_AUTH.
func ParseProposals(proto ProtocolID, s string) ([]Proposal, error) {
	if proto != ProtoIKE && proto != ProtoESP {
		return nil, fmt.Errorf("proposals for %s: want IKE or ESP", proto)
	}
	var out []Proposal
	for i, one := range strings.Split(s, ",") {
		p, err := parseProposal1(proto, strings.TrimSpace(one))
		if err != nil {
			return nil, fmt.Errorf("%s proposal %d %q: %w", proto, i+1, one, err)
		}
		p.Num = uint8(i + 1)
		out = append(out, p)
	}
	if len(out) > maxProposals {
		return nil, fmt.Errorf("%d %s proposals, more than %d", len(out), proto, maxProposals)
	}
	return out, nil
}

func parseProposal1(proto ProtocolID, s string) (Proposal, error) {
	p := Proposal{Protocol: proto}
	if s == "" {
		return p, fmt.Errorf("empty proposal")
	}
	add := func(t Transform) {
		for _, have := range p.Transforms {
			if have == t {
				return
			}
		}
		p.Transforms = append(p.Transforms, t)
	}
	var aead, plain, esn, noesn bool
	for _, w := range strings.Split(strings.ToLower(s), "-") {
		if t, ok := encrWords[w]; ok {
			add(t)
			isAEAD := t.ID == EncrAESGCM16 || t.ID == EncrChaCha20Poly1305
			aead = aead || isAEAD
			plain = plain || !isAEAD
			continue
		}
		if id, ok := integWords[w]; ok {
			add(Transform{Type: TransformINTEG, ID: id})
			continue
		}
		if id, ok := prfWords[w]; ok {
			if proto == ProtoESP {
				return p, fmt.Errorf("%q is a PRF, which ESP proposals do not have", w)
			}
			add(Transform{Type: TransformPRF, ID: id})
			continue
		}
		if g, ok := dhWords[w]; ok {
			add(Transform{Type: TransformDH, ID: uint16(g)})
			continue
		}
		switch {
		case w == "esn" && proto == ProtoESP:
			esn = true
			continue
		case w == "noesn" && proto == ProtoESP:
			noesn = true
			continue
		}
		return p, fmt.Errorf("unknown or unsupported algorithm %q (this package has aes128/192/256, aes128/192/256gcm16, chacha20poly1305, sha1, sha256, sha384, sha512, prfsha*, modp2048, modp3072, ecp256, ecp384, x25519, esn, noesn)", w)
	}
	_, hasEncr := p.Get(TransformENCR)
	_, hasInteg := p.Get(TransformINTEG)
	_, hasPRF := p.Get(TransformPRF)
	_, hasDH := p.Get(TransformDH)
	switch {
	case !hasEncr:
		return p, fmt.Errorf("no encryption algorithm")
	case aead && plain:
		return p, fmt.Errorf("AEAD and non-AEAD ciphers in one proposal")
	case aead && hasInteg:
		return p, fmt.Errorf("an integrity algorithm with an AEAD cipher")
	case !aead && !hasInteg:
		return p, fmt.Errorf("no integrity algorithm")
	case proto == ProtoIKE && !hasDH:
		return p, fmt.Errorf("no key exchange method")
	}
	if proto == ProtoIKE && !hasPRF {
		if aead {
			add(Transform{Type: TransformPRF, ID: PRFHMACSHA256})
		}
		for _, t := range p.Transforms {
			if t.Type == TransformINTEG {
				add(Transform{Type: TransformPRF, ID: integToPRF[t.ID]})
			}
		}
	}
	if proto == ProtoESP {
		if noesn || !esn {
			add(Transform{Type: TransformESN, ID: ESNNo})
		}
		if esn {
			add(Transform{Type: TransformESN, ID: ESNYes})
		}
	}
	return p, nil
}

// withoutDH is the proposals with their DH transforms removed, as an
// IKE_AUTH exchange offers ESP proposals.
func withoutDH(ps []Proposal) []Proposal {
	out := make([]Proposal, len(ps))
	for i, p := range ps {
		q := p
		q.Transforms = nil
		for _, t := range p.Transforms {
			if t.Type != TransformDH {
				q.Transforms = append(q.Transforms, t)
			}
		}
		out[i] = q
	}
	return out
}
