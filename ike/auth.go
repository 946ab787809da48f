package ike

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// keyPad is the constant of the shared-key AUTH (RFC 7296 §2.15).
const keyPad = "Key Pad for IKEv2"

// idBody is the ID payload's body, RestOfInitIDPayload in RFC 7296 §2.15.
func idBody(id Identity) []byte { return append([]byte{byte(id.Kind), 0, 0, 0}, id.Data...) }

// pskAuth is the AUTH data of a shared key: prf(prf(PSK, "Key Pad for
// IKEv2"), <signed octets>).
func pskAuth(p prfAlg, psk, octets []byte) []byte {
	return p.sum(p.sum(psk, []byte(keyPad)), octets)
}

// ownAuth is this side's CERT payloads (none with a PSK) and AUTH
// payload over its IKE_SA_INIT message.
func (s *IKESA) ownAuth() ([]Payload, *Auth, error) {
	cfg := &s.e.cfg
	message, peerNonce, skp := s.initResp, s.ni, s.keys.pr
	if s.initiator {
		message, peerNonce, skp = s.initReq, s.nr, s.keys.pi
	}
	octets := signedOctets(s.suite.prf, message, peerNonce, skp, cfg.LocalID)
	if cfg.Key == nil {
		return nil, &Auth{Method: AuthSharedKey, Data: pskAuth(s.suite.prf, cfg.PSK, octets)}, nil
	}
	var certs []Payload
	for _, c := range cfg.Certs {
		certs = append(certs, &Cert{Encoding: CertX509, Data: c.Raw})
	}
	a, err := signAuth(cfg.Key, octets, s.peerHashes, cfg.RSAPSS)
	if err != nil {
		return nil, nil, fmt.Errorf("AUTH: %w", err)
	}
	return certs, a, nil
}

// authError is a peer's AUTH that does not verify: reason is its
// counter.
type authError struct {
	reason string
	err    error
}

func (e *authError) Error() string { return e.reason + ": " + e.err.Error() }
func (e *authError) Unwrap() error { return e.err }

// checkPeerAuth verifies the peer's AUTH payload for identity id over
// its IKE_SA_INIT message: with the PSK, or with the public key of its
// certificate, which must chain to a CA and hold id.
func (s *IKESA) checkPeerAuth(m *Message, id Identity, a *Auth) error {
	cfg := &s.e.cfg
	message, peerNonce, skp := s.initReq, s.nr, s.keys.pi
	if s.initiator {
		message, peerNonce, skp = s.initResp, s.ni, s.keys.pr
	}
	octets := signedOctets(s.suite.prf, message, peerNonce, skp, id)
	if a.Method == AuthSharedKey {
		if cfg.PeerSignature {
			return &authError{"authentication method not configured", errors.New("a shared-key AUTH, and the peer must authenticate with a certificate")}
		}
		if len(cfg.PSK) == 0 {
			return &authError{"authentication method not configured", errors.New("a shared-key AUTH, and this side has no PSK")}
		}
		if !hmac.Equal(a.Data, pskAuth(s.suite.prf, cfg.PSK, octets)) {
			return &authError{"authentication failed", errors.New("the shared-key AUTH does not verify")}
		}
		return nil
	}
	if len(cfg.CAs) == 0 {
		return &authError{"authentication method not configured", fmt.Errorf("AUTH method %d, and this side has no CA to check a certificate with", a.Method)}
	}
	cert, err := verifyPeerCerts(m, cfg.CAs, time.Now())
	if err != nil {
		return &authError{"certificate not trusted", err}
	}
	if err := idInCert(id, cert); err != nil {
		return &authError{"identity not in the certificate", err}
	}
	if err := verifyAuth(cert.PublicKey, a, octets); err != nil {
		return &authError{"authentication failed", err}
	}
	s.peerCert = cert
	return nil
}

// natHash is a NAT_DETECTION_*_IP notification's data:
// SHA1(SPIi | SPIr | IP | port) (RFC 7296 §2.23).
func natHash(spii, spir uint64, ip []byte, port uint16) []byte {
	h := sha1.New()
	var b [16]byte
	for i := range 8 {
		b[i] = byte(spii >> (56 - 8*i))
		b[8+i] = byte(spir >> (56 - 8*i))
	}
	h.Write(b[:])
	h.Write(ip)
	h.Write([]byte{byte(port >> 8), byte(port)})
	return h.Sum(nil)
}

// PeerCertificate is the certificate the peer authenticated with, or nil
// (a PSK).
func (s *IKESA) PeerCertificate() *x509.Certificate {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.peerCert
}

// PeerID is the identity the peer authenticated as.
func (s *IKESA) PeerID() Identity {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.peerID
}
