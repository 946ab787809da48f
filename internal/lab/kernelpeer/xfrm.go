package kernelpeer

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/espgw/espgw/sa"
)

// Direction is the way an SA carries traffic, seen from the guest.
type Direction uint8

const (
	// Inbound SAs carry traffic to the guest (the guest is the SA's Dst).
	Inbound Direction = iota
	// Outbound SAs carry traffic from the guest (the guest is the SA's Src).
	Outbound
)

func (d Direction) String() string {
	if d == Outbound {
		return "out"
	}
	return "in"
}

// Command is one iproute2 command line, without the leading "ip". Its
// String hides key material; Args has it in clear for the guest.
type Command struct{ Args []string }

// String prints the command with every key replaced by its length.
func (c Command) String() string {
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		if i >= 2 && isKeyed(c.Args[i-2]) {
			a = fmt.Sprintf("<%d-byte key>", (len(a)-2)/2)
		}
		out[i] = a
	}
	return "ip " + strings.Join(out, " ")
}

func isKeyed(word string) bool { return word == "enc" || word == "auth-trunc" || word == "aead" }

// script joins commands into a busybox sh script, one per line, each
// argument quoted, that stops at the first failure.
func script(cmds []Command) string {
	var b strings.Builder
	b.WriteString("set -e\n")
	for _, c := range cmds {
		b.WriteString("/sbin/ip")
		for _, a := range c.Args {
			b.WriteString(" '")
			b.WriteString(strings.ReplaceAll(a, "'", `'\''`))
			b.WriteString("'")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// reqID ties an SA's state to its policies. The SPI is unique among the
// guest's SAs, so it serves.
func reqID(s *sa.SA) string { return strconv.FormatUint(uint64(s.SPI), 10) }

// XFRMCommands turns an espgw SA into the `ip xfrm state add` and
// `ip xfrm policy add` commands that give the guest's kernel the same SA
// for direction dir. Policies come from the SA's selectors; a transport
// SA without selectors protects all traffic between its two hosts, a
// tunnel SA without selectors is an error (the kernel needs the inner
// networks to know what to tunnel).
func XFRMCommands(s *sa.SA, dir Direction) ([]Command, error) {
	state, err := StateCommand(s)
	if err != nil {
		return nil, err
	}
	pols, err := PolicyCommands(s, dir)
	if err != nil {
		return nil, err
	}
	return append([]Command{state}, pols...), nil
}

// StateCommand is the `ip xfrm state add` command for s.
func StateCommand(s *sa.SA) (Command, error) {
	if err := checkSA(s); err != nil {
		return Command{}, err
	}
	a := []string{"xfrm", "state", "add", "src", s.Src.String(), "dst", s.Dst.String(),
		"proto", "esp", "spi", fmt.Sprintf("0x%08x", s.SPI), "reqid", reqID(s), "mode", s.Mode.String()}
	if s.ReplayWindow > 0 {
		a = append(a, "replay-window", strconv.Itoa(s.ReplayWindow))
	}
	if s.ESN {
		a = append(a, "flag", "esn")
	}
	if s.InitialSeq != 0 {
		lo, hi := uint32(s.InitialSeq), uint32(s.InitialSeq>>32)
		a = append(a, "replay-seq", strconv.FormatUint(uint64(lo), 10), "replay-oseq", strconv.FormatUint(uint64(lo), 10))
		if s.ESN {
			a = append(a, "replay-seq-hi", strconv.FormatUint(uint64(hi), 10), "replay-oseq-hi", strconv.FormatUint(uint64(hi), 10))
		}
	}
	a = append(a, algorithmArgs(s)...)
	if s.Encap == sa.EncapUDP {
		sport, dport := s.SrcPort, s.DstPort
		if sport == 0 {
			sport = sa.DefaultNATTPort
		}
		if dport == 0 {
			dport = sa.DefaultNATTPort
		}
		oaddr := "0.0.0.0"
		if s.Src.Is6() {
			oaddr = "::"
		}
		a = append(a, "encap", "espinudp", strconv.Itoa(int(sport)), strconv.Itoa(int(dport)), oaddr)
	}
	if s.TFCPad > 0 {
		a = append(a, "tfcpad", strconv.Itoa(s.TFCPad))
	}
	a = append(a, limitArgs("soft", s.Soft)...)
	a = append(a, limitArgs("hard", s.Hard)...)
	if len(s.Selectors) == 1 {
		sel, err := selectorArgs(s.Selectors[0], s.Src.Is6())
		if err != nil {
			return Command{}, fmt.Errorf("mirror %v: %w", s, err)
		}
		a = append(a, "sel")
		a = append(a, sel...)
	}
	return Command{Args: a}, nil
}

func checkSA(s *sa.SA) error {
	if s == nil {
		return fmt.Errorf("mirror SA: nil SA")
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("mirror %v: %w", s, err)
	}
	if s.SPI < 256 {
		return fmt.Errorf("mirror %v: SPI %d is reserved (RFC 4303 §2.1: 1-255)", s, s.SPI)
	}
	if s.ESN && s.ReplayWindow == 0 {
		return fmt.Errorf("mirror %v: the kernel does ESN only with a replay window; set one", s)
	}
	return nil
}

// algorithmArgs names the kernel's crypto for the suite (see the kernel's
// net/xfrm/xfrm_algo.c for the names it accepts).
func algorithmArgs(s *sa.SA) []string {
	key := func(k sa.Key) string { return "0x" + hex.EncodeToString(k) }
	var a []string
	switch s.Suite.Cipher {
	case sa.CipherNull:
		a = []string{"enc", "ecb(cipher_null)", ""}
	case sa.CipherAESCBC:
		a = []string{"enc", "cbc(aes)", key(s.EncKey)}
	case sa.Cipher3DES:
		a = []string{"enc", "cbc(des3_ede)", key(s.EncKey)}
	case sa.CipherAESCTR:
		a = []string{"enc", "rfc3686(ctr(aes))", key(s.EncKey)}
	case sa.CipherAESGCM16:
		return []string{"aead", "rfc4106(gcm(aes))", key(s.EncKey), "128"}
	}
	hash := map[sa.Auth]string{
		sa.AuthHMACSHA1_96:    "hmac(sha1)",
		sa.AuthHMACSHA256_128: "hmac(sha256)",
		sa.AuthHMACSHA384_192: "hmac(sha384)",
		sa.AuthHMACSHA512_256: "hmac(sha512)",
		sa.AuthHMACMD5_96:     "hmac(md5)",
	}[s.Suite.Auth]
	return append(a, "auth-trunc", hash, key(s.AuthKey), strconv.Itoa(s.Suite.ICVLen()*8))
}

func limitArgs(kind string, l sa.Lifetime) []string {
	var a []string
	if l.Bytes != 0 {
		a = append(a, "limit", "byte-"+kind, strconv.FormatUint(l.Bytes, 10))
	}
	if l.Packets != 0 {
		a = append(a, "limit", "packet-"+kind, strconv.FormatUint(l.Packets, 10))
	}
	if l.Time != 0 {
		secs := int64(l.Time.Seconds())
		if secs < 1 {
			secs = 1
		}
		a = append(a, "limit", "time-"+kind, strconv.FormatInt(secs, 10))
	}
	return a
}

// PolicyCommands are the `ip xfrm policy add` commands that send matching
// traffic through s (dir out) or require it to have come through s (dir in,
// and dir fwd for tunnel SAs so the guest may also route for a network).
func PolicyCommands(s *sa.SA, dir Direction) ([]Command, error) {
	if err := checkSA(s); err != nil {
		return nil, err
	}
	sels := s.Selectors
	if len(sels) == 0 {
		if s.Mode == sa.Tunnel {
			return nil, fmt.Errorf("mirror %v: a tunnel SA needs selectors (the inner networks) for the kernel's policy", s)
		}
		sels = []sa.Selector{{Src: hostPrefix(s.Src), Dst: hostPrefix(s.Dst)}}
	}
	dirs := []string{"out"}
	if dir == Inbound {
		dirs = []string{"in"}
		if s.Mode == sa.Tunnel {
			dirs = append(dirs, "fwd")
		}
	}
	tmpl := []string{"tmpl", "src", s.Src.String(), "dst", s.Dst.String(), "proto", "esp",
		"reqid", reqID(s), "mode", s.Mode.String(), "level", "required"}
	var cmds []Command
	for i, sel := range sels {
		selArgs, err := selectorArgs(sel, s.Src.Is6())
		if err != nil {
			return nil, fmt.Errorf("mirror %v: selector %d: %w", s, i, err)
		}
		for _, d := range dirs {
			a := append([]string{"xfrm", "policy", "add"}, selArgs...)
			a = append(a, "dir", d)
			cmds = append(cmds, Command{Args: append(a, tmpl...)})
		}
	}
	return cmds, nil
}

func hostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// selectorArgs writes a selector as iproute2's SELECTOR. The kernel's
// selectors match one port or all, so a port range must be a single port.
func selectorArgs(sel sa.Selector, v6 bool) ([]string, error) {
	any := "0.0.0.0/0"
	if v6 {
		any = "::/0"
	}
	src, dst := any, any
	if sel.Src.IsValid() {
		src = sel.Src.Masked().String()
	}
	if sel.Dst.IsValid() {
		dst = sel.Dst.Masked().String()
	}
	a := []string{"src", src, "dst", dst}
	hasPorts := sel.SrcPorts != (sa.PortRange{}) || sel.DstPorts != (sa.PortRange{})
	if sel.Proto == 0 {
		if hasPorts {
			return nil, fmt.Errorf("ports given without a protocol")
		}
		return a, nil
	}
	a = append(a, "proto", strconv.Itoa(int(sel.Proto)))
	if !hasPorts {
		return a, nil
	}
	switch sel.Proto {
	case 6, 17, 33, 132: // tcp, udp, dccp, sctp
	default:
		return nil, fmt.Errorf("ports given for protocol %d, which has none", sel.Proto)
	}
	for _, p := range []struct {
		word string
		r    sa.PortRange
	}{{"sport", sel.SrcPorts}, {"dport", sel.DstPorts}} {
		switch {
		case p.r == sa.PortRange{}:
		case p.r.Lo == p.r.Hi:
			a = append(a, p.word, strconv.Itoa(int(p.r.Lo)))
		default:
			return nil, fmt.Errorf("%s range %d-%d: the kernel's selectors take one port", p.word, p.r.Lo, p.r.Hi)
		}
	}
	return a, nil
}

// InstallSA gives the guest's kernel the SA s for direction dir: its state
// and its policies, in one round trip. Errors name the SA, never its keys.
func (p *Peer) InstallSA(ctx context.Context, s *sa.SA, dir Direction) error {
	cmds, err := XFRMCommands(s, dir)
	if err != nil {
		return err
	}
	if out, err := p.Run(ctx, script(cmds)); err != nil {
		return fmt.Errorf("install %v (%s) in the kernel peer: %w", s, dir, redactErr(err, out))
	}
	return nil
}

// DirectedSA is an SA with the direction it has in the guest.
type DirectedSA struct {
	SA  *sa.SA
	Dir Direction
}

// ReplaceSAs flushes the guest's SAs and policies and installs sas, in one
// round trip (commands cost the most under emulation).
func (p *Peer) ReplaceSAs(ctx context.Context, sas ...DirectedSA) error {
	cmds := []Command{{Args: []string{"xfrm", "policy", "flush"}}, {Args: []string{"xfrm", "state", "flush"}}}
	for _, d := range sas {
		c, err := XFRMCommands(d.SA, d.Dir)
		if err != nil {
			return err
		}
		cmds = append(cmds, c...)
	}
	if out, err := p.Run(ctx, script(cmds)); err != nil {
		return fmt.Errorf("install %d SAs in the kernel peer: %w", len(sas), redactErr(err, out))
	}
	return nil
}

// redactErr keeps an install error's message from carrying the script:
// iproute2 prints only its own diagnostics, but the error of a failed
// shell may echo a line.
func redactErr(err error, out string) error {
	if ee, ok := err.(*ExitError); ok {
		var keep []string
		for _, l := range strings.Split(out, "\n") {
			if !strings.Contains(l, "0x") {
				keep = append(keep, l)
			}
		}
		return fmt.Errorf("exit status %d: %s", ee.Code, strings.TrimSpace(strings.Join(keep, "\n")))
	}
	return err
}

// FlushXFRM removes every SA and policy from the guest's kernel.
func (p *Peer) FlushXFRM(ctx context.Context) error {
	if _, err := p.Run(ctx, "ip xfrm policy flush && ip xfrm state flush"); err != nil {
		return fmt.Errorf("flush the kernel peer's XFRM state: %w", err)
	}
	return nil
}
