// Package pmtu tells inner senders the tunnel's MTU with ICMP errors.
//
// It tells inner senders the tunnel's MTU: it decides whether an inner
// packet fits the tunnel, and builds the ICMP error that goes back to the
// sender of one that does not — IPv4 "fragmentation needed" (type 3 code 4,
// RFC 792/1191) and ICMPv6 "packet too big" (type 2, RFC 4443) — ready to be
// written into the TUN device. The builders are pure functions over byte
// slices: they write into the caller's buffer and allocate nothing.
package pmtu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/espgw/espgw/internal/header"
)

const (
	// MaxLen4 is the longest IPv4 ICMP error built: RFC 1812 §4.3.2.3 asks
	// for as much of the original as fits in 576 bytes.
	MaxLen4 = 576
	// MaxLen6 is the longest ICMPv6 error built: the IPv6 minimum MTU
	// (RFC 4443 §2.4 (c)).
	MaxLen6 = 1280

	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	icmpHeaderLen = 8
	hopLimit      = 64
	// The quote must reach at least the original's transport ports (RFC 792).
	minQuote6 = ipv6HeaderLen + 8

	protoICMP   = 1
	protoICMPv6 = 58
)

// ErrSuppressed is wrapped by the builders' errors when the rules forbid an
// ICMP error about this packet (it is itself an ICMP error, a non-first
// fragment, from an unspecified/multicast/broadcast/loopback source). The
// gateway should count the packet as dropped (too big) without a report.
var ErrSuppressed = errors.New("no ICMP error may be sent about this packet")

// FragmentationNeeded writes into dst an IPv4 packet carrying ICMP
// "destination unreachable: fragmentation needed and DF set" from from to
// the sender of orig, announcing next-hop MTU mtu, and returns its length.
// It quotes as much of orig as fits in MaxLen4 bytes (and in dst, which
// needs room for at least the headers and orig's first 28 bytes).
func FragmentationNeeded(dst, orig []byte, from netip.Addr, mtu int) (int, error) {
	if !from.Is4() {
		return 0, fmt.Errorf("build ICMP fragmentation needed: source %s is not IPv4", from)
	}
	if mtu < 68 || mtu > 0xffff {
		return 0, fmt.Errorf("build ICMP fragmentation needed: next-hop MTU %d outside 68..65535", mtu)
	}
	hl, err := checkIPv4(orig)
	if err != nil {
		return 0, fmt.Errorf("build ICMP fragmentation needed: %w", err)
	}
	quote := min(len(orig), MaxLen4-ipv4HeaderLen-icmpHeaderLen, len(dst)-ipv4HeaderLen-icmpHeaderLen)
	if quote < min(len(orig), hl+8) {
		return 0, fmt.Errorf("build ICMP fragmentation needed: buffer of %d bytes too small (need %d)", len(dst), ipv4HeaderLen+icmpHeaderLen+min(len(orig), hl+8))
	}
	total := ipv4HeaderLen + icmpHeaderLen + quote

	// Precedence internetwork control, as the kernel sends its ICMP errors.
	ip := header.IPv4{TOS: 0xc0, TotalLen: uint16(total), TTL: hopLimit, Protocol: protoICMP, Src: from, Dst: netip.AddrFrom4([4]byte(orig[12:16]))}
	ip.Marshal(dst)

	icmp := dst[ipv4HeaderLen:total]
	h := header.ICMP{Type: header.ICMPUnreachable, Code: header.ICMPFragNeeded, Rest: uint32(mtu)}
	h.Marshal(icmp)
	copy(icmp[icmpHeaderLen:], orig[:quote])
	header.ICMPChecksum(icmp)
	return total, nil
}

// checkIPv4 validates orig's IPv4 header and the rules that forbid an ICMP
// error about it; it returns the header length.
func checkIPv4(orig []byte) (int, error) {
	if len(orig) < ipv4HeaderLen || orig[0]>>4 != 4 {
		return 0, fmt.Errorf("original packet (%d bytes) is not IPv4", len(orig))
	}
	hl, ok := header.IPv4HeaderLen(orig)
	if !ok {
		return 0, fmt.Errorf("original IPv4 header length %d invalid for a %d-byte packet", int(orig[0]&0x0f)*4, len(orig))
	}
	src := netip.AddrFrom4([4]byte(orig[12:16]))
	if src.IsUnspecified() || src.IsMulticast() || src.IsLoopback() || src == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return 0, fmt.Errorf("original source %s: %w", src, ErrSuppressed)
	}
	if off := binary.BigEndian.Uint16(orig[6:]) & 0x1fff; off != 0 {
		return 0, fmt.Errorf("original is a non-first fragment (offset %d): %w", off*8, ErrSuppressed)
	}
	if orig[9] == protoICMP && len(orig) > hl {
		switch orig[hl] {
		case 3, 4, 5, 11, 12: // unreachable, source quench, redirect, time exceeded, parameter problem
			return 0, fmt.Errorf("original is an ICMP error (type %d): %w", orig[hl], ErrSuppressed)
		}
	}
	return hl, nil
}

// PacketTooBig writes into dst an IPv6 packet carrying ICMPv6 "packet too
// big" from from to the sender of orig, announcing MTU mtu (at least 1280),
// and returns its length. It quotes as much of orig as fits in MaxLen6
// bytes (and in dst, which needs room for at least the headers and orig's
// first 48 bytes).
func PacketTooBig(dst, orig []byte, from netip.Addr, mtu int) (int, error) {
	if !from.Is6() || from.Is4In6() {
		return 0, fmt.Errorf("build ICMPv6 packet too big: source %s is not IPv6", from)
	}
	if mtu < 1280 {
		// IPv6 links carry at least 1280 bytes (RFC 8200 §5); below that
		// the tunnel must fragment its outer packets instead.
		return 0, fmt.Errorf("build ICMPv6 packet too big: MTU %d below IPv6's minimum of 1280", mtu)
	}
	if err := checkIPv6(orig); err != nil {
		return 0, fmt.Errorf("build ICMPv6 packet too big: %w", err)
	}
	quote := min(len(orig), MaxLen6-ipv6HeaderLen-icmpHeaderLen, len(dst)-ipv6HeaderLen-icmpHeaderLen)
	if quote < min(len(orig), minQuote6) {
		return 0, fmt.Errorf("build ICMPv6 packet too big: buffer of %d bytes too small (need %d)", len(dst), ipv6HeaderLen+icmpHeaderLen+min(len(orig), minQuote6))
	}
	total := ipv6HeaderLen + icmpHeaderLen + quote
	payload := icmpHeaderLen + quote

	ip := header.IPv6{PayloadLen: uint16(payload), NextHeader: protoICMPv6, HopLimit: hopLimit, Src: from, Dst: netip.AddrFrom16([16]byte(orig[8:24]))}
	ip.Marshal(dst)

	icmp := dst[ipv6HeaderLen:total]
	h := header.ICMP{Type: header.ICMPv6PacketTooBig, Rest: uint32(mtu)}
	h.Marshal(icmp)
	copy(icmp[icmpHeaderLen:], orig[:quote])
	header.L4(icmp, dst[8:24], dst[24:40], protoICMPv6, header.OffsetICMPv6)
	return total, nil
}

// checkIPv6 validates orig's IPv6 header and the rules of RFC 4443 §2.4 (e)
// that forbid an ICMPv6 error about it.
func checkIPv6(orig []byte) error {
	if len(orig) < ipv6HeaderLen || orig[0]>>4 != 6 {
		return fmt.Errorf("original packet (%d bytes) is not IPv6", len(orig))
	}
	src := netip.AddrFrom16([16]byte(orig[8:24]))
	if src.IsUnspecified() || src.IsMulticast() || src.IsLoopback() {
		return fmt.Errorf("original source %s: %w", src, ErrSuppressed)
	}
	// Walk the extension headers to the upper layer: an ICMPv6 error
	// (types 0..127) must not trigger another.
	next, off := orig[6], ipv6HeaderLen
	for {
		switch next {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if off+2 > len(orig) {
				return nil // truncated chain: cannot be an ICMPv6 error we can see
			}
			next, off = orig[off], off+(int(orig[off+1])+1)*8
			continue
		case 44: // fragment
			if off+8 > len(orig) {
				return nil
			}
			if binary.BigEndian.Uint16(orig[off+2:])&0xfff8 != 0 {
				return nil // non-first fragment: no upper-layer header to check
			}
			next, off = orig[off], off+8
			continue
		case protoICMPv6:
			if off < len(orig) && orig[off] < 128 {
				return fmt.Errorf("original is an ICMPv6 error (type %d): %w", orig[off], ErrSuppressed)
			}
		}
		return nil
	}
}
