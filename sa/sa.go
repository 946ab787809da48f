package sa

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/espgw/espgw/internal/secret"
)

// Mode is the ESP mode of an SA.
type Mode uint8

const (
	// Tunnel wraps the whole inner IP packet behind a new outer header.
	Tunnel Mode = iota
	// Transport protects the payload of the packet's own IP header.
	Transport
)

func (m Mode) String() string {
	switch m {
	case Tunnel:
		return "tunnel"
	case Transport:
		return "transport"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Encap is how ESP packets travel between the gateways.
type Encap uint8

const (
	// EncapNone is raw ESP, IP protocol 50.
	EncapNone Encap = iota
	// EncapUDP is UDP encapsulation per RFC 3948 (port 4500 by default).
	EncapUDP
)

func (e Encap) String() string {
	switch e {
	case EncapNone:
		return "none"
	case EncapUDP:
		return "udp"
	}
	return fmt.Sprintf("encap(%d)", uint8(e))
}

// DefaultNATTPort is the RFC 3948 UDP port for encapsulated ESP.
const DefaultNATTPort = 4500

// MaxReplayWindow is the largest anti-replay window an SA may ask for.
const MaxReplayWindow = 4096

// Lifetime bounds an SA by bytes, packets and time; a zero field means no bound.
type Lifetime struct {
	Bytes   uint64
	Packets uint64
	Time    time.Duration
}

// IsZero reports whether the lifetime sets no bound at all.
func (l Lifetime) IsZero() bool { return l == Lifetime{} }

// Key is secret keying material. It never prints: fmt, slog and errors see
// only its length.
type Key []byte

// String hides the key.
func (k Key) String() string { return fmt.Sprintf("<%d-byte key>", len(k)) }

// GoString hides the key from %#v as well.
func (k Key) GoString() string { return k.String() }

// Format hides the key from every fmt verb (%x included).
func (k Key) Format(f fmt.State, _ rune) { fmt.Fprint(f, k.String()) }

// LogValue hides the key from log/slog.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

// SA is one security association, as configured. Runtime state (sequence
// numbers, replay window, counters) lives in the esp package.
type SA struct {
	// The small fields come first, packed, so that the SA takes 224
	// bytes, not 240: a gateway keeps one per SA.
	SPI              uint32
	Mode             Mode
	Encap            Encap
	SrcPort, DstPort uint16 // UDP ports when Encap is EncapUDP
	Suite            Suite
	ESN              bool
	// FollowSourcePort, for an inbound SA with EncapUDP, takes packets
	// from Src at any source port as the SA's: the peer is behind a NAT
	// that may map it anew (RFC 7296 §2.23), and whoever negotiated the
	// SA is told the new port once a packet from it passes its checks.
	// No SA file sets it.
	FollowSourcePort bool

	// Outer-header options (header.go): the outer DSCP, DF and TTL a
	// tunnel-mode SA writes, and whether it copies the outer DSCP inward.
	DSCP      DSCP
	DF        DF
	TTL       uint8 // outer TTL / hop limit; 0 means DefaultTTL
	DecapDSCP DecapDSCP

	// IfID and OutputMark are a Linux kernel's route-based VPN settings
	// (xfrm interfaces): the if_id of the xfrm interface the SA belongs
	// to and the mark its outer packets get. espgw carries them between
	// SA formats; its own data path has neither, so a gateway refuses an
	// SA that sets them.
	IfID       uint32
	OutputMark Mark

	// Src and Dst are the outer addresses: the tunnel endpoints in tunnel
	// mode, the hosts themselves in transport mode. Both are IPv4 or both IPv6.
	Src, Dst netip.Addr

	EncKey  Key // for aes-ctr and aes-gcm-16: key followed by the 4-byte nonce/salt
	AuthKey Key

	ReplayWindow int // packets; 0 disables anti-replay checking

	// InitialSeq is the first sequence number sent minus one (0 in normal use);
	// test beds set it near 2^32 to cross the ESN boundary.
	InitialSeq uint64

	// TFCPad pads every sealed packet's payload up to this many bytes
	// (traffic flow confidentiality, RFC 4303 §2.7); 0 disables it.
	TFCPad int

	Soft, Hard Lifetime

	// Selectors, when set, are the traffic this SA carries: inbound, a
	// decrypted packet outside them is dropped (RFC 4301 §5.2).
	Selectors []Selector
}

// Mark is a packet mark and the bits of it that are set (Linux's
// output-mark MARK/MASK); the zero Mark sets none.
type Mark struct{ Value, Mask uint32 }

// IsZero reports whether the mark sets nothing.
func (m Mark) IsZero() bool { return m == Mark{} }

func (m Mark) String() string {
	if m.Mask == 0xffffffff {
		return fmt.Sprintf("%#x", m.Value)
	}
	return fmt.Sprintf("%#x/%#x", m.Value, m.Mask)
}

// ParseMark reads MARK or MARK/MASK, each decimal or 0x hex; a mark
// without a mask sets all 32 bits.
func ParseMark(s string) (Mark, error) {
	v, m, hasMask := strings.Cut(s, "/")
	val, err := strconv.ParseUint(v, 0, 32)
	if err != nil {
		return Mark{}, fmt.Errorf("mark %s is not a 32-bit number", secret.Number(v))
	}
	mask := uint64(0xffffffff)
	if hasMask {
		if mask, err = strconv.ParseUint(m, 0, 32); err != nil {
			return Mark{}, fmt.Errorf("mask %s is not a 32-bit number", secret.Number(m))
		}
	}
	if val&^mask != 0 {
		return Mark{}, fmt.Errorf("mark %#x has bits outside its mask %#x", val, mask)
	}
	return Mark{Value: uint32(val), Mask: uint32(mask)}, nil
}

// String names the SA without any key material.
func (s *SA) String() string {
	return fmt.Sprintf("SA %#x %s %s->%s %s", s.SPI, s.Mode, s.Src, s.Dst, s.Suite)
}

// Equal reports whether two SAs are configured identically, field for field,
// keys, selectors, lifetimes and the initial sequence included: an SA that
// is Equal to the one in force keeps its working state on a reload.
func (s *SA) Equal(o *SA) bool {
	return s.SPI == o.SPI && s.Mode == o.Mode && s.Src == o.Src && s.Dst == o.Dst &&
		s.Encap == o.Encap && s.SrcPort == o.SrcPort && s.DstPort == o.DstPort &&
		s.Suite == o.Suite && string(s.EncKey) == string(o.EncKey) && string(s.AuthKey) == string(o.AuthKey) &&
		s.ESN == o.ESN && s.ReplayWindow == o.ReplayWindow && s.InitialSeq == o.InitialSeq &&
		s.TFCPad == o.TFCPad && s.Soft == o.Soft && s.Hard == o.Hard &&
		s.DSCP == o.DSCP && s.DF == o.DF && s.TTL == o.TTL && s.DecapDSCP == o.DecapDSCP &&
		slices.Equal(s.Selectors, o.Selectors) && s.IfID == o.IfID && s.OutputMark == o.OutputMark &&
		s.FollowSourcePort == o.FollowSourcePort
}
