package sa

import (
	"bytes"
	"encoding/hex"
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

// The Linux kernel's names for the algorithms (net/xfrm/xfrm_algo.c), as
// `ip xfrm state` prints them and `ip xfrm state add` takes them.
var (
	xfrmCiphers = map[string]Cipher{
		"ecb(cipher_null)": CipherNull, "cipher_null": CipherNull,
		"cbc(aes)": CipherAESCBC, "aes": CipherAESCBC,
		"cbc(des3_ede)": Cipher3DES, "des3_ede": Cipher3DES,
		"rfc3686(ctr(aes))": CipherAESCTR,
	}
	xfrmCipherNames = map[Cipher]string{
		CipherNull: "ecb(cipher_null)", CipherAESCBC: "cbc(aes)", Cipher3DES: "cbc(des3_ede)",
		CipherAESCTR: "rfc3686(ctr(aes))", CipherAESGCM16: "rfc4106(gcm(aes))",
	}
	// xfrmAEADs are the kernel's AEAD templates with the ICV length in
	// bits that picks the cipher.
	xfrmAEADs = []xfrmAEAD{
		{"rfc4106(gcm(aes))", 64, CipherAESGCM8},
		{"rfc4106(gcm(aes))", 96, CipherAESGCM12},
		{"rfc4106(gcm(aes))", 128, CipherAESGCM16},
		{"rfc7539esp(chacha20,poly1305)", 128, CipherChaCha20Poly1305},
		{"rfc4543(gcm(aes))", 128, CipherAESGMAC},
		{"rfc4309(ccm(aes))", 64, CipherAESCCM8},
		{"rfc4309(ccm(aes))", 96, CipherAESCCM12},
		{"rfc4309(ccm(aes))", 128, CipherAESCCM16},
	}
	xfrmHashes = map[string]Auth{
		"hmac(sha1)": AuthHMACSHA1_96, "sha1": AuthHMACSHA1_96,
		"hmac(sha256)": AuthHMACSHA256_128, "sha256": AuthHMACSHA256_128,
		"hmac(sha384)": AuthHMACSHA384_192, "sha384": AuthHMACSHA384_192,
		"hmac(sha512)": AuthHMACSHA512_256, "sha512": AuthHMACSHA512_256,
		"hmac(md5)": AuthHMACMD5_96, "md5": AuthHMACMD5_96,
	}
	xfrmHashNames = map[Auth]string{
		AuthHMACSHA1_96: "hmac(sha1)", AuthHMACSHA256_128: "hmac(sha256)", AuthHMACSHA384_192: "hmac(sha384)",
		AuthHMACSHA512_256: "hmac(sha512)", AuthHMACMD5_96: "hmac(md5)",
	}
)

// listingWords start the lines of an ip xfrm state listing; selectorWords
// and stateWords are iproute2's SELECTOR and state add words.
var (
	listingWords  = []string{"proto", "replay-window", "enc", "aead", "auth", "auth-trunc", "encap", "anti-replay", "sel", "tfcpad", "lifetime", "stats:", "limit:", "expire", "lastused"}
	selectorWords = []string{"src", "dst", "proto", "sport", "dport", "uid", "dev", "type", "code"}
	stateWords    = []string{"src", "dst", "proto", "spi", "reqid", "mode", "replay-window", "replay-seq", "replay-oseq", "flag", "enc", "auth", "auth-trunc", "aead", "encap", "tfcpad", "limit", "sel"}
)

// lineProblems collects the problems of a line-oriented SA file (ip xfrm,
// esp_sa), each a *ConfigError.
type lineProblems struct {
	file string
	errs errlist.List
}

func (p *lineProblems) fail(line int, entry, field string, err error) {
	p.errs.Add(&ConfigError{File: p.file, Line: line, Entry: entry, Field: field, Err: err})
}

// firstSPI records that the file gives s on line and reports whether s is
// the first SA there of its SPI and destination; a second one fails on its
// spi field, naming the first one's line.
func (p *lineProblems) firstSPI(seen map[saKey]int, line int, entry string, s *SA) bool {
	k := keyOf(s.SPI, s.Dst)
	if prev, dup := seen[k]; dup {
		p.fail(line, entry, "spi", fmt.Errorf("duplicate SPI for dst %s (also on line %d)", s.Dst, prev))
		return false
	}
	seen[k] = line
	return true
}

// hiddenKeys stands for the key of a listing made with nokeys, where
// ParseXFRMStates reads one.
const hiddenKeys = "<<Keys hidden>>"

// keyToken reads a key as iproute2 prints and takes it: 0x-prefixed hex.
// A listing made with nokeys (or by a kernel that redacts keys) has none.
func keyToken(t string) (Key, error) {
	if t == "<<Keys" || strings.HasPrefix(t, "<<") {
		return nil, errors.New("the listing hides the keys (made with nokeys?): list them with `ip -s xfrm state` as root")
	}
	if !strings.HasPrefix(t, "0x") && !strings.HasPrefix(t, "0X") {
		return nil, errors.New("want the key as 0x-prefixed hex")
	}
	return ParseKeyHex(t)
}

// looksLikeXFRMListing reports whether data is `ip xfrm state` output: a
// line "src A dst B" followed by an indented "proto esp …" line.
func looksLikeXFRMListing(data []byte) bool {
	lines := firstLines(data, 2)
	return len(lines) == 2 && strings.HasPrefix(lines[0], "src ") && strings.Contains(lines[0], " dst ") &&
		(strings.HasPrefix(lines[1], "\t") || strings.HasPrefix(lines[1], " ")) &&
		strings.HasPrefix(strings.TrimSpace(lines[1]), "proto ")
}

// looksLikeXFRMCommands reports whether data is `ip xfrm state add`
// commands (as `espgw sa convert --to ip-xfrm` writes them).
func looksLikeXFRMCommands(data []byte) bool {
	for _, l := range firstLines(data, 3) {
		f := trimIPCommand(strings.Fields(l))
		if len(f) > 0 && f[0] == "set" {
			continue // set -e of a script
		}
		return len(f) >= 2 && f[0] == "xfrm" && (f[1] == "state" || f[1] == "policy")
	}
	return false
}

// firstLines returns up to n lines that are neither blank nor # comments,
// reading no further than it needs.
func firstLines(data []byte, n int) []string {
	var out []string
	for raw := range bytes.Lines(data) {
		l := strings.TrimRight(string(raw), "\r\n")
		if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		out = append(out, l)
		if len(out) == n {
			break
		}
	}
	return out
}

// trimIPCommand drops a leading sudo, ip or /sbin/ip and ip's options
// (-s, -4, -6, -n NS …) from a command's words.
func trimIPCommand(f []string) []string {
	if len(f) > 0 && f[0] == "sudo" {
		f = f[1:]
	}
	if len(f) > 0 && (f[0] == "ip" || strings.HasSuffix(f[0], "/ip")) {
		f = f[1:]
		for len(f) > 0 && strings.HasPrefix(f[0], "-") {
			if (f[0] == "-n" || f[0] == "-netns") && len(f) > 1 {
				f = f[1:]
			}
			f = f[1:]
		}
	}
	return f
}

// ParseXFRMState reads the output of `ip -s xfrm state` (without -s,
// iproute2 hides the extra flags, and the listing is refused): every ESP
// state becomes an SA, with its keys as iproute2 prints them. A state's outbound
// sequence number (oseq, and oseq-hi with ESN) becomes InitialSeq, so an
// SA taken over from a running kernel continues where the kernel stopped.
// Policies are not part of the listing: the SAs come without an SPD.
func ParseXFRMState(name string, data []byte) (*Config, error) {
	states, err := parseXFRMListing(name, data, false)
	if err != nil {
		return nil, err
	}
	c := &Config{}
	for _, st := range states {
		c.SAs = append(c.SAs, st.SA)
	}
	return c, nil
}

// XFRMState is one state of an `ip -s xfrm state` listing: the SA it
// holds (without keys when the listing hides them) and what the kernel
// counted on it.
type XFRMState struct {
	*SA
	// Seq is the highest sequence number received, OSeq the last one
	// sent (the SA's InitialSeq); with ESN both carry the high 32 bits.
	Seq, OSeq uint64
	// Bytes and Packets count what the state processed successfully.
	Bytes, Packets uint64
	// The kernel's error counters for the state: packets outside the
	// replay window, replayed packets, and integrity (ICV) failures.
	ReplayWindowDrops, Replayed, IntegrityFailed uint64
}

// ParseXFRMStates reads `ip -s xfrm state` output for what the kernel
// counted, made with or without keys (nokeys): the same reading as
// ParseXFRMState, but a state's SA is not validated (it may lack its
// keys) and lines about features espgw lacks are no error.
func ParseXFRMStates(name string, data []byte) ([]XFRMState, error) {
	return parseXFRMListing(name, data, true)
}

func parseXFRMListing(name string, data []byte, counters bool) ([]XFRMState, error) {
	p := &xfrmListing{lineProblems: lineProblems{file: name}, counters: counters}
	lines := strings.Split(string(data), "\n")
	for i, raw := range lines {
		p.line(i+1, strings.TrimRight(raw, "\r"))
	}
	p.finish()
	if err := p.errs.Err(); err != nil {
		return nil, err
	}
	if len(p.states) == 0 {
		return nil, &ConfigError{File: name, Err: errors.New("no ESP state in the listing")}
	}
	return p.states, nil
}

// xfrmListing reads `ip xfrm state` output line by line.
type xfrmListing struct {
	lineProblems
	counters bool // ParseXFRMStates: keys may be hidden, SAs are not validated
	states   []XFRMState
	cur      *XFRMState
	b        *xfrmState // reads cur's words
	start    int        // line of cur's header
	entry    string     // cur's name in errors
	bad      bool       // cur had an error: dropped at its end
	section  string     // the multi-line block being read
	proto    bool       // cur has its proto line
	stats    bool       // cur's listing was made with -s (it shows the extra flags)
	lines    map[saKey]int
}

func (p *xfrmListing) finish() {
	if p.cur == nil {
		return
	}
	st := p.cur
	s := st.SA
	p.cur = nil
	if p.bad {
		return
	}
	if !p.proto {
		p.fail(p.start, p.entry, "proto", errors.New("missing: want \"proto esp spi …\""))
		return
	}
	if !p.b.keyed {
		p.fail(p.start, p.entry, "enc", errors.New("missing: an ESP state needs an enc or aead line"))
		return
	}
	p.b.finish()
	if !p.stats && !p.counters {
		p.fail(p.start, p.entry, "", errors.New("listed without -s, which hides the state's extra flags (dont-encap-dscp): list it with `ip -s xfrm state`"))
		return
	}
	if err := s.Validate(); err != nil && !p.counters {
		p.fail(p.start, p.entry, "", err)
		return
	}
	if p.lines == nil {
		p.lines = map[saKey]int{}
	}
	if !p.firstSPI(p.lines, p.start, p.entry, s) {
		return
	}
	p.states = append(p.states, *st)
}

func (p *xfrmListing) line(n int, line string) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return
	}
	indented := line[0] == ' ' || line[0] == '\t'
	if !indented {
		p.finish()
		if f[0] != "src" || len(f) < 4 || f[2] != "dst" {
			p.fail(n, "", "", fmt.Errorf("want a state header \"src ADDR dst ADDR\", got %s", secret.Word(f[0], "src")))
			return
		}
		p.cur, p.start, p.bad, p.section, p.proto, p.stats = &XFRMState{SA: &SA{}}, n, false, "", false, false
		p.b = &xfrmState{s: p.cur.SA, listing: true, lenient: p.counters, named: func(spi uint32) {
			p.entry = fmt.Sprintf("state %s→%s spi %#x", p.cur.Src, p.cur.Dst, spi)
		}}
		p.entry = fmt.Sprintf("state %s→%s", strings.Trim(secret.Number(f[1]), `"`), strings.Trim(secret.Number(f[3]), `"`))
		p.stateWords(n, f[:4])
		return
	}
	if p.cur == nil {
		p.fail(n, "", "", errors.New("indented line before any \"src … dst …\" header"))
		return
	}
	if p.bad {
		return
	}
	s, st := p.cur.SA, p.cur
	switch {
	case f[0] == "proto":
		// proto esp spi 0x00001001(4097) reqid 1(0x00000001) mode tunnel
		if !slices.Contains(f, "spi") || !slices.Contains(f, "mode") {
			p.failCur(n, "proto", errors.New("want \"proto esp spi SPI reqid N mode MODE\""))
			return
		}
		p.proto = p.stateWords(n, f)
	case f[0] == "replay-window" && p.section != "stats":
		// replay-window N seq 0x… flag esn af-unspec (0x…)
		p.stats = len(f) > 3 && f[2] == "seq"
		p.stateWords(n, f)
	case f[0] == "flag" || f[0] == "extra_flag" || f[0] == "enc" || f[0] == "aead" || f[0] == "auth-trunc" || f[0] == "auth" || f[0] == "encap" || f[0] == "tfcpad":
		p.stateWords(n, f)
	case f[0] == "anti-replay" && slices.Contains(f, "esn"):
		p.section = "esn"
	case f[0] == "anti-replay":
		// anti-replay context: seq 0x0, oseq 0x7, bitmap 0x00000000
		kv := pairs(f[min(2, len(f)):])
		seq, err := parseHex64(kv["seq"])
		o, err2 := parseHex64(kv["oseq"])
		if err = errors.Join(err, err2); err != nil {
			p.failCur(n, "anti-replay", err)
			return
		}
		st.Seq, st.OSeq, s.InitialSeq = seq, o, o
	case p.section == "esn" && f[0] == "seq-hi":
		// seq-hi 0x1, seq 0x11, oseq-hi 0x1, oseq 0x10
		kv := pairs(f)
		var v [4]uint64
		var errs []error
		for i, k := range []string{"seq-hi", "seq", "oseq-hi", "oseq"} {
			var err error
			v[i], err = parseHex64(kv[k])
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			p.failCur(n, "anti-replay", err)
			return
		}
		st.Seq, st.OSeq = v[0]<<32|v[1], v[2]<<32|v[3]
		s.InitialSeq = st.OSeq
	case p.section == "esn" && f[0] == "replay_window" && len(f) >= 2:
		w, err := strconv.Atoi(strings.TrimSuffix(f[1], ","))
		if err != nil {
			p.failCur(n, "replay_window", fmt.Errorf("%s is not a number", secret.Number(f[1])))
			return
		}
		s.ReplayWindow = w
	case p.section == "esn" && isHexWord(f[0]):
		// the bitmap's words
	case f[0] == "sel":
		p.stateWords(n, f)
		p.section = ""
	case f[0] == "lifetime" && len(f) > 1 && f[1] == "config:":
		p.section = "config"
	case f[0] == "lifetime" && len(f) > 1 && f[1] == "current:":
		p.section = "current"
	case f[0] == "stats:":
		p.section = "stats"
	case p.section == "config" && (f[0] == "limit:" || f[0] == "expire"):
		p.limitLine(n, f)
	case p.section == "current" && strings.HasSuffix(f[0], "(bytes),") && len(f) >= 2:
		// 84(bytes), 1(packets)
		b, err := strconv.ParseUint(strings.TrimSuffix(f[0], "(bytes),"), 10, 64)
		pk, err2 := strconv.ParseUint(strings.TrimSuffix(f[1], "(packets)"), 10, 64)
		if err != nil || err2 != nil {
			p.failCur(n, "lifetime current", fmt.Errorf("want \"N(bytes), N(packets)\", got %s", secret.Number(strings.Join(f, " "))))
			return
		}
		st.Bytes, st.Packets = b, pk
	case p.section == "stats" && f[0] == "replay-window":
		// replay-window 0 replay 0 failed 0
		kv := pairs(f)
		for _, x := range []struct {
			key string
			dst *uint64
		}{{"replay-window", &st.ReplayWindowDrops}, {"replay", &st.Replayed}, {"failed", &st.IntegrityFailed}} {
			v, err := strconv.ParseUint(kv[x.key], 10, 64)
			if err != nil {
				p.failCur(n, "stats "+x.key, fmt.Errorf("%s is not a count", secret.Number(kv[x.key])))
				return
			}
			*x.dst = v
		}
	case p.section == "current" || p.section == "stats":
		// when the state was added and used
	case f[0] == "lastused" || f[0] == "crypto" && p.section == "":
	case f[0] == "if_id" || f[0] == "output-mark" || f[0] == "mark" && slices.Contains(f, "output-mark") && p.counters:
		p.stateWords(n, f)
	case slices.Contains([]string{"mark", "offload", "security", "coaddr", "comp", "ctx"}, f[0]):
		if p.counters {
			return // the counters do not depend on it
		}
		p.failCur(n, f[0], errors.New("not supported by espgw: the state would not behave the same"))
	default:
		p.failCur(n, "", fmt.Errorf("unknown line starting %s", secret.Word(f[0], listingWords...)))
	}
}

// xfrmFlag applies one of a state's flags (kind "flag") or extra flags
// (kind "extra_flag" or "extra-flag") to s: what espgw does too is
// carried, what changes the kernel's behaviour in a way espgw cannot
// follow is an error naming it.
func xfrmFlag(s *SA, kind, name string) error {
	kind = strings.ReplaceAll(kind, "-", "_")
	unsupported := func(why string) error {
		return fmt.Errorf("%s %s is not supported by espgw: %s", kind, name, why)
	}
	switch kind + " " + name {
	case "flag esn":
		s.ESN = true
	case "flag decap-dscp":
		s.DecapDSCP = DecapCopy
	case "flag nopmtudisc":
		s.DF = DFClear
	case "flag af-unspec":
		// espgw's tunnel SAs carry inner packets of either family: the
		// kernel's do with this flag.
	case "flag noecn":
		return unsupported("it always copies ECN out and combines it back in (RFC 6040)")
	case "flag wildrecv":
		return unsupported("inbound, an SA takes packets only for its own dst")
	case "flag icmp":
		return unsupported("it does not match ICMP errors to the SA of the packet they quote")
	case "flag align4":
		return unsupported("it pads ESP to the cipher's block size, at least 4 bytes, and no further")
	case "extra_flag dont-encap-dscp":
		s.DSCP = DSCP{Fixed: true, Value: 0}
	case "extra_flag oseq-may-wrap":
		return unsupported("a sequence number is never sent twice under one SA")
	default:
		if kind == "" {
			return fmt.Errorf("%s before flag or extra_flag", secret.Word(name, "flag", "extra_flag"))
		}
		if isHexWord(name) {
			return fmt.Errorf("%s bits 0x%s unknown to iproute2 are set: the state does something neither names", kind, name)
		}
		known := xfrmStateFlags
		if kind == "extra_flag" {
			known = xfrmExtraFlags
		}
		return fmt.Errorf("unknown %s %s", kind, secret.Word(name, known...))
	}
	return nil
}

// The kernel's state flags and extra flags, as iproute2 names them.
var (
	xfrmStateFlags = []string{"noecn", "decap-dscp", "nopmtudisc", "wildrecv", "icmp", "af-unspec", "align4", "esn"}
	xfrmExtraFlags = []string{"dont-encap-dscp", "oseq-may-wrap"}
)

// stateWords reads the words of line n of the current state with the
// commands' reader, and reports whether they were right.
func (p *xfrmListing) stateWords(n int, f []string) bool {
	return p.b.words(commandSpelling(f, p.counters), func(field string, err error) { p.failCur(n, field, err) })
}

func (p *xfrmListing) failCur(line int, field string, err error) {
	p.bad = true
	p.fail(line, p.entry, field, err)
}

// xfrmAEAD is a kernel AEAD template and the ICV length in bits that,
// with it, names one of espgw's ciphers.
type xfrmAEAD struct {
	name string
	bits int
	c    Cipher
}

// xfrmAlgorithm applies one algorithm of iproute2's ALGO to s: kind is
// enc, auth, auth-trunc or aead; rest holds the ICV length in bits for
// auth-trunc and aead.
func xfrmAlgorithm(s *SA, kind, name, key string, rest []string) error {
	// ip -s prints the key's length after it: "0x… (256 bits)".
	if len(rest) >= 2 && strings.HasPrefix(rest[0], "(") && rest[1] == "bits)" {
		rest = rest[2:]
	}
	k, err := keyToken(key)
	hidden := key == hiddenKeys
	if hidden || name == "ecb(cipher_null)" || name == "cipher_null" || name == "digest_null" {
		k, err = nil, nil // iproute2 prints "" or nothing useful for null
	}
	if err != nil {
		return err
	}
	keyLen := func(lens []int) bool { return hidden || slices.Contains(lens, len(k)) }
	bits := func() (int, error) {
		if len(rest) == 0 {
			return 0, errors.New("missing the ICV length in bits")
		}
		b, err := strconv.Atoi(rest[0])
		if err != nil {
			return 0, fmt.Errorf("ICV length %s is not a number", secret.Number(rest[0]))
		}
		return b, nil
	}
	switch kind {
	case "enc":
		c, ok := xfrmCiphers[name]
		if !ok {
			return fmt.Errorf("%s is not supported (want cbc(aes), cbc(des3_ede), rfc3686(ctr(aes)) or ecb(cipher_null))", secret.Word(name, "cbc(aes)", "cbc(des3_ede)", "rfc3686(ctr(aes))", "ecb(cipher_null)"))
		}
		if !keyLen(Suite{Cipher: c}.EncKeyLens()) {
			return fmt.Errorf("key is %d bytes, want %s", len(k), lens(Suite{Cipher: c}.EncKeyLens()))
		}
		s.Suite.Cipher, s.EncKey = c, k
	case "aead":
		var names, icvs []string
		for _, a := range xfrmAEADs {
			if !slices.Contains(names, a.name) {
				names = append(names, a.name)
			}
			if a.name == name {
				icvs = append(icvs, strconv.Itoa(a.bits))
			}
		}
		if len(icvs) == 0 {
			return fmt.Errorf("%s is not supported (want %s)", secret.Word(name, names...), strings.Join(names, ", "))
		}
		b, err := bits()
		if err != nil {
			return err
		}
		i := slices.IndexFunc(xfrmAEADs, func(a xfrmAEAD) bool { return a.name == name && a.bits == b })
		if i < 0 {
			return fmt.Errorf("%s with a %d-bit ICV: espgw does %s bits", name, b, strings.Join(icvs, ", "))
		}
		c := xfrmAEADs[i].c
		if !keyLen(Suite{Cipher: c}.EncKeyLens()) {
			return fmt.Errorf("key is %d bytes, want %s (key and %d-byte salt)", len(k), lens(Suite{Cipher: c}.EncKeyLens()), c.SaltLen())
		}
		s.Suite.Cipher, s.Suite.Auth, s.EncKey = c, AuthNone, k
	case "auth", "auth-trunc":
		if name == "digest_null" {
			return errors.New("digest_null: ESP without integrity is not supported")
		}
		a, ok := xfrmHashes[name]
		if !ok {
			return fmt.Errorf("%s is not supported (want hmac(sha1), hmac(sha256), hmac(sha384), hmac(sha512) or hmac(md5))", secret.Word(name, "hmac(sha1)", "hmac(sha256)", "hmac(sha384)", "hmac(sha512)", "hmac(md5)"))
		}
		want := Suite{Auth: a}.ICVLen() * 8
		if a == AuthHMACMD5_96 {
			want = 96
		}
		b := 96 // the kernel's default truncation for auth without -trunc
		if kind == "auth-trunc" {
			var err error
			if b, err = bits(); err != nil {
				return err
			}
		}
		if b != want {
			return fmt.Errorf("%s truncated to %d bits: espgw does %s (%d bits), as RFC 4868/2404/2403 say", name, b, a, want)
		}
		if n := (Suite{Auth: a}).AuthKeyLen(); !keyLen([]int{n}) {
			return fmt.Errorf("key is %d bytes, want %d", len(k), n)
		}
		s.Suite.Auth, s.AuthKey = a, k
	}
	return nil
}

// xfrmSelector reads iproute2's SELECTOR words; any/any is the zero
// Selector.
func xfrmSelector(f []string) (Selector, error) {
	var sel Selector
	for i := 0; i < len(f); i++ {
		w := f[i]
		if i+1 >= len(f) {
			return sel, fmt.Errorf("%s without a value", secret.Word(w, selectorWords...))
		}
		v := f[i+1]
		i++
		switch w {
		case "src", "dst":
			pfx, err := netip.ParsePrefix(v)
			if err != nil {
				a, err2 := netip.ParseAddr(v)
				if err2 != nil {
					return sel, fmt.Errorf("%s %s is not an address or prefix", w, secret.Number(v))
				}
				pfx = netip.PrefixFrom(a, a.BitLen())
			}
			if pfx.Bits() == 0 {
				continue // any
			}
			if w == "src" {
				sel.Src = pfx.Masked()
			} else {
				sel.Dst = pfx.Masked()
			}
		case "proto":
			pr, err := ParseProto(v)
			if err != nil {
				return sel, err
			}
			sel.Proto = pr
		case "sport", "dport":
			port, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				return sel, fmt.Errorf("%s %s is not a port", w, secret.Number(v))
			}
			if port == 0 {
				continue
			}
			r := PortRange{uint16(port), uint16(port)}
			if w == "sport" {
				sel.SrcPorts = r
			} else {
				sel.DstPorts = r
			}
		case "uid":
		case "dev":
			return sel, errors.New("dev: selectors on an interface are not supported")
		case "type", "code":
			return sel, fmt.Errorf("%s: ICMP type and code selectors are not supported", w)
		default:
			return sel, fmt.Errorf("unknown selector word %s", secret.Word(w, selectorWords...))
		}
	}
	return sel, nil
}

// limitLine reads the lifetime config lines:
//
//	limit: soft (INF)(bytes), hard 1000(bytes)
//	limit: soft (INF)(packets), hard (INF)(packets)
//	expire add: soft 0(sec), hard 3600(sec)
//	expire use: soft 0(sec), hard 0(sec)
func (p *xfrmListing) limitLine(n int, f []string) {
	if f[0] == "expire" && len(f) > 1 && f[1] == "use:" {
		if strings.Join(f, " ") != "expire use: soft 0(sec), hard 0(sec)" {
			p.failCur(n, "expire use", errors.New("lifetimes counted from first use are not supported"))
		}
		return
	}
	if len(f) < 5 {
		p.failCur(n, "lifetime", errors.New("want \"soft N(unit), hard N(unit)\""))
		return
	}
	kv := pairs(f[len(f)-4:])
	for _, side := range []struct {
		key string
		l   *Lifetime
	}{{"soft", &p.cur.Soft}, {"hard", &p.cur.Hard}} {
		v := kv[side.key]
		num, unit, ok := strings.Cut(strings.TrimSuffix(v, ")"), "(")
		if strings.HasPrefix(v, "(INF)") {
			continue
		}
		x, err := strconv.ParseUint(num, 10, 64)
		if !ok || err != nil {
			p.failCur(n, "lifetime "+side.key, fmt.Errorf("%s is not a count", secret.Number(v)))
			return
		}
		switch unit {
		case "bytes":
			side.l.Bytes = x
		case "packets":
			side.l.Packets = x
		case "sec":
			side.l.Time = time.Duration(x) * time.Second
		}
	}
}

// pairs reads "k1 v1, k2 v2" word lists into a map, dropping commas.
func pairs(f []string) map[string]string {
	kv := map[string]string{}
	for i := 0; i+1 < len(f); i += 2 {
		kv[strings.TrimSuffix(f[i], ":")] = strings.TrimSuffix(f[i+1], ",")
	}
	return kv
}

func parseHex64(s string) (uint64, error) {
	if s == "" {
		return 0, errors.New("missing number")
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%s is not a hex number", secret.Number(s))
	}
	return v, nil
}

func isHexWord(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return s != ""
}

// XFRMStateArgs are the words of the `ip xfrm state add` command (after
// "ip") that gives a Linux kernel the SA s, keys in clear. Policies are
// separate (XFRMPolicyArgs); the state's selector is s's one selector, if
// it has exactly one.
func XFRMStateArgs(s *SA) ([]string, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("SA %#x as ip xfrm: %w", s.SPI, err)
	}
	if s.ESN && s.ReplayWindow == 0 {
		return nil, fmt.Errorf("SA %#x as ip xfrm: the kernel does ESN only with a replay window", s.SPI)
	}
	a := []string{"xfrm", "state", "add", "src", s.Src.String(), "dst", s.Dst.String(),
		"proto", "esp", "spi", fmt.Sprintf("0x%08x", s.SPI), "reqid", strconv.FormatUint(uint64(s.SPI), 10), "mode", s.Mode.String()}
	if s.ReplayWindow > 0 {
		a = append(a, "replay-window", strconv.Itoa(s.ReplayWindow))
	}
	// The outer-header options as Linux's state flags: its defaults are
	// espgw's (copy DSCP, ECN per RFC 6040's encapsulation, copy DF, keep
	// the inner DSCP), and what it cannot say is refused, not dropped.
	var flags []string
	if s.ESN {
		flags = append(flags, "esn")
	}
	if s.DecapDSCP == DecapCopy {
		flags = append(flags, "decap-dscp")
	}
	switch s.DF {
	case DFClear:
		flags = append(flags, "nopmtudisc")
	case DFSet:
		return nil, fmt.Errorf("SA %#x as ip xfrm: df: set has no kernel equivalent (it copies DF or, with nopmtudisc, clears it)", s.SPI)
	}
	if s.Mode == Tunnel && anyInnerFamily(s) {
		flags = append(flags, "af-unspec")
	}
	if len(flags) > 0 {
		a = append(a, append([]string{"flag"}, flags...)...)
	}
	if s.DSCP.Fixed {
		if s.DSCP.Value != 0 {
			return nil, fmt.Errorf("SA %#x as ip xfrm: dscp: %d has no kernel equivalent (it copies the DSCP or, with dont-encap-dscp, writes 0)", s.SPI, s.DSCP.Value)
		}
		a = append(a, "extra-flag", "dont-encap-dscp")
	}
	if s.TTL != 0 && s.TTL != DefaultTTL {
		return nil, fmt.Errorf("SA %#x as ip xfrm: ttl: %d has no kernel equivalent (the outer TTL is the route's hop limit, 64 by default)", s.SPI, s.TTL)
	}
	if s.InitialSeq != 0 {
		lo, hi := uint32(s.InitialSeq), uint32(s.InitialSeq>>32)
		a = append(a, "replay-seq", strconv.FormatUint(uint64(lo), 10), "replay-oseq", strconv.FormatUint(uint64(lo), 10))
		if s.ESN {
			a = append(a, "replay-seq-hi", strconv.FormatUint(uint64(hi), 10), "replay-oseq-hi", strconv.FormatUint(uint64(hi), 10))
		}
	}
	key := func(k Key) string { return "0x" + hex.EncodeToString(k) }
	switch s.Suite.Cipher {
	case CipherNull:
		a = append(a, "enc", "ecb(cipher_null)", "")
	case CipherAESGCM16, CipherAESGCM12, CipherAESGCM8, CipherChaCha20Poly1305, CipherAESGMAC,
		CipherAESCCM8, CipherAESCCM12, CipherAESCCM16:
		for _, x := range xfrmAEADs {
			if x.c == s.Suite.Cipher {
				a = append(a, "aead", x.name, key(s.EncKey), strconv.Itoa(x.bits))
			}
		}
	default:
		a = append(a, "enc", xfrmCipherNames[s.Suite.Cipher], key(s.EncKey))
	}
	if !s.Suite.Cipher.IsAEAD() {
		a = append(a, "auth-trunc", xfrmHashNames[s.Suite.Auth], key(s.AuthKey), strconv.Itoa(s.Suite.ICVLen()*8))
	}
	if s.Encap == EncapUDP {
		oaddr := "0.0.0.0"
		if s.Src.Is6() {
			oaddr = "::"
		}
		a = append(a, "encap", "espinudp", strconv.Itoa(int(s.SrcPort)), strconv.Itoa(int(s.DstPort)), oaddr)
	}
	if s.TFCPad > 0 {
		a = append(a, "tfcpad", strconv.Itoa(s.TFCPad))
	}
	if s.IfID != 0 {
		a = append(a, "if_id", strconv.FormatUint(uint64(s.IfID), 10))
	}
	if !s.OutputMark.IsZero() {
		a = append(a, "output-mark", fmt.Sprintf("%#x", s.OutputMark.Value), "mask", fmt.Sprintf("%#x", s.OutputMark.Mask))
	}
	for _, l := range []struct {
		kind string
		l    Lifetime
	}{{"soft", s.Soft}, {"hard", s.Hard}} {
		if l.l.Bytes != 0 {
			a = append(a, "limit", "byte-"+l.kind, strconv.FormatUint(l.l.Bytes, 10))
		}
		if l.l.Packets != 0 {
			a = append(a, "limit", "packet-"+l.kind, strconv.FormatUint(l.l.Packets, 10))
		}
		if l.l.Time != 0 {
			a = append(a, "limit", "time-"+l.kind, strconv.FormatInt(max(int64(l.l.Time.Seconds()), 1), 10))
		}
	}
	if len(s.Selectors) == 1 {
		sel, err := XFRMSelectorArgs(s.Selectors[0], s.Src.Is6())
		if err != nil {
			return nil, fmt.Errorf("SA %#x as ip xfrm: %w", s.SPI, err)
		}
		a = append(a, "sel")
		a = append(a, sel...)
	}
	return a, nil
}

// pinInnerFamily gives a tunnel state without flag af-unspec, which the
// kernel lets carry inner packets of its outer family only, selectors
// that say so: its selectors without addresses (or, if it has none, one
// any selector) get the outer family's any-address prefixes.
func pinInnerFamily(s *SA, afUnspec bool) {
	if s.Mode != Tunnel || afUnspec || !s.Src.IsValid() {
		return
	}
	any := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	if s.Src.Is6() {
		any = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	if len(s.Selectors) == 0 {
		s.Selectors = []Selector{{}}
	}
	for i := range s.Selectors {
		if sel := &s.Selectors[i]; !sel.Src.IsValid() && !sel.Dst.IsValid() {
			sel.Src, sel.Dst = any, any
		}
	}
}

// anyInnerFamily reports whether a tunnel SA carries inner packets of the
// other family than its outer one, or of either: the kernel's state then
// needs flag af-unspec, without which it takes only the outer family
// unless the state's selector names the other.
func anyInnerFamily(s *SA) bool {
	if len(s.Selectors) != 1 {
		return true
	}
	for _, p := range []netip.Prefix{s.Selectors[0].Src, s.Selectors[0].Dst} {
		if p.IsValid() && p.Addr().Is4() != s.Src.Is4() {
			return true
		}
	}
	return !s.Selectors[0].Src.IsValid() && !s.Selectors[0].Dst.IsValid()
}

// XFRMSelectorArgs writes a selector as iproute2's SELECTOR. The kernel's
// selectors match one port or all, so a port range must be a single port.
func XFRMSelectorArgs(sel Selector, v6 bool) ([]string, error) {
	anyAddr := "0.0.0.0/0"
	if v6 {
		anyAddr = "::/0"
	}
	src, dst := anyAddr, anyAddr
	if sel.Src.IsValid() {
		src = sel.Src.Masked().String()
	}
	if sel.Dst.IsValid() {
		dst = sel.Dst.Masked().String()
	}
	a := []string{"src", src, "dst", dst}
	ports := sel.SrcPorts != (PortRange{}) || sel.DstPorts != (PortRange{})
	if sel.Proto == 0 {
		if ports {
			return nil, errors.New("ports given without a protocol")
		}
		return a, nil
	}
	a = append(a, "proto", strconv.Itoa(int(sel.Proto)))
	if !ports {
		return a, nil
	}
	if !HasPorts(sel.Proto) && sel.Proto != 33 {
		return nil, fmt.Errorf("ports given for protocol %d, which has none", sel.Proto)
	}
	for _, p := range []struct {
		word string
		r    PortRange
	}{{"sport", sel.SrcPorts}, {"dport", sel.DstPorts}} {
		switch {
		case p.r == PortRange{}:
		case p.r.Lo == p.r.Hi:
			a = append(a, p.word, strconv.Itoa(int(p.r.Lo)))
		default:
			return nil, fmt.Errorf("%s range %d-%d: the kernel's selectors take one port", p.word, p.r.Lo, p.r.Hi)
		}
	}
	return a, nil
}
