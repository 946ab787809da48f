package sa

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"
)

// LogValue gives log/slog the SA without any key material.
func (s SA) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("spi", fmt.Sprintf("%#x", s.SPI)),
		slog.String("mode", s.Mode.String()),
		slog.String("src", s.Src.String()),
		slog.String("dst", s.Dst.String()),
		slog.String("suite", s.Suite.String()),
		slog.Bool("esn", s.ESN),
		slog.Int("replay-window", s.ReplayWindow),
	}
	if s.Encap == EncapUDP {
		attrs = append(attrs, slog.String("encap", fmt.Sprintf("udp %d->%d", s.SrcPort, s.DstPort)))
	}
	return slog.GroupValue(attrs...)
}

// MinSPI is the lowest SPI an SA may have: RFC 4303 §2.1 reserves 0 for
// local use (never sent; with UDP encapsulation it would read back as the
// non-ESP marker of RFC 3948) and 1..255 for IANA.
const MinSPI = 256

// Validate checks that the SA is complete and self-consistent: an SPI that
// is not reserved, a first sequence number that leaves numbers to send, one address
// family, a valid suite with keys of the right lengths, a replay window of at
// most MaxReplayWindow, UDP ports only with UDP encapsulation, soft lifetimes
// within hard ones, well-formed selectors. Errors never contain key material.
func (s *SA) Validate() error {
	var errs []error
	if s.SPI < MinSPI {
		errs = append(errs, fmt.Errorf("spi: %d is reserved (RFC 4303 §2.1: 0 is never sent, 1..255 are kept by IANA): use %d or more", s.SPI, MinSPI))
	}
	if s.Mode != Tunnel && s.Mode != Transport {
		errs = append(errs, fmt.Errorf("mode: %s is not tunnel or transport", s.Mode))
	}
	if err := checkEndpoints(s.Src, s.Dst); err != nil {
		errs = append(errs, err)
	}
	switch s.Encap {
	case EncapNone:
		if s.SrcPort != 0 || s.DstPort != 0 {
			errs = append(errs, errors.New("sport/dport: ports need encap udp"))
		}
		if s.FollowSourcePort {
			errs = append(errs, errors.New("following the source port needs encap udp"))
		}
	case EncapUDP:
		if s.SrcPort == 0 || s.DstPort == 0 {
			errs = append(errs, errors.New("sport/dport: UDP encapsulation needs both ports (default 4500)"))
		}
	default:
		errs = append(errs, fmt.Errorf("encap: %s is not none or udp", s.Encap))
	}
	if err := s.Suite.ValidateKeys(s.EncKey, s.AuthKey); err != nil {
		errs = append(errs, err)
	}
	if s.ReplayWindow < 0 || s.ReplayWindow > MaxReplayWindow {
		errs = append(errs, fmt.Errorf("replay-window: %d, want 0..%d", s.ReplayWindow, MaxReplayWindow))
	}
	// The first number sent is InitialSeq+1 and a sequence never cycles
	// (RFC 4303 §3.3.3): a start at the last number leaves none to send.
	switch {
	case !s.ESN && s.InitialSeq >= 1<<32-1:
		errs = append(errs, fmt.Errorf("initial-seq: %d leaves no 32-bit sequence number to send (at most %d without esn)", s.InitialSeq, uint64(1<<32-2)))
	case s.ESN && s.InitialSeq == 1<<64-1:
		errs = append(errs, fmt.Errorf("initial-seq: %d leaves no 64-bit sequence number to send", s.InitialSeq))
	}
	if s.TFCPad < 0 || s.TFCPad > 65535 {
		errs = append(errs, fmt.Errorf("tfc-pad: %d, want 0..65535", s.TFCPad))
	}
	if err := s.validateHeader(); err != nil {
		errs = append(errs, err)
	}
	if err := checkLifetimes(s.Soft, s.Hard); err != nil {
		errs = append(errs, fmt.Errorf("lifetimes: %w", err))
	}
	for i, sel := range s.Selectors {
		if err := sel.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("selectors[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

func checkEndpoints(src, dst netip.Addr) error {
	switch {
	case !src.IsValid():
		return errors.New("src: missing")
	case !dst.IsValid():
		return errors.New("dst: missing")
	case src.Is4() != dst.Is4():
		return fmt.Errorf("src %s and dst %s are of different address families", src, dst)
	case src.Zone() != "" || dst.Zone() != "":
		return errors.New("src/dst: zoned addresses are not supported")
	case dst.IsUnspecified():
		return fmt.Errorf("dst: %s is the unspecified address", dst)
	}
	return nil
}

func checkLifetimes(soft, hard Lifetime) error {
	check := func(what string, s, h uint64) error {
		if s != 0 && h != 0 && s > h {
			return fmt.Errorf("soft %s %d exceeds hard %d", what, s, h)
		}
		return nil
	}
	return errors.Join(
		check("bytes", soft.Bytes, hard.Bytes),
		check("packets", soft.Packets, hard.Packets),
		check("time (ns)", uint64(max(soft.Time, 0)), uint64(max(hard.Time, 0))),
		nonNegative("soft", soft.Time), nonNegative("hard", hard.Time),
	)
}

func nonNegative(which string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%s time %s is negative", which, d)
	}
	return nil
}

// Validate checks that the selector is well formed: prefixes of one family,
// ports only for protocols that have them, ranges in order.
func (s Selector) Validate() error {
	if s.Src.IsValid() && s.Dst.IsValid() && s.Src.Addr().Is4() != s.Dst.Addr().Is4() {
		return fmt.Errorf("src %s and dst %s are of different address families", s.Src, s.Dst)
	}
	for _, p := range []struct {
		name string
		r    PortRange
	}{{"sport", s.SrcPorts}, {"dport", s.DstPorts}} {
		if p.r == (PortRange{}) {
			continue
		}
		if !HasPorts(s.Proto) {
			return fmt.Errorf("%s: ports need proto tcp, udp, sctp or udplite, not %s", p.name, ProtoName(s.Proto))
		}
		if p.r.Lo > p.r.Hi {
			return fmt.Errorf("%s: range %d-%d is backwards", p.name, p.r.Lo, p.r.Hi)
		}
	}
	return nil
}
