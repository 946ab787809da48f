package ike

import (
	"bytes"
	"context"
	"time"
)

// The counts (Endpoint.Counts) of settled rekey collisions.
const (
	EventChildCollision = "simultaneous CHILD_SA rekey"
	EventIKECollision   = "simultaneous IKE SA rekey"
)

// rekeyRecord is one exchange that rekeyed a CHILD_SA or an IKE SA: its
// two nonces and what it made.
type rekeyRecord struct {
	ni, nr []byte
	child  *Child
	sa     *IKESA
}

// lowerExchange reports whether exchange a holds the lowest of the four
// nonces of a and b, compared octet by octet, a nonce that ends first
// being the lower (RFC 7296 §2.8.1): a's SA is then the redundant one.
func lowerExchange(a, b *rekeyRecord) bool {
	low := func(r *rekeyRecord) []byte {
		if bytes.Compare(r.ni, r.nr) <= 0 {
			return r.ni
		}
		return r.nr
	}
	return bytes.Compare(low(a), low(b)) < 0
}

// childCollision settles a CHILD_SA that both sides rekeyed at once, once
// this side knows both exchanges (called with the endpoint's lock held):
// the exchange with the lowest nonce made the redundant CHILD_SA, which
// its initiator deletes; the initiator of the other deletes the old one.
// It returns the CHILD_SA that survives and whether this side deletes the
// redundant one (its own) rather than the old one.
func (s *IKESA) childCollision(old *Child) (survivor *Child, deleteOurs bool) {
	old.settled = true
	s.e.count(EventChildCollision)
	if lowerExchange(old.ours, old.theirs) {
		return old.theirs.child, true
	}
	return old.ours.child, false
}

// ikeCollision settles an IKE SA that both sides rekeyed at once (with
// the endpoint's lock held): the new IKE SA of the exchange with the
// lowest nonce is redundant and deleted by its initiator, which leaves
// the old one to the other; the CHILD_SAs move to the survivor.
func (s *IKESA) ikeCollision() (survivor, redundant *IKESA, deleteOurs bool) {
	s.settled = true
	s.e.count(EventIKECollision)
	survivor, redundant = s.ourRekey.sa, s.peerRekey.sa
	if deleteOurs = lowerExchange(s.ourRekey, s.peerRekey); deleteOurs {
		survivor, redundant = redundant, survivor
	}
	survivor.children = append(survivor.children, redundant.children...)
	redundant.children = nil
	return survivor, redundant, deleteOurs
}

// deleteLater deletes a redundant IKE SA or CHILD_SA that a collision
// found only when the peer's request came after this side's exchange was
// over, outside the request that found it (a redundant CHILD_SA is
// told to Config.OnRedundant first, with the survivor).
func (s *IKESA) deleteLater(c, survivor *Child, sa *IKESA) {
	go func() {
		if c != nil && s.e.cfg.OnRedundant != nil {
			s.e.cfg.OnRedundant(s, c, survivor)
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.e.cfg.RetransmitTimeout*time.Duration(1<<s.e.cfg.Tries))
		defer cancel()
		var err error
		if c != nil {
			err = s.DeleteChild(ctx, c)
		} else {
			err = sa.Delete(ctx)
		}
		if err != nil {
			s.e.count("redundant SA not deleted")
			s.e.cfg.Log.Warn("deleting the redundant SA of a rekey collision", "err", err)
		}
	}()
}
