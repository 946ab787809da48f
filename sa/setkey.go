package sa

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/espgw/espgw/internal/errlist"
	"github.com/espgw/espgw/internal/secret"
)

// setkeyCommands are the first words of setkey(8) statements.
var setkeyCommands = []string{
	"add", "update", "get", "delete", "deleteall", "flush", "dump",
	"spdadd", "spdupdate", "spddelete", "spdflush", "spddump", "getspi",
}

// looksLikeSetkey reports whether the first statement of the data is a
// setkey(8) command (a YAML file starts with a key and a colon).
func looksLikeSetkey(data []byte) bool {
	sc := &skScanner{data: data, line: 1}
	t, ok, err := sc.next()
	return err == nil && ok && !t.quoted && slices.Contains(setkeyCommands, t.text)
}

type skToken struct {
	text   string
	line   int
	quoted bool
}

// skScanner splits setkey(8) input into words, "quoted strings" and ";",
// dropping # comments, one token at a time: a statement is parsed as soon
// as its ; is read, so memory follows the longest statement, not the file.
type skScanner struct {
	data []byte
	i    int
	line int
}

// next returns the next token; ok is false at the end of the data.
func (sc *skScanner) next() (t skToken, ok bool, err error) {
	data := sc.data
	for sc.i < len(data) {
		c := data[sc.i]
		switch {
		case c == '\n':
			sc.line++
			sc.i++
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			sc.i++
		case c == '\\' && (sc.i+1 == len(data) || data[sc.i+1] == '\n' || data[sc.i+1] == '\r'):
			sc.i++ // shell-style line continuation, as copied from scripts
		case c == '#':
			for sc.i < len(data) && data[sc.i] != '\n' {
				sc.i++
			}
		case c == ';':
			sc.i++
			return skToken{";", sc.line, false}, true, nil
		case c == '"':
			start, startLine := sc.i+1, sc.line
			j := start
			for j < len(data) && data[j] != '"' {
				if data[j] == '\n' {
					sc.line++
				}
				j++
			}
			if j == len(data) {
				return skToken{}, false, &ConfigError{Line: startLine, Err: errors.New("quoted string never closed")}
			}
			sc.i = j + 1
			return skToken{string(data[start:j]), startLine, true}, true, nil
		default:
			j := sc.i
			for j < len(data) && !strings.ContainsRune(" \t\r\n\f\v;\"", rune(data[j])) {
				j++
			}
			t := skToken{string(data[sc.i:j]), sc.line, false}
			sc.i = j
			return t, true, nil
		}
	}
	return skToken{}, false, nil
}

// maxStatementTokens bounds one statement (the longest real one, an add
// with every option, has about 30 words).
const maxStatementTokens = 256

// setkeyParser imports setkey(8) statements into SAs and policies.
type setkeyParser struct {
	file   string
	errs   errlist.List
	sas    []*SA
	lines  map[*SA]int
	reqids map[uint32]*SA
	spd    []pendingPolicy
	// bySPIDst and byEnds index the SAs added so far, so that duplicate
	// checks and policy binding take constant time per statement: a file of
	// tens of thousands of SAs parses in linear time.
	bySPIDst map[spiDst]*SA
	byEnds   map[saEnds]*SA // the first SA added per mode and endpoints
}

// saEnds is how a policy without unique:N finds its SA.
type saEnds struct {
	mode     Mode
	src, dst netip.Addr
}

// pendingPolicy is an spdadd whose SA is found once all statements are read
// (a file may add its policies before its SAs).
type pendingPolicy struct {
	head, where string
	line        int
	dir         string
	pol         Policy
	rule        *ipsecRule // nil for none and discard
}

// ipsecRule is the esp/mode/src-dst/level part of an spdadd.
type ipsecRule struct {
	mode     Mode
	src, dst netip.Addr // tunnel endpoints; invalid in transport mode
	reqid    uint32     // from unique:N
}

// ParseSetkey imports setkey(8) manual-keying statements (the BSD and
// ipsec-tools format): add … esp … ; statements become SAs, spdadd … -P out
// statements become SPD entries, spdadd … -P in|fwd ipsec statements become
// the selectors of their SA. See the package doc for what is accepted.
func ParseSetkey(name string, data []byte) (*Config, error) {
	p := &setkeyParser{file: name, lines: map[*SA]int{}, reqids: map[uint32]*SA{}, bySPIDst: map[spiDst]*SA{}, byEnds: map[saEnds]*SA{}}
	sc := &skScanner{data: data, line: 1}
	var toks []skToken
	for {
		t, ok, err := sc.next()
		if ce, isCE := err.(*ConfigError); isCE {
			ce.File = name
			return nil, ce
		}
		if !ok {
			if len(toks) > 0 {
				p.fail(toks[0].line, headOf(toks), "", errors.New("statement not ended by ;"))
			}
			break
		}
		if t.text == ";" && !t.quoted {
			if len(toks) > 0 {
				p.statement(toks)
			}
			toks = toks[:0]
			continue
		}
		if len(toks) == maxStatementTokens {
			p.fail(toks[0].line, headOf(toks), "", fmt.Errorf("more than %d words without a ; (is a ; missing?)", maxStatementTokens))
			break
		}
		toks = append(toks, t)
	}
	c := &Config{SAs: p.sas}
	p.resolvePolicies(c)
	if err := p.errs.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

func (p *setkeyParser) fail(line int, head, field string, err error) {
	p.errs.Add(&ConfigError{File: p.file, Line: line, Entry: head, Field: field, Err: err})
}

// headOf names a statement in errors by its command and first words, up to
// the first option: never a key, which only follows -E or -A.
func headOf(toks []skToken) string {
	var words []string
	for i, t := range toks {
		if i > 0 && strings.HasPrefix(t.text, "-") && t.text != "-4" && t.text != "-6" && t.text != "-n" || t.quoted || len(words) == 6 {
			break
		}
		words = append(words, headWord(t.text))
	}
	return strings.Join(words, " ")
}

// headWord is a word of a statement's head as an error may show it: an
// address, an SPI or a known word, or a description of what is hidden.
func headWord(s string) string {
	e := secret.Quote(s)
	if uq, err := strconv.Unquote(e); err == nil {
		return uq
	}
	return e
}

// setkeyOptions are the options of add that an error may suggest.
var setkeyOptions = []string{"-m", "-r", "-u", "-f", "-lh", "-ls", "-bh", "-bs", "-E", "-A", "-e", "-C", "-ctx"}

// mapKeys lists a map's keys, for the words an error may suggest.
func mapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

func (p *setkeyParser) statement(toks []skToken) {
	head := headOf(toks)
	switch cmd := toks[0]; cmd.text {
	case "flush", "spdflush", "dump", "spddump", "get":
		// Nothing to import: these act on a kernel's state, and espgw's
		// state is exactly what the file adds.
	case "add", "update":
		p.add(toks, head)
	case "delete":
		p.delete(toks, head)
	case "spdadd", "spdupdate":
		p.spdadd(toks, head)
	default:
		p.fail(cmd.line, head, "", fmt.Errorf("%s is not supported by the import (use add, spdadd, delete, flush, spdflush)", secret.Word(cmd.text, setkeyCommands...)))
	}
}

// args walks a statement's tokens.
type args struct {
	toks []skToken
	i    int
}

func (a *args) more() bool { return a.i < len(a.toks) }
func (a *args) peek() skToken {
	if a.more() {
		return a.toks[a.i]
	}
	return skToken{}
}
func (a *args) next() (skToken, bool) {
	if !a.more() {
		return skToken{}, false
	}
	a.i++
	return a.toks[a.i-1], true
}

// line is where the next token is (or the last one, at the end).
func (a *args) line() int {
	if a.more() {
		return a.toks[a.i].line
	}
	return a.toks[len(a.toks)-1].line
}

// skipFamilyFlags skips -4, -6 and -n (addresses are always numeric here).
func (a *args) skipFamilyFlags() {
	for a.more() && !a.peek().quoted && (a.peek().text == "-4" || a.peek().text == "-6" || a.peek().text == "-n") {
		a.i++
	}
}

// parseHostPort reads an address with an optional [port].
func parseHostPort(s string) (netip.Addr, uint16, error) {
	host, port, err := splitBracketPort(s)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	a, err := netip.ParseAddr(host)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, 0, fmt.Errorf("%s is not a numeric IPv4 or IPv6 address (host names are not resolved)", secret.Number(host))
	}
	var p uint16
	if port != "" && port != "any" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return netip.Addr{}, 0, fmt.Errorf("port %s is not a number 0..65535", secret.Number(port))
		}
		p = uint16(n)
	}
	return a, p, nil
}

// splitBracketPort splits "addr[port]" into its parts.
func splitBracketPort(s string) (host, port string, err error) {
	open := strings.IndexByte(s, '[')
	if open < 0 {
		return s, "", nil
	}
	if !strings.HasSuffix(s, "]") || open == 0 {
		return "", "", fmt.Errorf("%s: want address[port]", secret.Number(s))
	}
	return s[:open], s[open+1 : len(s)-1], nil
}

var setkeyCiphers = map[string]Cipher{
	"null": CipherNull, "3des-cbc": Cipher3DES, "des3-cbc": Cipher3DES,
	"rijndael-cbc": CipherAESCBC, "aes-cbc": CipherAESCBC,
	"aes-ctr": CipherAESCTR, "rijndael-ctr": CipherAESCTR,
	"aes-gcm-16": CipherAESGCM16, "rijndael-gcm-16": CipherAESGCM16, "aes-gcm": CipherAESGCM16,
	"chacha20-poly1305": CipherChaCha20Poly1305, "aes-gmac": CipherAESGMAC,
	"aes-ccm-8": CipherAESCCM8, "aes-ccm-12": CipherAESCCM12, "aes-ccm-16": CipherAESCCM16,
}

// setkey's hmac-sha256/384/512 are the RFC 4868 ESP algorithms with an ICV
// of half the hash, which is what every current kernel uses for ESP.
var setkeyAuths = map[string]Auth{
	"null": AuthNone, "hmac-md5": AuthHMACMD5_96, "hmac-sha1": AuthHMACSHA1_96,
	"hmac-sha256": AuthHMACSHA256_128, "hmac-sha2-256": AuthHMACSHA256_128,
	"hmac-sha384": AuthHMACSHA384_192, "hmac-sha2-384": AuthHMACSHA384_192,
	"hmac-sha512": AuthHMACSHA512_256, "hmac-sha2-512": AuthHMACSHA512_256,
}

// setkeyKey reads a key token: 0x-prefixed hex, or a quoted string whose
// bytes are the key.
func setkeyKey(t skToken) (Key, error) {
	if t.quoted {
		return Key(t.text), nil
	}
	if !strings.HasPrefix(t.text, "0x") && !strings.HasPrefix(t.text, "0X") {
		return nil, errors.New("missing key: want 0x-prefixed hex or a \"quoted string\"")
	}
	return ParseKeyHex(t.text)
}

// add imports: add [-46n] src dst esp|esp-udp spi [extensions] -E ealgo key [-A aalgo key] ;
func (p *setkeyParser) add(toks []skToken, head string) {
	a := &args{toks: toks, i: 1}
	a.skipFamilyFlags()
	line := toks[0].line
	var pos []skToken
	for len(pos) < 4 && a.more() {
		t, _ := a.next()
		pos = append(pos, t)
	}
	if len(pos) < 4 {
		p.fail(line, head, "", errors.New("want add src dst esp spi …"))
		return
	}
	s := &SA{Mode: Transport}
	var sport, dport uint16
	var err error
	if s.Src, sport, err = parseHostPort(pos[0].text); err != nil {
		p.fail(pos[0].line, head, "src", err)
		return
	}
	if s.Dst, dport, err = parseHostPort(pos[1].text); err != nil {
		p.fail(pos[1].line, head, "dst", err)
		return
	}
	switch pos[2].text {
	case "esp":
		if sport != 0 || dport != 0 {
			p.fail(pos[2].line, head, "src/dst", errors.New("ports are for esp-udp"))
			return
		}
	case "esp-udp":
		s.Encap = EncapUDP
		s.SrcPort, s.DstPort = cmp0(sport, DefaultNATTPort), cmp0(dport, DefaultNATTPort)
	default:
		p.fail(pos[2].line, head, "protocol", fmt.Errorf("%s: only esp and esp-udp SAs are supported", secret.Word(pos[2].text, "esp", "esp-udp")))
		return
	}
	spi, err := strconv.ParseUint(pos[3].text, 0, 32)
	if err != nil {
		p.fail(pos[3].line, head, "spi", fmt.Errorf("%s is not a 32-bit number", secret.Number(pos[3].text)))
		return
	}
	s.SPI = uint32(spi)
	head = fmt.Sprintf("%s %s %s %s %#x", toks[0].text, s.Src, s.Dst, pos[2].text, s.SPI)

	var reqid uint32
	sawEnc, sawAuth := false, false
	for a.more() {
		opt, _ := a.next()
		if opt.quoted {
			p.fail(opt.line, head, "", errors.New("a quoted string where an option belongs"))
			return
		}
		val := func() (skToken, bool) {
			t, ok := a.next()
			if !ok {
				p.fail(opt.line, head, opt.text, errors.New("missing value"))
			}
			return t, ok
		}
		num := func(bits int) (uint64, bool) {
			t, ok := val()
			if !ok {
				return 0, false
			}
			n, err := strconv.ParseUint(t.text, 10, bits)
			if err != nil || t.quoted {
				p.fail(t.line, head, opt.text, fmt.Errorf("%s is not a number", secret.Number(t.text)))
				return 0, false
			}
			return n, true
		}
		switch opt.text {
		case "-m":
			t, ok := val()
			if !ok {
				return
			}
			switch t.text {
			case "tunnel":
				s.Mode = Tunnel
			case "transport", "any":
				// any is setkey's default, which kernels treat as transport.
				s.Mode = Transport
			default:
				p.fail(t.line, head, "-m", fmt.Errorf("%s, want tunnel, transport or any", secret.Word(t.text, "tunnel", "transport", "any")))
				return
			}
		case "-r":
			// setkey(8): "window size of bytes"; espgw counts packets.
			n, ok := num(32)
			if !ok {
				return
			}
			if n*8 > MaxReplayWindow {
				p.fail(opt.line, head, "-r", fmt.Errorf("%d bytes is a window of %d packets, more than %d", n, n*8, MaxReplayWindow))
				return
			}
			s.ReplayWindow = int(n * 8)
		case "-u":
			n, ok := num(32)
			if !ok {
				return
			}
			reqid = uint32(n)
		case "-f":
			t, ok := val()
			if !ok {
				return
			}
			switch t.text {
			case "zero-pad", "random-pad", "seq-pad", "nocyclic-seq", "cyclic-seq":
				// espgw pads 1, 2, 3 … (RFC 4303) and never cycles.
			default:
				p.fail(t.line, head, "-f", fmt.Errorf("%s, want zero-pad, random-pad, seq-pad or nocyclic-seq", secret.Word(t.text, "zero-pad", "random-pad", "seq-pad", "nocyclic-seq", "cyclic-seq")))
				return
			}
		case "-lh", "-ls", "-bh", "-bs":
			n, ok := num(64)
			if !ok {
				return
			}
			l := &s.Hard
			if opt.text[2] == 's' {
				l = &s.Soft
			}
			if opt.text[1] == 'l' {
				if n > uint64(1<<63-1)/uint64(time.Second) {
					p.fail(opt.line, head, opt.text, fmt.Errorf("%d seconds is too long", n))
					return
				}
				l.Time = time.Duration(n) * time.Second
			} else {
				l.Bytes = n
			}
		case "-E":
			t, ok := val()
			if !ok {
				return
			}
			if t.quoted {
				p.fail(t.line, head, "-E", errors.New("a quoted key where the algorithm name belongs (was the algorithm left out?)"))
				return
			}
			c, known := setkeyCiphers[t.text]
			if !known {
				p.fail(t.line, head, "-E", fmt.Errorf("%s is not supported (want rijndael-cbc, aes-cbc, 3des-cbc, aes-ctr, aes-gcm-16, chacha20-poly1305, aes-gmac, aes-ccm-8, aes-ccm-12, aes-ccm-16 or null)", secret.Word(t.text, mapKeys(setkeyCiphers)...)))
				return
			}
			field := "-E " + t.text
			s.Suite.Cipher, sawEnc = c, true
			if c == CipherNull && (!a.more() || !a.peek().quoted && !strings.HasPrefix(a.peek().text, "0x")) {
				break // null takes no key
			}
			kt, ok := val()
			if !ok {
				return
			}
			if s.EncKey, err = setkeyKey(kt); err != nil {
				p.fail(kt.line, head, field, err)
				return
			}
			if !slices.Contains(s.Suite.EncKeyLens(), len(s.EncKey)) {
				p.fail(kt.line, head, field, fmt.Errorf("key is %d bytes, want %s", len(s.EncKey), lens(s.Suite.EncKeyLens())))
				return
			}
		case "-A":
			t, ok := val()
			if !ok {
				return
			}
			if t.quoted {
				p.fail(t.line, head, "-A", errors.New("a quoted key where the algorithm name belongs (was the algorithm left out?)"))
				return
			}
			au, known := setkeyAuths[t.text]
			if !known {
				p.fail(t.line, head, "-A", fmt.Errorf("%s is not supported (want hmac-sha1, hmac-sha256, hmac-sha384, hmac-sha512, hmac-md5 or null)", secret.Word(t.text, mapKeys(setkeyAuths)...)))
				return
			}
			field := "-A " + t.text
			s.Suite.Auth, sawAuth = au, true
			if au == AuthNone && (!a.more() || !a.peek().quoted && !strings.HasPrefix(a.peek().text, "0x")) {
				break
			}
			kt, ok := val()
			if !ok {
				return
			}
			if s.AuthKey, err = setkeyKey(kt); err != nil {
				p.fail(kt.line, head, field, err)
				return
			}
			if len(s.AuthKey) != s.Suite.AuthKeyLen() {
				p.fail(kt.line, head, field, fmt.Errorf("key is %d bytes, want %d", len(s.AuthKey), s.Suite.AuthKeyLen()))
				return
			}
		case "-e", "-C", "-ctx":
			p.fail(opt.line, head, opt.text, errors.New("not supported (only ESP with -E and -A)"))
			return
		default:
			p.fail(opt.line, head, "", fmt.Errorf("unknown option %s", secret.Word(opt.text, setkeyOptions...)))
			return
		}
	}
	if !sawEnc {
		p.fail(line, head, "-E", errors.New("missing: an ESP SA needs -E ealgo key"))
		return
	}
	_ = sawAuth
	if err := s.Validate(); err != nil {
		p.fail(line, head, "", err)
		return
	}
	if prev, dup := p.bySPIDst[spiDst{s.SPI, s.Dst}]; dup {
		p.fail(line, head, "spi", fmt.Errorf("duplicate SPI for dst %s (also added on line %d)", s.Dst, p.lines[prev]))
		return
	}
	if reqid != 0 {
		if prev, dup := p.reqids[reqid]; dup {
			p.fail(line, head, "-u", fmt.Errorf("reqid %d is also used by SA %#x (line %d)", reqid, prev.SPI, p.lines[prev]))
			return
		}
		p.reqids[reqid] = s
	}
	p.sas = append(p.sas, s)
	p.lines[s] = line
	p.bySPIDst[spiDst{s.SPI, s.Dst}] = s
	if ends := (saEnds{s.Mode, s.Src, s.Dst}); p.byEnds[ends] == nil {
		p.byEnds[ends] = s
	}
}

func cmp0(v, def uint16) uint16 {
	if v == 0 {
		return def
	}
	return v
}

// delete removes an SA added earlier: delete [-46n] src dst esp spi ;
func (p *setkeyParser) delete(toks []skToken, head string) {
	a := &args{toks: toks, i: 1}
	a.skipFamilyFlags()
	if len(toks)-a.i != 4 {
		p.fail(toks[0].line, head, "", errors.New("want delete src dst esp spi"))
		return
	}
	src, _, err1 := parseHostPort(toks[a.i].text)
	dst, _, err2 := parseHostPort(toks[a.i+1].text)
	spi, err3 := strconv.ParseUint(toks[a.i+3].text, 0, 32)
	if err := errors.Join(err1, err2, err3); err != nil {
		p.fail(toks[0].line, head, "", err)
		return
	}
	if s := p.bySPIDst[spiDst{uint32(spi), dst}]; s != nil && s.Src == src {
		i := slices.Index(p.sas, s)
		p.sas = slices.Delete(p.sas, i, i+1)
		delete(p.bySPIDst, spiDst{s.SPI, s.Dst})
		for id, r := range p.reqids {
			if r == s {
				delete(p.reqids, id)
			}
		}
		if ends := (saEnds{s.Mode, s.Src, s.Dst}); p.byEnds[ends] == s {
			delete(p.byEnds, ends)
			// The next SA of these endpoints, in the order added, binds
			// their policies now.
			for _, o := range p.sas {
				if o.Mode == s.Mode && o.Src == s.Src && o.Dst == s.Dst {
					p.byEnds[ends] = o
					break
				}
			}
		}
		return
	}
	p.fail(toks[0].line, head, "", errors.New("no such SA was added before"))
}

// spdadd imports: spdadd [-46n] src_range dst_range upperspec -P dir [prio …] discard|none|ipsec rule ;
func (p *setkeyParser) spdadd(toks []skToken, head string) {
	a := &args{toks: toks, i: 1}
	a.skipFamilyFlags()
	line := toks[0].line
	if a.peek().text == "tagged" {
		p.fail(line, head, "", errors.New("tagged policies are not supported"))
		return
	}
	var sel Selector
	for _, side := range []struct {
		name string
		pfx  *netip.Prefix
		port *PortRange
	}{{"src_range", &sel.Src, &sel.SrcPorts}, {"dst_range", &sel.Dst, &sel.DstPorts}} {
		t, ok := a.next()
		if !ok {
			p.fail(line, head, side.name, errors.New("missing"))
			return
		}
		host, port, err := splitBracketPort(t.text)
		if err == nil {
			*side.pfx, err = ParsePrefix(host)
		}
		if err == nil && port != "" && port != "any" {
			var n uint64
			n, err = strconv.ParseUint(port, 10, 16)
			if err != nil {
				err = fmt.Errorf("port %s is not a number", secret.Number(port))
			}
			*side.port = PortRange{uint16(n), uint16(n)}
		}
		if err != nil {
			p.fail(t.line, head, side.name, err)
			return
		}
		if side.pfx.Bits() == 0 {
			*side.pfx = netip.Prefix{} // 0.0.0.0/0 and ::/0 match any
		}
	}
	t, ok := a.next()
	if !ok {
		p.fail(line, head, "upperspec", errors.New("missing"))
		return
	}
	proto, err := ParseProto(t.text)
	if err != nil {
		p.fail(t.line, head, "upperspec", err)
		return
	}
	sel.Proto = proto
	if (sel.SrcPorts != PortRange{} || sel.DstPorts != PortRange{}) && !HasPorts(proto) {
		p.fail(t.line, head, "upperspec", fmt.Errorf("ports need tcp, udp or sctp, not %s", ProtoName(proto)))
		return
	}
	if a.more() && !strings.HasPrefix(a.peek().text, "-") {
		p.fail(a.line(), head, "upperspec", errors.New("ICMP type/code and GRE key selectors are not supported"))
		return
	}
	if opt, _ := a.next(); opt.text != "-P" {
		p.fail(a.line(), head, "", fmt.Errorf("want -P direction policy, got %s", secret.Word(opt.text, "-P")))
		return
	}
	dt, _ := a.next()
	dir := dt.text
	if dir != "out" && dir != "in" && dir != "fwd" {
		p.fail(dt.line, head, "-P", fmt.Errorf("direction %s, want out, in or fwd", secret.Word(dir, "out", "in", "fwd")))
		return
	}
	pol := Policy{Selector: sel}
	if a.peek().text == "prio" || a.peek().text == "priority" {
		a.next()
		prio, err := parseSetkeyPriority(a)
		if err != nil {
			p.fail(a.line(), head, "priority", err)
			return
		}
		// setkey puts higher priorities first; espgw consults lower values first.
		pol.Priority = -prio
	}
	at, _ := a.next()
	pp := pendingPolicy{head: head, line: line, dir: dir, pol: pol}
	switch at.text {
	case "discard":
		pp.pol.Action = Discard
	case "none":
		pp.pol.Action = Bypass
	case "ipsec":
		pp.pol.Action = Protect
		rt, ok := a.next()
		if !ok {
			p.fail(at.line, head, "ipsec", errors.New("missing esp/mode/src-dst/level"))
			return
		}
		rule, err := parseIPsecRule(rt.text)
		if err != nil {
			p.fail(rt.line, head, "ipsec", err)
			return
		}
		pp.rule = rule
		pp.where = rt.text
	default:
		p.fail(at.line, head, "-P "+dir, fmt.Errorf("%s, want discard, none or ipsec", secret.Word(at.text, "discard", "none", "ipsec")))
		return
	}
	if a.more() {
		p.fail(a.line(), head, "", errors.New("more than one rule (SA bundles are not supported) or extra words"))
		return
	}
	p.spd = append(p.spd, pp)
}

// parseSetkeyPriority reads N, or low|def|high [+|- N].
func parseSetkeyPriority(a *args) (int, error) {
	t, ok := a.next()
	if !ok {
		return 0, errors.New("missing")
	}
	bases := map[string]int{"low": -1 << 30, "def": 0, "high": 1 << 30}
	base, isBase := bases[t.text]
	if !isBase {
		n, err := strconv.ParseInt(t.text, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%s is not a priority", secret.Value(t.text, "low", "def", "high"))
		}
		return int(n), nil
	}
	sign, rest := 0, ""
	switch nt := a.peek().text; {
	case nt == "+" || nt == "-":
		a.next()
		sign = map[string]int{"+": 1, "-": -1}[nt]
		o, _ := a.next()
		rest = o.text
	case strings.HasPrefix(nt, "+") && len(nt) > 1:
		a.next()
		sign, rest = 1, nt[1:]
	case strings.HasPrefix(nt, "-") && len(nt) > 1 && nt[1] >= '0' && nt[1] <= '9':
		a.next()
		sign, rest = -1, nt[1:]
	}
	if sign == 0 {
		return base, nil
	}
	off, err := strconv.ParseUint(rest, 10, 30)
	if err != nil {
		return 0, fmt.Errorf("offset %s is not a number", secret.Number(rest))
	}
	return base + sign*int(off), nil
}

// parseIPsecRule reads esp/tunnel/A-B/level or esp/transport//level.
func parseIPsecRule(s string) (*ipsecRule, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 4 {
		return nil, fmt.Errorf("%s: want esp/mode/src-dst/level", secret.Word(s, "esp/transport//require"))
	}
	if parts[0] != "esp" {
		return nil, fmt.Errorf("%s: only esp rules are supported", secret.Word(parts[0], "esp"))
	}
	r := &ipsecRule{}
	switch parts[1] {
	case "tunnel":
		r.mode = Tunnel
		src, dst, ok := strings.Cut(parts[2], "-")
		if !ok {
			return nil, errors.New("tunnel rule needs src-dst endpoints")
		}
		var err1, err2 error
		r.src, _, err1 = parseHostPort(src)
		r.dst, _, err2 = parseHostPort(dst)
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
	case "transport":
		r.mode = Transport
		if parts[2] != "" {
			return nil, errors.New("transport rule takes no endpoints")
		}
	default:
		return nil, fmt.Errorf("mode %s, want tunnel or transport", secret.Word(parts[1], "tunnel", "transport"))
	}
	level, id, hasID := strings.Cut(parts[3], ":")
	switch level {
	case "default", "use", "require", "unique":
	default:
		return nil, fmt.Errorf("level %s, want default, use, require or unique", secret.Word(level, "default", "use", "require", "unique"))
	}
	if hasID {
		n, err := strconv.ParseUint(id, 10, 32)
		if err != nil || level != "unique" {
			return nil, fmt.Errorf("%s: want unique:N", secret.Word(parts[3], "unique:1"))
		}
		r.reqid = uint32(n)
	}
	return r, nil
}

// resolvePolicies binds every spdadd to its SA: out policies become SPD
// entries, in and fwd ipsec policies become selectors of their SA.
func (p *setkeyParser) resolvePolicies(c *Config) {
	for _, pp := range p.spd {
		if pp.rule == nil {
			if pp.dir == "out" {
				c.SPD = append(c.SPD, pp.pol)
			}
			// Inbound none and discard have no counterpart: inbound traffic
			// is checked against the selectors of the SA it arrived on.
			continue
		}
		s, err := p.findRuleSA(pp)
		if err != nil {
			p.fail(pp.line, pp.head, "ipsec "+pp.where, err) // where was read as a rule: no key
			continue
		}
		if pp.dir == "out" {
			pp.pol.SA, pp.pol.SPI = s, s.SPI
			if err := checkSelectorFits(pp.pol.Selector, s); err != nil {
				p.fail(pp.line, pp.head, "", err)
				continue
			}
			c.SPD = append(c.SPD, pp.pol)
			continue
		}
		if !slices.Contains(s.Selectors, pp.pol.Selector) {
			s.Selectors = append(s.Selectors, pp.pol.Selector)
		}
	}
}

func (p *setkeyParser) findRuleSA(pp pendingPolicy) (*SA, error) {
	r := pp.rule
	if r.reqid != 0 {
		s, ok := p.reqids[r.reqid]
		if !ok {
			return nil, fmt.Errorf("no SA added with -u %d", r.reqid)
		}
		if s.Mode != r.mode {
			return nil, fmt.Errorf("SA %#x (-u %d) is in %s mode, the policy in %s mode", s.SPI, r.reqid, s.Mode, r.mode)
		}
		return s, nil
	}
	src, dst := r.src, r.dst
	if r.mode == Transport {
		sel := pp.pol.Selector
		if !sel.Src.IsSingleIP() || !sel.Dst.IsSingleIP() {
			return nil, errors.New("a transport policy without unique:N needs single-address ranges to find its SA")
		}
		src, dst = sel.Src.Addr(), sel.Dst.Addr()
	}
	if s := p.byEnds[saEnds{r.mode, src, dst}]; s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("no %s-mode SA from %s to %s was added", r.mode, src, dst)
}
