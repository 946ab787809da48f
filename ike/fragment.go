package ike

import (
	"bytes"
	"errors"
	"fmt"
	"time"
)

// DefaultFragmentSize is the largest IKE message (its IKE header to its
// end, without the UDP and IP headers) sent whole once fragmentation is
// negotiated, when Config.FragmentSize is zero: what fits a 1280-byte IPv6
// packet with its UDP header and the non-ESP marker.
const DefaultFragmentSize = 1280 - 40 - 8 - 4

// minFragmentSize is the smallest Config.FragmentSize: a fragment must
// carry a useful part of the chain.
const minFragmentSize = 256

// reassemblyTimeout forgets a message whose fragments stopped coming.
const reassemblyTimeout = 30 * time.Second

// reassembly collects the fragments of one message (RFC 7383 §2.6): each
// one verified and decrypted on arrival, the message parsed when the last
// is in. It holds at most MaxFragments parts of at most MaxMessageLen
// bytes in all.
type reassembly struct {
	msgID   uint32
	exch    ExchangeType
	total   int
	first   PayloadType
	parts   [][]byte // decrypted, by fragment number - 1
	raw     [][]byte // the fragments as received
	have    int
	size    int
	started time.Time
}

// sealOut encodes a message of this SA: whole, or, when fragmentation was
// negotiated and the message is larger than the fragment size, as
// fragments (never IKE_SA_INIT, which is not encrypted).
func (s *IKESA) sealOut(h Header, payloads []Payload) ([][]byte, error) {
	e := s.e
	chain, first, err := appendChain(nil, payloads)
	if err != nil {
		return nil, err
	}
	whole, err := s.send.sealChain(h, first, chain, e.cfg.Rand)
	if err != nil || !s.fragments || len(whole) <= e.cfg.FragmentSize {
		return [][]byte{whole}, err
	}
	per := s.send.maxFragmentPlain(e.cfg.FragmentSize)
	n := (len(chain) + per - 1) / per
	if n > MaxFragments {
		return nil, fmt.Errorf("%s message of %d bytes needs %d fragments of %d bytes, more than %d", h.Exchange, len(whole), n, e.cfg.FragmentSize, MaxFragments)
	}
	out := make([][]byte, 0, n)
	for i := range n {
		part := chain[i*per : min(len(chain), (i+1)*per)]
		next := PayloadNone
		if i == 0 {
			next = first
		}
		f, err := s.send.sealFragment(h, next, part, i+1, n, e.cfg.Rand)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	e.count("message sent in fragments")
	return out, nil
}

// open verifies and decrypts a parsed message of this SA (raw is the
// datagram): a whole message, or a fragment, which is kept in r until its
// message is complete. It returns the message, or nil while fragments are
// missing. Called with the endpoint's lock held.
func (s *IKESA) open(m *Message, raw []byte, r **reassembly) (*Message, error) {
	if m.sk == nil || m.sk.fragNum == 0 {
		return m, s.recv.open(m, raw)
	}
	if !s.fragments {
		return nil, errors.New("an SKF payload (a fragment), and fragmentation was not negotiated")
	}
	part, err := s.recv.decrypt(m, raw)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	cur := *r
	if cur != nil && (cur.msgID != m.MessageID || cur.exch != m.Exchange || now.Sub(cur.started) > reassemblyTimeout) {
		s.e.count("incomplete fragmented message dropped")
		cur = nil
	}
	if cur == nil {
		cur = &reassembly{msgID: m.MessageID, exch: m.Exchange, total: m.sk.fragTotal, parts: make([][]byte, m.sk.fragTotal),
			raw: make([][]byte, m.sk.fragTotal), started: now}
		*r = cur
	}
	num := m.sk.fragNum
	switch {
	case m.sk.fragTotal != cur.total:
		return nil, fmt.Errorf("fragment %d of %d, where the message's earlier fragments said %d", num, m.sk.fragTotal, cur.total)
	case cur.parts[num-1] != nil:
		if !bytes.Equal(cur.raw[num-1], raw) {
			return nil, fmt.Errorf("fragment %d of %d again, other than the first time", num, cur.total)
		}
		s.e.count("retransmitted fragment")
		return nil, nil
	case cur.size+len(part) > MaxMessageLen:
		*r = nil
		return nil, fmt.Errorf("fragments of more than %d bytes in all", MaxMessageLen)
	}
	cur.parts[num-1], cur.raw[num-1] = part, raw
	cur.have++
	cur.size += len(part)
	if num == 1 {
		cur.first = m.sk.inner
	}
	if cur.have < cur.total {
		return nil, nil
	}
	*r = nil
	chain := bytes.Join(cur.parts, nil)
	ps, _, err := parseChain(cur.first, chain, 0, false)
	if err != nil {
		return nil, fmt.Errorf("inside the reassembled message of %d fragments: %w", cur.total, err)
	}
	s.e.count("fragmented message reassembled")
	whole := &Message{Header: m.Header, Payloads: ps, Encrypted: true}
	whole.fragments = cur.raw
	return whole, nil
}
