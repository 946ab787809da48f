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
	"unsafe"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/internal/errlist"
	"github.com/espgw/espgw/internal/secret"
	"github.com/espgw/espgw/internal/yamlwalk"
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

// ParseYAML reads a YAML SA file: with the streaming reader (yamlstream.go)
// when the file is in the form it reads, else decoded whole by yaml.v3 (at
// most MaxYAMLNodes). Both give the same SAs and the same errors. data is
// not kept, and must not change during the call.
func ParseYAML(name string, data []byte) (*Config, error) {
	if c, err, ok := parseYAMLStream(name, data); ok {
		return c, err
	}
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
	c, err, _ := p.finish(p.config(&doc))
	return c, err
}

// parseYAMLStream reads an SA file with the streaming reader, entry by
// entry; ok is false when the file is outside what it reads.
func parseYAMLStream(name string, data []byte) (c *Config, err error, ok bool) {
	p := &yamlParser{file: name}
	b := newConfigBuilder(p)
	if checkBytes(data) != nil {
		return nil, nil, false
	}
	// The nodes point into data, which is not copied: nothing of it is
	// kept past the call (see fieldsDepth).
	r := &streamReader{src: unsafe.String(unsafe.SliceData(data), len(data))}
	if r.document(b) != nil {
		return nil, nil, false
	}
	return p.finish(b.c)
}

// finish sorts the problems found by line and returns them, or c.
func (p *yamlParser) finish(c *Config) (*Config, error, bool) {
	slices.SortStableFunc(p.errs.Kept(), func(a, b error) int { return lineOf(a) - lineOf(b) })
	if err := p.errs.Err(); err != nil {
		return nil, err, true
	}
	return c, nil, true
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
	walk    yamlwalk.Walker
}

func (p *yamlParser) fail(n *yaml.Node, entry, field string, err error) {
	if p.errs.Full() {
		p.errs.Skip()
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs.Add(&ConfigError{File: p.file, Line: line, Entry: entry, Field: field, Err: err})
}

func (p *yamlParser) failf(n *yaml.Node, entry, field, format string, args ...any) {
	if p.errs.Full() {
		p.errs.Skip()
		return
	}
	p.fail(n, entry, field, fmt.Errorf(format, args...))
}

type (
	field    = yamlwalk.Field
	fieldSet = yamlwalk.Fields
)

// resolve follows aliases (*name) to the node they name.
func resolve(n *yaml.Node) *yaml.Node { return yamlwalk.Resolve(n) }

func kindName(n *yaml.Node) string { return yamlwalk.KindName(n) }

// fields reads a mapping, reporting unknown and repeated keys. Merge keys
// (<<: *defaults) fill in the fields the mapping does not set itself.
func (p *yamlParser) fields(m *yaml.Node, entry string, known []string) fieldSet {
	fs, probs := p.walk.Fields(m, known, yamlwalk.Options{Noun: "field", Merge: true})
	for _, pr := range probs {
		p.fail(pr.Node, entry, pr.Field, errors.New(pr.Msg))
	}
	return fs
}

// scalar returns the text of a single-value field exactly as written, so
// that 0x0011… stays a string and keeps its leading zeros.
func (p *yamlParser) scalar(f field, entry string) (string, bool) {
	if f.Val.Kind != yaml.ScalarNode {
		p.failf(f.Key, entry, f.Key.Value, "want a single value, got a %s", kindName(f.Val))
		return "", false
	}
	return f.Val.Value, true
}

// scalarField is the field name of fs and its scalar text, with ok false
// when it is absent or (reported) not a single value.
func (p *yamlParser) scalarField(fs fieldSet, entry, name string) (f field, text string, ok bool) {
	if f, ok = fs.Get(name); !ok {
		return f, "", false
	}
	text, ok = p.scalar(f, entry)
	return f, text, ok
}

func (p *yamlParser) config(doc *yaml.Node) *Config {
	root := doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = resolve(doc.Content[0])
	}
	fs := p.fields(root, "", []string{"sa", "spd"})
	b := newConfigBuilder(p)
	saList, ok := fs.Get("sa")
	if !ok && p.spdOnly {
		saList = field{Val: &yaml.Node{Kind: yaml.SequenceNode}}
	} else if !ok {
		if root.Kind == yaml.MappingNode {
			p.failf(root, "", "sa", "missing: an SA file needs an sa: list")
		}
		return b.c
	}
	if saList.Val.Kind != yaml.SequenceNode {
		p.failf(saList.Val, "", "sa", "want a list of SAs, got a %s", kindName(saList.Val))
		return b.c
	}
	if len(saList.Val.Content) == 0 && !p.spdOnly {
		p.failf(saList.Val, "", "sa", "empty list")
	}
	for _, n := range saList.Val.Content {
		b.sa(resolve(n))
	}
	if spd, ok := fs.Get("spd"); ok {
		if spd.Val.Kind != yaml.SequenceNode {
			p.failf(spd.Val, "", "spd", "want a list of policies, got a %s", kindName(spd.Val))
			return b.c
		}
		for _, n := range spd.Val.Content {
			b.policy(resolve(n))
		}
	}
	return b.c
}

// configBuilder turns the entries of the sa: and spd: lists into a Config,
// one entry at a time: from a node tree or from the streaming reader.
type configBuilder struct {
	p        *yamlParser
	c        *Config
	bySPIDst map[saKey]seenSA
	idx      saFinder // the SAs by SPI, made when the first policy comes
	nSA      int
	nPolicy  int
	// keep, when set, takes each SA instead of c.SAs (until it fails, with
	// werr, or an entry has errors), and finder then finds the policies'
	// SAs; the policies keep only the SPI of theirs.
	keep   func(*SA) error
	werr   error
	finder func() saFinder
}

// saFinder finds a protect policy's SA by its SPI.
type saFinder interface {
	Find(spi uint32) (*SA, error)
}

type seenSA struct{ line, index int32 }

func newConfigBuilder(p *yamlParser) *configBuilder {
	return &configBuilder{p: p, c: &Config{}, bySPIDst: make(map[saKey]seenSA)}
}

// sa reads the next entry of the sa: list.
func (b *configBuilder) sa(n *yaml.Node) {
	i := b.nSA
	b.nSA++
	s, entry := b.p.sa(i, n)
	if s == nil {
		return
	}
	k := keyOf(s.SPI, s.Dst)
	if prev, dup := b.bySPIDst[k]; dup {
		b.p.failf(n, entry, "spi", "duplicate SPI for dst %s (also sa[%d] (spi %#x) on line %d)", s.Dst, prev.index, s.SPI, prev.line)
		return
	}
	b.bySPIDst[k] = seenSA{int32(n.Line), int32(i)}
	switch {
	case b.keep == nil:
		b.c.SAs = append(b.c.SAs, s)
	case b.werr == nil && b.p.errs.Len() == 0:
		b.werr = b.keep(s)
	}
}

// policy reads the next entry of the spd: list; every SA has been read.
func (b *configBuilder) policy(n *yaml.Node) {
	if b.idx == nil {
		if b.finder != nil {
			b.idx = b.finder()
		} else {
			b.idx = NewSPIIndex(b.c.SAs)
		}
		b.bySPIDst = nil
	}
	i := b.nPolicy
	b.nPolicy++
	if pol, ok := b.p.policy(i, n, b.idx); ok {
		if b.keep != nil {
			pol.SA = nil
		}
		b.c.SPD = append(b.c.SPD, pol)
	}
}

// list and entry make a configBuilder the streaming reader's sink.
func (b *configBuilder) list(name string, keyLine, line int) {}

func (b *configBuilder) entry(name string, n *yaml.Node) {
	if name == "sa" {
		b.sa(n)
	} else {
		b.policy(n)
	}
}

var saFields = []string{
	"spi", "mode", "src", "dst", "encap", "sport", "dport",
	"enc", "enc-key", "auth", "auth-key", "esn", "replay-window",
	"lifetimes", "initial-seq", "tfc-pad", "selectors",
	"dscp", "decap-dscp", "df", "ttl", "if-id", "output-mark",
}

// spiField finds an SA entry's spi field: in the mapping itself, else
// (by a silent pass of fields) where its merge keys put it.
func (p *yamlParser) spiField(n *yaml.Node, entry string) (field, bool) {
	m := resolve(n)
	if m.Kind != yaml.MappingNode {
		return field{}, false
	}
	merges := false
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if k.Kind == yaml.ScalarNode && k.Value == "spi" {
			return field{Key: k, Val: resolve(m.Content[i+1])}, true
		}
		merges = merges || k.Kind != yaml.ScalarNode || k.Value == "<<"
	}
	if !merges {
		return field{}, false
	}
	return (&yamlParser{file: p.file}).fields(n, entry, saFields).Get("spi")
}

// sa reads one entry of the sa: list. It returns nil if the entry has errors
// (all of them reported).
func (p *yamlParser) sa(i int, n *yaml.Node) (*SA, string) {
	entry := "sa[" + strconv.Itoa(i) + "]"
	before := p.errs.Len()
	// The SA is built on the stack and copied out only when it holds:
	// an entry with errors costs no allocation.
	var sv SA
	s := &sv
	s.ReplayWindow = 64
	// The SPI names the entry in every other error, so it is read first
	// (the errors come with the entry's name below).
	if f, ok := p.spiField(n, entry); ok {
		if v, ok := p.scalar(f, entry); ok {
			spi, err := strconv.ParseUint(v, 0, 32)
			if err != nil {
				p.failf(f.Val, entry, "spi", "%s is not a 32-bit number (write 0x1001 or 4097)", secret.Number(v))
			} else {
				s.SPI = uint32(spi)
				entry = "sa[" + strconv.Itoa(i) + "] (spi 0x" + strconv.FormatUint(spi, 16) + ")"
			}
		}
	} else if resolve(n).Kind == yaml.MappingNode {
		p.failf(n, entry, "spi", "missing")
	}
	fs := p.fields(n, entry, saFields)
	if resolve(n).Kind != yaml.MappingNode {
		return nil, entry
	}
	str := func(name string) (field, string, bool) { return p.scalarField(fs, entry, name) }
	if f, v, ok := str("mode"); ok {
		switch v {
		case "tunnel":
			s.Mode = Tunnel
		case "transport":
			s.Mode = Transport
		default:
			p.failf(f.Val, entry, "mode", "%s, want tunnel or transport", secret.Word(v, "tunnel", "transport"))
		}
	}
	// (By name, not through pointers into s: those would move s to the heap.)
	for _, name := range [...]string{"src", "dst"} {
		f, v, ok := str(name)
		if !ok {
			if _, given := fs.Get(name); !given {
				p.failf(n, entry, name, "missing (the outer IPv4 or IPv6 address)")
			}
			continue
		}
		addr, err := netip.ParseAddr(v)
		if err != nil || addr.Zone() != "" {
			p.failf(f.Val, entry, name, "%s is not an IPv4 or IPv6 address", secret.Number(v))
			continue
		}
		if name == "src" {
			s.Src = addr
		} else {
			s.Dst = addr
		}
	}
	if s.Src.IsValid() && s.Dst.IsValid() && s.Src.Is4() != s.Dst.Is4() {
		p.failf(fs.Val("dst"), entry, "dst", "%s is not of the same address family as src %s", s.Dst, s.Src)
	} else if s.Dst.IsValid() && s.Dst.IsUnspecified() {
		p.failf(fs.Val("dst"), entry, "dst", "%s is the unspecified address", s.Dst)
	}

	if f, v, ok := str("encap"); ok {
		switch v {
		case "none":
		case "udp":
			s.Encap = EncapUDP
			s.SrcPort, s.DstPort = DefaultNATTPort, DefaultNATTPort
		default:
			p.failf(f.Val, entry, "encap", "%s, want none or udp", secret.Word(v, "none", "udp"))
		}
	}
	for _, name := range [...]string{"sport", "dport"} {
		f, v, ok := str(name)
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(v, 10, 16)
		if err != nil || port == 0 {
			p.failf(f.Val, entry, name, "%s is not a port 1..65535", secret.Number(v))
			continue
		}
		if s.Encap != EncapUDP {
			p.failf(f.Val, entry, name, "a port needs encap: udp")
			continue
		}
		if name == "sport" {
			s.SrcPort = uint16(port)
		} else {
			s.DstPort = uint16(port)
		}
	}

	suiteOK := true
	if f, v, ok := str("enc"); ok {
		c, err := ParseCipher(v)
		if err != nil {
			p.failf(f.Val, entry, "enc", "unknown cipher %s (want %s)", secret.Word(v, cipherNames[:]...), CipherList)
			suiteOK = false
		}
		s.Suite.Cipher = c
	} else {
		suiteOK = false
		if _, given := fs.Get("enc"); !given {
			p.failf(n, entry, "enc", "missing (%s)", CipherList)
		}
	}
	if f, v, ok := str("auth"); ok {
		a, err := ParseAuth(v)
		if err != nil {
			p.failf(f.Val, entry, "auth", "unknown integrity algorithm %s (want hmac-sha1-96, hmac-sha2-256-128, hmac-sha2-384-192, hmac-sha2-512-256, hmac-md5-96 or none)", secret.Word(v, authNames[:]...))
			suiteOK = false
		}
		s.Suite.Auth = a
	} else if _, given := fs.Get("auth"); given {
		suiteOK = false
	} else if suiteOK && !s.Suite.Cipher.IsAEAD() {
		p.failf(n, entry, "auth", "missing: %s needs hmac-sha1-96, hmac-sha2-256-128, hmac-sha2-384-192, hmac-sha2-512-256 or hmac-md5-96", s.Suite.Cipher)
		suiteOK = false
	}
	if suiteOK {
		if err := s.Suite.Validate(); err != nil {
			f, ok := fs.Get("auth")
			if !ok {
				f, _ = fs.Get("enc")
			}
			p.fail(f.Val, entry, f.Key.Value, err)
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
			p.failf(f.Val, entry, "esn", "%s, want true or false", secret.Word(v, "true", "false"))
		}
		s.ESN = b
	}
	if f, v, ok := str("replay-window"); ok {
		w, err := strconv.ParseUint(v, 10, 32)
		if err != nil || w > MaxReplayWindow {
			p.failf(f.Val, entry, "replay-window", "%s, want 0..%d packets (0 turns anti-replay off)", secret.Number(v), MaxReplayWindow)
		}
		s.ReplayWindow = int(w)
	}
	if f, v, ok := str("initial-seq"); ok {
		seq, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			p.failf(f.Val, entry, "initial-seq", "%s is not a number", secret.Number(v))
		} else if !s.ESN && seq > math.MaxUint32 {
			p.failf(f.Val, entry, "initial-seq", "%d does not fit 32 bits: set esn: true", seq)
		}
		s.InitialSeq = seq
	}
	if f, v, ok := str("tfc-pad"); ok {
		pad, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			p.failf(f.Val, entry, "tfc-pad", "%s, want 0..65535 bytes", secret.Number(v))
		}
		s.TFCPad = int(pad)
	}
	p.header(str, entry, s)
	if f, ok := fs.Get("lifetimes"); ok {
		s.Soft, s.Hard = p.lifetimes(f, entry)
	}
	if f, ok := fs.Get("selectors"); ok {
		if f.Val.Kind != yaml.SequenceNode {
			p.failf(f.Key, entry, "selectors", "want a list, got a %s", kindName(f.Val))
		} else {
			for j, sn := range f.Val.Content {
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
	out := new(SA)
	*out = sv
	return out, entry
}

// key reads enc-key or auth-key: hex (0x optional, quoted or not), or
// random for a fresh key of the right length. want lists the valid lengths;
// a key of length 0 may be left out.
func (p *yamlParser) key(fs fieldSet, n *yaml.Node, entry, name string, want []int) Key {
	f, ok := fs.Get(name)
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
		if v == "" || f.Val.Tag == "!!null" {
			return nil
		}
		p.failf(f.Val, entry, name, "not used with this suite: leave it out")
		return nil
	}
	if strings.HasPrefix(v, "random") {
		n := want[0]
		if bits, isSized := strings.CutPrefix(v, "random-"); isSized && len(want) > 1 {
			b, err := strconv.Atoi(bits)
			if err != nil || (b != 128 && b != 192 && b != 256) {
				p.failf(f.Val, entry, name, "%s, want random, random-128, random-192 or random-256", secret.Hidden(v))
				return nil
			}
			n = want[(b-128)/64]
		} else if v != "random" {
			p.failf(f.Val, entry, name, "%s, want random (or random-128/192/256 for AES)", secret.Hidden(v))
			return nil
		}
		k, err := RandomKey(n)
		if err != nil {
			p.fail(f.Val, entry, name, err)
		}
		return k
	}
	k, err := ParseKeyHex(v)
	if err != nil {
		p.fail(f.Val, entry, name, err)
		return nil
	}
	if !slices.Contains(want, len(k)) {
		p.failf(f.Val, entry, name, "%d bytes, want %s", len(k), lens(want))
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
	fs := p.fields(f.Val, entry+" lifetimes", []string{"soft", "hard"})
	read := func(name string) Lifetime {
		var l Lifetime
		lf, ok := fs.Get(name)
		if !ok {
			return l
		}
		where := entry + " lifetimes " + name
		bs := p.fields(lf.Val, where, []string{"bytes", "packets", "seconds", "time"})
		for _, bf := range bs {
			k := bf.Key.Value
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
				p.fail(bf.Val, where, k, err)
			}
		}
		if _, sec := bs.Get("seconds"); sec {
			if t, both := bs.Get("time"); both {
				p.failf(t.Key, where, "time", "give seconds or time, not both")
			}
		}
		return l
	}
	soft, hard = read("soft"), read("hard")
	if err := checkLifetimes(soft, hard); err != nil {
		p.fail(f.Key, entry, "lifetimes", err)
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

func (p *yamlParser) selectorFrom(fs fieldSet, entry string, n *yaml.Node) Selector {
	var sel Selector
	str := func(name string) (field, string, bool) { return p.scalarField(fs, entry, name) }
	if f, v, ok := str("src"); ok {
		pf, err := ParsePrefix(v)
		if err != nil {
			p.fail(f.Val, entry, "src", err)
		}
		sel.Src = pf
	}
	if f, v, ok := str("dst"); ok {
		pf, err := ParsePrefix(v)
		if err != nil {
			p.fail(f.Val, entry, "dst", err)
		}
		sel.Dst = pf
	}
	if sel.Src.IsValid() && sel.Dst.IsValid() && sel.Src.Addr().Is4() != sel.Dst.Addr().Is4() {
		p.failf(fs.Val("dst"), entry, "dst", "%s is not of the same address family as src %s", sel.Dst, sel.Src)
	}
	if f, v, ok := str("proto"); ok {
		pr, err := ParseProto(v)
		if err != nil {
			p.fail(f.Val, entry, "proto", err)
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
			p.fail(f.Val, entry, a.name, err)
			continue
		}
		if r != (PortRange{}) && !HasPorts(sel.Proto) {
			p.failf(f.Val, entry, a.name, "ports need proto tcp, udp, sctp or udplite, not %s", ProtoName(sel.Proto))
			continue
		}
		*a.dst = r
	}
	return sel
}

var policyFields = []string{"priority", "action", "sa"}

// policy reads one entry of the spd: list.
func (p *yamlParser) policy(i int, n *yaml.Node, sas saFinder) (Policy, bool) {
	entry := "spd[" + strconv.Itoa(i) + "]"
	before := p.errs.Len()
	fs := p.fields(n, entry, append(slices.Clip(selectorFields), policyFields...))
	if n.Kind != yaml.MappingNode {
		return Policy{}, false
	}
	sel := p.selectorFrom(fs, entry, n)
	pol := Policy{Selector: sel}
	if f, ok := fs.Get("priority"); ok {
		if v, ok := p.scalar(f, entry); ok {
			pr, err := strconv.ParseInt(v, 0, 32)
			if err != nil {
				p.failf(f.Val, entry, "priority", "%s is not a number (lower is consulted first)", secret.Number(v))
			}
			pol.Priority = int(pr)
		}
	}
	f, ok := fs.Get("action")
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
		p.fail(f.Val, entry, "action", err)
		return pol, false
	}
	pol.Action = a
	saf, hasSA := fs.Get("sa")
	switch {
	case a == Protect && !hasSA:
		p.failf(n, entry, "sa", "missing: a protect policy names the SPI of its outbound SA")
	case a != Protect && hasSA:
		p.failf(saf.Key, entry, "sa", "only a protect policy names an SA")
	case a == Protect:
		v, ok := p.scalar(saf, entry)
		if !ok {
			break
		}
		spi, err := strconv.ParseUint(v, 0, 32)
		if err != nil {
			p.failf(saf.Val, entry, "sa", "%s is not an SPI", secret.Number(v))
			break
		}
		if p.spdOnly {
			pol.SPI = uint32(spi)
			break
		}
		s, err := sas.Find(uint32(spi))
		if err != nil {
			p.fail(saf.Val, entry, "sa", err)
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
	if !fi.Mode().IsRegular() {
		return ReadAtMost(f, path, limit)
	}
	// A regular file is read into a buffer of its size (and a byte more,
	// to see it grow), not grown by doubling.
	data := make([]byte, fi.Size()+1)
	n, err := io.ReadFull(f, data)
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		return data[:n:n], nil
	case err != nil:
		return nil, err
	}
	// It grew while read.
	rest, err := io.ReadAll(io.LimitReader(f, limit-int64(n)+1))
	if err != nil {
		return nil, err
	}
	if int64(n+len(rest)) > limit {
		return nil, fmt.Errorf("%q is larger than the %d bytes such a file may be", path, limit)
	}
	return append(data, rest...), nil
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
