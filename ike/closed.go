package ike

import (
	"bytes"
	"time"
)

// closedSA is what is kept of a deleted IKE SA: the peer's last request
// on it and this side's response, so that a peer whose response was lost
// gets it again when it retransmits the request (RFC 7296 §2.1) instead
// of retransmitting into nothing until it gives up. That request may be
// the peer's Delete of the SA, or the peer's rekey of it that crossed
// this side's and lost: the peer needs the response to delete its
// redundant IKE SA.
type closedSA struct {
	spi       uint64
	initiator bool
	req       []byte // the request's first datagram
	resp      [][]byte
	until     time.Time
}

// maxClosed bounds the closed SAs kept; the oldest go first.
const maxClosed = 1024

// closedFor is how long a closed SA's response is kept: as long as the
// peer retransmits, if it times as this side does.
func (e *Endpoint) closedFor() time.Duration {
	return e.cfg.RetransmitTimeout * (1<<min(e.cfg.Tries, 10) - 1)
}

// rememberClosed keeps s's last request and response as s goes. The
// endpoint's lock is held.
func (e *Endpoint) rememberClosed(s *IKESA, now time.Time) {
	for len(e.closed) > 0 && (len(e.closed) >= maxClosed || now.After(e.closed[0].until)) {
		e.closed = e.closed[1:]
	}
	if len(s.lastReq) == 0 || s.lastResp == nil {
		return
	}
	e.closed = append(e.closed, closedSA{spi: s.ourSPI(), initiator: s.initiator, req: s.lastReq[0], resp: s.lastResp, until: now.Add(e.closedFor())})
}

// answerClosed answers a request for an IKE SA that is gone when it is
// the request that deleted it, sent again, and reports whether it was.
// The endpoint's lock is held.
func (e *Endpoint) answerClosed(d Datagram, spi uint64, fromInitiator bool, now time.Time) bool {
	for i := len(e.closed) - 1; i >= 0; i-- {
		c := &e.closed[i]
		if c.spi != spi || c.initiator == fromInitiator || now.After(c.until) || !bytes.Equal(c.req, d.Data) {
			continue
		}
		e.count("retransmitted request of a deleted IKE SA answered again")
		for _, r := range c.resp {
			e.send(Datagram{Data: r, Local: d.Local, Remote: d.Remote})
		}
		return true
	}
	return false
}
