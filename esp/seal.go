package esp

import (
	"encoding/binary"
	"math"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/sa"
)

// Next header values.
const (
	protoIPv4 = 4
	protoIPv6 = 41
	protoESP  = 50
	protoNone = 59 // dummy packet, RFC 4303 §2.6
	protoUDP  = 17
)

// PrepareSeal frames the inner packet in p as ESP in place — sequence number,
// header, IV, payload, TFC padding, padding, trailer, ICV room — and fills
// p.Op for the engine. On a drop it counts and returns the reason.
func (s *SA) PrepareSeal(p *Packet) Reason {
	p.SA, p.Drop = s, OK
	if s.expired.Load() {
		return s.reject(p, Expired)
	}
	inner := p.Buf[p.Off : p.Off+p.Len]
	var hdrLen, protoAt int
	var nh uint8
	if s.flags&transportMode != 0 {
		var ok bool
		hdrLen, nh, protoAt, ok = ipHeaderLen(inner)
		if !ok {
			return s.reject(p, BadNextHeader)
		}
	} else {
		switch {
		case len(inner) > 0 && inner[0]>>4 == 4:
			nh = protoIPv4
		case len(inner) > 0 && inner[0]>>4 == 6:
			nh = protoIPv6
		default:
			return s.reject(p, BadNextHeader)
		}
	}
	payload := len(inner) - hdrLen
	tfc := 0
	if pad := int(s.tfcPad); pad > payload {
		tfc = pad - payload
	}
	block, ivLen := int(s.block), int(s.layout.ivLen)
	padLen := (block - (payload+tfc+2)%block) % block
	espStart := p.Off + hdrLen - HeaderLen - ivLen
	start := p.Off - HeaderLen - ivLen
	end := p.Off + p.Len + tfc + padLen + 2 + int(s.layout.icvLen)
	if start < 0 || end > len(p.Buf) {
		return s.reject(p, NoRoom)
	}
	if s.flags&hardCount != 0 {
		h := s.Config.Hard
		n, b := s.framed.Add(1), s.framedBytes.Add(uint64(p.Len))
		if (h.Packets > 0 && n > h.Packets) || (h.Bytes > 0 && b > h.Bytes) {
			s.expired.Store(true)
			return s.reject(p, Expired)
		}
	}
	seq := s.seq.Add(1)
	if (!s.layout.esn && seq > math.MaxUint32) || seq == 0 {
		s.seq.Store(math.MaxUint64) // stay exhausted, never wrap
		return s.reject(p, SeqExhausted)
	}
	p.Seq = seq
	if s.flags&reserves != 0 && !s.reserveFor(seq) {
		return s.reject(p, SeqUnpersisted)
	}

	if hdrLen > 0 {
		hdr := p.Buf[start : start+hdrLen]
		copy(hdr, inner[:hdrLen])
		hdr[protoAt] = protoESP
		fixIPLength(hdr, end-start)
	}
	b := p.Buf
	s.writeIV(b[espStart:], seq)
	binary.BigEndian.PutUint32(b[espStart:], s.spi)
	binary.BigEndian.PutUint32(b[espStart+4:], uint32(seq))
	t := p.Off + p.Len
	clear(b[t : t+tfc])
	t += tfc
	for i := range padLen {
		b[t+i] = byte(i + 1)
	}
	t += padLen
	b[t], b[t+1] = byte(padLen), nh

	p.Off, p.Len = start, end-start
	if !s.layout.Op(&p.Op, s.sess, offload.Seal, b[espStart:end], uint32(seq>>32)) {
		return s.reject(p, NoRoom) // p.Op is left from the packet's last use: it must not go to the engine
	}
	return OK
}

// writeIV writes the packet's IV after the ESP header at esp. CBC IVs are
// the sequence number and the SA's number encrypted under a random key
// (IVKey): unpredictable (RFC 3602 §3) and never repeated. CTR and the AEADs need only uniqueness
// (RFC 3686 §3, RFC 4106 §3, RFC 7634 §2, RFC 4543 §3.1, RFC 4309 §3.1):
// the sequence number XOR a random per-SA salt.
// The encryption runs in the packet's own header bytes so the IV costs no
// allocation; the header is written afterwards.
func (s *SA) writeIV(esp []byte, seq uint64) {
	ivLen := int(s.layout.ivLen)
	if s.flags&fixedIV != 0 {
		s.ivFunc(seq, esp[HeaderLen:HeaderLen+ivLen])
		return
	}
	switch s.layout.cipher {
	case sa.CipherAESCBC, sa.Cipher3DES:
		blk := esp[:16] // SPI, seq and IV for 3DES; the IV for AES
		if ivLen == 16 {
			blk = esp[HeaderLen : HeaderLen+16]
		}
		binary.BigEndian.PutUint64(blk[:8], seq)
		binary.BigEndian.PutUint64(blk[8:], s.ivSalt)
		s.ivBlock.Encrypt(blk, blk)
		if ivLen == 8 {
			copy(esp[HeaderLen:HeaderLen+8], blk[:8])
		}
	default: // the counter modes and AEADs (8-byte IVs)
		if ivLen == 8 {
			binary.BigEndian.PutUint64(esp[HeaderLen:], seq^s.ivSalt)
		}
	}
}

// FinishSeal judges the engine's verdict on a sealed packet and counts it.
func (s *SA) FinishSeal(p *Packet) Reason {
	if p.Drop != OK {
		return p.Drop
	}
	if p.Op.Status != offload.OK {
		return s.reject(p, EngineFailure)
	}
	pk := s.Counters.SealedPackets.Add(1)
	by := s.Counters.SealedBytes.Add(uint64(p.Len))
	s.account(pk, by)
	return OK
}

func (s *SA) reject(p *Packet, r Reason) Reason {
	p.Drop = r
	return s.Drop(r)
}
