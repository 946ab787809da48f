package esp

import (
	"encoding/binary"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/offload"
)

// SPIOf returns the SPI of an ESP packet, for the SAD lookup that picks the
// SA to open it with; ok is false when the packet is too short to have one.
func SPIOf(esp []byte) (spi uint32, ok bool) {
	if len(esp) < HeaderLen {
		return 0, false
	}
	return binary.BigEndian.Uint32(esp), true
}

// PrepareOpen checks the ESP packet in p against the SA before any crypto:
// length, lifetime and the replay window (RFC 4303 §3.4.3: the cheap check
// first), infers the ESN high bits, and fills p.Op for the engine.
func (s *SA) PrepareOpen(p *Packet) Reason {
	p.SA, p.Drop = s, OK
	pkt := p.Buf[p.Off : p.Off+p.Len]
	ivLen, icvLen := int(s.layout.ivLen), int(s.layout.icvLen)
	if len(pkt) < HeaderLen+ivLen+2+icvLen || (len(pkt)-HeaderLen-ivLen-icvLen)%int(s.block) != 0 {
		return s.reject(p, Truncated)
	}
	if s.expired.Load() {
		return s.reject(p, Expired)
	}
	lo := binary.BigEndian.Uint32(pkt[4:8])
	seq := uint64(lo)
	s.mu.Lock()
	if s.layout.esn {
		seq |= uint64(InferSeqHi(s.window.Last(), s.window.size, lo)) << 32
	}
	verdict := OK
	if s.flags&antiReplay != 0 {
		verdict = s.window.Check(seq)
	}
	s.mu.Unlock()
	if verdict != OK {
		return s.reject(p, verdict)
	}
	p.Seq = seq
	if !s.layout.Op(&p.Op, s.sess, offload.Open, pkt, uint32(seq>>32)) {
		return s.reject(p, Truncated) // p.Op is left from the packet's last use: it must not go to the engine
	}
	return OK
}

// FinishOpen takes the engine's verdict, updates the replay window (only now
// that the ICV verified), checks padding and next header, and leaves the
// inner packet in p.
func (s *SA) FinishOpen(p *Packet) Reason {
	if p.Drop != OK {
		return p.Drop
	}
	switch p.Op.Status {
	case offload.OK:
	case offload.BadICV:
		return s.reject(p, BadICV)
	case offload.BadLength:
		return s.reject(p, Truncated)
	default:
		return s.reject(p, EngineFailure)
	}
	s.mu.Lock()
	verdict := s.window.Accept(p.Seq)
	s.mu.Unlock()
	if verdict != OK && s.flags&antiReplay != 0 {
		return s.reject(p, verdict)
	}

	pkt := p.Buf[p.Off : p.Off+p.Len]
	ivLen := int(s.layout.ivLen)
	ct := pkt[HeaderLen+ivLen : len(pkt)-int(s.layout.icvLen)]
	padLen := int(ct[len(ct)-2])
	nh := ct[len(ct)-1]
	if padLen+2 > len(ct) {
		return s.reject(p, BadPadding)
	}
	pad := ct[len(ct)-2-padLen : len(ct)-2]
	for i, v := range pad {
		if v != byte(i+1) {
			return s.reject(p, BadPadding)
		}
	}
	if nh == protoNone {
		return s.reject(p, Dummy)
	}
	payload := ct[:len(ct)-2-padLen]
	payloadOff := p.Off + HeaderLen + ivLen

	if s.flags&transportMode != 0 {
		if r := s.restoreTransport(p, payloadOff, len(payload), nh); r != OK {
			return s.reject(p, r)
		}
	} else {
		n, r := innerLen(payload, nh)
		if r != OK {
			return s.reject(p, r)
		}
		p.Off, p.Len = payloadOff, n // n < len(payload) drops TFC padding
	}
	if s.flags&hasSelectors != 0 && !s.selects(p.Data()) {
		return s.reject(p, Policy)
	}
	pk := s.Counters.OpenedPackets.Add(1)
	by := s.Counters.OpenedBytes.Add(uint64(p.Len))
	s.account(pk, by)
	return OK
}

// innerLen checks that a tunnel-mode payload is the IP packet nh says and
// returns its length from its own header.
func innerLen(payload []byte, nh uint8) (int, Reason) {
	switch {
	case nh == protoIPv4 && len(payload) >= 20 && payload[0]>>4 == 4:
		n := int(binary.BigEndian.Uint16(payload[2:4]))
		if n < 20 || n > len(payload) {
			return 0, BadNextHeader
		}
		return n, OK
	case nh == protoIPv6 && len(payload) >= 40 && payload[0]>>4 == 6:
		n := 40 + int(binary.BigEndian.Uint16(payload[4:6]))
		if n > len(payload) {
			return 0, BadNextHeader
		}
		return n, OK
	}
	return 0, BadNextHeader
}

// restoreTransport moves the IP header found before the ESP packet up to
// the decrypted payload and gives it back its protocol and length.
func (s *SA) restoreTransport(p *Packet, payloadOff, n int, nh uint8) Reason {
	hdrStart := p.Off - p.HdrLen
	if p.HdrLen == 0 || hdrStart < 0 {
		return BadNextHeader
	}
	hl, proto, at, ok := ipHeaderLen(p.Buf[hdrStart:p.Off])
	if !ok || hl != p.HdrLen || proto != protoESP {
		return BadNextHeader
	}
	dst := payloadOff - hl
	copy(p.Buf[dst:payloadOff], p.Buf[hdrStart:p.Off])
	hdr := p.Buf[dst:payloadOff]
	hdr[at] = nh
	fixIPLength(hdr, hl+n)
	if s.flags&fixChecksums != 0 {
		fixL4(hdr, p.Buf[payloadOff:payloadOff+n], nh)
	}
	p.Off, p.Len = dst, hl+n
	return OK
}

// fixL4 recomputes the TCP, UDP or ICMPv6 checksum of an opened
// transport-mode payload seg that came in UDP, behind header hdr: through
// a NAT its sender computed it over addresses the NAT changed (RFC 3948
// §3.1.2). The ICV has vouched for the payload, so the checksum is made
// anew over the addresses the packet has here, as Linux, which skips the
// check instead, lets it in. A fragment's checksum covers its whole
// datagram and is left as it is; so is an IPv4 UDP checksum of zero (none).
func fixL4(hdr, seg []byte, proto uint8) {
	if f, ok := header.Fragment(hdr); !ok || f.Is {
		return
	}
	src, dst := header.AddrBytes(hdr)
	switch {
	case proto == 6 && len(seg) >= 20:
		header.L4(seg, src, dst, proto, 16)
	case proto == 17 && len(seg) >= 8 && (len(src) == 16 || binary.BigEndian.Uint16(seg[6:]) != 0):
		header.L4(seg, src, dst, proto, 6)
	case proto == 58 && len(src) == 16 && len(seg) >= 4:
		header.L4(seg, src, dst, proto, 2)
	}
}

// selects reports whether an opened inner packet falls under the SA's
// selectors.
func (s *SA) selects(pkt []byte) bool {
	src, dst, proto, sport, dport, ok := s.frags.FlowOf(pkt)
	if !ok {
		return false
	}
	for _, sel := range s.Config.Selectors {
		if sel.Matches(src, dst, proto, sport, dport) {
			return true
		}
	}
	return false
}
