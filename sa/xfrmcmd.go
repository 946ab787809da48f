package sa

import (
	"errors"
	"fmt"
	"github.com/espgw/espgw/internal/secret"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// ParseXFRMCommands reads `ip xfrm state add` and `ip xfrm policy add`
// commands, one per line (a trailing \ continues a line; words may be
// quoted as in sh), as `espgw sa convert --to ip-xfrm` writes them and as
// scripts that configure Linux gateways hold them. States become SAs;
// policies with dir out become SPD entries protected by the state their
// template names (by reqid, else by addresses and mode); dir in and fwd
// policies become their SA's selectors. flush commands, `set -e` and #
// comments are skipped; any other command is an error.
func ParseXFRMCommands(name string, data []byte) (*Config, error) {
	p := &xfrmScript{lineProblems: lineProblems{file: name}, reqids: map[uint32]*SA{}, lines: map[saKey]int{}}
	for _, cmd := range joinContinued(string(data)) {
		words, err := shellWords(cmd.text)
		if err != nil {
			p.fail(cmd.line, "", "", err)
			continue
		}
		p.command(cmd.line, words)
	}
	c := &Config{SAs: p.sas}
	for _, pol := range p.pols {
		p.resolve(c, pol)
	}
	if err := p.errs.Err(); err != nil {
		return nil, err
	}
	if len(c.SAs) == 0 {
		return nil, &ConfigError{File: name, Err: errors.New("no ip xfrm state add command")}
	}
	return c, nil
}

type numberedLine struct {
	line int
	text string
}

// joinContinued splits text into logical lines, joining lines that end
// in a backslash, dropping blank lines and # comments.
func joinContinued(text string) []numberedLine {
	var out []numberedLine
	var cur strings.Builder
	start := 0
	for i, l := range strings.Split(text, "\n") {
		l = strings.TrimRight(l, "\r")
		if cur.Len() == 0 {
			start = i + 1
			if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "#") {
				continue
			}
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\"))
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(l)
		out = append(out, numberedLine{start, cur.String()})
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, numberedLine{start, cur.String()})
	}
	return out
}

// shellWords splits a command line as sh does for plain words and '…'
// and "…" quoting (no expansions).
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, errors.New("quote never closed")
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '\\' && i+1 < len(s):
			w.WriteByte(s[i+1])
			i++
			inWord = true
		case c == '#' && !inWord:
			i = len(s)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

type xfrmScript struct {
	lineProblems
	sas    []*SA
	lines  map[saKey]int // the line of each state
	reqids map[uint32]*SA
	pols   []xfrmPolicy
}

// xfrmPolicy is an `ip xfrm policy add` whose SA is found once every
// command is read.
type xfrmPolicy struct {
	line     int
	entry    string
	dir      string
	sel      Selector
	priority int
	tmplSrc  netip.Addr
	tmplDst  netip.Addr
	reqid    uint32
	mode     Mode
	tmpl     bool // has a template: protect
	block    bool // action block: discard
}

func (p *xfrmScript) command(line int, words []string) {
	f := trimIPCommand(words)
	if len(f) == 0 {
		return
	}
	if f[0] == "set" || f[0] == "true" {
		return // `set -e` of a generated script
	}
	if len(f) < 3 || f[0] != "xfrm" {
		p.fail(line, "ip command", "", errors.New("want ip xfrm state add … or ip xfrm policy add …"))
		return
	}
	switch f[1] + " " + f[2] {
	case "state flush", "policy flush":
	case "state add", "state update":
		p.state(line, f[3:])
	case "policy add", "policy update":
		p.policy(line, f[3:])
	default:
		p.fail(line, "ip xfrm "+secret.Word(f[1], "state", "policy")+" "+secret.Word(f[2], "add", "update", "flush"), "", errors.New("not supported (want state add, policy add or flush)"))
	}
}

// state reads the ID and options of ip xfrm state add.
func (p *xfrmScript) state(line int, f []string) {
	entry := "xfrm state add"
	fail := func(field string, err error) { p.fail(line, entry, field, err) }
	b := &xfrmState{s: &SA{}, named: func(spi uint32) { entry = fmt.Sprintf("xfrm state add spi %#x", spi) }}
	if !b.words(f, fail) {
		return
	}
	s := b.s
	if !b.keyed {
		fail("enc", errors.New("missing: an ESP state needs enc or aead"))
		return
	}
	b.finish()
	if err := s.Validate(); err != nil {
		fail("", err)
		return
	}
	if !p.firstSPI(p.lines, line, entry, s) {
		return
	}
	if b.reqid != 0 {
		if _, dup := p.reqids[b.reqid]; !dup {
			p.reqids[b.reqid] = s
		}
	}
	p.sas = append(p.sas, s)
}

// isFlagNumber reports whether w is a flag list given as a number, as
// iproute2 also takes it.
func isFlagNumber(w string) bool {
	_, err := strconv.ParseUint(w, 0, 32)
	return err == nil
}

// policy reads ip xfrm policy add SELECTOR dir DIR [priority N] tmpl ….
func (p *xfrmScript) policy(line int, f []string) {
	pol := xfrmPolicy{line: line, entry: "xfrm policy add"}
	fail := func(field string, err error) { p.fail(line, pol.entry, field, err) }
	d := slices.Index(f, "dir")
	if d < 0 || d+1 >= len(f) {
		fail("dir", errors.New("missing"))
		return
	}
	sel, err := xfrmSelector(f[:d])
	if err != nil {
		fail("selector", err)
		return
	}
	pol.sel, pol.dir = sel, f[d+1]
	pol.entry = "xfrm policy add dir " + strings.Trim(secret.Word(pol.dir, "out", "in", "fwd"), `"`)
	if !slices.Contains([]string{"out", "in", "fwd"}, pol.dir) {
		fail("dir", fmt.Errorf("%s: want out, in or fwd", secret.Word(pol.dir, "out", "in", "fwd")))
		return
	}
	rest := f[d+2:]
	for i := 0; i < len(rest); i++ {
		w := rest[i]
		val := func() (string, bool) {
			if i+1 >= len(rest) {
				fail(w, errors.New("missing value"))
				return "", false
			}
			i++
			return rest[i], true
		}
		switch w {
		case "priority":
			v, ok := val()
			if !ok {
				return
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				fail(w, fmt.Errorf("%s is not a number", secret.Number(v)))
				return
			}
			pol.priority = n
		case "action":
			v, ok := val()
			if !ok {
				return
			}
			switch v {
			case "allow":
			case "block":
				pol.block = true
			default:
				fail(w, fmt.Errorf("%s: want allow or block", secret.Word(v, "allow", "block")))
				return
			}
		case "tmpl":
			pol.tmpl = true
		case "level":
			if _, ok := val(); !ok {
				return
			}
		case "src", "dst":
			v, ok := val()
			if !ok {
				return
			}
			a, err := netip.ParseAddr(v)
			if err != nil {
				fail("tmpl "+w, fmt.Errorf("%s is not an IP address", secret.Number(v)))
				return
			}
			if w == "src" {
				pol.tmplSrc = a
			} else {
				pol.tmplDst = a
			}
		case "proto":
			if v, ok := val(); !ok || v != "esp" {
				fail("tmpl proto", errors.New("only esp templates are supported"))
				return
			}
		case "reqid":
			v, ok := val()
			if !ok {
				return
			}
			n, err := strconv.ParseUint(v, 0, 32)
			if err != nil {
				fail("tmpl reqid", fmt.Errorf("%s is not a number", secret.Number(v)))
				return
			}
			pol.reqid = uint32(n)
		case "mode":
			v, ok := val()
			if !ok {
				return
			}
			switch v {
			case "tunnel":
				pol.mode = Tunnel
			case "transport":
				pol.mode = Transport
			default:
				fail("tmpl mode", fmt.Errorf("%s: want tunnel or transport", secret.Word(v, "tunnel", "transport")))
				return
			}
		case "spi":
			if _, ok := val(); !ok {
				return
			}
		default:
			fail("", fmt.Errorf("unknown or unsupported word %s", secret.Word(w, "priority", "action", "tmpl", "level", "src", "dst", "proto", "reqid", "mode", "spi")))
			return
		}
	}
	p.pols = append(p.pols, pol)
}

// resolve binds a policy to its state: by reqid, else the one state of the
// template's addresses and mode.
func (p *xfrmScript) resolve(c *Config, pol xfrmPolicy) {
	if pol.block || !pol.tmpl {
		if pol.tmpl {
			p.fail(pol.line, pol.entry, "action", errors.New("block with a template"))
			return
		}
		if pol.dir == "out" {
			act := Bypass
			if pol.block {
				act = Discard
			}
			c.SPD = append(c.SPD, Policy{Priority: pol.priority, Selector: pol.sel, Action: act})
		}
		// Inbound allow and block have no counterpart: inbound traffic is
		// checked against the selectors of the SA it arrived on.
		return
	}
	var s *SA
	if pol.reqid != 0 {
		s = p.reqids[pol.reqid]
	}
	if s == nil {
		for _, cand := range c.SAs {
			if cand.Mode != pol.mode {
				continue
			}
			if pol.mode == Tunnel && (cand.Src != pol.tmplSrc || cand.Dst != pol.tmplDst) {
				continue
			}
			if pol.mode == Transport && pol.tmplSrc.IsValid() && (cand.Src != pol.tmplSrc || cand.Dst != pol.tmplDst) {
				continue
			}
			if s != nil {
				p.fail(pol.line, pol.entry, "tmpl", errors.New("matches more than one state: give the template a reqid"))
				return
			}
			s = cand
		}
	}
	if s == nil {
		p.fail(pol.line, pol.entry, "tmpl", errors.New("no state matches the template (reqid, addresses, mode)"))
		return
	}
	if pol.dir == "out" {
		c.SPD = append(c.SPD, Policy{Priority: pol.priority, Selector: pol.sel, Action: Protect, SPI: s.SPI, SA: s})
		return
	}
	if !pol.sel.Src.IsValid() && !pol.sel.Dst.IsValid() {
		// ip writes the policy's any addresses in the state's family,
		// as pinInnerFamily reads the state's.
		for _, have := range s.Selectors {
			if have.Src.IsValid() && have.Src.Bits() == 0 && have.Dst == have.Src {
				pol.sel.Src, pol.sel.Dst = have.Src, have.Dst
				break
			}
		}
	}
	if pol.dir == "fwd" && slices.Contains(s.Selectors, pol.sel) {
		return // the in policy already gave it
	}
	if !slices.Contains(s.Selectors, pol.sel) {
		s.Selectors = append(s.Selectors, pol.sel)
	}
}

// XFRMPolicyArgs are the `ip xfrm policy add` commands (after "ip") that
// send traffic through s (dir out) or require it to have come through s
// (in, and fwd for tunnel SAs), one per selector.
func XFRMPolicyArgs(s *SA, sels []Selector, out bool, priority int) ([][]string, error) {
	dirs := []string{"out"}
	if !out {
		dirs = []string{"in"}
		if s.Mode == Tunnel {
			dirs = append(dirs, "fwd")
		}
	}
	tmpl := []string{"tmpl", "src", s.Src.String(), "dst", s.Dst.String(), "proto", "esp",
		"reqid", strconv.FormatUint(uint64(s.SPI), 10), "mode", s.Mode.String(), "level", "required"}
	var cmds [][]string
	for i, sel := range sels {
		selArgs, err := XFRMSelectorArgs(sel, s.Src.Is6())
		if err != nil {
			return nil, fmt.Errorf("SA %#x selector %d as ip xfrm: %w", s.SPI, i, err)
		}
		for _, d := range dirs {
			a := append([]string{"xfrm", "policy", "add"}, selArgs...)
			a = append(a, "dir", d)
			if priority != 0 {
				a = append(a, "priority", strconv.Itoa(priority))
			}
			cmds = append(cmds, append(a, tmpl...))
		}
	}
	return cmds, nil
}
