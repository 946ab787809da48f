package kernelpeer

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/espgw/espgw/internal/shell"
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
			b.WriteString(" ")
			b.WriteString(shell.Quote(a))
		}
		b.WriteString("\n")
	}
	return b.String()
}

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

// StateCommand is the `ip xfrm state add` command for s (sa.XFRMStateArgs,
// which gives a tunnel SA carrying the other inner family flag af-unspec).
func StateCommand(s *sa.SA) (Command, error) {
	if err := checkSA(s); err != nil {
		return Command{}, err
	}
	a, err := sa.XFRMStateArgs(s)
	if err != nil {
		return Command{}, fmt.Errorf("mirror %v: %w", s, err)
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
	args, err := sa.XFRMPolicyArgs(s, sels, dir != Inbound, 0)
	if err != nil {
		return nil, fmt.Errorf("mirror %v: %w", s, err)
	}
	cmds := make([]Command, len(args))
	for i, a := range args {
		cmds[i] = Command{Args: a}
	}
	return cmds, nil
}

func hostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// DirectedSA is an SA with the direction it has in the guest.
type DirectedSA struct {
	SA  *sa.SA
	Dir Direction
}

// ReplaceSAs flushes the guest's SAs and policies and installs sas, in one
// round trip (commands cost the most under emulation).
func (p *Peer) ReplaceSAs(ctx context.Context, sas ...DirectedSA) error {
	sc, err := replaceScript(sas)
	if err != nil {
		return err
	}
	if out, err := p.Run(ctx, sc); err != nil {
		return fmt.Errorf("install %d SAs in the kernel peer: %w", len(sas), redactErr(err, out))
	}
	return nil
}

// replaceScript is the script that flushes the guest's SAs and policies
// and installs sas. It holds their keys: never log it.
func replaceScript(sas []DirectedSA) (string, error) {
	cmds := []Command{{Args: []string{"xfrm", "policy", "flush"}}, {Args: []string{"xfrm", "state", "flush"}}}
	for _, d := range sas {
		c, err := XFRMCommands(d.SA, d.Dir)
		if err != nil {
			return "", err
		}
		cmds = append(cmds, c...)
	}
	return script(cmds), nil
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
