package sa

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/internal/errlist"
	"github.com/espgw/espgw/internal/secret"
)

// Config is the content of an SA file: the SAs and the outbound policies.
type Config struct {
	SAs []*SA
	SPD []Policy
}

// LoadFile reads the SAs of an SA file (YAML, or setkey(8) lines).
func LoadFile(path string) ([]*SA, error) {
	c, err := Load(path)
	if err != nil {
		return nil, err
	}
	return c.SAs, nil
}

// Load reads an SA file: YAML (see the package doc), setkey(8) add and
// spdadd statements when the first statement of the file is a setkey
// command, `ip xfrm state` output, `ip xfrm … add` commands, or Wireshark's
// esp_sa table (see DetectFormat).
func Load(path string) (*Config, error) {
	data, err := ReadFileAtMost(path, MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("load SA file: %w", err)
	}
	return ParseConfig(filepath.Base(path), data)
}

// Parse reads the SAs of an SA file's content; name is used in errors.
func Parse(name string, data []byte) ([]*SA, error) {
	c, err := ParseConfig(name, data)
	if err != nil {
		return nil, err
	}
	return c.SAs, nil
}

// ParseConfig reads an SA file's content in any format DetectFormat knows
// (YAML, setkey(8), ip xfrm state output or commands, Wireshark's esp_sa);
// name is used in errors. Every problem found is reported (up to a bound), each as a
// *ConfigError naming the file, line, entry and field.
func ParseConfig(name string, data []byte) (*Config, error) {
	return ParseFormat(name, data, DetectFormat(data))
}

// ParseYAML reads a YAML SA file.
func ParseYAML(name string, data []byte) (*Config, error) {
	if err := CheckYAMLNodes(name, data, MaxYAMLNodes); err != nil {
		return nil, &ConfigError{File: name, Err: err}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, &ConfigError{File: name, Err: yamlSyntax(err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &ConfigError{File: name, Line: extra.Line, Err: errors.New("more than one YAML document")}
	}
	p := &yamlParser{file: name}
	c := p.config(&doc)
	slices.SortStableFunc(p.errs.Kept(), func(a, b error) int { return lineOf(a) - lineOf(b) })
	if err := p.errs.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

// yamlSyntax keeps the library's syntax message ("yaml: line 3: …"),
// without the values it sometimes quotes (an anchor's name).
func yamlSyntax(err error) error {
	if err.Error() == "EOF" {
		return errors.New("empty file: want a mapping with an sa: list")
	}
	return errors.New(secret.Scrub(err.Error()))
}

// lineOf orders errors by line; the "too many errors" note, without a
// line, goes last.
func lineOf(err error) int {
	var ce *ConfigError
	if errors.As(err, &ce) && ce.Line > 0 {
		return ce.Line
	}
	return math.MaxInt32
}

type yamlParser struct {
	file string
	errs errlist.List
	// spdOnly reads an spd: list whose SAs come from elsewhere: protect
	// policies keep their SPI and NewSPD binds them.
	spdOnly bool
	merges  int // merge keys expanded so far
}

func (p *yamlParser) fail(n *yaml.Node, entry, field string, err error) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs.Add(&ConfigError{File: p.file, Line: line, Entry: entry, Field: field, Err: err})
}

func (p *yamlParser) failf(n *yaml.Node, entry, field, format string, args ...any) {
	p.fail(n, entry, field, fmt.Errorf(format, args...))
}

// field is one key: value pair of a mapping.
type field struct {
	key, val *yaml.Node
}

// maxAliasDepth bounds alias and merge-key chains: a YAML alias may point
// into its own anchor.
const maxAliasDepth = 8

// maxMerges bounds the merge keys expanded in one file, so that merges of
// merges cannot multiply into a long parse.
const maxMerges = 10000

// resolve follows aliases (*name) to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < maxAliasDepth; i++ {
		n = n.Alias
	}
	return n
}

// fields reads a mapping, reporting unknown and repeated keys. Merge keys
// (<<: *defaults) fill in the fields the mapping does not set itself.
func (p *yamlParser) fields(m *yaml.Node, entry string, known []string) map[string]field {
	return p.fieldsDepth(m, entry, known, 0)
}

func (p *yamlParser) fieldsDepth(m *yaml.Node, entry string, known []string, depth int) map[string]field {
	out := make(map[string]field)
	m = resolve(m)
	if m.Kind != yaml.MappingNode {
		p.failf(m, entry, "", "want a mapping of fields, got a %s", kindName(m))
		return out
	}
	var merges []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], resolve(m.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.failf(k, entry, "", "field name is a %s, want a name", kindName(k))
			continue
		}
		if k.Value == "<<" && k.Tag == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if !slices.Contains(known, k.Value) {
			p.failf(k, entry, "", "unknown field %s (want one of %s)", secret.Word(k.Value, known...), strings.Join(known, ", "))
			continue
		}
		if prev, dup := out[k.Value]; dup {
			p.failf(k, entry, k.Value, "given twice (first on line %d)", prev.key.Line)
			continue
		}
		out[k.Value] = field{k, v}
	}
	for _, mv := range merges {
		p.merges++
		if depth >= maxAliasDepth || p.merges > maxMerges {
			p.failf(mv, entry, "<<", "merges nested more than %d deep or more than %d in all", maxAliasDepth, maxMerges)
			break
		}
		srcs := []*yaml.Node{mv}
		if mv.Kind == yaml.SequenceNode {
			srcs = mv.Content // in YAML's order of precedence
		}
		for _, src := range srcs {
			for name, f := range p.fieldsDepth(src, entry, known, depth+1) {
				if _, set := out[name]; !set {
					out[name] = f
				}
			}
		}
	}
	return out
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return "single value"
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	case yaml.AliasNode:
		return "alias"
	}
	return "document"
}

// scalar returns the text of a single-value field exactly as written, so
// that 0x0011… stays a string and keeps its leading zeros.
func (p *yamlParser) scalar(f field, entry string) (string, bool) {
	if f.val.Kind != yaml.ScalarNode {
		p.failf(f.key, entry, f.key.Value, "want a single value, got a %s", kindName(f.val))
		return "", false
	}
	return f.val.Value, true
}

func (p *yamlParser) config(doc *yaml.Node) *Config {
	root := doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = resolve(doc.Content[0])
	}
	fs := p.fields(root, "", []string{"sa", "spd"})
	c := &Config{}
	saList, ok := fs["sa"]
	if !ok && p.spdOnly {
		saList = field{val: &yaml.Node{Kind: yaml.SequenceNode}}
	} else if !ok {
		if root.Kind == yaml.MappingNode {
			p.failf(root, "", "sa", "missing: an SA file needs an sa: list")
		}
		return c
	}
	if saList.val.Kind != yaml.SequenceNode {
		p.failf(saList.val, "", "sa", "want a list of SAs, got a %s", kindName(saList.val))
		return c
	}
	if len(saList.val.Content) == 0 && !p.spdOnly {
		p.failf(saList.val, "", "sa", "empty list")
	}
	type seen struct {
		line  int
		entry string
	}
	bySPIDst := make(map[spiDst]seen)
	for i, n := range saList.val.Content {
		n = resolve(n)
		s, entry := p.sa(i, n)
		if s == nil {
			continue
		}
		k := spiDst{s.SPI, s.Dst}
		if prev, dup := bySPIDst[k]; dup {
			p.failf(n, entry, "spi", "duplicate SPI for dst %s (also %s on line %d)", s.Dst, prev.entry, prev.line)
			continue
		}
		bySPIDst[k] = seen{n.Line, entry}
		c.SAs = append(c.SAs, s)
	}
	if spd, ok := fs["spd"]; ok {
		if spd.val.Kind != yaml.SequenceNode {
			p.failf(spd.val, "", "spd", "want a list of policies, got a %s", kindName(spd.val))
			return c
		}
		idx := NewSPIIndex(c.SAs)
		for i, n := range spd.val.Content {
			if pol, ok := p.policy(i, resolve(n), idx); ok {
				c.SPD = append(c.SPD, pol)
			}
		}
	}
	return c
}

var saFields = []string{
	"spi", "mode", "src", "dst", "encap", "sport", "dport",
	"enc", "enc-key", "auth", "auth-key", "esn", "replay-window",
	"lifetimes", "initial-seq", "tfc-pad", "selectors",
	"dscp", "decap-dscp", "df", "ttl", "if-id", "output-mark",
}

// sa reads one entry of the sa: list. It returns nil if the entry has errors
// (all of them reported).
func (p *yamlParser) sa(i int, n *yaml.Node) (*SA, string) {
	entry := fmt.Sprintf("sa[%d]", i)
	before := p.errs.Len()
	s := &SA{ReplayWindow: 64}
	// The SPI names the entry in every other error, so it is read first
	// (by a silent pass: the errors come with the entry's name below).
	if f, ok := (&yamlParser{file: p.file}).fields(n, entry, saFields)["spi"]; ok {
		if v, ok := p.scalar(f, entry); ok {
			spi, err := strconv.ParseUint(v, 0, 32)
			if err != nil {
				p.failf(f.val, entry, "spi", "%s is not a 32-bit number (write 0x1001 or 4097)", secret.Number(v))
			} else {
				s.SPI = uint32(spi)
				entry = fmt.Sprintf("sa[%d] (spi %#x)", i, spi)
			}
		}
	} else if resolve(n).Kind == yaml.MappingNode {
		p.failf(n, entry, "spi", "missing")
	}
	fs := p.fields(n, entry, saFields)
	if resolve(n).Kind != yaml.MappingNode {
		return nil, entry
	}
	str := func(name string) (field, string, bool) {
		f, ok := fs[name]
		if !ok {
			return f, "", false
		}
		v, ok := p.scalar(f, entry)
		return f, v, ok
	}
	if f, v, ok := str("mode"); ok {
		switch v {
		case "tunnel":
			s.Mode = Tunnel
		case "transport":
			s.Mode = Transport
		default:
			p.failf(f.val, entry, "mode", "%s, want tunnel or transport", secret.Word(v, "tunnel", "transport"))
		}
	}
	for _, a := range []struct {
		name string
		dst  *netip.Addr
	}{{"src", &s.Src}, {"dst", &s.Dst}} {
		f, v, ok := str(a.name)
		if !ok {
			if _, given := fs[a.name]; !given {
				p.failf(n, entry, a.name, "missing (the outer IPv4 or IPv6 address)")
			}
			continue
		}
		addr, err := netip.ParseAddr(v)
		if err != nil || addr.Zone() != "" {
			p.failf(f.val, entry, a.name, "%s is not an IPv4 or IPv6 address", secret.Number(v))
			continue
		}
		*a.dst = addr
	}
	if s.Src.IsValid() && s.Dst.IsValid() && s.Src.Is4() != s.Dst.Is4() {
		p.failf(fs["dst"].val, entry, "dst", "%s is not of the same address family as src %s", s.Dst, s.Src)
	} else if s.Dst.IsValid() && s.Dst.IsUnspecified() {
		p.failf(fs["dst"].val, entry, "dst", "%s is the unspecified address", s.Dst)
	}

	if f, v, ok := str("encap"); ok {
		switch v {
		case "none":
		case "udp":
			s.Encap = EncapUDP
			s.SrcPort, s.DstPort = DefaultNATTPort, DefaultNATTPort
		default:
			p.failf(f.val, entry, "encap", "%s, want none or udp", secret.Word(v, "none", "udp"))
		}
	}
	for _, a := range []struct {
		name string
		dst  *uint16
	}{{"sport", &s.SrcPort}, {"dport", &s.DstPort}} {
		f, v, ok := str(a.name)
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(v, 10, 16)
		if err != nil || port == 0 {
			p.failf(f.val, entry, a.name, "%s is not a port 1..65535", secret.Number(v))
			continue
		}
		if s.Encap != EncapUDP {
			p.failf(f.val, entry, a.name, "a port needs encap: udp")
			continue
		}
		*a.dst = uint16(port)
	}

	suiteOK := true
	if f, v, ok := str("enc"); ok {
		c, err := ParseCipher(v)
		if err != nil {
			p.failf(f.val, entry, "enc", "unknown cipher %s (want %s)", secret.Word(v, cipherNames[:]...), CipherList)
			suiteOK = false
		}
		s.Suite.Cipher = c
	} else {
		suiteOK = false
		if _, given := fs["enc"]; !given {
			p.failf(n, entry, "enc", "missing (%s)", CipherList)
		}
	}
	if f, v, ok := str("auth"); ok {
		a, err := ParseAuth(v)
		if err != nil {
			p.failf(f.val, entry, "auth", "unknown integrity algorithm %s (want hmac-sha1-96, hmac-sha2-256-128, hmac-sha2-384-192, hmac-sha2-512-256, hmac-md5-96 or none)", secret.Word(v, authNames[:]...))
			suiteOK = false
		}
		s.Suite.Auth = a
	} else if _, given := fs["auth"]; given {
		suiteOK = false
	} else if suiteOK && !s.Suite.Cipher.IsAEAD() {
		p.failf(n, entry, "auth", "missing: %s needs hmac-sha1-96, hmac-sha2-256-128, hmac-sha2-384-192, hmac-sha2-512-256 or hmac-md5-96", s.Suite.Cipher)
		suiteOK = false
	}
	if suiteOK {
		if err := s.Suite.Validate(); err != nil {
			f, ok := fs["auth"]
			if !ok {
				f = fs["enc"]
			}
			p.fail(f.val, entry, f.key.Value, err)
			suiteOK = false
		}
	}
	if suiteOK {
		s.EncKey = p.key(fs, n, entry, "enc-key", s.Suite.EncKeyLens())
		s.AuthKey = p.key(fs, n, entry, "auth-key", []int{s.Suite.AuthKeyLen()})
	}

	if f, v, ok := str("esn"); ok {
		b, err := parseBool(v)
		if err != nil {
			p.failf(f.val, entry, "esn", "%s, want true or false", secret.Word(v, "true", "false"))
		}
		s.ESN = b
	}
	if f, v, ok := str("replay-window"); ok {
		w, err := strconv.ParseUint(v, 10, 32)
		if err != nil || w > MaxReplayWindow {
			p.failf(f.val, entry, "replay-window", "%s, want 0..%d packets (0 turns anti-replay off)", secret.Number(v), MaxReplayWindow)
		}
		s.ReplayWindow = int(w)
	}
	if f, v, ok := str("initial-seq"); ok {
		seq, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			p.failf(f.val, entry, "initial-seq", "%s is not a number", secret.Number(v))
		} else if !s.ESN && seq > math.MaxUint32 {
			p.failf(f.val, entry, "initial-seq", "%d does not fit 32 bits: set esn: true", seq)
		}
		s.InitialSeq = seq
	}
	if f, v, ok := str("tfc-pad"); ok {
		pad, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			p.failf(f.val, entry, "tfc-pad", "%s, want 0..65535 bytes", secret.Number(v))
		}
		s.TFCPad = int(pad)
	}
	p.header(str, entry, s)
	if f, ok := fs["lifetimes"]; ok {
		s.Soft, s.Hard = p.lifetimes(f, entry)
	}
	if f, ok := fs["selectors"]; ok {
		if f.val.Kind != yaml.SequenceNode {
			p.failf(f.key, entry, "selectors", "want a list, got a %s", kindName(f.val))
		} else {
			for j, sn := range f.val.Content {
				sn = resolve(sn)
				sel, ok := p.selector(sn, fmt.Sprintf("%s selectors[%d]", entry, j), nil)
				if ok && s.Mode == Transport {
					for _, pf := range []netip.Prefix{sel.Src, sel.Dst} {
						if pf.IsValid() && s.Dst.IsValid() && pf.Addr().Is4() != s.Dst.Is4() {
							p.failf(sn, fmt.Sprintf("%s selectors[%d]", entry, j), "", "%s is of another address family than this transport-mode SA", pf)
							ok = false
						}
					}
				}
				if ok {
					s.Selectors = append(s.Selectors, sel)
				}
			}
		}
	}
	if p.errs.Len() > before {
		return nil, entry
	}
	// The checks above are field by field; Validate is the whole-SA guard
	// (the same one NewSAD applies), reported at the entry.
	if err := s.Validate(); err != nil {
		p.fail(n, entry, "", err)
		return nil, entry
	}
	return s, entry
}

// key reads enc-key or auth-key: hex (0x optional, quoted or not), or
// random for a fresh key of the right length. want lists the valid lengths;
// a key of length 0 may be left out.
func (p *yamlParser) key(fs map[string]field, n *yaml.Node, entry, name string, want []int) Key {
	f, ok := fs[name]
	if !ok {
		if !slices.Contains(want, 0) {
			p.failf(n, entry, name, "missing (%s bytes)", lens(want))
		}
		return nil
	}
	v, ok := p.scalar(f, entry)
	if !ok {
		return nil
	}
	if slices.Equal(want, []int{0}) {
		if v == "" || f.val.Tag == "!!null" {
			return nil
		}
		p.failf(f.val, entry, name, "not used with this suite: leave it out")
		return nil
	}
	if strings.HasPrefix(v, "random") {
		n := want[0]
		if bits, isSized := strings.CutPrefix(v, "random-"); isSized && len(want) > 1 {
			b, err := strconv.Atoi(bits)
			if err != nil || (b != 128 && b != 192 && b != 256) {
				p.failf(f.val, entry, name, "%s, want random, random-128, random-192 or random-256", secret.Hidden(v))
				return nil
			}
			n = want[(b-128)/64]
		} else if v != "random" {
			p.failf(f.val, entry, name, "%s, want random (or random-128/192/256 for AES)", secret.Hidden(v))
			return nil
		}
		k, err := RandomKey(n)
		if err != nil {
			p.fail(f.val, entry, name, err)
		}
		return k
	}
	k, err := ParseKeyHex(v)
	if err != nil {
		p.fail(f.val, entry, name, err)
		return nil
	}
	if !slices.Contains(want, len(k)) {
		p.failf(f.val, entry, name, "%d bytes, want %s", len(k), lens(want))
		return nil
	}
	return k
}

func lens(want []int) string {
	if len(want) == 1 {
		return strconv.Itoa(want[0])
	}
	return fmt.Sprint(want)
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "yes", "on":
		return true, nil
	case "false", "no", "off":
		return false, nil
	}
	return false, errors.New("not a boolean")
}

func (p *yamlParser) lifetimes(f field, entry string) (soft, hard Lifetime) {
	fs := p.fields(f.val, entry+" lifetimes", []string{"soft", "hard"})
	read := func(name string) Lifetime {
		var l Lifetime
		lf, ok := fs[name]
		if !ok {
			return l
		}
		where := entry + " lifetimes " + name
		bs := p.fields(lf.val, where, []string{"bytes", "packets", "seconds", "time"})
		for k, bf := range bs {
			v, ok := p.scalar(bf, where)
			if !ok {
				continue
			}
			var err error
			switch k {
			case "bytes":
				l.Bytes, err = parseSize(v)
			case "packets":
				l.Packets, err = parseSize(v)
			case "seconds":
				var sec uint64
				sec, err = strconv.ParseUint(v, 10, 32)
				l.Time = time.Duration(sec) * time.Second
			case "time":
				l.Time, err = parseDuration(v)
			}
			if err != nil {
				p.fail(bf.val, where, k, err)
			}
		}
		if _, sec := bs["seconds"]; sec {
			if t, both := bs["time"]; both {
				p.failf(t.key, where, "time", "give seconds or time, not both")
			}
		}
		return l
	}
	soft, hard = read("soft"), read("hard")
	if err := checkLifetimes(soft, hard); err != nil {
		p.fail(f.key, entry, "lifetimes", err)
	}
	return soft, hard
}

// parseSize reads a count with an optional k, M, G (×1000) or Ki, Mi, Gi
// (×1024) suffix.
func parseSize(s string) (uint64, error) {
	mult := uint64(1)
	num := s
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseUint(strings.TrimSpace(num), 10, 64)
	if err != nil || n > math.MaxUint64/mult {
		return 0, fmt.Errorf("%s is not a count (write 1000000, 1M or 1Gi)", secret.Number(s))
	}
	return n * mult, nil
}

// parseDuration reads a Go duration (90s, 1h30m) or a number of seconds.
func parseDuration(s string) (time.Duration, error) {
	if sec, err := strconv.ParseUint(s, 10, 32); err == nil {
		return time.Duration(sec) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s is not a duration (write 3600, 1h or 90m)", secret.Number(s))
	}
	return d, nil
}

var selectorFields = []string{"src", "dst", "proto", "sport", "dport"}

// selector reads the selector fields of a mapping; extra names the other
// fields the mapping may hold (an SPD entry's).
func (p *yamlParser) selector(n *yaml.Node, entry string, extra []string) (Selector, bool) {
	before := p.errs.Len()
	fs := p.fields(n, entry, append(slices.Clip(selectorFields), extra...))
	return p.selectorFrom(fs, entry, n), p.errs.Len() == before
}

func (p *yamlParser) selectorFrom(fs map[string]field, entry string, n *yaml.Node) Selector {
	var sel Selector
	str := func(name string) (field, string, bool) {
		f, ok := fs[name]
		if !ok {
			return f, "", false
		}
		v, ok := p.scalar(f, entry)
		return f, v, ok
	}
	if f, v, ok := str("src"); ok {
		pf, err := ParsePrefix(v)
		if err != nil {
			p.fail(f.val, entry, "src", err)
		}
		sel.Src = pf
	}
	if f, v, ok := str("dst"); ok {
		pf, err := ParsePrefix(v)
		if err != nil {
			p.fail(f.val, entry, "dst", err)
		}
		sel.Dst = pf
	}
	if sel.Src.IsValid() && sel.Dst.IsValid() && sel.Src.Addr().Is4() != sel.Dst.Addr().Is4() {
		p.failf(fs["dst"].val, entry, "dst", "%s is not of the same address family as src %s", sel.Dst, sel.Src)
	}
	if f, v, ok := str("proto"); ok {
		pr, err := ParseProto(v)
		if err != nil {
			p.fail(f.val, entry, "proto", err)
		}
		sel.Proto = pr
	}
	for _, a := range []struct {
		name string
		dst  *PortRange
	}{{"sport", &sel.SrcPorts}, {"dport", &sel.DstPorts}} {
		f, v, ok := str(a.name)
		if !ok {
			continue
		}
		r, err := ParsePortRange(v)
		if err != nil {
			p.fail(f.val, entry, a.name, err)
			continue
		}
		if r != (PortRange{}) && !HasPorts(sel.Proto) {
			p.failf(f.val, entry, a.name, "ports need proto tcp, udp, sctp or udplite, not %s", ProtoName(sel.Proto))
			continue
		}
		*a.dst = r
	}
	return sel
}

var policyFields = []string{"priority", "action", "sa"}

// policy reads one entry of the spd: list.
func (p *yamlParser) policy(i int, n *yaml.Node, sas SPIIndex) (Policy, bool) {
	entry := fmt.Sprintf("spd[%d]", i)
	before := p.errs.Len()
	fs := p.fields(n, entry, append(slices.Clip(selectorFields), policyFields...))
	if n.Kind != yaml.MappingNode {
		return Policy{}, false
	}
	sel := p.selectorFrom(fs, entry, n)
	pol := Policy{Selector: sel}
	if f, ok := fs["priority"]; ok {
		if v, ok := p.scalar(f, entry); ok {
			pr, err := strconv.ParseInt(v, 0, 32)
			if err != nil {
				p.failf(f.val, entry, "priority", "%s is not a number (lower is consulted first)", secret.Number(v))
			}
			pol.Priority = int(pr)
		}
	}
	f, ok := fs["action"]
	if !ok {
		p.failf(n, entry, "action", "missing (protect, bypass or discard)")
		return pol, false
	}
	v, ok := p.scalar(f, entry)
	if !ok {
		return pol, false
	}
	a, err := ParseAction(v)
	if err != nil {
		p.fail(f.val, entry, "action", err)
		return pol, false
	}
	pol.Action = a
	saf, hasSA := fs["sa"]
	switch {
	case a == Protect && !hasSA:
		p.failf(n, entry, "sa", "missing: a protect policy names the SPI of its outbound SA")
	case a != Protect && hasSA:
		p.failf(saf.key, entry, "sa", "only a protect policy names an SA")
	case a == Protect:
		v, ok := p.scalar(saf, entry)
		if !ok {
			break
		}
		spi, err := strconv.ParseUint(v, 0, 32)
		if err != nil {
			p.failf(saf.val, entry, "sa", "%s is not an SPI", secret.Number(v))
			break
		}
		if p.spdOnly {
			pol.SPI = uint32(spi)
			break
		}
		s, err := sas.Find(uint32(spi))
		if err != nil {
			p.fail(saf.val, entry, "sa", err)
			break
		}
		pol.SPI, pol.SA = s.SPI, s
		if err := checkSelectorFits(sel, s); err != nil {
			p.fail(n, entry, "", err)
		}
	}
	return pol, p.errs.Len() == before
}

// MaxFileSize bounds an SA file (YAML or setkey), and every file that may
// hold SAs inline (a gateway configuration, a scenario): 32 MiB holds the
// 100,000 SAs and 50,000 policies of a 50,000-tunnel gateway in YAML with
// 160-bit keys (19.5 MB) with room to spare, while a file meant to exhaust
// memory is refused before it is read.
const MaxFileSize = 32 << 20

// ReadFileAtMost reads a whole file of at most limit bytes, and refuses a
// larger one (or one that grows past limit while read, such as a device)
// with an error saying so.
func ReadFileAtMost(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%q is a directory", path)
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%q is %d bytes, larger than the %d bytes such a file may be", path, fi.Size(), limit)
	}
	return ReadAtMost(f, path, limit)
}

// ReadAtMost reads all of r, at most limit bytes, and refuses more with an
// error calling r name.
func ReadAtMost(r io.Reader, name string, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%q is larger than the %d bytes such a file may be", name, limit)
	}
	return data, nil
}
