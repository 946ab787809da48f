package ike

import (
	"encoding/binary"
	"fmt"
)

// HeaderLen is the length of the IKE header.
const HeaderLen = 28

// MaxMessageLen bounds the messages the decoder reads: one UDP datagram.
const MaxMessageLen = 65535

// maxPayloads bounds the payloads of one message (or of one SK payload).
const maxPayloads = 64

// MaxFragments bounds the fragments of one message (RFC 7383).
const MaxFragments = 32

// Version is the IKE version this package speaks: major 2, minor 0.
const Version = 0x20

// Header is the fixed IKE header (RFC 7296 §3.1).
type Header struct {
	SPIi, SPIr uint64
	Next       PayloadType
	Version    uint8
	Exchange   ExchangeType
	Flags      Flags
	MessageID  uint32
	Length     uint32
}

// IsResponse reports whether the R flag is set.
func (h *Header) IsResponse() bool { return h.Flags&FlagResponse != 0 }

// FromInitiator reports whether the I flag is set: the original initiator of
// the IKE SA sent the message.
func (h *Header) FromInitiator() bool { return h.Flags&FlagInitiator != 0 }

// ParseHeader reads the IKE header at the start of b and checks its length
// field against len(b).
func ParseHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderLen {
		return h, fmt.Errorf("IKE header: %d bytes, want at least %d", len(b), HeaderLen)
	}
	h.SPIi = binary.BigEndian.Uint64(b[0:])
	h.SPIr = binary.BigEndian.Uint64(b[8:])
	h.Next = PayloadType(b[16])
	h.Version = b[17]
	h.Exchange = ExchangeType(b[18])
	h.Flags = Flags(b[19])
	h.MessageID = binary.BigEndian.Uint32(b[20:])
	h.Length = binary.BigEndian.Uint32(b[24:])
	if h.Version>>4 != 2 {
		return h, fmt.Errorf("IKE header: version %d.%d, want 2", h.Version>>4, h.Version&0xf)
	}
	if int(h.Length) != len(b) {
		return h, fmt.Errorf("IKE header: length field %d, datagram %d bytes", h.Length, len(b))
	}
	return h, nil
}

func (h *Header) put(b []byte) {
	binary.BigEndian.PutUint64(b[0:], h.SPIi)
	binary.BigEndian.PutUint64(b[8:], h.SPIr)
	b[16] = byte(h.Next)
	b[17] = h.Version
	b[18] = byte(h.Exchange)
	b[19] = byte(h.Flags)
	binary.BigEndian.PutUint32(b[20:], h.MessageID)
	binary.BigEndian.PutUint32(b[24:], h.Length)
}

// Message is an IKE message: its header and its payloads in order. When
// the message arrived with an SK payload, Payloads holds what was inside
// it after Open, and Encrypted is true.
type Message struct {
	Header
	Payloads  []Payload
	Encrypted bool
	// sk is the undecrypted SK payload until Open.
	sk *skPayload
	// fragments are the fragments a reassembled message arrived in.
	fragments [][]byte
}

// Find returns the first payload of type t, or nil.
func (m *Message) Find(t PayloadType) Payload {
	for _, p := range m.Payloads {
		if p.Type() == t {
			return p
		}
	}
	return nil
}

// Notify returns the first notification of type n, or nil.
func (m *Message) Notify(n NotifyType) *Notify {
	for _, p := range m.Payloads {
		if no, ok := p.(*Notify); ok && no.Kind == n {
			return no
		}
	}
	return nil
}

// ErrorNotify returns the first error notification, or nil.
func (m *Message) ErrorNotify() *Notify {
	for _, p := range m.Payloads {
		if no, ok := p.(*Notify); ok && no.Kind.IsError() {
			return no
		}
	}
	return nil
}

// Parse decodes a whole message. An SK payload, which must be the last,
// is kept sealed for Open.
func Parse(b []byte) (*Message, error) {
	if len(b) > MaxMessageLen {
		return nil, fmt.Errorf("IKE message of %d bytes, more than %d", len(b), MaxMessageLen)
	}
	h, err := ParseHeader(b)
	if err != nil {
		return nil, err
	}
	m := &Message{Header: h}
	m.Payloads, m.sk, err = parseChain(h.Next, b[HeaderLen:], HeaderLen, true)
	if err != nil {
		return nil, fmt.Errorf("%s message %d: %w", h.Exchange, h.MessageID, err)
	}
	return m, nil
}

// parseChain decodes the payloads of a chain that starts with next. base
// is the offset of b in the message, for errors.
func parseChain(next PayloadType, b []byte, base int, outer bool) ([]Payload, *skPayload, error) {
	var ps []Payload
	off := 0
	for next != PayloadNone {
		if len(ps) == maxPayloads {
			return nil, nil, fmt.Errorf("more than %d payloads", maxPayloads)
		}
		if len(b)-off < 4 {
			return nil, nil, fmt.Errorf("payload %s at offset %d: %d bytes left, want a 4-byte header", next, base+off, len(b)-off)
		}
		following := PayloadType(b[off])
		critical := b[off+1]&0x80 != 0
		n := int(binary.BigEndian.Uint16(b[off+2:]))
		if n < 4 || n > len(b)-off {
			return nil, nil, fmt.Errorf("payload %s at offset %d: length %d, %d bytes left", next, base+off, n, len(b)-off)
		}
		body := b[off+4 : off+n]
		if next == PayloadSK {
			if !outer {
				return nil, nil, fmt.Errorf("SK payload at offset %d inside an SK payload", base+off)
			}
			if off+n != len(b) {
				return nil, nil, fmt.Errorf("SK payload at offset %d is not the last (%d bytes follow)", base+off, len(b)-off-n)
			}
			return ps, &skPayload{inner: following, offset: base + off, hdrLen: 4, body: body}, nil
		}
		if next == PayloadSKF {
			if !outer || off+n != len(b) {
				return nil, nil, fmt.Errorf("SKF payload at offset %d inside an SK payload or not the last", base+off)
			}
			if len(body) < 4 {
				return nil, nil, fmt.Errorf("SKF payload at offset %d: %d bytes, want at least 4", base+off, len(body))
			}
			num, total := int(binary.BigEndian.Uint16(body)), int(binary.BigEndian.Uint16(body[2:]))
			if num < 1 || num > total || total > MaxFragments {
				return nil, nil, fmt.Errorf("SKF payload at offset %d: fragment %d of %d (at most %d)", base+off, num, total, MaxFragments)
			}
			if num > 1 && following != PayloadNone {
				return nil, nil, fmt.Errorf("SKF payload at offset %d: fragment %d names a next payload (%s)", base+off, num, following)
			}
			return ps, &skPayload{inner: following, offset: base + off, hdrLen: 8, body: body[4:], fragNum: num, fragTotal: total}, nil
		}
		p, err := decodePayload(next, critical, body)
		if err != nil {
			return nil, nil, fmt.Errorf("payload %s at offset %d: %w", next, base+off, err)
		}
		ps = append(ps, p)
		off += n
		next = following
	}
	if off != len(b) {
		return nil, nil, fmt.Errorf("%d bytes after the last payload", len(b)-off)
	}
	return ps, nil, nil
}

// appendChain encodes payloads as a chain and returns the type of the
// first one.
func appendChain(b []byte, ps []Payload) ([]byte, PayloadType, error) {
	first := PayloadNone
	if len(ps) > 0 {
		first = ps[0].Type()
	}
	for i, p := range ps {
		next := PayloadNone
		if i+1 < len(ps) {
			next = ps[i+1].Type()
		}
		start := len(b)
		var crit byte
		if u, ok := p.(*Unknown); ok && u.Critical {
			crit = 0x80
		}
		b = append(b, byte(next), crit, 0, 0)
		b = p.appendBody(b)
		n := len(b) - start
		if n > 0xffff {
			return nil, 0, fmt.Errorf("payload %s of %d bytes, more than 65535", p.Type(), n)
		}
		binary.BigEndian.PutUint16(b[start+2:], uint16(n))
	}
	return b, first, nil
}

// Marshal encodes a message whose payloads travel in the clear.
func (m *Message) Marshal() ([]byte, error) {
	b := make([]byte, HeaderLen, 512)
	b, first, err := appendChain(b, m.Payloads)
	if err != nil {
		return nil, err
	}
	h := m.Header
	h.Next, h.Version, h.Length = first, Version, uint32(len(b))
	h.put(b)
	return b, nil
}
