package ike

import (
	"bytes"
	"time"
)

// closedSA is what is kept of a deleted IKE SA for as long as the peer
// may retransmit on it: the peer's last request on it and this side's
// response, sent again when the request comes again (RFC 7296 §2.1). That
// request may be the peer's Delete of the SA, or the peer's rekey of it
// that crossed this side's and lost: the peer needs the response to
// delete its redundant IKE SA. Any other request on the SA is answered
// with an unprotected INVALID_IKE_SPI (§2.21.4), which tells a peer that
// has seen the SA deleted that its request will never be answered.
type closedSA struct {
	spii, spir uint64
	initiator  bool   // this side initiated the SA
	req        []byte // the peer's last request's first datagram
	resp       [][]byte
	until      time.Time
}

// maxClosed bounds the closed SAs kept; the oldest go first.
const maxClosed = 1024

// closedFor is how long a closed SA is kept: as long as the peer
// retransmits, if it times as this side does.
func (e *Endpoint) closedFor() time.Duration {
	return e.cfg.RetransmitTimeout * (1<<min(e.cfg.Tries, 10) - 1)
}

// rememberClosed keeps what is needed of s as it goes. The endpoint's
// lock is held.
func (e *Endpoint) rememberClosed(s *IKESA, now time.Time) {
	for len(e.closed) > 0 && (len(e.closed) >= maxClosed || now.After(e.closed[0].until)) {
		e.closed = e.closed[1:]
	}
	if s.state != StateEstablished && s.state != StateDeleted {
		return // never authenticated: nothing the peer can be owed
	}
	c := closedSA{spii: s.spii, spir: s.spir, initiator: s.initiator, until: now.Add(e.closedFor())}
	if len(s.lastReq) > 0 && s.lastResp != nil {
		c.req, c.resp = s.lastReq[0], s.lastResp
	}
	e.closed = append(e.closed, c)
}

// answerClosed answers a request on an IKE SA that is gone, and reports
// whether the SA was one of the closed ones. The endpoint's lock is held.
func (e *Endpoint) answerClosed(d Datagram, h Header, spi uint64, now time.Time) bool {
	for i := len(e.closed) - 1; i >= 0; i-- {
		c := &e.closed[i]
		if c.ourSPI() != spi || c.initiator == h.FromInitiator() || now.After(c.until) {
			continue
		}
		if c.req != nil && bytes.Equal(c.req, d.Data) {
			e.count("retransmitted request of a deleted IKE SA answered again")
			for _, r := range c.resp {
				e.send(Datagram{Data: r, Local: d.Local, Remote: d.Remote})
			}
			return true
		}
		e.count("request on a deleted IKE SA answered INVALID_IKE_SPI")
		var f Flags = FlagResponse
		if c.initiator {
			f |= FlagInitiator
		}
		resp := &Message{Header: Header{SPIi: c.spii, SPIr: c.spir, Exchange: h.Exchange, Flags: f, MessageID: h.MessageID},
			Payloads: []Payload{&Notify{Kind: NotifyInvalidIKESPI}}}
		if b, err := resp.Marshal(); err == nil {
			e.send(Datagram{Data: b, Local: d.Local, Remote: d.Remote})
		}
		return true
	}
	return false
}

func (c *closedSA) ourSPI() uint64 {
	if c.initiator {
		return c.spii
	}
	return c.spir
}

// isInvalidSPI reports whether d is an unprotected INVALID_IKE_SPI
// response: what a peer sends for an SA it no longer has. Being
// unprotected, it is believed only for an SA known to be gone.
func isInvalidSPI(d Datagram) bool {
	m, err := Parse(d.Data)
	if err != nil || m.sk != nil {
		return false
	}
	n := m.ErrorNotify()
	return n != nil && n.Kind == NotifyInvalidIKESPI
}
