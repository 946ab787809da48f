package sa

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/espgw/espgw/internal/errlist"
	"github.com/espgw/espgw/internal/secret"
	"github.com/espgw/espgw/internal/shell"
)

// Format is a way of writing SAs down.
type Format string

// The formats SA files come in. FormatXFRMState is read only: it is what
// `ip xfrm state` prints, which only the kernel writes.
const (
	FormatYAML      Format = "yaml"
	FormatSetkey    Format = "setkey"
	FormatXFRM      Format = "ip-xfrm"       // ip xfrm state/policy add commands
	FormatXFRMState Format = "ip-xfrm-state" // ip [-s] xfrm state output
	FormatEspSA     Format = "esp-sa"        // Wireshark's esp_sa table
	FormatCharonLog Format = "charon-log"    // strongSwan charon's log with CHILD_SA keys
)

// WriteFormats are the formats Encode writes.
var WriteFormats = []Format{FormatYAML, FormatSetkey, FormatXFRM, FormatEspSA}

// DetectFormat names the format of an SA file's content: setkey(8)
// statements, `ip xfrm state` output, `ip xfrm … add` commands, an esp_sa
// table, or else YAML.
func DetectFormat(data []byte) Format {
	switch {
	case looksLikeCharonLog(data):
		return FormatCharonLog
	case looksLikeSetkey(data):
		return FormatSetkey
	case looksLikeXFRMListing(data):
		return FormatXFRMState
	case looksLikeXFRMCommands(data):
		return FormatXFRM
	case looksLikeEspSA(data):
		return FormatEspSA
	}
	return FormatYAML
}

// ParseFormat reads data in the given format; name is used in errors.
func ParseFormat(name string, data []byte, f Format) (*Config, error) {
	switch f {
	case FormatYAML:
		return ParseYAML(name, data)
	case FormatSetkey:
		return ParseSetkey(name, data)
	case FormatXFRM:
		return ParseXFRMCommands(name, data)
	case FormatXFRMState:
		return ParseXFRMState(name, data)
	case FormatEspSA:
		return ParseEspSA(name, data)
	case FormatCharonLog:
		return ParseCharonLog(name, data)
	}
	return nil, fmt.Errorf("%s: unknown SA file format %s (want yaml, setkey, ip-xfrm, ip-xfrm-state, esp-sa or charon-log)", name, secret.Word(string(f), "yaml", "setkey", "ip-xfrm", "ip-xfrm-state", "esp-sa", "charon-log"))
}

// Encode writes c in format f: the one family of functions, with Marshal,
// that write keys out. A field the format cannot say is an error, not a
// silent loss, except for esp-sa, which by its nature holds addresses, SPI,
// algorithms and keys only.
func Encode(c *Config, f Format) ([]byte, error) {
	switch f {
	case FormatYAML:
		return Marshal(c)
	case FormatSetkey:
		return MarshalSetkey(c)
	case FormatXFRM:
		return MarshalXFRM(c)
	case FormatEspSA:
		return MarshalEspSA(c)
	}
	return nil, fmt.Errorf("cannot write SA format %s (want %s)", secret.Word(string(f), "yaml", "setkey", "ip-xfrm", "esp-sa"), formatList(WriteFormats))
}

func formatList(fs []Format) string {
	var s []string
	for _, f := range fs {
		s = append(s, string(f))
	}
	return strings.Join(s, ", ")
}

// MarshalXFRM writes c as a sh script of ip xfrm commands that installs
// the same SAs in a Linux kernel: a state per SA, an out policy per SPD
// entry (protect through its SA's reqid, bypass as allow, discard as
// block), and in (and fwd, for tunnel SAs) policies from each SA's
// selectors. An SA file without SPD and selectors gives states only: the
// kernel then needs policies from elsewhere to use them (a comment says so).
func MarshalXFRM(c *Config) ([]byte, error) { return MarshalXFRMFor(c, netip.Addr{}) }

// MarshalXFRMFor is MarshalXFRM for the host whose address is local: an
// SA from local is outbound there, an SA to local inbound, and every SA
// must be one or the other. Each SA's selectors become dir out policies
// where it is outbound and dir in (and fwd) policies where it is inbound,
// and so do the SPD entries that protect through it. The SPD is the
// outbound SPD of the host its SAs leave from: when that is the other
// end, its bypass entries become this host's dir in and fwd allow
// policies for the traffic and a dir out allow policy for the replies,
// and its discard entries, which have no counterpart here, are named in a
// comment. Without a local address, an SA an SPD entry protects through
// is outbound and every other SA inbound.
func MarshalXFRMFor(c *Config, local netip.Addr) ([]byte, error) {
	var b strings.Builder
	b.WriteString(xfrmHeader(local))
	rs := refsOf(c.SAs)
	if err := checkLocal(rs, local); err != nil {
		return nil, err
	}
	for _, s := range c.SAs {
		a, err := XFRMStateArgs(s)
		if err != nil {
			return nil, err
		}
		writeIP(&b, a)
	}
	if err := xfrmPolicies(&b, rs, c.SPD, local); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// xfrmHeader is the start of an ip xfrm script.
func xfrmHeader(local netip.Addr) string {
	h := "# ip xfrm commands written by espgw sa convert; they hold keys.\n"
	if local.IsValid() {
		h += fmt.Sprintf("# For the host %s.\n", local)
	}
	return h + "set -e\n"
}

// textWriter is a strings.Builder or a bufio.Writer.
type textWriter interface {
	io.Writer
	io.StringWriter
	io.ByteWriter
}

// writeIP writes an ip command line.
func writeIP(b textWriter, args []string) {
	b.WriteString("ip")
	for _, a := range args {
		b.WriteByte(' ')
		b.WriteString(shell.Quote(a))
	}
	b.WriteByte('\n')
}

// xfrmPolicies writes the policy commands that follow the states of
// MarshalXFRMFor: of the SAs' selectors and of the SPD.
func xfrmPolicies(b textWriter, rs *refSet, spd []Policy, local netip.Addr) error {
	if err := checkLocal(rs, local); err != nil {
		return err
	}
	protected := map[uint32]bool{}
	for _, pol := range spd {
		if pol.Action == Protect {
			protected[pol.SPI] = true
			if pol.SA != nil {
				protected[pol.SA.SPI] = true
			}
		}
	}
	outbound := func(s *SA) bool {
		if local.IsValid() {
			return s.Src == local
		}
		return protected[s.SPI]
	}
	mirrored, err := spdOfPeer(rs, spd, local)
	if err != nil {
		return err
	}
	// The kernel's priorities are unsigned, lowest first: the SPD's keep
	// their order, shifted up when some are negative. Where the SPD is the
	// peer's, its bypass entries must come before this host's outbound
	// policies from the SAs' selectors, which then follow every entry.
	lo, hi := 0, 0
	for i, pol := range spd {
		if i == 0 || pol.Priority < lo {
			lo = pol.Priority
		}
		if i == 0 || pol.Priority > hi {
			hi = pol.Priority
		}
	}
	bias := max(0, -lo)
	if hi+bias >= math.MaxUint32 {
		return fmt.Errorf("spd: priorities %d to %d do not fit the kernel's 32 bits", lo, hi)
	}
	selPriority := 0
	if mirrored {
		selPriority = hi + bias + 1
	}
	anySel := false
	for i := range rs.refs {
		s := rs.sa(i)
		if len(s.Selectors) == 0 || protected[s.SPI] {
			continue
		}
		anySel = true
		prio := 0
		if outbound(s) {
			prio = selPriority
		}
		cmds, err := XFRMPolicyArgs(s, s.Selectors, outbound(s), prio)
		if err != nil {
			return err
		}
		for _, a := range cmds {
			writeIP(b, a)
		}
	}
	for i := range spd {
		pol := &spd[i]
		v6 := false
		for _, pfx := range []struct{ ok, six bool }{{pol.Selector.Src.IsValid(), pol.Selector.Src.Addr().Is6()}, {pol.Selector.Dst.IsValid(), pol.Selector.Dst.Addr().Is6()}} {
			v6 = v6 || pfx.ok && pfx.six
		}
		switch {
		case pol.Action == Protect:
			s := rs.policySA(pol)
			if s == nil {
				return fmt.Errorf("spd[%d]: no SA with SPI %#x", i, pol.SPI)
			}
			cmds, err := XFRMPolicyArgs(s, []Selector{pol.Selector}, outbound(s), pol.Priority+bias)
			if err != nil {
				return fmt.Errorf("spd[%d]: %w", i, err)
			}
			for _, a := range cmds {
				writeIP(b, a)
			}
		case mirrored && pol.Action == Discard:
			fmt.Fprintf(b, "# spd[%d] (discard) is %s's outbound policy: this host has none like it.\n", i, peerOf(rs, local))
		default:
			action := "allow"
			if pol.Action == Discard {
				action = "block"
			}
			type dirSel struct {
				dir string
				sel Selector
			}
			dirs := []dirSel{{"out", pol.Selector}}
			if mirrored {
				// The peer's bypass: its traffic arrives here in clear
				// (and may be forwarded), the replies leave in clear.
				dirs = []dirSel{{"in", pol.Selector}, {"fwd", pol.Selector}, {"out", pol.Selector.Reverse()}}
			}
			for _, d := range dirs {
				sel, err := XFRMSelectorArgs(d.sel, v6)
				if err != nil {
					return fmt.Errorf("spd[%d]: %w", i, err)
				}
				a := append(append([]string{"xfrm", "policy", "add"}, sel...), "dir", d.dir)
				if pol.Priority+bias != 0 {
					a = append(a, "priority", strconv.Itoa(pol.Priority+bias))
				}
				writeIP(b, append(a, "action", action))
			}
		}
	}
	if len(spd) == 0 && !anySel {
		b.WriteString("# No spd: and no selectors in the SA file: add ip xfrm policy commands for the traffic to protect.\n")
	}
	return nil
}

// checkLocal refuses a local address that is not one end of every SA.
func checkLocal(rs *refSet, local netip.Addr) error {
	if !local.IsValid() {
		return nil
	}
	used := false
	var others []string
	more := 0
	for i := range rs.refs {
		s := rs.sa(i)
		if s.Src == local || s.Dst == local {
			used = true
			continue
		}
		if len(others) == errlist.Max {
			more++
			continue
		}
		others = append(others, fmt.Sprintf("%#x (%s→%s)", s.SPI, s.Src, s.Dst))
	}
	if more > 0 {
		others = append(others, fmt.Sprintf("%d more", more))
	}
	if !used {
		var ends []string
		for i := range rs.refs {
			s := rs.sa(i)
			for _, a := range []string{s.Src.String(), s.Dst.String()} {
				if !slices.Contains(ends, a) && len(ends) < errlist.Max {
					ends = append(ends, a)
				}
			}
		}
		return fmt.Errorf("local address %s: no SA is from or to it (the SAs' ends are %s)", local, strings.Join(ends, ", "))
	}
	if len(others) > 0 {
		return fmt.Errorf("local address %s: SA %s is neither from nor to it", local, strings.Join(others, ", "))
	}
	return nil
}

// spdOfPeer reports whether the SPD is the other end's, seen from local:
// its protect entries go through SAs to local.
func spdOfPeer(rs *refSet, spd []Policy, local netip.Addr) (bool, error) {
	if !local.IsValid() {
		return false, nil
	}
	from, to := false, false
	for i := range spd {
		pol := &spd[i]
		if pol.Action != Protect {
			continue
		}
		s := rs.policySA(pol)
		if s == nil {
			return false, fmt.Errorf("spd[%d]: no SA with SPI %#x", i, pol.SPI)
		}
		from = from || s.Src == local
		to = to || s.Dst == local
	}
	if from && to {
		return false, fmt.Errorf("local address %s: the spd protects through SAs both from and to it, so it is no one host's outbound SPD", local)
	}
	return to, nil
}

// peerOf names the other end of the SAs from local.
func peerOf(rs *refSet, local netip.Addr) string {
	for i := range rs.refs {
		s := rs.sa(i)
		if s.Dst == local {
			return s.Src.String()
		}
	}
	return "the other end"
}

var setkeyCipherOut = map[Cipher]string{
	CipherNull: "null", CipherAESCBC: "aes-cbc", Cipher3DES: "3des-cbc", CipherAESCTR: "aes-ctr", CipherAESGCM16: "aes-gcm-16",
	CipherChaCha20Poly1305: "chacha20-poly1305", CipherAESGMAC: "aes-gmac",
	CipherAESCCM8: "aes-ccm-8", CipherAESCCM12: "aes-ccm-12", CipherAESCCM16: "aes-ccm-16",
}

var setkeyAuthOut = map[Auth]string{
	AuthHMACSHA1_96: "hmac-sha1", AuthHMACSHA256_128: "hmac-sha256", AuthHMACSHA384_192: "hmac-sha384",
	AuthHMACSHA512_256: "hmac-sha512", AuthHMACMD5_96: "hmac-md5",
}

// MarshalSetkey writes c as setkey(8) statements that ParseSetkey reads
// back to the same SAs and SPD: add per SA (-u with the SPI as reqid),
// spdadd -P in per selector, spdadd -P out per SPD entry. setkey cannot
// say ESN, an initial sequence number, TFC padding, packet lifetimes, the
// outer-header options (dscp, decap-dscp, df, ttl), if-id, output-mark or
// a replay window that is not a multiple of 8: those are errors.
func MarshalSetkey(c *Config) ([]byte, error) {
	var b strings.Builder
	b.WriteString(setkeyHeader)
	for _, s := range c.SAs {
		if err := setkeyAdd(&b, s); err != nil {
			return nil, err
		}
	}
	if err := setkeyPolicies(&b, refsOf(c.SAs), c.SPD); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

const setkeyHeader = "# setkey(8) statements written by espgw sa convert; they hold keys.\nflush;\nspdflush;\n"

// setkeyAdd writes the add statement of s.
func setkeyAdd(b textWriter, s *SA) error {
	key := func(k Key) string { return "0x" + hex.EncodeToString(k) }
	if err := s.Validate(); err != nil {
		return fmt.Errorf("SA %#x as setkey: %w", s.SPI, err)
	}
	var missing []string
	if s.ESN {
		missing = append(missing, "esn")
	}
	if s.InitialSeq != 0 {
		missing = append(missing, "initial-seq")
	}
	if s.TFCPad != 0 {
		missing = append(missing, "tfc-pad")
	}
	if s.Soft.Packets != 0 || s.Hard.Packets != 0 {
		missing = append(missing, "packet lifetimes")
	}
	if s.DSCP != (DSCP{}) {
		missing = append(missing, "dscp")
	}
	if s.DecapDSCP != DecapKeep {
		missing = append(missing, "decap-dscp")
	}
	if s.DF != DFCopy {
		missing = append(missing, "df")
	}
	if s.TTL != 0 {
		missing = append(missing, "ttl")
	}
	if s.IfID != 0 {
		missing = append(missing, "if-id")
	}
	if !s.OutputMark.IsZero() {
		missing = append(missing, "output-mark")
	}
	if _, ok := setkeyCipherOut[s.Suite.Cipher]; !ok {
		missing = append(missing, fmt.Sprintf("enc %s (setkey(8) names AES-GCM with a 16-byte ICV only)", s.Suite.Cipher))
	}
	if s.ReplayWindow%8 != 0 {
		missing = append(missing, fmt.Sprintf("replay-window %d (setkey's -r counts bytes: a multiple of 8 packets)", s.ReplayWindow))
	}
	if len(missing) > 0 {
		return fmt.Errorf("SA %#x as setkey: setkey(8) cannot say %s", s.SPI, strings.Join(missing, ", "))
	}
	src, dst, proto := s.Src.String(), s.Dst.String(), "esp"
	if s.Encap == EncapUDP {
		src, dst, proto = fmt.Sprintf("%s[%d]", s.Src, s.SrcPort), fmt.Sprintf("%s[%d]", s.Dst, s.DstPort), "esp-udp"
	}
	fmt.Fprintf(b, "add %s %s %s %#x -m %s -u %d", src, dst, proto, s.SPI, s.Mode, s.SPI)
	if s.ReplayWindow > 0 {
		fmt.Fprintf(b, " -r %d", s.ReplayWindow/8)
	}
	for _, l := range []struct {
		opt string
		v   uint64
	}{{"-lh", uint64(s.Hard.Time.Seconds())}, {"-ls", uint64(s.Soft.Time.Seconds())}, {"-bh", s.Hard.Bytes}, {"-bs", s.Soft.Bytes}} {
		if l.v != 0 {
			fmt.Fprintf(b, " %s %d", l.opt, l.v)
		}
	}
	fmt.Fprintf(b, "\n\t-E %s", setkeyCipherOut[s.Suite.Cipher])
	if len(s.EncKey) > 0 {
		b.WriteString(" " + key(s.EncKey))
	}
	if !s.Suite.Cipher.IsAEAD() {
		fmt.Fprintf(b, "\n\t-A %s %s", setkeyAuthOut[s.Suite.Auth], key(s.AuthKey))
	}
	b.WriteString(" ;\n")
	return nil
}

// setkeyPolicies writes the spdadd statements that follow the SAs' adds:
// of their selectors, and of the SPD.
func setkeyPolicies(b textWriter, rs *refSet, spd []Policy) error {
	rule := func(s *SA, level string) string {
		if s.Mode == Tunnel {
			return fmt.Sprintf("esp/tunnel/%s-%s/%s", s.Src, s.Dst, level)
		}
		return "esp/transport//" + level
	}
	for i := range rs.refs {
		s := rs.sa(i)
		for _, sel := range s.Selectors {
			r, err := setkeyRange(sel, s.Src.Is6())
			if err != nil {
				return fmt.Errorf("SA %#x selector as setkey: %w", s.SPI, err)
			}
			fmt.Fprintf(b, "spdadd %s -P in ipsec %s ;\n", r, rule(s, fmt.Sprintf("unique:%d", s.SPI)))
		}
	}
	for i := range spd {
		pol := &spd[i]
		r, err := setkeyRange(pol.Selector, false)
		if err != nil {
			return fmt.Errorf("spd[%d] as setkey: %w", i, err)
		}
		prio := ""
		if pol.Priority != 0 {
			prio = fmt.Sprintf(" prio %d", -pol.Priority)
		}
		switch pol.Action {
		case Protect:
			s := rs.policySA(pol)
			if s == nil {
				return fmt.Errorf("spd[%d]: no SA with SPI %#x", i, pol.SPI)
			}
			fmt.Fprintf(b, "spdadd %s -P out%s ipsec %s ;\n", r, prio, rule(s, fmt.Sprintf("unique:%d", s.SPI)))
		case Bypass:
			fmt.Fprintf(b, "spdadd %s -P out%s none ;\n", r, prio)
		default:
			fmt.Fprintf(b, "spdadd %s -P out%s discard ;\n", r, prio)
		}
	}
	return nil
}

// setkeyRange writes a selector as spdadd's src_range dst_range upperspec.
func setkeyRange(sel Selector, v6 bool) (string, error) {
	if sel.Src.IsValid() && sel.Src.Addr().Is6() || sel.Dst.IsValid() && sel.Dst.Addr().Is6() {
		v6 = true
	}
	anyAddr := "0.0.0.0/0"
	if v6 {
		anyAddr = "::/0"
	}
	side := func(p netip.Prefix, r PortRange) (string, error) {
		s := anyAddr
		if p.IsValid() {
			s = p.Masked().String()
		}
		if r == (PortRange{}) {
			return s, nil
		}
		if r.Lo != r.Hi {
			return "", fmt.Errorf("port range %d-%d: setkey takes one port", r.Lo, r.Hi)
		}
		return fmt.Sprintf("%s[%d]", s, r.Lo), nil
	}
	src, err := side(sel.Src, sel.SrcPorts)
	if err != nil {
		return "", err
	}
	dst, err := side(sel.Dst, sel.DstPorts)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %s %s", src, dst, ProtoName(sel.Proto)), nil
}

// MaxConvertSize bounds an input of ConvertFor, and an input that
// ConvertStream does not stream: such a converter holds every SA of its
// input and its output at once, and 4 MiB of setkey or esp_sa lines (some
// 25,000 SAs) fit in 64 MB.
const MaxConvertSize = 4 << 20

// MaxConvertYAMLNodes bounds a YAML input of ConvertFor by its nodes (about
// 4,000 SAs): a YAML document is held as a tree of nodes, each costing
// hundreds of bytes, however few bytes it was written in.
const MaxConvertYAMLNodes = 50_000

// CheckConvertSize refuses an input ConvertFor would need more memory for than
// MaxConvertSize and MaxConvertYAMLNodes allow, saying how big it is.
func CheckConvertSize(name string, data []byte, from Format) error {
	if len(data) > MaxConvertSize {
		return fmt.Errorf("%s is %d bytes, more than the %d bytes sa convert reads: split it into smaller files", name, len(data), MaxConvertSize)
	}
	if cmp.Or(from, DetectFormat(data)) != FormatYAML {
		return nil
	}
	if n := yamlNodesAtLeast(data, MaxConvertYAMLNodes+1); n > MaxConvertYAMLNodes {
		return fmt.Errorf("%s holds more than %d YAML nodes (keys, values, lists, mappings), more than sa convert reads: split it into smaller files", name, MaxConvertYAMLNodes)
	}
	return nil
}

// MaxYAMLNodes bounds every YAML file yaml.v3 decodes whole that may hold
// SAs (an SA file beyond what the streaming reader reads, a gateway
// configuration, a scenario) by its nodes: some 100,000 SAs, while a file
// of nothing but empty entries, cheap to write and costly to hold, is
// refused before it is decoded.
const MaxYAMLNodes = 2_000_000

// CheckYAMLNodes refuses YAML data holding more than limit nodes, before
// any of it is decoded.
func CheckYAMLNodes(name string, data []byte, limit int) error {
	if yamlNodesAtLeast(data, limit+1) > limit {
		return fmt.Errorf("%s holds more than %d YAML nodes (keys, values, lists, mappings), more than such a file may: split it into smaller files", name, limit)
	}
	return nil
}

// yamlNodesAtLeast counts, up to limit, the marks each of which starts
// at least one YAML node: a key's ": ", a list item's "- ", a flow
// collection's { [ and its separating commas.
func yamlNodesAtLeast(data []byte, limit int) int {
	n := 0
	for i := 0; i < len(data) && n < limit; i++ {
		switch data[i] {
		case '{', '[', ',':
			n++
		case ':', '-':
			if i+1 == len(data) || data[i+1] == ' ' || data[i+1] == '\n' || data[i+1] == '\r' {
				n++
			}
		}
	}
	return n
}

// ConvertFor reads an SA file's content (its format detected unless from
// is set) and writes it in format to, for the host whose address is local
// (see MarshalXFRMFor; the zero address for none). Only ip-xfrm output
// depends on local, and a local address with any other output is an error.
func ConvertFor(name string, data []byte, from, to Format, local netip.Addr) ([]byte, error) {
	if from == "" {
		from = DetectFormat(data)
	}
	if err := CheckConvertSize(name, data, from); err != nil {
		return nil, err
	}
	if !slices.Contains(WriteFormats, to) {
		return nil, fmt.Errorf("cannot write SA format %s (want %s)", secret.Word(string(to), "yaml", "setkey", "ip-xfrm", "esp-sa"), formatList(WriteFormats))
	}
	if local.IsValid() && to != FormatXFRM {
		return nil, fmt.Errorf("a local address is for ip-xfrm output only: %s output is the same for both ends", to)
	}
	c, err := ParseFormat(name, data, from)
	if err != nil {
		return nil, err
	}
	if len(c.SAs) == 0 {
		return nil, errors.New(name + ": no SAs to convert")
	}
	if to == FormatXFRM {
		return MarshalXFRMFor(c, local)
	}
	return Encode(c, to)
}
