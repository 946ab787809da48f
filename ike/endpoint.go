package ike

import (
	"context"
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"sync"
	"time"

	"github.com/espgw/espgw/sa"
)

// Config is one endpoint's IKE configuration: its identity and the
// peer's, the PSK, the proposals and the traffic selectors.
type Config struct {
	// LocalID is this side's identity: with a certificate, one it holds
	// (its subject DN when zero). A zero RemoteID accepts any identity
	// (with certificates, any the peer's certificate holds).
	LocalID, RemoteID Identity
	// PSK is the pre-shared key: this side authenticates with it when it
	// has no certificate, and the peer may. Never printed.
	PSK sa.Key
	// Certs is this side's certificate chain, its own first, and Key that
	// certificate's private key: with them this side authenticates with a
	// signature (RFC 7427 Digital Signature when the peer announces
	// SIGNATURE_HASH_ALGORITHMS, else RSA or ECDSA of RFC 7296 and 4754).
	Certs []*x509.Certificate
	Key   crypto.Signer
	// RSAPSS makes RSA Digital Signatures RSASSA-PSS rather than PKCS #1
	// v1.5.
	RSAPSS bool
	// ClassicSignatures announces no SIGNATURE_HASH_ALGORITHMS, so that
	// both sides sign with the methods of RFC 7296 and 4754 (strongSwan's
	// signature_authentication = no).
	ClassicSignatures bool
	// CAs are the trust anchors a peer's certificate must chain to (through
	// the intermediates it sends): with them the peer may authenticate
	// with a signature.
	CAs []*x509.Certificate
	// PeerSignature refuses a peer's shared-key AUTH even with a PSK
	// configured: the peer must authenticate with its certificate
	// (swanctl's remote auth = pubkey beside local auth = psk).
	PeerSignature bool
	// IKE and ESP are the proposals offered and accepted, in order of
	// preference (ParseProposals).
	IKE, ESP []Proposal
	// LocalTS and RemoteTS are the traffic this side protects and the
	// peer's; a responder narrows what the initiator proposes to them.
	LocalTS, RemoteTS []Selector
	// ChildName names the CHILD_SA of LocalTS, RemoteTS and ESP, the one
	// IKE_AUTH sets up; MoreChildren are the connection's others, which
	// an initiator sets up with NewChild and a responder gives to a
	// request whose selectors fit them (Child.Name tells which).
	ChildName    string
	MoreChildren []ChildConfig
	// Transport asks for, and accepts, the first CHILD_SA in transport
	// mode (USE_TRANSPORT_MODE, RFC 7296 §1.3.1); ChildConfig.Transport
	// does for the others.
	Transport bool
	// RetransmitTimeout is the wait for the first response, doubled after
	// each retransmission, for Tries sends in all (1s and 5 by default).
	RetransmitTimeout time.Duration
	Tries             int
	// CookieThreshold is the number of half-open IKE SAs above which a
	// responder asks for a COOKIE (RFC 7296 §2.6); MaxHalfOpen is the
	// number past which it answers no IKE_SA_INIT at all (16 and 1024 by
	// default). HalfOpenTimeout forgets a half-open SA (30s by default).
	CookieThreshold, MaxHalfOpen int
	HalfOpenTimeout              time.Duration
	// NoFragmentation leaves IKE fragmentation (RFC 7383) unannounced;
	// otherwise, when both sides announce it, an encrypted message larger
	// than FragmentSize bytes (DefaultFragmentSize when zero; its IKE
	// header to its end) goes in fragments.
	NoFragmentation bool
	FragmentSize    int
	// OnChild is called, with the endpoint's lock held, when a CHILD_SA
	// this endpoint responded to is established.
	OnChild func(*IKESA, *Child)
	// OnRekey is called, without the lock, when a CHILD_SA this endpoint
	// rekeys has its successor and before the old one is deleted with
	// the peer: where the gateway puts the new one in force.
	OnRekey func(s *IKESA, old, new *Child)
	// OnRedundant is called, without the lock, when this side is about
	// to delete its own new CHILD_SA of a simultaneous rekey (RFC 7296
	// §2.8.1) that the peer's survives: where the gateway moves outbound
	// traffic off it (to survivor) before it goes.
	OnRedundant func(s *IKESA, redundant, survivor *Child)
	// OnPeerMoved is called, with the endpoint's lock held, when an
	// authenticated request of a peer behind a NAT came from another
	// address or port: the SA's CHILD_SAs, their Remote and RemotePort
	// changed to it.
	OnPeerMoved func(s *IKESA, children []*Child)
	// Expect, when set, is told the SPI this side chose for a CHILD_SA
	// before it asks the peer for it (IKE_AUTH, CREATE_CHILD_SA): the
	// peer may send with it as soon as it has answered (RFC 7296 §2.8),
	// before this side has read the answer. Called without the lock.
	Expect func(spi uint32)
	Rand   io.Reader
	Log    *slog.Logger
}

// ChildConfig is one CHILD_SA of a connection: its name, the traffic
// of each side and the ESP proposals.
type ChildConfig struct {
	Name              string
	LocalTS, RemoteTS []Selector
	ESP               []Proposal
	// Transport asks for transport mode, and grants it to a peer that
	// asks, when the selectors are the two IKE addresses and no NAT is
	// between them; otherwise the CHILD_SA is in tunnel mode. An
	// initiator that asked deletes a CHILD_SA given in tunnel mode.
	Transport bool
}

// childConfigs are the connection's CHILD_SAs, the first one's first.
func (c *Config) childConfigs() []ChildConfig {
	return append([]ChildConfig{{Name: c.ChildName, LocalTS: c.LocalTS, RemoteTS: c.RemoteTS, ESP: c.ESP, Transport: c.Transport}}, c.MoreChildren...)
}

// childConfig is the connection's CHILD_SA of the name.
func (c *Config) childConfig(name string) (ChildConfig, bool) {
	for _, cc := range c.childConfigs() {
		if cc.Name == name {
			return cc, true
		}
	}
	return ChildConfig{}, false
}

func (c *Config) check() error {
	var errs []error
	if c.LocalID.Kind == 0 && len(c.Certs) > 0 {
		c.LocalID = DN(c.Certs[0].RawSubject)
	}
	switch {
	case c.Key != nil || len(c.Certs) > 0:
		if err := checkCredentials(c.Certs, c.Key, c.LocalID); err != nil {
			errs = append(errs, fmt.Errorf("certificate: %w", err))
		}
	case len(c.PSK) == 0:
		errs = append(errs, errors.New("no pre-shared key and no certificate"))
	}
	if len(c.PSK) == 0 && len(c.CAs) == 0 {
		errs = append(errs, errors.New("no pre-shared key and no CA: nothing to authenticate the peer with"))
	}
	if c.LocalID.Kind == 0 || len(c.LocalID.Data) == 0 {
		errs = append(errs, errors.New("no local identity"))
	}
	if len(c.IKE) == 0 || len(c.ESP) == 0 {
		errs = append(errs, errors.New("no IKE or no ESP proposals"))
	}
	for _, p := range c.IKE {
		if _, err := ikeSuiteFrom(firstOfEach(p)); err != nil {
			errs = append(errs, fmt.Errorf("IKE proposal %s: %w", &p, err))
		}
	}
	for _, p := range c.ESP {
		if _, err := childSuiteFrom(firstOfEach(p)); err != nil {
			errs = append(errs, fmt.Errorf("ESP proposal %s: %w", &p, err))
		}
	}
	if c.FragmentSize != 0 && (c.FragmentSize < minFragmentSize || c.FragmentSize > MaxMessageLen) {
		errs = append(errs, fmt.Errorf("fragment size %d, want %d to %d", c.FragmentSize, minFragmentSize, MaxMessageLen))
	}
	if len(c.LocalTS) == 0 || len(c.RemoteTS) == 0 {
		errs = append(errs, errors.New("no local or no remote traffic selectors"))
	}
	names := map[string]bool{c.ChildName: true}
	for _, cc := range c.MoreChildren {
		if names[cc.Name] {
			errs = append(errs, fmt.Errorf("CHILD_SA %q named twice", cc.Name))
		}
		names[cc.Name] = true
		if len(cc.LocalTS) == 0 || len(cc.RemoteTS) == 0 || len(cc.ESP) == 0 {
			errs = append(errs, fmt.Errorf("CHILD_SA %q: no traffic selectors or no ESP proposals", cc.Name))
		}
		for _, p := range cc.ESP {
			if _, err := childSuiteFrom(firstOfEach(p)); err != nil {
				errs = append(errs, fmt.Errorf("CHILD_SA %q: ESP proposal %s: %w", cc.Name, &p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// firstOfEach is a proposal cut to its first transform of each type.
func firstOfEach(p Proposal) Proposal {
	q := p
	q.Transforms = nil
	seen := map[TransformType]bool{}
	for _, t := range p.Transforms {
		if !seen[t.Type] {
			seen[t.Type] = true
			q.Transforms = append(q.Transforms, t)
		}
	}
	return q
}

// expect tells Config.Expect of an SPI this side is about to ask for.
func (e *Endpoint) expect(spi uint32) {
	if e.cfg.Expect != nil {
		e.cfg.Expect(spi)
	}
}

// Endpoint is one side's IKE: the IKE SAs it initiated or responded to,
// on one local address. Handle takes every datagram received.
type Endpoint struct {
	cfg    Config
	local  netip.Addr
	send   func(Datagram) error
	cookie [32]byte

	mu       sync.Mutex
	sas      map[uint64]*IKESA      // by this side's SPI
	halfOpen map[halfOpenKey]*IKESA // responder SAs before IKE_AUTH
	waiting  map[uint64]chan Datagram
	closed   []closedSA // oldest first

	statsMu sync.Mutex
	stats   map[string]uint64
}

type halfOpenKey struct {
	remote netip.AddrPort
	spii   uint64
}

// NewEndpoint makes an endpoint on local that sends with send (a
// Transport's Send).
func NewEndpoint(cfg Config, local netip.Addr, send func(Datagram) error) (*Endpoint, error) {
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("IKE config: %w", err)
	}
	cfg.Rand = cmpOr(cfg.Rand, io.Reader(rand.Reader))
	cfg.Log = cmpOr(cfg.Log, slog.New(slog.DiscardHandler))
	cfg.RetransmitTimeout = cmpOr(cfg.RetransmitTimeout, time.Second)
	cfg.Tries = cmpOr(cfg.Tries, 5)
	cfg.CookieThreshold = cmpOr(cfg.CookieThreshold, 16)
	cfg.MaxHalfOpen = cmpOr(cfg.MaxHalfOpen, 1024)
	cfg.HalfOpenTimeout = cmpOr(cfg.HalfOpenTimeout, 30*time.Second)
	cfg.FragmentSize = cmpOr(cfg.FragmentSize, DefaultFragmentSize)
	e := &Endpoint{cfg: cfg, local: local, send: send, sas: map[uint64]*IKESA{}, halfOpen: map[halfOpenKey]*IKESA{},
		waiting: map[uint64]chan Datagram{}, stats: map[string]uint64{}}
	if _, err := io.ReadFull(cfg.Rand, e.cookie[:]); err != nil {
		return nil, fmt.Errorf("IKE cookie secret: %w", err)
	}
	return e, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// signatures reports whether this side signs or checks signatures, and
// so announces SIGNATURE_HASH_ALGORITHMS.
func (e *Endpoint) signatures() bool {
	return !e.cfg.ClassicSignatures && (e.cfg.Key != nil || len(e.cfg.CAs) > 0)
}

// count records a datagram that did not lead anywhere, or an event, by
// reason.
func (e *Endpoint) count(reason string) {
	e.statsMu.Lock()
	e.stats[reason]++
	e.statsMu.Unlock()
}

// Counts are the endpoint's counters by reason: messages dropped and why,
// retransmissions, cookies asked for.
func (e *Endpoint) Counts() map[string]uint64 {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return maps.Clone(e.stats)
}

// SAs are the endpoint's IKE SAs, half-open ones included.
func (e *Endpoint) SAs() []*IKESA {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*IKESA
	for _, s := range e.sas {
		out = append(out, s)
	}
	return out
}

// Handle takes one received datagram: a response goes to the exchange
// waiting for it, a request is answered. Nothing it is given makes it
// panic; what it cannot use is counted by reason.
func (e *Endpoint) Handle(d Datagram) {
	h, err := ParseHeader(d.Data)
	if err != nil {
		e.count("malformed header")
		return
	}
	ours := h.SPIi
	if h.FromInitiator() {
		ours = h.SPIr
	}
	if h.IsResponse() {
		e.mu.Lock()
		ch := e.waiting[ours]
		e.mu.Unlock()
		if ch == nil {
			e.count("response nobody waits for")
			return
		}
		select {
		case ch <- d:
		default:
			e.count("response while another is pending")
		}
		return
	}
	if h.Exchange == IKESAInit {
		e.respondInit(d, h)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.sas[ours]
	if s == nil && e.answerClosed(d, h, ours, time.Now()) {
		return
	}
	if s == nil || s.initiator != !h.FromInitiator() {
		e.count("request for an unknown IKE SA")
		return
	}
	s.handleRequest(d, h)
}

// exchange sends a request (one datagram or its fragments) and hands each
// datagram of its response to take, retransmitting with a doubling
// timeout until take says the response is complete. A response take
// refuses (forged or damaged) has the request sent again at once, at most
// Tries times. spi is this side's SPI, where the response is routed.
//
// When the SA is forgotten meanwhile (gone closed: the peer deleted it),
// an exchange that deletes the SA itself (deleting) ends at once with
// errSAGone. Any other goes on: a response the peer sent before may still
// be on its way, or be sent again from what the peer keeps of the SA
// (closedSA). It ends with errSAGone when the peer answers INVALID_IKE_SPI,
// or after Tries.
func (e *Endpoint) exchange(ctx context.Context, spi uint64, gone <-chan struct{}, deleting bool, reqs []Datagram, msgID uint32, take func(Datagram) (bool, error)) error {
	ch := make(chan Datagram, MaxFragments)
	e.mu.Lock()
	e.waiting[spi] = ch
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.waiting, spi)
		e.mu.Unlock()
	}()
	wait := e.cfg.RetransmitTimeout
	bad := 0
	var goneErr error
	for try := 1; ; {
		// A retransmission goes where the SA's peer is now (it may have
		// moved behind its NAT meanwhile).
		e.mu.Lock()
		if s := e.sas[spi]; s != nil && s.state == StateEstablished {
			for i := range reqs {
				reqs[i].Local, reqs[i].Remote = s.local, s.remote
			}
		}
		e.mu.Unlock()
		for _, r := range reqs {
			if err := e.send(r); err != nil {
				return err
			}
		}
		timer := time.NewTimer(wait)
		timedOut, resend := false, false
		for !timedOut && !resend {
			select {
			case d := <-ch:
				h, _ := ParseHeader(d.Data)
				if h.MessageID != msgID {
					e.count("response with another message ID")
					continue
				}
				if goneErr != nil && isInvalidSPI(d) {
					timer.Stop()
					return goneErr
				}
				done, err := take(d)
				switch {
				case err != nil:
					e.count("response dropped: " + reasonOf(err))
					if bad++; bad == e.cfg.Tries {
						timer.Stop()
						return fmt.Errorf("%d responses that do not verify: %w", bad, err)
					}
					resend = true
				case done:
					timer.Stop()
					return nil
				}
			case <-timer.C:
				timedOut = true
			case <-ctx.Done():
				timer.Stop()
				return ctx.Err()
			case <-gone:
				if deleting {
					timer.Stop()
					return errSAGone
				}
				gone, goneErr = nil, errSAGone
			}
		}
		timer.Stop()
		if timedOut {
			if try == e.cfg.Tries && goneErr != nil {
				return goneErr
			}
			if try == e.cfg.Tries {
				return fmt.Errorf("no response to message %d from %s after %d tries", msgID, reqs[0].Remote, try)
			}
			try++
			wait *= 2
			e.count("retransmitted request")
		}
	}
}

// errSAGone ends an exchange whose IKE SA was deleted meanwhile: by the
// peer's Delete, or after the peer rekeyed it.
var errSAGone = errors.New("the IKE SA was deleted meanwhile")

// randomSPI is a non-zero IKE SPI not in use.
func (e *Endpoint) randomSPI() (uint64, error) {
	var b [8]byte
	for {
		if _, err := io.ReadFull(e.cfg.Rand, b[:]); err != nil {
			return 0, fmt.Errorf("IKE SPI: %w", err)
		}
		if spi := binary.BigEndian.Uint64(b[:]); spi != 0 && e.sas[spi] == nil {
			return spi, nil
		}
	}
}

// spiAndNonce is what an exchange this side starts needs first: a new
// IKE SPI not in use (an ESP SPI when esp is set) and a nonce.
func (e *Endpoint) spiAndNonce(esp bool) (uint64, []byte, error) {
	e.mu.Lock()
	var spi uint64
	var err error
	if esp {
		var s uint32
		s, err = e.childSPI()
		spi = uint64(s)
	} else {
		spi, err = e.randomSPI()
	}
	e.mu.Unlock()
	if err != nil {
		return 0, nil, err
	}
	n, err := e.nonce()
	return spi, n, err
}

// childSPI is a random ESP SPI of 256 or more.
func (e *Endpoint) childSPI() (uint32, error) {
	var b [4]byte
	for {
		if _, err := io.ReadFull(e.cfg.Rand, b[:]); err != nil {
			return 0, fmt.Errorf("ESP SPI: %w", err)
		}
		if spi := binary.BigEndian.Uint32(b[:]); spi >= 256 {
			return spi, nil
		}
	}
}

func (e *Endpoint) nonce() ([]byte, error) {
	n := make([]byte, 32)
	if _, err := io.ReadFull(e.cfg.Rand, n); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	return n, nil
}

// cookieFor is the responder's COOKIE for an initiator (RFC 7296 §2.6):
// HMAC-SHA256(secret, Ni | IPi | SPIi).
func (e *Endpoint) cookieFor(ni []byte, remote netip.Addr, spii uint64) []byte {
	m := hmac.New(sha256.New, e.cookie[:])
	m.Write(ni)
	m.Write(remote.AsSlice())
	binary.Write(m, binary.BigEndian, spii)
	return m.Sum(nil)
}

// expireHalfOpen forgets half-open SAs older than the timeout.
func (e *Endpoint) expireHalfOpen(now time.Time) {
	for k, s := range e.halfOpen {
		if now.Sub(s.created) > e.cfg.HalfOpenTimeout {
			delete(e.halfOpen, k)
			delete(e.sas, s.spir)
			e.count("half-open IKE SA expired")
		}
	}
}
